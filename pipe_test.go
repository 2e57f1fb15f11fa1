package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// roundTrips records the scripts a go-redis client sends, alone or in
// pipelines. Until gate is closed, the first round trip of scripts waits (as
// if its reply were slow), so that calls queue behind it.
type roundTrips struct {
	mu        sync.Mutex
	trips     []trip
	gate      chan struct{}
	gated     bool
	held      int      // scripts in the gated round trip
	shas      []string // of every script sent, in order
	ops       []string // of every script sent, in order: its first argument (a kind script's operation)
	afterGate func()   // if set, run once the gated round trip has its replies
}

// trip is one round trip: its first command's name, how many it had, the
// keys of the acquire scripts in it, and the first key of every script.
type trip struct {
	name     string
	n        int
	acquires []string
	keys     []string
}

// acquireSHA is the SHA1 of the plain acquire script.
var acquireSHA = func() string {
	return redis.NewScript(redlock.ScriptSource("acquire.lua")).Hash()
}()

// scriptOf returns the SHA1 of the script an EVALSHA or an EVAL runs, or
// "" for another command. (The first call of each script on a node is an
// EVAL, which loads it.) A plain lock's acquire sent as SET NX GET stands
// for acquire.lua.
func scriptOf(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	switch cmd.Name() {
	case "evalsha":
		return args[1].(string)
	case "eval":
		return redis.NewScript(args[1].(string)).Hash()
	case "set":
		return acquireSHA
	}
	return ""
}

func newRoundTrips() *roundTrips { return &roundTrips{gate: make(chan struct{})} }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.record([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.record(cmds, func() error { return next(ctx, cmds) })
	}
}

func (h *roundTrips) record(cmds []redis.Cmder, send func() error) error {
	name := cmds[0].Name()
	if name != "evalsha" && name != "eval" && name != "set" {
		return send() // go-redis's handshake on a new connection
	}
	tr := trip{name: name, n: len(cmds)}
	for _, cmd := range cmds {
		args := cmd.Args()
		if cmd.Name() == "set" { // a plain lock's acquire: SET key token NX PX ttl GET
			tr.acquires = append(tr.acquires, args[1].(string))
			tr.keys = append(tr.keys, args[1].(string))
			continue
		}
		if len(args) > 3 && scriptOf(cmd) == acquireSHA {
			tr.acquires = append(tr.acquires, args[3].(string))
		}
		if nkeys, ok := args[2].(int); ok && nkeys > 0 && len(args) > 3+nkeys {
			tr.keys = append(tr.keys, fmt.Sprint(args[3]))
		}
	}
	h.mu.Lock()
	h.trips = append(h.trips, tr)
	for _, cmd := range cmds {
		args := cmd.Args()
		if sha := scriptOf(cmd); sha != "" {
			h.shas = append(h.shas, sha)
		}
		if cmd.Name() == "set" {
			h.ops = append(h.ops, fmt.Sprint(args[2]))
		} else if len(args) > 2 {
			if nkeys, ok := args[2].(int); ok && len(args) > 3+nkeys {
				h.ops = append(h.ops, fmt.Sprint(args[3+nkeys]))
			}
		}
	}
	first := !h.gated
	if first {
		h.gated, h.held = true, len(cmds)
	}
	h.mu.Unlock()
	if !first {
		return send()
	}
	<-h.gate
	err := send()
	if h.afterGate != nil {
		h.afterGate()
	}
	return err
}

// queuedBehindGate reports whether the gated round trip and the calls
// queued behind it make up n calls.
func (h *roundTrips) queuedBehindGate(rc *redlock.Client, n int) func() bool {
	return func() bool {
		h.mu.Lock()
		held := h.held
		h.mu.Unlock()
		return held > 0 && held+redlock.QueuedCalls(rc, 0) == n
	}
}

func (h *roundTrips) recorded() []trip {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]trip(nil), h.trips...)
}

