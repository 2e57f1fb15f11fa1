package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// TestWithMetadata_storedAfterTheToken: the nodes store the metadata after
// the token and a space (what redis-cli GET shows); Token is the token
// alone and Metadata the metadata.
func TestWithMetadata_storedAfterTheToken(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "k", time.Minute, redlock.WithMetadata("host=a pid=7"))
	defer mustRelease(t, lock)
	if strings.Contains(lock.Token(), " ") || lock.Token() == "" {
		t.Fatalf("Token() = %q, want the token alone", lock.Token())
	}
	if got := lock.Metadata(); got != "host=a pid=7" {
		t.Fatalf("Metadata() = %q", got)
	}
	if got := c.holders("k", lock.Token()+" host=a pid=7"); len(got) != 3 {
		t.Fatalf("the stored value is on nodes %v, want all 3", got)
	}
	if err := lock.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}

	_, err := rc.TryAcquire(ctx, "other", time.Minute, redlock.WithMetadata(strings.Repeat("x", redlock.MaxMetadata+1)))
	if !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("metadata over MaxMetadata: err = %v, want ErrInvalidArgument", err)
	}
	if got := c.holdersAny("other"); len(got) != 0 {
		t.Fatal("bad input wrote to the nodes")
	}
}

// TestInspect_plainLock: per node the holder's token, metadata and TTL; a
// quorum agrees on the holder; a split key has no agreed holder; a failed
// node is reported in its place; a free key has none.
func TestInspect_plainLock(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "job", time.Minute, redlock.WithMetadata("job=42"))
	redlock.WaitSettled(lock) // on every node, not only a quorum

	in, err := rc.Inspect(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held() || len(in.Holders) != 1 || in.Holders[0].Token != lock.Token() || in.Holders[0].Metadata != "job=42" || in.Holders[0].Nodes != 3 {
		t.Fatalf("holders = %+v, want the lock on 3 nodes", in.Holders)
	}
	if ttl := in.Holders[0].TTL; ttl <= 50*time.Second || ttl > time.Minute {
		t.Fatalf("holder TTL = %v, want about a minute", ttl)
	}
	for i, nd := range in.Nodes {
		if nd.Node != i || nd.Addr != c.addrs[i] || !nd.Held || nd.Kind != redlock.HeldByLock || nd.Token != lock.Token() || nd.Metadata != "job=42" || nd.TTL <= 0 || nd.Err != nil {
			t.Fatalf("node %d: %+v", i, nd)
		}
	}

	// One node down: the quorum still agrees; the node says why.
	c.servers[2].Close()
	in, err = rc.Inspect(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	var ne *redlock.NodeError
	if !in.Held() || in.Holders[0].Nodes != 2 || !errors.As(in.Nodes[2].Err, &ne) || ne.Node != 2 {
		t.Fatalf("with node 2 down: holders %+v, node 2 %+v", in.Holders, in.Nodes[2])
	}
	mustRelease(t, lock)

	// A split: a different holder on each node.
	for i, s := range c.servers[:2] {
		_ = s.Set("split", []string{"AAAA", "BBBB"}[i])
	}
	in, err = rc.Inspect(ctx, "split")
	if err != nil {
		t.Fatal(err)
	}
	if in.Held() || in.Nodes[0].Token != "AAAA" || in.Nodes[1].Token != "BBBB" {
		t.Fatalf("split key: %+v", in)
	}

	in, err = rc.Inspect(ctx, "free")
	if err != nil || in.Held() || in.Nodes[0].Held || in.Nodes[0].Kind != "" {
		t.Fatalf("free key: %+v, %v", in, err)
	}
	if _, err := rc.Inspect(ctx, ""); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("empty key: err = %v", err)
	}
}

