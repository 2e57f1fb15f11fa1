package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// forever is the longest ttl a caller can pass: a lock meant to be held
// until it is released.
const forever = time.Duration(math.MaxInt64)

// kindOptions are the kinds of lock, each as one Acquire's options and the
// keys it locks.
var kindOptions = []struct {
	name string
	opts []redlock.AcquireOption
}{
	{"plain", nil},
	{"fenced", []redlock.AcquireOption{redlock.WithFencing()}},
	{"reentrant", []redlock.AcquireOption{redlock.WithOwner("o")}},
	{"read", []redlock.AcquireOption{redlock.ForRead()}},
	{"write", []redlock.AcquireOption{redlock.ForWrite()}},
	{"semaphore", []redlock.AcquireOption{redlock.WithPermits(1)}},
	{"fair", []redlock.AcquireOption{redlock.Fair()}},
}

// contenderFor is the acquire of another holder that a lock of the
// kind's options excludes: a writer for the read lock, the same kind for
// the others (another owner for the reentrant lock).
func contenderFor(opts []redlock.AcquireOption, name string) []redlock.AcquireOption {
	switch name {
	case "read":
		return []redlock.AcquireOption{redlock.ForWrite()}
	case "reentrant":
		return []redlock.AcquireOption{redlock.WithOwner("another")}
	}
	return opts
}

// TestLock_Extend_forever: a lock extended by the longest Duration (a
// "forever" lock) is kept that long on the nodes, and nobody else gets it
// once its first ttl has passed. The milliseconds of the ttl used to
// overflow to a negative PX, which the scripts' never-shorten comparison
// took as nothing to do while answering "held": Extend returned nil with
// an Until 292 years ahead, and another Client acquired after the first
// ttl.
func TestLock_Extend_forever(t *testing.T) {
	for _, kc := range kindOptions {
		t.Run(kc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			ctx := context.Background()
			lock := mustTryAcquire(t, c.client(t), ctx, "k", time.Second, kc.opts...)
			if err := lock.Extend(ctx, forever); err != nil {
				t.Fatalf("Extend(forever): %v", err)
			}
			if v := lock.Validity(); v < forever/2 {
				t.Fatalf("Validity after Extend(forever) = %v", v)
			}
			redlock.WaitSettled(lock)
			for _, s := range c.servers {
				s.FastForward(time.Hour)
			}
			other, err := c.client(t).TryAcquire(ctx, "k", time.Second, contenderFor(kc.opts, kc.name)...)
			if err == nil {
				t.Fatalf("another holder acquired the key an hour after a lock extended forever (validity %v left)", lock.Validity())
			}
			mustNotAcquire(t, err)
			_ = other
			mustRelease(t, lock)
		})
	}
}

// TestClient_Acquire_forever: an Acquire for the longest Duration takes the
// lock and the nodes keep it; it was retried until ctx ended ("ERR invalid
// expire time": the overflowed PX was negative).
func TestClient_Acquire_forever(t *testing.T) {
	for _, kc := range kindOptions {
		t.Run(kc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			lock, err := c.client(t).Acquire(ctx, "k", forever, kc.opts...)
			if err != nil {
				t.Fatalf("Acquire(forever): %v", err)
			}
			redlock.WaitSettled(lock)
			for _, s := range c.servers {
				s.FastForward(100 * 24 * time.Hour)
			}
			_, err = c.client(t).TryAcquire(ctx, "k", time.Second, contenderFor(kc.opts, kc.name)...)
			mustNotAcquire(t, err)
			mustRelease(t, lock)
		})
	}
	t.Run("multi-key", func(t *testing.T) {
		c := newCluster(t, 3)
		ctx := context.Background()
		lock, err := c.client(t).TryAcquireAll(ctx, []string{"j", "k"}, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := lock.Extend(ctx, forever); err != nil {
			t.Fatalf("Extend(forever): %v", err)
		}
		stillHeldAfter(t, c, lock, time.Hour)
	})
}

// stillHeldAfter moves the nodes' clocks on by d and fails t unless
// another Client is refused the lock's key; then it releases the lock.
func stillHeldAfter(t *testing.T, c *cluster, lock *redlock.Lock, d time.Duration) {
	t.Helper()
	redlock.WaitSettled(lock)
	for _, s := range c.servers {
		s.FastForward(d)
	}
	_, err := c.client(t).TryAcquire(context.Background(), lock.Key(), time.Second)
	mustNotAcquire(t, err)
	mustRelease(t, lock)
}

