package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// queuedAcquire starts an Acquire of key that queues behind this client's
// holder, and returns once it waits.
func queuedAcquire(t *testing.T, rc *redlock.Client, ctx context.Context, key string, ttl time.Duration, opts ...redlock.AcquireOption) <-chan acquired {
	t.Helper()
	before := redlock.LocalWaiters(rc, key)
	got := make(chan acquired, 1)
	go func() {
		l, err := rc.Acquire(ctx, key, ttl, opts...)
		got <- acquired{l, err}
	}()
	waitFor(t, "the Acquire to queue", func() bool { return redlock.LocalWaiters(rc, key) > before })
	return got
}

// heldWithWaiter returns a cluster of 3 nodes, a lock on "k" held by a
// Client of it (its key on every node), and an Acquire of "k" queued
// behind it in the same Client.
func heldWithWaiter(t *testing.T) (*cluster, *redlock.Lock, <-chan acquired) {
	t.Helper()
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	first, err := rc.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	redlock.WaitSettled(first)
	return c, first, queuedAcquire(t, rc, ctx, "k", time.Minute)
}

type acquired struct {
	lock *redlock.Lock
	err  error
}

func mustGet(t *testing.T, ch <-chan acquired) *redlock.Lock {
	t.Helper()
	select {
	case a := <-ch:
		if a.err != nil {
			t.Fatalf("queued Acquire: %v", a.err)
		}
		return a.lock
	case <-time.After(10 * time.Second):
		t.Fatal("the queued Acquire never returned")
		return nil
	}
}

func scriptSHA(t *testing.T, file string) string {
	t.Helper()
	return redis.NewScript(redlock.ScriptSource(file)).Hash()
}

// scriptCalls counts, per script file, the calls a hooked node received.
func scriptCalls(t *testing.T, h *roundTrips, files ...string) map[string]int {
	t.Helper()
	shas := map[string]string{}
	for _, f := range files {
		shas[scriptSHA(t, f)] = f
	}
	counts := map[string]int{}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, sha := range h.shas {
		counts[shas[sha]]++
	}
	return counts
}

func TestLock_Release_handsOffToLocalWaiter(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	h := newRoundTrips()
	close(h.gate)
	for _, rdb := range c.clients {
		addHook(t, rdb, h)
	}
	rc := c.client(t)
	ctx := context.Background()
	first, err := rc.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waiting := queuedAcquire(t, rc, ctx, "k", 30*time.Second)

	start := time.Now()
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release with a local waiter: %v", err)
	}
	second := mustGet(t, waiting)
	redlock.WaitSettled(second) // the hand-off returned once a quorum answered
	if got := scriptCalls(t, h, "acquire.lua", "handoff.lua", "release.lua"); got["handoff.lua"] != 3 || got["release.lua"] != 0 || got["acquire.lua"] != 3 {
		t.Errorf("scripts run %v, want 3 acquires, then 3 hand-offs and no release", got)
	}
	if second.Token() == first.Token() {
		t.Fatal("the handed lock has the releasing lock's token")
	}
	if got := c.holders("k", second.Token()); len(got) != 3 {
		t.Fatalf("new token on nodes %v, want all 3", got)
	}
	for i, s := range c.servers {
		if ttl := s.TTL("k"); ttl <= 29*time.Second || ttl > 30*time.Second {
			t.Errorf("node %d: ttl %v, want the waiter's 30s", i, ttl)
		}
	}
	// Valid from before the hand-off, for the waiter's ttl less the drift.
	if until := second.Until(); until.After(start.Add(30*time.Second)) || until.Before(start.Add(29*time.Second)) {
		t.Errorf("Until %v after the hand-off's start, want about 30s less the drift", until.Sub(start))
	}

	// The released lock is over, and cannot touch its successor.
	if err := first.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend of the released lock: %v, want ErrLockLost", err)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if got := c.holders("k", second.Token()); len(got) != 3 {
		t.Fatal("the released lock's calls removed its successor's keys")
	}
	mustRelease(t, second)
	if got := c.holdersAny("k"); len(got) != 0 {
		t.Fatalf("key left on nodes %v", got)
	}
	if n := redlock.QueuedKeys(rc); n != 0 {
		t.Errorf("%d keys left queued", n)
	}
}

