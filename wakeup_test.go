package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/leaktest"
)

// subscribedChannels returns how many release channels each node has a
// subscriber on.
func (c *cluster) subscribedChannels() []int {
	n := make([]int, len(c.servers))
	for i, s := range c.servers {
		n[i] = len(s.PubSubChannels("*:released"))
	}
	return n
}

// ownChannels counts, by node, the channels of waiters' own (where a
// release names one first in line) that have a subscriber.
func (c *cluster) ownChannels() []int {
	n := make([]int, len(c.servers))
	for i, s := range c.servers {
		n[i] = len(s.PubSubChannels("*:released:*"))
	}
	return n
}

// clientGoroutines counts the goroutines of the process that are not the
// embedded nodes' (a miniredis node runs a few per connection).
func clientGoroutines() int {
	count := 0
	for _, g := range leaktest.Stacks() {
		if !strings.Contains(g, "alicebob/miniredis") {
			count++
		}
	}
	return count
}

// mustGetAndRelease waits up to 10 s for a waiting Acquire's lock, fails
// with missed if it does not come, and releases it.
func mustGetAndRelease(t *testing.T, got <-chan acquired, missed string) {
	t.Helper()
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatalf("Acquire: %v", a.err)
		}
		mustRelease(t, a.lock)
	case <-time.After(10 * time.Second):
		t.Fatal(missed)
	}
}

// lineSize counts the waiters in key's lines on every node.
func (c *cluster) lineSize(key string) int {
	n := 0
	for _, s := range c.servers {
		members, _ := s.ZMembers("{" + key + "}:line")
		n += len(members)
	}
	return n
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// TestWaiters_shareOneConnectionPerNode: the waiting Acquires of a Client
// share one pub/sub connection per node, spread over the nodes, with no
// goroutine of their own; every one of them is woken by its release, not
// by its retry timer: their wait after the first refusal is a minute, so
// a waiter that missed its release would still wait when the test gives
// up (30 s). (After a wake-up they retry soon: a woken waiter may find
// the release not yet landed on a quorum.)
func TestWaiters_shareOneConnectionPerNode(t *testing.T) {
	const waiters = 60
	c := newCluster(t, 3)
	holder := c.client(t)
	ctx := context.Background()
	var held []*redlock.Lock
	for i := range waiters {
		held = append(held, mustTryAcquire(t, holder, ctx, fmt.Sprintf("job-%d", i), time.Minute))
	}
	waitIdle(t, holder)
	// Another process's Client: connections of its own.
	rc := mustNew(t, c.connect(t), redlock.WithRetry(redlock.RetryFunc(func(failed int) time.Duration {
		if failed == 1 {
			return time.Minute
		}
		return 20 * time.Millisecond
	})))
	before := clientGoroutines()
	var (
		wg       sync.WaitGroup
		acquired = make([]time.Time, waiters) // by key
	)
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lock, err := rc.Acquire(actx, fmt.Sprintf("job-%d", i), time.Minute)
			if err != nil {
				t.Errorf("Acquire job-%d: %v", i, err)
				return
			}
			acquired[i] = time.Now()
			_ = lock.Release(ctx)
		}()
	}
	waitFor(t, "every waiter to subscribe", func() bool { return sum(c.subscribedChannels()) == waiters })
	// Spread over the nodes: each listens on one of the nodes that refused
	// it, chosen by its key. (A node slower than the others' answers and
	// their grace, as on a loaded machine, refuses nobody in time and is
	// listened on by none: so at least two nodes, and none with most.)
	perNode := c.subscribedChannels()
	used := 0
	for _, n := range perNode {
		if n > 0 {
			used++
		}
	}
	if used < 2 || slices.Max(perNode) > waiters*3/4 {
		t.Errorf("waiters not spread over the nodes: %v channels by node", perNode)
	}
	for i := range perNode {
		// The waiters' pub/sub connection, the holder's and the waiters'
		// pools (a few each), the test's own: far from one per waiter.
		if conns := c.servers[i].CurrentConnectionCount(); conns > 12 {
			t.Errorf("node %d has %d connections with %d waiters", i, conns, waiters)
		}
	}
	// The waiters' own goroutines, and a few for the Client's subscribers
	// (with rueidis, a dedicated connection's goroutines too).
	extra := clientGoroutines() - before - waiters
	t.Logf("%d waiters: %d goroutines beyond their own", waiters, extra)
	if limit := map[string]int{"go-redis": 15, "rueidis": 27}[testTransport]; extra > limit {
		t.Errorf("%d waiters cost %d goroutines beyond their own", waiters, extra)
	}
	for _, l := range held {
		mustRelease(t, l)
	}
	wg.Wait()
	for i, at := range acquired {
		if at.IsZero() {
			t.Errorf("job-%d was not acquired within 30 s of its release: its wake-up was missed", i)
		}
	}
	waitFor(t, "the waiters' subscriptions to end", func() bool { return sum(c.subscribedChannels()) == 0 })
}

