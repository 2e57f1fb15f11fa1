package redlock

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/wait"
)

// Goroutines of one Client that Acquire the same key queue here, first come
// first served, so that only one of them at a time contends on the nodes
// (the others would only split the votes); a release hands the lock to the
// next in line (handOff), bounded while other processes wait (WithHandOff).
// The queue only decides which local goroutine may try or receive the key:
// every lock is still won on a quorum with its own token and validity. A
// holder that never releases holds its waiters up only until its validity
// ends, which the waiters make sure is watched. See docs/algorithm.md,
// "Local turns" and "Hand-off".

// grant is what a waiter receives when its turn comes: a lock handed over,
// or nil, and then the right to contend on the nodes.
type grant struct {
	lock  *Lock
	yield bool // a run of hand-offs was cut: let other processes try first
}

// waiter is a goroutine queued for a key, with what its Acquire asked for.
type waiter struct {
	kind  kind // the lock it waits for, as a lock handed to it is to be
	ac    acquireConfig
	grant chan grant // buffered: the turn is given without blocking
}

// localQueue is the queue of one key.
type localQueue struct {
	key       string
	mu        sync.Mutex
	busy      bool       // a goroutine has the turn
	waiters   []*waiter  // first come first served
	holder    *Lock      // the lock won or handed in the current turn, if any
	chain     int        // hand-offs while others waited, since the key was last won by contending
	contended bool       // another process was seen waiting in this run of hand-offs
	yield     bool       // the next turn comes after a run of hand-offs was cut
	yielding  wait.Yield // how the turn after a cut run waits, and whether the listeners count
}

type localQueues struct {
	clock Clock
	mu    sync.Mutex
	byKey map[string]*localQueue
}

// wait blocks until it is the caller's turn on key, or ctx ends. It returns
// the key's queue and, when the previous holder handed it over, the lock.
func (qs *localQueues) wait(ctx context.Context, key string, k kind, ac acquireConfig) (*localQueue, grant, error) {
	qs.mu.Lock()
	if qs.byKey == nil {
		qs.byKey = map[string]*localQueue{}
	}
	q := qs.byKey[key]
	if q == nil {
		q = &localQueue{key: key}
		qs.byKey[key] = q
	}
	q.mu.Lock()
	qs.mu.Unlock()
	if !q.busy {
		q.busy = true
		q.mu.Unlock()
		return q, grant{}, nil
	}
	w := &waiter{kind: k, ac: ac, grant: make(chan grant, 1)}
	q.waiters = append(q.waiters, w)
	holder := q.holder
	q.mu.Unlock()
	if holder != nil {
		holder.Done() // watch the holder's validity, so its end frees the turn
	}

	select {
	case g := <-w.grant:
		return q, g, nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	if i := slices.Index(q.waiters, w); i >= 0 {
		q.waiters = slices.Delete(q.waiters, i, i+1)
		q.mu.Unlock()
		return nil, grant{}, ctx.Err()
	}
	q.mu.Unlock()
	// The turn was given at the moment ctx ended: give it back.
	g := <-w.grant
	if g.lock != nil {
		_ = g.lock.Release(context.WithoutCancel(ctx))
	} else {
		qs.pass(q)
	}
	return nil, grant{}, ctx.Err()
}

// hold records l as the lock of q's current turn; l's end passes the turn
// on, unless l was handed over first.
func (qs *localQueues) hold(q *localQueue, l *Lock) {
	q.mu.Lock()
	q.holder = l
	waiting := len(q.waiters) > 0
	q.mu.Unlock()

	l.mu.Lock()
	ended := l.released || l.lost
	if !ended {
		l.next = turn{qs: qs, q: q}
	}
	l.mu.Unlock()
	if ended {
		qs.end(q, l)
		return
	}
	if waiting {
		l.Done()
	}
}

// end passes the turn on when l, the holder, ended without a hand-off.
func (qs *localQueues) end(q *localQueue, l *Lock) {
	q.mu.Lock()
	if q.holder != l {
		q.mu.Unlock()
		return
	}
	q.holder = nil
	q.mu.Unlock()
	qs.pass(q)
}

// pass gives the turn, without a lock, to the first waiter, or frees it.
func (qs *localQueues) pass(q *localQueue) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.chain, q.contended = 0, false
	if len(q.waiters) > 0 {
		w := q.waiters[0]
		q.waiters = q.waiters[1:]
		w.grant <- grant{yield: q.yield}
		q.yield = false
		return
	}
	q.busy, q.yield = false, false
	if qs.byKey[q.key] == q {
		delete(qs.byKey, q.key)
	}
}

