package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/redistest"
)

const saleKey = "flash-sale:stock"

type demoConfig struct {
	addrs     []string
	nodes     int
	stock     int
	buyers    int
	fail      int
	failAfter int
	failFor   time.Duration
	ttl       time.Duration
	timeout   time.Duration
	noLock    bool
}

const demoHelp = `Usage: redlock demo [flags]

A flash sale: buyers, each its own lock client as separate processes would
be, take the lock, read the stock, pause, and write it back one lower. A
read and a write apart are only safe under mutual exclusion: an item sold
twice shows as "oversold". Partway through, --fail nodes stop answering
(embedded nodes are closed). The exit status is 0 when every item was sold
exactly once, 1 when not, 130 or 143 when interrupted.

Without --addrs the nodes are embedded in this process. With --addrs (and
only then: REDLOCK_ADDRS is not read) the demo runs on those servers: it
takes and releases its lock key there (flash-sale:stock, with a TTL of
--ttl), and freezes --fail of them for lock writes with CLIENT PAUSE WRITE
for at most --fail-for, lifted with CLIENT UNPAUSE as soon as the sale
ends, whatever ends it. It says so before it starts.

Flags:
`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", demoHelp, stdout, stderr)
	// Not REDLOCK_ADDRS: the demo freezes the nodes it is given, and the
	// variable names the nodes of real jobs (redlock exec). Real servers
	// only when named here.
	nf := registerNodeFlagsHelp(fs.FlagSet, "", "comma-separated Redis masters to run on instead of embedded nodes, "+
		"each host:port or a redis:// or rediss:// URL; the demo takes its lock key there and freezes --fail of them "+
		"with CLIENT PAUSE WRITE (REDLOCK_ADDRS is not read)")
	cfg := demoConfig{}
	fs.IntVar(&cfg.nodes, "nodes", 5, "number of embedded nodes (with --addrs, the addresses given)")
	fs.IntVar(&cfg.stock, "stock", 100, "items for sale")
	fs.IntVar(&cfg.buyers, "buyers", 32, "concurrent buyers, each with its own lock client")
	fs.IntVar(&cfg.fail, "fail", 0, "nodes to fail partway through (default: a minority, (N-1)/2, the most the quorum survives)")
	fs.IntVar(&cfg.failAfter, "fail-after", 40, "fail the nodes once this many items are sold (0: from the start)")
	fs.DurationVar(&cfg.failFor, "fail-for", 10*time.Second, "the longest real nodes stay frozen (they are unpaused when the sale ends)")
	fs.DurationVar(&cfg.ttl, "ttl", time.Second, "lock ttl")
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "give up if the sale has not ended by then")
	fs.BoolVar(&cfg.noLock, "no-lock", false, "sell without the lock (and without nodes), to see what the lock prevents")
	if exit, ok := fs.parse(args, noArgs); !ok {
		return exit
	}
	err := errors.Join(fs.positive("nodes", "stock", "buyers", "fail-for", "ttl", "timeout"),
		fs.notNegative("fail", "fail-after"))
	if err != nil {
		fmt.Fprintf(stderr, "redlock demo: %v\n", err)
		return 2
	}
	cfg.addrs = nf.addrList()
	if len(cfg.addrs) > 0 {
		if fs.isSet("nodes") && cfg.nodes != len(cfg.addrs) {
			fmt.Fprintf(stderr, "redlock demo: --nodes %d but --addrs names %d servers\n", cfg.nodes, len(cfg.addrs))
			return 2
		}
		cfg.nodes = len(cfg.addrs)
	}
	if !fs.isSet("fail") {
		cfg.fail = (cfg.nodes - 1) / 2 // the most the quorum survives
	}
	if cfg.noLock {
		cfg.fail, cfg.addrs = 0, nil // nothing to fail, no server touched
	}
	if err := cfg.check(); err != nil {
		fmt.Fprintf(stderr, "redlock demo: %v\n", err)
		return 2
	}

	var nodes *demoNodes
	if !cfg.noLock {
		if nodes, err = startNodes(cfg, nf); err != nil {
			fmt.Fprintf(stderr, "redlock demo: %v\n", err)
			if errors.Is(err, errConfig) {
				return exitConfig
			}
			return 1
		}
		defer nodes.stop(stderr)
		nodes.announce(stderr, cfg)
	}

	rep, err := flashSale(ctx, cfg, nodes, stderr)
	if s, ok := interruptedBy(ctx); ok {
		rep.print(stdout)
		fmt.Fprintf(stderr, "redlock demo: interrupted (%v)\n", s)
		return 128 + int(s)
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock demo: %v\n", err)
	}
	rep.print(stdout)
	if err != nil || !rep.ok() {
		return 1
	}
	return 0
}

