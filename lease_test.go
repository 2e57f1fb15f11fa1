package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/leaktest"
)

// waiters blocks until the fake clock has n waiters: the lock's goroutines
// are then parked on it and an Advance reaches them.
func waiters(t *testing.T, clock *manualClock, n int) {
	t.Helper()
	waitersOr(t, clock, n, nil)
}

// clientStacks is the stacks of the goroutines in the library's code.
func clientStacks() string {
	var ours []string
	for _, g := range leaktest.Stacks() {
		if strings.Contains(g, "quorumlock/redlock.") {
			ours = append(ours, g)
		}
	}
	return strings.Join(ours, "\n\n")
}

// closed waits for ch to close; the bound is generous and only catches a
// channel that never closes, and then prints what the Client's goroutines
// were doing.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(10 * time.Second):
		fmt.Fprintf(os.Stderr, "never closed; the Client's goroutines:\n%s\n", clientStacks())
		return false
	}
}

func isOpen(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

func fenceOf(t *testing.T, s *miniredis.Miniredis, key string) int64 {
	t.Helper()
	v, err := s.Get("{" + key + "}:fence")
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

func TestLock_FencingToken_increases(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	var last uint64
	for i := range 20 {
		lock := mustTryAcquire(t, rc, ctx, "k", time.Second, redlock.WithFencing())
		if tok := lock.FencingToken(); tok <= last {
			t.Fatalf("acquire %d: token %d after %d", i, tok, last)
		} else {
			last = tok
		}
		mustRelease(t, lock)
	}
}

// TestLock_FencingToken_fromTheClock: a counter drawn for the first time,
// or after it expired, starts from the node's clock in microseconds, so
// that it is above every value it gave before it expired; a counter is kept
// for the lock's ttl once the node's clock has passed its value, and no
// longer: the keys a node keeps do not grow with every key ever locked.
func TestLock_FencingToken_fromTheClock(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	before := uint64(time.Now().UnixMicro())
	lock := mustTryAcquire(t, rc, ctx, "k", time.Second, redlock.WithFencing())
	first := lock.FencingToken()
	if after := uint64(time.Now().UnixMicro()); first < before || first > after {
		t.Fatalf("first token %d, want the nodes' clock in µs, between %d and %d", first, before, after)
	}
	mustRelease(t, lock)
	redlock.WaitSettled(lock)
	// The nodes' clocks differ by microseconds here: a counter raised to
	// another node's value is ahead of its own clock by at most a
	// millisecond or two.
	const slack = 5 * time.Millisecond
	for i, s := range c.servers {
		if ttl := s.TTL("{k}:fence"); ttl < time.Second || ttl > time.Second+slack {
			t.Errorf("node %d: the counter expires in %v, want the lock's ttl (1s)", i, ttl)
		}
		s.FastForward(time.Second + slack)
		if s.Exists("{k}:fence") {
			t.Errorf("node %d keeps the counter past the lock's ttl", i)
		}
	}
	lock = mustTryAcquire(t, rc, ctx, "k", time.Second, redlock.WithFencing())
	defer mustRelease(t, lock)
	if lock.FencingToken() <= first {
		t.Fatalf("token %d after the counters expired, not above %d given before", lock.FencingToken(), first)
	}
}

// TestLock_FencingToken_keptUntilTheClockPassesIt: a counter ahead of its
// node's clock (raised to a token from a node whose clock is ahead) is
// kept until the node's clock has passed it, and then for the lock's ttl,
// so that a value drawn from the clock after it expired is still above it.
func TestLock_FencingToken_keptUntilTheClockPassesIt(t *testing.T) {
	c := newCluster(t, 3)
	ahead := time.Now().Add(time.Hour).UnixMicro()
	_ = c.servers[0].Set("{k}:fence", strconv.FormatInt(ahead, 10))
	lock := mustTryAcquire(t, c.client(t), context.Background(), "k", time.Second, redlock.WithFencing())
	if tok := lock.FencingToken(); tok != uint64(ahead)+1 {
		t.Fatalf("token %d, want %d: one more than the counter ahead of the clock", tok, ahead+1)
	}
	mustRelease(t, lock)
	redlock.WaitSettled(lock)
	for i, s := range c.servers {
		if ttl := s.TTL("{k}:fence"); ttl < time.Hour || ttl > time.Hour+time.Second+time.Minute {
			t.Errorf("node %d: the counter at an hour ahead expires in %v, want an hour and the ttl", i, ttl)
		}
	}
}

// TestWithFenceHorizon: with a horizon longer than the lock's ttl, the
// counters are kept that long once the nodes' clocks have passed them, so a
// clock set back by less than the horizon after the lock's ttl has gone by
// still gives a higher token (without it, the counters would be gone and
// the token drawn from the clock set back would be lower).
func TestWithFenceHorizon(t *testing.T) {
	if _, err := redlock.New(newCluster(t, 1).clients, redlock.WithFenceHorizon(-time.Second)); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("New(WithFenceHorizon(-1s)): err = %v, want ErrInvalidArgument", err)
	}
	// The longest horizon: "for good" is the longest time to live a
	// Duration can say, not an overflow.
	t.Run("MaxInt64", func(t *testing.T) {
		c := newCluster(t, 3)
		lock := mustTryAcquire(t, c.client(t, redlock.WithFenceHorizon(math.MaxInt64)), context.Background(), "k", time.Second, redlock.WithFencing())
		mustRelease(t, lock)
		redlock.WaitSettled(lock)
		const longest = time.Duration(math.MaxInt64) / time.Millisecond * time.Millisecond
		for i, s := range c.servers {
			if ttl := s.TTL("{k}:fence"); ttl < longest-time.Second {
				t.Errorf("node %d: the counter expires in %v, want %v", i, ttl, longest)
			}
		}
	})
	for _, tc := range []struct {
		name string
		acq  func(rc *redlock.Client) (*redlock.Lock, error)
		keys []string
	}{
		{"plain", func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.TryAcquire(context.Background(), "k", time.Second, redlock.WithFencing())
		}, []string{"{k}:fence"}},
		{"multi-key", func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.TryAcquireAll(context.Background(), []string{"j", "k"}, time.Second, redlock.WithFencing())
		}, []string{"{j}:fence", "{k}:fence"}},
		{"fair", func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.TryAcquire(context.Background(), "k", time.Second, redlock.WithFencing(), redlock.Fair())
		}, []string{"{k}:fence", "{k}:tickets"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			rc := c.client(t, redlock.WithFenceHorizon(time.Hour))
			first, err := tc.acq(rc)
			if err != nil {
				t.Fatal(err)
			}
			mustRelease(t, first)
			redlock.WaitSettled(first)
			// Another Client, without a horizon, locks the key meanwhile:
			// it does not cut the counters' time short (it used to set
			// them to expire after its own ttl).
			other, err := tc.acq(mustNew(t, c.connect(t)))
			if err != nil {
				t.Fatal(err)
			}
			mustRelease(t, other)
			redlock.WaitSettled(other)
			for i, s := range c.servers {
				for _, k := range tc.keys {
					if ttl := s.TTL(k); ttl < time.Hour || ttl > time.Hour+5*time.Millisecond {
						t.Errorf("node %d: %s expires in %v, want the horizon (1h)", i, k, ttl)
					}
				}
				// The lock's ttl goes by, then the node's clock is set
				// back half an hour.
				s.FastForward(time.Second + 5*time.Millisecond)
				s.SetTime(time.Now().Add(-30 * time.Minute))
			}
			second, err := tc.acq(rc)
			if err != nil {
				t.Fatal(err)
			}
			defer mustRelease(t, second)
			if last := max(first.FencingToken(), other.FencingToken()); second.FencingToken() <= last {
				t.Fatalf("token %d after a clock set back within the horizon, not above %d", second.FencingToken(), last)
			}
		})
	}
}