func TestLock_Release_handOffRaisesFencingToken(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	first, err := rc.Acquire(ctx, "k", time.Minute, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	waiting := queuedAcquire(t, rc, ctx, "k", time.Minute, redlock.WithFencing())
	mustRelease(t, first)
	second := mustGet(t, waiting)
	if second.FencingToken() <= first.FencingToken() {
		t.Fatalf("fencing token %d after %d: a handed lock must get a higher one", second.FencingToken(), first.FencingToken())
	}
	mustRelease(t, second)
}

func TestLock_Release_handOffsAreBounded(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	for _, tc := range []struct {
		limit     int
		contended bool // another process waits for the key
		handOffs  int  // of 5 chances
	}{
		{limit: 0, contended: false, handOffs: 0},
		{limit: 0, contended: true, handOffs: 0},
		{limit: 2, contended: false, handOffs: 5}, // nobody else to starve
		{limit: 2, contended: true, handOffs: 4},  // 2, release, 2
	} {
		c, h := hookedNode(t)
		close(h.gate)
		rc := c.client(t, redlock.WithHandOff(tc.limit))
		ctx := context.Background()
		if tc.contended {
			// Another process's Acquire listens for the key's release.
			other := redis.NewClient(&redis.Options{Addr: c.addrs[0]})
			ps := other.Subscribe(ctx, "{k}:released")
			if _, err := ps.Receive(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ps.Close(); _ = other.Close() })
		}
		lock, err := rc.Acquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		const sections = 6
		for range sections - 1 {
			next := queuedAcquire(t, rc, ctx, "k", time.Minute)
			if err := lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
			lock = mustGet(t, next)
		}
		mustRelease(t, lock)

		got := scriptCalls(t, h, "acquire.lua", "handoff.lua", "release.lua")
		if got["handoff.lua"] != tc.handOffs || got["acquire.lua"]+got["handoff.lua"] != sections || got["release.lua"] != sections-tc.handOffs {
			t.Errorf("limit %d, contended %v: scripts run %v, want %d hand-offs of %d", tc.limit, tc.contended, got, tc.handOffs, sections-1)
		}
	}
}

// TestLock_Release_handOffFails: the releasing lock's keys were lost and
// another process holds the key; the hand-off fails, Release reports the
// loss, and the waiter contends like any Acquire.
func TestLock_Release_handOffFails(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	first, err := rc.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	waiting := queuedAcquire(t, rc, wctx, "k", time.Minute)
	for _, s := range c.servers {
		s.Set("k", "another holder")
	}

	if err := first.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release: %v, want ErrLockLost", err)
	}
	select {
	case a := <-waiting:
		if !errors.Is(a.err, redlock.ErrNotAcquired) || !errors.Is(a.err, context.DeadlineExceeded) {
			t.Fatalf("waiter: %v, want ErrNotAcquired at its deadline", a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never returned")
	}
	if got := c.holders("k", "another holder"); len(got) != 3 {
		t.Fatalf("the other holder's key is left on %v, want all 3", got)
	}
	if n := redlock.QueuedKeys(rc); n != 0 {
		t.Errorf("%d keys left queued", n)
	}
}

// TestLock_Release_handOffFailsAfterReplacing: the hand-off swapped the
// token on some nodes but could not reach a quorum. The lock still held
// until its release there, and Release says so; the swapped keys are gone.
func TestLock_Release_handOffFailsAfterReplacing(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t, redlock.WithNodeTimeout(100*time.Millisecond))
	ctx := context.Background()
	first, err := rc.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	redlock.WaitSettled(first)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiting := queuedAcquire(t, rc, wctx, "k", time.Minute)
	c.servers[1].Set("k", "another holder") // lost on node 1 (the ttl is gone too)
	c.servers[2].Close()                    // node 2 fails

	// Node 0 swaps the token, node 1 refuses, node 2 fails: 1 of 3.
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release: %v, want nil: node 0 held the token until the hand-off, node 2 counts as holding", err)
	}
	cancel() // the waiter, given the turn, cannot win 2 of 3: it gives up
	select {
	case a := <-waiting:
		if !errors.Is(a.err, redlock.ErrNotAcquired) {
			t.Fatalf("waiter: %v, want ErrNotAcquired", a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never returned")
	}
	// The cleanup waits for node 0 up to the node timeout, then goes on in
	// the background; on a loaded machine 100 ms may pass first. The key
	// must go well before its minute is up.
	waitFor(t, "the failed hand-off's key on node 0 to go", func() bool { return !c.servers[0].Exists("k") })
	if got := c.holders("k", "another holder"); len(got) != 1 || got[0] != 1 {
		t.Fatalf("the other holder's key is on %v, want [1]", got)
	}
}

// kindOps counts the operations of the kind scripts (and the first argument
// of the others) that a hooked node received.
func kindOps(h *roundTrips) map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	counts := map[string]int{}
	for _, op := range h.ops {
		counts[op]++
	}
	return counts
}

