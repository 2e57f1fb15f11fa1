package redlock_test

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

func TestNew_badInput(t *testing.T) {
	c := newCluster(t, 2)
	a, b := c.clients[0], c.clients[1]
	sameAddr := redis.NewClient(&redis.Options{Addr: c.servers[0].Addr(), DB: 1})
	t.Cleanup(func() { _ = sameAddr.Close() })
	var nilClient *redis.Client

	tests := []struct {
		name  string
		nodes []redis.UniversalClient
		opts  []redlock.Option
		want  string
	}{
		{"no nodes", nil, nil, "no nodes"},
		{"nil node", []redis.UniversalClient{a, nil}, nil, "node 1 is nil"},
		{"typed nil node", []redis.UniversalClient{nilClient}, nil, "node 0 is nil"},
		{"same client twice", []redis.UniversalClient{a, b, a}, nil, "node 2 is the same as node 0"},
		{"same address twice", []redis.UniversalClient{a, sameAddr}, nil, "node 1 is the same as node 0"},
		{"negative drift factor", []redis.UniversalClient{a}, []redlock.Option{redlock.WithDriftFactor(-0.1)}, "drift factor"},
		{"drift factor of one", []redis.UniversalClient{a}, []redlock.Option{redlock.WithDriftFactor(1)}, "drift factor"},
		{"NaN drift factor", []redis.UniversalClient{a}, []redlock.Option{redlock.WithDriftFactor(math.NaN())}, "drift factor"},
		{"zero node timeout", []redis.UniversalClient{a}, []redlock.Option{redlock.WithNodeTimeout(0)}, "node timeout"},
		{"negative node timeout", []redis.UniversalClient{a}, []redlock.Option{redlock.WithNodeTimeout(-time.Second)}, "node timeout"},
		{"nil clock", []redis.UniversalClient{a}, []redlock.Option{redlock.WithClock(nil)}, "clock is nil"},
		{"nil logger", []redis.UniversalClient{a}, []redlock.Option{redlock.WithLogger(nil)}, "logger is nil"},
		{"nil retry policy", []redis.UniversalClient{a}, []redlock.Option{redlock.WithRetry(nil)}, "retry policy is nil"},
		{"bad backoff", []redis.UniversalClient{a}, []redlock.Option{redlock.WithRetry(redlock.ExponentialBackoff(time.Second, time.Millisecond))}, "ExponentialBackoff"},
		{"bad random delay", []redis.UniversalClient{a}, []redlock.Option{redlock.WithRetry(redlock.RandomDelay(0, time.Millisecond))}, "RandomDelay"},
		{"nil option", []redis.UniversalClient{a}, []redlock.Option{nil}, "option is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc, err := redlock.New(tt.nodes, tt.opts...)
			if !errors.Is(err, redlock.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: err = %v, want ErrInvalidArgument mentioning %q", err, tt.want)
			}
			if rc != nil {
				t.Fatal("New returned a Client with an error")
			}
		})
	}
	if n := c.commands(); n != 0 {
		t.Errorf("New sent %d commands to the nodes, want 0", n)
	}
}

func TestNew_acceptsConcreteClientSlices(t *testing.T) {
	c := newCluster(t, 3)
	nodes := make([]*redis.Client, len(c.clients))
	for i, rdb := range c.clients {
		nodes[i] = rdb.(*redis.Client)
	}
	rc, err := redlock.New(nodes)
	if err != nil {
		t.Fatal(err)
	}
	if got := rc.Quorum(); got != 2 {
		t.Fatalf("Quorum = %d, want 2", got)
	}
}

func TestClient_Quorum(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		if got := newCluster(t, n).client(t).Quorum(); got != want {
			t.Errorf("N=%d: Quorum = %d, want %d", n, got, want)
		}
	}
}

func TestClient_TryAcquire_badInput(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	before := c.commands() // a client that dials at once has greeted the nodes
	ctx := context.Background()
	tests := []struct {
		name string
		key  string
		ttl  time.Duration
		opts []redlock.AcquireOption
		want string
	}{
		{"empty key", "", time.Second, nil, "empty key"},
		{"zero ttl", "k", 0, nil, "must be positive"},
		{"negative ttl", "k", -time.Second, nil, "must be positive"},
		{"ttl within drift", "k", 2 * time.Millisecond, nil, "drift allowance"},
		{"nil option", "k", time.Second, []redlock.AcquireOption{nil}, "option is nil"},
		{"bad retry", "k", time.Second, []redlock.AcquireOption{redlock.WithRetry(redlock.RandomDelay(2, 1))}, "RandomDelay"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, acquire := range acquireFuncs(rc) {
				lock, err := acquire(ctx, tt.key, tt.ttl, tt.opts...)
				if !errors.Is(err, redlock.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("%s: err = %v, want ErrInvalidArgument mentioning %q", name, err, tt.want)
				}
				if lock != nil {
					t.Fatalf("%s returned a lock with an error", name)
				}
			}
		})
	}
	if n := c.commands() - before; n != 0 {
		t.Errorf("bad input sent %d commands to the nodes, want 0", n)
	}
}

func TestClient_TryAcquire_storesTokenUnderKey(t *testing.T) {
	c := newCluster(t, 3)
	lock := mustTryAcquire(t, c.client(t), context.Background(), "orders:42", time.Second)
	redlock.WaitSettled(lock)
	if len(lock.Token()) < 22 { // 128 bits are at least 22 base64 or 26 base32 characters
		t.Errorf("token %q is too short to carry 128 random bits", lock.Token())
	}
	if got := c.holders("orders:42", lock.Token()); len(got) != 3 {
		t.Errorf("token on nodes %v, want all 3", got)
	}
	for i, s := range c.servers {
		if ttl := s.TTL("orders:42"); ttl != time.Second {
			t.Errorf("node %d: TTL = %v, want 1s", i, ttl)
		}
	}
	if lock.Key() != "orders:42" {
		t.Errorf("Key = %q", lock.Key())
	}
	other, err := c.client(t).TryAcquire(context.Background(), "orders:42", time.Second)
	mustNotAcquire(t, err)
	if other != nil {
		t.Fatal("second TryAcquire returned a lock")
	}
	mustRelease(t, lock)
	if got := c.holdersAny("orders:42"); len(got) != 0 {
		t.Errorf("key left on nodes %v after release", got)
	}
}

// TestClient_TryAcquire_downNodes walks every set of down nodes for N = 1, 3
// and 5: the lock is acquired exactly when a quorum is up, a failed attempt
// leaves no key on any live node, and a release leaves none either.
func TestClient_TryAcquire_downNodes(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		for mask := range 1 << n {
			t.Run(fmt.Sprintf("N=%d/down=%0*b", n, n, mask), func(t *testing.T) {
				c := newCluster(t, n)
				rc := c.client(t, redlock.WithNodeTimeout(time.Second))
				up := n
				for i := range n {
					if mask&(1<<i) != 0 {
						c.servers[i].Close()
						up--
					}
				}
				ctx := context.Background()
				lock, err := rc.TryAcquire(ctx, "k", time.Minute)
				if want := up >= rc.Quorum(); (err == nil) != want {
					t.Fatalf("up=%d quorum=%d: err = %v, want success %v", up, rc.Quorum(), err, want)
				}
				if err != nil {
					mustNotAcquire(t, err)
					var ne *redlock.NodeError
					if up < n && !errors.As(err, &ne) {
						t.Errorf("err = %v, want a *NodeError for a down node", err)
					}
					waitIdle(t, rc) // nodes not waited for are cleaned up in the background
					if got := c.holdersAny("k"); len(got) != 0 {
						t.Fatalf("failed attempt left the key on nodes %v", got)
					}
					return
				}
				redlock.WaitSettled(lock)
				if got := c.holders("k", lock.Token()); len(got) != up {
					t.Fatalf("token on %d nodes, want all %d live ones", len(got), up)
				}
				mustRelease(t, lock)
				if got := c.holdersAny("k"); len(got) != 0 {
					t.Fatalf("release left the key on nodes %v", got)
				}
			})
		}
	}
}

