package redlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// recorder keeps every Event.
type recorder struct {
	mu     sync.Mutex
	events []redlock.Event
}

func (r *recorder) Observe(_ context.Context, e redlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// seen returns the events of op, keeping them.
func (r *recorder) seen(op redlock.Op) []redlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []redlock.Event
	for _, e := range r.events {
		if e.Op == op {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) take(op redlock.Op) []redlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out, rest []redlock.Event
	for _, e := range r.events {
		if e.Op == op {
			out = append(out, e)
		} else {
			rest = append(rest, e)
		}
	}
	r.events = rest
	return out
}

func TestObserver(t *testing.T) {
	c := newCluster(t, 3)
	c.servers[2].Close()
	rec := &recorder{}
	rc := c.client(t, redlock.WithObserver(rec))
	ctx := context.Background()

	lock := mustTryAcquire(t, rc, ctx, "k", time.Minute, redlock.ForWrite())
	acq := rec.take(redlock.OpAcquire)
	if len(acq) != 1 || acq[0].Err != nil || acq[0].Attempts != 1 || acq[0].Kind != "write" || acq[0].Key != "k" || acq[0].Duration <= 0 {
		t.Fatalf("acquire events %+v", acq)
	}
	nodes := rec.take(redlock.OpNode)
	granted, failed := 0, 0
	for _, e := range nodes {
		if e.NodeOp != redlock.OpAcquire || e.Addr != c.addrs[e.Node] {
			t.Fatalf("node event %+v", e)
		}
		if e.Granted {
			granted++
		}
		if e.Err != nil && e.Node == 2 {
			failed++
		}
	}
	if granted < 2 || failed+granted != len(nodes) {
		t.Fatalf("node events %+v: want the two live nodes granted and node 2's error", nodes)
	}

	if err := lock.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ext := rec.take(redlock.OpExtend); len(ext) != 1 || ext[0].Err != nil {
		t.Fatalf("extend events %+v", ext)
	}
	mustRelease(t, lock)
	if rel := rec.take(redlock.OpRelease); len(rel) != 1 || rel[0].Err != nil {
		t.Fatalf("release events %+v", rel)
	}

	c.servers[0].Set("k", "someone else")
	_, err := rc.TryAcquire(ctx, "k", time.Minute)
	mustNotAcquire(t, err)
	if acq := rec.take(redlock.OpAcquire); len(acq) != 1 || !errors.Is(acq[0].Err, redlock.ErrNotAcquired) {
		t.Fatalf("failed acquire events %+v", acq)
	}
}

func TestObserver_renewalAndLoss(t *testing.T) {
	c := newCluster(t, 3)
	rec := &recorder{}
	rc := c.client(t, redlock.WithObserver(rec))
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "k", time.Second, redlock.WithAutoRenew())
	waitFor(t, "a renewal", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, e := range rec.events {
			if e.Op == redlock.OpRenew && e.Err == nil {
				return true
			}
		}
		return false
	})
	for _, s := range c.servers {
		s.Set("k", "someone else")
	}
	if !closed(lock.Done()) {
		t.Fatal("the lock was not lost")
	}
	// Done closes first; the Observer is told right after.
	waitFor(t, "the loss to be observed", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, e := range rec.events {
			if e.Op == redlock.OpLost {
				return true
			}
		}
		return false
	})
	if lost := rec.take(redlock.OpLost); len(lost) != 1 || lost[0].Key != "k" || lost[0].Err == nil {
		t.Fatalf("lost events %+v", lost)
	}
	_ = lock.Release(ctx)
}

func TestWithObserver_nil(t *testing.T) {
	c := newCluster(t, 1)
	if _, err := redlock.New(c.clients, redlock.WithObserver(nil)); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Fatalf("err = %v", err)
	}
}

// TestWithObserver_several: every Observer given is told every event, in
// the order given.
func TestWithObserver_several(t *testing.T) {
	c := newCluster(t, 3)
	var mu sync.Mutex
	var order []string
	tell := func(name string) redlock.Observer {
		return redlock.ObserverFunc(func(_ context.Context, e redlock.Event) {
			if e.Op == redlock.OpAcquire {
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
			}
		})
	}
	rc := c.client(t, redlock.WithObserver(tell("a")), redlock.WithObserver(tell("b")), redlock.WithObserver(tell("c")))
	// Acquire: one event however many attempts a loaded machine makes it take
	lock, err := rc.Acquire(context.Background(), "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	mustRelease(t, lock)
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order, "") != "abc" {
		t.Fatalf("OpAcquire told to %v, want a, b and c in order", order)
	}
}

