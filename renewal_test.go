package redlock_test

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// scriptCounter counts a node's runs of each script, sent alone or in a
// pipeline, by the script's file name. A call sent again (after NOSCRIPT)
// is counted once: runs are told apart by their first key.
type scriptCounter struct {
	mu    sync.Mutex
	files map[string]string              // sha or body -> file
	runs  map[string]map[string]struct{} // file -> first keys of its runs
	keys  map[string]int                 // file -> keys given to its runs
}

func newScriptCounter(files ...string) *scriptCounter {
	sc := &scriptCounter{files: map[string]string{}, runs: map[string]map[string]struct{}{}, keys: map[string]int{}}
	for _, f := range files {
		body := redlock.ScriptSource(f)
		sc.files[fmt.Sprintf("%x", sha1.Sum([]byte(body)))] = f
		sc.files[body] = f
		sc.runs[f] = map[string]struct{}{}
	}
	return sc
}

func (sc *scriptCounter) note(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 4 {
		return
	}
	name := strings.ToLower(fmt.Sprint(args[0]))
	if name != "evalsha" && name != "eval" {
		return
	}
	file, ok := sc.files[fmt.Sprint(args[1])]
	if !ok {
		return
	}
	n, _ := args[2].(int)
	first := fmt.Sprint(args[3])
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if _, again := sc.runs[file][first]; !again {
		sc.runs[file][first] = struct{}{}
		sc.keys[file] += n
	}
}

// countRenewals counts the renewal scripts' runs on each node.
func countRenewals(t *testing.T, c *cluster) []*scriptCounter {
	counters := make([]*scriptCounter, len(c.clients))
	for i, rdb := range c.clients {
		counters[i] = newScriptCounter("renew_batch.lua", "extend.lua")
		addHook(t, rdb, counters[i])
	}
	return counters
}

func (sc *scriptCounter) counts(file string) (runs, keys int) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return len(sc.runs[file]), sc.keys[file]
}

func (sc *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (sc *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		sc.note(cmd)
		return err
	}
}
func (sc *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			sc.note(cmd)
		}
		return err
	}
}

// TestRenewal_batchedPerNode: renewals that fall due together go out
// together, at most 128 locks in one script call per node, and each lock
// is renewed on every node.
func TestRenewal_batchedPerNode(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	const locks = 300
	c := newCluster(t, 3)
	counters := countRenewals(t, c)
	clock := fakeClock()
	// A generous node timeout: a batch that timed out on a loaded machine
	// would be tried again only when the fake clock moves.
	rc := c.client(t, redlock.WithClock(clock), redlock.WithNodeTimeout(10*time.Second))
	ctx := context.Background()
	const ttl = 3 * time.Second
	held := make([]*redlock.Lock, locks)
	for i := range held {
		held[i] = mustTryAcquire(t, rc, ctx, fmt.Sprint("job-", i), ttl, redlock.WithAutoRenew())
		redlock.WaitSettled(held[i])
	}
	defer func() {
		for _, l := range held {
			mustRelease(t, l)
		}
	}()
	renewEveryOnce(t, c, clock, held)
	if err := rc.Drain(ctx); err != nil { // the nodes past the quorum too
		t.Fatal(err)
	}
	for i, s := range c.servers {
		for j := range locks {
			if ttl := s.TTL(fmt.Sprint("job-", j)); ttl != 3*time.Second {
				t.Fatalf("node %d: job-%d has a ttl of %v after its renewal, want 3s", i, j, ttl)
			}
		}
	}
	for i, sc := range counters {
		batches, keys := sc.counts("renew_batch.lua")
		extends, _ := sc.counts("extend.lua")
		if batches != 3 || keys != locks || extends != 0 {
			t.Errorf("node %d: %d batch calls for %d keys and %d single extends, want 3 for %d and none", i, batches, keys, extends, locks)
		}
	}
}