// warmUp lets the node learn the scripts, ungated, and forgets the trips.
func (h *roundTrips) warmUp(t *testing.T, rc *redlock.Client) {
	t.Helper()
	h.mu.Lock()
	h.gated = true
	h.mu.Unlock()
	warmUpSoon(t, rc)
	h.mu.Lock()
	h.gated, h.trips, h.shas = false, nil, nil
	h.mu.Unlock()
}

// hookedNode is one embedded node whose client counts its round trips.
func hookedNode(t *testing.T) (*cluster, *roundTrips) {
	t.Helper()
	c := newCluster(t, 1)
	h := newRoundTrips()
	addHook(t, c.clients[0], h)
	return c, h
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitIdle waits until rc has no call in flight or queued to any node.
func waitIdle(t *testing.T, rc *redlock.Client) {
	t.Helper()
	waitFor(t, "the calls in flight to land", func() bool { return redlock.PipesIdle(rc) })
}

// tryAcquireAll runs TryAcquire on keys at once, one goroutine each, and
// returns the results by key index.
func tryAcquireAll(ctx context.Context, rc *redlock.Client, keys []string, ttl time.Duration, opts ...redlock.AcquireOption) ([]*redlock.Lock, []error) {
	locks := make([]*redlock.Lock, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			locks[i], errs[i] = rc.TryAcquire(ctx, k, ttl, opts...)
		}()
	}
	wg.Wait()
	return locks, errs
}

func keysFor(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return keys
}

// scriptTrips counts the round trips of scripts sent alone and in pipelines.
func scriptTrips(trips []trip) (alone, pipelined int) {
	for _, tr := range trips {
		if tr.n == 1 {
			alone++
		} else {
			pipelined++
		}
	}
	return alone, pipelined
}

func TestBatching_aloneSendsPlainCommands(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c, h := hookedNode(t)
	close(h.gate)
	rc := c.client(t)
	h.warmUp(t, rc)
	for i := range 5 {
		lock := mustTryAcquire(t, rc, context.Background(), fmt.Sprint("alone-", i), 10*time.Second)
		mustRelease(t, lock)
	}
	if alone, pipelined := scriptTrips(h.recorded()); alone != 10 || pipelined != 0 {
		t.Fatalf("5 sequential acquires and releases: %d scripts alone, %d pipelines; want 10 alone, none pipelined", alone, pipelined)
	}
}

// acquireBehindGate runs TryAcquire on keys at once: the first alone,
// held at the gate, and the rest once it is. It returns once they are all
// queued behind it.
func acquireBehindGate(ctx context.Context, t *testing.T, rc *redlock.Client, h *roundTrips, keys []string, opts ...redlock.AcquireOption) (wait func() ([]*redlock.Lock, []error)) {
	t.Helper()
	locks := make([]*redlock.Lock, len(keys))
	errs := make([]error, len(keys))
	first := make(chan struct{})
	go func() {
		defer close(first)
		locks[0], errs[0] = rc.TryAcquire(context.Background(), keys[0], 10*time.Second, opts...)
	}()
	waitFor(t, "the first call at the gate", h.queuedBehindGate(rc, 1))
	rest := make(chan struct{})
	go func() {
		defer close(rest)
		l, e := tryAcquireAll(ctx, rc, keys[1:], 10*time.Second, opts...)
		copy(locks[1:], l)
		copy(errs[1:], e)
	}()
	waitFor(t, "every call queued", h.queuedBehindGate(rc, len(keys)))
	return func() ([]*redlock.Lock, []error) {
		<-first
		<-rest
		return locks, errs
	}
}

func mustHoldAll(t *testing.T, c *cluster, keys []string, locks []*redlock.Lock, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("TryAcquire(%s): %v", keys[i], err)
		}
		if got := c.holders(keys[i], locks[i].Token()); len(got) != 1 {
			t.Fatalf("%s not stored on the node", keys[i])
		}
	}
}

func TestBatching_concurrentCallsShareRoundTrips(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c, h := hookedNode(t)
	rc := c.client(t)
	h.warmUp(t, rc)
	keys := keysFor("shared", 32)

	wait := acquireBehindGate(context.Background(), t, rc, h, keys)
	close(h.gate)
	locks, errs := wait()

	mustHoldAll(t, c, keys, locks, errs)
	if got := h.recorded(); len(got) != 2 {
		t.Fatalf("round trips %v, want 2: the one in flight, then every queued call in one pipeline", got)
	}
}

