// Package sched is a Client's scheduler of lock ends and renewals: one
// goroutine, while any lock is queued, waits for the earliest lock's time
// and hands the locks then due back to the Client, those past their
// deadline to end and those within their slack of a renewal to renew. It
// knows no lock: Hooks say when a lock needs it and what to do.
//
// Nothing the Hooks tell runs with the scheduler's mutex held; Lose and
// Renew must not block (the Client starts goroutines for them).
package sched

import (
	"container/heap"
	"sync"
	"time"
)

// Timer is one stoppable wait, as a time.Timer.
type Timer interface {
	Chan() <-chan time.Time
	Stop() bool
}

// Times is when a lock needs the scheduler, as its lease is now.
type Times struct {
	Over     bool      // released or lost: it needs the scheduler no more
	Deadline time.Time // when it ends unless renewed or extended
	// Due is when its renewal is due (zero when it is not renewed), and
	// Slack how much earlier it may go out with a lock due before it.
	Due   time.Time
	Slack time.Duration
}

// Hooks are what the scheduler asks of its Client.
type Hooks[T any] struct {
	Now      func() time.Time
	NewTimer func(time.Duration) Timer
	Times    func(T) Times
	Lose     func(T)   // the lock's deadline passed
	Renew    func([]T) // renew these locks (maybe none), then tell Renewed for each
}

// Entry is a lock's place in the scheduler; the scheduler's mutex guards
// it. The zero Entry is a lock not scheduled.
type Entry struct {
	at      time.Time // when the lock needs the scheduler next
	early   time.Time // at less the slack: from then on it goes with a lock due before it
	pos     int       // 1 + its index in the queue; 0 when not queued
	retryAt time.Time // after a failed renewal: when to try again
	busy    bool      // a renewal of the lock is under way
	watched bool      // it ends at its deadline (Watch)
	renewed bool      // it is renewed when due (Renew)
}

// Scheduler schedules the locks of one Client; entry gives a lock's Entry.
type Scheduler[T any] struct {
	hooks   Hooks[T]
	entry   func(T) *Entry
	mu      sync.Mutex
	queue   queue[T]
	wake    chan struct{} // a lock was queued earlier than the wait under way
	running bool          // the goroutine runs
	waitAt  time.Time     // what the goroutine waits for; zero when it waits for none
}

// New returns a Scheduler with nothing queued.
func New[T any](hooks Hooks[T], entry func(T) *Entry) *Scheduler[T] {
	return &Scheduler[T]{hooks: hooks, entry: entry, wake: make(chan struct{}, 1), queue: queue[T]{entry: entry}}
}

// Watch makes the lock end at its deadline.
func (s *Scheduler[T]) Watch(l T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entry(l).watched = true
	s.queueLocked(l)
}

// Renew schedules the lock's renewals.
func (s *Scheduler[T]) Renew(l T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.entry(l).renewed = true
	s.queueLocked(l)
}

// Moved tells that the lock's lease changed (an Extend): its times are
// worked out again, and a retry pending after a failed renewal is dropped.
func (s *Scheduler[T]) Moved(l T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(l)
	e.retryAt = time.Time{}
	if e.pos > 0 {
		s.queueLocked(l)
	}
}

// Drop takes the lock out of the scheduler: it ended.
func (s *Scheduler[T]) Drop(l T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entry(l); e.pos > 0 {
		heap.Remove(&s.queue, e.pos-1)
		if len(s.queue.items) == 0 && s.running {
			s.poke() // to end the goroutine, whose wait is for nothing now
		}
	}
}

// Renewed tells that the lock's renewal is over; a failed one that may
// pass gives the time to try again, retryAt, and the lock is renewed then
// rather than when next due.
func (s *Scheduler[T]) Renewed(l T, retryAt time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(l)
	e.busy = false
	e.retryAt = retryAt
	s.queueLocked(l)
}

func (s *Scheduler[T]) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// queueLocked puts the lock in the queue at its next time, or moves it
// there, unless it no longer needs the scheduler. A lock being renewed is
// queued at its deadline, so a held-up renewal cannot keep it from ending.
func (s *Scheduler[T]) queueLocked(l T) {
	e := s.entry(l)
	at, slack, deadline, ok := s.next(l)
	if e.busy && ok {
		at, slack = deadline, 0
	}
	if !ok || (!e.renewed && !e.watched) {
		if e.pos > 0 {
			heap.Remove(&s.queue, e.pos-1)
		}
		return
	}
	e.at, e.early = at, at.Add(-slack)
	if e.pos > 0 {
		heap.Fix(&s.queue, e.pos-1)
	} else {
		heap.Push(&s.queue, l)
	}
	s.startLocked(at)
}

// startLocked has the goroutine see a lock queued at at: it starts it when
// not running, and wakes it when at is before its wait.
func (s *Scheduler[T]) startLocked(at time.Time) {
	switch {
	case !s.running:
		s.running = true
		go s.run()
	case s.waitAt.IsZero() || at.Before(s.waitAt):
		s.poke()
	}
}