// TestLogger_consistentAttributes: every line the Client logs about a lock
// names it the same way: "key" (the key as given) and "kind"; a node by
// "node" and "addr"; what went wrong by "err". Some lines said
// lock="\"k\"", others key=k.
func TestLogger_consistentAttributes(t *testing.T) {
	c := newCluster(t, 3)
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	rc := c.client(t, redlock.WithLogger(logger))
	ctx := context.Background()
	c.servers[2].Close()
	lock := mustTryAcquire(t, rc, ctx, "k", time.Second) // acquired despite a node failure
	_ = c.servers[1].Set("other", "held")
	_ = c.servers[0].Set("other", "held")
	waiting, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, _ = rc.Acquire(waiting, "other", time.Second) // refused, attempt after attempt
	cancel()
	_ = lock.Release(ctx)
	mu.Lock()
	defer mu.Unlock()
	lines := 0
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if _, old := rec["lock"]; old {
			t.Errorf("a line names the lock by \"lock\": %s", line)
		}
		if key, ok := rec["key"]; ok {
			lines++
			if key != "k" && key != "other" {
				t.Errorf("key = %v, want the key as given: %s", key, line)
			}
			if _, ok := rec["kind"]; !ok {
				t.Errorf("a line with a key has no kind: %s", line)
			}
		}
	}
	if lines < 2 {
		t.Fatalf("%d lines about a lock, want at least 2:\n%s", lines, buf.String())
	}
}

// TestLock_degradedIsVisible: a lock granted without a node that failed
// says so: Confirmed counts the nodes that hold it, and the node's failure
// is reported once (OpDegraded, and a warning), not at every call, until
// the node answers again. Acquire used to return a lock held on two nodes
// of three without a word.
func TestLock_degradedIsVisible(t *testing.T) {
	goRedisOnly(t, "it slows nodes through go-redis hooks")
	c := newCluster(t, 3)
	c.servers[2].Close()
	rec := &recorder{}
	rc := c.client(t, redlock.WithObserver(rec))
	ctx := context.Background()
	for range 3 {
		lock := mustTryAcquire(t, rc, ctx, "k", time.Second)
		if got := lock.Confirmed(); got != 2 {
			t.Fatalf("Confirmed = %d, want 2 of 3", got)
		}
		if err := lock.Extend(ctx, time.Second); err != nil {
			t.Fatal(err)
		}
		if got := lock.Confirmed(); got != 2 {
			t.Fatalf("Confirmed after Extend = %d, want 2 of 3", got)
		}
		mustRelease(t, lock)
	}
	if err := rc.Drain(ctx); err != nil { // what is heard behind the locks is told by then
		t.Fatal(err)
	}
	got := rec.seen(redlock.OpDegraded)
	var ne *redlock.NodeError
	if len(got) != 1 || got[0].Node != 2 || got[0].Key != "k" || !errors.As(got[0].Err, &ne) || ne.Node != 2 {
		t.Fatalf("OpDegraded events %+v, want one, for node 2", got)
	}
	// Healthy again, then failing: news again. (An acquire is decided by
	// the first two answers: node 2, back, is in the count once it comes
	// in time.)
	c.restart(t, 2)
	waitFor(t, "a lock confirmed by every node", func() bool {
		lock := mustTryAcquire(t, rc, ctx, "k", time.Second)
		defer mustRelease(t, lock)
		return lock.Confirmed() == 3
	})
	// An acquire decided by two nodes does not wait for the third: node
	// 2's failure is heard by the first acquire it comes in time for. The
	// two others answer 20 ms late, so that it comes in time, however
	// loaded the machine.
	for _, i := range []int{0, 1} {
		slow := &delayHook{}
		slow.by.Store(int64(20 * time.Millisecond))
		addHook(t, c.clients[i], slow)
	}
	c.servers[2].Close()
	// Node 2's events only: on a loaded machine a slowed node may miss an
	// acquire's deadline too, and be told of rightly.
	node2 := func() int {
		n := 0
		for _, e := range rec.seen(redlock.OpDegraded) {
			if e.Node == 2 {
				n++
			}
		}
		return n
	}
	waitFor(t, "node 2's failure to be told again", func() bool {
		mustRelease(t, mustTryAcquire(t, rc, ctx, "k", time.Second))
		return node2() >= 2
	})
	mustRelease(t, mustTryAcquire(t, rc, ctx, "k", time.Second))
	if got := node2(); got != 2 {
		t.Fatalf("%d OpDegraded events for node 2, want a second once the node failed again, and no more", got)
	}
	var nilLock *redlock.Lock
	if nilLock.Confirmed() != 0 {
		t.Fatal("a nil Lock confirmed by nodes")
	}
}