// TestClient_Resume_forever: a lock resumed for the longest Duration is
// kept that long on the nodes (Resume extends it).
func TestClient_Resume_forever(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t), ctx, "k", time.Second)
	resumed, err := c.client(t).Resume(ctx, "k", lock.Token(), forever)
	if err != nil {
		t.Fatalf("Resume(forever): %v", err)
	}
	stillHeldAfter(t, c, resumed, time.Hour)
}

// TestClient_WithPermits_huge: a semaphore of math.MaxInt permits still
// needs every node (its quorum is n once permits ≥ n): with every node
// down, no permit. The quorum's product permits·n used to overflow, and a
// TryAcquire with every node down returned a lock.
func TestClient_WithPermits_huge(t *testing.T) {
	for _, n := range []int{3, 5} {
		c := newCluster(t, n)
		rc := c.client(t)
		ctx := context.Background()
		huge := []int{math.MaxInt, math.MaxInt - 1, math.MaxInt / 2, math.MaxInt / 3, math.MaxInt/4 + 1}
		for _, permits := range huge {
			lock := mustTryAcquire(t, rc, ctx, "k", time.Second, redlock.WithPermits(permits))
			if held := len(c.holdersAny("k")); held != n {
				t.Errorf("N = %d, %d permits: held on %d nodes, want every node", n, permits, held)
			}
			mustRelease(t, lock)
		}
		for _, s := range c.servers {
			s.Close()
		}
		for _, permits := range huge {
			_, err := rc.TryAcquire(ctx, "k", time.Second, redlock.WithPermits(permits))
			if !errors.Is(err, redlock.ErrNotAcquired) {
				t.Errorf("N = %d, %d permits, every node down: err = %v, want ErrNotAcquired", n, permits, err)
			}
		}
	}
}

// TestClient_WithPermits_mismatch: a semaphore asked with another permit
// count than its key holds fails at once as misconfigured; it was tried
// again until ctx ended. Counts too large for Lua's numbers to tell apart
// are told apart all the same.
func TestClient_WithPermits_mismatch(t *testing.T) {
	for _, tc := range []struct{ held, asked int }{{2, 3}, {math.MaxInt, math.MaxInt - 1}} {
		c := newCluster(t, 3)
		rc := c.client(t)
		ctx := context.Background()
		lock := mustTryAcquire(t, rc, ctx, "k", time.Minute, redlock.WithPermits(tc.held))
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err := rc.Acquire(ctx, "k", time.Second, redlock.WithPermits(tc.asked))
		if !errors.Is(err, redlock.ErrMisconfigured) || ctx.Err() != nil {
			t.Errorf("Acquire with %d permits of a semaphore of %d: err = %v (ctx %v), want ErrMisconfigured at once", tc.asked, tc.held, err, ctx.Err())
		}
		cancel()
		mustRelease(t, lock)
	}
}

// TestLock_autoRenew_hugeNodeTimeout: with WithNodeTimeout(math.MaxInt64)
// a renewed lock whose renewals fail still ends its renewal margin before
// Until, a quarter of the validity at most. The margin (node timeout plus
// drift) used to overflow, and Done closed after Until.
func TestLock_autoRenew_hugeNodeTimeout(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	rc := c.client(t, redlock.WithClock(clock), redlock.WithNodeTimeout(forever))
	lock := mustTryAcquire(t, rc, context.Background(), "k", time.Second, redlock.WithAutoRenew())
	for _, s := range c.servers {
		s.Close()
	}
	until := lock.Until()
	clock.Advance(until.Add(-time.Millisecond).Sub(clock.Now()))
	select {
	case <-lock.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("Done still open a millisecond before Until with every renewal failing")
	}
}

