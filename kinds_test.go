package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

func mustNotAcquireKind(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("%s: err = %v, want ErrNotAcquired", what, err)
	}
}

func TestKinds_badInput(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	before := c.commands()
	for name, try := range map[string]func() error{
		"empty owner":  func() error { _, err := rc.TryAcquire(ctx, "k", time.Second, redlock.WithOwner("")); return err },
		"zero permits": func() error { _, err := rc.TryAcquire(ctx, "k", time.Second, redlock.WithPermits(0)); return err },
		"two kinds": func() error {
			_, err := rc.Acquire(ctx, "k", time.Second, redlock.ForRead(), redlock.Fair())
			return err
		},
		"read and write": func() error {
			_, err := rc.TryAcquire(ctx, "k", time.Second, redlock.ForRead(), redlock.ForWrite())
			return err
		},
		"no keys":          func() error { _, err := rc.TryAcquireAll(ctx, nil, time.Second); return err },
		"empty key in set": func() error { _, err := rc.AcquireAll(ctx, []string{"a", ""}, time.Second); return err },
		"repeated key":     func() error { _, err := rc.TryAcquireAll(ctx, []string{"a", "b", "a"}, time.Second); return err },
		"kind with set": func() error {
			_, err := rc.TryAcquireAll(ctx, []string{"a", "b"}, time.Second, redlock.WithPermits(2))
			return err
		},
		"bad ttl in set": func() error { _, err := rc.TryAcquireAll(ctx, []string{"a"}, 0); return err },
	} {
		if err := try(); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
	if n := c.commands() - before; n != 0 {
		t.Errorf("bad input sent %d commands", n)
	}
}

func TestKinds_reentrant(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	alice := redlock.WithOwner("alice")
	outer := mustTryAcquire(t, rc, ctx, "doc", time.Minute, alice)
	inner, err := rc.Acquire(ctx, "doc", time.Minute, alice) // no waiting: the owner holds it
	if err != nil {
		t.Fatalf("the owner's second Acquire: %v", err)
	}
	redlock.WaitSettled(inner)
	for i, s := range c.servers {
		if got := s.HGet("doc", "alice"); got != "2" {
			t.Fatalf("node %d: HGET doc alice = %q, want 2", i, got)
		}
	}
	_, err = rc.TryAcquire(ctx, "doc", time.Minute, redlock.WithOwner("bob"))
	mustNotAcquireKind(t, "another owner", err)
	_, err = rc.TryAcquire(ctx, "doc", time.Minute)
	if err == nil {
		t.Fatal("a plain lock on a reentrant lock's key was acquired")
	}

	mustRelease(t, inner)
	_, err = rc.TryAcquire(ctx, "doc", time.Minute, redlock.WithOwner("bob"))
	mustNotAcquireKind(t, "another owner after one of two releases", err)
	mustRelease(t, outer)
	for i, s := range c.servers {
		if s.Exists("doc") || s.Exists("{doc}:grants") {
			t.Fatalf("node %d keeps the lock's keys after the last release", i)
		}
	}
	mustRelease(t, mustTryAcquire(t, rc, ctx, "doc", time.Minute, redlock.WithOwner("bob")))
}

func TestKinds_readWrite(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	r1 := mustTryAcquire(t, rc, ctx, "cfg", time.Minute, redlock.ForRead())
	r2 := mustTryAcquire(t, rc, ctx, "cfg", time.Minute, redlock.ForRead())
	_, err := rc.TryAcquire(ctx, "cfg", time.Minute, redlock.ForWrite())
	mustNotAcquireKind(t, "a writer while readers hold", err)

	// A writer waiting in Acquire keeps new readers out, and gets the lock
	// once the readers are gone.
	wrote := make(chan acquired, 1)
	go func() {
		l, err := rc.Acquire(ctx, "cfg", time.Minute, redlock.ForWrite())
		wrote <- acquired{l, err}
	}()
	waitFor(t, "the writer's mark", func() bool {
		n := 0
		for _, s := range c.servers {
			if s.Exists("{cfg}:writer-waiting") {
				n++
			}
		}
		return n >= 2
	})
	_, err = rc.TryAcquire(ctx, "cfg", time.Minute, redlock.ForRead())
	mustNotAcquireKind(t, "a new reader while a writer waits", err)
	mustRelease(t, r1)
	mustRelease(t, r2)
	w := mustGet(t, wrote)
	redlock.WaitSettled(w)
	if got := c.holders("cfg", w.Token()); len(got) != 3 {
		t.Fatalf("writer's token on %v, want all 3", got)
	}
	_, err = rc.TryAcquire(ctx, "cfg", time.Minute, redlock.ForRead())
	mustNotAcquireKind(t, "a reader while the writer holds", err)
	_, err = rc.TryAcquire(ctx, "cfg", time.Minute, redlock.ForWrite())
	mustNotAcquireKind(t, "a second writer", err)
	mustRelease(t, w)
	for i, s := range c.servers {
		if len(s.Keys()) != 0 {
			t.Fatalf("node %d keeps %v after every release", i, s.Keys())
		}
	}
	mustRelease(t, mustTryAcquire(t, rc, ctx, "cfg", time.Minute, redlock.ForRead()))
}

func TestKinds_writerGivesUp(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	r := mustTryAcquire(t, rc, ctx, "cfg", time.Minute, redlock.ForRead())
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := rc.Acquire(wctx, "cfg", time.Minute, redlock.ForWrite())
	mustNotAcquireKind(t, "writer", err)
	for i, s := range c.servers {
		if s.Exists("{cfg}:writer-waiting") {
			t.Fatalf("node %d keeps the mark of a writer that gave up", i)
		}
	}
	mustRelease(t, mustTryAcquire(t, rc, ctx, "cfg", time.Minute, redlock.ForRead()))
	mustRelease(t, r)
}

func TestKinds_semaphore(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	two := redlock.WithPermits(2)
	a := mustTryAcquire(t, rc, ctx, "pool", time.Minute, two)
	b := mustTryAcquire(t, rc, ctx, "pool", time.Minute, two)
	_, err := rc.TryAcquire(ctx, "pool", time.Minute, two)
	mustNotAcquireKind(t, "a third permit of 2", err)
	_, err = rc.TryAcquire(ctx, "pool", time.Minute, redlock.WithPermits(3))
	if err == nil || !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("another permit count: err = %v, want ErrNotAcquired with the nodes' errors", err)
	}
	var ne *redlock.NodeError
	if !errors.As(err, &ne) {
		t.Fatalf("another permit count: err = %v, want the nodes' errors", err)
	}
	mustRelease(t, a)
	cc := mustTryAcquire(t, rc, ctx, "pool", time.Minute, two)
	mustRelease(t, b)
	mustRelease(t, cc)
	for i, s := range c.servers {
		if len(s.Keys()) != 0 {
			t.Fatalf("node %d keeps %v after every release", i, s.Keys())
		}
	}
}