// TestLock_FencingToken_counterAheadOfTheClock: a counter above the node's
// clock (raised to another node's token, from a clock ahead) goes on from
// its value, and one set by an older version of the library (small, no
// time to live) is taken over: the next token is above it and the counter
// now expires.
func TestLock_FencingToken_counterAheadOfTheClock(t *testing.T) {
	ahead := time.Now().UnixMicro() + int64(time.Hour/time.Microsecond)
	for _, tc := range []struct {
		name    string
		counter int64
		want    func(tok uint64) bool
	}{
		{"ahead of the clock", ahead, func(tok uint64) bool { return tok == uint64(ahead)+1 }},
		{"a small counter without ttl", 41, func(tok uint64) bool { return tok >= uint64(time.Now().Add(-time.Minute).UnixMicro()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			for _, s := range c.servers {
				_ = s.Set("{k}:fence", strconv.FormatInt(tc.counter, 10))
			}
			lock := mustTryAcquire(t, c.client(t), context.Background(), "k", time.Second, redlock.WithFencing())
			defer mustRelease(t, lock)
			if tok := lock.FencingToken(); !tc.want(tok) {
				t.Fatalf("token %d from counters at %d", tok, tc.counter)
			}
			redlock.WaitSettled(lock)
			for i, s := range c.servers {
				if ttl := s.TTL("{k}:fence"); ttl <= 0 {
					t.Errorf("node %d: the counter has no time to live after the acquire", i)
				}
			}
		})
	}
}

func TestLock_FencingToken_off(t *testing.T) {
	c := newCluster(t, 3)
	lock := mustTryAcquire(t, c.client(t), context.Background(), "k", time.Second)
	if lock.FencingToken() != 0 {
		t.Fatalf("token %d without WithFencing", lock.FencingToken())
	}
	mustRelease(t, lock)
	if c.servers[0].Exists("{k}:fence") {
		t.Fatal("a lock without fencing left a counter")
	}
	var nilLock *redlock.Lock
	if nilLock.FencingToken() != 0 {
		t.Fatal("nil lock has a token")
	}
}

// TestLock_FencingToken_nodesLostData: counters that differ between nodes
// (nodes restarted empty, or that missed acquires) still give a token above
// every earlier one while a majority kept the highest, and the nodes are
// brought up to it.
func TestLock_FencingToken_nodesLostData(t *testing.T) {
	tests := []struct {
		name     string
		counters []int64 // per node, before the acquire
	}{
		{"minority restarted empty", []int64{10, 10, 10, 0, 0}},
		{"a majority kept the highest, the rest are behind", []int64{10, 10, 10, 3, 0}},
		{"all equal", []int64{7, 7, 7, 7, 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t, 5)
			// Far ahead of the nodes' clocks: the counters decide.
			base := time.Now().UnixMicro() + int64(time.Hour/time.Microsecond)
			var highest int64
			for i, v := range tt.counters {
				if v > 0 {
					_ = c.servers[i].Set("{k}:fence", strconv.FormatInt(base+v, 10))
				}
				highest = max(highest, base+v)
			}
			lock := mustTryAcquire(t, c.client(t), context.Background(), "k", time.Second, redlock.WithFencing())
			if got := int64(lock.FencingToken()); got <= highest {
				t.Fatalf("token %d, want above the highest counter %d", got, highest)
			}
			redlock.WaitSettled(lock)
			for i, s := range c.servers {
				if got := fenceOf(t, s, "k"); got < int64(lock.FencingToken()) {
					t.Errorf("node %d counter %d after the acquire, want at least the token %d", i, got, lock.FencingToken())
				}
			}
			mustRelease(t, lock)
		})
	}
}

func TestFencedSet(t *testing.T) {
	s := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()

	for _, w := range []struct {
		token uint64
		value string
		stale bool
	}{
		{5, "a", false},
		{7, "b", false},
		{6, "stale", true},
		{7, "c", false}, // the same holder writing again
		{1, "stale", true},
	} {
		err := redlock.FencedSet(ctx, rdb, "stock", w.value, w.token)
		if got := errors.Is(err, redlock.ErrStaleToken); got != w.stale {
			t.Fatalf("FencedSet(token %d): err = %v, want stale %v", w.token, err, w.stale)
		}
		if w.stale && !strings.Contains(err.Error(), "below 7") {
			t.Fatalf("refusal %q does not name the highest token", err)
		}
	}
	if v, _ := s.Get("stock"); v != "c" {
		t.Fatalf("value = %q, want the last accepted write %q", v, "c")
	}
	for _, bad := range []struct {
		key   string
		token uint64
	}{{"", 1}, {"stock", 0}} {
		if err := redlock.FencedSet(ctx, rdb, bad.key, "x", bad.token); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("FencedSet(%q, token %d): err = %v, want ErrInvalidArgument", bad.key, bad.token, err)
		}
	}
}

