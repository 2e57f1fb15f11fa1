package redlock_test

import (
	"context"
	"slices"
	"sync"
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