// TestLock_degradedOnceWhileANodeComesBack: a failed node that is back
// but not identified yet still does not count, so the locks held without
// it are not news again: its failure is told once, until its answers
// count. (A node that answered was news again at its next failure, and
// "could not be identified yet" told a second warning for one outage.)
func TestLock_degradedOnceWhileANodeComesBack(t *testing.T) {
	c := newCluster(t, 3)
	info := &infoFails{}
	addHook(t, c.clients[2], info)
	c.servers[2].Close()
	rec := &recorder{}
	rc := c.client(t, redlock.WithObserver(rec))
	ctx := context.Background()
	node2 := func() int {
		if err := rc.Drain(ctx); err != nil { // what is heard behind the locks is told by then
			t.Fatal(err)
		}
		n := 0
		for _, e := range rec.seen(redlock.OpDegraded) {
			if e.Node == 2 {
				n++
			}
		}
		return n
	}
	mustRelease(t, mustTryAcquire(t, rc, ctx, "k", time.Second))
	if got := node2(); got != 1 {
		t.Fatalf("%d OpDegraded events for node 2 while it is down, want 1", got)
	}
	info.on.Store(true)
	c.restart(t, 2)
	for range 3 {
		lock := mustTryAcquire(t, rc, ctx, "k", time.Second)
		if got := lock.Confirmed(); got != 2 {
			t.Fatalf("Confirmed = %d with node 2 not identified, want 2", got)
		}
		mustRelease(t, lock)
	}
	if got := node2(); got != 1 {
		t.Fatalf("%d OpDegraded events for node 2 once back but not identified, want still 1", got)
	}
	info.on.Store(false)
	waitFor(t, "a lock confirmed by every node", func() bool {
		lock := mustTryAcquire(t, rc, ctx, "k", time.Second)
		defer mustRelease(t, lock)
		return lock.Confirmed() == 3
	})
	c.servers[2].Close()
	mustRelease(t, mustTryAcquire(t, rc, ctx, "k", time.Second))
	if got := node2(); got != 2 {
		t.Fatalf("%d OpDegraded events for node 2 once it failed again, want 2", got)
	}
}

// infoFails fails its node's INFO while on: the node answers, and its
// server cannot be identified.
type infoFails struct{ on atomic.Bool }