// TestWaiters_pollAboutOncePerSecond: once subscribed to the release, an
// Acquire with the default policy tries at most about once a second while
// the holder holds. Its waits are on a fake clock, moved 3 s in all from
// wait to wait.
func TestWaiters_pollAboutOncePerSecond(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	held := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	defer mustRelease(t, held)
	// The waiter's attempts, as its Acquire reports them when it returns
	// (counting the nodes' commands would count its other calls too: its
	// place in line, its subscription's checks).
	attempts, counting := countAttempts()
	clock := fakeClock()
	rc := mustNew(t, c.connect(t), counting, redlock.WithClock(clock))
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := rc.Acquire(actx, "k", time.Minute)
		done <- err
	}()
	waitFor(t, "the waiter to subscribe", func() bool { return sum(c.subscribedChannels()) == 1 })
	for moved := time.Duration(0); ; {
		waiters(t, clock, 1) // the waiter waits before its next attempt
		d := clock.nextWait()
		if moved+d > 3*time.Second {
			break
		}
		clock.Advance(d)
		moved += d
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("Acquire succeeded while another held the lock")
	}
	// The first attempt, one more once subscribed (a release before the
	// subscription was not heard), then about one a second; the default
	// policy alone would try about 10 times in 3 s.
	if n := attempts.Load(); n > 5 {
		t.Fatalf("%d attempts, 3 s of them subscribed; want at most 5", n)
	}
	waitFor(t, "the waiter's subscription to end", func() bool { return sum(c.subscribedChannels()) == 0 })
}

// TestWithRetry_givenPolicyIsFollowed: a policy given with WithRetry is
// followed while the waiter is subscribed, even one equal to the default:
// only the default policy gets the one-attempt-a-second floor. (An
// explicit ExponentialBackoff(10ms, 320ms) used to be taken for the
// default.)
func TestWithRetry_givenPolicyIsFollowed(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	held := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	defer mustRelease(t, held)
	attempts, counting := countAttempts()
	rc := mustNew(t, c.connect(t), counting)
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := rc.Acquire(actx, "k", time.Minute, redlock.WithRetry(redlock.ExponentialBackoff(10*time.Millisecond, 320*time.Millisecond)))
	mustNotAcquire(t, err)
	// 10, 20, 40, 80, 160, then 320 ms (with their random part): about a
	// dozen in 3 s; the default's floor allows 5.
	if n := attempts.Load(); n < 8 {
		t.Fatalf("%d attempts in 3 s with ExponentialBackoff(10ms, 320ms) given, want the policy's (at least 8)", n)
	}
}

// TestWaiters_oneChannelWhileOneWaits: two waiting Acquires of one Client
// on one key subscribe to its channel once; the subscription stays while
// one of them still waits, and that one is woken by the release.
func TestWaiters_oneChannelWhileOneWaits(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	held := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	rc := mustNew(t, c.connect(t))
	// Two kinds on one key's channel: a bounded Acquire contends at once
	// (no local turn), so both subscribe.
	short, cancelShort := context.WithCancel(ctx)
	shortDone := make(chan error, 1)
	go func() {
		_, err := rc.Acquire(short, "k", time.Minute, redlock.WithMaxAttempts(1000))
		shortDone <- err
	}()
	// The waiter that stays retries after a minute: only the release's
	// announcement gets it the lock before its 30 s are up.
	long := make(chan error, 1)
	go func() {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		l, err := rc.Acquire(lctx, "k", time.Minute, redlock.WithMaxAttempts(1000),
			redlock.WithRetry(redlock.RetryFunc(func(int) time.Duration { return time.Minute })))
		if err == nil {
			err = l.Release(ctx)
		}
		long <- err
	}()
	// Both in line and listening, each on a channel of its own and on the
	// key's, which is one for the two when they listen on the same node
	// (they may not: an attempt stops at the first refusals that rule out
	// a quorum, and each listens on a node that refused it). A release
	// before the waiter that stays has subscribed would be missed, and
	// cost it its minute.
	waitFor(t, "the waiters to subscribe", func() bool {
		return sum(c.ownChannels()) == 2 && c.lineSize("k") == 2
	})
	shared := sum(c.subscribedChannels()) == 1
	cancelShort()
	if err := <-shortDone; err == nil {
		t.Fatal("the cancelled Acquire succeeded")
	}
	// The one that left unsubscribes its own channel; the key's stays
	// subscribed for the one that waits, whether they shared it or not.
	waitFor(t, "the waiter that left to unsubscribe", func() bool { return sum(c.ownChannels()) == 1 })
	if n := sum(c.subscribedChannels()); n != 1 {
		t.Fatalf("after one of two waiters left, %d key channels subscribed (shared before: %v), want 1", n, shared)
	}
	mustRelease(t, held)
	if err := <-long; err != nil {
		t.Fatalf("the waiter left: %v: not woken by the release", err)
	}
}