func TestBatching_nodeForgotScripts(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c, h := hookedNode(t)
	rc := c.client(t)
	h.warmUp(t, rc)
	keys := keysFor("noscript", 8)
	// The node forgets its scripts (as after a restart) once the round trip
	// in flight has run, before the queued calls arrive.
	admin := redis.NewClient(&redis.Options{Addr: c.addrs[0]})
	defer admin.Close()
	h.afterGate = func() {
		if err := admin.ScriptFlush(context.Background()).Err(); err != nil {
			t.Error(err)
		}
	}

	// Fenced: their acquire is a script (a plain one is a SET NX GET).
	wait := acquireBehindGate(context.Background(), t, rc, h, keys, redlock.WithFencing())
	close(h.gate)
	locks, errs := wait()

	mustHoldAll(t, c, keys, locks, errs)
	got := h.recorded()
	if len(got) != 3 || got[1].name != "evalsha" || got[2].name != "eval" || got[1].n != got[2].n {
		t.Fatalf("round trips %v, want the gated one, then the queued calls as EVALSHA (NOSCRIPT), then the same as EVAL", got)
	}
}

func TestBatching_cancelledQueuedCallsAreNotSent(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c, h := hookedNode(t)
	rc := c.client(t)
	h.warmUp(t, rc)
	keys := keysFor("cancelled", 8)

	ctx, cancel := context.WithCancel(context.Background())
	wait := acquireBehindGate(ctx, t, rc, h, keys)
	cancel()
	// The queued attempts end with the context, and their clean-up releases
	// queue behind the gated call too.
	waitFor(t, "the releases", func() bool { return redlock.QueuedCalls(rc, 0) == 2*(len(keys)-1) })
	close(h.gate)
	locks, errs := wait()
	waitFor(t, "the pipe to empty", func() bool { return redlock.PipesIdle(rc) })

	mustHoldAll(t, c, keys[:1], locks[:1], errs[:1])
	for i, err := range errs[1:] {
		if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want ErrNotAcquired and context.Canceled", err)
		}
		if got := c.holdersAny(keys[i+1]); len(got) != 0 {
			t.Errorf("%s is on the node after its attempt was cancelled", keys[i+1])
		}
	}
	// Only the gated round trip carried an acquire: the cancelled calls were
	// dropped from the queue, their clean-up releases were sent.
	trips := h.recorded()
	if len(trips) != 2 || len(trips[0].acquires) != 1 || len(trips[1].acquires) != 0 || trips[1].n != len(keys)-1 {
		t.Fatalf("round trips %v, want the gated acquire, then the 7 releases in one pipeline", trips)
	}
}

func TestBatching_hungSendDoesNotHoldUpLaterCalls(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c, h := hookedNode(t)
	rc := c.client(t, redlock.WithNodeTimeout(50*time.Millisecond))
	defer close(h.gate)

	_, err := rc.TryAcquire(context.Background(), "stuck", 10*time.Second)
	mustNotAcquire(t, err)
	var ne *redlock.NodeError
	if !errors.As(err, &ne) {
		t.Fatalf("err = %v, want a NodeError for the stuck call", err)
	}
	// The stuck call is still at the gate (until the test ends); the next
	// calls go on their own. (Acquire, which tries again: on a loaded
	// machine one attempt may take longer than the 50 ms node timeout.)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lock, err := rc.Acquire(ctx, "next", 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire(next) with a send hung at the node: %v", err)
	}
	// (Its release may miss the 50 ms node timeout on a loaded machine;
	// the key then expires with its ttl.)
	defer func() { _ = lock.Release(context.Background()) }()
	if got := c.holders("next", lock.Token()); len(got) != 1 {
		t.Fatal("the call after the stuck one did not reach the node")
	}
}