// TestFencedGet_readModifyWrite plays the read-modify-write that write-only
// fencing lets through: holder A reads a stock of 8 and pauses past its
// validity; B acquires and reads 8; A's write of 7 lands first. With
// FencedSet alone, A's write is taken (no higher token was written yet)
// and so is B's: two sales, the stock down by one. With FencedGet before
// the write, B's read records B's token, and A's write is refused.
func TestFencedGet_readModifyWrite(t *testing.T) {
	for _, fencedRead := range []bool{false, true} {
		c := newCluster(t, 3)
		rc := c.client(t)
		store := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: store.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		ctx := context.Background()
		_ = store.Set("stock", "8")
		read := func(token uint64) (string, error) {
			if fencedRead {
				return redlock.FencedGet(ctx, rdb, "stock", token)
			}
			return rdb.Get(ctx, "stock").Result()
		}

		a := mustTryAcquire(t, rc, ctx, "lock:stock", time.Second, redlock.WithFencing())
		seenByA, err := read(a.FencingToken())
		if err != nil || seenByA != "8" {
			t.Fatalf("A read %q, %v", seenByA, err)
		}
		// A pauses past its validity: its keys expire, B takes the lock.
		redlock.WaitSettled(a)
		for _, s := range c.servers {
			s.FastForward(2 * time.Second)
		}
		b := mustTryAcquire(t, rc, ctx, "lock:stock", time.Second, redlock.WithFencing())
		seenByB, err := read(b.FencingToken())
		if err != nil || seenByB != "8" {
			t.Fatalf("B read %q, %v", seenByB, err)
		}
		errA := redlock.FencedSet(ctx, rdb, "stock", "7", a.FencingToken()) // A wakes up and writes
		errB := redlock.FencedSet(ctx, rdb, "stock", "7", b.FencingToken())
		if errB != nil {
			t.Fatalf("B's write: %v", errB)
		}
		switch {
		case fencedRead && !errors.Is(errA, redlock.ErrStaleToken):
			t.Fatalf("with FencedGet, A's stale write: err = %v, want ErrStaleToken", errA)
		case !fencedRead && errA != nil:
			// The interleaving this test is about: write-only fencing takes
			// A's write, and one item is sold twice.
			t.Fatalf("with FencedSet alone, A's write: err = %v, want it taken (the lost update FencedGet prevents)", errA)
		}
		mustRelease(t, b)
	}
}

// TestFencedGet_hugeTokens: tokens are compared exactly at every size, not
// as Lua numbers (doubles, which cannot tell 2^53 from 2^53+1): the older
// holder of a read-modify-write is refused however large the tokens, and
// so is a write-only holder behind a higher one.
func TestFencedGet_hugeTokens(t *testing.T) {
	store := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: store.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	for i, pair := range [][2]uint64{
		{1 << 53, 1<<53 + 1},
		{1 << 62, 1<<62 + 100},
		{math.MaxInt64, math.MaxInt64 + 1},
		{math.MaxUint64 - 1, math.MaxUint64},
		{9, 10}, // one digit more
	} {
		older, newer := pair[0], pair[1]
		key := fmt.Sprintf("stock-%d", i)
		_ = store.Set(key, "8")
		if _, err := redlock.FencedGet(ctx, rdb, key, older); err != nil {
			t.Fatalf("%d: the older holder's read: %v", older, err)
		}
		if _, err := redlock.FencedGet(ctx, rdb, key, newer); err != nil {
			t.Fatalf("%d: the newer holder's read: %v", newer, err)
		}
		if err := redlock.FencedSet(ctx, rdb, key, "7", older); !errors.Is(err, redlock.ErrStaleToken) {
			t.Fatalf("token %d written after %d was read: err = %v, want ErrStaleToken", older, newer, err)
		}
		if _, err := redlock.FencedGet(ctx, rdb, key, older); !errors.Is(err, redlock.ErrStaleToken) {
			t.Fatalf("token %d read after %d: err = %v, want ErrStaleToken", older, newer, err)
		}
		if err := redlock.FencedSet(ctx, rdb, key, "7", newer); err != nil {
			t.Fatalf("the newer holder's write: %v", err)
		}
		if err := redlock.FencedSet(ctx, rdb, "w-"+key, "1", newer); err != nil {
			t.Fatal(err)
		}
		err := redlock.FencedSet(ctx, rdb, "w-"+key, "0", older)
		if !errors.Is(err, redlock.ErrStaleToken) || !strings.Contains(err.Error(), strconv.FormatUint(newer, 10)) {
			t.Fatalf("write-only: token %d after %d: err = %v, want ErrStaleToken naming %d", older, newer, err, newer)
		}
	}
}

// TestFencedGet: a read records its token; lower tokens are refused
// afterwards, for reads and for writes; a missing key reads as redis.Nil.
func TestFencedGet(t *testing.T) {
	s := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	if _, err := redlock.FencedGet(ctx, rdb, "k", 5); !errors.Is(err, redis.Nil) {
		t.Fatalf("FencedGet of a missing key: err = %v, want redis.Nil", err)
	}
	if err := redlock.FencedSet(ctx, rdb, "k", "v", 4); !errors.Is(err, redlock.ErrStaleToken) {
		t.Fatalf("FencedSet below a read's token: err = %v, want ErrStaleToken", err)
	}
	if err := redlock.FencedSet(ctx, rdb, "k", "v", 5); err != nil {
		t.Fatalf("FencedSet with the read's token: %v", err)
	}
	if v, err := redlock.FencedGet(ctx, rdb, "k", 5); err != nil || v != "v" {
		t.Fatalf("FencedGet = %q, %v", v, err)
	}
	if _, err := redlock.FencedGet(ctx, rdb, "k", 3); !errors.Is(err, redlock.ErrStaleToken) || !strings.Contains(err.Error(), "below 5") {
		t.Fatalf("FencedGet below the highest token: err = %v, want ErrStaleToken naming 5", err)
	}
	for _, bad := range []struct {
		key   string
		token uint64
	}{{"", 1}, {"k", 0}} {
		if _, err := redlock.FencedGet(ctx, rdb, bad.key, bad.token); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("FencedGet(%q, token %d): err = %v, want ErrInvalidArgument", bad.key, bad.token, err)
		}
	}
}

func TestLock_Done_closedByRelease(t *testing.T) {
	c := newCluster(t, 3)
	lock := mustTryAcquire(t, c.client(t), context.Background(), "k", time.Minute)
	done := lock.Done()
	if !isOpen(done) {
		t.Fatal("Done closed while the lock is held")
	}
	mustRelease(t, lock)
	if isOpen(done) {
		t.Fatal("Done open after Release")
	}
	var nilLock *redlock.Lock
	if isOpen(nilLock.Done()) {
		t.Fatal("Done of a nil lock is open")
	}
}

func TestLock_Done_closedWhenValidityEnds(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t, redlock.WithClock(clock)), ctx, "k", 3*time.Second)
	done := lock.Done()
	waiters(t, clock, 1)

	// An extend moves the end: the old end passes and Done stays open.
	clock.Advance(time.Second)
	if err := lock.Extend(ctx, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // past the first Until
	waiters(t, clock, 1)           // the watcher saw time left and waits again
	if !isOpen(done) {
		t.Fatal("Done closed at the old end of a lock that was extended")
	}
	clock.Advance(2 * time.Second) // past the new Until
	if !closed(done) {
		t.Fatal("Done still open after the validity ran out")
	}
	if lock.Validity() != 0 {
		t.Fatal("Validity left after Done closed")
	}
	if err := lock.Extend(ctx, time.Second); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after the end: err = %v, want ErrLockLost", err)
	}
	mustRelease(t, lock)
}