// TestKinds_semaphorePermitsExpire: a holder that never releases keeps its
// permit only for its ttl.
func TestKinds_semaphorePermitsExpire(t *testing.T) {
	c := newCluster(t, 1)
	// The Client's validity on a fake clock, the node's time moved by
	// hand: a loaded machine delays nothing the test reads.
	rc := c.client(t, redlock.WithClock(fakeClock()))
	ctx := context.Background()
	one := redlock.WithPermits(1)
	mustTryAcquire(t, rc, ctx, "pool", 100*time.Millisecond, one) // never released
	_, err := rc.TryAcquire(ctx, "pool", time.Minute, one)
	mustNotAcquireKind(t, "a permit while the other is valid", err)
	c.servers[0].SetTime(time.Now().Add(150 * time.Millisecond)) // the permit's own expiry is node time
	c.servers[0].FastForward(150 * time.Millisecond)
	mustRelease(t, mustTryAcquire(t, rc, ctx, "pool", time.Minute, one))
}

func TestKinds_multiKey(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	ab, err := rc.TryAcquireAll(ctx, []string{"a", "b"}, time.Minute, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	if got := ab.Keys(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Keys = %v", got)
	}
	redlock.WaitSettled(ab)
	for _, k := range []string{"a", "b"} {
		if got := c.holders(k, ab.Token()); len(got) != 3 {
			t.Fatalf("%s holds the token on %v, want all 3", k, got)
		}
	}
	_, err = rc.TryAcquireAll(ctx, []string{"b", "c"}, time.Minute)
	mustNotAcquireKind(t, "an overlapping set", err)
	if got := c.holdersAny("c"); len(got) != 0 {
		t.Fatalf("the refused set left c on %v", got)
	}
	_, err = rc.TryAcquire(ctx, "a", time.Minute)
	mustNotAcquireKind(t, "a plain lock on a held key", err)
	if err := ab.Extend(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	mustRelease(t, ab)
	bc, err := rc.TryAcquireAll(ctx, []string{"b", "c"}, time.Minute, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	if bc.FencingToken() <= ab.FencingToken() {
		t.Fatalf("fencing token %d after %d on a shared key", bc.FencingToken(), ab.FencingToken())
	}
	mustRelease(t, bc)
}

// TestKinds_multiKeyNoDeadlock: two holders wanting the same keys in
// opposite orders both finish.
func TestKinds_multiKeyNoDeadlock(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t, redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 3*time.Millisecond)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, keys := range [][]string{{"x", "y"}, {"y", "x"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				l, err := rc.AcquireAll(ctx, keys, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				mustRelease(t, l)
			}
		}()
	}
	wg.Wait()
}

// queueSize is how many waiters a fair lock's queue holds on each node.
func queueSizes(c *cluster, key string) []int {
	var n []int
	for _, s := range c.servers {
		m, _ := s.ZMembers("{" + key + "}:queue")
		n = append(n, len(m))
	}
	return n
}

func TestKinds_fairOrder(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t, redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 5*time.Millisecond)))
	ctx := context.Background()
	fair := redlock.Fair()
	holder := mustTryAcquire(t, rc, ctx, "turn", time.Minute, fair)

	const waiters = 5
	order := make(chan int, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		// Each waiter its own process: a Client with its own connections.
		own := mustNew(t, c.connect(t), redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 5*time.Millisecond)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := own.Acquire(ctx, "turn", time.Minute, fair)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			mustRelease(t, l)
		}()
		// The next waiter comes once this one is in every node's queue.
		waitFor(t, "the waiter to queue", func() bool {
			for _, n := range queueSizes(c, "turn") {
				if n != i+1 {
					return false
				}
			}
			return true
		})
	}
	mustRelease(t, holder)
	wg.Wait()
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	if !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("granted in the order %v, want the queue's 0..4", got)
	}
	for i, s := range c.servers {
		for _, k := range s.Keys() {
			if k != "{turn}:tickets" {
				t.Errorf("node %d keeps %s after every waiter was served", i, k)
			}
		}
	}
}