func TestBatching_off(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c, h := hookedNode(t)
	close(h.gate)
	rc := c.client(t, redlock.WithBatching(false))
	h.warmUp(t, rc)
	keys := keysFor("unbatched", 16)
	locks, errs := tryAcquireAll(context.Background(), rc, keys, 10*time.Second)
	mustHoldAll(t, c, keys, locks, errs)
	for _, l := range locks {
		mustRelease(t, l)
	}
	if alone, pipelined := scriptTrips(h.recorded()); alone != 32 || pipelined != 0 {
		t.Fatalf("%d scripts alone, %d pipelines with batching off; want 32 alone", alone, pipelined)
	}
}

// TestBatching_noScriptKeepsAKeysCallsInOrder: a failed attempt's SET and
// its delete, queued together on a node that has lost its scripts (a
// restart, SCRIPT FLUSH), still run there in order: a pipeline holds no two
// calls on one key, so the SET's resend with the script's text can not
// come after the delete, which would leave the key until its ttl.
func TestBatching_noScriptKeepsAKeysCallsInOrder(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	gate := &gateHook{}
	addHook(t, c.clients[0], gate)
	rc := c.client(t, redlock.WithNodeTimeout(time.Minute))
	ctx := context.Background()
	other := mustTryAcquire(t, rc, ctx, "other", time.Minute)
	redlock.WaitSettled(other)
	for _, s := range c.servers[1:] {
		s.Set("k", "another holder")
	}
	gate.close()
	t.Cleanup(gate.open)
	// Node 0's share of the release waits at the gate (the release waits
	// for it: node 0 is not known to be failing); the attempt's SET and its
	// delete queue behind it.
	released := make(chan error, 1)
	go func() { released <- other.Release(ctx) }()
	waitFor(t, "the release to reach node 0's gate", func() bool { return gate.waiting.Load() == 1 })
	_, err := rc.TryAcquire(ctx, "k", time.Minute)
	mustNotAcquire(t, err)
	waitFor(t, "the SET and the delete to queue on node 0", func() bool { return redlock.QueuedCalls(rc, 0) == 2 })
	admin := redis.NewClient(&redis.Options{Addr: c.addrs[0]})
	defer admin.Close()
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	gate.open()
	if err := <-released; err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := rc.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if c.servers[0].Exists("k") {
		v, _ := c.servers[0].Get("k")
		t.Fatalf("node 0 keeps k = %q after the failed attempt's delete", v)
	}
}

// gatedAfterWarmUp returns a Client over one hooked node, its scripts
// cached, whose round trip after the next one is held at the gate.
func gatedAfterWarmUp(t *testing.T) (*cluster, *roundTrips, *redlock.Client) {
	t.Helper()
	c, h := hookedNode(t)
	rc := c.client(t)
	h.warmUp(t, rc)
	h.mu.Lock()
	h.gated = true // not the next round trip, the one after
	h.mu.Unlock()
	return c, h, rc
}

// TestBatching_releaseQueuedPastItsDeadlineIsSent: a release queued behind
// a slow call outlives its node timeout there. When the node answers
// again, the release is still sent: it only takes away what was ours, and
// dropping it left the key until its ttl. (An acquire queued so is not
// sent: TestBatching_cancelledQueuedCallsAreNotSent.)
func TestBatching_releaseQueuedPastItsDeadlineIsSent(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c, h, rc := gatedAfterWarmUp(t)
	ctx := context.Background()
	acquired := time.Now()
	lock := mustTryAcquire(t, rc, ctx, "a", 2*time.Second) // node timeout 400ms (the tests' floor)
	waitIdle(t, rc)
	h.mu.Lock()
	h.gated = false
	h.mu.Unlock()

	// A call with a node timeout of 1s holds the node up; the release
	// queues behind it, and Release returns at its own 200ms.
	go func() { _, _ = rc.TryAcquire(ctx, "b", 10*time.Second) }()
	waitFor(t, "a call at the gate", h.queuedBehindGate(rc, 1))
	_ = lock.Release(ctx)
	close(h.gate)
	waitFor(t, "the release to land", func() bool { return !c.servers[0].Exists("a") })
	if d := time.Since(acquired); d > 1800*time.Millisecond {
		t.Fatalf("the key went %v after it was taken: by its 2s ttl, not by the release", d)
	}
}

