package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/internal/embedded"
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
(embedded nodes are closed; real ones are frozen with CLIENT PAUSE for
--fail-for). The exit status is 0 when every item was sold exactly once.

Flags:
`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", demoHelp, stderr)
	// Not REDLOCK_ADDRS: the demo freezes the nodes it is given, and the
	// variable names the nodes of real jobs (redlock exec). Real servers
	// only when named here.
	addrs := fs.String("addrs", "", "comma-separated Redis masters to run on instead of embedded nodes; "+
		"the demo writes keys there and freezes --fail of them with CLIENT PAUSE (REDLOCK_ADDRS is not read)")
	cfg := demoConfig{}
	fs.IntVar(&cfg.nodes, "nodes", 5, "number of embedded nodes (ignored with --addrs)")
	fs.IntVar(&cfg.stock, "stock", 100, "items for sale")
	fs.IntVar(&cfg.buyers, "buyers", 32, "concurrent buyers, each with its own lock client")
	fs.IntVar(&cfg.fail, "fail", -1, "nodes to fail partway through (default: a minority, (N-1)/2)")
	fs.IntVar(&cfg.failAfter, "fail-after", 40, "fail the nodes once this many items are sold")
	fs.DurationVar(&cfg.failFor, "fail-for", 10*time.Second, "how long real nodes stay frozen (embedded nodes stay closed)")
	fs.DurationVar(&cfg.ttl, "ttl", time.Second, "lock ttl")
	fs.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "give up if the sale has not ended by then")
	fs.BoolVar(&cfg.noLock, "no-lock", false, "sell without the lock, to see what the lock prevents")
	if exit, ok := parseFlags(fs, args); !ok {
		return exit
	}
	cfg.addrs = splitAddrs(*addrs)
	if len(cfg.addrs) > 0 {
		cfg.nodes = len(cfg.addrs)
	}
	if cfg.fail == -1 {
		cfg.fail = (cfg.nodes - 1) / 2 // the most the quorum survives
	}
	if err := cfg.check(); err != nil {
		fmt.Fprintf(stderr, "redlock demo: %v\n", err)
		return 2
	}

	nodes, err := startNodes(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "redlock demo: %v\n", err)
		return 1
	}
	defer nodes.stop()

	rep, err := flashSale(ctx, cfg, nodes, stderr)
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
	case c.nodes < 1:
		return fmt.Errorf("--nodes %d: need at least one node", c.nodes)
	case c.stock < 1:
		return fmt.Errorf("--stock %d: need at least one item", c.stock)
	case c.buyers < 1:
		return fmt.Errorf("--buyers %d: need at least one buyer", c.buyers)
	case c.fail < 0 || c.fail > c.nodes:
		return fmt.Errorf("--fail %d: must be between 0 and the %d nodes", c.fail, c.nodes)
	case c.failAfter < 0 || c.failAfter > c.stock:
		return fmt.Errorf("--fail-after %d: must be between 0 and the stock of %d", c.failAfter, c.stock)
	case c.failFor <= 0:
		return fmt.Errorf("--fail-for %v: must be positive", c.failFor)
	case c.ttl <= 0:
		return fmt.Errorf("--ttl %v: must be positive", c.ttl)
	case c.timeout <= 0:
		return fmt.Errorf("--timeout %v: must be positive", c.timeout)
	}
	return nil
}

// demoNodes are the lock nodes: embedded ones started here, or real servers.
type demoNodes struct {
	addrs    []string
	embedded []*embedded.Node // nil for real servers
}

func startNodes(cfg demoConfig) (*demoNodes, error) {
	if len(cfg.addrs) > 0 {
		return &demoNodes{addrs: cfg.addrs}, nil
	}
	d := &demoNodes{}
	for range cfg.nodes {
		s, err := embedded.Start()
		if err != nil {
			d.stop()
			return nil, fmt.Errorf("starting an embedded node: %w", err)
		}
		d.embedded = append(d.embedded, s)
		d.addrs = append(d.addrs, s.Addr())
	}
	return d, nil
}

func (d *demoNodes) kind() string {
	if d.embedded != nil {
		return "embedded"
	}
	return "redis-server"
}

// fail makes node i stop answering: an embedded node is closed; a real one
// is frozen with CLIENT PAUSE, which it lifts by itself after failFor.
func (d *demoNodes) fail(ctx context.Context, i int, failFor time.Duration) error {
	if d.embedded != nil {
		d.embedded[i].Close()
		return nil
	}
	admin := redis.NewClient(&redis.Options{Addr: d.addrs[i]})
	defer admin.Close()
	return admin.Do(ctx, "CLIENT", "PAUSE", failFor.Milliseconds(), "ALL").Err()
}

// connect returns new connections to every node, as a separate process
// would open them.
func (d *demoNodes) connect() ([]redis.UniversalClient, func()) {
	clients := make([]redis.UniversalClient, len(d.addrs))
	for i, a := range d.addrs {
		// The lock enforces its own per-node timeout; a late reply is read
		// by the call that sent it, so the connection is kept (see
		// docs/algorithm.md on client settings).
		clients[i] = redis.NewClient(&redis.Options{
			Addr: a, MaxRetries: -1, DialerRetries: 1,
			ReadTimeout: time.Second, WriteTimeout: time.Second,
		})
	}
	return clients, func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
}

func (d *demoNodes) stop() {
	for _, s := range d.embedded {
		s.Close()
	}
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
	sold         int64
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
	lock := fmt.Sprintf("quorum lock on %d %s nodes (quorum %d)", r.cfg.nodes, r.kind, r.quorum)
	if r.cfg.noLock {
		lock = "no lock"
	}
	fmt.Fprintf(w, "flash sale: %d items, %d buyers, %s\n", r.cfg.stock, r.cfg.buyers, lock)
	if len(r.failedNodes) > 0 {
		fmt.Fprintf(w, "  nodes %v failed after %d sales\n", r.failedNodes, r.cfg.failAfter)
	}
	fmt.Fprintf(w, "  sold                 %6d\n", r.sold)
	fmt.Fprintf(w, "  stock left           %6d\n", r.left)
	fmt.Fprintf(w, "  oversold             %6d\n", r.oversold())
	fmt.Fprintf(w, "  sold after failures  %6d\n", r.afterFailure)
	fmt.Fprintf(w, "  locks lost           %6d\n", r.lost)
	fmt.Fprintf(w, "  elapsed              %6.2fs\n", r.elapsed.Seconds())
	switch {
	case r.ok() && len(r.failedNodes) > 0:
		fmt.Fprintf(w, "OK: every item sold exactly once, through %d node failures\n", len(r.failedNodes))
	case r.ok():
		fmt.Fprintln(w, "OK: every item sold exactly once")
	case r.oversold() != 0:
		fmt.Fprintf(w, "FAIL: %d items sold twice\n", r.oversold())
	default:
		fmt.Fprintln(w, "FAIL: the sale did not finish")
	}
}

func flashSale(ctx context.Context, cfg demoConfig, nodes *demoNodes, progress io.Writer) (saleReport, error) {
	rep := saleReport{cfg: cfg, kind: nodes.kind(), quorum: len(nodes.addrs)/2 + 1}
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
			for i := len(nodes.addrs) - cfg.fail; i < len(nodes.addrs); i++ {
				errs = append(errs, nodes.fail(ctx, i, cfg.failFor))
				rep.failedNodes = append(rep.failedNodes, i)
			}
			failedAt.Store(true)
			failDone <- errors.Join(errs...)
		}()
	}
	if cfg.fail > 0 && cfg.failAfter == 0 {
		failOnce.Do(failNodes)
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
		if !cfg.noLock {
			var err error
			if lock, err = locker.Acquire(ctx, saleKey, cfg.ttl); err != nil {
				return false, err
			}
			defer func() {
				if err := lock.Release(context.Background()); errors.Is(err, redlock.ErrLockLost) {
					lost.Add(1)
				}
			}()
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

	start := time.Now()
	var (
		wg   sync.WaitGroup
		errs = make(chan error, cfg.buyers)
	)
	// A live line on stderr: sales so far, nodes down, time.
	stopProgress := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		line := func() {
			down := 0
			if failedAt.Load() {
				down = cfg.fail
			}
			fmt.Fprintf(progress, "\r  sold %d/%d  nodes down %d/%d  %.1fs ", sold.Load(), cfg.stock, down, len(nodes.addrs), time.Since(start).Seconds())
		}
		for {
			select {
			case <-t.C:
				line()
			case <-stopProgress:
				line()
				fmt.Fprintln(progress)
				return
			}
		}
	}()
	for range cfg.buyers {
		clients, closeClients := nodes.connect()
		locker, err := redlock.New(clients)
		if err != nil {
			closeClients()
			return rep, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer closeClients()
			for {
				more, err := buy(locker)
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