// TestInspect_kinds: every kind of lock is reported with its holders and
// their metadata.
func TestInspect_kinds(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	meta := redlock.WithMetadata("who")
	check := func(key, kind string, holders int, owner string) {
		t.Helper()
		in, err := rc.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Holders) != holders || in.Nodes[0].Kind != kind {
			t.Fatalf("%s: kind %q with holders %+v, want %s with %d", key, in.Nodes[0].Kind, in.Holders, kind, holders)
		}
		for _, h := range in.Holders {
			if h.Metadata != "who" || h.Owner != owner || h.TTL <= 0 {
				t.Fatalf("%s: holder %+v", key, h)
			}
		}
	}
	var locks []*redlock.Lock
	take := func(key string, opts ...redlock.AcquireOption) {
		t.Helper()
		l := mustTryAcquire(t, rc, ctx, key, time.Minute, append(opts, meta)...)
		redlock.WaitSettled(l) // on every node, not only a quorum
		locks = append(locks, l)
	}
	take("re", redlock.WithOwner("worker-1"))
	take("re", redlock.WithOwner("worker-1"))
	check("re", redlock.HeldByReentrant, 2, "worker-1")
	take("rw", redlock.ForRead())
	take("rw", redlock.ForRead())
	check("rw", redlock.HeldByReaders, 2, "")
	take("sem", redlock.WithPermits(3))
	check("sem", redlock.HeldBySemaphore, 1, "")
	take("w", redlock.ForWrite())
	check("w", redlock.HeldByWriter, 1, "")
	take("f", redlock.Fair())
	check("f", redlock.HeldByFair, 1, "")
	all, err := rc.TryAcquireAll(ctx, []string{"m1", "m2"}, time.Minute, meta)
	if err != nil {
		t.Fatal(err)
	}
	redlock.WaitSettled(all)
	locks = append(locks, all)
	check("m2", redlock.HeldByMultiKey, 1, "")
	check("k", "", 0, "")
	for _, l := range locks {
		mustRelease(t, l)
	}
	check("sem", "", 0, "") // released: the set is gone
}

// TestResume_acrossProcesses: a lock taken by one Client (process) is
// rebuilt by another from its key and token, with a fresh validity, its
// metadata, and works there: Extend and Release; the first process then
// finds it gone.
func TestResume_acrossProcesses(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	first := mustNew(t, c.connect(t))
	lock := mustTryAcquire(t, first, ctx, "deploy", 10*time.Second, redlock.WithMetadata("step=build"))

	second := mustNew(t, c.connect(t))
	resumed, err := second.Resume(ctx, "deploy", lock.Token(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if resumed.Token() != lock.Token() || resumed.Metadata() != "step=build" || resumed.Key() != "deploy" {
		t.Fatalf("resumed %q %q %q", resumed.Key(), resumed.Token(), resumed.Metadata())
	}
	if v := resumed.Validity(); v <= 50*time.Second {
		t.Fatalf("resumed validity %v, want about the minute it was extended to", v)
	}
	if err := resumed.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := resumed.Release(ctx); err != nil {
		t.Fatal(err)
	}
	redlock.WaitSettled(resumed) // a slow node's delete may finish after Release
	if got := c.holdersAny("deploy"); len(got) != 0 {
		t.Fatalf("key left on %v after the resumed lock's release", got)
	}
	if err := lock.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("the first process's Extend after the release: err = %v, want ErrLockLost", err)
	}
	// Released: nothing to resume.
	if _, err := second.Resume(ctx, "deploy", lock.Token(), time.Minute); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("resume of a released lock: err = %v, want ErrLockLost", err)
	}
}

// TestResume_notHeldOrNotConfirmed: another holder's token, or none, is
// lost; too few nodes to tell is not confirmed; bad input changes nothing.
func TestResume_notHeldOrNotConfirmed(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "k", time.Minute)
	other := mustNew(t, c.connect(t))
	if _, err := other.Resume(ctx, "k", "NOTTHETOKEN", time.Minute); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("another token: err = %v, want ErrLockLost", err)
	}
	for name, tc := range map[string]struct {
		key, token string
		ttl        time.Duration
		opts       []redlock.AcquireOption
	}{
		"empty key":        {"", lock.Token(), time.Minute, nil},
		"empty token":      {"k", "", time.Minute, nil},
		"token with space": {"k", lock.Token() + " x", time.Minute, nil},
		"zero ttl":         {"k", lock.Token(), 0, nil},
		"kind option":      {"k", lock.Token(), time.Minute, []redlock.AcquireOption{redlock.ForRead()}},
		"fencing":          {"k", lock.Token(), time.Minute, []redlock.AcquireOption{redlock.WithFencing()}},
	} {
		if _, err := other.Resume(ctx, tc.key, tc.token, tc.ttl, tc.opts...); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Fatalf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
	// Other kinds keep state a token alone does not name: refused before
	// anything is written.
	for name, opts := range map[string][]redlock.AcquireOption{
		"reentrant": {redlock.WithOwner("o")}, "fair": {redlock.Fair()}, "writer": {redlock.ForWrite()},
		"reader": {redlock.ForRead()}, "semaphore": {redlock.WithPermits(2)},
	} {
		l := mustTryAcquire(t, rc, ctx, "kind-"+name, time.Minute, opts...)
		if _, err := other.Resume(ctx, "kind-"+name, l.Token(), time.Minute); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Fatalf("a %s lock's token: err = %v, want ErrInvalidArgument", name, err)
		}
		mustRelease(t, l)
	}
	multi, err := rc.TryAcquireAll(ctx, []string{"m1", "m2"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Resume(ctx, "m1", multi.Token(), time.Minute); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("a multi-key lock's token: err = %v, want ErrInvalidArgument", err)
	}
	mustRelease(t, multi)

	c.servers[1].Close()
	c.servers[2].Close()
	_, err = other.Resume(ctx, "k", lock.Token(), time.Minute)
	if !errors.Is(err, redlock.ErrNotConfirmed) || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("two of three nodes down: err = %v, want ErrNotConfirmed", err)
	}
	_ = lock.Release(ctx)
}

