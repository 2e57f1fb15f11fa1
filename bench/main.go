// Command bench compares this library with go-redsync/redsync,
// bsm/redislock and rueidis' rueidislock, and with plain go-redis floors, against real redis-server
// processes that it starts and stops itself on loopback. The cases run in
// interleaved rounds, so that the machine's noise spreads over all of them.
//
//	cd bench && go run . [-rounds 5] [-slice 1s] [-json results.json] [-svg chart.svg]
//	cd bench && go run . -chart-from results.json -svg chart.svg   # redraws the chart only
//	cd bench && go run . -probe wait|leftovers|renewal|handover [-size N] [-hold 1m]
//	cd bench && go run . -probe slownet|starved|deadlines|handoff [-runs N] [-cases REGEXP]
//	cd bench && go run . -probe wakeups [-runs N] [-cases REGEXP]
//	cd bench && go run . -probe election [-runs N]
//
// The first probes measure what a workload costs the nodes and the process
// (probes.go); the others reproduce liveness defects at the edges, beside
// redsync and bsm/redislock on the same schedule (edges.go); the last
// measures whether waiters hear the releases they wait for, per lock kind
// (wakeups.go).
//
// Workloads:
//
//	U  one goroutine, a new key each time, lock+unlock: p50, p99, ops/s
//	K  16 goroutines, a key each, lock+unlock: ops/s
//	C  16 goroutines on one key, each critical section a GET and a SET of a
//	   counter on a separate server (checked: counter = sections), in one
//	   client and in 4: sections/s, p99 wait, max/min share, attempts/section
//
// It is a separate module so that the comparison libraries never enter the
// library's own module graph.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/chaos"
)