// counterIn2042 is a fencing counter at the node clock's microseconds in
// 2042 (2042-01-01), past 2^51: every counter reaches such values once the
// nodes' clocks pass mid-2041, or once a node whose clock is ahead raised
// it. A hand-off answer built as 4*c + … lost its last bits there.
const counterIn2042 = "2272147200000000"

// TestLock_Release_handsEveryTurnTakingKindToLocalWaiter: the kinds whose
// goroutines take local turns (the plain lock, a writer, a multi-key lock)
// hand a released lock to the next goroutine of the Client in one round
// trip: a new token and a higher fencing token on every node, no release in
// between; also with fencing counters past 2^51.
func TestLock_Release_handsEveryTurnTakingKindToLocalWaiter(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	for _, tc := range []struct {
		name    string
		keys    []string
		acquire func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error)
		waiting func(rc *redlock.Client) int
	}{
		{"plain", []string{"k"}, func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error) {
			return rc.Acquire(ctx, "k", time.Minute, redlock.WithFencing())
		}, func(rc *redlock.Client) int { return redlock.LocalWaiters(rc, "k") }},
		{"write", []string{"k"}, func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error) {
			return rc.Acquire(ctx, "k", time.Minute, redlock.ForWrite(), redlock.WithFencing())
		}, func(rc *redlock.Client) int { return redlock.LocalWriters(rc, "k") }},
		{"multi-key", []string{"a", "b"}, func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error) {
			return rc.AcquireAll(ctx, []string{"a", "b"}, time.Minute, redlock.WithFencing())
		}, func(rc *redlock.Client) int { return redlock.LocalMultiWaiters(rc, "a", "b") }},
	} {
		for _, counter := range []string{"", counterIn2042} {
			t.Run(fmt.Sprintf("%s/counter=%s", tc.name, counter), func(t *testing.T) {
				c := newCluster(t, 3)
				h := newRoundTrips()
				close(h.gate)
				for _, rdb := range c.clients {
					addHook(t, rdb, h)
				}
				if counter != "" {
					for _, s := range c.servers {
						for _, k := range tc.keys {
							s.Set("{"+k+"}:fence", counter)
						}
					}
				}
				rc := c.client(t)
				ctx := context.Background()
				first, err := tc.acquire(ctx, rc)
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan acquired, 1)
				go func() {
					l, err := tc.acquire(ctx, rc)
					got <- acquired{l, err}
				}()
				waitFor(t, "the second Acquire to queue", func() bool { return tc.waiting(rc) == 1 })

				if err := first.Release(ctx); err != nil {
					t.Fatalf("Release with a local waiter: %v", err)
				}
				second := mustGet(t, got)
				redlock.WaitSettled(second)
				if ops := kindOps(h); ops["handoff"] != 3 || ops["release"] != 0 {
					if ops := scriptCalls(t, h, "handoff.lua", "release.lua"); tc.name != "plain" || ops["handoff.lua"] != 3 || ops["release.lua"] != 0 {
						t.Errorf("operations %v, scripts %v: want 3 hand-offs and no release", kindOps(h), ops)
					}
				}
				if second.Token() == first.Token() {
					t.Fatal("the handed lock has the releasing lock's token")
				}
				for _, k := range tc.keys {
					if got := c.holders(k, second.Token()); len(got) != 3 {
						t.Fatalf("%s: the new token on nodes %v, want all 3", k, got)
					}
				}
				if second.FencingToken() <= first.FencingToken() {
					t.Fatalf("fencing token %d after %d: a handed lock gets a higher one", second.FencingToken(), first.FencingToken())
				}
				if err := first.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrLockLost) {
					t.Fatalf("Extend of the released lock: %v, want ErrLockLost", err)
				}
				mustRelease(t, second)
				for _, k := range tc.keys {
					if got := c.holdersAny(k); len(got) != 0 {
						t.Fatalf("%s left on nodes %v", k, got)
					}
				}
				if n := redlock.QueuedKeys(rc); n != 0 {
					t.Errorf("%d keys left queued", n)
				}
			})
		}
	}
}