// TestWaiters_releaseWakesTheFirstInLine: with many processes (Clients)
// waiting for one key, each release wakes the first two waiters in the
// key's line, not all of them: the waiters take the lock one after another
// with one or two attempts each after the first release, not one per
// waiter per release.
func TestWaiters_releaseWakesTheFirstInLine(t *testing.T) {
	const waiters = 20
	c := newCluster(t, 3)
	holder := mustTryAcquire(t, c.client(t), context.Background(), "k", time.Minute)
	redlock.WaitSettled(holder)
	attempts, observer := countAttempts()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, waiters)
	for i := range waiters {
		rc := mustNew(t, c.connect(t), observer)
		go func() {
			l, err := rc.Acquire(ctx, "k", time.Minute)
			if err == nil {
				err = l.Release(context.Background())
			}
			done <- err
		}()
		waitFor(t, fmt.Sprintf("waiter %d in line", i), func() bool { return c.lineSize("k") == i+1 })
	}
	before := attempts.Load() // none: an Acquire reports its attempts when it returns
	start := time.Now()
	mustRelease(t, holder)
	for range waiters {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("the waiters did not all get the lock")
		}
	}
	// Each waiter made its first attempt, one right after it subscribed,
	// and one or two for each release that woke it (each wakes the first
	// two in line: the second loses to the first, and is first at the
	// next). Waking everyone took 124-204. A waiter also tries once a
	// second while subscribed: on a loaded machine, where the line takes
	// seconds, those attempts count too.
	polls := waiters * int(time.Since(start)/time.Second)
	if got, limit := attempts.Load()-before, 5*waiters+polls; got > int64(limit) {
		t.Fatalf("%d attempts for %d waiters in %v, want at most %d: a release woke more than the first in line", got, waiters, time.Since(start), limit)
	}
	// The last one's leave is sent without waiting for it.
	waitFor(t, "every waiter to leave the line", func() bool { return c.lineSize("k") == 0 })
}

// TestWaiters_hungFirstInLineHoldsUpNobody: the first waiter in line may
// have just given up, or hung with its connection open (its wake-up then
// still counts as received): the release also wakes the second, which
// takes the lock at once rather than at its retry timer.
func TestWaiters_hungFirstInLineHoldsUpNobody(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	held := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	// A waiter that listens and never acts, first in line on every node.
	for _, s := range c.servers {
		if _, err := s.ZAdd("{k}:line", 1, "hung"); err != nil {
			t.Fatal(err)
		}
	}
	for _, rdb := range c.connect(t) {
		sub := rdb.Subscribe(ctx, "{k}:released:hung")
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil { // the confirmation
			t.Fatal(err)
		}
	}
	rc := mustNew(t, c.connect(t))
	acquired := make(chan error, 1)
	go func() {
		l, err := rc.Acquire(ctx, "k", time.Minute)
		if err == nil {
			err = l.Release(ctx)
		}
		acquired <- err
	}()
	waitFor(t, "the waiter in line behind the hung one", func() bool { return c.lineSize("k") == 4 })
	released := time.Now()
	mustRelease(t, held)
	if err := <-acquired; err != nil {
		t.Fatal(err)
	}
	if d := time.Since(released); d > 900*time.Millisecond {
		t.Fatalf("the second in line acquired %v after the release: not woken by it", d)
	}
}

