package sched

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// fakeLock is a lock as the scheduler sees it, on a clock the test moves.
type fakeLock struct {
	name     string
	deadline time.Time
	due      time.Time
	slack    time.Duration
	over     bool
	entry    Entry
}

// rig is a Scheduler on a fake clock whose timers fire when the test
// moves the clock past them; what the hooks were told arrives on lost and
// renewed.
type rig struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	s       *Scheduler[*fakeLock]
	lost    chan string
	renewed chan []string
}

type fakeTimer struct {
	at      time.Time
	c       chan time.Time
	stopped atomic.Bool
}

func (t *fakeTimer) Chan() <-chan time.Time { return t.c }
func (t *fakeTimer) Stop() bool             { return !t.stopped.Swap(true) }

func newRig() *rig {
	r := &rig{now: time.Unix(1000, 0), lost: make(chan string, 16), renewed: make(chan []string, 16)}
	r.s = New(Hooks[*fakeLock]{
		Now: func() time.Time { r.mu.Lock(); defer r.mu.Unlock(); return r.now },
		NewTimer: func(d time.Duration) Timer {
			r.mu.Lock()
			defer r.mu.Unlock()
			t := &fakeTimer{at: r.now.Add(d), c: make(chan time.Time, 1)}
			r.timers = append(r.timers, t)
			return t
		},
		Times: func(l *fakeLock) Times {
			r.mu.Lock()
			defer r.mu.Unlock()
			return Times{Over: l.over, Deadline: l.deadline, Due: l.due, Slack: l.slack}
		},
		Lose: func(l *fakeLock) { r.lost <- l.name },
		Renew: func(ls []*fakeLock) {
			if len(ls) == 0 {
				return
			}
			var names []string
			for _, l := range ls {
				names = append(names, l.name)
			}
			slices.Sort(names)
			r.renewed <- names
		},
	}, func(l *fakeLock) *Entry { return &l.entry })
	return r
}

// advance moves the clock by d and fires the live timers it passes. When
// the test expects one to fire, it first waits for the scheduler to have
// it (its goroutine sets its wait after what it was last told).
func (r *rig) advance(t *testing.T, d time.Duration, fire bool) {
	t.Helper()
	for start := time.Now(); fire && !r.armedBy(d); time.Sleep(time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no wait of the scheduler ends within %v", d)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = r.now.Add(d)
	for _, t := range r.timers {
		if !t.at.After(r.now) && !t.stopped.Swap(true) {
			t.c <- r.now
		}
	}
}

// armedBy reports whether a live timer ends within d.
func (r *rig) armedBy(d time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.timers {
		if !t.stopped.Load() && !t.at.After(r.now.Add(d)) {
			return true
		}
	}
	return false
}

func (r *rig) lock(name string, deadline, due, slack time.Duration) *fakeLock {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := &fakeLock{name: name, deadline: r.now.Add(deadline), slack: slack}
	if due > 0 {
		l.due = r.now.Add(due)
	}
	return l
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

func none[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s: %v, wanted none", what, v)
	case <-time.After(20 * time.Millisecond):
	}
}

// idle waits until the scheduler's goroutine has ended.
func idle(t *testing.T, s *Scheduler[*fakeLock]) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(time.Millisecond) {
		if running, _ := s.Snapshot(); !running {
			return
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the scheduler's goroutine did not end")
		}
	}
}

// A renewed lock is handed to Renew at its due time less its slack, with
// another due within that slack, and a watched one is lost at its
// deadline; neither before.
func TestScheduler_renewsTogetherAndLosesAtTheDeadline(t *testing.T) {
	r := newRig()
	a := r.lock("a", 10*time.Second, 5*time.Second, 100*time.Millisecond)
	b := r.lock("b", 10*time.Second, 5*time.Second+50*time.Millisecond, 100*time.Millisecond)
	w := r.lock("w", 3*time.Second, 0, 0)
	r.s.Renew(a)
	r.s.Renew(b)
	r.s.Watch(w)
	r.advance(t, 2999*time.Millisecond, false)
	none(t, r.lost, "lost before the deadline")
	r.advance(t, time.Millisecond, true)
	if got := recv(t, r.lost, "loss at the deadline"); got != "w" {
		t.Fatalf("lost %q, want w", got)
	}
	r.advance(t, 2*time.Second, true) // a is due, and b within its slack
	if got := recv(t, r.renewed, "renewal"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("renewed %v, want a and b together", got)
	}
	// Being renewed, both are queued at their deadline until Renewed.
	if _, q := r.s.Snapshot(); len(q) != 2 {
		t.Fatalf("%d queued, want 2", len(q))
	}
	r.s.Drop(a)
	r.s.Drop(b)
	idle(t, r.s)
}

// A renewal that failed and may pass is tried again at its retryAt, not
// at the lock's next due time; Moved (an Extend) drops the retry.
func TestScheduler_retriesAtRetryAt(t *testing.T) {
	r := newRig()
	a := r.lock("a", 10*time.Second, time.Second, 0)
	r.s.Renew(a)
	r.advance(t, time.Second, true)
	recv(t, r.renewed, "renewal")
	r.s.Renewed(a, r.now.Add(500*time.Millisecond))
	r.advance(t, 499*time.Millisecond, false)
	none(t, r.renewed, "retried early")
	r.advance(t, time.Millisecond, true)
	recv(t, r.renewed, "retry")
	r.s.Renewed(a, r.now.Add(500*time.Millisecond))
	r.mu.Lock()
	a.due = r.now.Add(3 * time.Second)
	r.mu.Unlock()
	r.s.Moved(a)
	r.advance(t, time.Second, false)
	none(t, r.renewed, "retry after Moved")
	r.advance(t, 2*time.Second, true)
	recv(t, r.renewed, "renewal at the new due time")
	r.s.Drop(a)
	idle(t, r.s)
}

// A renewal held up past the deadline does not keep the lock from being
// lost, and a lock over is dropped rather than lost.
func TestScheduler_busyRenewalStillEndsAtTheDeadline(t *testing.T) {
	r := newRig()
	a := r.lock("a", 2*time.Second, time.Second, 0)
	r.s.Renew(a)
	r.advance(t, time.Second, true)
	recv(t, r.renewed, "renewal")
	r.advance(t, time.Second, true)
	if got := recv(t, r.lost, "loss at the deadline"); got != "a" {
		t.Fatalf("lost %q", got)
	}
	o := r.lock("o", time.Second, 0, 0)
	r.s.Watch(o)
	r.mu.Lock()
	o.over = true
	r.mu.Unlock()
	r.advance(t, time.Second, true)
	none(t, r.lost, "a lock over was lost")
	idle(t, r.s)
}
