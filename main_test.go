package redlock_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/leaktest"
)

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the tests close nodes on purpose.
	redis.SetLogger(quietLogger{})
	// The Client logs to slog.Default() unless given WithLogger; the tests
	// make nodes fail on purpose.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	// Healthy nodes answer in well under a millisecond, but with two
	// copies of the suite at once under the race detector on two cores a
	// reply can wait 100 ms and more for its goroutine: the suite derives
	// node timeouts of 400 ms at least, not the library's 50 ms. CI also
	// runs it once alone on the library's own defaults
	// (REDLOCK_TEST_DEFAULTS=1). A test about timeouts gives
	// WithNodeTimeout itself.
	// So too the grace after an outcome, in which the nodes yet to answer
	// are still heard (counted by Confirmed, told as degraded or not): the
	// tests' healthy nodes are all heard, as on a quiet machine.
	if os.Getenv("REDLOCK_TEST_DEFAULTS") == "" {
		redlock.SetNodeTimeoutFloor(testNodeTimeoutFloor)
		redlock.SetGraceFloor(testNodeTimeoutFloor)
	}
	// A go-redis pool that has failed to dial keeps one goroutine trying
	// again every second until the pool is closed; the tests close their
	// clients, and the goroutine ends at its next wake-up.
	leaktest.Explain = explainSchedulers
	leaktest.Main(m, "github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")
}

// testNodeTimeoutFloor is the least node timeout the tests derive from a
// ttl (the library's is 50 ms).
const testNodeTimeoutFloor = 400 * time.Millisecond

// libraryTimeouts gives the test the library's own derived node timeouts
// and grace (no testNodeTimeoutFloor), for tests about them.
func libraryTimeouts(t *testing.T) {
	old := redlock.SetNodeTimeoutFloor(50 * time.Millisecond)
	oldGrace := redlock.SetGraceFloor(5 * time.Millisecond)
	t.Cleanup(func() {
		redlock.SetNodeTimeoutFloor(old)
		redlock.SetGraceFloor(oldGrace)
	})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// cluster is a set of embedded Redis nodes with one go-redis client each.
type cluster struct {
	servers []*miniredis.Miniredis
	addrs   []string // kept: a closed miniredis no longer tells its address
	clients []redis.UniversalClient
}

// newCluster starts n embedded nodes; they and their clients are closed
// when the test ends.
func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := &cluster{}
	for range n {
		s := miniredis.NewMiniRedis()
		if err := s.StartAddr(net.JoinHostPort(testHost(), "0")); err != nil {
			t.Fatalf("start an embedded node: %v", err)
		}
		t.Cleanup(s.Close)
		safeInfo(s)
		c.servers = append(c.servers, s)
		c.addrs = append(c.addrs, s.Addr())
	}
	c.clients = c.connect(t)
	return c
}

// testHost is the loopback address this test process starts its nodes on:
// one of 127.0.0.0/8 of its own where the system routes them all to the
// loopback device (Linux), else 127.0.0.1. Tests close nodes, and a
// closed node's port may be taken by another copy of the suite running
// at once: on one shared address, that copy's clients, dialling their own
// closed node again, would reach and write to this one's.
var testHost = sync.OnceValue(func() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	host := fmt.Sprintf("127.%d.%d.%d", 1+b[0]%254, b[1], 1+b[2]%254)
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "127.0.0.1"
	}
	_ = l.Close()
	return host
})

// safeInfo has s answer INFO without arguments (a Client's identification
// of its nodes, identity.go) as miniredis does, but from the server it
// has now: miniredis reads the field that Close and Restart write without
// its lock, a data race when a test stops a node while a Client is
// identifying it. Called again after a Restart, which starts a new server.
func safeInfo(s *miniredis.Miniredis) { infoSays(s, func() string { return "" }) }

// infoSays has s answer INFO as safeInfo does, with the lines extra gives
// at the time (a role, a memory policy) on top.
func infoSays(s *miniredis.Miniredis, extra func() string) {
	srv := s.Server()
	srv.SetPreHook(func(c *server.Peer, cmd string, args ...string) bool {
		if cmd != "INFO" || len(args) != 0 {
			return false
		}
		c.WriteBulk(fmt.Sprintf("# Clients\r\nconnected_clients:%d\r\n# Stats\r\ntotal_connections_received:%d\r\ntotal_commands_processed:%d\r\n%s",
			srv.ClientsLen(), srv.TotalConnections(), srv.TotalCommands(), extra()))
		return true
	})
}

// restart starts node i again (with its data) after a Close.
func (c *cluster) restart(t *testing.T, i int) {
	t.Helper()
	// On its own address: miniredis's Restart takes 127.0.0.1 (testHost).
	if err := c.servers[i].StartAddr(c.addrs[i]); err != nil {
		t.Fatal(err)
	}
	safeInfo(c.servers[i])
}

