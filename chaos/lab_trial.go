package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// trial is one holder and one contender on one key of a lane.
type trial struct {
	lane *labLane
	ex   *LabExperiment
	x    float64
	key  string
	rng  *rand.Rand
	// for the experiment's own use between prepare and strike
	u   time.Duration
	cut bool
}

// trialOutcome is what one trial showed.
type trialOutcome struct {
	unavailable bool   // the holder got no lock: nothing else was tried
	refusal     string // why, when unavailable
	overlap     bool   // the contender got the lock before the holder was done
	staleWrite  bool   // the holder's write landed on the resource after the contender's
	lostUpdate  bool   // the resource's counter shows fewer increments than it took
	regression  bool   // the contender's fencing token was not above the holder's
}

// violation: a resource that checks fencing tokens lets no overlap through
// by itself; it is then the stale writes, lost updates and token
// regressions that count.
func (o trialOutcome) violation(fenced bool) bool {
	return o.staleWrite || o.lostUpdate || o.regression || o.overlap && !fenced
}

// contended is what the contender did.
type contended struct {
	acquired bool
	at       time.Time
	token    uint64
	accepted bool
	err      error
}

// run runs the trial: the holder's lock, the fault, the holder's work and
// write, the contender all along.
func (t *trial) run(ctx context.Context) (trialOutcome, error) {
	l, ex := t.lane, t.ex
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if ex.prepare != nil {
		if err := ex.prepare(ctx, t); err != nil {
			return trialOutcome{}, err
		}
	}
	a, err := l.hold(ctx, t.key, ex.TTL)
	if err != nil {
		if ctx.Err() != nil {
			return trialOutcome{}, ctx.Err()
		}
		return trialOutcome{unavailable: true, refusal: err.Error()}, nil
	}
	if ex.everywhere {
		if err := l.onEveryNode(ctx, t.key, ex.TTL/2); err != nil {
			_ = a.Release(context.WithoutCancel(ctx))
			if ctx.Err() != nil {
				return trialOutcome{}, ctx.Err()
			}
			return trialOutcome{unavailable: true, refusal: err.Error()}, nil
		}
	}
	validity := a.Validity()
	count, err := l.read(ctx, t.key, a.FencingToken())
	if err != nil {
		_ = a.Release(context.WithoutCancel(ctx))
		return trialOutcome{}, err
	}
	done := make(chan struct{})
	contender := make(chan contended, 1)
	go func() { contender <- l.contend(ctx, t.key, ex, done) }()
	fault := make(chan error, 1)
	if ex.strike != nil {
		go func() { fault <- ex.strike(ctx, t) }()
	} else {
		fault <- nil
	}

	// The holder: it works, checks its validity, and writes only if some
	// is left (after a pause, in the client-pause experiment).
	_ = sleep(ctx, time.Duration(ex.Work*float64(validity)))
	var accepted bool
	var werr error
	if left := a.Validity(); left > 0 {
		if ex.Pause {
			_ = sleep(ctx, time.Duration(t.x*float64(left)))
		}
		accepted, werr = l.write(ctx, t.key, count+1, "holder", a.FencingToken())
	}
	end := time.Now()
	close(done)
	_ = a.Release(context.WithoutCancel(ctx))
	ferr := <-fault
	c := <-contender
	if err := errors.Join(werr, ferr, c.err); err != nil {
		return trialOutcome{}, err
	}

	o := trialOutcome{overlap: c.acquired && c.at.Before(end)}
	if c.acquired && l.setup.Fenced {
		o.regression = c.token <= a.FencingToken()
	}
	final, writer, err := l.final(ctx, t.key)
	if err != nil {
		return trialOutcome{}, err
	}
	o.staleWrite = accepted && c.accepted && writer == "holder"
	o.lostUpdate = final < int64(b2i(accepted)+b2i(c.accepted))
	return o, nil
}

// hold takes the holder's lock: it tries for up to a second, as a holder
// retrying after a refusal would (after a crash the Client does not wait
// for a node until it has answered once).
func (l *labLane) hold(ctx context.Context, key string, ttl time.Duration) (*redlock.Lock, error) {
	l.reconnect(ctx)
	deadline := time.Now().Add(time.Second)
	for {
		a, err := l.a.TryAcquire(ctx, key, ttl, l.acquireOptions()...)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return a, err
		}
		_ = sleep(ctx, 5*time.Millisecond)
	}
}

