package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

func TestWithReplicaAck_badValues(t *testing.T) {
	libraryTimeouts(t) // a 1 s ttl derives a 100 ms node timeout
	c := newCluster(t, 3)
	for _, tc := range []struct {
		replicas int
		timeout  time.Duration
	}{{0, time.Millisecond}, {-1, time.Millisecond}, {1, 0}, {1, -time.Second}} {
		if _, err := redlock.New(c.connect(t), redlock.WithReplicaAck(tc.replicas, tc.timeout)); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("WithReplicaAck(%d, %v): %v, want ErrInvalidArgument", tc.replicas, tc.timeout, err)
		}
	}
	// A wait as long as the node timeout could never be answered in time:
	// refused before any node is contacted.
	rc := c.client(t, redlock.WithReplicaAck(1, 100*time.Millisecond), redlock.WithNodeTimeout(100*time.Millisecond))
	before := c.commands() // a client that dials at once has greeted the nodes
	if _, err := rc.TryAcquire(context.Background(), "k", time.Minute); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("TryAcquire with the ack timeout at the node timeout: %v, want ErrInvalidArgument", err)
	}
	if after := c.commands(); after != before {
		t.Fatalf("%d commands reached the nodes for a refused call", after-before)
	}
	rc = c.client(t, redlock.WithReplicaAck(1, 100*time.Millisecond))
	before = c.commands()
	if _, err := rc.TryAcquire(context.Background(), "k", time.Second); !errors.Is(err, redlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "node timeout") {
		t.Fatalf("TryAcquire with a ttl whose node timeout (100ms) is not above the ack timeout: %v, want ErrInvalidArgument naming the node timeout", err)
	}
	if after := c.commands(); after != before {
		t.Fatalf("%d commands reached the nodes for refused calls", after-before)
	}
}

// replicaAcks answers WAIT with how many replicas confirmed (as if every
// node had that many in step), and records each pipeline's and each lone
// command's names.
type replicaAcks struct {
	mu      sync.Mutex
	confirm int64
	trips   [][]string
}

func (h *replicaAcks) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *replicaAcks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.PipelineHook(func(ctx context.Context, cmds []redis.Cmder) error { return next(ctx, cmds[0]) })(ctx, []redis.Cmder{cmd})
	}
}

func (h *replicaAcks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return h.PipelineHook(func(ctx context.Context, cmds []redis.Cmder) error { return next(ctx, cmds) })
}

func (h *replicaAcks) PipelineHook(next func(context.Context, []redis.Cmder) error) func(context.Context, []redis.Cmder) error {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		for _, cmd := range cmds {
			names = append(names, cmd.Name())
		}
		h.mu.Lock()
		h.trips = append(h.trips, names)
		confirm := h.confirm
		h.mu.Unlock()
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if cmd.Name() == "wait" {
				cmd.(*redis.Cmd).SetVal(confirm)
				cmd.SetErr(nil)
			}
		}
		return err
	}
}