// TestWaiters_twoHungFirstInLineHoldUpOneReleaseAtMost: the first two in
// line listen and never act (their processes hang with the connections
// open). A release wakes them, and nobody else; the next release passes
// them over (woken, and not back in line since) and wakes the waiter
// behind them. It used to wake the same two at every release, and the
// waiters behind them heard none.
func TestWaiters_twoHungFirstInLineHoldUpOneReleaseAtMost(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := c.client(t)
	held := mustTryAcquire(t, holder, ctx, "k", time.Minute)
	for i, name := range []string{"hung-1", "hung-2"} {
		for _, s := range c.servers {
			if _, err := s.ZAdd("{k}:line", float64(i+1), name); err != nil {
				t.Fatal(err)
			}
		}
		for _, rdb := range c.connect(t) {
			sub := rdb.Subscribe(ctx, "{k}:released:"+name)
			defer sub.Close()
			if _, err := sub.Receive(ctx); err != nil { // the confirmation
				t.Fatal(err)
			}
		}
	}
	// The waiter's timer never fires: only a release it hears wakes it.
	nodes := c.connect(t)
	var scripts []*evalCount
	for _, rdb := range nodes {
		scripts = append(scripts, &evalCount{})
		addHook(t, rdb, scripts[len(scripts)-1])
	}
	rc := mustNew(t, nodes, redlock.WithClock(fakeClock()))
	got := make(chan acquired, 1)
	go func() {
		l, err := rc.Acquire(ctx, "k", time.Minute)
		got <- acquired{l, err}
	}()
	// In line, and done with its attempts: the first, and the one right
	// after it subscribed, 3 scripts each, and its join (a late attempt
	// could split the next holder's votes, and a release finding its key
	// on the node it listens on would announce nothing there).
	waitFor(t, "the waiter in line behind the hung ones", func() bool {
		n := int64(0)
		for _, sc := range scripts {
			n += sc.n.Load()
		}
		return c.lineSize("k") == 7 && n >= 7
	})

	// The first release wakes the two hung waiters only; another process
	// takes the key and releases it again.
	mustRelease(t, held)
	select {
	case a := <-got:
		t.Fatalf("the third in line was woken by the first release (err %v): it should have woken the first two", a.err)
	default:
	}
	again := mustTryAcquire(t, holder, ctx, "k", time.Minute)
	mustRelease(t, again)
	mustGetAndRelease(t, got, "the second release did not wake the waiter behind the two hung ones")
}

// breakableNode dials a node for a go-redis client and can make it refuse
// new connections, as a Redis node at its maxclients does, and cut the
// connection that subscribed to channels.
type breakableNode struct {
	mu     sync.Mutex
	refuse bool
	conns  []*watchedConn
}

// watchedConn notes whether it carried a SUBSCRIBE.
type watchedConn struct {
	net.Conn
	subscriber atomic.Bool
}

func (c *watchedConn) Write(b []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(b), []byte("subscribe")) {
		c.subscriber.Store(true)
	}
	return c.Conn.Write(b)
}

func (n *breakableNode) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.refuse {
		return nil, errors.New("ERR max number of clients reached")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	wc := &watchedConn{Conn: conn}
	n.conns = append(n.conns, wc)
	return wc, nil
}

// cutSubscriber refuses new connections from now on and closes those that
// subscribed; the others go on working.
func (n *breakableNode) cutSubscriber() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.refuse = true
	for _, c := range n.conns {
		if c.subscriber.Load() {
			_ = c.Conn.Close()
		}
	}
}