// onEveryNode waits up to within for key to be on every node: the calls
// of an acquire that returned at a quorum land on the other nodes soon
// after (nobody else tries the trial's key yet).
func (l *labLane) onEveryNode(ctx context.Context, key string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		on := 0
		for _, nd := range l.nodes {
			if n, err := doOn(ctx, nd.Addr(), "EXISTS", key); err == nil && n == int64(1) {
				on++
			}
		}
		if on == len(l.nodes) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the holder's key reached %d of %d nodes within %v", on, len(l.nodes), within)
		}
		_ = sleep(ctx, 2*time.Millisecond)
	}
}

// contend tries the lock every 2 ms until it gets it or the holder is
// done; with the lock, it makes its own read-modify-write and releases.
func (l *labLane) contend(ctx context.Context, key string, ex *LabExperiment, holderDone <-chan struct{}) contended {
	for {
		select {
		case <-holderDone:
			return contended{}
		case <-ctx.Done():
			return contended{err: ctx.Err()}
		default:
		}
		if b, err := l.b.TryAcquire(ctx, key, ex.TTL, l.acquireOptions()...); err == nil {
			c := contended{acquired: true, at: time.Now(), token: b.FencingToken()}
			count, err := l.read(ctx, key, c.token)
			if err == nil && ex.ContenderWritesLast {
				select {
				case <-holderDone:
				case <-ctx.Done():
				}
			}
			if err == nil {
				c.accepted, err = l.write(ctx, key, count+1, "contender", c.token)
			}
			c.err = err
			_ = b.Release(context.WithoutCancel(ctx))
			return c
		}
		_ = sleep(ctx, 2*time.Millisecond)
	}
}

// The resource: a counter per trial on a redis-server of its own, never
// faulted, written as "count writer", through redlock.FencedSet when the
// setup is fenced, and read through redlock.FencedGet (under the reader's
// token) when the setup fences reads too; a refused read counts as 0 (the
// write that follows is refused as well).
func (l *labLane) read(ctx context.Context, key string, token uint64) (int64, error) {
	if l.setup.FencedRead {
		v, err := redlock.FencedGet(ctx, l.res, "resource:"+key, token)
		switch {
		case errors.Is(err, redis.Nil), errors.Is(err, redlock.ErrStaleToken):
			return 0, nil
		case err != nil:
			return 0, fmt.Errorf("chaos: the resource: %w", err)
		}
		count, _, _ := strings.Cut(v, " ")
		return strconv.ParseInt(count, 10, 64)
	}
	n, _, err := l.final(ctx, key)
	return n, err
}

func (l *labLane) final(ctx context.Context, key string) (int64, string, error) {
	v, err := l.res.Get(ctx, "resource:"+key).Result()
	if errors.Is(err, redis.Nil) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("chaos: the resource: %w", err)
	}
	count, writer, _ := strings.Cut(v, " ")
	n, err := strconv.ParseInt(count, 10, 64)
	return n, writer, err
}

func (l *labLane) write(ctx context.Context, key string, count int64, writer string, token uint64) (bool, error) {
	v := fmt.Sprintf("%d %s", count, writer)
	if !l.setup.Fenced {
		return true, l.res.Set(ctx, "resource:"+key, v, 0).Err()
	}
	err := redlock.FencedSet(ctx, l.res, "resource:"+key, v, token)
	if errors.Is(err, redlock.ErrStaleToken) {
		return false, nil
	}
	return err == nil, err
}

func (l *labLane) acquireOptions() []redlock.AcquireOption {
	if l.setup.Fenced {
		return []redlock.AcquireOption{redlock.WithFencing()}
	}
	return nil
}

// labLane is one setup's processes: the lock's nodes, the resource, and two
// lock Clients with go-redis clients of their own, as two processes have.
type labLane struct {
	setup   LabSetup
	dir     string
	nodes   []*Node  // the lock's nodes; with Failover, the master and its replica as first started
	clocks  []string // with FakeClock: each node's clock offset file
	offsets []float64
	// with Failover:
	sentinel *sentinelProc
	replLink *netLink // the replica's link to the master

	res    *redis.Client
	resNd  *Node
	a, b   *redlock.Client
	raw    []redis.UniversalClient // the go-redis clients under a and b
	closer []func()
}

// reconnect pings every node through the holder's and the contender's
// go-redis clients, so that connections a crash broke in the last trial
// are replaced before this one: a long-running process would have found
// out since.
func (l *labLane) reconnect(ctx context.Context) {
	for _, rdb := range l.raw {
		for range 2 {
			if rdb.Ping(ctx).Err() == nil {
				break
			}
		}
	}
}