// TestClient_TryAcquire_heldElsewhere puts another holder's key on every
// subset of the nodes: the lock is acquired exactly when the free nodes make
// a quorum, and the other holder's keys are never touched.
func TestClient_TryAcquire_heldElsewhere(t *testing.T) {
	const other = "someone-else"
	for _, n := range []int{1, 3, 5} {
		for mask := range 1 << n {
			t.Run(fmt.Sprintf("N=%d/held=%0*b", n, n, mask), func(t *testing.T) {
				c := newCluster(t, n)
				rc := c.client(t)
				var held []int
				for i := range n {
					if mask&(1<<i) != 0 {
						_ = c.servers[i].Set("k", other)
						c.servers[i].SetTTL("k", time.Minute)
						held = append(held, i)
					}
				}
				checkOther := func(when string) {
					t.Helper()
					if got := c.holders("k", other); !slices.Equal(got, held) {
						t.Fatalf("%s: other holder's key on %v, want %v", when, got, held)
					}
					for _, i := range held {
						if ttl := c.servers[i].TTL("k"); ttl != time.Minute {
							t.Fatalf("%s: other holder's TTL on node %d = %v, want 1m", when, i, ttl)
						}
					}
				}
				ctx := context.Background()
				lock, err := rc.TryAcquire(ctx, "k", 10*time.Second)
				if want := n-len(held) >= rc.Quorum(); (err == nil) != want {
					t.Fatalf("held on %d of %d: err = %v, want success %v", len(held), n, err, want)
				}
				checkOther("after acquire")
				if err != nil {
					mustNotAcquire(t, err)
					waitIdle(t, rc) // the cleanup of nodes not waited for goes on in the background
					if got := c.holdersAny("k"); !slices.Equal(got, held) {
						t.Fatalf("failed attempt left our key: key on %v, other holds %v", got, held)
					}
					return
				}
				mustRelease(t, lock)
				checkOther("after release")
				if got := c.holdersAny("k"); !slices.Equal(got, held) {
					t.Fatalf("release left our key: key on %v, other holds %v", got, held)
				}
			})
		}
	}
}

// TestLock_afterExpiry lets the TTL pass on the nodes: Extend and Release
// then report the loss, and the new holder's keys stay as they are.
func TestLock_afterExpiry(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	old := mustTryAcquire(t, c.client(t), ctx, "k", time.Second)
	redlock.WaitSettled(old)
	for _, s := range c.servers {
		s.FastForward(2 * time.Second)
	}
	newer, err := mustNew(t, c.connect(t)).TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatalf("new holder after expiry: %v", err)
	}
	redlock.WaitSettled(newer)
	if err := old.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after expiry: err = %v, want ErrLockLost", err)
	}
	if got := c.holders("k", newer.Token()); len(got) != 3 {
		t.Fatalf("after old Extend, new holder's key on %v, want all 3", got)
	}
	if err := old.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release after expiry: err = %v, want ErrLockLost", err)
	}
	if got := c.holders("k", newer.Token()); len(got) != 3 {
		t.Fatalf("after old Release, new holder's key on %v, want all 3", got)
	}
	for i, s := range c.servers {
		if ttl := s.TTL("k"); ttl != time.Minute {
			t.Errorf("node %d: new holder's TTL = %v, want 1m", i, ttl)
		}
	}
	if err := newer.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLock_Extend_lostOnMajority: a lock whose key is gone from a majority
// cannot be extended, even though one node still holds it.
func TestLock_Extend_lostOnMajority(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t), ctx, "k", time.Second)
	redlock.WaitSettled(lock)
	c.servers[0].Del("k")
	c.servers[1].Del("k")
	err := lock.Extend(ctx, time.Second)
	if !errors.Is(err, redlock.ErrLockLost) || !strings.Contains(err.Error(), "of 3 nodes, quorum 2") {
		t.Fatalf("Extend: err = %v, want ErrLockLost for want of a quorum", err)
	}
}

func TestLock_Extend_setsTTLOnEveryNode(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t), ctx, "k", time.Second)
	if err := lock.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	redlock.WaitSettled(lock)
	for i, s := range c.servers {
		if ttl := s.TTL("k"); ttl != time.Minute {
			t.Errorf("node %d: TTL = %v after Extend, want 1m", i, ttl)
		}
	}
}

// lateNodes returns clients for c's 3 nodes of which nodes 1 and 2 (a
// majority) are reached through lateLinks, and the links.
func lateNodes(t *testing.T, c *cluster) ([]redis.UniversalClient, []*lateLink) {
	t.Helper()
	links := []*lateLink{nil, newLateLink(t, c.addrs[1]), newLateLink(t, c.addrs[2])}
	nodes := []redis.UniversalClient{c.clients[0]}
	for _, l := range links[1:] {
		rdb := redis.NewClient(&redis.Options{Addr: l.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		nodes = append(nodes, rdb)
	}
	return nodes, links
}

// lateCluster is a cluster whose nodes 1 and 2 (a majority of 3) are
// reached through lateLinks, and a Client over it with a 50 ms node timeout.
func lateCluster(t *testing.T, opts ...redlock.Option) (*cluster, []*lateLink, *redlock.Client) {
	t.Helper()
	c := newCluster(t, 3)
	nodes, links := lateNodes(t, c)
	rc := mustNew(t, nodes, append([]redlock.Option{redlock.WithNodeTimeout(50 * time.Millisecond)}, opts...)...)
	// The first contact (dials, identification, scripts loaded) can take
	// longer than the short node timeout on a loaded machine: made here,
	// tried again until it succeeds, so that the test's own calls find the
	// connections open and the scripts known.
	try := 0
	retrySoon(t, "the first contact with the nodes", func() error {
		// A key of its own each time: a try whose release timed out
		// leaves its key until its ttl.
		try++
		lock, err := rc.TryAcquire(context.Background(), fmt.Sprint("warm-up-", try), 10*time.Second)
		if err != nil {
			return err
		}
		defer func() { _ = lock.Release(context.Background()) }()
		return lock.Extend(context.Background(), 10*time.Second)
	})
	return c, links, rc
}

// retrySoon calls f until it returns nil, for up to 10 s.
func retrySoon(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLock_Extend_failedShorterKeepsTheKeys: an Extend to a shorter ttl that
// fails because a majority is slow leaves the lock valid until its old
// Until, so its calls that land late must not shorten the keys: no one else
// may take the lock within the validity the holder still reports.
func TestLock_Extend_failedShorterKeepsTheKeys(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching %v", batching), func(t *testing.T) {
			c, links, rc := lateCluster(t, redlock.WithBatching(batching))
			ctx := context.Background()
			var lock *redlock.Lock
			retrySoon(t, "TryAcquire", func() (err error) {
				lock, err = rc.TryAcquire(ctx, "k", 10*time.Second)
				return err
			})
			redlock.WaitSettled(lock)
			until := lock.Until()
			links[1].setDelay(300 * time.Millisecond)
			links[2].setDelay(300 * time.Millisecond)
			if err := lock.Extend(ctx, 400*time.Millisecond); err == nil {
				t.Fatal("Extend with a slow majority succeeded; the test needs it to fail")
			}
			if !lock.Until().Equal(until) {
				t.Fatalf("Until moved from %v to %v after a failed Extend", until, lock.Until())
			}
			for _, l := range links[1:] {
				l.delivered(t)
				l.setDelay(0)
			}
			for _, s := range c.servers {
				s.FastForward(time.Second) // past the shorter ttl
			}
			if _, err := mustNew(t, c.connect(t)).TryAcquire(ctx, "k", time.Second); err == nil {
				t.Fatalf("another client took the lock while its holder reports %v of validity", lock.Validity())
			}
			mustRelease(t, lock)
		})
	}
}