// TestRelease_noScriptAnsweredLateIsSentAgain: a release's EVALSHA is
// answered NOSCRIPT (the node lost its scripts) after the node timeout.
// The release is sent again as EVAL all the same, with a timeout of its
// own: the key goes (go-redis used to refuse the EVAL under the ended
// context, and the key stayed until its ttl).
func TestRelease_noScriptAnsweredLateIsSentAgain(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprint("batching=", batching), func(t *testing.T) {
			c := newCluster(t, 1)
			admin := redis.NewClient(&redis.Options{Addr: c.addrs[0]})
			t.Cleanup(func() { _ = admin.Close() })
			slow := &lateNoScript{sha: scriptSHA(t, "release.lua"), delay: 80 * time.Millisecond, flush: func() { admin.ScriptFlush(context.Background()) }}
			addHook(t, c.clients[0], slow)
			rc := c.client(t, redlock.WithNodeTimeout(50*time.Millisecond), redlock.WithBatching(batching))
			ctx := context.Background()
			lock := acquireSoon(t, rc, "k", time.Minute)
			waitIdle(t, rc)
			slow.armed.Store(true)
			_ = lock.Release(ctx) // not confirmed: the answer comes after the node timeout
			waitFor(t, "the release to land", func() bool { return !c.servers[0].Exists("k") })
		})
	}
}

// lateNoScript makes a node forget its scripts just before the first call
// of one script once armed, and holds that call's NOSCRIPT answer for
// delay.
type lateNoScript struct {
	sha   string
	delay time.Duration
	flush func()
	armed atomic.Bool
}

func (h *lateNoScript) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lateNoScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.around([]redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}
func (h *lateNoScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.around(cmds, func() error { return next(ctx, cmds) })
	}
}
func (h *lateNoScript) around(cmds []redis.Cmder, send func() error) error {
	for _, cmd := range cmds {
		if cmd.Name() == "evalsha" && scriptOf(cmd) == h.sha && h.armed.CompareAndSwap(true, false) {
			h.flush()
			err := send()
			time.Sleep(h.delay)
			return err
		}
	}
	return send()
}

// TestBatching_lateDeleteInFlightIsNotOvertaken: a release sent after its
// node timeout (it queued behind a slow call) is in flight, held up. A call
// made meanwhile waits behind it, as behind any send within its deadline;
// it used to be taken for a hung send, and the new call went out on a
// sender of its own, overtaking it.
func TestBatching_lateDeleteInFlightIsNotOvertaken(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c, h, rc := gatedAfterWarmUp(t)
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "a", 2*time.Second) // node timeout 400ms (the tests' floor)
	waitIdle(t, rc)
	release := newGatedScript(scriptSHA(t, "release.lua"))
	addHook(t, c.clients[0], release)
	defer close(release.open)
	h.mu.Lock()
	h.gated = false
	h.mu.Unlock()

	go func() { _, _ = rc.TryAcquire(ctx, "b", 10*time.Second) }() // node timeout 1s, held at the gate
	waitFor(t, "a call at the gate", h.queuedBehindGate(rc, 1))
	_ = lock.Release(ctx) // queues, and returns at its 200ms
	close(h.gate)
	<-release.hit // the late release is in flight, held

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = rc.TryAcquire(ctx, "c", 10*time.Second)
	}()
	waitFor(t, "the new call to queue or go out", func() bool {
		select {
		case <-done:
			return true
		default:
			return redlock.QueuedCalls(rc, 0) == 1
		}
	})
	select {
	case <-done:
		t.Fatal("a call overtook the late release in flight to the node")
	default:
	}
}