func (c demoConfig) check() error {
	switch {
	case c.fail > c.nodes:
		return fmt.Errorf("--fail %d: there are only %d nodes", c.fail, c.nodes)
	case c.failAfter > c.stock:
		return fmt.Errorf("--fail-after %d: must be at most the stock of %d", c.failAfter, c.stock)
	}
	return nil
}

// demoNodes are the lock nodes: embedded ones started here, or real servers.
type demoNodes struct {
	addrs    []string          // as given: printed redacted
	opts     []*redis.Options  // how to reach each node
	embedded []*redistest.Node // nil for real servers

	mu     sync.Mutex
	paused []int // real nodes paused, to unpause
}

func startNodes(cfg demoConfig, nf *nodeFlags) (*demoNodes, error) {
	if len(cfg.addrs) > 0 {
		opts, err := nf.options(time.Second)
		if err != nil {
			return nil, err
		}
		return &demoNodes{addrs: cfg.addrs, opts: opts}, nil
	}
	d := &demoNodes{}
	for range cfg.nodes {
		s, err := redistest.Start()
		if err != nil {
			d.stop(io.Discard)
			return nil, fmt.Errorf("starting an embedded node: %w", err)
		}
		d.embedded = append(d.embedded, s)
		d.addrs = append(d.addrs, s.Addr())
		d.opts = append(d.opts, &redis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1,
			ReadTimeout: time.Second, WriteTimeout: time.Second})
	}
	return d, nil
}

func (d *demoNodes) kind() string {
	if d.embedded != nil {
		return "embedded"
	}
	return "redis-server"
}

// failing returns the nodes the demo fails: the last cfg.fail.
func (d *demoNodes) failing(cfg demoConfig) []int {
	var idx []int
	for i := len(d.addrs) - cfg.fail; i < len(d.addrs); i++ {
		idx = append(idx, i)
	}
	return idx
}

// announce says, before the sale, what the demo will do to real servers.
func (d *demoNodes) announce(w io.Writer, cfg demoConfig) {
	if d.embedded != nil {
		return
	}
	var names, failing []string
	for _, a := range d.addrs {
		names = append(names, redact(a))
	}
	for _, i := range d.failing(cfg) {
		failing = append(failing, redact(d.addrs[i]))
	}
	fmt.Fprintf(w, "redlock demo: running on %d real servers: %s\n", len(d.addrs), strings.Join(names, ", "))
	fmt.Fprintf(w, "  it takes and releases the lock key %q on each (ttl %v);\n", saleKey, cfg.ttl)
	if len(failing) > 0 {
		fmt.Fprintf(w, "  after %d sales it freezes lock writes on %s with CLIENT PAUSE WRITE for at most %v,\n"+
			"  and unpauses them (CLIENT UNPAUSE) as soon as the sale ends\n", cfg.failAfter, strings.Join(failing, ", "), cfg.failFor)
	}
}

// fail makes node i stop answering lock calls: an embedded node is
// closed; a real one is paused for writes (lock scripts write), which it
// lifts by itself after failFor if the demo cannot unpause it.
func (d *demoNodes) fail(ctx context.Context, i int, failFor time.Duration) error {
	if d.embedded != nil {
		d.embedded[i].Close()
		return nil
	}
	admin := d.client(i)
	defer admin.Close()
	d.mu.Lock()
	d.paused = append(d.paused, i) // before: an interrupted call may still pause it
	d.mu.Unlock()
	// Not ctx: a pause sent must be known to have landed before the
	// demo unpauses.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := admin.Do(ctx, "CLIENT", "PAUSE", failFor.Milliseconds(), "WRITE").Err()
	if err != nil {
		return fmt.Errorf("node %d (%s): CLIENT PAUSE: %w", i, redact(d.addrs[i]), err)
	}
	return nil
}

// client returns a new client of node i, as a separate process would open.
func (d *demoNodes) client(i int) *redis.Client {
	o := *d.opts[i]
	return redis.NewClient(&o)
}

// connect returns new connections to every node, as a separate process
// would open them.
func (d *demoNodes) connect() ([]redis.UniversalClient, func()) {
	clients := make([]redis.UniversalClient, len(d.addrs))
	for i := range d.addrs {
		clients[i] = d.client(i)
	}
	return clients, func() { closeAll(clients) }
}