// TestKinds_fairOrderWithANodeClockAhead: one node's clock is an hour ahead,
// so its ticket counter answers an hour's microseconds above the others.
// The first waiter draws its ticket from every node (the highest: that
// node's); that node then goes away, and a second waiter draws from the
// other two. The second must still queue behind the first: it used to get a
// ticket an hour lower, and be granted first.
func TestKinds_fairOrderWithANodeClockAhead(t *testing.T) {
	c := newCluster(t, 3)
	c.servers[2].SetTime(time.Now().Add(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder := mustTryAcquire(t, c.client(t), ctx, "turn", time.Minute, redlock.Fair())
	redlock.WaitSettled(holder)

	// Each waiter its own process, its nodes identified before any node
	// closes (an embedded node closing while it answers INFO can crash).
	owns := separateClients(t, c, 2)
	waiter := func() {
		own := owns[0]
		owns = owns[1:]
		go func() {
			l, err := own.Acquire(ctx, "turn", time.Minute, redlock.Fair())
			if err == nil {
				_ = l.Release(context.Background())
			}
		}()
	}
	waiter()
	waitFor(t, "the first waiter to queue on node 0", func() bool { return queueSizes(c, "turn")[0] == 1 })
	queue, err := sortedSet(c.servers[0], "{turn}:queue")
	if err != nil {
		t.Fatal(err)
	}
	var first string
	for id := range queue {
		first = id
	}
	c.servers[2].Close()
	waiter()
	waitFor(t, "the second waiter to queue on node 0", func() bool { return queueSizes(c, "turn")[0] == 2 })
	queue, err = sortedSet(c.servers[0], "{turn}:queue")
	if err != nil {
		t.Fatal(err)
	}
	for id, ticket := range queue {
		if id != first && ticket <= queue[first] {
			t.Fatalf("the second waiter's ticket %.0f is not above the first's %.0f: it would be granted first", ticket, queue[first])
		}
	}
	mustRelease(t, holder)
}

// TestKinds_fairOrderWithCountersAheadOfTheClocks: the ticket counters are
// an hour ahead of every node's clock (as a raise to a ticket from a node
// whose clock was ahead leaves them), so a draw adds one to each; and a
// different node is down at each waiter's draw. Waiters that came one
// after the other must be granted in that order: the third's draw used to
// tie with the second's (the node the second missed was one behind), and
// the tie was broken at random.
func TestKinds_fairOrderWithCountersAheadOfTheClocks(t *testing.T) {
	c := newCluster(t, 3)
	ahead := fmt.Sprint(time.Now().Add(time.Hour).UnixMicro())
	for _, s := range c.servers {
		if err := s.Set("{turn}:tickets", ahead); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := mustTryAcquire(t, c.client(t), ctx, "turn", time.Minute, redlock.Fair())
	redlock.WaitSettled(holder)

	order := make(chan int, 3)
	tickets := make([]uint64, 3)
	queued := func(n int) func() bool {
		return func() bool {
			for _, k := range queueSizes(c, "turn") {
				if k >= n {
					return true
				}
			}
			return false
		}
	}
	// Each waiter its own process, its nodes identified before any node
	// closes (an embedded node closing while it answers INFO can crash).
	owns := separateClients(t, c, 3, redlock.WithNodeTimeout(200*time.Millisecond),
		redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 5*time.Millisecond)))
	for i, down := range []int{2, 0, 1} {
		c.servers[down].Close()
		own := owns[i]
		go func() {
			l, err := own.Acquire(ctx, "turn", time.Minute, redlock.Fair())
			if err != nil {
				return
			}
			tickets[i] = l.Ticket()
			order <- i
			_ = l.Release(context.Background())
		}()
		waitFor(t, fmt.Sprintf("waiter %d to queue", i), queued(i+1))
		c.restart(t, down)
	}
	mustRelease(t, holder)
	var got []int
	for range 3 {
		select {
		case i := <-order:
			got = append(got, i)
		case <-ctx.Done():
			t.Fatalf("granted %v, then nothing", got)
		}
	}
	if !slices.Equal(got, []int{0, 1, 2}) || tickets[0] >= tickets[1] || tickets[1] >= tickets[2] {
		t.Fatalf("granted in the order %v, tickets %v: want 0, 1, 2, each ticket above the one before", got, tickets)
	}
}

// TestKinds_fairWaiterDisappears: a queued waiter that stopped trying holds
// the queue up only until its place lapses.
func TestKinds_fairWaiterDisappears(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t, redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 5*time.Millisecond)))
	ctx := context.Background()
	// A ghost waiter with the first ticket, whose last attempt on each node
	// was long ago: its place lapses 300 ms from now.
	lapse := float64(time.Now().Add(300 * time.Millisecond).UnixMilli())
	for _, s := range c.servers {
		if _, err := s.ZAdd("{turn}:queue", 0, "ghost"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ZAdd("{turn}:queue-deadlines", lapse, "ghost"); err != nil {
			t.Fatal(err)
		}
	}
	_, err := rc.TryAcquire(ctx, "turn", time.Minute, redlock.Fair())
	mustNotAcquireKind(t, "behind the ghost", err)
	start := time.Now()
	l, err := rc.Acquire(ctx, "turn", time.Minute, redlock.Fair())
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("waited %v behind a waiter that was gone", waited)
	}
	mustRelease(t, l)
}