// turn is a lock's place in its Client's local queue for the key: the
// lock's successor (see Lock.next).
type turn struct {
	qs *localQueues
	q  *localQueue
}

// ended passes the turn on.
func (t turn) ended(l *Lock) { t.qs.end(t.q, l) }

// nextForHandOff takes the first waiter of q, when l, its holder, may be
// handed to it: the run of hand-offs is not at its limit. The queue then no
// longer has a holder until handOver or giveTurn.
func (qs *localQueues) nextForHandOff(q *localQueue, l *Lock, limit int) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.holder != l || len(q.waiters) == 0 {
		return nil
	}
	if q.chain >= limit && (limit == 0 || q.yielding.Cut(qs.clock.Now())) {
		q.yield = limit > 0
		return nil
	}
	w := q.waiters[0]
	q.waiters = q.waiters[1:]
	q.holder = nil
	return w
}

// handOver gives w the lock next, handed to it, as the queue's holder.
// Only hand-offs since another process was seen waiting (contended) count
// towards the limit; once seen, the contention is assumed until the run
// ends, as the nodes that answer may not include the one a waiter hears.
func (qs *localQueues) handOver(q *localQueue, w *waiter, next *Lock, contended bool) {
	q.mu.Lock()
	q.contended = q.contended || contended
	if q.contended {
		q.chain++
	}
	q.mu.Unlock()
	qs.hold(q, next)
	w.grant <- grant{lock: next}
}

// giveTurn gives w the turn without a lock, after a hand-off failed.
func (qs *localQueues) giveTurn(q *localQueue, w *waiter) {
	q.mu.Lock()
	q.chain, q.contended = 0, false
	q.mu.Unlock()
	w.grant <- grant{}
}

// inTurn runs acquire, an Acquire's attempts for a lock of kind k (which
// it counts in attempts), in the turn of its local queue (named by
// k.turns()), and makes the lock it wins the holder of the turn. A lock
// handed over by the previous holder is returned without running acquire.
func (qs *localQueues) inTurn(ctx context.Context, queue string, k kind, ac acquireConfig, attempts *int, acquire func() (*Lock, error)) (*Lock, error) {
	q, g, err := qs.wait(ctx, queue, k, ac)
	if err != nil {
		return nil, &quorumError{sentinel: ErrNotAcquired, detail: fmt.Sprintf("%s: gave up waiting behind this client's other acquires", k.describe()), cause: err, heldOn: -1}
	}
	if g.lock != nil {
		return g.lock, nil
	}
	if g.yield {
		// This client kept the key through a run of hand-offs and has just
		// released it: other processes woken by the release try first.
		q.mu.Lock()
		pause := q.yielding.Pause(qs.clock.Now())
		q.mu.Unlock()
		t := newTimer(qs.clock, pause+mrand.N(pause/4))
		select {
		case <-t.Chan():
		case <-ctx.Done():
		}
		t.Stop()
	}
	lock, err := acquire()
	if g.yield {
		qs.yielded(q, *attempts)
	}
	if err != nil {
		qs.pass(q)
		return nil, err
	}
	qs.hold(q, lock)
	return lock, nil
}

// yielded adapts the wait after a cut run of hand-offs to the Acquire that
// followed it, of attempts (see wait.Yield).
func (qs *localQueues) yielded(q *localQueue, attempts int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.yielding = q.yielding.After(attempts, qs.clock.Now())
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
