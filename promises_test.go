package redlock_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
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

// TestErrTaken: an acquire refused because another holder has the key on
// a quorum matches ErrTaken besides ErrNotAcquired, and its message says
// the key is held elsewhere and by whom; nodes that fail do not make it
// ErrTaken, nor does a mix of refusals and failures without a quorum of
// either. Both used to be ErrNotAcquired alone, "taken on 0 of 3 nodes".
func TestErrTaken(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	holder := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	defer holder.Release(ctx)
	redlock.WaitSettled(holder)
	rc := mustNew(t, c.connect(t))
	_, err := rc.TryAcquire(ctx, "k", time.Minute)
	named := regexp.MustCompile(`"k": held by another holder on [23] of 3 nodes \(quorum 2\), its token beginning "` + holder.Token()[:8] + `"`)
	if !errors.Is(err, redlock.ErrTaken) || !errors.Is(err, redlock.ErrNotAcquired) || !named.MatchString(err.Error()) {
		t.Fatalf("TryAcquire of a held key: %v; want ErrTaken and ErrNotAcquired, saying it is held by the holder whose token begins %q", err, holder.Token()[:8])
	}
	// Acquire: its last attempt tells, when WithMaxAttempts or ctx ends it.
	_, err = rc.Acquire(ctx, "k", time.Minute, redlock.WithMaxAttempts(2))
	if !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Acquire of a held key, 2 attempts: %v, want ErrTaken", err)
	}
	actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = rc.Acquire(actx, "k", time.Minute)
	if !errors.Is(err, redlock.ErrTaken) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire of a held key until ctx ends: %v, want ErrTaken and the context's error", err)
	}

	// Held on node 0 only, the others down: neither makes a quorum.
	c.servers[1].Close()
	c.servers[2].Close()
	_, err = rc.TryAcquire(ctx, "k", time.Minute)
	if !errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, redlock.ErrTaken) || !strings.Contains(err.Error(), "held elsewhere on 1") {
		t.Fatalf("TryAcquire held on 1 node, 2 down: %v; want ErrNotAcquired, not ErrTaken, saying held elsewhere on 1", err)
	}
	// Every node down: nobody was seen holding it.
	c.servers[0].Close()
	_, err = rc.TryAcquire(ctx, "k", time.Minute)
	if !errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("TryAcquire with every node down: %v; want ErrNotAcquired, not ErrTaken", err)
	}
}