// TestWaiters_deadSubscriptionIsNotTrusted: the connection a waiter's
// subscription lives on is cut, and the node refuses new connections, while
// it still answers the lock's calls on the connections it has. The waiter
// must not go on believing it will hear the release there: it moves to a
// node that still tells it, and the release wakes it. (It used to keep its
// confirmed subscription and sleep out its subscribed poll, missing every
// release for as long as the node refused.)
func TestWaiters_deadSubscriptionIsNotTrusted(t *testing.T) {
	c := newCluster(t, 3)
	holder := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held := mustTryAcquire(t, holder, ctx, "k", time.Minute)
	waitIdle(t, holder)

	goRedisOnly(t, "it cuts a subscription through the go-redis client's dialer")
	dialers := make([]*breakableNode, len(c.addrs))
	nodes := make([]redis.UniversalClient, len(c.addrs))
	for i, addr := range c.addrs {
		dialers[i] = &breakableNode{}
		rdb := redis.NewClient(&redis.Options{Addr: addr, Dialer: dialers[i].dial, MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { _ = rdb.Close() })
		nodes[i] = rdb
	}
	clock := fakeClock()
	rc := mustNew(t, nodes, redlock.WithClock(clock))
	got := make(chan acquired, 1)
	go func() {
		l, err := rc.Acquire(ctx, "k", time.Minute)
		got <- acquired{l, err}
	}()
	// The waiter was refused, listens on one node and waits on the clock.
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	listening := -1
	for i, n := range c.subscribedChannels() {
		if n > 0 {
			listening = i
		}
	}
	if listening < 0 {
		t.Fatal("the waiter listens on no node")
	}
	dialers[listening].cutSubscriber()

	// The clock moves only when the waiter waits on it: each move is one
	// more refused attempt. Within a few, it must listen elsewhere.
	moved := func() bool {
		for i, n := range c.subscribedChannels() {
			if i != listening && n > 0 {
				return true
			}
		}
		return false
	}
	for round := 0; !moved(); round++ {
		if round == 50 {
			t.Fatalf("after 50 attempts the waiter still listens only on node %d, whose subscription is dead", listening)
		}
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clock.Advance(clock.nextWait())
		time.Sleep(10 * time.Millisecond) // the subscriber notices the cut
	}
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}

	// The release wakes it. Woken before the release has landed on a
	// quorum (a loaded machine), it is refused again and tries once more
	// soon after: those short waits are moved on; its timer (a second or
	// more while it listens) is not.
	mustRelease(t, held)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case a := <-got:
			if a.err != nil {
				t.Fatalf("Acquire: %v", a.err)
			}
			mustRelease(t, a.lock)
			return
		case <-time.After(10 * time.Millisecond):
		}
		if d := clock.nextWait(); d > 0 && d < time.Second/2 {
			clock.Advance(d)
		}
	}
	t.Fatal("the waiter did not hear the release (it waits for its timer, which does not move)")
}

