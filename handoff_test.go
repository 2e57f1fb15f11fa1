package redlock_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// queuedAcquire starts an Acquire of key that queues behind this client's
// holder, and returns once it waits.
func queuedAcquire(t *testing.T, rc *redlock.Client, ctx context.Context, key string, ttl time.Duration, opts ...redlock.AcquireOption) <-chan acquired {
	t.Helper()
	before := redlock.LocalWaiters(rc, key)
	got := make(chan acquired, 1)
	go func() {
		l, err := rc.Acquire(ctx, key, ttl, opts...)
		got <- acquired{l, err}
	}()
	waitFor(t, "the Acquire to queue", func() bool { return redlock.LocalWaiters(rc, key) > before })
	return got
}

type acquired struct {
	lock *redlock.Lock
	err  error
}

func mustGet(t *testing.T, ch <-chan acquired) *redlock.Lock {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("queued Acquire: %v", a.err)
		}
		return a.lock
	case <-time.After(10 * time.Second):
		t.Fatal("the queued Acquire never returned")
		return nil
	}
}

func scriptSHA(t *testing.T, file string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(string(src)).Hash()
}

// scriptCalls counts, per script file, the calls a hooked node received.
func scriptCalls(t *testing.T, h *roundTrips, files ...string) map[string]int {
	t.Helper()
	shas := map[string]string{}
	for _, f := range files {
		shas[scriptSHA(t, f)] = f
	}
	counts := map[string]int{}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, sha := range h.shas {
		counts[shas[sha]]++
	}
	return counts
}

func TestLock_Release_handsOffToLocalWaiter(t *testing.T) {
	c := newCluster(t, 3)
	h := newRoundTrips()
	close(h.gate)
	for _, rdb := range c.clients {
		rdb.AddHook(h)
	}
	rc := c.client(t)
	ctx := context.Background()
	first, err := rc.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waiting := queuedAcquire(t, rc, ctx, "k", 30*time.Second)

	start := time.Now()
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release with a local waiter: %v", err)
	}
	second := mustGet(t, waiting)
	redlock.WaitSettled(second) // the hand-off returned once a quorum answered
	if got := scriptCalls(t, h, "acquire.lua", "handoff.lua", "release.lua"); got["handoff.lua"] != 3 || got["release.lua"] != 0 || got["acquire.lua"] != 3 {
		t.Errorf("scripts run %v, want 3 acquires, then 3 hand-offs and no release", got)
	}
	if second.Token() == first.Token() {
		t.Fatal("the handed lock has the releasing lock's token")
	}
	if got := c.holders("k", second.Token()); len(got) != 3 {
		t.Fatalf("new token on nodes %v, want all 3", got)
	}
	for i, s := range c.servers {
		if ttl := s.TTL("k"); ttl <= 29*time.Second || ttl > 30*time.Second {
			t.Errorf("node %d: ttl %v, want the waiter's 30s", i, ttl)
		}
	}
	// Valid from before the hand-off, for the waiter's ttl less the drift.
	if until := second.Until(); until.After(start.Add(30*time.Second)) || until.Before(start.Add(29*time.Second)) {
		t.Errorf("Until %v after the hand-off's start, want about 30s less the drift", until.Sub(start))
	}

	// The released lock is over, and cannot touch its successor.
	if err := first.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend of the released lock: %v, want ErrLockLost", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if got := c.holders("k", second.Token()); len(got) != 3 {
		t.Fatal("the released lock's calls removed its successor's keys")
	}
	mustRelease(t, second)
	if got := c.holdersAny("k"); len(got) != 0 {
		t.Fatalf("key left on nodes %v", got)
	}
	if n := redlock.QueuedKeys(rc); n != 0 {
		t.Errorf("%d keys left queued", n)
	}
}

func TestLock_Release_handOffRaisesFencingToken(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	first, err := rc.Acquire(ctx, "k", time.Minute, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	waiting := queuedAcquire(t, rc, ctx, "k", time.Minute, redlock.WithFencing())
	mustRelease(t, first)
	second := mustGet(t, waiting)
	if second.FencingToken() <= first.FencingToken() {
		t.Fatalf("fencing token %d after %d: a handed lock must get a higher one", second.FencingToken(), first.FencingToken())
	}
	mustRelease(t, second)
}

func TestLock_Release_handOffsAreBounded(t *testing.T) {
	for _, limit := range []int{0, 2} {
		c, h := hookedNode(t)
		close(h.gate)
		rc := c.client(t, redlock.WithHandOff(limit))
		ctx := context.Background()
		lock, err := rc.Acquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		const sections = 6
		for range sections - 1 {
			next := queuedAcquire(t, rc, ctx, "k", time.Minute)
			if err := lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
			lock = mustGet(t, next)
		}
		mustRelease(t, lock)

		got := scriptCalls(t, h, "acquire.lua", "handoff.lua", "release.lua")
		// With limit L, runs of L hand-offs are each followed by a release
		// and an acquire.
		wantHandOffs := (sections - 1) / (limit + 1) * limit
		if limit > 0 {
			wantHandOffs += (sections - 1) % (limit + 1)
		}
		if got["handoff.lua"] != wantHandOffs || got["acquire.lua"]+got["handoff.lua"] != sections || got["release.lua"] != sections-wantHandOffs {
			t.Errorf("limit %d, %d sections: scripts run %v, want %d hand-offs", limit, sections, got, wantHandOffs)
		}
	}
}

// TestLock_Release_handOffFails: the releasing lock's keys were lost and
// another process holds the key; the hand-off fails, Release reports the
// loss, and the waiter contends like any Acquire.
func TestLock_Release_handOffFails(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	first, err := rc.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	waiting := queuedAcquire(t, rc, wctx, "k", time.Minute)
	for _, s := range c.servers {
		s.Set("k", "another holder")
	}

	if err := first.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release: %v, want ErrLockLost", err)
	}
	select {
	case a := <-waiting:
		if !errors.Is(a.err, redlock.ErrNotAcquired) || !errors.Is(a.err, context.DeadlineExceeded) {
			t.Fatalf("waiter: %v, want ErrNotAcquired at its deadline", a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never returned")
	}
	if got := c.holders("k", "another holder"); len(got) != 3 {
		t.Fatalf("the other holder's key is left on %v, want all 3", got)
	}
	if n := redlock.QueuedKeys(rc); n != 0 {
		t.Errorf("%d keys left queued", n)
	}
}