// TestLock_Release_writerHandOffKeepsReadersOut: a reader of another
// process waiting for a write lock does not get in while the lock is handed
// from one writer to the next; it does once the last writer releases.
func TestLock_Release_writerHandOffKeepsReadersOut(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	other := c.client(t)
	ctx := context.Background()
	first, err := rc.Acquire(ctx, "k", time.Minute, redlock.ForWrite())
	if err != nil {
		t.Fatal(err)
	}
	reader := make(chan acquired, 1)
	go func() {
		l, err := other.Acquire(ctx, "k", time.Minute, redlock.ForRead(), redlock.WithRetry(redlock.RetryFunc(func(int) time.Duration { return time.Millisecond })))
		reader <- acquired{l, err}
	}()
	next := make(chan acquired, 1)
	go func() {
		l, err := rc.Acquire(ctx, "k", time.Minute, redlock.ForWrite())
		next <- acquired{l, err}
	}()
	waitFor(t, "the second writer to queue", func() bool { return redlock.LocalWriters(rc, "k") == 1 })
	mustRelease(t, first)
	second := mustGet(t, next)
	// The reader keeps trying every millisecond while the second writer
	// holds the key on every node.
	redlock.WaitSettled(second)
	for range 50 {
		select {
		case a := <-reader:
			t.Fatalf("a reader got in while a writer held the lock (err %v)", a.err)
		case <-time.After(time.Millisecond):
		}
	}
	mustRelease(t, second)
	r := mustGet(t, reader)
	mustRelease(t, r)
}

// TestLock_Release_writerHandOffLeavesNoMark: a writer that won the lock
// on two of three nodes, refused on the third by a reader that holds there
// only, leaves no mark there once it holds: after it hands the lock to the
// next writer of its Client, and that writer releases, nothing else would
// remove the mark before its ttl, and it would keep every reader out of
// that node (with one more node down, out of the lock).
func TestLock_Release_writerHandOffLeavesNoMark(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	// A reader of another process, on node 2 only.
	ends := float64(time.Now().Add(time.Minute).UnixMilli())
	if _, err := c.servers[2].ZAdd("k", math.Inf(1), "readers"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.servers[2].ZAdd("k", ends, "a-reader"); err != nil {
		t.Fatal(err)
	}
	c.servers[2].SetTTL("k", time.Minute)
	first, err := rc.Acquire(ctx, "k", time.Minute, redlock.ForWrite())
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan acquired, 1)
	go func() {
		l, err := rc.Acquire(ctx, "k", time.Minute, redlock.ForWrite())
		next <- acquired{l, err}
	}()
	waitFor(t, "the second writer to queue", func() bool { return redlock.LocalWriters(rc, "k") == 1 })
	mustRelease(t, first)
	second := mustGet(t, next)
	c.servers[2].Del("k") // the reader leaves
	mustRelease(t, second)
	for i, s := range c.servers {
		if s.Exists("{k}:writer-waiting") {
			t.Fatalf("node %d keeps a writer's mark after every writer released", i)
		}
	}
	// A reader of another Client gets the lock with node 0 down.
	c.servers[0].Close()
	r, err := c.client(t).TryAcquire(ctx, "k", time.Minute, redlock.ForRead())
	if err != nil {
		t.Fatalf("a reader is kept out by a mark no writer holds: %v", err)
	}
	_ = r.Release(ctx)
}

