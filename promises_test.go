package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	t.Logf("11 attempts 5 ms apart: %v", took)
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

// TestClient_Do_unconfirmedReleaseIsNotTheJobsFailure: a job that returned
// nil while the lock was held throughout makes Do return nil, even when a
// majority of the nodes fails right after the job, so that the release
// cannot be confirmed: that is logged and told to the Observer, not
// returned (a worker that retries on error would run the job twice). Do
// used to return the release's ErrNotConfirmed.
func TestClient_Do_unconfirmedReleaseIsNotTheJobsFailure(t *testing.T) {
	c := newCluster(t, 3)
	var log syncBuffer
	rec := &recorder{}
	rc := c.client(t, redlock.WithLogger(slog.New(slog.NewTextHandler(&log, nil))), redlock.WithObserver(rec))
	healthy := func() {
		for _, s := range c.servers {
			s.SetError("")
		}
	}
	defer healthy()
	err := rc.Do(context.Background(), "job", time.Minute, func(ctx context.Context) error {
		c.servers[1].SetError("ERR the node fails")
		c.servers[2].SetError("ERR the node fails")
		return nil
	})
	if err != nil {
		t.Fatalf("Do of a job that returned nil under the lock: %v, want nil", err)
	}
	rel := rec.seen(redlock.OpRelease)
	if len(rel) != 1 || !errors.Is(rel[0].Err, redlock.ErrNotConfirmed) {
		t.Fatalf("release events %+v, want one with an error matching ErrNotConfirmed", rel)
	}
	if !strings.Contains(log.String(), "release was not confirmed") {
		t.Fatalf("log %q: want a warning that the release was not confirmed", log.String())
	}
	healthy()
	jobErr := errors.New("job failed")
	err = rc.Do(context.Background(), "job2", time.Minute, func(ctx context.Context) error {
		c.servers[1].SetError("ERR the node fails")
		c.servers[2].SetError("ERR the node fails")
		return jobErr
	})
	if err != jobErr {
		t.Fatalf("Do of a job that failed under the lock: %v, want the job's own error", err)
	}
}

// TestClient_Do_lostLockToldOnce: a lock lost while the job runs is one
// error matching ErrLockLost, told once, whatever the job returns: nil, its
// context's error, or an error wrapping its context's cause (which used to
// be told twice, with the release's unconfirmed outcome besides).
func TestClient_Do_lostLockToldOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		ret  func(ctx context.Context) error
		is   error
	}{
		{"nil", func(context.Context) error { return nil }, nil},
		{"ctx.Err", func(ctx context.Context) error { return ctx.Err() }, context.Canceled},
		{"wrapped cause", func(ctx context.Context) error { return fmt.Errorf("job: %w", context.Cause(ctx)) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			rc := c.client(t)
			err := rc.Do(context.Background(), "k", 500*time.Millisecond, func(ctx context.Context) error {
				c.servers[1].Close() // renewals find no quorum: the lock is lost by its margin
				c.servers[2].Close()
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
					t.Error("fn's context still open 10 s into a lock of 500 ms")
				}
				return tc.ret(ctx)
			})
			if !errors.Is(err, redlock.ErrLockLost) || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("Do: %v, want ErrLockLost (and %v)", err, tc.is)
			}
			if n := strings.Count(err.Error(), redlock.ErrLockLost.Error()); n != 1 || errors.Is(err, redlock.ErrNotConfirmed) {
				t.Fatalf("Do: %q tells of the loss %d times (or of the release besides), want once", err, n)
			}
		})
	}
}

// TestWithWaitTimeout: the wait for a key held elsewhere ends at the bound
// WithWaitTimeout gives, while ctx has no deadline, with an error that
// says so and matches ErrNotAcquired and ErrTaken, not a context's error;
// Do's job does not run. The bound must be positive.
func TestWithWaitTimeout(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	holder := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	defer holder.Release(ctx)
	rc := mustNew(t, c.connect(t))
	const bound = 200 * time.Millisecond
	start := time.Now()
	ran := false
	err := rc.Do(ctx, "k", time.Minute, func(context.Context) error { ran = true; return nil }, redlock.WithWaitTimeout(bound))
	took := time.Since(start)
	if ran || !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, redlock.ErrTaken) || errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "WithWaitTimeout") {
		t.Fatalf("Do on a held key with a wait bound: %v (ran %v); want ErrNotAcquired and ErrTaken, no context error, naming WithWaitTimeout", err, ran)
	}
	if took < bound || took > 5*time.Second {
		t.Fatalf("Do with a wait bound of %v returned after %v", bound, took)
	}
	for _, d := range []time.Duration{0, -time.Second} {
		if _, err := rc.Acquire(ctx, "k", time.Minute, redlock.WithWaitTimeout(d)); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Fatalf("WithWaitTimeout(%v): %v, want ErrInvalidArgument", d, err)
		}
	}
	// The caller's context still ends the wait first, and then says so.
	actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := rc.Acquire(actx, "k", time.Minute, redlock.WithWaitTimeout(time.Hour)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with ctx ending before the wait bound: %v, want the context's error", err)
	}
}