// TestResume_autoRenew: a resumed lock may be renewed in its new process.
func TestResume_autoRenew(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	lock := mustTryAcquire(t, mustNew(t, c.connect(t)), ctx, "k", time.Minute)
	// On a fake clock, with a node timeout a loaded machine keeps: the
	// renewal is due when the test moves the clock, and it is the outcome.
	clock := fakeClock()
	other := mustNew(t, c.connect(t), redlock.WithClock(clock), redlock.WithNodeTimeout(10*time.Second))
	resumed, err := other.Resume(ctx, "k", lock.Token(), 3*time.Second, redlock.WithAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	renewEveryOnce(t, c, clock, []*redlock.Lock{resumed})
	mustRelease(t, resumed)
}

// TestInspect_semaphoreQuorum: a permit of a semaphore counts only on the
// semaphore's quorum (3 of 3 nodes for 2 permits), and Inspect judges it
// so: a permit left on 2 of 3 nodes is not held. Inspection.Quorum was a
// majority for every kind, and Held reported such a permit as valid.
func TestInspect_semaphoreQuorum(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "res", time.Minute, redlock.WithPermits(2))
	redlock.WaitSettled(lock)
	in, err := rc.Inspect(ctx, "res")
	if err != nil {
		t.Fatal(err)
	}
	if in.Quorum != 3 || !in.Held() || in.Nodes[0].Permits != 2 {
		t.Fatalf("Quorum %d, Held %v, node 0's permits %d: want 3, true, 2", in.Quorum, in.Held(), in.Nodes[0].Permits)
	}
	token := in.Nodes[0].Token
	if _, err := c.servers[2].ZRem("res", token); err != nil {
		t.Fatal(err)
	}
	if in, err = rc.Inspect(ctx, "res"); err != nil {
		t.Fatal(err)
	}
	if in.Held() {
		t.Fatalf("a permit on 2 of 3 nodes of a 2-permit semaphore is reported held (quorum %d)", in.Quorum)
	}
	_ = lock.Release(ctx)
}

// TestInspect_kindsAreNamedAsEventsNameThem: for every kind, the kind
// Inspect reports a node's key to hold is the Event.Kind of the
// operations on that lock (a plain lock was "lock" in one and "plain" in
// the other).
func TestInspect_kindsAreNamedAsEventsNameThem(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []redlock.AcquireOption
	}{
		{"plain", nil},
		{"reentrant", []redlock.AcquireOption{redlock.WithOwner("o")}},
		{"read", []redlock.AcquireOption{redlock.ForRead()}},
		{"write", []redlock.AcquireOption{redlock.ForWrite()}},
		{"semaphore", []redlock.AcquireOption{redlock.WithPermits(2)}},
		{"fair", []redlock.AcquireOption{redlock.Fair()}},
		{"multi-key", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			rec := &recorder{}
			rc := c.client(t, redlock.WithObserver(rec))
			var lock *redlock.Lock
			var err error
			if tc.name == "multi-key" {
				lock, err = rc.AcquireAll(ctx, []string{"k", "k2"}, time.Minute)
			} else {
				lock, err = rc.TryAcquire(ctx, "k", time.Minute, tc.opts...)
			}
			if err != nil {
				t.Fatal(err)
			}
			redlock.WaitSettled(lock)
			in, err := rc.Inspect(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			got := rec.seen(redlock.OpAcquire)
			if len(got) != 1 || got[0].Kind != in.Nodes[0].Kind || got[0].Kind != tc.name {
				t.Fatalf("Event.Kind %q, Inspect's %q: want both %q", got[0].Kind, in.Nodes[0].Kind, tc.name)
			}
			_ = lock.Release(ctx)
		})
	}
}

// TestResume_confirmedCountsTheNodes: a resumed lock counts the nodes its
// extend confirmed, as any lock does (Confirmed is at least its quorum).
// It used to say 0 until its first Extend, which reads as a lock held by
// no node.
func TestResume_confirmedCountsTheNodes(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	held := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	redlock.WaitSettled(held)
	resumed, err := mustNew(t, c.connect(t)).Resume(ctx, "k", held.Token(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Release(ctx)
	if got := resumed.Confirmed(); got < 2 {
		t.Fatalf("Confirmed of a resumed lock = %d, want at least its quorum (2)", got)
	}
}