// FuzzOptions: whatever durations and counts a caller passes (ttl, node
// timeout, permits, fence horizon, drift factor, retry policy), each is
// either refused with ErrInvalidArgument before any node is contacted, or
// honoured: a lock granted is kept on the nodes at least as long as its
// validity says, Extend keeps that true, and nothing panics. Run with
// `go test -fuzz FuzzOptions`; `go test` runs the seeds below.
func FuzzOptions(f *testing.F) {
	const maxInt = int64(math.MaxInt64)
	for _, seed := range []struct {
		ttl, extend, timeout, permits, horizon, retryA, retryB int64
		factor                                                 uint16
		exponential                                            bool
	}{
		{int64(time.Second), int64(time.Second), 0, 0, 0, 0, 0, 655, false},
		{int64(time.Second), maxInt, 0, 0, 0, 0, 0, 655, false},
		{maxInt, maxInt, 0, 0, 0, 0, 0, 655, false},
		{maxInt - 1, maxInt, maxInt, 0, maxInt, 1, maxInt, 655, true},
		{maxInt, maxInt - 999_999, maxInt, maxInt, maxInt, maxInt, maxInt, 65535, true},
		{int64(time.Second), maxInt, maxInt, 1, 0, 1, 1, 0, false},
		{int64(time.Second), maxInt, 0, maxInt / 2, 0, 0, 0, 655, false},
		{int64(5 * time.Second), 1, int64(time.Nanosecond), maxInt / 2, 0, 0, 0, 655, false},
		{int64(3 * time.Millisecond), int64(time.Hour), 0, 2, 0, 0, 0, 655, false},
		{-1, -1, -1, -1, -1, -1, -1, 655, true},
		{0, 0, 0, 0, 0, 0, 0, 0, false},
		{math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64, 655, true},
		{int64(time.Minute), maxInt, int64(time.Hour), maxInt/3 + 1, int64(100 * 365 * 24 * time.Hour), maxInt - 5, maxInt, 64000, true},
	} {
		f.Add(seed.ttl, seed.extend, seed.timeout, seed.permits, seed.horizon, seed.retryA, seed.retryB, seed.factor, seed.exponential)
	}
	f.Fuzz(func(t *testing.T, ttl, extend, timeout, permits, horizon, retryA, retryB int64, factor uint16, exponential bool) {
		c := newCluster(t, 3)
		var opts []redlock.Option
		if timeout != 0 {
			opts = append(opts, redlock.WithNodeTimeout(time.Duration(timeout)))
		}
		if horizon != 0 {
			opts = append(opts, redlock.WithFenceHorizon(time.Duration(horizon)))
		}
		opts = append(opts, redlock.WithDriftFactor(float64(factor)/65536))
		policy := redlock.RandomDelay(time.Duration(retryA), time.Duration(retryB))
		if exponential {
			policy = redlock.ExponentialBackoff(time.Duration(retryA), time.Duration(retryB))
		}
		if retryA != 0 {
			opts = append(opts, redlock.WithRetry(policy))
		}
		rc, err := redlock.New(c.clients, opts...)
		if err == nil {
			noneLeftRenewed(t, rc)
		}
		if c.commands() != 0 {
			t.Fatalf("New contacted the nodes")
		}
		if err != nil {
			if !errors.Is(err, redlock.ErrInvalidArgument) {
				t.Fatalf("New: %v, want nil or ErrInvalidArgument", err)
			}
			return
		}
		if retryA != 0 {
			// A policy that New accepted gives delays within its bounds.
			lo, hi := time.Duration(retryA), time.Duration(retryB)
			if exponential {
				lo = 0
			}
			for _, failed := range []int{0, 1, 2, 62, 63, 64, math.MaxInt} {
				if d := policy.Delay(failed); d < lo || d > hi {
					t.Fatalf("Delay(%d) = %v, outside [%v, %v]", failed, d, lo, hi)
				}
			}
		}
		var acq []redlock.AcquireOption
		if permits != 0 {
			acq = append(acq, redlock.WithPermits(int(permits)))
		}
		if horizon != 0 {
			acq = append(acq, redlock.WithFencing())
		}
		if timeout%2 == 0 {
			acq = append(acq, redlock.WithAutoRenew())
		}
		ctx := context.Background()
		lock, err := rc.TryAcquire(ctx, "k", time.Duration(ttl), acq...)
		if errors.Is(err, redlock.ErrInvalidArgument) {
			if c.commands() != 0 {
				t.Fatalf("TryAcquire refused %v after contacting the nodes", err)
			}
			return
		}
		if err != nil {
			mustNotAcquire(t, err)
			// Healthy nodes refuse only a lock whose validity is spent
			// (a ttl of a few ms, a drift factor near 1) or whose node
			// timeout is too short to answer in.
			if ttl >= int64(time.Second) && (timeout == 0 || timeout >= int64(5*time.Second)) && factor < 60000 {
				t.Fatalf("TryAcquire for %v on healthy nodes: %v", time.Duration(ttl), err)
			}
			return
		}
		defer lock.Release(ctx)
		q := 2 // of 3 nodes; a semaphore of 2 permits or more needs all 3
		if permits > 1 {
			q = 3
		}
		keptAtLeastValidity(t, c, lock, q)
		if err := lock.Extend(ctx, time.Duration(extend)); err != nil && !errors.Is(err, redlock.ErrNotConfirmed) && !errors.Is(err, redlock.ErrLockLost) && !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Fatalf("Extend: %v", err)
		} else if err == nil {
			keptAtLeastValidity(t, c, lock, q)
		}
		if err := lock.Release(ctx); err != nil && !errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("Release: %v", err)
		}
	})
}