// TestKinds_fairTicketRetried: an Acquire whose ticket misses its quorum
// (a majority down) draws it again until the nodes are back, as a failed
// attempt is tried again, rather than giving up.
func TestKinds_fairTicketRetried(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	rc := c.client(t, redlock.WithClock(clock), redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 5*time.Millisecond)))
	c.servers[0].Close()
	c.servers[1].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		var l *redlock.Lock
		if l, err = rc.Acquire(ctx, "turn", time.Minute, redlock.Fair()); err == nil {
			err = l.Release(ctx)
		}
	}()
	for range 3 { // three draws fail, each waiting its retry delay on the clock
		if waitersOr(t, clock, 1, done) {
			t.Fatalf("Acquire returned while a majority was down: %v", err)
		}
		clock.Advance(clock.nextWait())
	}
	for i := range 2 {
		c.restart(t, i)
	}
	for !waitersOr(t, clock, 1, done) {
		clock.Advance(clock.nextWait())
	}
	if err != nil {
		t.Fatalf("Acquire once the nodes were back: %v", err)
	}
}

func TestKinds_fairGivingUpLeavesTheQueue(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	holder := mustTryAcquire(t, rc, ctx, "turn", time.Minute, redlock.Fair())
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := rc.Acquire(wctx, "turn", time.Minute, redlock.Fair())
	mustNotAcquireKind(t, "waiter", err)
	if got := queueSizes(c, "turn"); slices.Max(got) != 0 {
		t.Fatalf("queue sizes %v after the waiter gave up, want none", got)
	}
	mustRelease(t, holder)
}

func TestSemaphoreQuorum(t *testing.T) {
	for _, tc := range []struct{ n, permits, want int }{
		{1, 1, 1}, {3, 1, 2}, {5, 1, 3}, {3, 2, 3}, {5, 2, 4}, {7, 2, 5}, {5, 4, 5}, {5, 10, 5},
	} {
		c := newCluster(t, tc.n)
		rc := c.client(t)
		ctx := context.Background()
		// Block all but q-1 nodes... instead: count how many nodes the
		// permit needs by taking nodes away one by one.
		needed := 0
		for down := 0; down <= tc.n; down++ {
			for i, s := range c.servers {
				if i < down {
					s.Set("{pool}:permits", strconv.Itoa(tc.permits+1)) // refuses: another K
				}
			}
			l, err := rc.TryAcquire(ctx, "pool", time.Minute, redlock.WithPermits(tc.permits))
			if err != nil {
				needed = tc.n - down + 1
				break
			}
			mustRelease(t, l)
		}
		if needed != tc.want {
			t.Errorf("N=%d, K=%d: a permit needs %d nodes, want %d", tc.n, tc.permits, needed, tc.want)
		}
	}
}

// blocker puts another holder of a lock of some kind on one node.
type kindCase struct {
	name    string
	acquire func(rc *redlock.Client) (*redlock.Lock, error)
	block   func(s *miniredis.Miniredis)
	quorum  func(n int) int
}

func kindCases() []kindCase {
	ctx := context.Background()
	major := func(n int) int { return n/2 + 1 }
	far := float64(time.Now().Add(time.Hour).UnixMilli())
	return []kindCase{
		{"plain", func(rc *redlock.Client) (*redlock.Lock, error) { return rc.TryAcquire(ctx, "k", time.Minute) },
			func(s *miniredis.Miniredis) { s.Set("k", "other") }, major},
		{"reentrant", func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.TryAcquire(ctx, "k", time.Minute, redlock.WithOwner("me"))
		}, func(s *miniredis.Miniredis) { s.HSet("k", "other", "1") }, major},
		{"reader", func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.TryAcquire(ctx, "k", time.Minute, redlock.ForRead())
		}, func(s *miniredis.Miniredis) { s.Set("k", "writer") }, major},
		{"writer", func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.TryAcquire(ctx, "k", time.Minute, redlock.ForWrite())
		}, func(s *miniredis.Miniredis) { s.Set("k", "writer") }, major},
		{"semaphore K=1", func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.TryAcquire(ctx, "k", time.Minute, redlock.WithPermits(1))
		}, func(s *miniredis.Miniredis) { s.ZAdd("k", far, "other") }, major},
		{"semaphore K=2", func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.TryAcquire(ctx, "k", time.Minute, redlock.WithPermits(2))
		}, func(s *miniredis.Miniredis) { s.ZAdd("k", far, "other1"); s.ZAdd("k", far, "other2") }, func(n int) int { return 2*n/3 + 1 }},
		{"multi-key", func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.TryAcquireAll(ctx, []string{"j", "k"}, time.Minute)
		}, func(s *miniredis.Miniredis) { s.Set("k", "other") }, major},
		{"fair", func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.TryAcquire(ctx, "k", time.Minute, redlock.Fair())
		}, func(s *miniredis.Miniredis) { s.Set("k", "other") }, major},
	}
}