// labClientOptions: no retries hidden in go-redis (the holder and the
// contender retry themselves), and a pool that does not stop dialing
// after a few failures (go-redis then tries once a second only, longer
// than a trial).
const labPoolSize = 1000

// labReplicaAck is the replica ack timeout of the setups WithReplicaAck.
const labReplicaAck = 100 * time.Millisecond

// sentinelMaster is the name the Sentinel monitors the failover pair under.
const sentinelMaster = "lab"

func startLane(ctx context.Context, dir string, setup LabSetup) (_ *labLane, err error) {
	ldir, err := os.MkdirTemp(dir, "lane-")
	if err != nil {
		return nil, err
	}
	l := &labLane{setup: setup, dir: ldir}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	if l.resNd, err = startNode(ldir, nodeSpec{kind: Redis}); err != nil {
		return nil, err
	}
	l.res = redis.NewClient(&redis.Options{Addr: l.resNd.Addr(), MaxRetries: -1})

	var nodesA, nodesB []redis.UniversalClient
	if setup.Failover {
		if err := l.startPair(ctx); err != nil {
			return nil, err
		}
		for range 2 {
			fc := redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: sentinelMaster, SentinelAddrs: []string{l.sentinel.addr()}, MaxRetries: -1, PoolSize: labPoolSize,
			})
			l.raw = append(l.raw, fc)
			l.closer = append(l.closer, func() { _ = fc.Close() })
			if nodesA == nil {
				nodesA = []redis.UniversalClient{fc}
			} else {
				nodesB = []redis.UniversalClient{fc}
			}
		}
	} else {
		for i := range setup.Nodes {
			spec := nodeSpec{kind: Redis, fsync: setup.Fsync}
			if setup.FakeClock {
				spec.clock = filepath.Join(ldir, fmt.Sprintf("clock-%d", i))
				if err := setClockOffset(spec.clock, 0); err != nil {
					return nil, err
				}
				l.clocks = append(l.clocks, spec.clock)
				l.offsets = append(l.offsets, 0)
			}
			n, err := startNode(ldir, spec)
			if err != nil {
				return nil, err
			}
			l.nodes = append(l.nodes, n)
			for _, side := range []*[]redis.UniversalClient{&nodesA, &nodesB} {
				rdb := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1, PoolSize: labPoolSize})
				l.closer = append(l.closer, func() { _ = rdb.Close() })
				l.raw = append(l.raw, rdb)
				*side = append(*side, rdb)
			}
		}
	}
	opts := []redlock.Option{quietLog}
	if setup.ReplicaAck {
		opts = append(opts, redlock.WithReplicaAck(1, labReplicaAck))
	}
	if l.a, err = redlock.New(nodesA, opts...); err != nil {
		return nil, err
	}
	if l.b, err = redlock.New(nodesB, opts...); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *labLane) close() {
	for _, c := range l.closer {
		c()
	}
	if l.res != nil {
		_ = l.res.Close()
	}
	if l.sentinel != nil {
		l.sentinel.stop()
	}
	if l.replLink != nil {
		l.replLink.close()
	}
	for _, n := range append(l.nodes, l.resNd) {
		if n != nil {
			n.stop()
		}
	}
	_ = os.RemoveAll(l.dir)
}

// crash kills the nodes idx with SIGKILL, waits d, and starts them again:
// with their append-only file when the setup persists, else empty.
func (l *labLane) crash(ctx context.Context, idx []int, d time.Duration) error {
	var errs []error
	for _, i := range idx {
		errs = append(errs, l.nodes[i].kill())
	}
	_ = sleep(context.WithoutCancel(ctx), d)
	var wg sync.WaitGroup
	starts := make([]error, len(idx))
	for j, i := range idx {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := l.nodes[i]
			if l.setup.Fsync == "" {
				if starts[j] = n.wipe(); starts[j] != nil {
					return
				}
			}
			starts[j] = n.start()
		}()
	}
	wg.Wait()
	return errors.Join(append(errs, starts...)...)
}

