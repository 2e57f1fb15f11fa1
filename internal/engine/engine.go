// Package engine is the Redlock quorum engine under a Client: the nodes'
// state (failing marks, round trips, identified servers, calls in
// flight), the fan-out of an operation's calls to every node with the
// tally of their answers, and the arithmetic and stop conditions that
// judge a tally. It knows nothing of the API's kinds, locks or
// Observers: what it tells goes through its Config's hooks.
package engine

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/realclock"
	"github.com/quorumlock/redlock/internal/rtt"
)

// Config is what the engine takes of a Client's options.
type Config struct {
	NodeTimeout time.Duration // a fixed node timeout; 0: derived from the ttl and the round trips
	DriftFactor float64
	ReplicaAck  nodeio.Ack
	Logger      *slog.Logger
	Timed       bool // each node's reply is timed in the tally (Tally.Took)
	// NodeError returns node i's failure err as the API's error.
	NodeError func(i int, err error) error
	// Misconfigured tells that node i is misconfigured (err, a NodeError's).
	Misconfigured func(ctx context.Context, i int, err error)
}

// Engine is the quorum engine over a fixed set of nodes; safe for
// concurrent use.
type Engine struct {
	nodes  []Node
	quorum int
	cfg    Config
	// failing[i] holds node i's error while its last call went unanswered
	// (timed out; see NoteReply). A failed attempt, and a Release past its
	// quorum, do not wait for a failing node.
	failing []atomic.Pointer[error]
	// misconfigured: by node, whether its last failure was one that
	// retrying cannot cure (warned once until it answers properly)
	misconfigured []atomic.Bool
	// told: by node, a failure of it has been told (see Told) since its
	// reply last counted
	told []atomic.Bool
	// rtts: by node, its round trips, for the node timeout (nodeTimeout);
	// allKnown once every node has told something (see anyUnknown)
	rtts     []rtt.Estimate
	allKnown atomic.Bool
	idents   identities // see identity.go
	Calls    Inflight   // node calls sent and not yet returned
}

// New returns the engine over nodes, each with its I/O set.
func New(nodes []Node, cfg Config) *Engine {
	e := &Engine{
		nodes:         nodes,
		quorum:        QuorumOf(len(nodes)),
		cfg:           cfg,
		failing:       make([]atomic.Pointer[error], len(nodes)),
		misconfigured: make([]atomic.Bool, len(nodes)),
		told:          make([]atomic.Bool, len(nodes)),
		rtts:          make([]rtt.Estimate, len(nodes)),
	}
	e.idents.init(len(nodes))
	return e
}

// Failing reports whether node i's last call went unanswered.
func (c *Engine) Failing(i int) bool { return c.failing[i].Load() != nil }

// Told marks node i's failure told and reports whether it was already,
// since the node's reply last counted: a failure is news once.
func (c *Engine) Told(i int) bool { return i < len(c.told) && c.told[i].Swap(true) }

// realTime is the nodes' time: deadlines, round trips, identification.
var realTime realclock.Clock