// dump is a node's keys and values, its fair-lock ticket counter aside (a
// ticket is drawn for good, like a fencing token).
func dump(s *miniredis.Miniredis) string {
	var out []string
	skip := false
	for _, line := range strings.Split(s.Dump(), "\n") {
		if !strings.HasPrefix(line, " ") {
			skip = line == "- {k}:tickets"
		}
		if !skip {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestKinds_everyBitmask: for every set of nodes where another holder sits,
// each kind is acquired exactly when enough nodes are free for its quorum,
// and a refused attempt leaves every node as it found it.
func TestKinds_everyBitmask(t *testing.T) {
	const n = 5
	for _, kc := range kindCases() {
		t.Run(kc.name, func(t *testing.T) {
			for mask := range 1 << n {
				c := newCluster(t, n)
				rc := c.client(t)
				free := n
				for i, s := range c.servers {
					if mask&(1<<i) != 0 {
						kc.block(s)
						free--
					}
				}
				before := make([]string, n)
				for i, s := range c.servers {
					before[i] = dump(s)
				}
				l, err := kc.acquire(rc)
				want := free >= kc.quorum(n)
				if (err == nil) != want {
					t.Fatalf("mask %05b (%d free): err = %v, want acquired = %v", mask, free, err, want)
				}
				if err == nil {
					mustRelease(t, l)
				}
				waitIdle(t, rc) // the cleanup of nodes not waited for goes on in the background
				for i, s := range c.servers {
					if got := dump(s); got != before[i] {
						t.Fatalf("mask %05b: node %d was\n%s\nand is\n%s", mask, i, before[i], got)
					}
				}
			}
		})
	}
}

// TestKinds_leases: every kind has what a plain lock has: a fencing token,
// Extend, Done, automatic renewal.
func TestKinds_leases(t *testing.T) {
	ctx := context.Background()
	lease := []redlock.AcquireOption{redlock.WithFencing(), redlock.WithAutoRenew()}
	for name, acquire := range map[string]func(rc *redlock.Client) (*redlock.Lock, error){
		"reentrant": func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.Acquire(ctx, "k", time.Minute, append(lease, redlock.WithOwner("me"))...)
		},
		"reader": func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.Acquire(ctx, "k", time.Minute, append(lease, redlock.ForRead())...)
		},
		"writer": func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.Acquire(ctx, "k", time.Minute, append(lease, redlock.ForWrite())...)
		},
		"semaphore": func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.Acquire(ctx, "k", time.Minute, append(lease, redlock.WithPermits(3))...)
		},
		"multi-key": func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.AcquireAll(ctx, []string{"j", "k"}, time.Minute, lease...)
		},
		"fair": func(rc *redlock.Client) (*redlock.Lock, error) {
			return rc.Acquire(ctx, "k", time.Minute, append(lease, redlock.Fair())...)
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, 3)
			rc := c.client(t)
			first, err := acquire(rc)
			if err != nil {
				t.Fatal(err)
			}
			if first.FencingToken() == 0 {
				t.Fatal("no fencing token")
			}
			if err := first.Extend(ctx, 2*time.Minute); err != nil {
				t.Fatalf("Extend: %v", err)
			}
			if !isOpen(first.Done()) {
				t.Fatal("Done closed while held")
			}
			mustRelease(t, first)
			if !closed(first.Done()) {
				t.Fatal("Done open after Release")
			}
			second, err := acquire(rc)
			if err != nil {
				t.Fatal(err)
			}
			if second.FencingToken() <= first.FencingToken() {
				t.Fatalf("fencing token %d after %d", second.FencingToken(), first.FencingToken())
			}
			mustRelease(t, second)
			redlock.WaitSettled(second)
			// The counters (fencing, tickets) expire once the nodes'
			// clocks have passed them, a lock's ttl (a minute) later at the
			// most; nothing is left past that.
			const keep = time.Minute + 5*time.Millisecond
			for i, s := range c.servers {
				counters := 0
				for _, key := range s.Keys() {
					if !strings.HasSuffix(key, ":fence") && !strings.HasSuffix(key, ":tickets") {
						continue
					}
					counters++
					if ttl := s.TTL(key); ttl <= 0 || ttl > keep {
						t.Errorf("node %d: counter %q expires in %v, want within the lock's ttl (%v)", i, key, ttl, keep)
					}
				}
				if counters == 0 {
					t.Errorf("node %d: no counter after fenced locks", i)
				}
				s.FastForward(keep)
				if left := s.Keys(); len(left) != 0 {
					t.Errorf("node %d keeps %v past the lock's ttl", i, left)
				}
			}
		})
	}
}

