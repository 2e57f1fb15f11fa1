// Package realclock is the process's real, monotonic clock: the one place
// the library reads or waits on real time. The library's rules run on the
// Client's Clock (the root package's clock.go), whose default is this; the
// node I/O (deadlines, round trips, a pipe's linger, a subscription's
// back-off) runs on it whatever the Clock, as the network runs in real
// time.
package realclock

import "time"

// Now is time.Now: with NewTimer, the library's only reads of real time.
func Now() time.Time { return time.Now() }

// NewTimer is time.NewTimer.
func NewTimer(d time.Duration) *time.Timer { return time.NewTimer(d) }

// Since is time.Since.
func Since(t time.Time) time.Duration { return Now().Sub(t) }

// Until is time.Until.
func Until(t time.Time) time.Duration { return t.Sub(Now()) }

// After is time.After.
func After(d time.Duration) <-chan time.Time { return NewTimer(d).C }

// Clock is the real clock as a value.
type Clock struct{}

// Now is time.Now.
func (Clock) Now() time.Time { return Now() }

// Since is time.Since.
func (Clock) Since(t time.Time) time.Duration { return Since(t) }

// Until is time.Until.
func (Clock) Until(t time.Time) time.Duration { return Until(t) }

// NewTimer is time.NewTimer, its channel read through Chan.
func (Clock) NewTimer(d time.Duration) Timer { return Timer{NewTimer(d)} }

// Timer is a time.Timer whose channel is read through Chan.
type Timer struct{ *time.Timer }

// Chan returns the Timer's channel.
func (t Timer) Chan() <-chan time.Time { return t.C }
