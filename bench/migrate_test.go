package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// TestMigrating_redsyncTiming: the options docs/migrating.md gives for
// redsync's defaults (32 tries, 50-250 ms apart) make an Acquire of a key
// held elsewhere give up within 20 % of redsync's time on the same nodes.
// The literal port, WithMaxAttempts(32) alone, took 37.5 s against
// redsync's 5 s (a listening waiter polls once a second on the default
// policy). Three of each run at once, on keys of their own; their means
// are compared.
func TestMigrating_redsyncTiming(t *testing.T) {
	var nodes []redis.UniversalClient
	var pools []redsyncredis.Pool
	for range 3 {
		s := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		nodes = append(nodes, rdb)
		pools = append(pools, redsyncgoredis.NewPool(rdb))
	}
	locker, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	rs := redsync.New(pools...)
	ctx := context.Background()
	const runs = 3
	keys := []string{"a", "b", "c"}
	for _, k := range keys {
		if _, err := locker.TryAcquire(ctx, k, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var theirs, ours time.Duration
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := rs.NewMutex(keys[i]).LockContext(ctx)
			mu.Lock()
			defer mu.Unlock()
			theirs += time.Since(start)
			if err == nil {
				t.Error("redsync acquired a held key")
			}
		}()
		go func() {
			defer wg.Done()
			start := time.Now()
			_, err := locker.Acquire(ctx, keys[i], 8*time.Second,
				redlock.WithMaxAttempts(32), redlock.WithRetry(redlock.RandomDelay(50*time.Millisecond, 250*time.Millisecond)))
			mu.Lock()
			defer mu.Unlock()
			ours += time.Since(start)
			if !errors.Is(err, redlock.ErrNotAcquired) {
				t.Errorf("Acquire: %v, want ErrNotAcquired after 32 attempts", err)
			}
		}()
	}
	wg.Wait()
	ratio := float64(ours) / float64(theirs)
	t.Logf("gave up after %v (redsync %v), a ratio of %.2f", ours/runs, theirs/runs, ratio)
	if ratio < 0.8 || ratio > 1.2 {
		t.Fatalf("the mapping gave up after %v on average, redsync after %v: not within 20 %%", ours/runs, theirs/runs)
	}
}
