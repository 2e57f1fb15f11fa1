package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// BenchmarkLock measures one acquire and release on embedded nodes,
// allocations included (compare runs with benchstat). The library's own
// cost with nodes that answer at once, beside redsync's, is the bench
// module's BenchmarkOverhead; the comparisons on real servers are the
// bench program's.
func BenchmarkLock(b *testing.B) {
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			nodes := make([]redis.UniversalClient, n)
			for i := range n {
				s := miniredis.RunT(b)
				rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
				b.Cleanup(func() { _ = rdb.Close() })
				nodes[i] = rdb
			}
			lockAndRelease(b, nodes)
		})
	}
}

// lockAndRelease acquires and releases one key on nodes b.N times.
func lockAndRelease(b *testing.B, nodes []redis.UniversalClient) {
	b.Helper()
	rc, err := redlock.New(nodes)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lock, err := rc.TryAcquire(ctx, "bench", time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			b.Fatal(err)
		}
		redlock.WaitSettled(lock)
	}
}
