package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// jump moves the clock by d without firing any waiter: a process paused
// past its timers, whose timers have not fired yet when it resumes.
func (c *manualClock) jump(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// overAtOnce checks that ctx already says the lock is over while no timer
// has fired: Err not nil and context.Cause matching ErrLockLost (checked
// first through cause, then through Err), Validity zero, and Done closed
// by the discovery.
func overAtOnce(ctx context.Context, lock *redlock.Lock, causeFirst bool) error {
	if causeFirst {
		if cause := context.Cause(ctx); !errors.Is(cause, redlock.ErrLockLost) {
			return fmt.Errorf("context.Cause before Err = %v, want ErrLockLost", cause)
		}
	}
	if err := ctx.Err(); !errors.Is(err, context.Canceled) {
		return fmt.Errorf("ctx.Err() = %v past the validity, want context.Canceled", err)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, redlock.ErrLockLost) {
		return fmt.Errorf("context.Cause = %v, want ErrLockLost", cause)
	}
	if v := lock.Validity(); v != 0 {
		return fmt.Errorf("Validity = %v past the validity", v)
	}
	select {
	case <-ctx.Done():
	default:
		return errors.New("Done open after Err found the lock over")
	}
	// The lock is over for good, as the scheduler would have ended it:
	// Extend refuses, and its Done closes without a timer.
	if err := lock.Extend(context.Background(), time.Hour); !errors.Is(err, redlock.ErrLockLost) || lock.Validity() != 0 {
		return fmt.Errorf("Extend past the validity: %v, Validity %v", err, lock.Validity())
	}
	select {
	case <-lock.Done():
	case <-time.After(10 * time.Second):
		return errors.New("the lock's Done still open after Err found it over")
	}
	return nil
}

// TestLeadership_Context_endsWithTheValidity: a leader paused past its ttl
// sees, before any timer fires, the end in Context().Err(), Leading and
// Validity at once.
func TestLeadership_Context_endsWithTheValidity(t *testing.T) {
	for _, causeFirst := range []bool{false, true} {
		t.Run(fmt.Sprint("causeFirst=", causeFirst), func(t *testing.T) {
			c := newCluster(t, 3)
			clock := fakeClock()
			e := mustElection(t, c.client(t, redlock.WithClock(clock)), "scheduler", 3*time.Second)
			l, err := e.Campaign(context.Background(), "a")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = l.Resign(context.Background()) }()
			if err := l.Context().Err(); err != nil || !l.Leading() {
				t.Fatalf("just elected: Err %v, Leading %v", err, l.Leading())
			}
			clock.jump(4 * time.Second)
			if err := overAtOnce(l.Context(), l.Lock(), causeFirst); err != nil {
				t.Fatal(err)
			}
			if l.Leading() {
				t.Fatal("Leading past the validity")
			}
		})
	}
}

// TestLeadership_Context_followsTheRenewedUntil: the context lives as long
// as the current Until, which an extend moves.
func TestLeadership_Context_followsTheRenewedUntil(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	e := mustElection(t, c.client(t, redlock.WithClock(clock)), "scheduler", 3*time.Second)
	l, err := e.Campaign(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Resign(context.Background()) }()
	clock.jump(2 * time.Second)
	if err := l.Lock().Extend(context.Background(), 3*time.Second); err != nil {
		t.Fatal(err)
	}
	clock.jump(2 * time.Second) // past the first Until, before the new one
	if err := l.Context().Err(); err != nil || !l.Leading() || l.Lock().Validity() == 0 {
		t.Fatalf("within the extended validity: Err %v, Leading %v, Validity %v", err, l.Leading(), l.Lock().Validity())
	}
	clock.jump(2 * time.Second)
	if err := overAtOnce(l.Context(), l.Lock(), false); err != nil || l.Leading() {
		t.Fatalf("past the extended validity: %v, Leading %v", err, l.Leading())
	}
}

// TestClient_Do_contextEndsWithTheValidity: a job paused past its lock's
// ttl sees the end in its context's Err before any timer fires, as in
// LockFrom(ctx).Validity(); so does a context derived from it with a value.
func TestClient_Do_contextEndsWithTheValidity(t *testing.T) {
	type key struct{}
	for _, name := range []string{"fn's context", "derived with a value"} {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 3)
			clock := fakeClock()
			rc := c.client(t, redlock.WithClock(clock))
			ran, jobErr := false, error(nil)
			_ = rc.Do(context.Background(), "job", 3*time.Second, func(ctx context.Context) error {
				ran = true
				if name != "fn's context" {
					ctx = context.WithValue(ctx, key{}, "v")
				}
				lock := redlock.LockFrom(ctx)
				if lock == nil || ctx.Err() != nil {
					jobErr = fmt.Errorf("LockFrom %v, Err %v at the start", lock, ctx.Err())
					return nil
				}
				clock.jump(4 * time.Second)
				jobErr = overAtOnce(ctx, lock, false)
				return nil
			})
			if !ran || jobErr != nil {
				t.Fatalf("ran %v: %v", ran, jobErr)
			}
		})
	}
}
