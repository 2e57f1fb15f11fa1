package redlock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// TestClient_Acquire_localTurns: goroutines of one Client take turns on a
// key instead of colliding on the nodes: on one node, where a release is
// complete when it returns, no attempt ever fails.
func TestClient_Acquire_localTurns(t *testing.T) {
	c := newCluster(t, 1)
	rc := c.client(t)
	var failed, inside, overlaps atomic.Int64
	retry := redlock.WithRetry(redlock.RetryFunc(func(int) time.Duration {
		failed.Add(1)
		return time.Millisecond
	}))
	const goroutines, rounds = 8, 25
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				lock, err := rc.Acquire(context.Background(), "k", time.Minute, retry)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				if err := lock.Release(context.Background()); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping sections", n)
	}
	if n := failed.Load(); n != 0 {
		t.Errorf("%d failed attempts among goroutines of one client, want 0", n)
	}
	if n := redlock.QueuedKeys(rc); n != 0 {
		t.Errorf("%d keys left queued", n)
	}
}

// TestClient_Acquire_turnPassesWhenValidityEnds: a holder that never
// releases holds up the next local Acquire only until its lock ends.
func TestClient_Acquire_turnPassesWhenValidityEnds(t *testing.T) {
	c := newCluster(t, 1)
	clock := fakeClock()
	rc := c.client(t, redlock.WithClock(clock))
	ctx := context.Background()
	if _, err := rc.Acquire(ctx, "k", time.Second); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lock, err := rc.Acquire(ctx, "k", time.Second)
		if err == nil {
			err = lock.Release(ctx)
		}
		got <- err
	}()
	waiters(t, clock, 1) // the waiter made the holder's validity watched
	c.servers[0].FastForward(2 * time.Second)
	clock.Advance(time.Second)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the waiter's Acquire: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never got its turn after the holder's lock ended")
	}
}

func TestClient_Acquire_cancelledWhileQueued(t *testing.T) {
	c := newCluster(t, 1)
	rc := c.client(t)
	ctx := context.Background()
	holder, err := rc.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	before := c.commands()
	qctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = rc.Acquire(qctx, "k", time.Second)
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire while queued: err = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if n := c.commands() - before; n != 0 {
		t.Errorf("a queued Acquire sent %d commands while the turn was taken", n)
	}
	mustRelease(t, holder)
	lock, err := rc.Acquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatalf("Acquire after the queue emptied: %v", err)
	}
	mustRelease(t, lock)
	if n := redlock.QueuedKeys(rc); n != 0 {
		t.Errorf("%d keys left queued", n)
	}
}
