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

// BenchmarkLock measures one acquire and release on embedded nodes: the
// library's own cost per lock, allocations included (compare runs with
// benchstat). The comparisons with other libraries on real servers are in
// the bench module.
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

// stubAnswers makes a go-redis client answer every script with 1 (and a
// SET NX GET with nil) at once,
// in process, alone or pipelined, without a connection, and INFO (which
// identifies the node's server) with a run_id of its own: with it,
// BenchmarkLockOverhead measures what the library itself costs per lock,
// with no server and no network.
type stubAnswers struct{ runID string }

func (stubAnswers) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s stubAnswers) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		s.answer(cmd)
		return nil
	}
}

func (s stubAnswers) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			s.answer(cmd)
		}
		return nil
	}
}

func (s stubAnswers) answer(cmd redis.Cmder) {
	switch cmd := cmd.(type) {
	case *redis.Cmd:
		switch cmd.Name() {
		case "info":
			cmd.SetVal("run_id:" + s.runID + "\r\n")
			return
		case "set": // a plain lock's acquire, SET NX GET: the key was free
			cmd.SetErr(redis.Nil)
			return
		}
		cmd.SetVal(int64(1))
	default:
		cmd.SetErr(fmt.Errorf("stub: %s not answered", cmd.Name()))
	}
}

func BenchmarkLockOverhead(b *testing.B) {
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			nodes := make([]redis.UniversalClient, n)
			for i := range n {
				rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("stub-%d:6379", i)})
				rdb.AddHook(stubAnswers{runID: fmt.Sprint("stub-", i)})
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