// gatedScript holds a node's calls of one script until open is closed.
type gatedScript struct {
	sha  string
	hit  chan struct{} // closed at the first call held
	open chan struct{}
	once sync.Once
}

func newGatedScript(sha string) *gatedScript {
	return &gatedScript{sha: sha, hit: make(chan struct{}), open: make(chan struct{})}
}

func (g *gatedScript) hold(cmds []redis.Cmder) {
	for _, cmd := range cmds {
		if scriptOf(cmd) == g.sha {
			g.once.Do(func() { close(g.hit) })
			<-g.open
			return
		}
	}
}

func (g *gatedScript) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *gatedScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.hold([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (g *gatedScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.hold(cmds)
		return next(ctx, cmds)
	}
}

// TestLock_Release_handOffTellsALossOnAMajority: the releasing lock's key
// was lost on two nodes of three. The hand-off wins the next lock on node 0
// (which had the token) and node 1 (free); node 2, slower, tells that a
// majority no longer had it: Release reports ErrLockLost. It used to
// judge from the first two answers alone and report the lock held.
func TestLock_Release_handOffTellsALossOnAMajority(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c, first, waiting := heldWithWaiter(t)
	ctx := context.Background()
	c.servers[1].Del("k")
	c.servers[2].Del("k")
	gate := newGatedScript(scriptSHA(t, "handoff.lua"))
	addHook(t, c.clients[2], gate)

	released := make(chan error, 1)
	go func() { released <- first.Release(ctx) }()
	<-gate.hit
	close(gate.open)
	if err := <-released; !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Release: %v, want ErrLockLost: the key was gone on 2 of 3 nodes", err)
	}
	second := mustGet(t, waiting)
	mustRelease(t, second)
}

// answerLost makes a node run the next call of one script and then lose
// its answer, as a connection cut after the node ran the command: the call
// fails with an error that is not a timeout, and the node keeps what the
// script did. With resend, the call is sent again instead, as go-redis
// does after a network error, and the second answer is the one returned.
type answerLost struct {
	sha    string
	resend bool
	armed  atomic.Bool
	hit    atomic.Int32
}

var errAnswerLost = errors.New("connection cut after the command was sent")