// TestKinds_multiKeyFencing_everyKeyRises: a fenced lock on several keys
// leaves every key's counter at or above its token on the nodes, so the next
// holder of any one of the keys gets a higher token, and the multi-key
// holder's late write is refused by the resource.
func TestKinds_multiKeyFencing_everyKeyRises(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	ctx := context.Background()
	fenced := redlock.WithFencing()
	for range 5 { // a's counter runs ahead of b's
		mustRelease(t, mustTryAcquire(t, rc, ctx, "a", time.Minute, fenced))
	}
	ab, err := rc.TryAcquireAll(ctx, []string{"a", "b"}, time.Minute, fenced)
	if err != nil {
		t.Fatal(err)
	}
	redlock.WaitSettled(ab)
	for i, s := range c.servers {
		for _, k := range []string{"a", "b"} {
			if got := fenceOf(t, s, k); got < int64(ab.FencingToken()) {
				t.Errorf("node %d: %s's counter %d, below the multi-key token %d", i, k, got, ab.FencingToken())
			}
		}
	}
	mustRelease(t, ab)

	b := mustTryAcquire(t, rc, ctx, "b", time.Minute, fenced)
	defer mustRelease(t, b)
	if b.FencingToken() <= ab.FencingToken() {
		t.Fatalf("b's next holder got token %d, not above the multi-key holder's %d", b.FencingToken(), ab.FencingToken())
	}
	resource := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { _ = resource.Close() })
	if err := redlock.FencedSet(ctx, resource, "b", "current", b.FencingToken()); err != nil {
		t.Fatal(err)
	}
	if err := redlock.FencedSet(ctx, resource, "b", "stale", ab.FencingToken()); !errors.Is(err, redlock.ErrStaleToken) {
		t.Fatalf("the multi-key holder's late write: err = %v, want ErrStaleToken", err)
	}
}

// kindHold is one way to hold key "k", for the matrix of kinds.
type kindHold struct {
	name    string
	acquire func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error)
	// shares is the set of holds that may hold "k" at the same time as this
	// one: readers with readers, permits with permits, an owner with itself.
	shares string
}

func kindHolds() []kindHold {
	one := func(opts ...redlock.AcquireOption) func(context.Context, *redlock.Client) (*redlock.Lock, error) {
		return func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error) {
			return rc.TryAcquire(ctx, "k", time.Minute, opts...)
		}
	}
	return []kindHold{
		{"plain", one(), ""},
		{"plain fenced", one(redlock.WithFencing()), ""},
		{"reentrant owner a", one(redlock.WithOwner("a")), "owner a"},
		{"reentrant owner b", one(redlock.WithOwner("b")), "owner b"},
		{"reader", one(redlock.ForRead()), "readers"},
		{"reader fenced", one(redlock.ForRead(), redlock.WithFencing()), "readers"},
		{"writer", one(redlock.ForWrite()), ""},
		{"semaphore", one(redlock.WithPermits(3)), "permits"},
		{"multi-key", func(ctx context.Context, rc *redlock.Client) (*redlock.Lock, error) {
			return rc.TryAcquireAll(ctx, []string{"j", "k"}, time.Minute)
		}, ""},
		{"fair", one(redlock.Fair()), ""},
	}
}

// TestKinds_matrix: while a lock of one kind holds a key, a lock of another
// kind on it is refused, as held by another; only readers with readers,
// permits with permits and an owner with itself share it. The refused
// attempt leaves the holder as it was, and once the holder is released the
// other kind gets the key.
func TestKinds_matrix(t *testing.T) {
	ctx := context.Background()
	for _, first := range kindHolds() {
		for _, second := range kindHolds() {
			t.Run(first.name+" then "+second.name, func(t *testing.T) {
				c := newCluster(t, 3)
				rc := c.client(t)
				held, err := first.acquire(ctx, rc)
				if err != nil {
					t.Fatal(err)
				}
				redlock.WaitSettled(held)
				other, err := second.acquire(ctx, mustNew(t, c.connect(t)))
				if shared := first.shares != "" && first.shares == second.shares; shared {
					if err != nil {
						t.Fatalf("refused while it may share the key: %v", err)
					}
					mustRelease(t, other)
				} else {
					if err == nil {
						t.Fatalf("granted while %s holds the key", first.name)
					}
					mustNotAcquire(t, err)
					var ne *redlock.NodeError
					if errors.As(err, &ne) {
						t.Fatalf("refused with a node error, not as held: %v", err)
					}
				}
				if err := held.Extend(ctx, time.Minute); err != nil {
					t.Fatalf("the first holder lost its lock: %v", err)
				}
				mustRelease(t, held)
				again, err := second.acquire(ctx, mustNew(t, c.connect(t)))
				if err != nil {
					t.Fatalf("refused once the key is free: %v", err)
				}
				mustRelease(t, again)
			})
		}
	}
}

// failedAttempt makes the first attempt of a fair Acquire after it is
// armed fail although it takes the key: it waits until start is closed,
// then the answers of the nodes that lose are lost. The Acquire's later
// attempts wait until gate is closed.
type failedAttempt struct {
	script scriptHook
	state  *attemptState
	lose   bool // this node's answer is lost
}

type attemptState struct {
	armed atomic.Bool
	mu    sync.Mutex
	token string // the failing attempt's
	start chan struct{}
	gate  chan struct{}
}

