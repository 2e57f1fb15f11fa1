// Package turns is the local queue of one Client's goroutines that Acquire
// the same key: first come first served, only one of them at a time
// contends on the nodes (the others would only split the votes), and a
// release may hand the lock to the next in line, bounded while other
// processes wait (wait.Yield). The queue only decides which local goroutine
// may try or receive the key: every lock is still won on a quorum with its
// own token and validity. A holder that never releases holds its waiters
// up only until its validity ends, which the waiters have watched. It
// knows no lock: a Lock of its Client is an L, and what a waiter asked for
// a W. See docs/algorithm.md, "Local turns" and "Hand-off".
package turns

import (
	"context"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/quorumlock/redlock/internal/wait"
)

// Timer is one stoppable wait, as a time.Timer.
type Timer interface {
	Chan() <-chan time.Time
	Stop() bool
}

// Hooks are what the queues ask of their Client.
type Hooks[L comparable, W any] struct {
	Now      func() time.Time
	NewTimer func(time.Duration) Timer
	// Attach makes t the successor of l, whose end passes the turn on
	// (Turn.Ended), unless l has ended already (it then reports true).
	Attach func(l L, t Turn[L, W]) (ended bool)
	// Watch has l's validity watched, so that its end frees the turn.
	Watch func(l L)
	// GiveBack releases l, handed to a waiter at the moment its ctx ended.
	GiveBack func(ctx context.Context, l L)
}

// Grant is what a waiter receives when its turn comes: a lock handed
// over, or the zero L and the right to contend on the nodes.
type Grant[L comparable] struct {
	Lock  L
	Yield bool // a run of hand-offs was cut: let other processes try first
}

// Waiter is a goroutine queued for a key, with what it asked for.
type Waiter[L comparable, W any] struct {
	Want  W
	grant chan Grant[L] // buffered: the turn is given without blocking
}

// Queue is the queue of one key.
type Queue[L comparable, W any] struct {
	key       string
	mu        sync.Mutex
	busy      bool            // a goroutine has the turn
	waiters   []*Waiter[L, W] // first come first served
	holder    L               // the lock won or handed in the current turn, if any
	chain     int             // hand-offs while others waited, since the key was last won by contending
	contended bool            // another process was seen waiting in this run of hand-offs
	yield     bool            // the next turn comes after a run of hand-offs was cut
	yielding  wait.Yield      // how the turn after a cut run waits, and whether the listeners count
}

// Queues are a Client's queues, by key.
type Queues[L comparable, W any] struct {
	hooks Hooks[L, W]
	mu    sync.Mutex
	byKey map[string]*Queue[L, W]
}

// New returns a Client's queues, none yet.
func New[L comparable, W any](hooks Hooks[L, W]) *Queues[L, W] {
	return &Queues[L, W]{hooks: hooks, byKey: map[string]*Queue[L, W]{}}
}

// Turn is a lock's place in its Client's queue for the key.
type Turn[L comparable, W any] struct {
	qs *Queues[L, W]
	q  *Queue[L, W]
}

// Ended passes the turn on when l, the holder, ended without a hand-off.
func (t Turn[L, W]) Ended(l L) { t.qs.end(t.q, l) }

// Wait blocks until it is the caller's turn on key, or ctx ends (its
// error). It returns the key's queue and, when the previous holder handed
// it over, the lock.
func (qs *Queues[L, W]) Wait(ctx context.Context, key string, want W) (*Queue[L, W], Grant[L], error) {
	qs.mu.Lock()
	q := qs.byKey[key]
	if q == nil {
		q = &Queue[L, W]{key: key}
		qs.byKey[key] = q
	}
	q.mu.Lock()
	qs.mu.Unlock()
	if !q.busy {
		q.busy = true
		q.mu.Unlock()
		return q, Grant[L]{}, nil
	}
	w := &Waiter[L, W]{Want: want, grant: make(chan Grant[L], 1)}
	q.waiters = append(q.waiters, w)
	holder := q.holder
	q.mu.Unlock()
	var none L
	if holder != none {
		qs.hooks.Watch(holder) // so that its end frees the turn
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
		return nil, Grant[L]{}, ctx.Err()
	}
	q.mu.Unlock()
	// The turn was given at the moment ctx ended: give it back.
	if g := <-w.grant; g.Lock != none {
		qs.hooks.GiveBack(ctx, g.Lock)
	} else {
		qs.Pass(q)
	}
	return nil, Grant[L]{}, ctx.Err()
}