// TestRenewal_batchJudgesEachLock: in a batch, each lock stands on its own
// quorum: one its nodes no longer hold on a majority is lost (and only it),
// one missing from a minority is renewed.
func TestRenewal_batchJudgesEachLock(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	// A generous node timeout: a batch that timed out on a loaded machine
	// would be tried again only when the fake clock moves.
	rc := c.client(t, redlock.WithClock(clock), redlock.WithNodeTimeout(10*time.Second))
	ctx := context.Background()
	const ttl = 3 * time.Second
	var gone, minority, whole *redlock.Lock
	for _, p := range []**redlock.Lock{&gone, &minority, &whole} {
		*p = mustTryAcquire(t, rc, ctx, fmt.Sprintf("k%p", p), ttl, redlock.WithAutoRenew())
		redlock.WaitSettled(*p)
	}
	defer mustRelease(t, minority)
	defer mustRelease(t, whole)
	c.servers[0].Del(gone.Key())
	c.servers[1].Del(gone.Key())
	c.servers[2].Del(minority.Key())
	until := whole.Until()
	done := gone.Done()

	waiters(t, clock, 1)
	clock.Advance(time.Second)
	if !closed(done) {
		t.Fatal("the lock missing from a majority is not lost")
	}
	waitFor(t, "the other two renewed", func() bool {
		return minority.Until().After(until) && whole.Until().After(until)
	})
	if gone.Validity() != 0 || minority.Validity() == 0 || !isOpen(minority.Done()) || !isOpen(whole.Done()) {
		t.Fatalf("validity: lost %v, minority %v, whole %v", gone.Validity(), minority.Validity(), whole.Validity())
	}
	// Its Release reports the loss, or nothing when the nodes that answer
	// first show none (see Release).
	if err := gone.Release(ctx); err != nil && !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("release of the lost lock: %v", err)
	}
}

// TestRenewal_noGoroutinePerLock: held locks, renewed, watched with Done,
// or held by Do, cost no goroutine each: one scheduler for all of them.
func TestRenewal_noGoroutinePerLock(t *testing.T) {
	const locks = 200
	c := newCluster(t, 3)
	rc := c.client(t, redlock.WithNodeTimeout(10*time.Second)) // 400 locks at once on a loaded machine
	ctx := context.Background()
	mustRelease(t, mustTryAcquire(t, rc, ctx, "warm-up", time.Minute)) // connections and pipes
	waitFor(t, "the warm-up's goroutines to end", func() bool { return clientGoroutines() < 1000 })
	base := clientGoroutines()

	var held []*redlock.Lock
	for i := range locks {
		opts := []redlock.AcquireOption{redlock.WithAutoRenew()}
		if i%2 == 0 {
			opts = nil // watched only
		}
		l := mustTryAcquire(t, rc, ctx, fmt.Sprint("held-", i), time.Minute, opts...)
		l.Done()
		held = append(held, l)
	}
	// Do's callers are goroutines of the test; Do adds none.
	var inside atomic.Int32
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := rc.Do(ctx, fmt.Sprint("do-", i), time.Minute, func(ctx context.Context) error {
				inside.Add(1)
				<-release
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	waitFor(t, "every Do to run its fn", func() bool { return inside.Load() == locks })
	// The calls of the last operations may still be finishing: what stays
	// is counted once they have.
	if err := rc.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	got := clientGoroutines() - base - locks // less Do's callers
	close(release)
	wg.Wait()
	for _, l := range held {
		mustRelease(t, l)
	}
	if got > 10 {
		t.Fatalf("%d goroutines for %d held locks and %d Do calls, want at most 10 (one scheduler)", got, locks, locks)
	}
}

// TestRenewal_heldUpRenewalStillEndsAtTheDeadline: a renewal that waits
// behind an Extend whose nodes do not answer does not keep the lock from
// ending at the renewal margin before Until: Done closes then, while both
// are still out.
func TestRenewal_heldUpRenewalStillEndsAtTheDeadline(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	gate, entered := gateExtends(t, c)
	clock := fakeClock()
	const ttl = 3 * time.Second
	rc := c.client(t, redlock.WithClock(clock), redlock.WithNodeTimeout(time.Minute))
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "k", ttl, redlock.WithAutoRenew())
	redlock.WaitSettled(lock)
	done := lock.Done()
	lossAt := lock.Until().Add(-renewMargin(ttl, time.Minute))

	extended := make(chan error, 1)
	go func() { extended <- lock.Extend(ctx, ttl) }()
	<-entered // the Extend holds the lock's operations, its calls at the gate

	waiters(t, clock, 1)
	clock.Advance(time.Second) // the renewal is due: it waits behind the Extend
	waiters(t, clock, 1)       // the scheduler, for the deadline
	if !isOpen(done) {
		t.Fatal("Done closed before the deadline")
	}
	clock.Advance(lossAt.Sub(clock.Now()))
	if !closed(done) {
		t.Fatal("Done still open at the renewal margin before Until, with the renewal held up")
	}
	if lock.Validity() != 0 {
		t.Fatalf("Validity %v after the loss", lock.Validity())
	}
	close(gate)
	if err := <-extended; !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("the held-up Extend: %v, want ErrLockLost (the lock ended meanwhile)", err)
	}
	if err := lock.Release(ctx); err != nil && !errors.Is(err, redlock.ErrLockLost) {
		t.Fatal(err)
	}
}