func TestLock_autoRenew_cadence(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	const ttl = 3 * time.Second
	drift := 32 * time.Millisecond // 3s × 0.01 + 2ms
	lock := mustTryAcquire(t, c.client(t, redlock.WithClock(clock)), context.Background(), "k", ttl, redlock.WithAutoRenew())
	for i := range 5 {
		waiters(t, clock, 1) // the renewal waits a third of the ttl
		before := lock.Until()
		clock.Advance(time.Second)
		waitFor(t, "the renewal", func() bool { return lock.Until().After(before) })
		want := clock.Now().Add(ttl - drift)
		if got := lock.Until(); !got.Equal(want) {
			t.Fatalf("renewal %d: Until = %v, want %v", i, got, want)
		}
	}
	if !isOpen(lock.Done()) {
		t.Fatal("Done closed while renewing")
	}
	mustRelease(t, lock)
}

// TestLock_autoRenew_survivesMinorityFailure: with one node of three down,
// the renewals go on and the lock stays.
func TestLock_autoRenew_survivesMinorityFailure(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	var renewals renewalWatch
	const ttl = 3 * time.Second
	lock := mustTryAcquire(t, c.client(t, redlock.WithClock(clock), renewals.option()), context.Background(), "k", ttl, redlock.WithAutoRenew())
	redlock.WaitSettled(lock)
	c.servers[2].Close()
	for range 4 {
		renewals.renew(t, clock, lock, time.Second, ttl)
	}
	if lock.Validity() < 2*time.Second {
		t.Fatalf("Validity %v after renewals with a quorum up", lock.Validity())
	}
	if !isOpen(lock.Done()) {
		t.Fatal("Done closed with a quorum up")
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// renewalWatch counts a Client's renewals as they end (its OpRenew
// events), with the last one's error.
type renewalWatch struct {
	mu    sync.Mutex
	ended int
	err   error
}

// option is the Observer that feeds w.
func (w *renewalWatch) option() redlock.Option {
	return redlock.WithObserver(redlock.ObserverFunc(func(_ context.Context, e redlock.Event) {
		if e.Op == redlock.OpRenew {
			w.mu.Lock()
			w.ended, w.err = w.ended+1, e.Err
			w.mu.Unlock()
		}
	}))
}

func (w *renewalWatch) last() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ended, w.err
}

// renew moves the fake clock by step once the scheduler waits on it, and
// waits for the renewal that starts. A node's reply can come past its
// timeout, which is real time, on a loaded machine: a renewal that failed
// so is tried again a tenth of the ttl later on the clock, which renew
// moves by that much, until one succeeds. A lock lost fails t.
func (w *renewalWatch) renew(t *testing.T, clock *manualClock, lock *redlock.Lock, step, ttl time.Duration) {
	t.Helper()
	for try := 0; ; try++ {
		n, _ := w.last()
		waiters(t, clock, 1)
		clock.Advance(step)
		waitFor(t, "the renewal to end", func() bool { m, _ := w.last(); return m > n })
		_, err := w.last()
		if err == nil {
			return
		}
		if !isOpen(lock.Done()) || try == 5 {
			t.Fatalf("renewal %d failed: %v (lock lost: %v)", try, err, !isOpen(lock.Done()))
		}
		t.Logf("renewal %d failed, tried again: %v", try, err)
		step = ttl / 10
	}
}

// renewedLockLostOnMajority returns a renewed lock on 3 nodes, under a fake
// clock, whose key two nodes lost and whose renewal found out (Done is
// closed).
func renewedLockLostOnMajority(t *testing.T) (*cluster, *manualClock, *redlock.Lock) {
	t.Helper()
	c := newCluster(t, 3)
	clock := fakeClock()
	lock := mustTryAcquire(t, c.client(t, redlock.WithClock(clock)), context.Background(), "k", 3*time.Second, redlock.WithAutoRenew())
	redlock.WaitSettled(lock)
	waiters(t, clock, 1)
	c.servers[0].Del("k")
	c.servers[1].Del("k")
	clock.Advance(time.Second)
	if !closed(lock.Done()) {
		t.Fatal("Done still open after the lock was lost")
	}
	return c, clock, lock
}

// TestLock_autoRenew_lossClosesDone: once a majority no longer holds the
// lock, the next renewal finds out, Done closes and the renewal stops.
func TestLock_autoRenew_lossClosesDone(t *testing.T) {
	_, clock, lock := renewedLockLostOnMajority(t)
	if lock.Validity() != 0 {
		t.Fatal("a lost lock reports validity")
	}
	if clock.Now().After(lock.Until()) {
		t.Fatal("the loss was noticed only after the validity ended")
	}
	if err := lock.Release(context.Background()); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release of a lost lock: err = %v, want ErrLockLost", err)
	}
}

// TestLock_autoRenew_lostLockReleasesAsLost: a lock its renewal found lost
// on a majority (Done closed) is reported lost by Release, whatever the
// nodes that answer the release first say. It used to judge from the
// first two answers alone (one node deleted the key, one had lost it) and
// report the lock held until its release, while the third node, slower,
// had lost it too.
func TestLock_autoRenew_lostLockReleasesAsLost(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c, _, lock := renewedLockLostOnMajority(t)
	gate := newGatedScript(scriptSHA(t, "release.lua"))
	addHook(t, c.clients[1], gate)
	defer close(gate.open)
	if err := lock.Release(context.Background()); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release of a lock lost on a majority, one node slow: err = %v, want ErrLockLost", err)
	}
}

// TestLock_autoRenew_unreachableNodes: with every node unreachable the
// renewals keep failing without telling whether the lock is held; the lock
// is declared lost while some validity is left, not after.
func TestLock_autoRenew_unreachableNodes(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	lock := mustTryAcquire(t, c.client(t, redlock.WithClock(clock)), context.Background(), "k", 3*time.Second, redlock.WithAutoRenew())
	redlock.WaitSettled(lock)
	until := lock.Until()
	for _, s := range c.servers {
		s.Close()
	}
	done := lock.Done()
	for i := 0; isOpen(done); i++ {
		if i > 100 {
			t.Fatal("the lock was never declared lost")
		}
		waiters(t, clock, 1) // the scheduler, for the renewal and the end
		clock.Advance(100 * time.Millisecond)
		// Let the renewal run its failed extend before the next step.
		select {
		case <-done:
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !clock.Now().Before(until) {
		t.Fatalf("declared lost at %v, not before the end of validity %v", clock.Now(), until)
	}
}

func TestClient_Do(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	var held []int
	err := rc.Do(ctx, "job:1", time.Second, func(ctx context.Context) error {
		held = c.holdersAny("job:1")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) < rc.Quorum() {
		t.Fatalf("fn ran with the key on nodes %v only", held)
	}

	fnErr := errors.New("job failed")
	if err := rc.Do(ctx, "job:1", time.Second, func(context.Context) error { return fnErr }); !errors.Is(err, fnErr) {
		t.Fatalf("Do: err = %v, want fn's error", err)
	}

	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want fn's panic", p)
			}
		}()
		_ = rc.Do(ctx, "job:1", time.Second, func(context.Context) error { panic("boom") })
	}()
	// The lock is free again after the panic: another Do gets it at once.
	if err := rc.Do(ctx, "job:1", time.Second, func(context.Context) error { return nil },
		redlock.WithRetry(redlock.RandomDelay(time.Hour, time.Hour))); err != nil {
		t.Fatalf("Do after a panic: %v", err)
	}

	if err := rc.Do(ctx, "job:1", time.Second, nil); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("Do with nil fn: err = %v, want ErrInvalidArgument", err)
	}
}

