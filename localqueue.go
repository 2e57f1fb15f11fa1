package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/turns"
)

// Goroutines of one Client that Acquire the same key take turns
// (internal/turns): one at a time contends on the nodes, and a release
// hands the lock to the next in line (handOff). This file is what the
// turns take of the Client and its locks.

// want is what a goroutine waiting for its turn asked for: the lock it
// waits for, as a lock handed to it is to be.
type want struct {
	kind kind
	ac   acquireConfig
}

// waiter is a goroutine waiting for its turn.
type waiter = turns.Waiter[*Lock, want]

// newQueues is a Client's local queues.
func newQueues(c *Client) *turns.Queues[*Lock, want] {
	clock := c.cfg.clock
	return turns.New(turns.Hooks[*Lock, want]{
		Now:      clock.Now,
		NewTimer: func(d time.Duration) turns.Timer { return newTimer(clock, d) },
		Attach: func(l *Lock, t turns.Turn[*Lock, want]) bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			ended := l.released || l.lost
			if !ended {
				l.next = turn{t}
			}
			return ended
		},
		Watch:    func(l *Lock) { l.Done() },
		GiveBack: func(ctx context.Context, l *Lock) { _ = l.Release(context.WithoutCancel(ctx)) },
	})
}

// turn is a lock's place in its Client's local queue for the key: the
// lock's successor (see Lock.next), which may hand it over (handoff.go).
type turn struct{ turns.Turn[*Lock, want] }

// ended passes the turn on.
func (t turn) ended(l *Lock) { t.Ended(l) }

// takeTurn runs acquire, an Acquire's attempts for a lock of kind k (which
// it counts in attempts), in the turn of its local queue (named by
// k.turns()), and makes the lock it wins the holder of the turn. A lock
// handed over by the previous holder is returned without running acquire.
func (c *Client) takeTurn(ctx context.Context, queue string, k kind, ac acquireConfig, attempts *int, acquire func() (*Lock, error)) (*Lock, error) {
	qs := c.queues
	q, g, err := qs.Wait(ctx, queue, want{k, ac})
	if err != nil {
		return nil, &quorumError{sentinel: ErrNotAcquired, detail: fmt.Sprintf("%s: gave up waiting behind this client's other acquires", k.describe()), cause: err, heldOn: -1}
	}
	if g.Lock != nil {
		return g.Lock, nil
	}
	if g.Yield {
		// This client kept the key through a run of hand-offs and has just
		// released it: other processes woken by the release try first.
		qs.YieldPause(ctx, q)
	}
	lock, err := acquire()
	if g.Yield {
		qs.Yielded(q, *attempts)
	}
	if err != nil {
		qs.Pass(q)
		return nil, err
	}
	qs.Hold(q, lock)
	return lock, nil
}

// WithHandOff sets how many times in a row a released lock may be handed
// straight to the next goroutine of this Client waiting in Acquire for the
// same key: one round trip in which every node that holds the releasing
// token swaps it for the next holder's, who wins the lock on a quorum with
// its own token, fencing token and validity, like any acquire; no other
// process can take the key in between. While no other process waits for
// the key, hand-offs go on without limit; once the nodes show one waiting,
// the lock is released after limit more, and this Client waits before it
// contends again (1 ms, doubling while the other process still has not
// got the key, to 512 ms), so that the other's waiter takes it first.
// A listener that never takes the key (a frozen process, a redis-cli
// SUBSCRIBE to its release channel) then cuts a run only once a second,
// for 10 s, with a pause of 32 ms (in which a waiter that was only slow
// takes the key, and is heeded again). The limit
// must be at least 0; 0 turns hand-offs off. Default: 12.
func WithHandOff(limit int) Option {
	return clientOption(func(c *config) error {
		if limit < 0 {
			return engine.Invalid("hand-off limit %d is negative", limit)
		}
		c.handOffs = limit
		return nil
	})
}
