package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// stub answers every command in process, at once, as a free node would:
// a SET NX (with or without GET) takes the key, a script answers 1, INFO
// gives a run_id of the node's own. With it, BenchmarkOverhead measures
// what each library costs per lock and release with no server and no
// network in the way.
type stub struct{ runID string }

func (stub) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s stub) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(_ context.Context, cmd redis.Cmder) error {
		s.answer(cmd)
		return nil
	}
}

func (s stub) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(_ context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			s.answer(cmd)
		}
		return nil
	}
}

func (s stub) answer(cmd redis.Cmder) {
	switch cmd := cmd.(type) {
	case *redis.BoolCmd: // redsync's SetNX
		cmd.SetVal(true)
	case *redis.Cmd:
		switch cmd.Name() {
		case "info":
			cmd.SetVal("run_id:" + s.runID + "\r\n")
		case "set":
			cmd.SetErr(redis.Nil) // SET NX GET on a free key
		default:
			cmd.SetVal(int64(1))
		}
	default:
		cmd.SetErr(fmt.Errorf("stub: %s not answered", cmd.Name()))
	}
}

func stubNodes(b *testing.B, n int) []redis.UniversalClient {
	nodes := make([]redis.UniversalClient, n)
	for i := range n {
		rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("stub-%d:6379", i)})
		rdb.AddHook(stub{runID: fmt.Sprint("stub-", i)})
		b.Cleanup(func() { _ = rdb.Close() })
		nodes[i] = rdb
	}
	return nodes
}

// BenchmarkOverhead is one lock and release of a fresh key on N nodes
// that answer at once (see stub): the CPU and the allocations of each
// library itself, with no server and no network (go-redis's own command
// handling is included), this library's beside redsync's, compared as
// ratios in one run:
//
//	cd bench && go test -run '^$' -bench Overhead -count 6 | benchstat -col /lib -
func BenchmarkOverhead(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 3, 5} {
		b.Run(fmt.Sprintf("lib=redlock/N=%d", n), func(b *testing.B) {
			c, err := redlock.New(stubNodes(b, n))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				lock, err := c.TryAcquire(ctx, fmt.Sprint("o:", i), time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := lock.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("lib=redsync/N=%d", n), func(b *testing.B) {
			var pools []redsyncredis.Pool
			for _, c := range stubNodes(b, n) {
				pools = append(pools, redsyncgoredis.NewPool(c))
			}
			rs := redsync.New(pools...)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				m := rs.NewMutex(fmt.Sprint("o:", i), redsync.WithExpiry(time.Minute), redsync.WithTries(1))
				if err := m.LockContext(ctx); err != nil {
					b.Fatal(err)
				}
				if _, err := m.UnlockContext(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
