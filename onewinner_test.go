package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// separateClients returns count Clients over c's nodes, each with go-redis
// clients of its own as separate processes have, warmed up (connected, their
// nodes identified) as a long-running process's are.
func separateClients(t *testing.T, c *cluster, count int, opts ...redlock.Option) []*redlock.Client {
	t.Helper()
	rcs := make([]*redlock.Client, count)
	for i := range rcs {
		rcs[i] = mustNew(t, c.connect(t), opts...)
		l, err := rcs[i].TryAcquire(context.Background(), "warm-up", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		mustRelease(t, l)
	}
	return rcs
}

// raceTryAcquire has the Clients call TryAcquire on one free key at the
// same moment, and returns how many won.
func raceTryAcquire(t *testing.T, rcs []*redlock.Client, key string) int {
	t.Helper()
	ctx := context.Background()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		won   []*redlock.Lock
	)
	for _, rc := range rcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if l, err := rc.TryAcquire(ctx, key, 10*time.Second); err == nil {
				mu.Lock()
				won = append(won, l)
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, l := range won {
		mustRelease(t, l)
	}
	return len(won)
}

// TestTryAcquire_oneWinnerAtOnce: 100 separate Clients that TryAcquire one
// free key at the same moment elect exactly one winner in at least 95 % of
// runs, at N = 3 and N = 5, and never two.
func TestTryAcquire_oneWinnerAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("100 Clients per run")
	}
	for _, n := range []int{3, 5} {
		t.Run(map[int]string{3: "N=3", 5: "N=5"}[n], func(t *testing.T) {
			c := newCluster(t, n)
			rcs := separateClients(t, c, 100)
			const runs = 20
			none := 0
			for run := range runs {
				switch got := raceTryAcquire(t, rcs, fmt.Sprint("leader", run)); {
				case got > 1:
					t.Fatalf("run %d: %d winners", run, got)
				case got == 0:
					none++
				}
			}
			t.Logf("N=%d: no winner in %d of %d runs", n, none, runs)
			if none > 1 { // 95 % of 20 runs: at most one without a winner
				t.Fatalf("no winner in %d of %d runs", none, runs)
			}
		})
	}
}