// TestRenewal_followsAShorterExtendItWaitedFor: a renewal that fell due
// while a shorter Extend was out renews the lease that Extend gave (its
// ttl), not the one from before it.
func TestRenewal_followsAShorterExtendItWaitedFor(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	gate, entered := gateExtends(t, c)
	clock := fakeClock()
	rc := c.client(t, redlock.WithClock(clock), redlock.WithNodeTimeout(time.Minute))
	ctx := context.Background()
	lock := mustTryAcquire(t, rc, ctx, "k", 3*time.Second, redlock.WithAutoRenew())
	defer lock.Release(ctx)
	redlock.WaitSettled(lock)

	clock.Advance(500 * time.Millisecond)
	extended := make(chan error, 1)
	go func() { extended <- lock.Extend(ctx, time.Second) }()
	<-entered // the Extend holds the lock's operations, its calls at the gate
	waiters(t, clock, 1)
	clock.Advance(500 * time.Millisecond) // the renewal is due, and waits for the Extend
	waiters(t, clock, 1)                  // the scheduler, for the deadline
	close(gate)
	if err := <-extended; err != nil {
		t.Fatal(err)
	}
	drift := 12 * time.Millisecond // 1s × 0.01 + 2ms
	extendedUntil := clock.Now().Add(-500 * time.Millisecond).Add(time.Second - drift)
	waitFor(t, "the renewal", func() bool { return lock.Until().After(extendedUntil) })
	if want := clock.Now().Add(time.Second - drift); !lock.Until().Equal(want) {
		t.Fatalf("Until after the renewal = %v, want %v: the Extend's ttl of 1s from now", lock.Until(), want)
	}
}

