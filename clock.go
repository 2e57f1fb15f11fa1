package redlock

import (
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/realclock"
)

// Clock is the source of time for the library's own rules: validity,
// retry and wake-up waits, split-vote waits, renewal due times, hand-off
// yields, election keeps and polls, and the Observer's timestamps. The
// node I/O's deadlines are not on it: the network runs in real time.
//
// Now must be monotonic: elapsed time is the difference of two Now
// readings, which a wall-clock step must not move. time.Now's values carry
// a monotonic reading and qualify; wall-clock values alone do not.
//
// A Clock that also implements TimerClock gives the library waits it can
// stop; with one that does not, a wait given up (its Acquire won, say) is
// left to its After. Tickers are made of timers. The clocks of
// github.com/jonboulle/clockwork satisfy Clock as they are, which lets
// tests move time without sleeping.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

// TimerClock is a Clock whose waits can be stopped, so that a fake clock
// counts only the waits still running.
type TimerClock interface {
	Clock
	// NewTimer starts a Timer that fires once d has passed.
	NewTimer(d time.Duration) Timer
}

// Timer is one wait on a TimerClock, as a time.Timer.
type Timer interface {
	// Chan returns the channel that receives the time once the Timer fires.
	Chan() <-chan time.Time
	// Stop stops the Timer; it reports whether it stopped it before it fired.
	Stop() bool
}

// systemClock is the default Clock: the process's monotonic clock (the
// node I/O's is internal/realclock, real whatever the Clock).
type systemClock struct{}

func (systemClock) Now() time.Time                         { return realclock.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return realclock.After(d) }
func (systemClock) NewTimer(d time.Duration) Timer         { return realclock.Clock{}.NewTimer(d) }

// Since is time.Since, on the system's clock.
func (systemClock) Since(t time.Time) time.Duration { return realclock.Since(t) }

// Until is time.Until, on the system's clock.
func (systemClock) Until(t time.Time) time.Duration { return realclock.Until(t) }

// newTimer starts a Timer of d on clock: the clock's own when it is a
// TimerClock, one that cannot be stopped otherwise.
func newTimer(clock Clock, d time.Duration) Timer {
	if tc, ok := clock.(TimerClock); ok {
		return tc.NewTimer(d)
	}
	return afterTimer(clock.After(d))
}

// afterTimer is a Clock's After as a Timer that cannot be stopped.
type afterTimer <-chan time.Time

func (t afterTimer) Chan() <-chan time.Time { return t }
func (afterTimer) Stop() bool               { return false }

// ticker fires every d on a Clock, on the phase of its start, as a
// time.Ticker: a tick is dropped while the one before has not been
// received. Stop ends it.
type ticker struct {
	c    chan time.Time
	stop chan struct{}
}

func newTicker(clock Clock, d time.Duration) *ticker {
	t := &ticker{c: make(chan time.Time, 1), stop: make(chan struct{})}
	go func() {
		next := clock.Now()
		for {
			next = next.Add(d)
			tm := newTimer(clock, next.Sub(clock.Now()))
			select {
			case <-t.stop:
				tm.Stop()
				return
			case at := <-tm.Chan():
				select {
				case t.c <- at:
				default:
				}
			}
			if late := clock.Now().Sub(next); late >= d {
				next = next.Add(late / d * d) // whole periods gone by (the clock jumped): dropped
			}
		}
	}()
	return t
}

func (t *ticker) Stop() { close(t.stop) }

// WithClock sets the monotonic Clock of the library's rules (see Clock).
// It must not be nil. Default: the system's monotonic clock.
func WithClock(clock Clock) Option {
	return clientOption(func(c *config) error {
		if isNil(clock) {
			return engine.Invalid("clock is nil")
		}
		c.clock = clock
		return nil
	})
}