func (h *infoFails) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *infoFails) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && cmd.Name() == "info" {
			cmd.SetErr(errors.New("INFO failed by the test"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *infoFails) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLock_healsAndTellsWhatANodeLacks: a lock won while a node held
// another's key is told of, once and at Debug, as never taken there (it
// used to be an OpDegraded and a warning saying "no longer holds", as if
// the node had lost it); its extend takes the key
// there once it is free, and Confirmed counts the node again; a node that
// held the lock and lost it is told of as lost there (taken again where
// the key is free), once per loss.
func TestLock_healsAndTellsWhatANodeLacks(t *testing.T) {
	c := newCluster(t, 3)
	rec := &recorder{}
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rc := c.client(t, redlock.WithObserver(rec), redlock.WithLogger(logger))
	ctx := context.Background()
	c.servers[2].Set("k", "another holder")
	lock := mustTryAcquire(t, rc, ctx, "k", time.Minute)
	defer mustRelease(t, lock)
	// step extends the lock and checks how many nodes hold it, and the
	// node and text of each OpDegraded event since the last step.
	seen := 0
	step := func(what string, confirmed int, node int, text string) {
		t.Helper()
		if err := lock.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		redlock.WaitSettled(lock)
		// The nodes heard behind the extend are told once Drain returns.
		if err := rc.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		if got := lock.Confirmed(); got != confirmed {
			t.Fatalf("%s: Confirmed = %d, want %d", what, got, confirmed)
		}
		got := rec.seen(redlock.OpDegraded)[seen:]
		seen += len(got)
		var ne *redlock.NodeError
		switch {
		case text == "" && len(got) != 0:
			t.Fatalf("%s: OpDegraded events %+v, want none", what, got)
		case text != "" && (len(got) != 1 || got[0].Node != node || !errors.As(got[0].Err, &ne) || !strings.Contains(ne.Error(), text)):
			t.Fatalf("%s: OpDegraded events %+v, want one for node %d saying %q", what, got, node, text)
		}
	}
	// Contention, not a fault: told at Debug, once, not as OpDegraded.
	step("another's key on node 2", 2, 0, "")
	step("again", 2, 0, "")
	if n := strings.Count(buf.String(), "never taken on the node"); n != 1 {
		t.Fatalf("%d records saying node 2 never took the lock, want 1:\n%s", n, buf.String())
	}
	c.servers[2].Del("k")
	step("node 2's key free", 3, 0, "")
	if v, _ := c.servers[2].Get("k"); v != lock.Token() {
		t.Fatalf("node 2 holds %q, want the lock's token", v)
	}
	c.servers[0].Del("k")
	step("node 0 lost the key", 3, 0, "had lost it")
	// Held on every node again: the warning says the node lost the key and
	// has it again, not that the lock is held without it.
	if n := strings.Count(buf.String(), "held without some nodes"); n != 0 {
		t.Fatalf("a lock held on every node again is told as held without some:\n%s", buf.String())
	}
	if n := strings.Count(buf.String(), "had lost a lock's key"); n != 1 {
		t.Fatalf("%d warnings that node 0 had lost the key, want 1:\n%s", n, buf.String())
	}
	c.servers[1].Set("k", "a later holder")
	step("node 1 holds another's key", 2, 1, "held the lock and no longer does")
	step("again", 2, 0, "")
	if v, _ := c.servers[1].Get("k"); v != "a later holder" {
		t.Fatalf("node 1 holds %q: another's key was overwritten", v)
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 2 {
		t.Fatalf("%d warnings, want 2:\n%s", n, buf.String())
	}
}

// TestLock_extendTakesNoKeyOfALostLock: an extend that finds a majority
// without the token takes the free keys only to drop them again: the lost
// lock leaves no key it did not have, and the extend is judged on the
// nodes that kept the token (not 3 of 3).
func TestLock_extendTakesNoKeyOfALostLock(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "k", time.Minute)
	redlock.WaitSettled(lock)
	c.servers[0].Del("k")
	c.servers[1].Del("k")
	if err := lock.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after a majority lost the key: %v, want ErrLockLost", err)
	}
	for i, s := range c.servers[:2] {
		if s.Exists("k") {
			t.Fatalf("node %d keeps a key for the lost lock", i)
		}
	}
}

// TestLock_lostExtendLeavesNoKeyOnASlowNode: an extend that finds the lock
// lost on the two fast nodes returns before the slow node's call lands,
// which then takes the free key there. That node was left out of the
// cleanup, so the lost lock kept a key for its whole ttl; its delete now
// follows the extend's call there. The message counts the nodes heard
// from and says one was not.
func TestLock_lostExtendLeavesNoKeyOnASlowNode(t *testing.T) {
	c := newCluster(t, 3)
	nodes, links := linkedNodes(t, c)
	rc := mustNew(t, nodes, redlock.WithNodeTimeout(10*time.Second))
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "k", time.Minute)
	redlock.WaitSettled(lock)
	for _, s := range c.servers {
		s.Del("k")
	}
	links[2].setDelay(300 * time.Millisecond)
	err := lock.Extend(ctx, time.Minute)
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after every node lost the key: %v, want ErrLockLost", err)
	}
	// Node 2 is not heard from unless the machine is so loaded that the
	// two others took longer than its 300 ms to decide (the grace is as
	// long again): then all three are counted.
	if msg := err.Error(); !strings.Contains(msg, "2 nodes no longer held its token (1 not heard from)") &&
		!strings.Contains(msg, "3 nodes no longer held its token") {
		t.Fatalf("Extend's error %q: want it to count the 2 nodes heard from and the 1 not", err)
	}
	links[2].delivered(t)
	redlock.WaitSettled(lock)
	for i, s := range c.servers {
		if v, _ := s.Get("k"); v == lock.Token() {
			t.Fatalf("node %d keeps the lost lock's key (ttl %v)", i, s.TTL("k"))
		}
	}
}

