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

// TestTryAcquire_splitWaitsForSlowReleases: a split vote designates this
// client (it holds one node of three, two others one each, under higher
// names); their releases land 150 ms later, as on a loaded machine, long
// after this client's round took (about a millisecond). The designated
// client goes on waiting for as long as a node timeout and wins. It used to
// give up after three rounds of 1, 2 and 4 times its first round's time.
func TestTryAcquire_splitWaitsForSlowReleases(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	warm, err := rc.TryAcquire(context.Background(), "warm-up", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	mustRelease(t, warm)
	// Tokens whose first bytes make names above any of this library's
	// (see holderName): this client is the one designated.
	c.servers[1].Set("k", "~~~~~~~~other")
	c.servers[2].Set("k", "}}}}}}}}third")
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(150 * time.Millisecond)
		c.servers[1].Del("k")
		c.servers[2].Del("k")
	}()
	l, err := rc.TryAcquire(context.Background(), "k", 10*time.Second) // node timeout 1 s
	<-released
	if err != nil {
		t.Fatalf("TryAcquire through a split whose others release in 150 ms: %v", err)
	}
	mustRelease(t, l)
}