// TestRenewal_observerReleasesAnotherLockOfTheBatch: an Observer told of
// one lock's loss may Release another lock renewed in the same batch: the
// batch holds none of them while it tells.
func TestRenewal_observerReleasesAnotherLockOfTheBatch(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	var mu sync.Mutex
	partner := map[string]*redlock.Lock{}
	released := make(chan error, 2)
	rc := c.client(t, redlock.WithClock(clock), redlock.WithObserver(redlock.ObserverFunc(func(ctx context.Context, e redlock.Event) {
		if e.Op != redlock.OpLost {
			return
		}
		mu.Lock()
		other := partner[e.Key]
		mu.Unlock()
		released <- other.Release(ctx)
	})))
	ctx := context.Background()
	a := mustTryAcquire(t, rc, ctx, "a", 3*time.Second, redlock.WithAutoRenew())
	b := mustTryAcquire(t, rc, ctx, "b", 3*time.Second, redlock.WithAutoRenew())
	redlock.WaitSettled(a)
	redlock.WaitSettled(b)
	mu.Lock()
	partner["a"], partner["b"] = b, a
	mu.Unlock()
	for _, s := range c.servers[:2] {
		s.Del("a")
		s.Del("b")
	}
	waiters(t, clock, 1)
	clock.Advance(time.Second) // both are renewed in one batch, and both are lost
	// The first loss told releases the other lock, which is then released
	// rather than lost.
	select {
	case err := <-released:
		if err != nil && !errors.Is(err, redlock.ErrLockLost) {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the Observer's Release of the other lock of the batch never returned")
	}
	if !closed(a.Done()) || !closed(b.Done()) {
		t.Fatal("Done still open")
	}
}

// TestRenewal_slowObserverHoldsUpNoOtherLock: an Observer slow to handle
// one lock's end holds up neither that lock's Done, which closes before
// the Observer is told, nor another lock's, which closes at its own
// deadline.
func TestRenewal_slowObserverHoldsUpNoOtherLock(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	hold := make(chan struct{})
	defer close(hold)
	rc := c.client(t, redlock.WithClock(clock), redlock.WithObserver(redlock.ObserverFunc(func(ctx context.Context, e redlock.Event) {
		if e.Op == redlock.OpLost && e.Key == "first" {
			<-hold
		}
	})))
	ctx := context.Background()
	first := mustTryAcquire(t, rc, ctx, "first", time.Second)
	second := mustTryAcquire(t, rc, ctx, "second", 2*time.Second)
	defer first.Release(ctx)
	defer second.Release(ctx)
	firstDone := first.Done()
	done := second.Done()
	waiters(t, clock, 1)
	clock.Advance(time.Second) // the first ends; its Observer waits
	if !closed(firstDone) {
		t.Fatal("the first lock's Done waited for the Observer told of its end")
	}
	waiters(t, clock, 1) // the scheduler, for the second
	clock.Advance(time.Second)
	if !closed(done) {
		t.Fatal("the second lock's Done did not close at its end while the Observer of the first's was busy")
	}
}

// TestRenewal_dueWithinTheSlackGoTogether: locks acquired a few tens of
// milliseconds apart, whose renewals fall due within the slack (a
// twentieth of the ttl, at most 100 ms) of the first's, are renewed with
// it in one script call per node.
func TestRenewal_dueWithinTheSlackGoTogether(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	counters := countRenewals(t, c)
	clock := fakeClock()
	// A generous node timeout: a batch that timed out on a loaded machine
	// would be tried again only when the fake clock moves.
	rc := c.client(t, redlock.WithClock(clock), redlock.WithNodeTimeout(10*time.Second))
	ctx := context.Background()
	var held []*redlock.Lock
	for i := range 5 {
		if i > 0 {
			clock.Advance(20 * time.Millisecond)
		}
		l := mustTryAcquire(t, rc, ctx, fmt.Sprint("spread-", i), 3*time.Second, redlock.WithAutoRenew())
		redlock.WaitSettled(l)
		held = append(held, l)
	}
	defer func() {
		for _, l := range held {
			mustRelease(t, l)
		}
	}()
	last := held[4].Until()
	waiters(t, clock, 1)
	clock.Advance(held[0].Until().Add(-1978 * time.Millisecond).Sub(clock.Now())) // the first is due: (3s − 32 ms)·2/3 before its Until
	waitFor(t, "every lock renewed", func() bool {
		for _, l := range held {
			if !l.Until().After(last) {
				return false
			}
		}
		return true
	})
	if err := rc.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for i, sc := range counters {
		if batches, keys := sc.counts("renew_batch.lua"); batches != 1 || keys != 5 {
			t.Errorf("node %d: %d batch calls for %d keys, want one for all 5", i, batches, keys)
		}
	}
}

// gateExtends holds every extend.lua call to the cluster's nodes until
// gate is closed; entered receives as each call arrives.
func gateExtends(t *testing.T, c *cluster) (gate chan struct{}, entered chan struct{}) {
	gate, entered = make(chan struct{}), make(chan struct{}, 16)
	for _, rdb := range c.clients {
		addHook(t, rdb, newScriptHook(t, "extend.lua", func(ctx context.Context) error {
			entered <- struct{}{}
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
	}
	return gate, entered
}

// lateHook answers every call of its node d late.
type lateHook time.Duration

func (lateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h lateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		time.Sleep(time.Duration(h))
		return next(ctx, cmd)
	}
}

func (h lateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		time.Sleep(time.Duration(h))
		return next(ctx, cmds)
	}
}

// lastHook holds its node's pipelines until the nodes of before have
// answered as many, so that its node answers last: after the quorum of the
// others, however the machine schedules them.
type lastHook struct {
	answered *atomic.Int64 // pipelines the nodes of before have answered
	before   int64         // how many nodes come first
	sent     atomic.Int64  // pipelines of its own node
}

func (*lastHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*lastHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *lastHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		want := h.before * h.sent.Add(1)
		for deadline := time.Now().Add(10 * time.Second); h.answered.Load() < want && time.Now().Before(deadline); {
			time.Sleep(50 * time.Microsecond)
		}
		return next(ctx, cmds)
	}
}

// countHook counts its node's pipelines once answered.
type countHook struct{ answered *atomic.Int64 }

func (countHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		defer h.answered.Add(1)
		return next(ctx, cmds)
	}
}