// TestLock_Extend_lateShorterAfterLonger: the calls of a failed shorter
// Extend that land after a later, successful Extend do not cut the keys
// short of the validity that Extend gave.
func TestLock_Extend_lateShorterAfterLonger(t *testing.T) {
	goRedisOnly(t, "it needs a connection per call (a go-redis pool): rueidis pipelines a node's calls on shared connections, where a late call holds up those behind it")
	c, links, rc := lateCluster(t)
	ctx := context.Background()
	var lock *redlock.Lock
	retrySoon(t, "TryAcquire", func() (err error) {
		lock, err = rc.TryAcquire(ctx, "k", 2*time.Second)
		return err
	})
	redlock.WaitSettled(lock)
	links[1].setDelay(300 * time.Millisecond)
	links[2].setDelay(300 * time.Millisecond)
	if err := lock.Extend(ctx, 400*time.Millisecond); err == nil {
		t.Fatal("Extend with a slow majority succeeded; the test needs it to fail")
	}
	links[1].setDelay(0)
	links[2].setDelay(0)
	if err := lock.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend with every node fast again: %v", err)
	}
	for _, l := range links[1:] {
		l.delivered(t)
	}
	for _, s := range c.servers {
		s.FastForward(time.Second)
	}
	if _, err := mustNew(t, c.connect(t)).TryAcquire(ctx, "k", time.Second); err == nil {
		t.Fatalf("another client took the lock while its holder reports %v of validity", lock.Validity())
	}
	mustRelease(t, lock)
}

// TestLock_Extend_shorter: a successful Extend to a shorter ttl shortens the
// validity the lock reports, and never the keys' time to live on the nodes.
func TestLock_Extend_shorter(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t, redlock.WithClock(clock)), ctx, "k", time.Minute)
	if err := lock.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if want := clock.Now().Add(time.Second - 12*time.Millisecond); !lock.Until().Equal(want) {
		t.Fatalf("Until = %v after a shorter Extend, want %v", lock.Until(), want)
	}
	redlock.WaitSettled(lock)
	for i, s := range c.servers {
		if ttl := s.TTL("k"); ttl != time.Minute {
			t.Errorf("node %d: TTL = %v after a shorter Extend, want the minute it had", i, ttl)
		}
	}
	mustRelease(t, lock)
}

// TestLock_validity checks Until and Validity against a fake clock: the lock
// is valid for ttl less the drift from the start of the acquire, and from
// the start of each extend.
func TestLock_validity(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	t0 := clock.Now()
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t, redlock.WithClock(clock)), ctx, "k", time.Second)
	drift := 10*time.Millisecond + 2*time.Millisecond // 1s × 0.01 + 2ms
	if got, want := lock.Until(), t0.Add(time.Second-drift); !got.Equal(want) {
		t.Fatalf("Until = %v, want %v", got, want)
	}
	if got, want := lock.Validity(), time.Second-drift; got != want {
		t.Fatalf("Validity = %v, want %v", got, want)
	}
	clock.Advance(500 * time.Millisecond)
	if got, want := lock.Validity(), 500*time.Millisecond-drift; got != want {
		t.Fatalf("Validity after 500ms = %v, want %v", got, want)
	}

	// An extend counts its validity from its own start.
	if err := lock.Extend(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	drift2 := 20*time.Millisecond + 2*time.Millisecond
	if got, want := lock.Until(), t0.Add(500*time.Millisecond+2*time.Second-drift2); !got.Equal(want) {
		t.Fatalf("Until after Extend = %v, want %v", got, want)
	}
	if got, want := lock.Validity(), 2*time.Second-drift2; got != want {
		t.Fatalf("Validity after Extend = %v, want %v", got, want)
	}
	clock.Advance(3 * time.Second)
	if got := lock.Validity(); got != 0 {
		t.Fatalf("Validity after expiry = %v, want 0", got)
	}
	// Once the validity has run out the lock is over, even though the
	// nodes (miniredis keeps time still) still hold its keys.
	if err := lock.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after expiry: err = %v, want ErrLockLost", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := lock.Validity(); got != 0 {
		t.Fatalf("Validity after Release = %v, want 0", got)
	}
}

func TestLock_validity_customDriftFactor(t *testing.T) {
	c := newCluster(t, 1)
	clock := fakeClock()
	lock := mustTryAcquire(t, c.client(t, redlock.WithClock(clock), redlock.WithDriftFactor(0.1)), context.Background(), "k", time.Second)
	if got, want := lock.Validity(), time.Second-100*time.Millisecond-2*time.Millisecond; got != want {
		t.Fatalf("Validity = %v, want %v", got, want)
	}
}

// TestClient_TryAcquire_slowNodeSpendsValidity: the nodes answer so slowly
// that the quorum comes after the ttl; the attempt fails and leaves nothing
// behind.
func TestClient_TryAcquire_slowNodeSpendsValidity(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	clock := fakeClock()
	const ttl = time.Second
	// Every node answers, each taking half the ttl: by the time any two
	// (a quorum) have, the whole ttl has passed.
	for _, rdb := range c.clients {
		addHook(t, rdb, clockHook{clock: clock, by: ttl / 2})
	}
	rc := c.client(t, redlock.WithClock(clock))
	_, err := rc.TryAcquire(context.Background(), "k", ttl)
	mustNotAcquire(t, err)
	if !strings.Contains(err.Error(), "validity was spent") {
		t.Fatalf("err = %v, want it to say the validity was spent", err)
	}
	waitIdle(t, rc) // the node not waited for is cleaned up in the background
	if got := c.holdersAny("k"); len(got) != 0 {
		t.Fatalf("failed attempt left the key on nodes %v", got)
	}
}

// TestLock_Extend_slowNodeSpendsValidity: an extend whose quorum comes after
// its new ttl has passed is not confirmed and leaves Until as it was: the
// lock is still valid (no node shortens a key), so it is not lost.
func TestLock_Extend_slowNodeSpendsValidity(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 1)
	clock := fakeClock()
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t, redlock.WithClock(clock)), ctx, "k", time.Second)
	until := lock.Until()
	addHook(t, c.clients[0], clockHook{clock: clock, by: 100 * time.Millisecond})
	err := lock.Extend(ctx, 50*time.Millisecond)
	if !errors.Is(err, redlock.ErrNotConfirmed) || errors.Is(err, redlock.ErrLockLost) || !strings.Contains(err.Error(), "validity was spent") {
		t.Fatalf("Extend: err = %v, want ErrNotConfirmed (not ErrLockLost) saying the validity was spent", err)
	}
	if !lock.Until().Equal(until) {
		t.Fatalf("Until moved to %v after a failed Extend, want %v", lock.Until(), until)
	}
	select {
	case <-lock.Done():
		t.Fatal("Done closed after an extend that was only not confirmed")
	default:
	}
	_ = lock.Release(ctx) // ends Done's watcher
}