// TestWithReplicaAck: every write of a hold is followed by WAIT in the same
// pipeline (on the write's connection); a node whose replicas confirm too
// few counts as failed, and its write is cleaned up.
func TestWithReplicaAck(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	for _, batching := range []bool{true, false} {
		t.Run(map[bool]string{true: "batched", false: "unbatched"}[batching], func(t *testing.T) {
			c := newCluster(t, 3)
			h := &replicaAcks{confirm: 1}
			for _, rdb := range c.clients {
				addHook(t, rdb, h)
			}
			rc := c.client(t, redlock.WithReplicaAck(1, 20*time.Millisecond), redlock.WithBatching(batching))
			ctx := context.Background()

			lock, err := rc.TryAcquire(ctx, "k", time.Minute)
			if err != nil {
				t.Fatalf("TryAcquire with every node's replica confirming: %v", err)
			}
			if err := lock.Extend(ctx, time.Minute); err != nil {
				t.Fatalf("Extend: %v", err)
			}
			mustRelease(t, lock)
			h.mu.Lock()
			for _, trip := range h.trips {
				for i, name := range trip {
					write := func(name string) bool { return name == "evalsha" || name == "eval" || name == "set" }
					if write(name) && i+1 < len(trip) && trip[i+1] == "wait" {
						continue
					}
					if name == "wait" && (i == 0 || !write(trip[i-1])) {
						t.Errorf("a WAIT without a write before it in its pipeline: %v", trip)
					}
				}
			}
			waits := 0
			for _, trip := range h.trips {
				for _, name := range trip {
					if name == "wait" {
						waits++
					}
				}
			}
			h.confirm = 0 // the replicas fall behind
			h.mu.Unlock()
			if waits < 6 {
				t.Errorf("%d WAITs for an acquire and an extend on 3 nodes, want at least 6 (none for the release)", waits)
			}

			_, err = rc.TryAcquire(ctx, "k2", time.Minute)
			if !errors.Is(err, redlock.ErrNotAcquired) || !strings.Contains(err.Error(), "0 of 1 replicas confirmed") {
				t.Fatalf("TryAcquire with no replica confirming: %v, want ErrNotAcquired naming the replicas", err)
			}
			waitIdle(t, rc)
			waitFor(t, "the unconfirmed writes to be cleaned up", func() bool { return len(c.holdersAny("k2")) == 0 })
		})
	}
}

// TestWithReplicaAck_embeddedNodeHasNoReplicas: a node without replicas
// (here miniredis, whose WAIT answers 0) never confirms: nothing is
// acquired and nothing is left behind.
func TestWithReplicaAck_embeddedNodeHasNoReplicas(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t, redlock.WithReplicaAck(1, 10*time.Millisecond))
	_, err := rc.TryAcquire(context.Background(), "k", time.Minute)
	var ne *redlock.NodeError
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.As(err, &ne) {
		t.Fatalf("TryAcquire: %v, want ErrNotAcquired with each node's error", err)
	}
	waitIdle(t, rc)
	waitFor(t, "the unconfirmed writes to be cleaned up", func() bool { return len(c.holdersAny("k")) == 0 })
}

// TestWithReplicaAck_handOffWhoseReplicasLag: a lock held on every node is
// released with a local waiter while the nodes' replicas do not confirm.
// The hand-off's swaps ran but count for nothing; the lock held until
// then, and Release says so (it used to report the lock lost: the swap's
// answer was dropped with its WAIT, and the release that followed found
// the token gone).
func TestWithReplicaAck_handOffWhoseReplicasLag(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	h := &replicaAcks{confirm: 1}
	for _, rdb := range c.clients {
		addHook(t, rdb, h)
	}
	rc := c.client(t, redlock.WithReplicaAck(1, 20*time.Millisecond))
	ctx := context.Background()
	first, err := rc.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	redlock.WaitSettled(first)
	waiting := queuedAcquire(t, rc, ctx, "k", time.Minute, redlock.WithRetry(redlock.RandomDelay(5*time.Millisecond, 10*time.Millisecond)))
	h.mu.Lock()
	h.confirm = 0
	h.mu.Unlock()
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release of a lock held on every node, handed over while the replicas lag: %v, want nil", err)
	}
	h.mu.Lock()
	h.confirm = 1
	h.mu.Unlock()
	mustRelease(t, mustGet(t, waiting))
}

// TestWithReplicaAck_onlyPlainClients: a Ring (or a ClusterClient) sends a
// keyless WAIT to a server of its choosing, not after the write: refused.
func TestWithReplicaAck_onlyPlainClients(t *testing.T) {
	c := newCluster(t, 3)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": c.addrs[0], "b": c.addrs[1]}})
	t.Cleanup(func() { _ = ring.Close() })
	nodes := c.connect(t)
	nodes[2] = ring
	if _, err := redlock.New(nodes, redlock.WithReplicaAck(1, 10*time.Millisecond)); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("New with a Ring node and WithReplicaAck: %v, want ErrInvalidArgument", err)
	}
	if _, err := redlock.New(nodes); err != nil {
		t.Fatalf("New with a Ring node: %v", err)
	}
}