// TestWaiters_idleSubscriberIsNotDeaf: a subscriber that closes its
// connection because nobody waits any more is not taken for one whose
// connection broke: later waiters still listen on its node. (The close
// used to mark it deaf for good, and every later waiter of the Client
// listened elsewhere.)
func TestWaiters_idleSubscriberIsNotDeaf(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	held := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	rc := mustNew(t, c.connect(t))
	got := make(chan acquired, 1)
	go func() {
		l, err := rc.Acquire(ctx, "k", time.Minute)
		got <- acquired{l, err}
	}()
	node := -1
	waitFor(t, "the waiter to listen", func() bool {
		for i := range c.servers {
			if running, _ := redlock.Subscriber(rc, i); running {
				node = i
				return true
			}
		}
		return false
	})
	mustRelease(t, held)
	mustRelease(t, mustGet(t, got))
	waitFor(t, "the subscriber to go idle", func() bool {
		running, _ := redlock.Subscriber(rc, node)
		return !running
	})
	for range 100 {
		if _, deaf := redlock.Subscriber(rc, node); deaf {
			t.Fatalf("node %d's subscriber is deaf after it closed its idle connection", node)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestWaiters_wokenBeforeTheReleaseLandsOnAQuorum: a release is announced
// by the first node to delete the key, and a waiter woken by it may find
// the other nodes still holding the key for the same holder. It tries
// again soon, rather than after its retry policy's delay (a minute here),
// and gets the lock once the release has landed on a quorum. It used to
// wait out the policy's delay.
func TestWaiters_wokenBeforeTheReleaseLandsOnAQuorum(t *testing.T) {
	c := newCluster(t, 3)
	nodes, links := lateNodes(t, c)
	holder := mustNew(t, nodes, redlock.WithNodeTimeout(5*time.Second))
	ctx := context.Background()
	const key = "woken-early-1" // its waiters listen on node 0 (see listenNode)
	held := mustTryAcquire(t, holder, ctx, key, time.Minute)
	redlock.WaitSettled(held)
	waiter := mustNew(t, c.connect(t), redlock.WithRetry(redlock.RetryFunc(func(int) time.Duration { return time.Minute })))
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got := make(chan acquired, 1)
	go func() {
		l, err := waiter.Acquire(wctx, key, time.Minute)
		got <- acquired{l, err}
	}()
	waitFor(t, "the waiter to subscribe", func() bool { return sum(c.subscribedChannels()) == 1 })
	if n := c.subscribedChannels(); n[0] != 1 {
		t.Fatalf("the waiter listens on nodes %v, want node 0 (pick another key)", n)
	}
	// Node 0 deletes the key and announces the release at once; nodes 1
	// and 2 delete it 300 ms later.
	links[1].setDelay(300 * time.Millisecond)
	links[2].setDelay(300 * time.Millisecond)
	mustRelease(t, held)
	a := <-got
	if a.err != nil {
		t.Fatalf("the waiter: %v (woken before the release landed on a quorum, it waited for its retry policy)", a.err)
	}
	mustRelease(t, a.lock)
}

// afterFirstScript runs fn once, after the first script call its client
// sends has its reply and before that reply is handed back: between an
// attempt's refusal on the node and the Acquire hearing of it.
type afterFirstScript struct {
	once sync.Once
	fn   func()
}

func (h *afterFirstScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *afterFirstScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.after([]redis.Cmder{cmd})
		return err
	}
}

func (h *afterFirstScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.after(cmds)
		return err
	}
}

func (h *afterFirstScript) after(cmds []redis.Cmder) {
	for _, cmd := range cmds {
		if name := cmd.Name(); name == "evalsha" || name == "eval" || name == "set" {
			h.once.Do(h.fn)
			return
		}
	}
}

// TestWaiters_releaseBeforeTheSubscriptionIsHeard: a release that lands
// after a waiting Acquire's first attempt was refused, and before its
// subscription to the release channel is confirmed, is announced to
// nobody. The waiter tries again once it has subscribed, and gets the
// lock, for every kind; it does not wait for its retry timer (its clock
// never moves: a waiter that relied on the timer would wait forever).
func TestWaiters_releaseBeforeTheSubscriptionIsHeard(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	ctx := context.Background()
	type acquireOn func(rc *redlock.Client, ctx context.Context) (*redlock.Lock, error)
	on := func(opts ...redlock.AcquireOption) acquireOn {
		return func(rc *redlock.Client, ctx context.Context) (*redlock.Lock, error) {
			return rc.Acquire(ctx, "k", time.Minute, opts...)
		}
	}
	all := func(rc *redlock.Client, ctx context.Context) (*redlock.Lock, error) {
		return rc.AcquireAll(ctx, []string{"k", "k2"}, time.Minute)
	}
	for _, tc := range []struct {
		name           string
		holder, waiter acquireOn
	}{
		{"plain", on(), on()},
		{"reentrant", on(redlock.WithOwner("a")), on(redlock.WithOwner("b"))},
		{"write after write", on(redlock.ForWrite()), on(redlock.ForWrite())},
		{"read after write", on(redlock.ForWrite()), on(redlock.ForRead())},
		{"write after read", on(redlock.ForRead()), on(redlock.ForWrite())},
		{"semaphore", on(redlock.WithPermits(1)), on(redlock.WithPermits(1))},
		{"multi-key", all, all},
		{"fair", on(redlock.Fair()), on(redlock.Fair())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 1)
			held, err := tc.holder(c.client(t), ctx)
			if err != nil {
				t.Fatalf("holder: %v", err)
			}
			nodes := c.connect(t)
			addHook(t, nodes[0], &afterFirstScript{fn: func() { mustRelease(t, held) }})
			rc := mustNew(t, nodes, redlock.WithClock(fakeClock()))
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			l, err := tc.waiter(rc, actx)
			if err != nil {
				t.Fatalf("the release came before the waiter subscribed, and it waits for its timer: %v", err)
			}
			mustRelease(t, l)
		})
	}
}

// evalCount counts the scripts its client ran: EVAL and EVALSHA that had
// their answer, but for a NOSCRIPT (the EVALSHA that is sent again as an
// EVAL is one script).
type evalCount struct{ n atomic.Int64 }

func (h *evalCount) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *evalCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count([]redis.Cmder{cmd})
		return err
	}
}

func (h *evalCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.count(cmds)
		return err
	}
}

func (h *evalCount) count(cmds []redis.Cmder) {
	for _, cmd := range cmds {
		name := cmd.Name()
		if err := cmd.Err(); (name == "evalsha" || name == "eval" || name == "set") && (err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT")) {
			h.n.Add(1)
		}
	}
}