// TestObserver_slowOnAMisconfiguredNodeHoldsUpNoCall: OpMisconfigured is
// found by a node's reply, on the goroutine that sends that node's calls:
// an Observer that takes its time there held up every later call to the
// node, which stayed out of every lock once fixed. It is now told on a
// goroutine of its own.
func TestObserver_slowOnAMisconfiguredNodeHoldsUpNoCall(t *testing.T) {
	c := newCluster(t, 3)
	c.servers[1].SetError("NOAUTH Authentication required.")
	entered, leave := make(chan struct{}), make(chan struct{})
	var once sync.Once
	defer close(leave)
	rc := c.client(t, redlock.WithObserver(redlock.ObserverFunc(func(_ context.Context, e redlock.Event) {
		if e.Op == redlock.OpMisconfigured {
			once.Do(func() { close(entered) })
			<-leave
		}
	})))
	ctx := context.Background()
	mustRelease(t, mustTryAcquire(t, rc, ctx, "a", time.Minute))
	<-entered
	c.servers[1].SetError("") // fixed
	start := time.Now()
	lock := mustTryAcquire(t, rc, ctx, "b", time.Minute)
	defer mustRelease(t, lock)
	waitFor(t, "node 1 to hold the lock again", func() bool {
		if err := lock.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		return lock.Confirmed() == 3
	})
	// About 2 s; 40 s when the Observer held up the node's calls (until
	// go-redis gave up on their connection).
	if took := time.Since(start); took > 15*time.Second {
		t.Fatalf("node 1 held the lock again %v after it was fixed", took)
	}
}

// TestAcquire_grantedAtTheQuorum: Acquire returns once a quorum holds a
// plain lock, without waiting for the node still to answer; Confirmed then
// waits for that node, as long as the acquire would have, and counts it.
// Here nodes 0 and 1 answer after 200 ms, and node 2 only once Acquire has
// returned, well within the 400 ms the acquire waits for a node about as
// fast (as long again as the quorum took).
func TestAcquire_grantedAtTheQuorum(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t, redlock.WithNodeTimeout(5*time.Second))
	ctx := context.Background()
	// The first contact identifies the nodes' servers: it waits for every
	// node.
	mustRelease(t, mustTryAcquire(t, rc, ctx, "first", time.Minute))
	gate := slowPairGatedThird(t, c, 200*time.Millisecond)
	lock := mustTryAcquire(t, rc, ctx, "k", time.Minute)
	defer mustRelease(t, lock)
	if n := gate.waiting.Load(); n != 1 {
		t.Fatalf("Acquire returned with %d calls held at node 2's gate, want 1", n)
	}
	gate.open()
	if got := lock.Confirmed(); got != 3 {
		t.Fatalf("Confirmed = %d, want 3: node 2 answered soon after the quorum", got)
	}
}