func TestClient_Do_notAcquired(t *testing.T) {
	c := newCluster(t, 3)
	holder := mustTryAcquire(t, c.client(t), context.Background(), "job", time.Minute)
	defer holder.Release(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ran := false
	err := mustNew(t, c.connect(t)).Do(ctx, "job", time.Second, func(context.Context) error { ran = true; return nil })
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Fatalf("Do on a held key: err = %v, ran %v; want ErrNotAcquired and no run", err, ran)
	}
}

// TestClient_Do_lostWhileRunning: the lock is lost while fn runs; fn's
// context is cancelled before the validity ends and Do reports the loss.
func TestClient_Do_lostWhileRunning(t *testing.T) {
	// One node: no acquire write is still under way when fn deletes the key.
	c := newCluster(t, 1)
	clock := fakeClock()
	rc := c.client(t, redlock.WithClock(clock))
	start := clock.Now()
	const ttl = 3 * time.Second
	fnErr := errors.New("stopped")
	err := rc.Do(context.Background(), "job", ttl, func(ctx context.Context) error {
		waiters(t, clock, 1) // the scheduler, for the renewal and the end
		c.servers[0].Del("job")
		clock.Advance(time.Second)
		<-ctx.Done()
		if !clock.Now().Before(start.Add(ttl)) {
			t.Errorf("fn's context cancelled at %v, after the validity", clock.Now())
		}
		return fnErr
	})
	if !errors.Is(err, redlock.ErrLockLost) || !errors.Is(err, fnErr) {
		t.Fatalf("Do: err = %v, want ErrLockLost joined with fn's error", err)
	}
}

// TestLock_afterRelease: a released lock keeps no goroutine: its renewal
// and Done watcher end, Done is closed, and Extend says why it refuses.
func TestLock_afterRelease(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t), ctx, "k", time.Second, redlock.WithAutoRenew())
	_ = lock.Done() // start the watcher too
	mustRelease(t, lock)
	if isOpen(lock.Done()) {
		t.Fatal("Done open after Release")
	}
	err := lock.Extend(ctx, time.Second)
	if !errors.Is(err, redlock.ErrLockLost) || !strings.Contains(err.Error(), "already released") {
		t.Fatalf("Extend after Release: err = %v, want ErrLockLost saying it was released", err)
	}
	// The lock's goroutines end; the bound is wide and only catches one
	// that never does.
	deadline := time.Now().Add(10 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "redlock.(*Lock).renew") && !strings.Contains(stacks, "redlock.(*Lock).watchValidity") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a lock goroutine outlived the release:\n%s", stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// renewMargin is how long before Until a renewed lock is declared lost at
// the latest, as WithAutoRenew documents: the node timeout plus the drift
// allowance, but at most a quarter of the ttl less the drift.
func renewMargin(ttl, nodeTimeout time.Duration) time.Duration {
	drift := time.Duration(float64(ttl)*0.01) + 2*time.Millisecond
	return min(nodeTimeout+drift, (ttl-drift)/4)
}

// onceHook advances a fake clock by `by` at the first command its clients
// run: an acquire that took that long.
type onceHook struct {
	clock *manualClock
	by    time.Duration
	once  *sync.Once
}

func (h onceHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h onceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.once.Do(func() { h.clock.Advance(h.by) })
		return next(ctx, cmd)
	}
}