// TestWaiters_readersFailedAttemptThatFreesTheKeyWakesTheWriter: a
// reader's attempt that took the key on one node only (there the readers
// had left and the waiting writer's mark had expired) is undone there, and
// that leaves the key free: the writer waiting on that node is told, as it
// is of a release. (Without it, the writer slept until its poll: 1 wait in
// 100 of a writer among 8 readers of one Client took over a second.)
func TestWaiters_readersFailedAttemptThatFreesTheKeyWakesTheWriter(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	ctx := context.Background()
	c := newCluster(t, 3)
	reader := c.client(t)
	held := mustTryAcquire(t, reader, ctx, "k", time.Minute, redlock.ForRead())
	defer func() { _ = held.Release(ctx) }()

	// The writer waits on a clock that never moves: only an announcement
	// makes it try again.
	clock := fakeClock()
	nodes := c.connect(t)
	calls := make([]*evalCount, len(nodes))
	for i, n := range nodes {
		calls[i] = &evalCount{}
		addHook(t, n, calls[i])
	}
	writer := mustNew(t, nodes, redlock.WithClock(clock))
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := writer.Acquire(wctx, "k", time.Minute, redlock.ForWrite())
		done <- err
	}()
	defer func() {
		cancel()
		if err := <-done; err == nil {
			t.Error("the writer got the lock while a reader held it")
		}
	}()
	bctx, bcancel := context.WithTimeout(ctx, 10*time.Second)
	defer bcancel()
	if err := clock.BlockUntilContext(bctx, 1); err != nil {
		t.Fatal("the writer does not wait for its timer")
	}
	h := slices.IndexFunc(c.subscribedChannels(), func(n int) bool { return n > 0 })
	if h < 0 {
		t.Fatal("the writer listens on no node")
	}
	// On the node the writer listens on, the readers' hold and the
	// writer's mark are gone (as if expired: nobody is told).
	c.servers[h].Del("k")
	c.servers[h].Del("{k}:writer-waiting")
	before := calls[h].n.Load()

	// Another reader takes the key there, is refused elsewhere by the
	// mark, and undoes its attempt.
	if l, err := c.client(t).TryAcquire(ctx, "k", time.Minute, redlock.ForRead()); err == nil {
		_ = l.Release(ctx)
		t.Fatal("a reader got the lock past a waiting writer's mark")
	}
	waitFor(t, "the reader's failed attempt to be undone", func() bool { return !c.servers[h].Exists("k") })
	waitFor(t, "the writer to try again", func() bool { return calls[h].n.Load() > before })
}

// TestWaiters_releaseWakesTwo pins how many waiters in line a release
// wakes: the first two that listen, each on its own channel; the third
// hears nothing, and nobody hears the key's common channel.
func TestWaiters_releaseWakesTwo(t *testing.T) {
	c := newCluster(t, 1)
	ctx := context.Background()
	holder := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	redlock.WaitSettled(holder)
	names := []string{"a", "b", "c"}
	for i, name := range names {
		if _, err := c.servers[0].ZAdd("{k}:line", float64(i), name); err != nil {
			t.Fatal(err)
		}
	}
	rdb := c.connect(t)[0]
	ps := rdb.Subscribe(ctx, "{k}:released", "{k}:released:a", "{k}:released:b", "{k}:released:c")
	defer ps.Close()
	for range 4 {
		if _, err := ps.Receive(ctx); err != nil { // the confirmations
			t.Fatal(err)
		}
	}
	mustRelease(t, holder)
	var heard []string
	for {
		rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		m, err := ps.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			break
		}
		heard = append(heard, m.Channel)
	}
	slices.Sort(heard)
	if want := []string{"{k}:released:a", "{k}:released:b"}; !slices.Equal(heard, want) {
		t.Fatalf("a release was heard on %v, want %v: the first two in line", heard, want)
	}
}

// TestWaiters_placeInLineOutlivesAShortTTL: a waiter's place in line lasts
// longer than its wait between attempts (the subscribed poll, 1-1.5 s),
// even for a lock whose ttl is shorter: otherwise the line expires between
// the attempts and each release wakes every waiter (20 waiters on a 100 ms
// lock held 300 ms: 608-787 attempts, 373-445 with their places kept).
func TestWaiters_placeInLineOutlivesAShortTTL(t *testing.T) {
	c := newCluster(t, 3)
	holder := mustTryAcquire(t, c.client(t), context.Background(), "k", time.Minute)
	defer holder.Release(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = c.client(t).Acquire(ctx, "k", 100*time.Millisecond)
	}()
	waitFor(t, "the waiter in line", func() bool { return c.lineSize("k") == 1 })
	for _, s := range c.servers {
		s.FastForward(1500 * time.Millisecond) // a subscribed waiter's longest wait between attempts
	}
	if n := c.lineSize("k"); n != 1 {
		t.Fatalf("%d waiters in line once 1.5 s passed on the nodes, want the one still waiting", n)
	}
	cancel()
	<-done
}