// connect returns a fresh set of go-redis clients for the nodes, as a
// separate process would have. Retries are off so that a closed node fails
// at once rather than after go-redis's backoff.
func (c *cluster) connect(t *testing.T) []redis.UniversalClient {
	t.Helper()
	clients := make([]redis.UniversalClient, len(c.servers))
	for i, addr := range c.addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() { _ = rdb.Close() })
		clients[i] = rdb
	}
	return clients
}

// client returns a redlock Client over the cluster's shared go-redis clients.
func (c *cluster) client(t *testing.T, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	return mustNew(t, c.clients, opts...)
}

func mustNew(t *testing.T, nodes []redis.UniversalClient, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	rc, err := newTestClient(t, nodes, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	noneLeftRenewed(t, rc)
	return rc
}

// testClients are the Clients made by the tests (noneLeftRenewed), with
// the test that made each: a scheduler goroutine left after the tests is
// named by its test (explainSchedulers).
var testClients sync.Map // *redlock.Client → test name

// explainSchedulers names the tests whose Clients' schedulers still run,
// or still have locks queued, with those locks.
func explainSchedulers() string {
	var b strings.Builder
	testClients.Range(func(k, v any) bool {
		if running, locks := redlock.Scheduled(k.(*redlock.Client)); running || len(locks) > 0 {
			fmt.Fprintf(&b, "%s: scheduler running=%v, queued: %s\n", v, running, strings.Join(locks, "; "))
		}
		return true
	})
	if b.Len() == 0 {
		return "no Client made through mustNew has its scheduler running (a Client made otherwise may)"
	}
	return b.String()
}

// noneLeftRenewed fails t, after it, when it left a lock of rc renewed.
func noneLeftRenewed(t *testing.T, rc *redlock.Client) {
	testClients.Store(rc, t.Name())
	// A lock renewed after its test keeps the Client's scheduler running
	// (a goroutine leak TestMain reports without naming the test). A
	// release the test set going (a Campaign whose ctx ended resigns in
	// the background) is given the time TestMain gives leaks.
	t.Cleanup(func() {
		left := redlock.RenewedLeft(rc)
		for deadline := time.Now().Add(5 * time.Second); len(left) > 0 && time.Now().Before(deadline); left = redlock.RenewedLeft(rc) {
			time.Sleep(10 * time.Millisecond)
		}
		if len(left) > 0 {
			t.Errorf("the test left auto-renewed locks held: %q", left)
		}
	})
}

// holders returns the indexes of the running nodes whose key holds value.
func (c *cluster) holders(key, value string) []int {
	var idx []int
	for i, s := range c.servers {
		if v, err := s.Get(key); err == nil && v == value {
			idx = append(idx, i)
		}
	}
	return idx
}

// holdersAny returns the indexes of the nodes on which key exists at all.
func (c *cluster) holdersAny(key string) []int {
	var idx []int
	for i, s := range c.servers {
		if s.Exists(key) {
			idx = append(idx, i)
		}
	}
	return idx
}

func (c *cluster) commands() int {
	n := 0
	for _, s := range c.servers {
		n += s.CommandCount()
	}
	return n
}

// hungNode is a TCP server that accepts connections and reads from them but
// never answers: a node that is up and stuck.
type hungNode struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newHungNode(t *testing.T) *hungNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hungNode{ln: ln}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, conn)
			h.mu.Unlock()
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				r := bufio.NewReader(conn)
				for {
					if _, err := r.ReadByte(); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		h.mu.Lock()
		for _, c := range h.conns {
			_ = c.Close()
		}
		h.mu.Unlock()
		h.wg.Wait()
	})
	return h
}

func (h *hungNode) Addr() string { return h.ln.Addr().String() }

// clockHook advances a fake clock whenever its client runs a command that
// matches, as if the node took that long to answer.
type clockHook struct {
	clock *manualClock
	by    time.Duration
}

func (h clockHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h clockHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.clock.Advance(h.by)
		return err
	}
}

func (h clockHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func mustNotAcquire(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrNotAcquired", err)
	}
}

// mustRelease releases lock and waits until every delete has landed.
func mustRelease(t *testing.T, lock *redlock.Lock) {
	t.Helper()
	if err := lock.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	redlock.WaitSettled(lock)
}

type acquireFunc func(ctx context.Context, key string, ttl time.Duration, opts ...redlock.AcquireOption) (*redlock.Lock, error)

// acquireFuncs returns both ways to acquire, for checks that hold for each.
func acquireFuncs(rc *redlock.Client) map[string]acquireFunc {
	return map[string]acquireFunc{"TryAcquire": rc.TryAcquire, "Acquire": rc.Acquire}
}

