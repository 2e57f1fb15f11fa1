// Package realclock is the process's real, monotonic clock: the one place
// the library reads or waits on real time. The library's rules run on the
// Client's Clock (the root package's clock.go), whose default is this; the
// node I/O (deadlines, round trips, a pipe's linger, a subscription's
// back-off) runs on it whatever the Clock, as the network runs in real
// time.
package realclock

import "time"

// Now is time.Now.
func Now() time.Time { return time.Now() }

// Since is time.Since.
func Since(t time.Time) time.Duration { return time.Since(t) }

// Until is time.Until.
func Until(t time.Time) time.Duration { return time.Until(t) }

// After is time.After.
func After(d time.Duration) <-chan time.Time { return time.After(d) }

// NewTimer is time.NewTimer.
func NewTimer(d time.Duration) *time.Timer { return time.NewTimer(d) }