// TestRenewal_batchConfirmsEveryHealthyNode: a batch renewal waits the
// extend's grace for the nodes after the quorum, so that each lock's
// Confirmed counts a healthy node that answers just after the others. It
// returned at the quorum: with node 2 answering last, Confirmed said 2 of
// 3 after every renewal. The grace is a time, so a loaded machine may
// make node 2 miss it in a round: some round of a few must count all 3.
func TestRenewal_batchConfirmsEveryHealthyNode(t *testing.T) {
	goRedisOnly(t, "it orders its nodes' replies through go-redis hooks")
	c := newCluster(t, 3)
	nodes := c.connect(t)
	clock := fakeClock()
	rc := mustNew(t, nodes, redlock.WithClock(clock), redlock.WithNodeTimeout(10*time.Second))
	ctx := context.Background()
	const ttl = 3 * time.Second
	held := make([]*redlock.Lock, 4)
	for i := range held {
		held[i] = mustTryAcquire(t, rc, ctx, fmt.Sprint("batch-", i), ttl, redlock.WithAutoRenew())
		redlock.WaitSettled(held[i])
	}
	defer func() {
		for _, l := range held {
			mustRelease(t, l)
		}
	}()
	// From now on node 2 answers each batch after nodes 0 and 1.
	var answered atomic.Int64
	addHook(t, nodes[0].(*redis.Client), countHook{&answered})
	addHook(t, nodes[1].(*redis.Client), countHook{&answered})
	addHook(t, nodes[2].(*redis.Client), &lastHook{answered: &answered, before: 2})

	waiters(t, clock, 1) // the scheduler, for all of them
	for round := 1; ; round++ {
		until := held[0].Until()
		for _, s := range c.servers {
			s.FastForward(time.Second)
		}
		clock.Advance(time.Second)
		waitFor(t, "every lock renewed", func() bool {
			for _, l := range held {
				if !l.Until().After(until) {
					return false
				}
			}
			return true
		})
		all := true
		for _, l := range held {
			all = all && l.Confirmed() == 3
		}
		if all {
			return
		}
		if round == 5 {
			for i, l := range held {
				t.Errorf("lock %d: Confirmed() = %d after %d batch renewals on 3 healthy nodes, want 3 after one", i, l.Confirmed(), round)
			}
			return
		}
		redlock.WaitSettled(held[0])
		waiters(t, clock, 1)
	}
}