// mustTryAcquire acquires key in one attempt or fails the test.
func mustTryAcquire(t *testing.T, rc *redlock.Client, ctx context.Context, key string, ttl time.Duration, opts ...redlock.AcquireOption) *redlock.Lock {
	t.Helper()
	lock, err := rc.TryAcquire(ctx, key, ttl, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	return lock
}

// acquireSoon acquires key with TryAcquire, tried until it is acquired,
// for a test that sets its nodes up with a lock under a node timeout short
// enough that, on a loaded machine, a first attempt may miss it.
func acquireSoon(t *testing.T, rc *redlock.Client, key string, ttl time.Duration, opts ...redlock.AcquireOption) *redlock.Lock {
	t.Helper()
	var lock *redlock.Lock
	waitFor(t, fmt.Sprintf("a lock on %q", key), func() bool {
		var err error
		if lock, err = rc.TryAcquire(context.Background(), key, ttl, opts...); err != nil {
			mustNotAcquire(t, err)
			waitIdle(t, rc) // the failed attempt's deletes land before the next
			return false
		}
		return true
	})
	return lock
}

// warmUpSoon acquires and releases a lock on a key of its own until both
// succeed: the first contact (dials, identification, scripts loaded) may
// take longer than a test's short node timeout on a loaded machine, and a
// release not confirmed leaves its key until its ttl.
func warmUpSoon(t *testing.T, rc *redlock.Client) {
	t.Helper()
	try := 0
	waitFor(t, "a warm-up lock acquired and released", func() bool {
		try++
		lock, err := rc.TryAcquire(context.Background(), fmt.Sprint("warm-up-", try), 10*time.Second)
		if err == nil {
			err = lock.Release(context.Background())
		}
		if err != nil {
			waitIdle(t, rc)
		}
		return err == nil
	})
}

// lateLink is a TCP proxy to a node that holds every command for a delay
// before passing it on, in order: a call that times out still lands on the
// node, later, as over a slow network. Replies pass at once.
type lateLink struct {
	ln       net.Listener
	upstream string
	delay    atomic.Int64  // nanoseconds, for the bytes read from now on
	pending  atomic.Int64  // chunks read and not yet passed on
	closing  chan struct{} // closed when the test ends: held commands are dropped
	mu       sync.Mutex
	conns    []net.Conn
	wg       sync.WaitGroup
}

// newLateLink proxies to upstream until the test ends.
func newLateLink(t *testing.T, upstream string) *lateLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &lateLink{ln: ln, upstream: upstream, closing: make(chan struct{})}
	accepting := make(chan struct{})
	go func() {
		defer close(accepting)
		l.accept()
	}()
	t.Cleanup(func() {
		close(l.closing)
		_ = ln.Close()
		<-accepting // no connection is added after this
		l.mu.Lock()
		for _, c := range l.conns {
			_ = c.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
	})
	return l
}

func (l *lateLink) Addr() string { return l.ln.Addr().String() }

// setDelay holds the commands read from now on for d.
func (l *lateLink) setDelay(d time.Duration) { l.delay.Store(int64(d)) }

// delivered waits until every command read so far has been passed on.
func (l *lateLink) delivered(t *testing.T) {
	t.Helper()
	waitFor(t, "the delayed commands to reach the node", func() bool { return l.pending.Load() == 0 })
}

func (l *lateLink) track(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conns = append(l.conns, c)
}

func (l *lateLink) accept() {
	for {
		down, err := l.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", l.upstream)
		if err != nil {
			_ = down.Close()
			continue
		}
		l.track(down)
		l.track(up)
		type chunk struct {
			b   []byte
			due time.Time
		}
		chunks := make(chan chunk, 1024)
		l.wg.Add(3)
		go func() { // replies
			defer l.wg.Done()
			_, _ = io.Copy(down, up)
			_ = down.Close()
		}()
		go func() { // commands, read as they come
			defer l.wg.Done()
			defer close(chunks)
			for {
				buf := make([]byte, 64<<10)
				n, err := down.Read(buf)
				if n > 0 {
					l.pending.Add(1)
					chunks <- chunk{buf[:n], time.Now().Add(time.Duration(l.delay.Load()))}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // commands, passed on when due
			defer l.wg.Done()
			for c := range chunks {
				select {
				case <-time.After(time.Until(c.due)):
					_, _ = up.Write(c.b)
				case <-l.closing:
				}
				l.pending.Add(-1)
			}
			_ = up.Close()
		}()
	}
}

// hooker is a client that takes go-redis hooks.
type hooker interface{ AddHook(redis.Hook) }

// addHook adds h to rdb, for a test that steers or watches a node through
// its go-redis client's hooks: such a test runs on the go-redis transport
// only (see testTransport).
func addHook(t testing.TB, rdb hooker, h redis.Hook) {
	t.Helper()
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	rdb.AddHook(h)
}

// goRedisOnly skips a test that steers its nodes through the go-redis
// client itself (its dialer, its options) on another transport.
func goRedisOnly(t testing.TB, why string) {
	t.Helper()
	if testTransport != "go-redis" {
		t.Skipf("%s; the %s transport has none", why, testTransport)
	}
}

// testTransport is the node transport the suite's Clients use: go-redis,
// or rueidis when rueidisredlock/matrix's overlay adds it.
var testTransport = "go-redis"

// newTestClient is redlock.New over nodes on the test transport.
var newTestClient = func(_ testing.TB, nodes []redis.UniversalClient, opts ...redlock.Option) (*redlock.Client, error) {
	return redlock.New(nodes, opts...)
}