// TestClient_TryAcquire_hungNode: a node that accepts connections but never
// answers costs an attempt its per-node timeout, not the go-redis client's
// read timeout.
func TestClient_TryAcquire_hungNode(t *testing.T) {
	c := newCluster(t, 2)
	hung := newHungNode(t)
	// A read timeout far beyond the per-node timeout, and no
	// ContextTimeoutEnabled: only the Client's own timeout can end the wait.
	stuck := redis.NewClient(&redis.Options{Addr: hung.Addr(), ReadTimeout: time.Minute, MaxRetries: -1})
	t.Cleanup(func() { _ = stuck.Close() })
	nodes := []redis.UniversalClient{c.clients[0], c.clients[1], stuck}
	const nodeTimeout = 200 * time.Millisecond
	rc := mustNew(t, nodes, redlock.WithNodeTimeout(nodeTimeout))
	ctx := context.Background()

	t.Run("quorum without it", func(t *testing.T) {
		lock := mustTryAcquire(t, rc, ctx, "a", time.Minute)
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("quorum needs it", func(t *testing.T) {
		_ = c.servers[0].Set("b", "someone-else")
		start := time.Now()
		_, err := rc.TryAcquire(ctx, "b", time.Minute)
		elapsed := time.Since(start)
		mustNotAcquire(t, err)
		var ne *redlock.NodeError
		if !errors.As(err, &ne) || ne.Node != 2 || ne.Addr != hung.Addr() || !errors.Is(ne, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want a *NodeError for node 2 with DeadlineExceeded", err)
		}
		// The attempt and its cleanup each wait one node timeout; the
		// bound is wide for a loaded machine but far below the minute the
		// go-redis client would wait.
		if elapsed > 10*time.Second {
			t.Fatalf("TryAcquire took %v with a %v node timeout", elapsed, nodeTimeout)
		}
		if got := c.holders("b", "someone-else"); !slices.Equal(got, []int{0}) {
			t.Fatalf("other holder's key on %v, want [0]", got)
		}
		if c.servers[1].Exists("b") {
			t.Fatal("failed attempt left the key on node 1")
		}
	})
}

// TestClient_TryAcquire_knownFailingNodes: once nodes are known to be
// failing (their last calls went unanswered), a failed attempt does not wait
// out their timeout again; it still releases what it took.
func TestClient_TryAcquire_knownFailingNodes(t *testing.T) {
	c := newCluster(t, 3)
	nodes := slices.Clone(c.clients)
	for range 2 {
		hung := newHungNode(t)
		stuck := redis.NewClient(&redis.Options{Addr: hung.Addr(), ReadTimeout: time.Minute, MaxRetries: -1})
		t.Cleanup(func() { _ = stuck.Close() })
		nodes = append(nodes, stuck)
	}
	const nodeTimeout = 3 * time.Second
	rc := mustNew(t, nodes, redlock.WithNodeTimeout(nodeTimeout))
	ctx := context.Background()
	_ = c.servers[0].Set("k", "someone-else")
	for i, want := range []time.Duration{nodeTimeout, 0} {
		start := time.Now()
		_, err := rc.TryAcquire(ctx, "k", time.Minute)
		took := time.Since(start)
		mustNotAcquire(t, err)
		switch {
		case want > 0 && took < want:
			t.Fatalf("attempt %d took %v: it did not wait for nodes not yet known to fail", i, took)
		case want == 0 && took > nodeTimeout/2: // wide: typically a millisecond
			t.Fatalf("attempt %d took %v: it waited out the timeout of nodes known to fail", i, took)
		}
		if c.servers[1].Exists("k") || c.servers[2].Exists("k") {
			t.Fatalf("attempt %d left its key behind", i)
		}
	}
}

// TestClient_singleNodeInline: a lone node whose client cuts calls at their
// deadline runs them in the calling goroutine, and still keeps the
// per-node timeout.
func TestClient_singleNodeInline(t *testing.T) {
	c := newCluster(t, 1)
	fast := redis.NewClient(&redis.Options{Addr: c.addrs[0], MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = fast.Close() })
	rc := mustNew(t, []redis.UniversalClient{fast})
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "k", time.Minute)
	if got := c.holders("k", lock.Token()); len(got) != 1 {
		t.Fatal("the key is not on the node")
	}
	mustRelease(t, lock)
	if c.servers[0].Exists("k") {
		t.Fatal("the key is left after Release")
	}

	hung := newHungNode(t)
	stuck := redis.NewClient(&redis.Options{Addr: hung.Addr(), ReadTimeout: time.Minute, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = stuck.Close() })
	const nodeTimeout = 200 * time.Millisecond
	rc = mustNew(t, []redis.UniversalClient{stuck}, redlock.WithNodeTimeout(nodeTimeout))
	start := time.Now()
	_, err := rc.TryAcquire(ctx, "k", time.Minute)
	elapsed := time.Since(start)
	var ne *redlock.NodeError
	if !errors.As(err, &ne) || !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrNotAcquired with a *NodeError", err)
	}
	// The attempt and its cleanup each wait one node timeout; the bound is
	// wide for a loaded machine but far below the client's minute.
	if elapsed > 10*time.Second {
		t.Fatalf("TryAcquire took %v with a %v node timeout", elapsed, nodeTimeout)
	}
}

func TestClient_Acquire_cancelledContext(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	before := c.commands() // a client that dials at once has greeted the nodes
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, acquire := range acquireFuncs(rc) {
		lock, err := acquire(ctx, "k", time.Second)
		if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: err = %v, want ErrNotAcquired and context.Canceled", name, err)
		}
		if lock != nil {
			t.Fatalf("%s returned a lock", name)
		}
	}
	if n := c.commands() - before; n != 0 {
		t.Errorf("cancelled acquires sent %d commands, want 0", n)
	}
}

func TestClient_Acquire_deadline(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	holder := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	redlock.WaitSettled(holder)
	other := mustNew(t, c.connect(t), redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 5*time.Millisecond)))
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	lock, err := other.Acquire(dctx, "k", time.Second)
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	if lock != nil {
		t.Fatal("Acquire returned a lock")
	}
	if got := c.holders("k", holder.Token()); len(got) != 3 {
		t.Fatalf("holder's key on %v after a contender gave up, want all 3", got)
	}
}

// TestClient_Acquire_retriesAfterDelay drives the retry wait with a fake
// clock: Acquire fails, waits on the clock, and succeeds once the holder is
// gone (the release's announcement or a delay that passes wakes it); on a
// TimerClock, and on a Clock with After alone (its waits cannot be
// stopped).
func TestClient_Acquire_retriesAfterDelay(t *testing.T) {
	for _, timers := range []bool{true, false} {
		t.Run(fmt.Sprintf("timers %v", timers), func(t *testing.T) { retriesAfterDelay(t, timers) })
	}
}

func retriesAfterDelay(t *testing.T, timers bool) {
	c := newCluster(t, 3)
	ctx := context.Background()
	holder := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	clock := fakeClock()
	var delays atomic.Int32
	retry := redlock.RetryFunc(func(failed int) time.Duration {
		delays.Add(1)
		return time.Duration(failed) * time.Second
	})
	var use redlock.Clock = clock
	if !timers {
		use = struct{ redlock.Clock }{clock} // Now and After only
	}
	rc := mustNew(t, c.connect(t), redlock.WithClock(use))
	type result struct {
		lock *redlock.Lock
		err  error
	}
	done := make(chan result, 1)
	go func() {
		lock, err := rc.Acquire(ctx, "k", time.Second, redlock.WithRetry(retry))
		done <- result{lock, err}
	}()
	waiters(t, clock, 1) // Acquire failed once and waits
	mustRelease(t, holder)
	var r result
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("Acquire never succeeded after the holder released")
		}
		select {
		case r = <-done:
		case <-time.After(10 * time.Millisecond):
			clock.Advance(time.Second)
			continue
		}
		break
	}
	if r.err != nil {
		t.Fatalf("Acquire: %v", r.err)
	}
	redlock.WaitSettled(r.lock)
	// Woken by the release's announcement from the first node to delete the
	// key, the attempt may reach another node before its delete: a quorum
	// is what it takes.
	if got := c.holders("k", r.lock.Token()); len(got) < 2 {
		t.Fatalf("token on %v, want a quorum of 3", got)
	}
	if delays.Load() < 1 {
		t.Fatal("Acquire never asked its retry policy")
	}
	if err := r.lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestClient_Acquire_wokenByRelease: a waiting Acquire tries again as soon
// as the holder releases, not when its retry delay has passed (the fake
// clock never moves here).
func TestClient_Acquire_wokenByRelease(t *testing.T) {
	c := newCluster(t, 1)
	ctx := context.Background()
	holder := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	clock := fakeClock()
	rc := mustNew(t, c.connect(t), redlock.WithClock(clock),
		redlock.WithRetry(redlock.RandomDelay(time.Hour, time.Hour)))
	done := make(chan error, 1)
	go func() {
		lock, err := rc.Acquire(ctx, "k", time.Second)
		if err == nil {
			err = lock.Release(ctx)
		}
		done <- err
	}()
	waiters(t, clock, 1) // waiting an hour
	// and subscribed (on a loaded machine the subscription may be
	// confirmed after the wait began)
	for deadline := time.Now().Add(10 * time.Second); c.servers[0].PubSubNumSub("{k}:released")["{k}:released"] == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not subscribe to the release channel")
		}
	}
	mustRelease(t, holder)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
}

func TestLock_nil(t *testing.T) {
	var l *redlock.Lock
	ctx := context.Background()
	if l.Key() != "" || l.Token() != "" || !l.Until().IsZero() || l.Validity() != 0 {
		t.Fatal("nil Lock reports something held")
	}
	if err := l.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("Extend: err = %v, want ErrNotAcquired", err)
	}
	if err := l.Release(ctx); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("Release: err = %v, want ErrNotAcquired", err)
	}
}

