package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// Leadership and Do on real redis-server nodes: their contexts after a
// pause, and Election.Run's candidates.

// jumpClock is the system's clock, moved ahead by jump without firing any
// timer: a process that resumes after a pause, before its timers fire.
type jumpClock struct{ ahead atomic.Int64 }

func (c *jumpClock) Now() time.Time                         { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *jumpClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (c *jumpClock) jump(d time.Duration)                   { c.ahead.Add(int64(d)) }

// pausedPastTheValidity reports what does not yet say the lock is over
// right after the clock jumped past its validity.
func pausedPastTheValidity(ctx context.Context, lock *redlock.Lock) error {
	if err := ctx.Err(); err == nil {
		return errors.New("ctx.Err() is nil past the validity")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, redlock.ErrLockLost) {
		return fmt.Errorf("context.Cause = %v, want ErrLockLost", cause)
	}
	if v := lock.Validity(); v != 0 {
		return fmt.Errorf("Validity = %v", v)
	}
	return nil
}

// TestContexts_afterAPause_realServers: a leader and a Do job whose clock
// jumps past the ttl (a pause whose timers have not fired yet) see at once
// that the lock is over: ctx.Err(), Leading and Validity agree.
func TestContexts_afterAPause_realServers(t *testing.T) {
	eachTransport(t, func(t *testing.T) {
		_, connect := realNodes(t, 3)
		const ttl = 2 * time.Second
		t.Run("Leadership", func(t *testing.T) {
			clock := &jumpClock{}
			e, err := locker(t, connect(), redlock.WithClock(clock)).Election("paused-leader", ttl)
			if err != nil {
				t.Fatal(err)
			}
			lead, err := e.Campaign(context.Background(), "a")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lead.Resign(context.Background()) }()
			clock.jump(2 * ttl)
			if err := pausedPastTheValidity(lead.Context(), lead.Lock()); err != nil {
				t.Fatal(err)
			}
			if lead.Leading() {
				t.Fatal("Leading past the validity")
			}
		})
		t.Run("Do", func(t *testing.T) {
			clock := &jumpClock{}
			rc := locker(t, connect(), redlock.WithClock(clock))
			ran, jobErr := false, error(nil)
			_ = rc.Do(context.Background(), "paused-job", ttl, func(ctx context.Context) error {
				ran = true
				clock.jump(2 * ttl)
				jobErr = pausedPastTheValidity(ctx, redlock.LockFrom(ctx))
				return nil
			})
			if !ran || jobErr != nil {
				t.Fatalf("ran %v: %v", ran, jobErr)
			}
		})
	})
}

// TestRun_realServers: two candidates' Election.Run on the same real
// nodes hand the leadership over again and again, never running their
// functions at once, the terms rising; when ctx ends both resign and
// return, and no one leads.
func TestRun_realServers(t *testing.T) {
	eachTransport(t, func(t *testing.T) {
		_, connect := realNodes(t, 3)
		const terms = 12
		var inside, overlaps, runs atomic.Int32
		var mu sync.Mutex
		var seq []uint64
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		fn := func(ctx context.Context, l *redlock.Leadership) error {
			if inside.Add(1) != 1 {
				overlaps.Add(1)
			}
			defer inside.Add(-1)
			mu.Lock()
			seq = append(seq, l.Term())
			mu.Unlock()
			for range 3 {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				time.Sleep(time.Millisecond)
			}
			if runs.Add(1) >= terms {
				cancel()
			}
			return nil
		}
		var elections []*redlock.Election
		done := make(chan error, 2)
		for _, v := range []string{"a", "b"} {
			e, err := locker(t, connect()).Election("run", 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			elections = append(elections, e)
			go func() { done <- e.Run(ctx, v, fn) }()
		}
		for range 2 {
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Run = %v, want context.Canceled", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("Run did not return after its ctx ended")
			}
		}
		if overlaps.Load() != 0 {
			t.Fatalf("%d functions ran beside another", overlaps.Load())
		}
		for i := 1; i < len(seq); i++ {
			if seq[i] <= seq[i-1] {
				t.Fatalf("terms %v do not rise", seq)
			}
		}
		if _, err := elections[0].Leader(context.Background()); !errors.Is(err, redlock.ErrNoLeader) {
			t.Fatalf("Leader after both Runs returned: %v, want ErrNoLeader", err)
		}
	})
}