// TestBatching_callOnAKeyOfAnOverdueSendWaitsForIt: a send that outlives
// its deadline (a hung connection, here a reply held at the gate) no longer
// holds the queue up, but a call on one of its keys (the failed attempt's
// delete) waits for it to end. It used to go at once, on another
// connection, and land before the write it was to undo, which then held
// the key until its ttl (the explorer's soak, with a jittering network).
// Calls on other keys still go meanwhile.
func TestBatching_callOnAKeyOfAnOverdueSendWaitsForIt(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c, h := hookedNode(t)
	rc := c.client(t, redlock.WithNodeTimeout(50*time.Millisecond))
	h.warmUp(t, rc)
	gate := sync.OnceFunc(func() { close(h.gate) })
	defer gate()
	ctx := context.Background()

	_, err := rc.TryAcquire(ctx, "stuck", 10*time.Second)
	mustNotAcquire(t, err)
	sentAfterTheGate := func(key string) bool {
		for _, tr := range h.recorded()[1:] {
			if slices.Contains(tr.keys, key) {
				return true
			}
		}
		return false
	}
	waitFor(t, "the delete of the failed attempt to queue or go out", func() bool {
		return redlock.QueuedCalls(rc, 0) == 1 || sentAfterTheGate("stuck")
	})

	// Another key goes on meanwhile.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lock, err := rc.Acquire(wctx, "next", 10*time.Second)
	if err != nil {
		t.Fatalf("Acquire(next) with a send hung at the node: %v", err)
	}
	defer func() { _ = lock.Release(ctx) }()
	if sentAfterTheGate("stuck") {
		t.Fatal("the delete went out while the write it undoes was still out")
	}

	gate()
	waitFor(t, "the delete to be sent after the write", func() bool { return sentAfterTheGate("stuck") })
	waitIdle(t, rc)
	if got := c.holdersAny("stuck"); len(got) != 0 {
		t.Fatalf("the failed attempt's key is left on nodes %v", got)
	}
}

// slowReplies delays every script's reply (after the node ran it) by d,
// once armed, and counts the replies it delayed.
type slowReplies struct {
	armed   atomic.Bool
	d       time.Duration
	delayed atomic.Int32
}

func (h *slowReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slowReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); h.armed.Load() && (n == "evalsha" || n == "eval" || n == "set") {
			time.Sleep(h.d)
			h.delayed.Add(1)
		}
		return err
	}
}

func (h *slowReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestBatching_lateNoScriptIsNotMisconfigured: a node that answers an
// acquire's EVALSHA with NOSCRIPT (it restarted) after the call's deadline
// is slow, not misconfigured: the EVAL is not sent (the write would come
// too late), and neither the logger nor the Observer is told that the node
// keeps no scripts.
func TestBatching_lateNoScriptIsNotMisconfigured(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 1)
	slow := &slowReplies{d: 300 * time.Millisecond}
	addHook(t, c.clients[0], slow)
	var misconfigured atomic.Int32
	observer := redlock.WithObserver(redlock.ObserverFunc(func(_ context.Context, e redlock.Event) {
		if e.Op == redlock.OpMisconfigured {
			misconfigured.Add(1)
		}
	}))
	rc := c.client(t, redlock.WithNodeTimeout(100*time.Millisecond), observer)
	ctx := context.Background()
	mustRelease(t, acquireSoon(t, rc, "warm-up", 10*time.Second))
	admin := redis.NewClient(&redis.Options{Addr: c.addrs[0]})
	defer admin.Close()
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	slow.armed.Store(true)
	_, err := rc.TryAcquire(ctx, "k", 10*time.Second)
	mustNotAcquire(t, err)
	waitFor(t, "the late NOSCRIPT reply", func() bool { return slow.delayed.Load() >= 1 })
	slow.armed.Store(false)
	waitIdle(t, rc)
	if n := misconfigured.Load(); n != 0 {
		t.Fatalf("a NOSCRIPT that came after the deadline was reported as a misconfigured node (%d events)", n)
	}
	if c.servers[0].Exists("k") {
		t.Fatal("the late acquire was sent again with EVAL and took the key")
	}
	mustRelease(t, mustTryAcquire(t, rc, ctx, "k", 10*time.Second))
}