func (h failedAttempt) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h failedAttempt) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if !h.state.armed.Load() || len(args) < 5 || (args[1] != h.script.sha && args[1] != h.script.body) {
			return next(ctx, cmd)
		}
		numKeys, _ := args[2].(int)
		op, _ := args[3+numKeys].(string)
		token, _ := args[4+numKeys].(string)
		if op != "acquire" {
			return next(ctx, cmd)
		}
		h.state.mu.Lock()
		if h.state.token == "" {
			h.state.token = token
		}
		failing := h.state.token == token
		h.state.mu.Unlock()
		if !failing {
			select {
			case <-h.state.gate:
			case <-ctx.Done():
				return ctx.Err()
			}
			return next(ctx, cmd)
		}
		select {
		case <-h.state.start:
		case <-ctx.Done():
			return ctx.Err()
		}
		err := next(ctx, cmd)
		// The acquire's reply is {1, counter} where it took the key.
		if took, _ := cmd.(*redis.Cmd).Int64Slice(); err == nil && len(took) > 0 && took[0] == 1 && h.lose {
			cmd.SetErr(errors.New("connection reset: the answer was lost"))
			return cmd.Err()
		}
		return err
	}
}

func (h failedAttempt) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestKinds_fairFailedAttemptKeepsItsPlace: a fair waiter whose attempt
// took the key on nodes but failed (their answers were lost) keeps its place
// in the queue there: a waiter with a higher ticket does not get ahead of it
// before it tries again.
func TestKinds_fairFailedAttemptKeepsItsPlace(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	ctx := context.Background()
	fair := redlock.Fair()
	holder := mustTryAcquire(t, c.client(t), ctx, "turn", time.Minute, fair)

	state := &attemptState{start: make(chan struct{}), gate: make(chan struct{})}
	firstNodes := c.connect(t)
	for i, rdb := range firstNodes {
		addHook(t, rdb, failedAttempt{script: newScriptHook(t, "kind_fair.lua", nil), state: state, lose: i < 2})
	}
	first := mustNew(t, firstNodes, redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 2*time.Millisecond)))
	second := mustNew(t, c.connect(t), redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 2*time.Millisecond)))

	firstDone := acquireAndRelease(t, first, ctx, "turn", fair)
	waitFor(t, "the first waiter to queue", func() bool { return slices.Equal(queueSizes(c, "turn"), []int{1, 1, 1}) })
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	secondDone := acquireAndRelease(t, second, sctx, "turn", fair)
	waitFor(t, "the second waiter to queue", func() bool { return slices.Equal(queueSizes(c, "turn"), []int{2, 2, 2}) })

	state.armed.Store(true)
	// An attempt of the first waiter that passed the hook before it was
	// armed is refused (the holder still holds): the failing attempt is
	// the next one, held at the start until the holder has released.
	waitFor(t, "the first waiter's next attempt", func() bool {
		state.mu.Lock()
		defer state.mu.Unlock()
		return state.token != ""
	})
	mustRelease(t, holder)
	close(state.start)
	// The first waiter's attempt takes the key on every node and fails, and
	// its next ones wait at the gate.
	// The second, behind it in every queue, must not get the lock; give it
	// time to try (it tries every 2 ms at most).
	select {
	case err := <-secondDone:
		t.Fatalf("the second waiter returned (%v) while the first, ahead of it, was still trying", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(state.gate)
	if err := <-firstDone; err != nil {
		t.Fatalf("first waiter: %v", err)
	}
	if err := <-secondDone; err != nil {
		t.Fatalf("second waiter: %v", err)
	}
}

// TestKinds_fairPatienceOutlastsAnAttempt: a waiter's place on a node lasts
// longer than its calls may take between two attempts, however long the
// node timeout: 4 s, or 8 node timeouts when that is longer.
func TestKinds_fairPatienceOutlastsAnAttempt(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	for _, tt := range []struct {
		nodeTimeout time.Duration
		want        int64 // ms
	}{
		{100 * time.Millisecond, 4000},
		{time.Second, 8000},
		{5 * time.Second, 40000},
	} {
		c := newCluster(t, 3)
		var (
			mu       sync.Mutex
			patience []int64
		)
		seen := newScriptHook(t, "kind_fair.lua", nil)
		for _, rdb := range c.clients {
			addHook(t, rdb, argvHook{script: seen, argv: func(argv []any) {
				if argv[0] == "acquire" {
					p, _ := strconv.ParseInt(fmt.Sprint(argv[6]), 10, 64)
					mu.Lock()
					patience = append(patience, p)
					mu.Unlock()
				}
			}})
		}
		rc := c.client(t, redlock.WithNodeTimeout(tt.nodeTimeout))
		// tried until acquired: a loaded machine may keep the first
		// attempt from a node timeout of 100 ms
		mustRelease(t, acquireSoon(t, rc, "turn", time.Minute, redlock.Fair()))
		mu.Lock()
		if len(patience) == 0 || slices.ContainsFunc(patience, func(p int64) bool { return p != tt.want }) {
			t.Errorf("node timeout %v: the acquires gave a patience of %v ms, want %d", tt.nodeTimeout, patience, tt.want)
		}
		mu.Unlock()
	}
}

// argvHook shows argv each ARGV of each run of its script.
type argvHook struct {
	script scriptHook
	argv   func([]any)
}

func (h argvHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h argvHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 3 && (args[1] == h.script.sha || args[1] == h.script.body) {
			numKeys, _ := args[2].(int)
			h.argv(args[3+numKeys:])
		}
		return next(ctx, cmd)
	}
}

func (h argvHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// opHook runs each of its script's calls through do, given the ARGV[1]
// (the operation) and the call.
type opHook struct {
	script scriptHook
	do     func(ctx context.Context, op string, call func() error) error
}

func (h opHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h opHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 4 || (args[1] != h.script.sha && args[1] != h.script.body) {
			return next(ctx, cmd)
		}
		numKeys, _ := args[2].(int)
		op, _ := args[3+numKeys].(string)
		return h.do(ctx, op, func() error { return next(ctx, cmd) })
	}
}