func TestLock_Release_twice(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t), ctx, "k", time.Second)
	mustRelease(t, lock)
	before := c.commands()
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if err := lock.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after Release: err = %v, want ErrLockLost", err)
	}
	if n := c.commands() - before; n != 0 {
		t.Fatalf("second Release and Extend sent %d commands, want 0", n)
	}
}

// TestLock_Release_cancelledContext: a deferred Release with a context that
// has already ended still deletes the keys.
func TestLock_Release_cancelledContext(t *testing.T) {
	c := newCluster(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	lock := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	cancel()
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	redlock.WaitSettled(lock)
	if got := c.holdersAny("k"); len(got) != 0 {
		t.Fatalf("key left on nodes %v", got)
	}
}

// TestLock_Release_slowNodeFinishesInBackground: Release returns once a
// quorum has deleted the token and the nodes as fast as it have answered;
// a much slower node is not waited for, and its delete still lands, in the
// background.
func TestLock_Release_slowNodeFinishesInBackground(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			c := newCluster(t, 5)
			slow := &delayHook{}
			addHook(t, c.clients[4], slow)
			ctx := context.Background()
			rc := c.client(t, redlock.WithBatching(batching), redlock.WithNodeTimeout(5*time.Second))
			lock := mustTryAcquire(t, rc, ctx, "k", time.Minute)
			redlock.WaitSettled(lock)
			slow.by.Store(int64(2 * time.Second))
			start := time.Now()
			if err := lock.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			// Wide for a loaded machine; waiting for the slow node takes 2 s.
			if took := time.Since(start); took > time.Second {
				t.Fatalf("Release took %v: it waited for the slow node", took)
			}
			// The fast nodes' deletes are done, or finish, while the slow
			// node's is still 2 s away (Release waits a grace for the nodes
			// about as fast as the quorum's, which a loaded machine may
			// miss: their deletes then finish in the background too).
			waitFor(t, "the fast nodes' deletes", func() bool {
				return !slices.ContainsFunc(c.holdersAny("k"), func(i int) bool { return i != 4 })
			})
			waitFor(t, "the slow node's delete", func() bool { return !c.servers[4].Exists("k") })
		})
	}
}

// TestOutcomeKnown_slowNodesNotWaited: with 2 of 5 nodes newly slow, a
// failed attempt that 3 refusals decided and a Release that a quorum
// confirmed return long before the node timeout; the frozen nodes' calls
// finish in the background, in order per node.
func TestOutcomeKnown_slowNodesNotWaited(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			c := newCluster(t, 5)
			// Each call lands, but its reply is held: as from a node
			// frozen right after it read the call.
			frozen := []*replyGate{{}, {}}
			addHook(t, c.clients[3], frozen[0])
			addHook(t, c.clients[4], frozen[1])
			const nodeTimeout = 10 * time.Second
			rc := c.client(t, redlock.WithBatching(batching), redlock.WithNodeTimeout(nodeTimeout))
			ctx := context.Background()
			lock := mustTryAcquire(t, rc, ctx, "mine", time.Minute)
			redlock.WaitSettled(lock)
			for _, s := range c.servers[:3] {
				s.Set("theirs", "another holder")
			}
			// Slow, not dead: their replies are held until the attempt and
			// the Release have returned, within the node timeout, so that
			// the calls finish in the background (a call past its timeout
			// is dropped, and its key expires with the ttl). Waiting for
			// them would take the whole node timeout.
			for _, f := range frozen {
				f.shut()
				defer f.reopen()
			}

			start := time.Now()
			_, err := rc.TryAcquire(ctx, "theirs", time.Minute)
			mustNotAcquire(t, err)
			if took := time.Since(start); took >= nodeTimeout {
				t.Fatalf("the failed attempt took %v: it waited for the frozen nodes", took)
			}
			start = time.Now()
			if err := lock.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if took := time.Since(start); took >= nodeTimeout {
				t.Fatalf("Release took %v: it waited for the frozen nodes", took)
			}
			for _, f := range frozen {
				f.reopen()
			}
			// In the background, each frozen node got the attempt's SET
			// and then its delete, and the release's delete.
			defer func() {
				if !t.Failed() {
					return
				}
				t.Logf("mine on %v, theirs on %v (another holder on %v)", c.holdersAny("mine"), c.holdersAny("theirs"), c.holders("theirs", "another holder"))
			}()
			waitFor(t, "the frozen nodes' calls", func() bool {
				return len(c.holdersAny("mine")) == 0 && len(c.holders("theirs", "another holder")) == 3 && len(c.holdersAny("theirs")) == 3
			})
		})
	}
}

// TestLock_Release_doesNotWaitForAFailingNode: once a quorum has deleted
// the token, Release does not wait out the timeout of a node whose last
// call went unanswered; its key expires with the ttl.
func TestLock_Release_doesNotWaitForAFailingNode(t *testing.T) {
	c := newCluster(t, 4)
	hung := newHungNode(t)
	stuck := redis.NewClient(&redis.Options{Addr: hung.Addr(), ReadTimeout: time.Minute, MaxRetries: -1})
	t.Cleanup(func() { _ = stuck.Close() })
	const nodeTimeout = 3 * time.Second
	rc := mustNew(t, append(slices.Clone(c.clients), stuck), redlock.WithNodeTimeout(nodeTimeout))
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "k", time.Minute)
	redlock.WaitSettled(lock) // the hung node's call has timed out
	start := time.Now()
	if err := lock.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// Wide: a Release that waited for the hung node takes the whole 3 s.
	if took := time.Since(start); took > nodeTimeout/2 {
		t.Fatalf("Release took %v: it waited for a node known to be failing", took)
	}
	// The healthy nodes' deletes: those slower than the quorum's grace
	// (a loaded machine) land in the background.
	waitFor(t, "the healthy nodes' deletes", func() bool { return len(c.holdersAny("k")) == 0 })
}

// TestLock_Release_waitsForARecoveredNode: a node that failed and answers
// again is waited for again: its answer clears its failing mark (checked
// at every run), and right after Release no node holds the key. On a
// loaded machine a healthy node may answer later than Release's grace
// after the quorum (and is rightly not waited for), so the Release scene
// is played up to 5 times, on fresh nodes, and must come out clean once; a
// node still taken for failing is passed over every time.
func TestLock_Release_waitsForARecoveredNode(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	var left []int
	for run := range 5 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			c := newCluster(t, 5)
			clients := c.connect(t)
			slow := &delayHook{}
			addHook(t, clients[4], slow)
			rc := mustNew(t, clients)
			ctx := context.Background()
			c.servers[4].Close()
			lock := mustTryAcquire(t, rc, ctx, "a", time.Minute) // node 4 fails
			mustRelease(t, lock)
			c.restart(t, 4)
			lock = mustTryAcquire(t, rc, ctx, "b", time.Minute)
			redlock.WaitSettled(lock)
			if !c.servers[4].Exists("b") {
				t.Fatal("the restarted node did not take the key")
			}
			// The outcome that decides, whatever the machine's load: its
			// answer cleared its failing mark, so it is waited for again.
			if redlock.Failing(rc, 4) {
				t.Fatal("the recovered node is still taken for failing after it answered")
			}
			// A little slower than the others, within Release's grace: a
			// Release that took node 4 for failing would return at the
			// quorum, before its delete is even sent.
			slow.by.Store(int64(3 * time.Millisecond))
			if err := lock.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			for _, rdb := range clients {
				_ = rdb.Close()
			}
			left = c.holdersAny("b")
		})
		if t.Failed() || len(left) == 0 {
			return
		}
		t.Logf("run %d: key left on nodes %v", run, left)
	}
	t.Fatalf("key left on nodes %v in every run: Release did not wait for the recovered node", left)
}

// delayHook holds every command or pipeline of its client for by before
// sending it, as a slow link would.
type delayHook struct{ by atomic.Int64 }

func (h *delayHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *delayHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		time.Sleep(time.Duration(h.by.Load()))
		return next(ctx, cmd)
	}
}

func (h *delayHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		time.Sleep(time.Duration(h.by.Load()))
		return next(ctx, cmds)
	}
}

// replyGate holds its node's replies while shut: each call lands, and its
// reply waits for reopen.
type replyGate struct {
	mu   sync.Mutex
	open chan struct{} // closed by reopen; nil while not shut
}