// countAttempts returns an Observer option that adds up the attempts every
// Acquire reports when it returns, and the sum.
func countAttempts() (*atomic.Int64, redlock.Option) {
	var attempts atomic.Int64
	return &attempts, redlock.WithObserver(redlock.ObserverFunc(func(_ context.Context, e redlock.Event) {
		if e.Op == redlock.OpAcquire {
			attempts.Add(int64(e.Attempts))
		}
	}))
}

// heldDial holds the connections its client dials once armed, until let
// go: a subscription's own connection, with the pool's made before.
type heldDial struct {
	armed   atomic.Bool
	dialing chan struct{} // closed at the first held dial
	once    sync.Once
	letGo   chan struct{}
}

func (h *heldDial) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.armed.Load() {
			h.once.Do(func() { close(h.dialing) })
			<-h.letGo
		}
		return next(ctx, network, addr)
	}
}

func (h *heldDial) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *heldDial) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestWaiters_lateSubscriptionTriesAtOnce: a waiter whose subscription is
// confirmed only after it gave up waiting for it (its connection slow to
// open) tries again as soon as it is: a release before it was heard by
// nobody. With a retry policy of a minute, it used to miss the lock for
// that minute.
func TestWaiters_lateSubscriptionTriesAtOnce(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 1)
	ctx := context.Background()
	held := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	nodes := c.connect(t)
	h := &heldDial{dialing: make(chan struct{}), letGo: make(chan struct{})}
	addHook(t, nodes[0], h)
	rc := mustNew(t, nodes, redlock.WithNodeTimeout(100*time.Millisecond),
		redlock.WithRetry(redlock.RetryFunc(func(int) time.Duration { return time.Minute })))
	mustRelease(t, mustTryAcquire(t, rc, ctx, "warm-up", time.Minute)) // the pool's connection
	h.armed.Store(true)
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan acquired, 1)
	go func() {
		l, err := rc.Acquire(actx, "k", time.Minute)
		got <- acquired{l, err}
	}()
	<-h.dialing
	mustRelease(t, held) // announced to nobody: the subscription is not made yet
	// Past the waiter's wait for its subscription (the node timeout).
	time.Sleep(300 * time.Millisecond)
	close(h.letGo)
	a := <-got
	if a.err != nil {
		t.Fatalf("the waiter: %v (its subscription was confirmed late, after the release, and it waited for its retry policy)", a.err)
	}
	mustRelease(t, a.lock)
}

// TestWaiters_subscribeAfterAFirstAttemptThatNamedNoHolder: a waiter
// whose first attempt heard no node name a holder (every node failed)
// subscribes to the release once a later attempt is refused by a holder,
// and is woken by it. It used to subscribe only after a first attempt, so
// it polled for ever, unseen by a holder's hand-offs, which count the
// listeners (the explorer's remote waiter, its first attempt timed out).
func TestWaiters_subscribeAfterAFirstAttemptThatNamedNoHolder(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	held := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	for _, s := range c.servers {
		s.SetError("LOADING the node is loading") // the waiter's first attempt fails on every node
	}
	refused := make(chan struct{})
	policy := redlock.RetryFunc(func(failed int) time.Duration {
		switch failed {
		case 1:
			for _, s := range c.servers {
				s.SetError("")
			}
			return time.Millisecond
		case 2: // refused by the holder, on every node
			close(refused)
		}
		return time.Minute // only a release heard ends the wait
	})
	rc := mustNew(t, c.connect(t))
	got := make(chan error, 1)
	go func() {
		l, err := rc.Acquire(ctx, "k", time.Minute, redlock.WithRetry(policy))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	if !closed(refused) {
		t.Fatal("the second attempt was not refused")
	}
	waitFor(t, "the waiter's subscription", func() bool { return slices.Max(c.subscribedChannels()) > 0 })
	mustRelease(t, held)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not hear the release: it never subscribed")
	}
}