// TestAcquire_grantedAtTheQuorumThenCancelled: a caller that ends the
// Acquire's context once it returned (defer cancel()) does not keep the
// calls still queued from being sent: here node 2's SET waits behind
// another lock's call there when the lock is granted on nodes 0 and 1, and
// the context ends right after. The SET is sent all the same: Confirmed
// counts node 2, and nothing is told as degraded (it was "not sent:
// context canceled", an OpDegraded and a warning for a healthy node).
func TestAcquire_grantedAtTheQuorumThenCancelled(t *testing.T) {
	c := newCluster(t, 3)
	rec := &recorder{}
	rc := c.client(t, redlock.WithNodeTimeout(5*time.Second), redlock.WithObserver(rec))
	mustRelease(t, mustTryAcquire(t, rc, context.Background(), "first", time.Minute))
	gate := slowPairGatedThird(t, c, 200*time.Millisecond)
	other := make(chan *redlock.Lock, 1)
	go func() {
		l, _ := rc.TryAcquire(context.Background(), "other", time.Minute)
		other <- l
	}()
	waitFor(t, "the other lock's call at node 2's gate", func() bool { return gate.waiting.Load() == 1 })
	ctx, cancel := context.WithCancel(context.Background())
	lock := mustTryAcquire(t, rc, ctx, "k", time.Minute)
	cancel()
	gate.open()
	defer mustRelease(t, lock)
	if l := <-other; l != nil {
		defer mustRelease(t, l)
	}
	if got := lock.Confirmed(); got != 3 {
		t.Fatalf("Confirmed = %d, want 3: node 2's SET was queued when the context ended", got)
	}
	if err := rc.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rec.seen(redlock.OpDegraded); len(got) != 0 {
		t.Fatalf("OpDegraded events %+v for healthy nodes", got)
	}
}

// TestRenewal_batchHeardBehindAnObserverThatAsks: an Observer that asks
// the locks of a batch renewal for Confirmed, from the events of the nodes
// heard behind the renewal, gets its answer: every lock of the batch is
// recorded before any is told. Lock j's events were told before lock
// j+1's nodes were recorded, the Observer waited for them for ever, and
// the scheduler with it: every renewed lock of the Client was lost.
func TestRenewal_batchHeardBehindAnObserverThatAsks(t *testing.T) {
	c := newCluster(t, 3)
	var mu sync.Mutex
	var locks []*redlock.Lock
	var asking atomic.Bool
	var asked atomic.Int64
	obs := redlock.ObserverFunc(func(_ context.Context, e redlock.Event) {
		if e.Op != redlock.OpNode || e.NodeOp != redlock.OpExtend || !asking.CompareAndSwap(false, true) {
			return
		}
		defer asking.Store(false)
		asked.Add(1)
		mu.Lock()
		ls := slices.Clone(locks)
		mu.Unlock()
		for _, l := range ls {
			l.Confirmed()
		}
	})
	// On a fake clock, each renewal is waited for: a loaded machine slows
	// it, but only a scheduler held up for ever loses the locks.
	clock := fakeClock()
	rc := c.client(t, redlock.WithObserver(obs), redlock.WithNodeTimeout(5*time.Second), redlock.WithClock(clock))
	ctx := context.Background()
	mustRelease(t, mustTryAcquire(t, rc, ctx, "first", time.Minute))
	slow := &delayHook{}
	addHook(t, c.clients[2], slow)
	slow.by.Store(int64(15 * time.Millisecond)) // healthy, and the last to answer
	for i := range 4 {
		l := mustTryAcquire(t, rc, ctx, fmt.Sprint("b", i), 3*time.Second, redlock.WithAutoRenew())
		redlock.WaitSettled(l)
		mu.Lock()
		locks = append(locks, l)
		mu.Unlock()
	}
	for range 6 { // six batch renewals, each heard behind and told
		renewEveryOnce(t, c, clock, locks)
		drained, cancel := context.WithTimeout(ctx, 30*time.Second) // a deadlock fails, not hangs
		err := rc.Drain(drained)
		cancel()
		if err != nil {
			t.Fatalf("the renewal's nodes were not heard and told: %v", err)
		}
	}
	if asked.Load() == 0 {
		t.Fatal("the Observer was never told of a renewal's node")
	}
	slow.by.Store(0)
	for _, l := range locks {
		mustRelease(t, l)
	}
}

// slowPairGatedThird makes c's nodes 0 and 1 answer d late from now on
// and holds node 2's calls at the gate it returns, closed: open it to let
// node 2 answer. The lock Client must have made its first contact.
func slowPairGatedThird(t *testing.T, c *cluster, d time.Duration) *gateHook {
	t.Helper()
	for i := range 2 {
		slow := &delayHook{}
		slow.by.Store(int64(d))
		addHook(t, c.clients[i], slow)
	}
	gate := &gateHook{}
	addHook(t, c.clients[2], gate)
	gate.close()
	return gate
}
