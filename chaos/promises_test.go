package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// What a user reads from the library, on real redis-server nodes, over the
// suite's transport (REDLOCK_CHAOS_TRANSPORT): a key held elsewhere told
// from nodes that fail (ErrTaken), a retry policy given followed as given,
// and what Do returns.

// TestContract_errTaken: a key another holder has on every node gives
// ErrTaken, naming the holder by its token's start; held on one node with
// the other two down, or with every node down, it does not.
func TestContract_errTaken(t *testing.T) {
	eachTransport(t, func(t *testing.T) {
		nodes, connect := realNodes(t, 3)
		ctx := context.Background()
		holder, err := locker(t, connect()).TryAcquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		rc := locker(t, connect())
		_, err = rc.TryAcquire(ctx, "k", time.Minute)
		if !errors.Is(err, redlock.ErrTaken) || !errors.Is(err, redlock.ErrNotAcquired) ||
			!strings.Contains(err.Error(), "held by another holder on") || !strings.Contains(err.Error(), `its token beginning "`+holder.Token()[:8]+`"`) {
			t.Fatalf("TryAcquire of a held key: %v; want ErrTaken, naming the holder %q", err, holder.Token()[:8])
		}
		nodes[1].Stop()
		nodes[2].Stop()
		_, err = rc.TryAcquire(ctx, "k", time.Minute)
		if !errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, redlock.ErrTaken) || !strings.Contains(err.Error(), "held elsewhere on 1") {
			t.Fatalf("TryAcquire held on 1 node, 2 down: %v; want ErrNotAcquired, not ErrTaken", err)
		}
		nodes[0].Stop()
		_, err = rc.TryAcquire(ctx, "k", time.Minute)
		if !errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, redlock.ErrTaken) {
			t.Fatalf("TryAcquire with every node down: %v; want ErrNotAcquired, not ErrTaken", err)
		}
	})
}

// TestContract_givenRetryOnRefusingNodes: WithRetry(RandomDelay(5ms, 5ms))
// and WithMaxAttempts(11) on nodes that refuse connections make 11
// attempts in about 55 ms, as node-redlock's do; a 250 ms floor between
// attempts applied to every policy, and they took 3.2 s.
func TestContract_givenRetryOnRefusingNodes(t *testing.T) {
	eachTransport(t, func(t *testing.T) {
		nodes, connect := realNodes(t, 3)
		ev := &events{}
		rc := locker(t, connect(), redlock.WithObserver(ev))
		ctx := context.Background()
		lock, err := rc.TryAcquire(ctx, "warm-up", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		_ = lock.Release(ctx)
		for _, nd := range nodes {
			nd.Stop() // its port refuses connections
		}
		start := time.Now()
		_, err = rc.Acquire(ctx, "k", time.Second,
			redlock.WithRetry(redlock.RandomDelay(5*time.Millisecond, 5*time.Millisecond)), redlock.WithMaxAttempts(11))
		took := time.Since(start)
		if !errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, redlock.ErrTaken) {
			t.Fatalf("Acquire on refusing nodes: %v; want ErrNotAcquired, not ErrTaken", err)
		}
		if got := ev.of(redlock.OpAcquire); len(got) != 2 || got[1].Attempts != 11 {
			t.Fatalf("acquire events %+v; want the warm-up's and one of 11 attempts", got)
		}
		t.Logf("11 attempts 5 ms apart: %v", took)
		if took < 50*time.Millisecond || took > time.Second {
			t.Fatalf("11 attempts 5 ms apart took %v; want about 55 ms (at least 50 ms, under 1 s)", took)
		}
	})
}

// TestContract_doResults: Do returns its job's nil when a majority of the
// nodes freezes right after the job, so that only the release is
// unconfirmed (it is told to the Observer); Do's wait bound ends a wait for
// a key held elsewhere at the bound, with ctx unbounded; a lock lost while
// the job runs is told once, though the job returns its context's cause.
func TestContract_doResults(t *testing.T) {
	eachTransport(t, func(t *testing.T) {
		nodes, connect := realNodes(t, 3)
		thaw := func() {
			for _, nd := range nodes {
				_ = nd.thaw()
			}
		}
		t.Cleanup(thaw)
		ev := &events{}
		rc := locker(t, connect(), redlock.WithObserver(ev), redlock.WithNodeTimeout(200*time.Millisecond))
		ctx := context.Background()

		err := rc.Do(ctx, "job", time.Minute, func(context.Context) error {
			for _, nd := range nodes[1:] {
				if err := nd.freeze(); err != nil {
					t.Error(err)
				}
			}
			return nil
		})
		thaw()
		if err != nil {
			t.Fatalf("Do of a job that returned nil under the lock, release unconfirmed: %v; want nil", err)
		}
		if rel := ev.of(redlock.OpRelease); len(rel) != 1 || !errors.Is(rel[0].Err, redlock.ErrNotConfirmed) {
			t.Fatalf("release events %+v; want one with an error matching ErrNotConfirmed", rel)
		}

		held, err := locker(t, connect()).TryAcquire(ctx, "held", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release(ctx)
		const bound = 300 * time.Millisecond
		start := time.Now()
		err = rc.Do(ctx, "held", time.Minute, func(context.Context) error { return nil }, redlock.WithWaitTimeout(bound))
		if took := time.Since(start); took < bound || took > 5*time.Second {
			t.Fatalf("Do with a wait bound of %v on a held key returned after %v", bound, took)
		}
		if !errors.Is(err, redlock.ErrTaken) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do with a wait bound on a held key: %v; want ErrTaken and no context error", err)
		}

		err = rc.Do(ctx, "lost", time.Second, func(ctx context.Context) error {
			for _, nd := range nodes[1:] {
				if err := nd.freeze(); err != nil {
					t.Error(err)
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Error("the job's context still open 10 s into a lock of 1 s")
			}
			return fmt.Errorf("job: %w", context.Cause(ctx))
		})
		if n := strings.Count(fmt.Sprint(err), redlock.ErrLockLost.Error()); !errors.Is(err, redlock.ErrLockLost) || n != 1 {
			t.Fatalf("Do of a job whose lock was lost: %q tells of the loss %d times; want ErrLockLost, once", err, n)
		}
	})
}