func (g *replyGate) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

// reopen lets the held replies go, and the next ones through.
func (g *replyGate) reopen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		close(g.open)
		g.open = nil
	}
}

func (g *replyGate) hold() {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	if open != nil {
		<-open
	}
}

func (g *replyGate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *replyGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		defer g.hold()
		return next(ctx, cmd)
	}
}

func (g *replyGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		defer g.hold()
		return next(ctx, cmds)
	}
}

func TestLock_Extend_badInput(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t), ctx, "k", time.Second)
	redlock.WaitSettled(lock)
	before := c.commands()
	for _, ttl := range []time.Duration{0, -time.Second, time.Millisecond} {
		if err := lock.Extend(ctx, ttl); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("Extend(%v): err = %v, want ErrInvalidArgument", ttl, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := lock.Extend(cctx, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("Extend with a cancelled context: err = %v, want context.Canceled", err)
	}
	if n := c.commands() - before; n != 0 {
		t.Fatalf("rejected extends sent %d commands, want 0", n)
	}
}

// TestLock_concurrentUse extends and releases one lock from many goroutines
// at once; -race checks the Lock, and the lock ends released.
func TestLock_concurrentUse(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t), ctx, "k", time.Second)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 4 {
				_ = lock.Release(ctx)
				return
			}
			_ = lock.Extend(ctx, time.Second)
			_ = lock.Validity()
			_ = lock.Until()
		}()
	}
	wg.Wait()
	redlock.WaitSettled(lock)
	if lock.Validity() != 0 {
		t.Fatal("lock still valid after Release")
	}
	if got := c.holdersAny("k"); len(got) != 0 {
		t.Fatalf("key left on nodes %v", got)
	}
}

// TestClient_Acquire_mutualExclusion runs contenders from several Clients,
// each with its own connections as separate processes would have, sharing a
// counter that they update with a non-atomic read and write. Partway
// through, a minority of the nodes is closed. No two critical sections may
// overlap, no update may be lost, and every contender must finish.
func TestClient_Acquire_mutualExclusion(t *testing.T) {
	const (
		nodes      = 5
		processes  = 3
		goroutines = 2 // per process: a Client is shared within a process
		rounds     = 40
		total      = processes * goroutines * rounds
	)
	c := newCluster(t, nodes)
	var (
		inside, overlaps, sections atomic.Int64
		counter                    atomic.Int64
		closeOnce                  sync.Once
		wg                         sync.WaitGroup
		errs                       = make(chan error, total)
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	logger := slog.New(slog.DiscardHandler)
	for range processes {
		rc := mustNew(t, c.connect(t),
			redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 4*time.Millisecond)),
			redlock.WithNodeTimeout(time.Second),
			redlock.WithLogger(logger))
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					lock, err := rc.Acquire(ctx, "stock", 5*time.Second)
					if err != nil {
						errs <- fmt.Errorf("Acquire: %w", err)
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					v := counter.Load()
					time.Sleep(100 * time.Microsecond) // widen the read-to-write window
					counter.Store(v + 1)
					inside.Add(-1)
					if sections.Add(1) == total*2/5 {
						closeOnce.Do(func() {
							c.servers[3].Close()
							c.servers[4].Close()
						})
					}
					if err := lock.Release(ctx); err != nil {
						errs <- fmt.Errorf("Release: %w", err)
					}
					redlock.WaitSettled(lock)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d overlapping critical sections", n)
	}
	if got, want := sections.Load(), int64(total); got != want {
		t.Errorf("%d critical sections completed, want %d", got, want)
	}
	if got, want := counter.Load(), sections.Load(); got != want {
		t.Errorf("counter = %d after %d sections: %d updates lost", got, want, want-got)
	}
	for i, s := range c.servers[:3] {
		if s.Exists("stock") {
			t.Errorf("key left on live node %d", i)
		}
	}
}

// TestLock_Release_lossShownBySlowerNodes: a lock whose key expired on a
// majority is reported lost (ErrLockLost) by Release also when two of the
// nodes that show it answer well after the others: mixed answers (deleted
// on two, absent on one) do not tell whether the lock held, so Release
// waits for the rest, up to the node timeout.
func TestLock_Release_lossShownBySlowerNodes(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 5)
	slow := []*gateHook{{}, {}}
	for i, h := range slow {
		addHook(t, c.clients[1+i], h)
	}
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t, redlock.WithNodeTimeout(5*time.Second)), ctx, "k", 10*time.Second)
	redlock.WaitSettled(lock)
	for _, i := range []int{0, 1, 2} {
		c.servers[i].FastForward(time.Minute)
	}
	for _, h := range slow {
		h.close()
	}
	released := make(chan error, 1)
	go func() { released <- lock.Release(ctx) }()
	// Nodes 1 and 2 answer once the others have, and well after them.
	waitFor(t, "the releases of nodes 1 and 2 at their gates", func() bool { return slow[0].waiting.Load() == 1 && slow[1].waiting.Load() == 1 })
	time.Sleep(100 * time.Millisecond)
	for _, h := range slow {
		h.open()
	}
	if err := <-released; !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release: err = %v, want ErrLockLost: the key was gone on 3 of 5 nodes", err)
	}
}

// TestLock_Release_outcomes checks what Release reports when nodes fail or
// the validity has run out before it.
func TestLock_Release_outcomes(t *testing.T) {
	tests := []struct {
		name     string
		down     []int         // nodes closed before Release
		expire   []int         // nodes whose key has expired before Release
		advance  time.Duration // fake time passed between acquire and Release
		wantLost bool
		wantErr  bool
	}{
		{name: "all up", wantErr: false},
		{name: "minority down", down: []int{3, 4}},
		{name: "majority down within validity", down: []int{2, 3, 4}, wantErr: true},
		{name: "minority expired", expire: []int{4}},
		{name: "majority expired", expire: []int{0, 1, 2}, wantLost: true, wantErr: true},
		{name: "ran over, quorum still holds", advance: time.Minute},
		{name: "ran over, majority down", advance: time.Minute, down: []int{2, 3, 4}, wantLost: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, 5)
			clock := fakeClock()
			ctx := context.Background()
			lock := mustTryAcquire(t, c.client(t, redlock.WithClock(clock)), ctx, "k", 10*time.Second)
			redlock.WaitSettled(lock)
			clock.Advance(tt.advance)
			for _, i := range tt.expire {
				c.servers[i].FastForward(time.Minute)
			}
			for _, i := range tt.down {
				c.servers[i].Close()
			}
			err := lock.Release(ctx)
			redlock.WaitSettled(lock)
			if (err != nil) != tt.wantErr || errors.Is(err, redlock.ErrLockLost) != tt.wantLost {
				t.Fatalf("Release: err = %v, want error %v, ErrLockLost %v", err, tt.wantErr, tt.wantLost)
			}
			var ne *redlock.NodeError
			if len(tt.down) > 0 && err != nil && !errors.As(err, &ne) {
				t.Fatalf("Release: err = %v, want the down nodes' *NodeError", err)
			}
			for i, s := range c.servers {
				if !slices.Contains(tt.down, i) && s.Exists("k") {
					t.Errorf("key left on live node %d", i)
				}
			}
		})
	}
}

// scriptHook runs before on each run of the script whose body it was given
// (EVALSHA by its hash, or EVAL of the body); an error from before is the
// command's answer.
type scriptHook struct {
	sha, body string
	before    func(ctx context.Context) error
}

func newScriptHook(t *testing.T, file string, before func(ctx context.Context) error) scriptHook {
	t.Helper()
	body := []byte(redlock.ScriptSource(file))
	return scriptHook{sha: fmt.Sprintf("%x", sha1.Sum(body)), body: string(body), before: before}
}