func (h onceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLock_autoRenew_lateAcquire: an acquire that took most of the ttl is
// renewed at once, from the validity actually left, not a third of the ttl
// after it.
func TestLock_autoRenew_lateAcquire(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	clock := fakeClock()
	rc := c.client(t, redlock.WithClock(clock))
	// The first contact (dials, identification, scripts) is made before the
	// hook: under load it can outlast the node timeout, and the attempt
	// that followed would start after the clock's jump.
	retrySoon(t, "the first contact with the nodes", func() error {
		l, err := rc.TryAcquire(context.Background(), "warm-up", time.Minute)
		if err == nil {
			err = l.Release(context.Background())
		}
		return err
	})
	hook := onceHook{clock: clock, by: 700 * time.Millisecond, once: new(sync.Once)}
	for _, rdb := range c.clients {
		addHook(t, rdb, hook)
	}
	const ttl = time.Second
	lock := mustTryAcquire(t, rc, context.Background(), "k", ttl, redlock.WithAutoRenew())
	defer mustRelease(t, lock)
	first := lock.Until()
	if left := lock.Validity(); left > 300*time.Millisecond {
		t.Fatalf("the acquire left %v of validity; the test needs less than a third of the ttl", left)
	}
	waitFor(t, "the renewal of a lock acquired late", func() bool { return lock.Until().After(first) })
	if want := clock.Now().Add(ttl - 12*time.Millisecond); !lock.Until().Equal(want) {
		t.Fatalf("Until = %v after the renewal, want %v", lock.Until(), want)
	}
}

// TestLock_autoRenew_lostBeforeTheMargin: while renewals keep failing, Done
// closes once the renewal margin before Until is reached, and not later.
// The margin follows the node timeout, which grows with the round trips
// seen (on a loaded machine, the acquire's): the loss must come no earlier
// than the largest margin a 1 s ttl can have, and no later than the one of
// the least node timeout; with a Lock to ask, at its own margin exactly.
func TestLock_autoRenew_lostBeforeTheMargin(t *testing.T) {
	libraryTimeouts(t) // the margin follows the derived node timeout
	const ttl = time.Second
	nodeTimeout := 100 * time.Millisecond // a tenth of the ttl: the least derived
	for _, do := range []bool{false, true} {
		t.Run(fmt.Sprintf("Do %v", do), func(t *testing.T) {
			c := newCluster(t, 3)
			clock := fakeClock()
			rc := c.client(t, redlock.WithClock(clock))
			var stopped <-chan struct{} // Done, or Do's fn context
			var lock *redlock.Lock
			if do {
				ctxs := make(chan context.Context, 1)
				finished := make(chan error, 1)
				go func() {
					finished <- rc.Do(context.Background(), "k", ttl, func(ctx context.Context) error {
						ctxs <- ctx
						<-ctx.Done()
						return nil
					})
				}()
				defer func() {
					for { // on failure, move on until the lock ends anyway
						select {
						case err := <-finished:
							if !errors.Is(err, redlock.ErrLockLost) {
								t.Errorf("Do: err = %v, want ErrLockLost", err)
							}
							return
						case <-time.After(10 * time.Millisecond):
							clock.Advance(100 * time.Millisecond)
						}
					}
				}()
				stopped = (<-ctxs).Done()
			} else {
				lock = mustTryAcquire(t, rc, context.Background(), "k", ttl, redlock.WithAutoRenew())
				defer lock.Release(context.Background())
				stopped = lock.Done()
			}
			start := clock.Now()
			until := start.Add(ttl - 12*time.Millisecond)
			earliest := until.Add(-(ttl - 12*time.Millisecond) / 4) // the largest margin
			latest := until.Add(-renewMargin(ttl, nodeTimeout))
			if lock != nil {
				margin := redlock.RenewMargin(lock)
				if at := until.Add(-margin); at.Before(earliest) || at.After(latest) {
					t.Fatalf("renewal margin %v, want %v to %v", margin, until.Sub(latest), until.Sub(earliest))
				}
				earliest, latest = until.Add(-margin), until.Add(-margin)
			}
			c.servers[1].Close()
			c.servers[2].Close()
			// Step to just before the margin: every renewal fails, the lock
			// is still valid until its margin.
			for clock.Now().Before(latest.Add(-10 * time.Millisecond)) {
				if waitersOr(t, clock, 1, stopped) {
					if clock.Now().Before(earliest) {
						t.Fatalf("lost %v after the acquire, before its margin (%v at the earliest)", clock.Now().Sub(start), earliest.Sub(start))
					}
					return
				}
				clock.Advance(10 * time.Millisecond)
			}
			if !waitersOr(t, clock, 1, stopped) {
				clock.Advance(latest.Sub(clock.Now()))
			}
			if !closed(stopped) {
				t.Fatal("still open at the renewal margin before Until")
			}
		})
	}
}

// waitersOr waits up to 10 s for n goroutines waiting on clock, unless
// stopped (when not nil) closes first; it reports whether stopped closed.
// On failure it prints what the Client's goroutines were doing instead, to
// tell a stuck renewal from a slow machine.
func waitersOr(t *testing.T, clock *manualClock, n int, stopped <-chan struct{}) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case <-stopped:
			return true
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		err := clock.BlockUntilContext(ctx, n)
		cancel()
		if err == nil {
			return false
		}
	}
	t.Fatalf("waiting for %d clock waiters: the Client's goroutines:\n%s", n, clientStacks())
	return false
}

// TestLock_autoRenew_slowMajorityLostBeforeUntil: renewals that each cost a
// node timeout (a slow majority) still declare the loss before the
// validity ends, on the real clock.
func TestLock_autoRenew_slowMajorityLostBeforeUntil(t *testing.T) {
	_, links, rc := lateCluster(t, redlock.WithNodeTimeout(100*time.Millisecond))
	lock := mustTryAcquire(t, rc, context.Background(), "k", time.Second, redlock.WithAutoRenew())
	defer lock.Release(context.Background())
	links[1].setDelay(time.Hour)
	links[2].setDelay(time.Hour)
	if !closed(lock.Done()) {
		t.Fatal("Done never closed")
	}
	if now, until := time.Now(), lock.Until(); !now.Before(until) {
		t.Fatalf("the loss was declared %v after the validity ended", now.Sub(until))
	}
}

// TestLock_autoRenew_needsMoreThanTheMargin: a renewed lock is declared lost
// the renewal margin before Until at the latest, so an acquire that leaves
// less validity than that does not count; without renewal it does.
func TestLock_autoRenew_needsMoreThanTheMargin(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	const ttl = time.Second
	for _, renewed := range []bool{false, true} {
		c := newCluster(t, 3)
		clock := fakeClock()
		hook := onceHook{clock: clock, by: 900 * time.Millisecond, once: new(sync.Once)} // leaves 88ms
		for _, rdb := range c.clients {
			addHook(t, rdb, hook)
		}
		var opts []redlock.AcquireOption
		if renewed {
			opts = append(opts, redlock.WithAutoRenew())
		}
		lock, err := c.client(t, redlock.WithClock(clock)).TryAcquire(context.Background(), "k", ttl, opts...)
		if renewed {
			if !errors.Is(err, redlock.ErrNotAcquired) || !strings.Contains(err.Error(), "renewal margin") {
				t.Fatalf("renewed, 88ms left: err = %v, want ErrNotAcquired naming the renewal margin", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("not renewed, 88ms left: %v", err)
		}
		mustRelease(t, lock)
	}
}

// TestLockFrom: fn finds Do's lock in its context, with its fencing token;
// any other context has none.
func TestLockFrom(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	var token uint64
	err := rc.Do(context.Background(), "job", time.Second, func(ctx context.Context) error {
		lock := redlock.LockFrom(ctx)
		if lock == nil || lock.Key() != "job" || lock.Validity() <= 0 {
			t.Fatalf("LockFrom(fn's context) = %v", lock)
		}
		token = lock.FencingToken()
		return nil
	}, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	if token == 0 {
		t.Fatal("no fencing token from a fenced Do")
	}
	if redlock.LockFrom(context.Background()) != nil {
		t.Fatal("a lock from a context that Do did not give")
	}
}

// TestLock_autoRenew_shorterExtend: an Extend to a shorter ttl brings a
// renewed lock's end nearer; its renewal and Done follow at once, rather
// than from the end it had before.
func TestLock_autoRenew_shorterExtend(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t, redlock.WithClock(clock)), ctx, "k", time.Minute, redlock.WithAutoRenew())
	defer lock.Release(ctx)
	done := lock.Done()
	waiters(t, clock, 1) // the scheduler, waiting for the renewal towards the minute
	if err := lock.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	redlock.WaitSettled(lock)
	for _, s := range c.servers[1:] {
		s.Close() // renewals fail from now on
	}
	until := lock.Until()
	lossAt := until.Add(-renewMargin(time.Second, 100*time.Millisecond))
	for clock.Now().Before(lossAt) && !waitersOr(t, clock, 1, done) {
		clock.Advance(min(50*time.Millisecond, lossAt.Sub(clock.Now())))
	}
	if !closed(done) {
		t.Fatal("Done still open at the renewal margin before the Until of the shorter Extend")
	}
}

// TestLock_Release_afterExtendRanOutOfValidity: an Extend whose answers
// came after the lock's validity had run out reports the lock lost, but no
// node showed it lost: every node still holds the token, and Release
// reports the lock held until then (nil), as for any lock past its Until.
// It reported ErrLockLost, as if a majority had lost the token.
func TestLock_Release_afterExtendRanOutOfValidity(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	clock := fakeClock()
	rc := c.client(t, redlock.WithClock(clock))
	lock := mustTryAcquire(t, rc, context.Background(), "k", 10*time.Second)
	redlock.WaitSettled(lock)
	// Every node's call is held until the clock has moved, so that every
	// answer comes after the validity ran out.
	sha := scriptSHA(t, "extend.lua")
	var gates []*gatedScript
	for i := range 3 {
		gates = append(gates, newGatedScript(sha))
		addHook(t, c.clients[i], gates[i])
	}
	extended := make(chan error, 1)
	go func() { extended <- lock.Extend(context.Background(), 10*time.Second) }()
	for _, g := range gates {
		<-g.hit
	}
	clock.Advance(11 * time.Second) // past Until while every node is slow
	for _, g := range gates {
		close(g.open)
	}
	if err := <-extended; !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend answered after the validity ran out: %v, want ErrLockLost", err)
	}
	redlock.WaitSettled(lock)
	// Every node answered in time, or (on a loaded machine) all but one,
	// whose token the loss's cleanup deleted: nothing showed the lock lost.
	if got := c.holders("k", lock.Token()); len(got) < 2 {
		t.Fatalf("token on nodes %v, want all three, or all but one not heard before the verdict", got)
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Fatalf("Release with the token on every node: %v, want nil", err)
	}
}

