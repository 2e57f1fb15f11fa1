package redlock

import "time"

// Clock is the source of time for validity arithmetic and retry waits.
//
// Now must be monotonic: elapsed time is the difference of two Now
// readings, which a wall-clock step must not move. time.Now's values carry
// a monotonic reading and qualify; wall-clock values alone do not.
//
// The clocks of github.com/jonboulle/clockwork satisfy Clock as they are,
// which lets tests move time without sleeping.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

// systemClock is the default Clock: the process's monotonic clock.
type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// WithClock sets the monotonic Clock used for validity and retry waits. It
// must not be nil. Default: the system's monotonic clock.
func WithClock(clock Clock) Option {
	return clientOption(func(c *config) error {
		if isNil(clock) {
			return invalid("clock is nil")
		}
		c.clock = clock
		return nil
	})
}