// TestRenewal_decidedByAQuorumBeforeASlowerNode: a renewal is decided once
// a quorum kept the token, however long a third node takes: here nodes 0
// and 1 answer after 500 ms (a quarter of the ttl) and node 2 not at all
// while its calls wait behind one held at its gate. The quorum's replies
// come 324 ms before the renewal margin; waiting as long again for node 2
// (the grace for the nodes about as fast) ran past it, and the lock was
// declared lost though both nodes had extended it. Batched renewals and
// renewals one lock at a time alike.
func TestRenewal_decidedByAQuorumBeforeASlowerNode(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			c := newCluster(t, 3)
			rec := &recorder{}
			rc := c.client(t, redlock.WithNodeTimeout(5*time.Second), redlock.WithBatching(batching), redlock.WithObserver(rec))
			ctx := context.Background()
			mustRelease(t, mustTryAcquire(t, rc, ctx, "first", time.Minute))
			slow := []*delayHook{{}, {}}
			for i, h := range slow {
				addHook(t, c.clients[i], h)
			}
			gate := &gateHook{}
			addHook(t, c.clients[2], gate)
			lock := mustTryAcquire(t, rc, ctx, "k", 2*time.Second, redlock.WithAutoRenew())
			start := time.Now()
			gate.close()
			defer gate.open()
			for _, h := range slow {
				h.by.Store(int64(500 * time.Millisecond))
			}
			// The first renewal is due 0.66 s in, its margin 1.48 s in.
			keptUntil(t, lock, start.Add(1700*time.Millisecond), func() any { return rec.seen(redlock.OpLost) })
			for _, h := range slow {
				h.by.Store(0)
			}
			gate.open()
			if err := lock.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRenewal_unbatchedWaitsForASlowerNetwork: a renewal one lock at a
// time (batching off) waits for the nodes until the lock's deadline, as a
// batched one does: here every node's round trip jumps from under a
// millisecond to 500 ms (a quarter of the ttl) right after the acquire,
// and the lock is kept for 3.5 s. Its wait was cut to the node timeout the
// fast round trips had made (200 ms), every renewal failed, and the lock
// was lost 3.1 s in.
func TestRenewal_unbatchedWaitsForASlowerNetwork(t *testing.T) {
	c := newCluster(t, 3)
	rec := &recorder{}
	rc := c.client(t, redlock.WithBatching(false), redlock.WithObserver(rec))
	ctx := context.Background()
	mustRelease(t, mustTryAcquire(t, rc, ctx, "first", time.Minute))
	slow := []*delayHook{{}, {}, {}}
	for i, h := range slow {
		addHook(t, c.clients[i], h)
	}
	lock := mustTryAcquire(t, rc, ctx, "k", 2*time.Second, redlock.WithAutoRenew())
	start := time.Now()
	for _, h := range slow {
		h.by.Store(int64(500 * time.Millisecond))
	}
	keptUntil(t, lock, start.Add(3500*time.Millisecond), func() any { return rec.seen(redlock.OpRenew) })
	for _, h := range slow {
		h.by.Store(0)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRenewal_doesNotWaitForTheAcquiresLastNode: a renewal due while the
// nodes slower than the acquire's quorum are still heard goes out when
// due. Here nodes 0 and 1 answer after 600 ms and node 2 not at all, so
// the acquire's grace for node 2 runs to 1.2 s; the renewal is due 0.69 s
// in and its margin is 1.56 s in. It waited for that hearing, which left
// it less than its own round trip, and the lock was lost.
func TestRenewal_doesNotWaitForTheAcquiresLastNode(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t, redlock.WithNodeTimeout(5*time.Second))
	ctx := context.Background()
	mustRelease(t, mustTryAcquire(t, rc, ctx, "first", time.Minute))
	gate := slowPairGatedThird(t, c, 600*time.Millisecond)
	defer gate.open()
	start := time.Now()
	lock := mustTryAcquire(t, rc, ctx, "k", 2100*time.Millisecond, redlock.WithAutoRenew())
	keptUntil(t, lock, start.Add(2*time.Second), func() any { return "while a quorum renewed it" })
	gate.open()
	_ = lock.Release(ctx)
}

// keptUntil fails t if lock is lost before until; what tells what the
// failure message adds.
func keptUntil(t *testing.T, lock *redlock.Lock, until time.Time, what func() any) {
	t.Helper()
	select {
	case <-lock.Done():
		t.Fatalf("lost %v before the end of the hold: %+v", time.Until(until).Round(time.Millisecond), what())
	case <-time.After(time.Until(until)):
	}
}

// renewEveryOnce moves the nodes and the fake clock a second on, once the
// scheduler waits on the clock, and waits until every lock of locks has
// been renewed past its Until before; a lock lost fails the test.
func renewEveryOnce(t *testing.T, c *cluster, clock *manualClock, locks []*redlock.Lock) {
	t.Helper()
	before := make([]time.Time, len(locks))
	for i, l := range locks {
		before[i] = l.Until()
	}
	waiters(t, clock, 1) // the scheduler, for all of them
	for _, s := range c.servers {
		s.FastForward(time.Second)
	}
	clock.Advance(time.Second)
	waitFor(t, "every lock renewed", func() bool {
		for i, l := range locks {
			if !isOpen(l.Done()) {
				t.Fatalf("lock %d lost", i)
			}
			if !l.Until().After(before[i]) {
				return false
			}
		}
		return true
	})
}

// infoStalls holds its node's INFO until released or its context ends:
// the node answers the scripts, and its server stays unidentified.
type infoStalls struct{ release chan struct{} }

func (h *infoStalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *infoStalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "info" {
			select {
			case <-h.release:
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
				return cmd.Err()
			}
		}
		return next(ctx, cmd)
	}
}

func (h *infoStalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLock_Extend_decidedByAQuorumWhileANodeIsUnidentified: an Extend (as
// a renewal) of a lock already granted returns once a quorum kept it,
// though a node's server is not identified yet (its INFO is slow). It used
// to wait for that node, as a first contact's grant does, for all of its
// node timeout; a renewal waits until the lock's deadline, so through a
// node 50-300 ms away, whose identification took 1.2 s, renewed locks of
// 300 ms and 500 ms were lost with a quorum of healthy nodes keeping them.
func TestLock_Extend_decidedByAQuorumWhileANodeIsUnidentified(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	nodes := c.connect(t)
	stall := &infoStalls{release: make(chan struct{})}
	addHook(t, nodes[2], stall)
	defer close(stall.release)
	const timeout = 3 * time.Second
	rc := mustNew(t, nodes, redlock.WithNodeTimeout(timeout))
	ctx := context.Background()
	// A first contact: the grant waits for node 2's identification, to
	// its node timeout, and is granted on nodes 0 and 1.
	lock := mustTryAcquire(t, rc, ctx, "k", time.Minute)
	defer mustRelease(t, lock)
	start := time.Now()
	if err := lock.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	// Wide: waiting for node 2 takes the node timeout.
	if took := time.Since(start); took >= timeout/2 {
		t.Fatalf("Extend took %v with a quorum of identified nodes answering at once; want it decided by them, not by node 2's node timeout of %v", took.Round(time.Millisecond), timeout)
	}
}