func (h *answerLost) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *answerLost) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.mangle([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (h *answerLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.mangle(cmds, func() error { return next(ctx, cmds) })
	}
}

// loadScript loads a script on every node, so that its first call is not
// answered NOSCRIPT (and sent again with its text).
func loadScript(t *testing.T, c *cluster, file string) {
	t.Helper()
	for _, rdb := range c.clients {
		if err := rdb.ScriptLoad(context.Background(), redlock.ScriptSource(file)).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *answerLost) mangle(cmds []redis.Cmder, send func() error) error {
	i := slices.IndexFunc(cmds, func(cmd redis.Cmder) bool {
		args := cmd.Args()
		return len(args) > 1 && scriptOf(cmd) == h.sha
	})
	if i < 0 || !h.armed.CompareAndSwap(true, false) {
		return send()
	}
	h.hit.Add(1)
	err := send()
	if h.resend {
		return send()
	}
	cmds[i].SetErr(errAnswerLost)
	if err == nil {
		err = errAnswerLost
	}
	return err
}

// TestLock_Release_afterHandOffWhoseAnswersWereLost: the hand-off ran on
// nodes 1 and 2 but their answers were lost, so it did not win; its cleanup
// deleted the waiter's token there, and the release of the lock found the
// key gone. The lock held on every node until then: Release must not report
// it lost. It used to count those nodes as a majority without the token
// (ErrLockLost); whether the lock held is not known (ErrNotConfirmed).
func TestLock_Release_afterHandOffWhoseAnswersWereLost(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c, first, waiting := heldWithWaiter(t)
	ctx := context.Background()
	loadScript(t, c, "handoff.lua")
	var lost []*answerLost
	for _, i := range []int{1, 2} {
		h := &answerLost{sha: scriptSHA(t, "handoff.lua")}
		h.armed.Store(true)
		addHook(t, c.clients[i], h)
		lost = append(lost, h)
	}

	err := first.Release(ctx)
	for i, h := range lost {
		if h.hit.Load() != 1 {
			t.Fatalf("node %d: the hand-off's answer was not lost (%d)", i+1, h.hit.Load())
		}
	}
	if errors.Is(err, redlock.ErrLockLost) || !errors.Is(err, redlock.ErrNotConfirmed) {
		t.Fatalf("Release: %v, want ErrNotConfirmed: every node held the token until the hand-off", err)
	}
	second := mustGet(t, waiting)
	mustRelease(t, second)
}

// TestLock_Release_handOffResent: go-redis sent the hand-off again on
// nodes 1 and 2 (a network error after the first run), whose second run
// found the waiter's token there already. The hand-off won on every node,
// and nothing shows the lock lost. The scripts used to answer a resend as
// "the releasing token was not there", and Release reported ErrLockLost.
// For each kind that is handed over.
func TestLock_Release_handOffResent(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	for _, tc := range []struct {
		name    string
		script  string
		keys    []string
		acquire func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error)
	}{
		{"plain", "handoff.lua", []string{"k"}, func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error) {
			return rc.Acquire(ctx, "k", time.Minute)
		}},
		{"write", "kind_rw.lua", []string{"k"}, func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error) {
			return rc.Acquire(ctx, "k", time.Minute, redlock.ForWrite())
		}},
		{"multi-key", "kind_multi.lua", []string{"a", "b"}, func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error) {
			return rc.AcquireAll(ctx, []string{"a", "b"}, time.Minute)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			rc := c.client(t)
			ctx := context.Background()
			first, err := tc.acquire(ctx, rc)
			if err != nil {
				t.Fatal(err)
			}
			redlock.WaitSettled(first)
			got := make(chan acquired, 1)
			go func() {
				l, err := tc.acquire(ctx, rc)
				got <- acquired{l, err}
			}()
			waitFor(t, "the second Acquire to queue", func() bool {
				return redlock.LocalWaiters(rc, "k")+redlock.LocalWriters(rc, "k")+redlock.LocalMultiWaiters(rc, "a", "b") == 1
			})
			loadScript(t, c, tc.script)
			var resent []*answerLost
			for _, i := range []int{1, 2} {
				h := &answerLost{sha: scriptSHA(t, tc.script), resend: true}
				h.armed.Store(true)
				addHook(t, c.clients[i], h)
				resent = append(resent, h)
			}

			if err := first.Release(ctx); errors.Is(err, redlock.ErrLockLost) || err != nil && !errors.Is(err, redlock.ErrNotConfirmed) {
				t.Fatalf("Release: %v, want nil or ErrNotConfirmed: the lock held until the hand-off on node 0, and nodes 1 and 2 tell nothing", err)
			}
			for i, h := range resent {
				if h.hit.Load() != 1 {
					t.Fatalf("node %d: the hand-off was not resent (%d)", i+1, h.hit.Load())
				}
			}
			second := mustGet(t, got)
			for _, k := range tc.keys {
				if got := c.holders(k, second.Token()); len(got) != 3 {
					t.Fatalf("%s: the handed-over lock is on nodes %v, want all 3", k, got)
				}
			}
			mustRelease(t, second)
		})
	}
}

