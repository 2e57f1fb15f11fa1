package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// The production contract on real redis-server nodes: misconfigured nodes
// (a password, a replica, a Cluster master given as a plain node), the same
// server given twice, and lock handles across processes.

// needRedis skips (fails in CI) when redis-server is not there.
func needRedis(t *testing.T) {
	t.Helper()
	if serverKind(t) != Redis {
		t.Skip("needs redis-server")
	}
}

// realCluster starts a Redis Cluster of n masters that share the 16384
// slots, and returns its nodes once every node sees the cluster ok.
func realCluster(t *testing.T, n int) []*Node {
	t.Helper()
	needRedis(t)
	ctx := context.Background()
	var nodes []*Node
	for range n {
		nodes = append(nodes, startTestNode(t, nodeSpec{kind: Redis, cluster: true}))
	}
	per := 16384 / n
	for i, nd := range nodes {
		from, to := i*per, (i+1)*per-1
		if i == n-1 {
			to = 16383
		}
		if _, err := doOn(ctx, nd.Addr(), "CLUSTER", "ADDSLOTSRANGE", from, to); err != nil {
			t.Fatalf("assigning slots to %s: %v", nd.Addr(), err)
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(nodes[0].Addr())
			if _, err := doOn(ctx, nd.Addr(), "CLUSTER", "MEET", host, port, nodes[0].busPort); err != nil {
				t.Fatalf("CLUSTER MEET: %v", err)
			}
		}
	}
	for _, nd := range nodes {
		for deadline := time.Now().Add(30 * time.Second); ; {
			info, err := doOn(ctx, nd.Addr(), "CLUSTER", "INFO")
			s, _ := info.(string)
			if err == nil && strings.Contains(s, "cluster_state:ok") && strings.Contains(s, fmt.Sprintf("cluster_known_nodes:%d", n)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ready: %v %v", nd.Addr(), s, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes
}

// mustBeMisconfigured fails t unless err is a refused acquire that matches
// ErrNotAcquired and ErrMisconfigured and whose message holds every want.
func mustBeMisconfigured(t *testing.T, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, redlock.ErrMisconfigured) {
		t.Fatalf("err = %v, want ErrNotAcquired and ErrMisconfigured", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("err = %q, want it to say %q", err, w)
		}
	}
}

// acquireWithin runs Acquire with a minute's context and fails t if it
// took longer than a wide bound (it must not retry until the context ends).
func acquireWithin(t *testing.T, rc *redlock.Client, key string, opts ...redlock.AcquireOption) (*redlock.Lock, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	lock, err := rc.Acquire(ctx, key, 10*time.Second, opts...)
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("Acquire took %v: it retried a configuration error", took)
	}
	return lock, err
}

func newRedlock(t *testing.T, nodes []redis.UniversalClient, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	rc, err := redlock.New(nodes, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// events records the Observer's events.
type events struct {
	mu  sync.Mutex
	all []redlock.Event
}

func (e *events) Observe(_ context.Context, ev redlock.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *events) of(op redlock.Op) []redlock.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []redlock.Event
	for _, ev := range e.all {
		if ev.Op == op {
			out = append(out, ev)
		}
	}
	return out
}

// TestContract_password: nodes with requirepass reached without the
// password stop the wait at once when they are a majority; as a minority,
// the lock is taken and the node is reported at the first operation.
func TestContract_password(t *testing.T) {
	needRedis(t)
	var locked []*Node
	for range 3 {
		locked = append(locked, startTestNode(t, nodeSpec{kind: Redis, password: "s3cret"}))
	}
	open := startTestNode(t, nodeSpec{kind: Redis})
	noPassword := []redis.UniversalClient{client(t, locked[0].Addr()), client(t, locked[1].Addr()), client(t, open.Addr())}

	t.Run("majority", func(t *testing.T) {
		rc := newRedlock(t, noPassword)
		for _, opts := range [][]redlock.AcquireOption{nil, {redlock.WithFencing()}, {redlock.Fair()}, {redlock.ForWrite()}} {
			_, err := acquireWithin(t, rc, "k", opts...)
			mustBeMisconfigured(t, err, locked[0].Addr(), locked[1].Addr(), "password")
		}
	})

	t.Run("minority", func(t *testing.T) {
		withPassword := func(n *Node) redis.UniversalClient {
			rdb := redis.NewClient(&redis.Options{Addr: n.Addr(), Password: "s3cret", MaxRetries: -1, ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = rdb.Close() })
			return rdb
		}
		var ev events
		rc := newRedlock(t, []redis.UniversalClient{withPassword(locked[0]), withPassword(locked[1]), client(t, locked[2].Addr())},
			redlock.WithObserver(&ev))
		lock, err := acquireWithin(t, rc, "m")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lock.Release(context.Background()) }()
		deadline := time.Now().Add(10 * time.Second)
		for len(ev.of(redlock.OpMisconfigured)) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		got := ev.of(redlock.OpMisconfigured)
		if len(got) != 1 || got[0].Node != 2 || !errors.Is(got[0].Err, redlock.ErrMisconfigured) {
			t.Fatalf("OpMisconfigured events = %+v, want one for node 2", got)
		}
	})
}

// TestContract_replica: a replica given as a node answers READONLY; as a
// majority it stops the wait, as a minority the lock is taken.
func TestContract_replica(t *testing.T) {
	needRedis(t)
	masters := []*Node{startTestNode(t, nodeSpec{kind: Redis}), startTestNode(t, nodeSpec{kind: Redis})}
	replicas := []*Node{startTestNode(t, nodeSpec{kind: Redis, replica: masters[0].Addr()}), startTestNode(t, nodeSpec{kind: Redis, replica: masters[1].Addr()})}

	rc := newRedlock(t, []redis.UniversalClient{client(t, replicas[0].Addr()), client(t, replicas[1].Addr()), client(t, masters[0].Addr())})
	_, err := acquireWithin(t, rc, "k")
	mustBeMisconfigured(t, err, "replica")

	rc = newRedlock(t, []redis.UniversalClient{client(t, masters[0].Addr()), client(t, masters[1].Addr()), client(t, replicas[0].Addr())})
	lock, err := acquireWithin(t, rc, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestContract_writableReplica: a replica that takes writes
// (replica-read-only no) does not count either: INFO tells its role. As a
// majority it stops the wait at once; as a minority the lock is taken on
// the masters and the replica is reported; promoted (REPLICAOF NO ONE), it
// counts again.
func TestContract_writableReplica(t *testing.T) {
	needRedis(t)
	ctx := context.Background()
	masters := []*Node{startTestNode(t, nodeSpec{kind: Redis}), startTestNode(t, nodeSpec{kind: Redis})}
	replicas := []*Node{startTestNode(t, nodeSpec{kind: Redis, replica: masters[0].Addr()}), startTestNode(t, nodeSpec{kind: Redis, replica: masters[1].Addr()})}
	for _, r := range replicas {
		if _, err := doOn(ctx, r.Addr(), "CONFIG", "SET", "replica-read-only", "no"); err != nil {
			t.Fatal(err)
		}
	}
	rc := newRedlock(t, []redis.UniversalClient{client(t, replicas[0].Addr()), client(t, replicas[1].Addr()), client(t, masters[0].Addr())})
	_, err := acquireWithin(t, rc, "k")
	mustBeMisconfigured(t, err, "replica of 127.0.0.1", replicas[0].Addr())

	var ev events
	rc = newRedlock(t, []redis.UniversalClient{client(t, masters[0].Addr()), client(t, masters[1].Addr()), client(t, replicas[0].Addr())}, redlock.WithObserver(&ev))
	lock, err := acquireWithin(t, rc, "w")
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ev.of(redlock.OpMisconfigured); len(got) != 1 || got[0].Node != 2 || !strings.Contains(got[0].Err.Error(), "replica") {
		t.Fatalf("OpMisconfigured events = %+v, want one for the replica, node 2", got)
	}

	// Promoted, the former replica counts: with one master down, the lock
	// needs it.
	if _, err := doOn(ctx, replicas[0].Addr(), "REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	masters[1].stop()
	deadline := time.Now().Add(20 * time.Second)
	for {
		lock, err := rc.TryAcquire(ctx, "p", 10*time.Second)
		if err == nil {
			_ = lock.Release(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the promoted replica does not count: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestContract_evictingPolicy: a master with a memory limit and an
// evicting policy holds locks until memory runs short, then loses them:
// it is reported once (Observer and logger), and locks are still taken.
func TestContract_evictingPolicy(t *testing.T) {
	needRedis(t)
	ctx := context.Background()
	nodes := []*Node{startTestNode(t, nodeSpec{kind: Redis}), startTestNode(t, nodeSpec{kind: Redis}), startTestNode(t, nodeSpec{kind: Redis})}
	if _, err := doOn(ctx, nodes[1].Addr(), "CONFIG", "SET", "maxmemory", "100mb", "maxmemory-policy", "volatile-lru"); err != nil {
		t.Fatal(err)
	}
	var ev events
	rc := newRedlock(t, []redis.UniversalClient{client(t, nodes[0].Addr()), client(t, nodes[1].Addr()), client(t, nodes[2].Addr())}, redlock.WithObserver(&ev))
	for range 3 {
		lock, err := acquireWithin(t, rc, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := ev.of(redlock.OpMisconfigured)
	if len(got) != 1 || got[0].Node != 1 || !errors.Is(got[0].Err, redlock.ErrMisconfigured) || !strings.Contains(got[0].Err.Error(), "volatile-lru") {
		t.Fatalf("OpMisconfigured events = %+v, want one for node 1 naming volatile-lru", got)
	}
}

// TestContract_sameServerTwice: one server reached as localhost and as
// 127.0.0.1 is found on first contact, before a lock is granted.
func TestContract_sameServerTwice(t *testing.T) {
	needRedis(t)
	a, b := startTestNode(t, nodeSpec{kind: Redis}), startTestNode(t, nodeSpec{kind: Redis})
	_, port, _ := net.SplitHostPort(a.Addr())
	nodes := []redis.UniversalClient{client(t, a.Addr()), client(t, b.Addr()), client(t, net.JoinHostPort("localhost", port))}
	rc := newRedlock(t, nodes)
	for range 2 {
		_, err := acquireWithin(t, rc, "k")
		mustBeMisconfigured(t, err, "same server", "node 0", "node 2")
	}
	for _, n := range []*Node{a, b} {
		if keys, err := doOn(context.Background(), n.Addr(), "DBSIZE"); err != nil || keys.(int64) != 0 {
			t.Fatalf("%s holds %v keys after the refused acquires (%v)", n.Addr(), keys, err)
		}
	}
}

// TestContract_cluster: a 3-master Redis Cluster. Three ClusterClients
// seeded with its three masters are one node, not three, and are refused;
// its masters given as plain nodes answer MOVED for keys they do not own,
// which is a configuration error, not contention.
func TestContract_cluster(t *testing.T) {
	masters := realCluster(t, 3)

	t.Run("three ClusterClients of one cluster", func(t *testing.T) {
		var nodes []redis.UniversalClient
		for _, m := range masters {
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}, MaxRetries: -1})
			t.Cleanup(func() { _ = cc.Close() })
			nodes = append(nodes, cc)
		}
		rc := newRedlock(t, nodes)
		_, err := acquireWithin(t, rc, "{order}:1")
		mustBeMisconfigured(t, err, "same server")
	})

	t.Run("one ClusterClient is one node", func(t *testing.T) {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{masters[0].Addr()}, MaxRetries: -1})
		t.Cleanup(func() { _ = cc.Close() })
		rc := newRedlock(t, []redis.UniversalClient{cc})
		lock, err := acquireWithin(t, rc, "{order}:1")
		if err != nil {
			t.Fatal(err)
		}
		if err := lock.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("masters as plain nodes", func(t *testing.T) {
		var nodes []redis.UniversalClient
		for _, m := range masters {
			nodes = append(nodes, client(t, m.Addr()))
		}
		rc := newRedlock(t, nodes)
		// Each key's slot is owned by one master; the other two answer
		// MOVED, which leaves the quorum out of reach.
		_, err := acquireWithin(t, rc, "order:1")
		mustBeMisconfigured(t, err, "MOVED", "ClusterClient")
	})
}

// realNodes starts n redis-server nodes and returns them with a client for
// each (a fresh set, as another process would have, on every call of
// connect).
func realNodes(t *testing.T, n int) (nodes []*Node, connect func() []redis.UniversalClient) {
	t.Helper()
	needRedis(t)
	for range n {
		nodes = append(nodes, startTestNode(t, nodeSpec{kind: Redis}))
	}
	return nodes, func() []redis.UniversalClient {
		var clients []redis.UniversalClient
		for _, nd := range nodes {
			clients = append(clients, client(t, nd.Addr()))
		}
		return clients
	}
}

// TestContract_handles: a lock taken in one process with metadata is seen
// by another with Inspect (every kind), rebuilt there with Resume, extended
// and released; a frozen node is reported without holding Inspect up.
func TestContract_handles(t *testing.T) {
	nodes, connect := realNodes(t, 3)
	ctx := context.Background()
	first := newRedlock(t, connect())
	second := newRedlock(t, connect(), redlock.WithNodeTimeout(300*time.Millisecond))

	lock, err := first.TryAcquire(ctx, "deploy", 10*time.Second, redlock.WithMetadata("host=ci pid=1"), redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Drain(ctx); err != nil { // the last node's call too
		t.Fatal(err)
	}
	in, err := second.Inspect(ctx, "deploy")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held() || in.Holders[0].Token != lock.Token() || in.Holders[0].Metadata != "host=ci pid=1" || in.Holders[0].Nodes != 3 {
		t.Fatalf("Inspect: %+v", in)
	}
	resumed, err := second.Resume(ctx, "deploy", lock.Token(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if resumed.Metadata() != "host=ci pid=1" || resumed.Validity() < 50*time.Second {
		t.Fatalf("resumed: metadata %q validity %v", resumed.Metadata(), resumed.Validity())
	}

	if err := nodes[2].freeze(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	in, err = second.Inspect(ctx, "deploy")
	if err := nodes[2].thaw(); err != nil {
		t.Fatal(err)
	}
	if err != nil || time.Since(start) > 10*time.Second {
		t.Fatalf("Inspect with a frozen node: %v after %v", err, time.Since(start))
	}
	if !in.Held() || in.Nodes[2].Err == nil || in.Holders[0].Nodes != 2 {
		t.Fatalf("Inspect with node 2 frozen: %+v", in)
	}
	if err := resumed.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := resumed.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := second.Resume(ctx, "deploy", lock.Token(), time.Minute); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("resume after release: err = %v, want ErrLockLost", err)
	}

	// Every kind is inspected with its holders on real servers.
	for _, tc := range []struct {
		kind string
		opts []redlock.AcquireOption
	}{
		{redlock.HeldByReentrant, []redlock.AcquireOption{redlock.WithOwner("w1")}},
		{redlock.HeldByReaders, []redlock.AcquireOption{redlock.ForRead()}},
		{redlock.HeldBySemaphore, []redlock.AcquireOption{redlock.WithPermits(2)}},
		{redlock.HeldByWriter, []redlock.AcquireOption{redlock.ForWrite()}},
		{redlock.HeldByFair, []redlock.AcquireOption{redlock.Fair()}},
	} {
		key := "kind-" + tc.kind + fmt.Sprint(len(tc.opts))
		l, err := first.TryAcquire(ctx, key, 10*time.Second, append(tc.opts, redlock.WithMetadata("m"))...)
		if err != nil {
			t.Fatal(err)
		}
		// TryAcquire returns on a quorum; the last node's call may still
		// be on its way. Drain waits for it, so that every node is checked.
		if err := first.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		in, err := second.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(in.Holders) != 1 || in.Holders[0].Token != l.Token() || in.Holders[0].Metadata != "m" || in.Nodes[0].Kind != tc.kind || in.Holders[0].TTL <= 0 {
			t.Fatalf("%s: %+v", tc.kind, in)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestContract_oneWinner: 100 separate Clients (each its own connections,
// as 100 processes) TryAcquire one free key at the same moment on real
// servers: exactly one wins in at least 90 % of 40 runs at N = 3 and N = 5,
// never two.
func TestContract_oneWinner(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			_, connect := realNodes(t, n)
			ctx := context.Background()
			rcs := make([]*redlock.Client, 100)
			for i := range rcs {
				rcs[i] = newRedlock(t, connect())
				l, err := rcs[i].TryAcquire(ctx, "warm-up", time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				_ = l.Release(ctx)
			}
			// 40 runs: before designation, no winner in about 3 runs in 10
			// (6 of 20 at N=3 and at N=5); after, none on an idle machine,
			// and up to 2 in 20 on a loaded one, where a designated
			// client's retries can outlast its validity. At most 4 in 40
			// tells the two apart whatever the load.
			const runs = 40
			none := 0
			for run := range runs {
				var (
					wg    sync.WaitGroup
					start = make(chan struct{})
					mu    sync.Mutex
					won   []*redlock.Lock
				)
				for _, rc := range rcs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						if l, err := rc.TryAcquire(ctx, fmt.Sprint("leader", run), 10*time.Second); err == nil {
							mu.Lock()
							won = append(won, l)
							mu.Unlock()
						}
					}()
				}
				close(start)
				wg.Wait()
				for _, l := range won {
					_ = l.Release(ctx)
				}
				switch len(won) {
				case 0:
					none++
				case 1:
				default:
					t.Fatalf("run %d: %d winners", run, len(won))
				}
			}
			t.Logf("N=%d: no winner in %d of %d runs", n, none, runs)
			if none > runs/10 {
				t.Fatalf("no winner in %d of %d runs, want at most %d", none, runs, runs/10)
			}
		})
	}
}

// TestContract_extendAndRetries: on real servers, an Extend that a frozen
// node could not confirm is not lost and the lock stays usable; one that a
// majority no longer holds is lost; WithMaxAttempts ends a wait on a held
// key after its attempts, before the context.
func TestContract_extendAndRetries(t *testing.T) {
	nodes, connect := realNodes(t, 3)
	ctx := context.Background()
	rc := newRedlock(t, connect(), redlock.WithNodeTimeout(200*time.Millisecond))
	lock, err := rc.TryAcquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[1:] {
		if err := n.freeze(); err != nil {
			t.Fatal(err)
		}
	}
	err = lock.Extend(ctx, time.Minute)
	for _, n := range nodes[1:] {
		if err := n.thaw(); err != nil {
			t.Fatal(err)
		}
	}
	if !errors.Is(err, redlock.ErrNotConfirmed) || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend with 2 of 3 nodes frozen: err = %v, want ErrNotConfirmed", err)
	}
	select {
	case <-lock.Done():
		t.Fatal("Done closed after an Extend that was only not confirmed")
	default:
	}
	if err := lock.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend once the nodes are back: %v", err)
	}
	for _, n := range nodes[:2] {
		if _, err := doOn(ctx, n.Addr(), "DEL", "k"); err != nil {
			t.Fatal(err)
		}
	}
	if err := lock.Extend(ctx, time.Minute); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend with the key gone from 2 of 3 nodes: err = %v, want ErrLockLost", err)
	}
	_ = lock.Release(ctx)

	held, err := rc.TryAcquire(ctx, "held", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(ctx) }()
	var ev events
	other := newRedlock(t, connect(), redlock.WithObserver(&ev))
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = other.Acquire(wait, "held", time.Minute, redlock.WithMaxAttempts(3), redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 5*time.Millisecond)))
	if !errors.Is(err, redlock.ErrNotAcquired) || wait.Err() != nil {
		t.Fatalf("bounded Acquire: err = %v (ctx %v), want ErrNotAcquired before the context ended", err, wait.Err())
	}
	if got := ev.of(redlock.OpAcquire); len(got) != 1 || got[0].Attempts != 3 {
		t.Fatalf("OpAcquire events %+v, want one with 3 attempts", got)
	}
}

// TestContract_outcomeKnown: with 3 of 5 nodes held by another and 2 nodes
// newly frozen, a failed attempt returns long before the node timeout, and
// so does a Release with 2 nodes newly frozen; once thawed, the frozen
// nodes keep nothing of ours past the ttl.
func TestContract_outcomeKnown(t *testing.T) {
	nodes, connect := realNodes(t, 5)
	ctx := context.Background()
	const nodeTimeout = 2 * time.Second
	rc := newRedlock(t, connect(), redlock.WithNodeTimeout(nodeTimeout))
	for _, n := range nodes[:3] {
		if _, err := doOn(ctx, n.Addr(), "SET", "theirs", "another holder", "PX", 60000); err != nil {
			t.Fatal(err)
		}
	}
	const ttl = 3 * time.Second
	mine, err := rc.TryAcquire(ctx, "mine", ttl)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[3:] {
		if err := n.freeze(); err != nil {
			t.Fatal(err)
		}
	}
	thawed := false
	thaw := func() {
		if thawed {
			return
		}
		thawed = true
		for _, n := range nodes[3:] {
			_ = n.thaw()
		}
	}
	defer thaw()

	start := time.Now()
	_, err = rc.TryAcquire(ctx, "theirs", ttl)
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire: err = %v, want ErrNotAcquired", err)
	}
	if took := time.Since(start); took > nodeTimeout/2 {
		t.Fatalf("the failed attempt took %v: three refusals had decided it", took)
	}
	start = time.Now()
	if err := mine.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if took := time.Since(start); took > nodeTimeout/2 {
		t.Fatalf("Release took %v: a quorum had confirmed it", took)
	}
	thaw()
	deadline := time.Now().Add(ttl + 5*time.Second)
	for _, n := range nodes[3:] {
		for {
			keys, err := doOn(ctx, n.Addr(), "DBSIZE")
			if err == nil && keys.(int64) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still holds %v keys after the ttl (%v)", n.Addr(), keys, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestContract_replicaAck: WithReplicaAck on masters with replicas. Nodes
// 0 and 1 have a replica each, node 2 none. A lock is held once a quorum's
// replicas confirm it (nodes 0 and 1; node 2 never does); with node 0's
// replica frozen, a quorum can not confirm, nothing is acquired and the
// masters keep nothing; thawed, locks are taken again.
func TestContract_replicaAck(t *testing.T) {
	needRedis(t)
	masters := []*Node{startTestNode(t, nodeSpec{kind: Redis}), startTestNode(t, nodeSpec{kind: Redis}), startTestNode(t, nodeSpec{kind: Redis})}
	replicas := []*Node{startTestNode(t, nodeSpec{kind: Redis, replica: masters[0].Addr()}), startTestNode(t, nodeSpec{kind: Redis, replica: masters[1].Addr()})}
	nodes := []redis.UniversalClient{client(t, masters[0].Addr()), client(t, masters[1].Addr()), client(t, masters[2].Addr())}
	rc := newRedlock(t, nodes, redlock.WithReplicaAck(1, 200*time.Millisecond), redlock.WithNodeTimeout(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The replicas may still be catching up with their masters.
	lock, err := rc.Acquire(ctx, "k", 10*time.Second, redlock.WithRetry(redlock.RandomDelay(50*time.Millisecond, 100*time.Millisecond)))
	if err != nil {
		t.Fatalf("Acquire with the replicas of nodes 0 and 1 in step: %v", err)
	}
	for i, r := range replicas {
		if v, err := doOn(ctx, r.Addr(), "GET", "k"); err != nil || v != lock.Token() {
			t.Errorf("replica of node %d has %v (%v), want the token: WAIT confirmed it", i, v, err)
		}
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}

	if err := replicas[0].signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			_ = replicas[0].signal(syscall.SIGCONT)
		}
	}
	defer thaw()
	_, err = rc.TryAcquire(ctx, "k", 10*time.Second)
	if !errors.Is(err, redlock.ErrNotAcquired) || !strings.Contains(err.Error(), "replicas confirmed") {
		t.Fatalf("TryAcquire with node 0's replica frozen: %v, want ErrNotAcquired naming the replicas", err)
	}
	if err := rc.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	for i, m := range masters {
		if v, err := doOn(ctx, m.Addr(), "EXISTS", "k"); err != nil || v.(int64) != 0 {
			t.Errorf("master %d keeps the unconfirmed key (%v, %v)", i, v, err)
		}
	}

	thaw()
	lock, err = rc.Acquire(ctx, "k", 10*time.Second, redlock.WithRetry(redlock.RandomDelay(50*time.Millisecond, 100*time.Millisecond)))
	if err != nil {
		t.Fatalf("Acquire once the replica is back: %v", err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