// TestLock_Release_fromObserverOfTheLoss: an Observer told that a renewal
// found a majority without the lock's token releases it, before the
// renewal has ended the lock; a local waiter wants the key, and one node is
// slow. Release reports the loss and hands nothing over. It used to judge
// from the release's first answers (one node deleting, one absent), report
// nil, and hand the lost lock to the waiter.
func TestLock_Release_fromObserverOfTheLoss(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	for _, waiter := range []bool{false, true} {
		t.Run(fmt.Sprintf("waiter=%v", waiter), func(t *testing.T) {
			c := newCluster(t, 3)
			clock := fakeClock()
			var (
				held     atomic.Pointer[redlock.Lock]
				released = make(chan error, 1)
				handed   atomic.Int32
			)
			observer := redlock.WithObserver(redlock.ObserverFunc(func(ctx context.Context, e redlock.Event) {
				switch {
				case e.Op == redlock.OpRenew && errors.Is(e.Err, redlock.ErrLockLost):
					if l := held.Swap(nil); l != nil {
						released <- l.Release(ctx)
					}
				case e.Op == redlock.OpAcquire && e.Err == nil && e.Attempts == 0:
					handed.Add(1) // a hand-off: no attempt of its own
				}
			}))
			rc := c.client(t, redlock.WithClock(clock), observer)
			lock, err := rc.Acquire(context.Background(), "k", 3*time.Second, redlock.WithAutoRenew()) // takes the local turn
			if err != nil {
				t.Fatal(err)
			}
			redlock.WaitSettled(lock)
			held.Store(lock)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var next <-chan acquired
			if waiter {
				next = queuedAcquire(t, rc, ctx, "k", 3*time.Second)
			}
			waiters(t, clock, 1)
			c.servers[0].Del("k")
			c.servers[1].Del("k")
			gate := newGatedScript(scriptSHA(t, "release.lua"))
			handOff := newGatedScript(scriptSHA(t, "handoff.lua"))
			addHook(t, c.clients[1], gate)
			addHook(t, c.clients[1], handOff)
			defer close(gate.open)
			defer close(handOff.open)
			clock.Advance(time.Second) // the renewal
			if err := <-released; !errors.Is(err, redlock.ErrLockLost) {
				t.Fatalf("Release from the Observer of the loss: %v, want ErrLockLost", err)
			}
			if n := handed.Load(); n != 0 {
				t.Fatalf("%d locks handed over from a lost lock", n)
			}
			if next != nil {
				cancel()
				if r := <-next; r.lock != nil {
					_ = r.lock.Release(context.Background())
				}
			}
		})
	}
}

// TestLock_Release_afterLossFoundPastTheMargin: an Extend of a renewed
// lock is out on two slow nodes when the lock reaches its renewal margin
// and ends; their answers then show a majority without the token. Release
// reports the loss (one node without the token is slow to answer it),
// where it used to forget what the Extend found and report nil.
func TestLock_Release_afterLossFoundPastTheMargin(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	clock := fakeClock()
	rc := c.client(t, redlock.WithClock(clock), redlock.WithNodeTimeout(time.Hour))
	lock := mustTryAcquire(t, rc, context.Background(), "k", 3*time.Second, redlock.WithAutoRenew())
	redlock.WaitSettled(lock)
	waiters(t, clock, 1)
	c.servers[0].Del("k")
	c.servers[1].Del("k")
	gate := newGatedScript(scriptSHA(t, "extend.lua"))
	addHook(t, c.clients[0], gate)
	addHook(t, c.clients[1], gate)
	extended := make(chan error, 1)
	go func() { extended <- lock.Extend(context.Background(), 3*time.Second) }()
	<-gate.hit
	clock.Advance(2300 * time.Millisecond) // past the margin: (3s - 32ms) / 4 before Until
	if !closed(lock.Done()) {
		t.Fatal("Done still open past the renewal margin")
	}
	close(gate.open)
	if err := <-extended; !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend: %v, want ErrLockLost", err)
	}
	slow := newGatedScript(scriptSHA(t, "release.lua"))
	addHook(t, c.clients[0], slow)
	defer close(slow.open)
	if err := lock.Release(context.Background()); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release after an Extend found a majority without the token: %v, want ErrLockLost", err)
	}
}