// keptAtLeastValidity fails the test unless q of the nodes keep the lock's
// key at least as long as its validity.
func keptAtLeastValidity(t *testing.T, c *cluster, lock *redlock.Lock, q int) {
	t.Helper()
	redlock.WaitSettled(lock)
	v := lock.Validity()
	if v <= 0 {
		return // over already: a tiny ttl
	}
	kept := 0
	for _, s := range c.servers {
		if s.Exists(lock.Key()) && s.TTL(lock.Key()) >= v-time.Millisecond {
			kept++
		}
	}
	if kept < q {
		t.Fatalf("validity %v, but only %d nodes keep the key that long (TTLs %v), want %d", v, kept, ttls(c, lock.Key()), q)
	}
}

func ttls(c *cluster, key string) []time.Duration {
	var out []time.Duration
	for _, s := range c.servers {
		out = append(out, s.TTL(key))
	}
	return out
}

// slowCluster is a cluster whose clients reach every node through a
// lateLink that holds each command for delay: a network that slow.
func slowCluster(t *testing.T, n int, delay time.Duration, opts *redis.Options) (*cluster, []redis.UniversalClient) {
	t.Helper()
	c := newCluster(t, n)
	clients := make([]redis.UniversalClient, n)
	for i, addr := range c.addrs {
		link := newLateLink(t, addr)
		link.setDelay(delay)
		o := *opts
		o.Addr = link.Addr()
		rdb := redis.NewClient(&o)
		t.Cleanup(func() { _ = rdb.Close() })
		clients[i] = rdb
	}
	return c, clients
}