func (h scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && (args[1] == h.sha || args[1] == h.body) {
			if err := h.before(ctx); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (h scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFencing_storedOnlyWhereHeld: a fenced acquire counts its token as
// stored only on nodes where it holds the key. On the others a competing
// acquire may already have drawn its token from the counter, below ours,
// and then win once our lock has ended.
//
// Five nodes. j's fenced acquire has drawn 1 and 1 on nodes 3 and 4, and
// waits for node 0. i then takes nodes 0, 1 and 2, answering 6, 6 and 10:
// its token is 10. Its raise to 10 fails on nodes 0 and 1 (a minority) and
// lands on 3 and 4, where j holds the key. Counting those, a quorum stores
// 10; but once i's lock ends, j's call to node 0 draws 7 and j holds nodes
// 0, 3 and 4 with token 7, after i's 10. i must not be granted.
func TestFencing_storedOnlyWhereHeld(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 5)
	ctx := context.Background()
	for i, v := range []string{"5", "5", "9"} {
		if err := c.servers[i].Set("{f}:fence", v); err != nil {
			t.Fatal(err)
		}
	}
	// j's clients: node 0 answers when let go on, nodes 1 and 2 fail.
	jClients := c.connect(t)
	goOn := make(chan struct{})
	block := func(ch <-chan struct{}) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			select {
			case <-ch:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	addHook(t, jClients[0], newScriptHook(t, "acquire.lua", block(goOn)))
	for _, i := range []int{1, 2} {
		addHook(t, jClients[i], newScriptHook(t, "acquire.lua", func(context.Context) error { return errors.New("node down") }))
	}
	j, err := redlock.New(jClients, redlock.WithNodeTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lock *redlock.Lock
		err  error
	}
	jDone := make(chan result, 1)
	go func() {
		l, err := j.TryAcquire(ctx, "f", time.Minute, redlock.WithFencing())
		jDone <- result{l, err}
	}()
	waitFor(t, "j's key on nodes 3 and 4", func() bool { return c.servers[3].Exists("f") && c.servers[4].Exists("f") })

	// i's clients: the raise fails on nodes 0 and 1.
	iClients := c.connect(t)
	for _, i := range []int{0, 1} {
		addHook(t, iClients[i], newScriptHook(t, "raise_fence.lua", func(context.Context) error { return errors.New("node down") }))
	}
	i, err := redlock.New(iClients)
	if err != nil {
		t.Fatal(err)
	}
	iLock, iErr := i.TryAcquire(ctx, "f", time.Minute, redlock.WithFencing())
	if iErr == nil {
		mustRelease(t, iLock) // i's lock ends
	} else if !errors.Is(iErr, redlock.ErrNotAcquired) {
		t.Fatalf("i: %v, want ErrNotAcquired or a lock", iErr)
	}
	close(goOn)
	jr := <-jDone
	if jr.err != nil {
		t.Fatalf("j: %v", jr.err)
	}
	defer mustRelease(t, jr.lock)
	if iErr == nil && jr.lock.FencingToken() <= iLock.FencingToken() {
		t.Fatalf("j holds the lock after i with token %d, not above i's %d", jr.lock.FencingToken(), iLock.FencingToken())
	}
	if iErr == nil {
		t.Fatalf("i was granted token %d stored only where it did not hold the key", iLock.FencingToken())
	}
}

// TestClient_Drain: a failed attempt and a Release return before two slow
// nodes answer, leaving their calls in the background; Drain returns once
// those calls have returned, so that a program exiting after it leaves no
// key behind. A Drain whose context ends first says so.
func TestClient_Drain(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	for _, batching := range []bool{false, true} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			c := newCluster(t, 5)
			slow := []*gateHook{{}, {}}
			addHook(t, c.clients[3], slow[0])
			addHook(t, c.clients[4], slow[1])
			rc := c.client(t, redlock.WithBatching(batching), redlock.WithNodeTimeout(time.Minute))
			ctx := context.Background()
			if err := rc.Drain(ctx); err != nil {
				t.Fatalf("Drain of an idle Client: %v", err)
			}
			lock := mustTryAcquire(t, rc, ctx, "mine", time.Minute)
			redlock.WaitSettled(lock)
			for _, s := range c.servers[:3] {
				s.Set("theirs", "another holder")
			}
			for _, s := range slow {
				s.close()
				t.Cleanup(s.open) // if the test ends early
			}
			// The fast nodes' answers decide both operations; the slow
			// nodes' calls (the failed attempt's SET and delete, the
			// release's delete) wait behind the gates.
			_, err := rc.TryAcquire(ctx, "theirs", time.Minute)
			mustNotAcquire(t, err)
			if err := lock.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			defer cancel()
			if err := rc.Drain(short); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Drain with the slow nodes' calls held: %v, want DeadlineExceeded", err)
			}
			if got := c.holdersAny("mine"); !slices.Equal(got, []int{3, 4}) {
				t.Fatalf("before the slow nodes answer, mine is on nodes %v, want [3 4]", got)
			}
			for _, s := range slow {
				s.open()
			}
			if err := rc.Drain(ctx); err != nil {
				t.Fatalf("Drain: %v", err)
			}
			// Nothing to wait for: every call has returned.
			if got := c.holdersAny("mine"); len(got) != 0 {
				t.Fatalf("after Drain, the released lock is still on nodes %v", got)
			}
			if got, others := c.holdersAny("theirs"), c.holders("theirs", "another holder"); len(got) != 3 || len(others) != 3 {
				t.Fatalf("after Drain, the failed attempt's key is left: theirs on %v, the other holder's on %v", got, others)
			}
		})
	}
}

// gateHook holds a node's commands, from the moment close is called until
// open is: a node that answers only when the test lets it.
type gateHook struct {
	gate    atomic.Pointer[chan struct{}]
	waiting atomic.Int32 // commands held now
}

func (h *gateHook) close() {
	ch := make(chan struct{})
	h.gate.Store(&ch)
}

func (h *gateHook) open() {
	if ch := h.gate.Swap(nil); ch != nil {
		close(*ch)
	}
}

func (h *gateHook) wait() {
	if ch := h.gate.Load(); ch != nil {
		h.waiting.Add(1)
		defer h.waiting.Add(-1)
		<-*ch
	}
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.wait()
		return next(ctx, cmd)
	}
}

func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.wait()
		return next(ctx, cmds)
	}
}

// TestTryAcquire_cutByCallerLeavesNothing: an attempt whose caller's
// context ends while its SETs are on their way gives up at once, but its
// calls are not cut: a call cut there could land on its node after the
// attempt's delete (sent on another connection) and leave the key until
// its ttl. Here each node's client gives up on a command when its context
// ends although the command still lands later, as a client that cuts a
// read at the deadline does with a command already written.
func TestTryAcquire_cutByCallerLeavesNothing(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			c := newCluster(t, 3)
			rc := c.client(t, redlock.WithBatching(batching), redlock.WithNodeTimeout(time.Minute))
			ctx := context.Background()
			// The scripts are loaded, and the nodes known.
			mustRelease(t, mustTryAcquire(t, rc, ctx, "warm-up", time.Minute))
			if err := rc.Drain(ctx); err != nil {
				t.Fatal(err)
			}
			late := make([]*landsLateHook, len(c.clients))
			for i, rdb := range c.clients {
				late[i] = &landsLateHook{key: "k", gate: make(chan struct{})}
				addHook(t, rdb, late[i])
				t.Cleanup(late[i].open)
			}
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, err := rc.TryAcquire(short, "k", time.Minute)
			mustNotAcquire(t, err)
			// A delete that does not wait for the SETs is sent by now (it
			// is, if the SETs were cut); one that waits is not.
			waited, cancelWait := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancelWait()
			_ = rc.Drain(waited)
			for _, h := range late {
				h.open()
			}
			if err := rc.Drain(ctx); err != nil {
				t.Fatalf("Drain: %v", err)
			}
			for _, h := range late {
				h.landed.Wait()
			}
			if got := c.holdersAny("k"); len(got) != 0 {
				t.Fatalf("after a failed attempt and Drain, the key is on nodes %v", got)
			}
		})
	}
}

// landsLateHook holds the first command naming key until the test opens
// the gate; if the command's context ends first, the caller is answered
// with its error at once, and the command still runs once the gate opens.
type landsLateHook struct {
	key    string
	gate   chan struct{}
	once   sync.Once
	held   atomic.Bool
	landed sync.WaitGroup
}

func (h *landsLateHook) open() { h.once.Do(func() { close(h.gate) }) }