// TestLock_Extend_observerReleasesOnTheLoss: an Observer told that an
// Extend found the lock lost releases it, synchronously. The Extend
// returns: the Observer is told once the lock's op is let go. It used to be
// told with the op held, and the Release waited for it for good.
func TestLock_Extend_observerReleasesOnTheLoss(t *testing.T) {
	c := newCluster(t, 3)
	var held atomic.Pointer[redlock.Lock]
	released := make(chan error, 1)
	observer := redlock.WithObserver(redlock.ObserverFunc(func(ctx context.Context, e redlock.Event) {
		if e.Op == redlock.OpExtend && errors.Is(e.Err, redlock.ErrLockLost) {
			if l := held.Swap(nil); l != nil {
				released <- l.Release(ctx)
			}
		}
	}))
	rc := c.client(t, observer)
	lock := mustTryAcquire(t, rc, context.Background(), "k", time.Minute)
	redlock.WaitSettled(lock)
	held.Store(lock)
	c.servers[0].Del("k")
	c.servers[1].Del("k")
	extended := make(chan error, 1)
	go func() { extended <- lock.Extend(context.Background(), time.Minute) }()
	select {
	case err := <-extended:
		if !errors.Is(err, redlock.ErrLockLost) {
			t.Fatalf("Extend: %v, want ErrLockLost", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the Extend never returned: its Observer's Release waited for it")
	}
	if err := <-released; !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("the Observer's Release: %v, want ErrLockLost", err)
	}
}

// TestLock_Release_observerExtendsOnTheRelease: an Observer told of a
// Release calls Extend on the lock, synchronously. The Release returns and
// the Extend is answered that the lock is over: the Observer is told once
// the lock's op is let go. It used to be told with the op held, and both
// waited for good.
func TestLock_Release_observerExtendsOnTheRelease(t *testing.T) {
	c := newCluster(t, 3)
	var held atomic.Pointer[redlock.Lock]
	extended := make(chan error, 1)
	observer := redlock.WithObserver(redlock.ObserverFunc(func(ctx context.Context, e redlock.Event) {
		if e.Op == redlock.OpRelease {
			if l := held.Swap(nil); l != nil {
				extended <- l.Extend(ctx, time.Second)
			}
		}
	}))
	lock := mustTryAcquire(t, c.client(t, observer), context.Background(), "k", 5*time.Second)
	held.Store(lock)
	released := make(chan error, 1)
	go func() { released <- lock.Release(context.Background()) }()
	select {
	case err := <-released:
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Release never returned: its Observer's Extend waited for it")
	}
	if err := <-extended; !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend from the Observer of the release: %v, want ErrLockLost", err)
	}
}

// nodeScripts holds or fails one node's calls of chosen scripts.
type nodeScripts struct {
	delay map[string]time.Duration // by script SHA: held this long before it is sent
	fail  map[string]bool          // by script SHA: refused with an error, not sent
	on    atomic.Bool
}

func (h *nodeScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *nodeScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.before([]redis.Cmder{cmd}); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *nodeScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.before(cmds); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

func (h *nodeScripts) before(cmds []redis.Cmder) error {
	if !h.on.Load() {
		return nil
	}
	for _, cmd := range cmds {
		sha := scriptOf(cmd)
		if h.fail[sha] {
			return errors.New("frozen")
		}
		if d := h.delay[sha]; d > 0 {
			time.Sleep(d)
		}
	}
	return nil
}

// TestLock_FencingToken_aHolderFailsBeforeItsRaise: of five nodes, node 3
// is down; the acquire is won on nodes 1, 2 and 4 before node 0 answers;
// node 4 answers the highest counter, and node 2 fails before it can be
// raised to it. Node 0 took the key too, and is raised: it counts for the
// token's quorum once it shows that it holds the lock. The TryAcquire
// used to fail ("the fencing token could not be stored on a quorum") with
// four healthy nodes of five.
func TestLock_FencingToken_aHolderFailsBeforeItsRaise(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 5)
	acquire := redis.NewScript(redlock.ScriptSource("acquire.lua")).Hash()
	raise := redis.NewScript(redlock.ScriptSource("raise_fence.lua")).Hash()
	slow := &nodeScripts{delay: map[string]time.Duration{acquire: 200 * time.Millisecond}}
	frozen := &nodeScripts{fail: map[string]bool{raise: true}}
	addHook(t, c.clients[0], slow)
	addHook(t, c.clients[2], frozen)
	rc := c.client(t, redlock.WithNodeTimeout(2*time.Second))
	ctx := context.Background()
	// Past the first contact, which waits for every node.
	mustRelease(t, mustTryAcquire(t, rc, ctx, "warm-up", time.Minute, redlock.WithFencing()))
	c.servers[3].Close()
	_, _ = rc.TryAcquire(ctx, "other", time.Minute) // node 3 is known to fail
	ahead := time.Now().UnixMicro() + int64(time.Hour/time.Microsecond)
	_ = c.servers[4].Set("{k}:fence", strconv.FormatInt(ahead, 10))
	slow.on.Store(true)
	frozen.on.Store(true)
	lock, err := rc.TryAcquire(ctx, "k", time.Minute, redlock.WithFencing())
	if err != nil {
		t.Fatalf("TryAcquire with 4 of 5 nodes healthy: %v", err)
	}
	if got := lock.FencingToken(); got <= uint64(ahead) {
		t.Fatalf("token %d, want above the highest counter %d", got, ahead)
	}
	slow.on.Store(false)
	frozen.on.Store(false)
	mustRelease(t, lock)
}

// TestClient_Do_causeIsTheLoss: when the lock is lost while fn runs, the
// cause of fn's context says so: context.Cause matches ErrLockLost, not
// merely context.Canceled.
func TestClient_Do_causeIsTheLoss(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	var cause error
	err := rc.Do(context.Background(), "k", 500*time.Millisecond, func(ctx context.Context) error {
		c.servers[1].Close() // renewals find no quorum: the lock is lost by its margin
		c.servers[2].Close()
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(10 * time.Second):
			t.Error("fn's context still open 10 s into a lock of 500 ms")
		}
		return nil
	})
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Do: %v, want ErrLockLost", err)
	}
	if !errors.Is(cause, redlock.ErrLockLost) {
		t.Fatalf("context.Cause in fn = %v, want an error matching ErrLockLost", cause)
	}
}

// TestLock_Extend_spentValidityEndsWithTheContext: an Extend that a quorum
// kept after the validity was spent hears the other nodes before its
// verdict (which may drop keys), as long as the grace for the nodes about
// as fast, but no longer than its context: here node 1 answers 1 s in and
// node 2 not at all, so the grace would run to 2 s; the Extend returns at
// its 1.5 s context.
func TestLock_Extend_spentValidityEndsWithTheContext(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	clock := fakeClock()
	rc := c.client(t, redlock.WithClock(clock), redlock.WithNodeTimeout(5*time.Second))
	lock := mustTryAcquire(t, rc, context.Background(), "k", 10*time.Second)
	redlock.WaitSettled(lock)
	gates := []*gatedScript{newGatedScript(scriptSHA(t, "extend.lua")), newGatedScript(scriptSHA(t, "extend.lua"))}
	for i, g := range gates {
		addHook(t, c.clients[1+i], g)
	}
	defer close(gates[1].open)
	begun := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	extended := make(chan error, 1)
	go func() { extended <- lock.Extend(ctx, 10*time.Second) }()
	<-gates[0].hit
	<-gates[1].hit
	clock.Advance(11 * time.Second) // past Until while nodes 1 and 2 are out
	time.Sleep(time.Second)
	close(gates[0].open)
	err := <-extended
	if took := time.Since(begun); took > 1900*time.Millisecond {
		t.Fatalf("Extend took %v: it waited past its 1.5 s context", took.Round(time.Millisecond))
	}
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend kept after the validity was spent: %v, want ErrLockLost", err)
	}
}