// TestClient_Acquire_remoteWaiterGetsItThroughHandOffs: a waiter in
// another process, whose commands take 5 ms to reach the nodes, gets the
// key while four goroutines of one Client take it in turn, handing it
// over: once the nodes show the other process waiting, the run of
// hand-offs is cut and this Client waits long enough for the other to
// take the key. It used to wait 1 ms, less than the other needed, and win
// again: the other process got no lock in 10 s in 13 runs of 18.
func TestClient_Acquire_remoteWaiterGetsItThroughHandOffs(t *testing.T) {
	c := newCluster(t, 3)
	local := c.client(t)
	var remoteNodes []redis.UniversalClient
	for _, addr := range c.addrs {
		link := newLateLink(t, addr)
		link.setDelay(5 * time.Millisecond)
		rdb := redis.NewClient(&redis.Options{Addr: link.Addr(), MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		remoteNodes = append(remoteNodes, rdb)
	}
	remote := mustNew(t, remoteNodes)

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var held atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				lock, err := local.Acquire(ctx, "k", time.Second)
				if err != nil {
					continue
				}
				held.Add(1)
				time.Sleep(time.Millisecond)
				_ = lock.Release(context.Background())
			}
		}()
	}
	defer func() {
		stop()
		wg.Wait()
	}()
	waitFor(t, "the local goroutines to take the key", func() bool { return held.Load() > 20 })
	for run := range 3 {
		// A wide bound for a loaded machine: the other process gets the key
		// in well under a second on an idle one (docs/benchmarks.md).
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		start, before := time.Now(), held.Load()
		lock, err := remote.Acquire(wctx, "k", time.Second)
		cancel()
		if err != nil {
			t.Fatalf("run %d: the other process got no lock in %v while this Client took it %d times: %v", run, time.Since(start).Round(time.Millisecond), held.Load()-before, err)
		}
		_ = lock.Release(context.Background())
		time.Sleep(50 * time.Millisecond) // the local goroutines run hand-offs again
	}
}

// TestClient_Acquire_listenerThatNeverTries: a listener on the key's
// release channel that never tries to take it (a frozen waiter, a
// redis-cli SUBSCRIBE) does not keep a Client's goroutines waiting after
// every run of hand-offs: once the wait for it would pass a second, it is
// not waited for. With the wait doubling for it without end, four
// goroutines took the key about 10 times a second instead of 700: a run
// of 13 takes (12 hand-offs and a contended acquire) then waits 2^k ms
// after the k-th, and 260 takes wait 2^20 ms for the last run (17 min).
func TestClient_Acquire_listenerThatNeverTries(t *testing.T) {
	c := newCluster(t, 3)
	local := c.client(t)
	for _, s := range c.servers {
		sub := redis.NewClient(&redis.Options{Addr: s.Addr()}).Subscribe(context.Background(), "{k}:released")
		if _, err := sub.Receive(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Close() })
	}
	// The first second or so of waits goes on the doubling; then the
	// takes come at the pace of nobody waiting. The minute only ends a
	// run that waits for the listener without end.
	const takes = 260
	ctx, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	start := time.Now()
	var wg sync.WaitGroup
	var held atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && held.Load() < takes {
				lock, err := local.Acquire(ctx, "k", time.Second)
				if err != nil {
					continue
				}
				held.Add(1)
				time.Sleep(time.Millisecond)
				_ = lock.Release(context.Background())
			}
		}()
	}
	wg.Wait()
	t.Logf("%d takes in %v", held.Load(), time.Since(start).Round(time.Millisecond))
	if held.Load() < takes {
		t.Fatalf("4 goroutines took the key %d times in a minute beside a listener that never tries, want %d", held.Load(), takes)
	}
}