// stop closes the embedded nodes, and unpauses the real ones the demo
// paused, reporting on w any it could not.
func (d *demoNodes) stop(w io.Writer) {
	for _, s := range d.embedded {
		s.Close()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, i := range d.paused {
		admin := d.client(i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
			fmt.Fprintf(w, "redlock demo: could not unpause node %d (%s): %v; its pause ends by itself\n", i, redact(d.addrs[i]), err)
		}
		cancel()
		_ = admin.Close()
	}
	d.paused = nil
}

// stockStore is the resource the lock protects, kept outside the lock
// nodes. Its read and write are separate steps, like a GET and a SET: two
// buyers between them sell the same item twice.
type stockStore struct{ v atomic.Int64 }

func (s *stockStore) read() int64   { return s.v.Load() }
func (s *stockStore) write(v int64) { s.v.Store(v) }

type saleReport struct {
	cfg          demoConfig
	kind         string
	quorum       int
	sold         int64 // sales recorded: a buyer wrote the stock one lower
	left         int64
	afterFailure int64 // items sold after the nodes failed
	failedNodes  []int
	lost         int64 // releases that found the lock lost
	elapsed      time.Duration
}

// oversold counts the sales that the stock did not record: items sold twice.
func (r saleReport) oversold() int64 { return r.sold - (int64(r.cfg.stock) - r.left) }

func (r saleReport) ok() bool {
	return r.oversold() == 0 && r.left == 0 && r.sold == int64(r.cfg.stock)
}

func (r saleReport) print(w io.Writer) {
	if r.cfg.noLock {
		r.printNoLock(w)
		return
	}
	fmt.Fprintf(w, "flash sale: %d items, %d buyers, quorum lock on %d %s nodes (quorum %d)\n",
		r.cfg.stock, r.cfg.buyers, r.cfg.nodes, r.kind, r.quorum)
	if len(r.failedNodes) > 0 {
		fmt.Fprintf(w, "  nodes %v failed after %d sales\n", r.failedNodes, r.cfg.failAfter)
	}
	fmt.Fprintf(w, "  sold                 %6d\n", r.sold)
	fmt.Fprintf(w, "  stock left           %6d\n", r.left)
	fmt.Fprintf(w, "  oversold             %6d\n", r.oversold())
	if len(r.failedNodes) > 0 {
		fmt.Fprintf(w, "  sold after failures  %6d\n", r.afterFailure)
	}
	fmt.Fprintf(w, "  locks lost           %6d\n", r.lost)
	fmt.Fprintf(w, "  elapsed              %6.2fs\n", r.elapsed.Seconds())
	switch {
	case r.ok() && len(r.failedNodes) > 0:
		fmt.Fprintf(w, "OK: every item sold exactly once, through %d of %d nodes failing\n", len(r.failedNodes), r.cfg.nodes)
	case r.ok():
		fmt.Fprintln(w, "OK: every item sold exactly once")
	case r.oversold() != 0:
		fmt.Fprintf(w, "FAIL: %d items sold twice\n", r.oversold())
	default:
		fmt.Fprintln(w, "FAIL: the sale did not finish")
	}
}

// printNoLock reports a sale without the lock: sales against items, and
// how many sales were of an item already sold.
func (r saleReport) printNoLock(w io.Writer) {
	fmt.Fprintf(w, "flash sale: %d items, %d buyers, no lock (no nodes used)\n", r.cfg.stock, r.cfg.buyers)
	fmt.Fprintf(w, "  sales made           %6d  for %d items\n", r.sold, r.cfg.stock)
	fmt.Fprintf(w, "  stock left           %6d\n", r.left)
	fmt.Fprintf(w, "  oversold             %6d  (sales of an item already sold)\n", r.oversold())
	fmt.Fprintf(w, "  elapsed              %6.2fs\n", r.elapsed.Seconds())
	switch {
	case r.ok():
		fmt.Fprintln(w, "OK: every item sold exactly once, this time (without the lock nothing makes it so)")
	case r.oversold() > 0:
		fmt.Fprintf(w, "FAIL: %d of %d sales were of an item already sold: buyers read the same stock and overwrote each other's sale\n",
			r.oversold(), r.sold)
	default:
		fmt.Fprintln(w, "FAIL: the sale did not finish")
	}
}

// progressLine is the demo's status line: sales so far, and nodes down.
func progressLine(cfg demoConfig, sold int64, left int64, down int, elapsed time.Duration) string {
	if cfg.noLock {
		return fmt.Sprintf("  sales %d  stock left %d of %d  %.1fs", sold, left, cfg.stock, elapsed.Seconds())
	}
	return fmt.Sprintf("  sold %d/%d  nodes down %d/%d  %.1fs", sold, cfg.stock, down, cfg.nodes, elapsed.Seconds())
}

func flashSale(ctx context.Context, cfg demoConfig, nodes *demoNodes, progressTo io.Writer) (saleReport, error) {
	rep := saleReport{cfg: cfg, quorum: cfg.nodes/2 + 1}
	if nodes != nil {
		rep.kind = nodes.kind()
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	var store stockStore
	store.write(int64(cfg.stock))
	var (
		sold, afterFailure, lost atomic.Int64
		failedAt                 atomic.Bool
		failOnce                 sync.Once
		failDone                 = make(chan error, 1)
	)
	failNodes := func() {
		go func() {
			var errs []error
			for _, i := range nodes.failing(cfg) {
				errs = append(errs, nodes.fail(ctx, i, cfg.failFor))
				rep.failedNodes = append(rep.failedNodes, i)
			}
			failedAt.Store(true)
			failDone <- errors.Join(errs...)
		}()
	}
	recordSale := func() {
		if failedAt.Load() {
			afterFailure.Add(1)
		}
		if n := sold.Add(1); cfg.fail > 0 && n == int64(cfg.failAfter) {
			failOnce.Do(failNodes)
		}
	}

	// buy sells one item under the lock; it reports false once sold out.
	buy := func(locker *redlock.Client) (bool, error) {
		var lock *redlock.Lock
		if locker != nil {
			var err error
			if lock, err = locker.Acquire(ctx, saleKey, cfg.ttl); err != nil {
				return false, err
			}
			defer func() {
				if err := lock.Release(context.Background()); errors.Is(err, redlock.ErrLockLost) {
					lost.Add(1)
				}
			}()
		} else if ctx.Err() != nil {
			return false, ctx.Err()
		}
		left := store.read()
		if left <= 0 {
			return false, nil
		}
		time.Sleep(time.Duration(rand.N(500)) * time.Microsecond) // the work between read and write
		if lock != nil && lock.Validity() == 0 {
			return true, nil // too late to write safely: try again
		}
		store.write(left - 1)
		recordSale()
		return true, nil
	}

	// Each buyer its own lock client, as separate processes would have.
	lockers := make([]*redlock.Client, cfg.buyers)
	closers := make([]func(), cfg.buyers)
	for b := range cfg.buyers {
		closers[b] = func() {}
		if nodes == nil {
			continue
		}
		var clients []redis.UniversalClient
		clients, closers[b] = nodes.connect()
		var err error
		if lockers[b], err = redlock.New(clients); err != nil {
			for _, c := range closers[:b+1] {
				c()
			}
			return rep, err
		}
	}
	start := time.Now()
	var (
		wg   sync.WaitGroup
		errs = make(chan error, cfg.buyers)
	)
	// A status line on stderr: sales so far, nodes down, time.
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		p := newProgress(progressTo)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		line := func() string {
			down := 0
			if failedAt.Load() {
				down = cfg.fail
			}
			return progressLine(cfg, sold.Load(), store.read(), down, time.Since(start))
		}
		for {
			select {
			case <-t.C:
				p.update(line())
			case <-stopProgress:
				p.done(line())
				return
			}
		}
	}()
	if cfg.fail > 0 && cfg.failAfter == 0 {
		failOnce.Do(failNodes)
	}
	for b := range cfg.buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer closers[b]()
			for {
				more, err := buy(lockers[b])
				if err != nil {
					errs <- err
					return
				}
				if !more {
					return
				}
			}
		}()
	}
	wg.Wait()
	rep.elapsed = time.Since(start)
	close(stopProgress)
	<-progressDone
	close(errs)
	failOnce.Do(func() { failDone <- nil }) // the sale ended before the failure point

	var saleErr error
	if err := <-errs; err != nil {
		saleErr = fmt.Errorf("a buyer gave up: %w", err)
	}
	if err := <-failDone; err != nil {
		saleErr = errors.Join(saleErr, fmt.Errorf("failing nodes: %w", err))
	}
	rep.sold, rep.left = sold.Load(), store.read()
	rep.afterFailure, rep.lost = afterFailure.Load(), lost.Load()
	return rep, saleErr
}