// TestClient_Acquire_slowerThanTheNodeTimeout: with every node farther
// away than the node timeout derived from the ttl (600 ms a round trip,
// against the 500 ms of a 5 s ttl), Acquire still takes the lock, as
// redsync and bsm/redislock do: the node timeout follows the round trips
// it sees. It used to time out on every node, every attempt, forever.
func TestClient_Acquire_slowerThanTheNodeTimeout(t *testing.T) {
	libraryTimeouts(t)
	_, clients := slowCluster(t, 3, 600*time.Millisecond, &redis.Options{MaxRetries: -1})
	rc := mustNew(t, clients)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	lock, err := rc.Acquire(ctx, "k", 5*time.Second)
	if err != nil {
		t.Fatalf("Acquire with every node 600 ms away and a 5 s ttl: %v", err)
	}
	if v := lock.Validity(); v <= 0 {
		t.Fatalf("validity %v", v)
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// TestClient_Acquire_loneNodeCutAtDeadline: one node whose client cuts
// calls at their deadline (ContextTimeoutEnabled), 300 ms a round trip,
// under the 500 ms node timeout of a 5 s ttl, but not with a new
// connection's handshake on top: Acquire takes the lock. Each attempt's
// dial, greeting and call used to be cut at the node timeout, and the
// Client dialled again forever.
func TestClient_Acquire_loneNodeCutAtDeadline(t *testing.T) {
	libraryTimeouts(t)
	_, clients := slowCluster(t, 1, 300*time.Millisecond, &redis.Options{MaxRetries: -1, ContextTimeoutEnabled: true})
	rc := mustNew(t, clients)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	lock, err := rc.Acquire(ctx, "k", 5*time.Second)
	if err != nil {
		t.Fatalf("Acquire on a lone node 300 ms away: %v", err)
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// TestClient_TryAcquire_otherCallersDeadlines: a call that another
// caller's deadline ended before its node answered (the node was slow for
// it) does not make the node look failing: a TryAcquire without a
// deadline right after still waits for a quorum of answers and takes a
// free key. Such calls used to mark every node failing ("not waited for,
// failing since its last call"), and the next TryAcquire counted one
// answer and gave up.
func TestClient_TryAcquire_otherCallersDeadlines(t *testing.T) {
	goRedisOnly(t, "it needs a connection per call (a go-redis pool): rueidis pipelines a node's calls on shared connections, where a late call holds up those behind it")
	c := newCluster(t, 3)
	clients, links := linkedNodes(t, c)
	// Without batching each call has its own connection: the calls the
	// deadline ended are still out when the next TryAcquire's are sent.
	rc := mustNew(t, clients, redlock.WithBatching(false))
	mustRelease(t, mustTryAcquire(t, rc, context.Background(), "warm", time.Second)) // dialled, identified
	for _, l := range links {
		l.setDelay(500 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	_, err := rc.TryAcquire(ctx, "a", time.Second)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryAcquire with a 5 ms deadline on nodes 500 ms away: err = %v", err)
	}
	for _, l := range links {
		l.setDelay(0)
	}
	lock, err := rc.TryAcquire(context.Background(), "b", time.Second)
	if err != nil {
		t.Fatalf("TryAcquire on healthy nodes after another caller's deadline: %v", err)
	}
	mustRelease(t, lock)
}

// TestClient_replicaRefused: a node whose INFO says it is a replica (a
// writable one takes our writes) does not count towards a lock: as a
// minority the lock is taken on the others, and the node is reported
// once; as a majority Acquire fails at once as misconfigured. Once the
// replica is promoted, it counts again. A writable replica used to be
// accepted without a word: one restart of its master emptied two nodes
// at once.
func TestClient_replicaRefused(t *testing.T) {
	c := newCluster(t, 3)
	for _, i := range []int{1, 2} {
		infoSays(c.servers[i], func() string {
			return fmt.Sprintf("# Replication\r\nrole:slave\r\nmaster_host:10.0.0.%d\r\nmaster_port:6379\r\n", i)
		})
	}
	rec := &recorder{}
	rc := c.client(t, redlock.WithObserver(rec))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := rc.Acquire(ctx, "k", time.Second)
	if !errors.Is(err, redlock.ErrMisconfigured) || ctx.Err() != nil || !strings.Contains(err.Error(), "replica of 10.0.0.1:6379") {
		t.Fatalf("Acquire with 2 of 3 nodes replicas: err = %v, want ErrMisconfigured at once, naming the replica", err)
	}
	if got := rec.seen(redlock.OpMisconfigured); len(got) != 2 {
		t.Errorf("OpMisconfigured events: %d, want one per replica", len(got))
	}

	// Node 2 promoted, node 1 still a replica: a quorum of masters.
	infoSays(c.servers[2], func() string { return "# Replication\r\nrole:master\r\n" })
	waitFor(t, "the promoted node to count", func() bool {
		lock, err := rc.TryAcquire(ctx, "k", time.Second)
		if err != nil {
			return false
		}
		_ = lock.Release(ctx)
		return true
	})
	if held := c.holders("k", ""); len(held) != 0 {
		t.Fatalf("keys left on %v", held)
	}
}

// TestClient_Inspect_replicaRefused: Inspect and Leader read the nodes as
// every operation does, so a node whose INFO says it is a replica counts
// for them no more than for a lock: Inspect reports it misconfigured,
// not what it holds. They used to read every node on their own, and showed
// a replica's key as a node's hold.
func TestClient_Inspect_replicaRefused(t *testing.T) {
	c := newCluster(t, 3)
	infoSays(c.servers[1], func() string { return "# Replication\r\nrole:slave\r\nmaster_host:10.0.0.1\r\nmaster_port:6379\r\n" })
	if err := c.servers[1].Set("k", "REPLICATOKENXXXXXXXXXXXXXX"); err != nil {
		t.Fatal(err)
	}
	rc := c.client(t)
	in, err := rc.Inspect(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if nd := in.Nodes[1]; !errors.Is(nd.Err, redlock.ErrMisconfigured) || nd.Held {
		t.Fatalf("the replica's NodeHold = %+v, want its Err to match ErrMisconfigured, nothing held", nd)
	}
	if nd := in.Nodes[0]; nd.Err != nil || nd.Held {
		t.Fatalf("a master's NodeHold = %+v, want free", nd)
	}
}

// TestClient_evictingNodeReported: a node whose INFO shows a memory limit
// with an evicting policy is reported once, to the Observer as
// OpMisconfigured and to the logger; the lock is still taken (the node
// holds it until memory runs short). It used to be accepted without a
// word, and a second holder got in when the keys were evicted.
func TestClient_evictingNodeReported(t *testing.T) {
	c := newCluster(t, 3)
	infoSays(c.servers[1], func() string {
		return "# Memory\r\nmaxmemory:104857600\r\nmaxmemory_policy:allkeys-lru\r\n# Persistence\r\naof_enabled:0\r\n"
	})
	infoSays(c.servers[2], func() string {
		return "# Memory\r\nmaxmemory:104857600\r\nmaxmemory_policy:noeviction\r\n"
	})
	rec := &recorder{}
	var logged strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	rc := c.client(t, redlock.WithObserver(rec), redlock.WithLogger(logger))
	ctx := context.Background()
	for i := range 3 {
		// A key each: on a loaded machine a release may not be confirmed
		// in time (its keys expire), which is not what this test reads.
		err := acquireSoon(t, rc, fmt.Sprint("k", i), time.Second).Release(ctx)
		if err != nil && !errors.Is(err, redlock.ErrNotConfirmed) {
			t.Fatalf("Release: %v", err)
		}
	}
	got := rec.seen(redlock.OpMisconfigured)
	if len(got) != 1 || got[0].Node != 1 || !errors.Is(got[0].Err, redlock.ErrMisconfigured) || !strings.Contains(got[0].Err.Error(), "maxmemory-policy allkeys-lru") {
		t.Fatalf("OpMisconfigured events = %v, want one for node 1 naming its policy", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logged.String(), "evict") || strings.Count(logged.String(), "append-only") != 1 {
		t.Fatalf("log:\n%s\nwant the eviction warned and the missing append-only file noted, once each", logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestClient_TryAcquire_hungFromTheStart: a node that hangs from a
// Client's first contact costs that contact the base node timeout, not the
// longer one a node nothing is known of gets while no node has answered
// (two thirds of the validity: 19.8 s for a 30 s ttl).
func TestClient_TryAcquire_hungFromTheStart(t *testing.T) {
	libraryTimeouts(t)
	c := newCluster(t, 2)
	hung := newHungNode(t)
	stuck := redis.NewClient(&redis.Options{Addr: hung.Addr(), ReadTimeout: time.Minute, MaxRetries: -1})
	t.Cleanup(func() { _ = stuck.Close() })
	rc := mustNew(t, []redis.UniversalClient{c.clients[0], c.clients[1], stuck})
	ctx := context.Background()
	start := time.Now()
	lock := mustTryAcquire(t, rc, ctx, "k", 30*time.Second)
	// The base timeout of a 30 s ttl is 1 s; a wide bound for a loaded
	// machine, far below 19.8 s.
	if took := time.Since(start); took > 8*time.Second {
		t.Fatalf("first TryAcquire with a node hung from the start took %v", took)
	}
	if v := lock.Validity(); v < 20*time.Second {
		t.Fatalf("validity %v left of a 30 s lock", v)
	}
	_ = lock.Release(ctx)

	// Inspect waits for every node: a hung one costs its base timeout too.
	start = time.Now()
	if _, err := rc.Inspect(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Fatalf("Inspect with a hung node took %v", took)
	}
}

// TestLock_Extend_notPastUntil: an Extend whose nodes do not answer
// returns by the lock's Until, not after the node timeout: confirmed later,
// it could not give the lock back.
func TestLock_Extend_notPastUntil(t *testing.T) {
	c := newCluster(t, 3)
	nodes, links := linkedNodes(t, c)
	rc := mustNew(t, nodes, redlock.WithNodeTimeout(20*time.Second))
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "k", 2*time.Second)
	redlock.WaitSettled(lock)
	links[1].setDelay(time.Minute)
	links[2].setDelay(time.Minute)
	start := time.Now()
	err := lock.Extend(ctx, 2*time.Second)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Extend took %v with a lock of 2 s", took)
	}
	if err == nil {
		t.Fatal("Extend confirmed with a majority not answering")
	}
}

// TestClient_Acquire_silentAttemptWaitsForItsCalls: when no node answered
// an attempt in time (every node farther away than a first contact's
// round trips allow), the next attempt waits for the calls still on their
// way, rather than sending its own behind them and spending its node
// timeout in their queue: the lock comes at the second attempt. It came at
// the fourth (5.3 s for a semaphore on 5 nodes 443 ms away, ttl 2 s).
func TestClient_Acquire_silentAttemptWaitsForItsCalls(t *testing.T) {
	libraryTimeouts(t)
	_, clients := slowCluster(t, 5, 443*time.Millisecond, &redis.Options{MaxRetries: -1})
	rec := &recorder{}
	rc := mustNew(t, clients, redlock.WithBatching(false), redlock.WithObserver(rec),
		redlock.WithRetry(redlock.ExponentialBackoff(2*time.Millisecond, 40*time.Millisecond)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := rc.Do(ctx, "a", 2*time.Second, func(context.Context) error { return nil }, redlock.WithPermits(2), redlock.WithFencing())
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	got := rec.seen(redlock.OpAcquire)
	if len(got) != 1 || got[0].Attempts > 2 {
		t.Fatalf("acquires %+v: want one, in at most 2 attempts", got)
	}
}

// TestClient_Fair_firstContactPatience: a fair waiter's place is kept for
// its patience, 4 s (or 8 base node timeouts), also on a Client's first
// contact, whose node timeout is two thirds of the validity until the
// nodes answer: the queue outlived its waiter by seconds (the explorer's
// leftover check).
func TestClient_Fair_firstContactPatience(t *testing.T) {
	libraryTimeouts(t)
	c := newCluster(t, 3)
	ctx := context.Background()
	holder := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	waiting, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.client(t).Acquire(waiting, "k", time.Second, redlock.Fair())
		done <- err
	}()
	waitFor(t, "the waiter in the queue", func() bool { return c.servers[0].Exists("{k}:queue") })
	for i, s := range c.servers {
		if ttl := s.TTL("{k}:queue"); ttl > 8*time.Second+100*time.Millisecond {
			t.Errorf("node %d: the queue lives %v, more than twice the patience of 4 s", i, ttl)
		}
	}
	stop()
	mustNotAcquire(t, <-done)
	mustRelease(t, holder)
}

// TestClient_Acquire_firstContactWithEveryNodeHungEndsAtTheDeadline: a
// fresh Client whose nodes all hang (frozen) gives up at its caller's
// deadline. The cleanup of its failed attempt used to wait for the hung
// nodes as a first contact's acquire does (to identify their servers), up
// to two thirds of the ttl's validity: 20 s past a 300 ms deadline with a
// 30 s ttl.
func TestClient_Acquire_firstContactWithEveryNodeHungEndsAtTheDeadline(t *testing.T) {
	c := newCluster(t, 3)
	var nodes []redis.UniversalClient
	for _, addr := range c.addrs {
		link := newLateLink(t, addr)
		link.setDelay(time.Minute)
		rdb := redis.NewClient(&redis.Options{Addr: link.Addr(), MaxRetries: -1, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
		t.Cleanup(func() { _ = rdb.Close() })
		nodes = append(nodes, rdb)
	}
	rc := mustNew(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := rc.Acquire(ctx, "k", 30*time.Second)
	took := time.Since(start)
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotAcquired and the deadline", err)
	}
	if took > 5*time.Second {
		t.Fatalf("Acquire returned %v after its 300 ms deadline", took-300*time.Millisecond)
	}
}

// TestClient_Acquire_majorityDownIsNotStormed: while a majority of the
// nodes does not answer, a waiting Acquire tries a few times a second, not
// hundreds: its attempts fail at once (nodes known to be failing are not
// waited for), and a wake-up's quick retries used to run them back to back
// (110 attempts in 300 ms, each logged).
func TestClient_Acquire_majorityDownIsNotStormed(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	nodes, links := linkedNodes(t, c)
	calls := &evalCount{}
	addHook(t, nodes[0], calls)
	rec := &recorder{}
	waiter := mustNew(t, nodes, redlock.WithObserver(rec), redlock.WithNodeTimeout(100*time.Millisecond))
	holder := mustTryAcquire(t, c.client(t), context.Background(), "k", time.Minute)
	redlock.WaitSettled(holder)
	// The 2 s run from the cut: getting to listen may take longer on a
	// loaded machine.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "k", time.Second)
		done <- err
	}()
	// Its first attempt, and the one right after it subscribed.
	waitFor(t, "the waiter to listen", func() bool { return calls.n.Load() >= 2 })
	// Its calls of that attempt answered: none sent before the cut can
	// reach a node after the release (on a loaded machine one did, and
	// won). Its next attempt is a subscribed poll away (wait.SubscribedPoll).
	waitIdle(t, waiter)
	links[1].setDelay(time.Minute)
	links[2].setDelay(time.Minute)
	defer time.AfterFunc(2*time.Second, cancel).Stop()
	_ = holder.Release(context.Background()) // heard by the waiter: it tries again at once, and again
	mustNotAcquire(t, <-done)
	got := rec.seen(redlock.OpAcquire)
	if len(got) != 1 || got[0].Attempts > 15 {
		t.Fatalf("acquire %+v: want at most 15 attempts in 2 s with a majority down", got)
	}
}

// TestClient_Acquire_majorityDownIsNotStormedByItsOwnCleanup: a reader
// waiting while a majority of the nodes is cut off takes the key on the
// node left, fails, and undoes it there with an announcement (a reader's
// undo that frees the key tells a waiting writer). It heard its own
// announcement and tried again at once, hundreds of times a second; while
// no quorum can form, announcements do not cut its wait short.
func TestClient_Acquire_majorityDownIsNotStormedByItsOwnCleanup(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	nodes, links := linkedNodes(t, c)
	var calls []*evalCount
	for _, rdb := range nodes {
		calls = append(calls, &evalCount{})
		addHook(t, rdb, calls[len(calls)-1])
	}
	rec := &recorder{}
	reader := mustNew(t, nodes, redlock.WithObserver(rec), redlock.WithNodeTimeout(100*time.Millisecond))
	writer := mustTryAcquire(t, c.client(t), context.Background(), "k", time.Minute, redlock.ForWrite())
	redlock.WaitSettled(writer)
	// The 2 s run from the cut, as above.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := reader.Acquire(ctx, "k", time.Second, redlock.ForRead())
		done <- err
	}()
	// The node it listens on, once it has made its first attempt there and
	// the one right after it subscribed.
	h := -1
	waitFor(t, "the reader to listen", func() bool {
		h = slices.Index(c.subscribedChannels(), 1)
		return h >= 0 && calls[h].n.Load() >= 2
	})
	waitIdle(t, reader) // as above
	for i, link := range links {
		if i != h {
			link.setDelay(time.Minute)
		}
	}
	defer time.AfterFunc(2*time.Second, cancel).Stop()
	c.servers[h].Del("k") // the writer's key is gone from the node left
	mustNotAcquire(t, <-done)
	got := rec.seen(redlock.OpAcquire)
	if len(got) != 1 || got[0].Attempts > 15 {
		t.Fatalf("acquire %+v: want at most 15 attempts in 2 s with a majority down", got)
	}
}

// linkedNodes returns clients for every node of c, each reached through a
// lateLink, and the links.
func linkedNodes(t *testing.T, c *cluster) ([]redis.UniversalClient, []*lateLink) {
	t.Helper()
	var nodes []redis.UniversalClient
	var links []*lateLink
	for _, addr := range c.addrs {
		link := newLateLink(t, addr)
		links = append(links, link)
		rdb := redis.NewClient(&redis.Options{Addr: link.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		nodes = append(nodes, rdb)
	}
	return nodes, links
}
