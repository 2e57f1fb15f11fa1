package redlock

import (
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
)

// WithReplicaAck makes a node count as holding a lock only once at least
// replicas of its replicas confirm the write, waiting up to timeout: each
// write of a hold (acquire, extend, renewal, hand-off, fencing raise) is
// followed on its connection by Redis's WAIT replicas timeout, and a node
// whose replicas confirm fewer counts as failed for that operation (its
// write is cleaned up like any failed node's). Use it when a node is a
// master whose replicas may be promoted in its place (Sentinel, a managed
// Redis): a lock is then held on the replicas of a quorum, and a failover
// loses it less often. It does not make a failover safe: WAIT does not
// make a write durable, a promoted replica can still miss a write that
// WAIT saw confirmed elsewhere, and a replica without persistence loses
// what it had when it restarts (docs/safety.md).
//
// While a node's replicas lag, every batch of writes to it waits up to
// timeout, and the calls queued behind it too: keep timeout a small part
// of the node timeout. A release or a delete that waited past its node
// timeout is still sent.
//
// replicas must be at least 1 and timeout positive and shorter than each
// operation's base node timeout (WithNodeTimeout, or else a tenth of the
// ttl within 50 ms and 1 s), which an Acquire or Extend otherwise refuses
// with an error matching ErrInvalidArgument. Every node must be a *redis.Client: New refuses the
// others (a ClusterClient or a Ring sends a keyless WAIT to a server of
// its choosing, not after the write). Default: off; a node counts once it
// answers.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return clientOption(func(c *config) error {
		if replicas < 1 {
			return engine.Invalid("replica ack of %d replicas: must be at least 1", replicas)
		}
		if timeout <= 0 {
			return engine.Invalid("replica ack timeout %v must be positive", timeout)
		}
		c.replicaAck = nodeio.Ack{Replicas: replicas, Timeout: timeout}
		return nil
	})
}