// jump moves the clocks of nodes idx forward by d: for real under
// libfaketime, or else by taking d off every key's time to live, as a
// forward step of the node's clock does to Redis's expiries.
func (l *labLane) jump(ctx context.Context, idx []int, d time.Duration) error {
	var errs []error
	for _, i := range idx {
		if l.setup.FakeClock {
			l.offsets[i] += d.Seconds()
			errs = append(errs, setClockOffset(l.clocks[i], l.offsets[i]))
		} else {
			errs = append(errs, l.nodes[i].jumpClock(ctx, d))
		}
	}
	return errors.Join(errs...)
}

// pick returns k distinct node indexes at random.
func (t *trial) pick(k int) []int { return t.rng.Perm(len(t.lane.nodes))[:k] }

// master returns the index in l.nodes of the pair's master as the Sentinel
// names it now.
func (l *labLane) master(ctx context.Context) (int, error) {
	addr, err := l.sentinel.masterAddr(ctx)
	if err != nil {
		return 0, err
	}
	for i, n := range l.nodes {
		if n.Addr() == addr {
			return i, nil
		}
	}
	return 0, fmt.Errorf("chaos: the Sentinel names %s as master, not a node of the pair", addr)
}

// startPair starts the failover pair: a master, a replica that replicates
// through a link (replication lag is injected there) and a Sentinel, and
// waits until the Sentinel knows the replica.
func (l *labLane) startPair(ctx context.Context) error {
	spec := nodeSpec{kind: Redis, fsync: l.setup.Fsync}
	m, err := startNode(l.dir, spec)
	if err != nil {
		return err
	}
	l.nodes = append(l.nodes, m)
	toxi := newToxiServer()
	if l.replLink, err = newLink(toxi, "replication", m.Addr()); err != nil {
		return err
	}
	spec.replica = l.replLink.Addr()
	r, err := startNode(l.dir, spec)
	if err != nil {
		return err
	}
	l.nodes = append(l.nodes, r)
	if err := waitReplicating(ctx, r.Addr()); err != nil {
		return err
	}
	if l.sentinel, err = startSentinel(l.dir, m.Addr()); err != nil {
		return err
	}
	return l.sentinel.waitReplica(ctx)
}

// sentinelProc is a redis-sentinel process monitoring one master.
type sentinelProc struct {
	port   int
	cmd    *exec.Cmd
	exited chan struct{}
}

func sentinelMissing() string {
	if _, err := exec.LookPath("redis-sentinel"); err != nil {
		return "no redis-sentinel (apt-get install redis-sentinel)"
	}
	return ""
}

func startSentinel(dir, master string) (*sentinelProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	host, mport, _ := strings.Cut(master, ":")
	conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", port))
	text := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
daemonize no
dir %s
sentinel monitor %s %s %s 1
sentinel down-after-milliseconds %[3]s 100
sentinel failover-timeout %[3]s 2000
`, port, dir, sentinelMaster, host, mport)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("redis-sentinel", conf)
	logf, err := os.Create(conf + ".log")
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("chaos: starting redis-sentinel: %w", err)
	}
	s := &sentinelProc{port: port, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	if err := waitPing(s.addr(), s.exited, 10*time.Second); err != nil {
		s.stop()
		return nil, fmt.Errorf("chaos: redis-sentinel: %w", err)
	}
	return s, nil
}

func (s *sentinelProc) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

func (s *sentinelProc) stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
}

func (s *sentinelProc) masterAddr(ctx context.Context) (string, error) {
	v, err := doOn(ctx, s.addr(), "SENTINEL", "get-master-addr-by-name", sentinelMaster)
	if err != nil {
		return "", fmt.Errorf("chaos: asking the Sentinel for the master: %w", err)
	}
	hp, ok := v.([]any)
	if !ok || len(hp) != 2 {
		return "", fmt.Errorf("chaos: the Sentinel answered %v for the master", v)
	}
	return fmt.Sprintf("%v:%v", hp[0], hp[1]), nil
}

// waitReplica waits until the Sentinel lists a replica that is up.
func (s *sentinelProc) waitReplica(ctx context.Context) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		v, err := doOn(ctx, s.addr(), "SENTINEL", "replicas", sentinelMaster)
		if rs, ok := v.([]any); err == nil && ok && len(rs) > 0 && !strings.Contains(fmt.Sprint(rs), "s_down") {
			return nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return errors.New("chaos: the Sentinel did not find the replica")
}

// waitFailover waits until the Sentinel names a master other than old.
func (s *sentinelProc) waitFailover(ctx context.Context, old string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if addr, err := s.masterAddr(ctx); err == nil && addr != old {
			return nil
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("chaos: the Sentinel did not promote the replica within %v", within)
}
