package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// TestWithRetry_followedOnRefusingNodes: a policy given with WithRetry is
// followed as given while every node refuses connections: 11 attempts 5 ms
// apart take about 55 ms. A floor of 250 ms between attempts while no
// quorum can form applied to every policy, and they took 3.2 s.
func TestWithRetry_followedOnRefusingNodes(t *testing.T) {
	c := newCluster(t, 3)
	for _, s := range c.servers {
		s.Close()
	}
	rec := &recorder{}
	rc := c.client(t, redlock.WithObserver(rec))
	start := time.Now()
	_, err := rc.Acquire(context.Background(), "k", time.Second,
		redlock.WithRetry(redlock.RandomDelay(5*time.Millisecond, 5*time.Millisecond)), redlock.WithMaxAttempts(11))
	took := time.Since(start)
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("Acquire on refusing nodes: %v, want ErrNotAcquired", err)
	}
	if got := rec.seen(redlock.OpAcquire); len(got) != 1 || got[0].Attempts != 11 {
		t.Fatalf("acquire events %+v, want one of 11 attempts", got)
	}
	// 10 waits of 5 ms; the bound is wide for a loaded machine.
	if took < 50*time.Millisecond || took > time.Second {
		t.Fatalf("11 attempts 5 ms apart took %v, want about 55 ms (at least 50 ms, under 1 s)", took)
	}
}