func (h *landsLateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *landsLateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !slices.Contains(cmd.Args(), any(h.key)) || h.held.Swap(true) {
			return next(ctx, cmd)
		}
		lateCmd := redis.NewCmd(context.WithoutCancel(ctx), cmd.Args()...)
		done := make(chan error, 1)
		h.landed.Add(1)
		go func() {
			defer h.landed.Done()
			<-h.gate
			done <- next(context.WithoutCancel(ctx), lateCmd)
		}()
		select {
		case err := <-done:
			c := cmd.(*redis.Cmd)
			c.SetVal(lateCmd.Val())
			c.SetErr(lateCmd.Err())
			return err
		case <-ctx.Done():
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
	}
}

func (h *landsLateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLock_Release_doesNotWaitForAFailingMajority: when every node yet to
// answer is known to be failing (frozen here), Release does not wait for
// them, even though the nodes that answered are too few to tell: it reports
// at once that the release is not confirmed. It used to wait out the node
// timeout whenever fewer than a quorum had deleted the token.
func TestLock_Release_doesNotWaitForAFailingMajority(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	const timeout = 2 * time.Second
	c := newCluster(t, 3)
	rc := c.client(t, redlock.WithNodeTimeout(timeout))
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "k", time.Minute)
	redlock.WaitSettled(lock)
	for _, i := range []int{1, 2} {
		h := &gateHook{}
		h.close()
		addHook(t, c.clients[i], h)
		t.Cleanup(h.open)
	}
	// An Extend finds them failing.
	if err := lock.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrNotConfirmed) {
		t.Fatalf("Extend: %v, want ErrNotConfirmed", err)
	}
	start := time.Now()
	if err := lock.Release(ctx); !errors.Is(err, redlock.ErrNotConfirmed) {
		t.Fatalf("Release: %v, want ErrNotConfirmed: deleted on 1 of 3 nodes, the others frozen", err)
	}
	// Wide: a Release that waited for the frozen nodes takes the whole 2 s.
	if took := time.Since(start); took > timeout/2 {
		t.Fatalf("Release took %v with the nodes yet to answer known to be failing, want well under the node timeout (%v)", took, timeout)
	}
}

// stallHook, while armed, holds a node's scripts until their context's
// deadline and fails them with its error, as a frozen node does: the
// Client marks the node failing, and the mark stays once the node answers
// again, until its next call returns.
type stallHook struct{ armed atomic.Bool }

func (h *stallHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *stallHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); h.armed.Load() && (n == "evalsha" || n == "eval" || n == "set") {
			<-ctx.Done()
			cmd.SetErr(ctx.Err())
			return ctx.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *stallHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// recoveredCluster returns 3 nodes of which 1 and 2 are marked failing by
// the Client (they did not answer an Extend of lock) and have recovered,
// with hooks that, once armed, delay node 0's script answers by 400 ms and
// the others' by 500 ms: the recovered nodes answer a little after node 0.
func recoveredCluster(t *testing.T) (c *cluster, rc *redlock.Client, lock *redlock.Lock, armSlow func()) {
	t.Helper()
	c = newCluster(t, 3)
	stall := []*stallHook{nil, {}, {}}
	slow := []*slowReplies{{d: 400 * time.Millisecond}, {d: 500 * time.Millisecond}, {d: 500 * time.Millisecond}}
	for i, rdb := range c.clients {
		addHook(t, rdb, slow[i])
		if stall[i] != nil {
			addHook(t, rdb, stall[i])
		}
	}
	rc = c.client(t, redlock.WithNodeTimeout(2*time.Second))
	ctx := context.Background()
	lock = mustTryAcquire(t, rc, ctx, "k", time.Minute)
	redlock.WaitSettled(lock)
	stall[1].armed.Store(true)
	stall[2].armed.Store(true)
	if err := lock.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrNotConfirmed) {
		t.Fatalf("Extend: %v, want ErrNotConfirmed", err)
	}
	redlock.WaitSettled(lock)
	// And their sends have returned: a release waits in a node's pipe for
	// an overdue extend of its key, which may take the key there (as for
	// an acquire), and the recovered nodes would answer it late.
	waitFor(t, "the stalled extends to return", func() bool { return redlock.PipesIdle(rc) })
	stall[1].armed.Store(false)
	stall[2].armed.Store(false)
	return c, rc, lock, func() {
		for _, h := range slow {
			h.armed.Store(true)
		}
	}
}

// TestLock_Release_waitsForNodesMarkedFailingThatAnswer: nodes 1 and 2,
// marked failing, have recovered, and the key is gone from both. At
// Release they answer a little after node 0, which still holds the key:
// they are given a grace, and their answers show the lock lost on a
// majority. (Not waiting for them at all, Release took them for failed
// nodes that may still hold it, and returned nil.)
func TestLock_Release_waitsForNodesMarkedFailingThatAnswer(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c, _, lock, armSlow := recoveredCluster(t)
	c.servers[1].Del("k")
	c.servers[2].Del("k")
	armSlow()
	if err := lock.Release(context.Background()); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release: %v, want ErrLockLost: the key was gone from 2 of 3 nodes, which answered", err)
	}
}

// TestLock_Release_mixedAnswersFailingNodes: a Release whose answers are
// mixed does not wait for nodes known to be failing (frozen here), and the
// release after a hand-off that did not win counts the nodes the hand-off
// found without the token as free: neither waits a node timeout for nodes
// that cannot change its result.
func TestLock_Release_mixedAnswersFailingNodes(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	const timeout = 2 * time.Second
	ctx := context.Background()
	frozen := func(t *testing.T, c *cluster) {
		for _, i := range []int{3, 4} {
			h := &gateHook{}
			h.close()
			addHook(t, c.clients[i], h)
			t.Cleanup(h.open)
		}
	}
	t.Run("frozen nodes known to be failing", func(t *testing.T) {
		c := newCluster(t, 5)
		rc := c.client(t, redlock.WithNodeTimeout(timeout))
		lock := mustTryAcquire(t, rc, ctx, "a", time.Minute)
		redlock.WaitSettled(lock)
		frozen(t, c)
		// A first release with mixed answers (deleted on 1 and 2, absent
		// on 0) waits for the frozen nodes, not known to be failing yet,
		// and learns that they are.
		c.servers[0].Del("a")
		if err := lock.Release(ctx); err != nil {
			t.Fatalf("Release: %v, want nil: a quorum may still hold it", err)
		}
		lock = mustTryAcquire(t, rc, ctx, "b", time.Minute)
		waitFor(t, "the key on node 0", func() bool { return c.servers[0].Exists("b") })
		c.servers[0].Del("b")
		start := time.Now()
		if err := lock.Release(ctx); err != nil {
			t.Fatalf("Release: %v, want nil: a quorum may still hold it", err)
		}
		if took := time.Since(start); took > timeout/2 {
			t.Fatalf("Release took %v with its undecided nodes known to be failing, want well under the node timeout (%v)", took, timeout)
		}
	})
	t.Run("after a hand-off that did not win", func(t *testing.T) {
		c := newCluster(t, 5)
		rc := c.client(t, redlock.WithNodeTimeout(timeout))
		lock, err := rc.Acquire(ctx, "h", time.Minute) // an Acquire holds the Client's turn
		if err != nil {
			t.Fatal(err)
		}
		redlock.WaitSettled(lock)
		frozen(t, c)
		c.servers[2].Set("h", "another holder")
		next := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 3*timeout)
			defer cancel()
			l, err := rc.Acquire(wctx, "h", time.Minute)
			if err == nil {
				err = errors.New("acquired a key another holder has on a node, with two nodes frozen")
				_ = l.Release(ctx)
			}
			next <- err
		}()
		waitFor(t, "the second Acquire to wait in the Client's line", func() bool { return redlock.LocalWaiters(rc, "h") == 1 })
		start := time.Now()
		_ = lock.Release(ctx)
		if took := time.Since(start); took > 3*timeout/2 {
			t.Fatalf("Release took %v: the hand-off's node timeout and another, want one (%v)", took, timeout)
		}
		if err := <-next; !errors.Is(err, redlock.ErrNotAcquired) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the waiter: %v", err)
		}
	})
}
