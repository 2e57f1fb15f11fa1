package redlock_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// manualClock is a redlock.TimerClock that moves only when told to
// (Advance), for tests that must not sleep. Its After and timer channels
// receive once the clock has been advanced to their deadline; a stopped
// timer no longer waits.
type manualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []clockWaiter
	changed chan struct{} // closed and replaced when waiters is added to
}

type clockWaiter struct {
	at time.Time
	ch chan time.Time
}

// manualTimer is a redlock.Timer on a manualClock.
type manualTimer struct {
	c  *manualClock
	ch chan time.Time
}

func (t manualTimer) Chan() <-chan time.Time { return t.ch }

func (t manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	n := len(t.c.waiters)
	t.c.waiters = slices.DeleteFunc(t.c.waiters, func(w clockWaiter) bool { return w.ch == t.ch })
	return len(t.c.waiters) < n
}

func (c *manualClock) NewTimer(d time.Duration) redlock.Timer {
	return manualTimer{c: c, ch: c.wait(d)}
}

// fakeClock returns a clock that moves only when told to.
func fakeClock() *manualClock {
	return &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), changed: make(chan struct{})}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) After(d time.Duration) <-chan time.Time { return c.wait(d) }

func (c *manualClock) wait(d time.Duration) chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, clockWaiter{at: c.now.Add(d), ch: ch})
	close(c.changed)
	c.changed = make(chan struct{})
	return ch
}

// Advance moves the clock by d and fires the waiters that are then due,
// earliest first.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	slices.SortStableFunc(c.waiters, func(a, b clockWaiter) int { return a.at.Compare(b.at) })
	i := 0
	for ; i < len(c.waiters) && !c.waiters[i].at.After(c.now); i++ {
		c.waiters[i].ch <- c.waiters[i].at
	}
	c.waiters = c.waiters[i:]
}

// BlockUntilContext waits until at least n waiters wait on the clock, or
// ctx ends.
func (c *manualClock) BlockUntilContext(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		have, changed := len(c.waiters), c.changed
		c.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pending is how many waits the clock holds.
func (c *manualClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// nextWait is how long until the earliest waiter on the clock is due; 0
// when none waits.
func (c *manualClock) nextWait() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Duration
	for i, w := range c.waiters {
		if d := w.at.Sub(c.now); i == 0 || d < next {
			next = d
		}
	}
	return next
}

// TestTicker_onTheClock: a ticker made of the clock's timers ticks on the
// phase of its start, drops a tick while the one before is not received,
// after a jump goes on on its phase, and, stopped, no longer waits on the
// clock.
func TestTicker_onTheClock(t *testing.T) {
	clock := fakeClock()
	t0 := clock.Now()
	ticks, stop := redlock.Tick(clock, time.Second)
	next := func(want time.Time) {
		t.Helper()
		select {
		case at := <-ticks:
			if !at.Equal(want) {
				t.Fatalf("tick at %v, want %v", at.Sub(t0), want.Sub(t0))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no tick at %v", want.Sub(t0))
		}
	}
	waiters(t, clock, 1)
	clock.Advance(1500 * time.Millisecond)
	next(t0.Add(time.Second))
	waiters(t, clock, 1)
	clock.Advance(500 * time.Millisecond) // on the phase: at 2 s
	waiters(t, clock, 1)                  // the tick at 2 s is sent, the next one waited for
	clock.Advance(time.Second)            // the tick at 3 s finds 2 s not received: dropped
	waiters(t, clock, 1)
	next(t0.Add(2 * time.Second))
	select {
	case at := <-ticks:
		t.Fatalf("a dropped tick came, at %v", at.Sub(t0))
	default:
	}
	clock.Advance(10500 * time.Millisecond) // a jump to 13.5 s: the tick at 4 s, then on the phase
	next(t0.Add(4 * time.Second))
	waiters(t, clock, 1)
	clock.Advance(500 * time.Millisecond)
	next(t0.Add(14 * time.Second))
	stop()
	waitFor(t, "the stopped ticker's timer to go", func() bool { return clock.nextWait() == 0 && clock.pending() == 0 })
}