// next is when the lock needs the scheduler next: its renewal (or the
// retry of a failed one), or its deadline, whichever is first, and how
// much earlier it may be renewed with others. ok is false once the lock
// is over.
func (s *Scheduler[T]) next(l T) (at time.Time, slack time.Duration, deadline time.Time, ok bool) {
	tm, e := s.hooks.Times(l), s.entry(l)
	switch {
	case tm.Over:
		return time.Time{}, 0, time.Time{}, false
	case !e.renewed || tm.Due.IsZero():
		return tm.Deadline, 0, tm.Deadline, true
	case !e.retryAt.IsZero():
		if e.retryAt.Before(tm.Deadline) {
			return e.retryAt, 0, tm.Deadline, true
		}
		return tm.Deadline, 0, tm.Deadline, true
	case !tm.Due.Before(tm.Deadline):
		return tm.Deadline, 0, tm.Deadline, true
	}
	return tm.Due, min(tm.Slack, tm.Deadline.Sub(tm.Due)), tm.Deadline, true
}

// dueLocked takes the locks due at now off the queue: those to lose (past
// their deadline) and those to renew (within their slack, not being
// renewed), queued again at their deadline until the renewal is over; the
// others go back at their time.
func (s *Scheduler[T]) dueLocked(now time.Time) (lose, renew []T) {
	var due []T
	for len(s.queue.items) > 0 && !s.entry(s.queue.items[0]).early.After(now) {
		due = append(due, heap.Pop(&s.queue).(T))
	}
	for _, l := range due {
		at, slack, deadline, ok := s.next(l)
		e := s.entry(l)
		switch {
		case !ok:
		case !now.Before(deadline):
			lose = append(lose, l)
		case e.renewed && !e.busy && !now.Before(at.Add(-slack)):
			e.busy = true
			renew = append(renew, l)
			s.queueLocked(l) // at its deadline, until the renewal is over
		default: // its time moved later, or it is being renewed
			s.queueLocked(l)
		}
	}
	return lose, renew
}

// run is the scheduler's goroutine: it waits for the earliest lock, takes
// every lock then due, and hands them to Lose and Renew. It ends when no
// lock is queued.
func (s *Scheduler[T]) run() {
	var timer Timer // the wait under way; there is one whenever a lock is queued
	for {
		s.mu.Lock()
		lose, renew := s.dueLocked(s.hooks.Now())
		timer = s.waitLocked(timer)
		if timer == nil && len(lose) == 0 && len(renew) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()

		for _, l := range lose {
			s.hooks.Lose(l)
		}
		s.hooks.Renew(renew)
		if len(lose) > 0 || len(renew) > 0 {
			continue // the queue may have changed meanwhile
		}
		select {
		case <-timer.Chan():
			timer = nil // waitAt is stale until the loop takes s.mu, at once
		case <-s.wake:
		}
	}
}

// waitLocked is what the goroutine waits on for the first queued lock to
// be due, given timer, the wait it has (nil: none): a new wait only when
// the earliest lock moved earlier (the one it replaces is stopped), none
// when no lock is queued.
func (s *Scheduler[T]) waitLocked(timer Timer) Timer {
	if timer != nil && len(s.queue.items) > 0 && !s.entry(s.queue.items[0]).at.Before(s.waitAt) {
		return timer
	}
	if timer != nil {
		timer.Stop()
	}
	if len(s.queue.items) == 0 {
		s.waitAt = time.Time{}
		return nil
	}
	s.waitAt = s.entry(s.queue.items[0]).at
	return s.hooks.NewTimer(s.waitAt.Sub(s.hooks.Now()))
}

// queue is the scheduler's heap of locks, earliest first.
type queue[T any] struct {
	items []T
	entry func(T) *Entry
}

func (q *queue[T]) Len() int           { return len(q.items) }
func (q *queue[T]) Less(i, j int) bool { return q.entry(q.items[i]).at.Before(q.entry(q.items[j]).at) }
func (q *queue[T]) Swap(i, j int) {
	q.items[i], q.items[j] = q.items[j], q.items[i]
	q.entry(q.items[i]).pos, q.entry(q.items[j]).pos = i+1, j+1
}
func (q *queue[T]) Push(x any) {
	l := x.(T)
	q.entry(l).pos = len(q.items) + 1
	q.items = append(q.items, l)
}
func (q *queue[T]) Pop() any {
	l := q.items[len(q.items)-1]
	var zero T
	q.items[len(q.items)-1] = zero
	q.items = q.items[:len(q.items)-1]
	q.entry(l).pos = 0
	return l
}

// Queued is a lock in the queue, as Snapshot shows it.
type Queued[T any] struct {
	Lock             T
	Renewed, Watched bool
}

// Snapshot tells whether the goroutine runs, and the locks queued.
func (s *Scheduler[T]) Snapshot() (running bool, queued []Queued[T]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.queue.items {
		e := s.entry(l)
		queued = append(queued, Queued[T]{l, e.renewed, e.watched})
	}
	return s.running, queued
}