// TestLock_Release_handOffNotRunOnALaggingNodeLeavesNothing: a hand-off
// that never ran on a lagging node (queued there behind the slow acquire
// of its key until its deadline passed, so not sent) left the released
// lock's token on that node until its ttl, out of reach of every later
// release of the run: another Client then needed that node's key to
// expire whenever a fast node failed. The run's last release deletes it.
func TestLock_Release_handOffNotRunOnALaggingNodeLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		keys    []string
		acquire func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error)
		waiting func(rc *redlock.Client) int
	}{
		{"plain", []string{"k"}, func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error) {
			return rc.Acquire(ctx, "k", time.Minute)
		}, func(rc *redlock.Client) int { return redlock.LocalWaiters(rc, "k") }},
		{"write", []string{"k"}, func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error) {
			return rc.Acquire(ctx, "k", time.Minute, redlock.ForWrite())
		}, func(rc *redlock.Client) int { return redlock.LocalWriters(rc, "k") }},
		{"multi-key", []string{"a", "b"}, func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error) {
			return rc.AcquireAll(ctx, []string{"a", "b"}, time.Minute)
		}, func(rc *redlock.Client) int { return redlock.LocalMultiWaiters(rc, "a", "b") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A node timeout of 300 ms: the fast nodes answer within it
			// on a loaded machine, node 2 (a second late) does not.
			c, links, rc := lateCluster(t, redlock.WithNodeTimeout(300*time.Millisecond))
			ctx := context.Background()
			// Node 2's calls land a second late: the first lock's acquire
			// there holds its pipe that long, and the hand-off behind it
			// passes its deadline unsent.
			links[2].setDelay(time.Second)
			first, err := tc.acquire(ctx, rc)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan acquired, 1)
			go func() {
				l, err := tc.acquire(ctx, rc)
				got <- acquired{l, err}
			}()
			waitFor(t, "the second Acquire to queue", func() bool { return tc.waiting(rc) == 1 })
			mustRelease(t, first)
			second := mustGet(t, got)
			mustRelease(t, second)
			links[2].delivered(t)
			waitIdle(t, rc)
			links[2].delivered(t)
			for _, k := range tc.keys {
				if got := c.holdersAny(k); len(got) != 0 {
					v, _ := c.servers[got[0]].Get(k)
					t.Fatalf("%s left on nodes %v (%q; first %q, second %q)", k, got, v, first.Token(), second.Token())
				}
			}
		})
	}
}

// TestLock_Release_resumedCopyOfAHandedOnTokenTakesNothing: a lock
// resumed elsewhere from a token that has since been handed on (the run
// of hand-offs went on in the process that acquired it) deletes nothing
// at its release: the run's tokens left behind are taken only by the run's
// own Client. Its release used to delete the next holder's key on every
// node, and another Client got the lock while that holder still held it.
func TestLock_Release_resumedCopyOfAHandedOnTokenTakesNothing(t *testing.T) {
	c := newCluster(t, 3)
	a, b := c.client(t), mustNew(t, c.connect(t))
	ctx := context.Background()
	first, err := a.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := b.Resume(ctx, "k", first.Token(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan acquired, 1)
	go func() {
		l, err := a.Acquire(ctx, "k", time.Minute)
		got <- acquired{l, err}
	}()
	waitFor(t, "the second Acquire to queue", func() bool { return redlock.LocalWaiters(a, "k") == 1 })
	mustRelease(t, first)
	second := mustGet(t, got)
	redlock.WaitSettled(second)
	if err := resumed.Release(ctx); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("release of the resumed copy of a token handed on: %v, want ErrLockLost", err)
	}
	if got := c.holders("k", second.Token()); len(got) != 3 {
		t.Fatalf("the handed lock is on nodes %v after the resumed copy's release, want all 3", got)
	}
	mustRelease(t, second)
}