const (
	ttl        = 2 * time.Second
	goroutines = 16
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == starvedChildFlag {
		os.Exit(starvedChild(os.Args[2:]))
	}
	rounds := flag.Int("rounds", 5, "interleaved rounds; every case runs once per round")
	slice := flag.Duration("slice", time.Second, "how long each case runs in each round")
	jsonPath := flag.String("json", "", "write the results as JSON to this file")
	svgPath := flag.String("svg", "", "write a chart of throughput against N to this SVG file")
	workloads := flag.String("workloads", "UKC", "which workloads to run")
	only := flag.String("cases", "", "run only the cases (with an edge probe, the rows \"scenario library\"; with wakeups, the rows) whose name matches this regular expression")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	probe := flag.String("probe", "", "run a probe instead of the workloads: wait, leftovers, renewal or handover (see probes.go); slownet, starved, deadlines or handoff (see edges.go); wakeups (see wakeups.go); election (see elect.go); paired (see paired.go)")
	size := flag.Int("size", 1000, "the probe's size: waiters (wait), distinct keys (leftovers), held locks (renewal) or clients (handover)")
	runs := flag.Int("runs", 0, "the edge probes' runs per scenario and library, deadline-free calls for deadlines, trials per row for wakeups (0: slownet 5, starved 10, deadlines 200, handoff 10, wakeups 1000)")
	hold := flag.Duration("hold", time.Minute, "how long the renewal probe holds its locks")
	deadlines := flag.Bool("deadlines", false, "give every library's go-redis clients ContextTimeoutEnabled and PoolSize 64 rather than go-redis's defaults")
	chartFrom := flag.String("chart-from", "", "draw the -svg chart from this -json file of an earlier run, and run nothing")
	flag.Parse()
	if *chartFrom != "" {
		if err := redraw(*chartFrom, *svgPath); err != nil {
			log.Fatalf("bench: %v", err)
		}
		return
	}
	match, err := regexp.Compile(*only)
	if err != nil {
		log.Fatalf("bench: -cases: %v", err)
	}
	if *rounds < 1 || *slice <= 0 || *size < 1 || *hold <= 0 || *runs < 0 {
		log.Fatal("bench: -rounds and -size must be at least 1, -slice and -hold positive, -runs not negative")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		log.Fatal("bench: needs redis-server (apt-get install redis-server)")
	}
	redis.SetLogger(quiet{})
	slog.SetDefault(slog.New(slog.DiscardHandler)) // the lock Clients log the failures the probes cause on purpose

	dir, err := os.MkdirTemp("", "redlock-bench-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var nodes []*chaos.Node
	defer func() {
		for _, n := range nodes {
			n.Stop()
		}
	}()
	for range 6 { // 5 lock nodes and the counter's store
		n, err := chaos.StartNode(dir, chaos.Redis)
		if err != nil {
			log.Print(err)
			return
		}
		nodes = append(nodes, n)
	}
	env := &benchEnv{store: nodes[5].Addr(), deadlines: *deadlines}
	for _, n := range nodes[:5] {
		env.addrs = append(env.addrs, n.Addr())
	}
	if *probe != "" {
		cfg := probeConfig{size: *size, hold: *hold, runs: *runs, cases: match}
		if err := runProbe(context.Background(), os.Stdout, env, *probe, cfg); err != nil {
			log.Print(err)
		}
		return
	}

	var cases []benchCase
	for _, c := range allCases() {
		if strings.Contains(*workloads, c.workload) && match.MatchString(c.name) {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		log.Print("bench: no case matches -workloads and -cases")
		return
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Print(err)
			return
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Print(err)
			return
		}
		defer pprof.StopCPUProfile()
	}
	results := make([]*result, len(cases))
	for i, c := range cases {
		results[i] = &result{Case: c.name, Workload: c.workload, Lib: c.lib, N: c.n, Clients: c.clients}
	}
	ctx := context.Background()
	for r := range *rounds {
		for i, c := range cases {
			fmt.Fprintf(os.Stderr, "\rround %d/%d  case %d/%d %-40s", r+1, *rounds, i+1, len(cases), c.name)
			if err := c.run(ctx, env, *slice, results[i]); err != nil {
				log.Printf("\n%s: %v", c.name, err)
				return
			}
		}
	}
	fmt.Fprintln(os.Stderr)
	for _, r := range results {
		r.finish()
	}
	writeTable(os.Stdout, results)
	if *jsonPath != "" {
		if err := writeFile(*jsonPath, func(w io.Writer) error {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(results)
		}); err != nil {
			log.Print(err)
		}
	}
	if *svgPath != "" {
		if err := writeFile(*svgPath, func(w io.Writer) error { return writeChart(w, results) }); err != nil {
			log.Print(err)
		}
	}
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// redraw draws the chart of the results in the JSON file from into svg.
func redraw(from, svg string) error {
	if svg == "" {
		return fmt.Errorf("-chart-from needs -svg")
	}
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	var results []*result
	if err := json.Unmarshal(b, &results); err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	return writeFile(svg, func(w io.Writer) error { return writeChart(w, results) })
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

type benchEnv struct {
	addrs     []string // the lock nodes
	store     string   // the counter of workload C
	deadlines bool     // -deadlines: see clients
}

func (e *benchEnv) clients(n int) ([]*redis.Client, func()) {
	cs := make([]*redis.Client, n)
	for i := range n {
		opts := &redis.Options{Addr: e.addrs[i]} // go-redis's defaults, as most programs run it
		if e.deadlines {
			// Every library's context deadlines reach the socket, as they
			// must for any of them to bound a call.
			opts.PoolSize, opts.ContextTimeoutEnabled = 64, true
		}
		cs[i] = redis.NewClient(opts)
	}
	return cs, func() {
		for _, c := range cs {
			_ = c.Close()
		}
	}
}

// locker is one library's lock, reduced to what the workloads need. lock
// returns how many attempts it took and a function that unlocks.
type locker interface {
	lock(ctx context.Context, key string) (attempts int, unlock func() error, err error)
}

type benchCase struct {
	name     string
	workload string // U, K or C
	lib      string
	n        int
	clients  int // for C: lock clients sharing the 16 goroutines
	newLock  func(e *benchEnv, n int) (locker, func())
}

type libDef struct {
	name      string
	ns        []int
	newLock   func(e *benchEnv, n int) (locker, func())
	workloads string // "" for all; the shared kinds (readers, permits) cannot run C
}

func allCases() []benchCase {
	libs := []libDef{
		{"redlock", []int{1, 3, 5}, newRedlock, ""},
		{"redlock-unbatched", []int{1, 3, 5}, newRedlockUnbatched, ""},
		// This library over rueidis clients (rueidisredlock).
		{"redlock-rueidis", []int{1, 3, 5}, newRedlockRueidis, ""},
		{"redsync", []int{1, 3, 5}, newRedsync(0), ""},
		{"redsync-2ms", []int{1, 3, 5}, newRedsync(2 * time.Millisecond), ""},
		{"redislock", []int{1}, newRedislock, ""},
		// rueidislock's N is its keys on one node (KeyMajority = (N+1)/2):
		// it has no independent nodes.
		{"rueidislock", []int{1, 3, 5}, newRueidislock, ""},
		// This library's other lock kinds, beside the plain lock.
		{"kind-reentrant", []int{5}, newRedlockKind(redlock.WithOwner("bench")), "UK"}, // one owner: C would need one per goroutine
		{"kind-read", []int{5}, newRedlockKind(redlock.ForRead()), "UK"},
		{"kind-write", []int{5}, newRedlockKind(redlock.ForWrite()), ""},
		{"kind-semaphore-2", []int{5}, newRedlockKind(redlock.WithPermits(2)), "UK"},
		{"kind-multi-2", []int{5}, newRedlockMulti, ""},
		{"kind-fair", []int{5}, newRedlockKind(redlock.Fair()), ""},
	}
	var cases []benchCase
	for _, w := range []string{"U", "K", "C"} {
		for _, l := range libs {
			if l.workloads != "" && !strings.Contains(l.workloads, w) {
				continue
			}
			for _, n := range l.ns {
				clientCounts := []int{1}
				if w == "C" {
					clientCounts = []int{1, 4}
				}
				for _, cl := range clientCounts {
					name := fmt.Sprintf("%s %s N=%d", w, l.name, n)
					if w == "C" {
						name += fmt.Sprintf(" clients=%d", cl)
					}
					cases = append(cases, benchCase{name: name, workload: w, lib: l.name, n: n, clients: cl, newLock: l.newLock})
				}
			}
		}
	}
	for _, n := range []int{1, 5} {
		cases = append(cases, benchCase{name: fmt.Sprintf("U floor-setnx N=%d", n), workload: "U", lib: "floor-setnx", n: n, clients: 1, newLock: newFloor})
	}
	cases = append(cases, benchCase{name: "U floor-ping N=1", workload: "U", lib: "floor-ping", n: 1, clients: 1, newLock: newPing})
	for _, n := range []int{1, 5} {
		cases = append(cases, benchCase{name: fmt.Sprintf("K floor-pipelined N=%d", n), workload: "K", lib: "floor-pipelined", n: n, clients: 1, newLock: newPipelinedFloor})
	}
	cases = append(cases, benchCase{name: "K floor-rueidis N=1", workload: "K", lib: "floor-rueidis", n: 1, clients: 1, newLock: newRueidisFloor})
	return cases
}

// result accumulates one case over the rounds.
type result struct {
	Case     string  `json:"case"`
	Workload string  `json:"workload"`
	Lib      string  `json:"lib"`
	N        int     `json:"n"`
	Clients  int     `json:"clients"`
	Ops      int64   `json:"ops"`
	Seconds  float64 `json:"seconds"`
	OpsPerS  float64 `json:"ops_per_s"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	Share    float64 `json:"share_max_min,omitempty"` // C: the busiest goroutine's sections over the idlest's
	Attempts float64 `json:"attempts_per_op,omitempty"`
	Failures int64   `json:"failures"`
	// FirstError is the first failure's error, so that a failure count
	// comes with its reason.
	FirstError string `json:"first_error,omitempty"`

	failures atomic.Int64
	firstErr atomic.Pointer[string]
	hist     *hdrhistogram.Histogram
	perG     []int64
	attempts int64
}

func (r *result) record(d time.Duration) {
	if r.hist == nil {
		r.hist = newHist()
	}
	record(r.hist, d)
}

// failed counts a failure and keeps err if it is the case's first. Safe
// for concurrent use.
func (r *result) failed(err error) {
	r.failures.Add(1)
	if err == nil {
		err = errors.New("unknown error")
	}
	msg := err.Error()
	r.firstErr.CompareAndSwap(nil, &msg)
}

func (r *result) finish() {
	r.Failures = r.failures.Load()
	if e := r.firstErr.Load(); e != nil {
		r.FirstError = *e
	}
	if r.Seconds > 0 {
		r.OpsPerS = float64(r.Ops) / r.Seconds
	}
	if r.hist != nil {
		r.P50Ms = float64(r.hist.ValueAtQuantile(50)) / 1000
		r.P99Ms = float64(r.hist.ValueAtQuantile(99)) / 1000
	}
	if r.Ops > 0 {
		r.Attempts = float64(r.attempts) / float64(r.Ops)
	}
	if len(r.perG) > 0 {
		lo, hi := slices.Min(r.perG), slices.Max(r.perG)
		if lo > 0 {
			r.Share = float64(hi) / float64(lo)
		} else {
			r.Share = -1 // a goroutine got nothing
		}
	}
}

// run runs one slice of the case and adds it to r.
func (c benchCase) run(ctx context.Context, e *benchEnv, slice time.Duration, r *result) error {
	lockers := make([]locker, c.clients)
	for i := range c.clients {
		l, stop := c.newLock(e, c.n)
		defer stop()
		lockers[i] = l
	}
	ctx, cancel := context.WithTimeout(ctx, slice)
	defer cancel()
	start := time.Now()
	var err error
	switch c.workload {
	case "U":
		err = runU(ctx, lockers[0], r)
	case "K":
		err = runK(ctx, lockers[0], r)
	case "C":
		err = runC(ctx, e, lockers, r)
	}
	r.Seconds += time.Since(start).Seconds()
	return err
}

var keySeq atomic.Int64

func newKey(prefix string) string { return prefix + strconv.FormatInt(keySeq.Add(1), 10) }

func runU(ctx context.Context, l locker, r *result) error {
	for ctx.Err() == nil {
		t0 := time.Now()
		attempts, unlock, err := l.lock(ctx, newKey("u:"))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			r.failed(err)
			continue
		}
		if err := unlock(); err != nil {
			r.failed(err)
		}
		r.record(time.Since(t0))
		r.Ops++
		r.attempts += int64(attempts)
	}
	return nil
}

func runK(ctx context.Context, l locker, r *result) error {
	var ops, attempts atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := newKey(fmt.Sprintf("k%d:", g))
			for ctx.Err() == nil {
				a, unlock, err := l.lock(ctx, key)
				if err != nil {
					if ctx.Err() == nil {
						r.failed(err)
					}
					continue
				}
				if err := unlock(); err != nil {
					r.failed(err)
				}
				ops.Add(1)
				attempts.Add(int64(a))
			}
		}()
	}
	wg.Wait()
	r.Ops += ops.Load()
	r.attempts += attempts.Load()
	return nil
}

func runC(ctx context.Context, e *benchEnv, lockers []locker, r *result) error {
	store := redis.NewClient(&redis.Options{Addr: e.store})
	defer store.Close()
	counter := newKey("counter:")
	key := newKey("c:")
	if r.perG == nil {
		r.perG = make([]int64, goroutines)
	}
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	perG := make([]int64, goroutines)
	attempts := make([]int64, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[g%len(lockers)]
			for ctx.Err() == nil {
				t0 := time.Now()
				a, unlock, err := l.lock(ctx, key)
				if err != nil {
					if ctx.Err() == nil {
						r.failed(err)
					}
					continue
				}
				wait := time.Since(t0)
				v, _ := store.Get(context.Background(), counter).Int64()
				err = store.Set(context.Background(), counter, v+1, 0).Err()
				if uerr := unlock(); err != nil || uerr != nil {
					r.failed(errors.Join(err, uerr))
				}
				perG[g]++
				attempts[g] += int64(a)
				mu.Lock()
				r.record(wait)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	var sections int64
	for g := range goroutines {
		sections += perG[g]
		r.perG[g] += perG[g]
		r.attempts += attempts[g]
	}
	final, _ := store.Get(context.Background(), counter).Int64()
	if final != sections {
		return fmt.Errorf("counter %d after %d sections: the lock let %d updates be lost", final, sections, sections-final)
	}
	r.Ops += sections
	return nil
}

// redlockLocker is this library.
type redlockLocker struct {
	c *redlock.Client
}

func newRedlock(e *benchEnv, n int) (locker, func()) {
	cs, stop := e.clients(n)
	c, err := redlock.New(cs)
	if err != nil {
		log.Fatal(err)
	}
	return &redlockLocker{c: c}, stop
}

// newRedlockUnbatched is this library with batching off: every call to a
// node is its own round trip.
func newRedlockUnbatched(e *benchEnv, n int) (locker, func()) {
	cs, stop := e.clients(n)
	c, err := redlock.New(cs, redlock.WithBatching(false))
	if err != nil {
		log.Fatal(err)
	}
	return &redlockLocker{c: c}, stop
}

// redlockKind is this library with one of its lock kinds.
type redlockKind struct {
	redlockLocker
	opt   redlock.AcquireOption
	multi bool // lock the key and a second one, with AcquireAll
}

func newRedlockKind(opt redlock.AcquireOption) func(e *benchEnv, n int) (locker, func()) {
	return func(e *benchEnv, n int) (locker, func()) {
		l, stop := newRedlock(e, n)
		return &redlockKind{redlockLocker: redlockLocker{c: l.(*redlockLocker).c}, opt: opt}, stop
	}
}

func newRedlockMulti(e *benchEnv, n int) (locker, func()) {
	l, stop := newRedlock(e, n)
	return &redlockKind{redlockLocker: redlockLocker{c: l.(*redlockLocker).c}, multi: true}, stop
}

func (l *redlockKind) lock(ctx context.Context, key string) (int, func() error, error) {
	attempts := 1
	count := redlock.RetryFunc(func(failed int) time.Duration {
		attempts = failed + 1
		return redlock.ExponentialBackoff(10*time.Millisecond, 320*time.Millisecond).Delay(failed)
	})
	opts := []redlock.AcquireOption{redlock.WithRetry(count)}
	var (
		lock *redlock.Lock
		err  error
	)
	if l.multi {
		lock, err = l.c.AcquireAll(ctx, []string{key, "{" + key + "}:second"}, ttl, opts...)
	} else {
		lock, err = l.c.Acquire(ctx, key, ttl, append(opts, l.opt)...)
	}
	if err != nil {
		return attempts, nil, err
	}
	return attempts, func() error { return lock.Release(context.Background()) }, nil
}

func (l *redlockLocker) lock(ctx context.Context, key string) (int, func() error, error) {
	attempts := 1
	count := redlock.RetryFunc(func(failed int) time.Duration {
		attempts = failed + 1
		return redlock.ExponentialBackoff(10*time.Millisecond, 320*time.Millisecond).Delay(failed)
	})
	lock, err := l.c.Acquire(ctx, key, ttl, redlock.WithRetry(count))
	if err != nil {
		return attempts, nil, err
	}
	return attempts, func() error { return lock.Release(context.Background()) }, nil
}

// redsyncLocker is go-redsync/redsync v4 with its defaults, or with a fixed
// retry delay.
type redsyncLocker struct {
	rs    *redsync.Redsync
	delay time.Duration
}

func newRedsync(delay time.Duration) func(e *benchEnv, n int) (locker, func()) {
	return func(e *benchEnv, n int) (locker, func()) {
		cs, stop := e.clients(n)
		pools := make([]redsyncredis.Pool, n)
		for i, c := range cs {
			pools[i] = redsyncgoredis.NewPool(c)
		}
		return &redsyncLocker{rs: redsync.New(pools...), delay: delay}, stop
	}
}

func (l *redsyncLocker) lock(ctx context.Context, key string) (int, func() error, error) {
	attempts := 0
	opts := []redsync.Option{redsync.WithExpiry(ttl), redsync.WithTries(1 << 20),
		redsync.WithRetryDelayFunc(func(tries int) time.Duration {
			attempts = tries
			if l.delay > 0 {
				return l.delay
			}
			return time.Duration(50+rand.IntN(200)) * time.Millisecond // redsync's default: 50-250ms
		})}
	m := l.rs.NewMutex(key, opts...)
	if err := m.LockContext(ctx); err != nil {
		return attempts + 1, nil, err
	}
	return attempts + 1, func() error {
		_, err := m.UnlockContext(context.Background())
		return err
	}, nil
}

// redislockLocker is bsm/redislock on one node, retrying every 2ms.
type redislockLocker struct{ c *redislock.Client }

func newRedislock(e *benchEnv, n int) (locker, func()) {
	cs, stop := e.clients(1)
	return &redislockLocker{c: redislock.New(cs[0])}, stop
}

func (l *redislockLocker) lock(ctx context.Context, key string) (int, func() error, error) {
	attempts := 0
	retry := &countingRetry{inner: redislock.LinearBackoff(2 * time.Millisecond), n: &attempts}
	lock, err := l.c.Obtain(ctx, key, ttl, &redislock.Options{RetryStrategy: retry})
	if err != nil {
		return attempts + 1, nil, err
	}
	return attempts + 1, func() error { return lock.Release(context.Background()) }, nil
}

type countingRetry struct {
	inner redislock.RetryStrategy
	n     *int
}

func (r *countingRetry) NextBackoff() time.Duration {
	*r.n++
	return r.inner.NextBackoff()
}

// floorLocker is the least a lock can cost with go-redis: SET NX PX and a
// compare-and-delete script, on every node in parallel, no retry.
type floorLocker struct{ cs []*redis.Client }

var floorDel = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

func newFloor(e *benchEnv, n int) (locker, func()) {
	cs, stop := e.clients(n)
	return &floorLocker{cs: cs}, stop
}

func (l *floorLocker) lock(ctx context.Context, key string) (int, func() error, error) {
	if err := l.each(func(c *redis.Client) error { return c.SetNX(ctx, key, "t", ttl).Err() }); err != nil {
		return 1, nil, err
	}
	return 1, func() error {
		return l.each(func(c *redis.Client) error {
			return floorDel.Run(context.Background(), c, []string{key}, "t").Err()
		})
	}, nil
}

func (l *floorLocker) each(f func(*redis.Client) error) error {
	if len(l.cs) == 1 {
		return f(l.cs[0])
	}
	errs := make([]error, len(l.cs))
	var wg sync.WaitGroup
	for i, c := range l.cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(c)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pipelinedFloor is the least a lock on one node can cost through
// go-redis pipelines: a take script and a compare-and-delete script, each
// call queued for one sender goroutine that sends what queued as one
// pipeline (Pipelined) while the one before is answered, as this library's
// pipe does, with nothing else: no quorum, no validity, no retry. It is
// the ceiling of any go-redis-based lock on workload K.
type pipelinedFloor struct {
	rdb  *redis.Client
	mu   sync.Mutex
	q    []floorCall
	busy bool
}

type floorCall struct {
	script *redis.Script
	key    string
	args   []any
	done   chan error
}

var floorTake = redis.NewScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0`)

// newPipelinedFloor is the pipelined floor on one node, or at N > 1 its
// quorum: a take on every node at once, done once a majority took it; a
// delete on every node, done once a majority answered (the others' calls
// finish in the background, in order on their node).
func newPipelinedFloor(e *benchEnv, n int) (locker, func()) {
	cs, stop := e.clients(n)
	if n == 1 {
		return &pipelinedFloor{rdb: cs[0]}, stop
	}
	q := &quorumFloor{}
	for _, c := range cs {
		q.nodes = append(q.nodes, &pipelinedFloor{rdb: c})
	}
	return q, stop
}

type quorumFloor struct{ nodes []*pipelinedFloor }

// all runs s on every node and returns once a majority answered ok.
func (q *quorumFloor) all(s *redis.Script, key string, args ...any) error {
	oks := make(chan bool, len(q.nodes))
	for _, f := range q.nodes {
		go func() { oks <- f.call(s, key, args...) == nil }()
	}
	need, failed := len(q.nodes)/2+1, 0
	for range q.nodes {
		if <-oks {
			if need--; need == 0 {
				return nil
			}
		} else if failed++; failed > len(q.nodes)/2 {
			break
		}
	}
	return errors.New("no majority")
}

func (q *quorumFloor) lock(_ context.Context, key string) (int, func() error, error) {
	if err := q.all(floorTake, key, "t", ttl.Milliseconds()); err != nil {
		return 1, nil, err
	}
	return 1, func() error { return q.all(floorDel, key, "t") }, nil
}

func (f *pipelinedFloor) call(s *redis.Script, key string, args ...any) error {
	c := floorCall{script: s, key: key, args: args, done: make(chan error, 1)}
	f.mu.Lock()
	f.q = append(f.q, c)
	start := !f.busy
	f.busy = true
	f.mu.Unlock()
	if start {
		go f.send()
	}
	return <-c.done
}

func (f *pipelinedFloor) send() {
	ctx := context.Background()
	for {
		f.mu.Lock()
		batch := f.q
		f.q = nil
		if len(batch) == 0 {
			f.busy = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		cmds := make([]*redis.Cmd, len(batch))
		_, _ = f.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for i, c := range batch {
				cmds[i] = c.script.EvalSha(ctx, pl, []string{c.key}, c.args...)
			}
			return nil
		})
		for i, c := range batch {
			err := cmds[i].Err()
			if redis.HasErrorPrefix(err, "NOSCRIPT") {
				err = c.script.Run(ctx, f.rdb, []string{c.key}, c.args...).Err()
			}
			c.done <- err
		}
	}
}

func (f *pipelinedFloor) lock(_ context.Context, key string) (int, func() error, error) {
	if err := f.call(floorTake, key, "t", ttl.Milliseconds()); err != nil {
		return 1, nil, err
	}
	return 1, func() error { return f.call(floorDel, key, "t") }, nil
}

// pingLocker is one round trip: the floor of any remote operation.
type pingLocker struct{ c *redis.Client }

func newPing(e *benchEnv, n int) (locker, func()) {
	cs, stop := e.clients(1)
	return &pingLocker{c: cs[0]}, stop
}

func (l *pingLocker) lock(ctx context.Context, key string) (int, func() error, error) {
	return 1, func() error { return nil }, l.c.Ping(ctx).Err()
}

func writeTable(w io.Writer, results []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tops/s\tp50 ms\tp99 ms\tshare max/min\tattempts/op\tfailures\t")
	for _, r := range results {
		share := "-"
		if r.Share > 0 {
			share = fmt.Sprintf("%.2f", r.Share)
		} else if r.Share < 0 {
			share = "starved"
		}
		attempts := "-" // not counted
		if r.Attempts > 0 {
			attempts = fmt.Sprintf("%.2f", r.Attempts)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%.2f\t%s\t%s\t%d\t\n", r.Case, r.OpsPerS, r.P50Ms, r.P99Ms, share, attempts, r.Failures)
	}
	_ = tw.Flush()
	for _, r := range results {
		if r.FirstError != "" {
			fmt.Fprintf(w, "%s: %d failures, the first: %s\n", r.Case, r.Failures, r.FirstError)
		}
	}
}