func (h opHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestKinds_fairGivingUpAfterALateAttempt: a fair waiter that gives up
// leaves the queue after its last attempt's cleanup, not before it. Node 0
// takes the key for the attempt but answers too late; the cleanup there
// (which puts the waiter back in line, as after any attempt that took the
// key) is slow; the leave must land after it, or the waiter that gave up
// would hold the queue there for its patience.
func TestKinds_fairGivingUpAfterALateAttempt(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	for _, s := range c.servers[1:] {
		s.Set("turn", "another holder") // nodes 1 and 2 are taken
	}
	nodes := c.connect(t)
	landed := make(chan string, 4)
	addHook(t, nodes[0], opHook{script: newScriptHook(t, "kind_fair.lua", nil), do: func(ctx context.Context, op string, call func() error) error {
		switch op {
		case "acquire":
			err := call()
			<-ctx.Done() // the answer comes after the node timeout
			time.Sleep(10 * time.Millisecond)
			return err
		case "drop":
			time.Sleep(30 * time.Millisecond)
		case "leave":
		default:
			return call()
		}
		err := call()
		landed <- op
		return err
	}})
	// Connected first, and a node timeout a loaded machine keeps: a ticket
	// not drawn sends no acquire at all.
	for _, rdb := range nodes {
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	rc := mustNew(t, nodes, redlock.WithBatching(false), redlock.WithNodeTimeout(2*time.Second))
	if _, err := rc.TryAcquire(context.Background(), "turn", time.Minute, redlock.Fair()); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire: %v, want ErrNotAcquired", err)
	}
	var order []string
	for len(order) < 2 {
		select {
		case op := <-landed:
			order = append(order, op)
		case <-time.After(10 * time.Second):
			t.Fatalf("node 0 saw %v; want a drop and a leave", order)
		}
	}
	if !slices.Equal(order, []string{"drop", "leave"}) {
		t.Fatalf("node 0 ran %v, want the drop, then the leave", order)
	}
	if n := queueSizes(c, "turn"); n[0] != 0 || c.servers[0].Exists("turn") {
		t.Fatalf("the waiter that gave up is still in node 0's queue (%d) or holds its key", n[0])
	}
}

// acquireAndRelease acquires key (for a minute) in a goroutine and releases
// it at once; the channel gets Acquire's error.
func acquireAndRelease(t *testing.T, rc *redlock.Client, ctx context.Context, key string, opts ...redlock.AcquireOption) <-chan error {
	done := make(chan error, 1)
	go func() {
		l, err := rc.Acquire(ctx, key, time.Minute, opts...)
		if err == nil {
			mustRelease(t, l)
		}
		done <- err
	}()
	return done
}

// TestKinds_writeAndMultiTakeTurns: the goroutines of one Client that want
// a write lock, or a multi-key lock on the same keys, wait for it in a
// local queue rather than collide on the nodes: about one attempt per
// critical section, never two holders at once; readers do not queue.
func TestKinds_writeAndMultiTakeTurns(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  redlock.AcquireOption
	}{
		{"write", redlock.ForWrite()},
		{"multi-key", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const goroutines, sections = 8, 5
			c := newCluster(t, 3)
			var attempts, acquires atomic.Int64
			rc := c.client(t, redlock.WithObserver(redlock.ObserverFunc(func(_ context.Context, e redlock.Event) {
				if e.Op == redlock.OpAcquire && e.Err == nil {
					attempts.Add(int64(e.Attempts))
					acquires.Add(1)
				}
			})))
			ctx := context.Background()
			var inside, overlaps atomic.Int32
			var wg sync.WaitGroup
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range sections {
						var l *redlock.Lock
						var err error
						if tc.opt == nil {
							l, err = rc.AcquireAll(ctx, []string{"{doc}:a", "{doc}:b"}, 10*time.Second)
						} else {
							l, err = rc.Acquire(ctx, "{doc}:a", 10*time.Second, tc.opt)
						}
						if err != nil {
							t.Error(err)
							return
						}
						if inside.Add(1) > 1 {
							overlaps.Add(1)
						}
						time.Sleep(time.Millisecond)
						inside.Add(-1)
						if err := l.Release(ctx); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			wg.Wait()
			if overlaps.Load() > 0 {
				t.Fatalf("%d overlapping critical sections", overlaps.Load())
			}
			if n := acquires.Load(); n != goroutines*sections {
				t.Fatalf("%d acquires observed, want %d", n, goroutines*sections)
			}
			if per := float64(attempts.Load()) / float64(goroutines*sections); per > 1.5 {
				t.Fatalf("%.2f attempts per critical section, want about 1 (local turns)", per)
			}
		})
	}
}

// sortedSet copies a sorted set of s, member by member under s's lock
// (miniredis's SortedSet hands out its own map, which a script running
// meanwhile writes to).
func sortedSet(s *miniredis.Miniredis, key string) (map[string]float64, error) {
	members, err := s.ZMembers(key)
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64, len(members))
	for _, m := range members {
		if out[m], err = s.ZScore(key, m); err != nil {
			return nil, err
		}
	}
	return out, nil
}