// TestWithWaitTimeout_hearsOutTheAttempt: the wait bound ends the waits
// between attempts, never an attempt under way: with a bound of 1 ns, or
// one shorter than the nodes' round trip, the attempt's answers are heard
// (ErrTaken for a held key) and nothing in the error matches a context
// error, as the caller's context has not ended. The bound cut the attempt,
// whose nodes then read "not waited for, the caller's context ended:
// context canceled".
func TestWithWaitTimeout_hearsOutTheAttempt(t *testing.T) {
	goRedisOnly(t, "it slows its nodes through go-redis hooks")
	rc, nodes := heldElsewhere(t, "k")
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		bound time.Duration
		late  time.Duration
	}{
		{"1ns", time.Nanosecond, 0},
		{"shorter than the round trip", 10 * time.Millisecond, 40 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.late > 0 {
				for _, n := range nodes {
					addHook(t, n.(*redis.Client), lateHook(tc.late))
				}
			}
			_, err := rc.Acquire(ctx, "k", time.Minute, redlock.WithWaitTimeout(tc.bound))
			if !errors.Is(err, redlock.ErrTaken) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
				!strings.Contains(err.Error(), "WithWaitTimeout") {
				t.Fatalf("Acquire of a held key, wait bound %v: %v; want ErrTaken, no context error, naming WithWaitTimeout", tc.bound, err)
			}
		})
	}
}

// TestWithWaitTimeout_passedGivesUpAtOnce: once the bound has passed, the
// failed attempt ends the call: it does not subscribe to the release or
// take a place in line first (each a round trip, then left again), so an
// Acquire bounded by 1 ns takes about what a TryAcquire takes. It took 3
// to 4 times as long (nodes 40 ms away: 122-167 ms against 41 ms).
func TestWithWaitTimeout_passedGivesUpAtOnce(t *testing.T) {
	goRedisOnly(t, "it slows its nodes through go-redis hooks")
	rc, nodes := heldElsewhere(t, "k")
	ctx := context.Background()
	for _, n := range nodes {
		addHook(t, n.(*redis.Client), lateHook(100*time.Millisecond))
	}
	start := time.Now()
	if _, err := rc.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("TryAcquire of a held key: %v, want ErrTaken", err)
	}
	try := time.Since(start)
	start = time.Now()
	if _, err := rc.Acquire(ctx, "k", time.Minute, redlock.WithWaitTimeout(time.Nanosecond)); !errors.Is(err, redlock.ErrTaken) {
		t.Fatalf("Acquire of a held key, bound 1 ns: %v, want ErrTaken", err)
	}
	// Ratios within one run: one round trip each, against three and more.
	if bounded := time.Since(start); bounded > 2*try {
		t.Fatalf("Acquire bounded by 1 ns took %v, a TryAcquire %v: want about the same", bounded, try)
	}
}

// heldElsewhere holds key on 3 embedded nodes for the whole test, and
// returns another Client of them (first contact made, a node timeout of
// 5 s, so that slowed nodes are waited for) and its nodes' clients.
func heldElsewhere(t *testing.T, key string) (*redlock.Client, []redis.UniversalClient) {
	t.Helper()
	c := newCluster(t, 3)
	ctx := context.Background()
	holder := mustTryAcquire(t, c.client(t), ctx, key, time.Minute)
	t.Cleanup(func() { _ = holder.Release(ctx) })
	nodes := c.connect(t)
	rc := mustNew(t, nodes, redlock.WithNodeTimeout(5*time.Second))
	_ = acquireSoon(t, rc, "warm-up", time.Minute).Release(ctx) // first contact made
	return rc, nodes
}
