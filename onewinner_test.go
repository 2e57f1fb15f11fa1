package redlock_test

import (
	"context"
	"errors"
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
// same moment, and returns how many won, and whether every node answered
// every Client in time (no refusal for a node timeout, this time or at a
// node's last call).
func raceTryAcquire(t *testing.T, rcs []*redlock.Client, key string) (winners int, answered bool) {
	t.Helper()
	ctx := context.Background()
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		mu     sync.Mutex
		won    []*redlock.Lock
		failed bool
	)
	for _, rc := range rcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, err := rc.TryAcquire(ctx, key, time.Minute)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won = append(won, l)
			} else if errors.Is(err, context.DeadlineExceeded) {
				failed = true
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, l := range won {
		// On a machine so loaded that the nodes did not answer the
		// release in time, its keys expire with the ttl; each run has a
		// key of its own.
		if err := l.Release(ctx); errors.Is(err, redlock.ErrNotConfirmed) {
			failed = true
		} else if err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	return len(won), !failed
}

// TestTryAcquire_oneWinnerAtOnce: 100 separate Clients that TryAcquire one
// free key at the same moment elect exactly one winner in at least 95 % of
// runs, at N = 3 and N = 5, and never two.
//
// The 95 % are of the runs in which every node answered every Client
// within the node timeout: a run in which nodes did not (a machine so
// loaded that a call took longer) may elect nobody, as a node that fails
// is one no Client can count on. Such runs are still checked for two
// winners, and more runs are made in their place, up to maxRuns.
func TestTryAcquire_oneWinnerAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("100 Clients per run")
	}
	for _, n := range []int{3, 5} {
		t.Run(map[int]string{3: "N=3", 5: "N=5"}[n], func(t *testing.T) {
			c := newCluster(t, n)
			// A node timeout well above what a loaded machine takes to
			// answer: the elections are judged, not the machine.
			rcs := separateClients(t, c, 100, redlock.WithNodeTimeout(5*time.Second))
			const runs, maxRuns = 20, 100
			none, clean, run := 0, 0, 0
			for ; clean < runs && run < maxRuns; run++ {
				got, answered := raceTryAcquire(t, rcs, fmt.Sprint("leader", run))
				if got > 1 {
					t.Fatalf("run %d: %d winners", run, got)
				}
				if !answered {
					continue
				}
				clean++
				if got == 0 {
					none++
				}
			}
			t.Logf("N=%d: no winner in %d of %d runs in which every node answered in time (%d runs in all)", n, none, clean, run)
			if clean < runs {
				t.Fatalf("nodes failed to answer in time in %d of %d runs: the machine is too loaded to judge the elections", run-clean, run)
			}
			if none > 1 { // 95 % of 20 runs: at most one without a winner
				t.Fatalf("no winner in %d of %d runs", none, clean)
			}
		})
	}
}