// YieldPause waits, after a grant that says Yield, for the other processes
// woken by the release to try first (see wait.Yield), or until ctx ends.
func (qs *Queues[L, W]) YieldPause(ctx context.Context, q *Queue[L, W]) {
	q.mu.Lock()
	pause := q.yielding.Pause(qs.hooks.Now())
	q.mu.Unlock()
	t := qs.hooks.NewTimer(pause + mrand.N(pause/4))
	select {
	case <-t.Chan():
	case <-ctx.Done():
	}
	t.Stop()
}

// Yielded adapts the wait after a cut run of hand-offs to the Acquire that
// followed it, of attempts (see wait.Yield).
func (qs *Queues[L, W]) Yielded(q *Queue[L, W], attempts int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.yielding = q.yielding.After(attempts, qs.hooks.Now())
}

// Hold records l as the lock of q's current turn; l's end passes the turn
// on, unless l was handed over first.
func (qs *Queues[L, W]) Hold(q *Queue[L, W], l L) {
	q.mu.Lock()
	q.holder = l
	waiting := len(q.waiters) > 0
	q.mu.Unlock()
	if qs.hooks.Attach(l, Turn[L, W]{qs, q}) {
		qs.end(q, l)
		return
	}
	if waiting {
		qs.hooks.Watch(l)
	}
}

// end passes the turn on when l, the holder, ended without a hand-off.
func (qs *Queues[L, W]) end(q *Queue[L, W], l L) {
	q.mu.Lock()
	if q.holder != l {
		q.mu.Unlock()
		return
	}
	var none L
	q.holder = none
	q.mu.Unlock()
	qs.Pass(q)
}

// Pass gives the turn, without a lock, to the first waiter, or frees it.
func (qs *Queues[L, W]) Pass(q *Queue[L, W]) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.chain, q.contended = 0, false
	if len(q.waiters) > 0 {
		w := q.waiters[0]
		q.waiters = q.waiters[1:]
		w.grant <- Grant[L]{Yield: q.yield}
		q.yield = false
		return
	}
	q.busy, q.yield = false, false
	if qs.byKey[q.key] == q {
		delete(qs.byKey, q.key)
	}
}

// NextForHandOff takes the first waiter of the turn's queue, when l, its
// holder, may be handed to it: the run of hand-offs is not at its limit
// (or not cut there: wait.Yield). The queue then has no holder until
// HandOver or GiveTurn.
func (t Turn[L, W]) NextForHandOff(l L, limit int) *Waiter[L, W] {
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.holder != l || len(q.waiters) == 0 {
		return nil
	}
	if q.chain >= limit && (limit == 0 || q.yielding.Cut(t.qs.hooks.Now())) {
		q.yield = limit > 0
		return nil
	}
	w := q.waiters[0]
	q.waiters = q.waiters[1:]
	var none L
	q.holder = none
	return w
}

// HandOver gives w the lock next, handed to it, as the queue's holder.
// Only hand-offs since another process was seen waiting (contended) count
// towards the limit; once seen, the contention is assumed until the run
// ends, as the nodes that answer may not include the one a waiter hears.
func (t Turn[L, W]) HandOver(w *Waiter[L, W], next L, contended bool) {
	q := t.q
	q.mu.Lock()
	q.contended = q.contended || contended
	if q.contended {
		q.chain++
	}
	q.mu.Unlock()
	t.qs.Hold(q, next)
	w.grant <- Grant[L]{Lock: next}
}

// GiveTurn gives w the turn without a lock, after a hand-off failed.
func (t Turn[L, W]) GiveTurn(w *Waiter[L, W]) {
	t.q.mu.Lock()
	t.q.chain, t.q.contended = 0, false
	t.q.mu.Unlock()
	w.grant <- Grant[L]{}
}

// Keys returns how many keys have goroutines holding or waiting for their
// turn.
func (qs *Queues[L, W]) Keys() int {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	return len(qs.byKey)
}

// Waiting returns how many goroutines wait for their turn on key.
func (qs *Queues[L, W]) Waiting(key string) int {
	qs.mu.Lock()
	q := qs.byKey[key]
	qs.mu.Unlock()
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiters)
}
