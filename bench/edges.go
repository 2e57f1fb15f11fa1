package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/quorumlock/redlock"
)

// Edge probes reproduce liveness defects at the edges (issue 27) and put
// this library beside redsync and bsm/redislock on the same schedule. Each
// prints, per scenario and library, the runs, the wins (a lock within the
// bound), the p50 and max time to acquire of the wins, and the command that
// runs that row alone (-cases picks rows by "scenario library"; -runs sets
// the runs). Every library runs on go-redis's default options unless a
// scenario says otherwise (-deadlines does not apply), redsync through its
// goredis v9 pool, redislock on one node (it has no other mode).
//
//	-probe slownet    3 nodes, each behind a toxiproxy link that delays each
//	                  direction by L; each run dials new clients (as a new
//	                  process would) and acquires a fresh key, every library
//	                  on its default options:
//	                    300ms-ttl5s   L = 300 ms, ttl 5 s, bound 12 s
//	                    600ms-ttl30s  L = 600 ms, ttl 30 s, bound 20 s
//	                    lone-150ms    one node, L = 150 ms, ttl 5 s, bound
//	                                  8 s, go-redis ContextTimeoutEnabled
//	                  redislock runs on the first node's link. 5 runs.
//	-probe starved    the client's CPU starved: each library runs in a child
//	                  process of its own (the bench binary again) with
//	                  GOMAXPROCS=1 and 4 goroutines spinning, on 3 loopback
//	                  nodes; each run dials new clients and acquires a fresh
//	                  key within 3 s, with a ttl of 500 ms (ttl500ms) and of
//	                  2 s (ttl2s). 10 runs.
//	-probe deadlines  one client of each library; 4 goroutines call its
//	                  single attempt (TryAcquire) on 64 keys with deadlines
//	                  drawn from 150 µs to 2 ms, in a loop, while another
//	                  makes deadline-free single attempts on fresh free keys
//	                  (ttl 2 s) and releases each (tiny-deadlines); and the
//	                  same without the 4 (quiet). A win is a lock. 200 calls.
//	-probe handoff    a local client on 3 loopback nodes, 4 goroutines each
//	                  looping acquire / 1 ms / release on one key; once they
//	                  have churned 300 ms, a remote client in the same
//	                  process reaching the nodes through links that delay
//	                  each direction by 1 ms acquires the key within 10 s.
//	                  The local client is this library on its defaults
//	                  (hand-offs on), with WithHandOff(0), and redsync (the
//	                  remote redsync retries until the bound rather than its
//	                  default 32 tries). Reports the local holds while the
//	                  remote waited and the remote's wins within 1 s. 10 runs.

// edgeProbes are the edge probes' names and their default -runs.
var edgeProbes = map[string]int{"slownet": 5, "starved": 10, "deadlines": 200, "handoff": 10}

// probeConfig is what the command line says about a probe.
type probeConfig struct {
	size  int            // -size
	hold  time.Duration  // -hold
	runs  int            // -runs; 0 for the probe's default
	cases *regexp.Regexp // -cases: the edge probes' rows, "scenario library"
}

func runEdgeProbe(ctx context.Context, w io.Writer, e *benchEnv, probe string, cfg probeConfig) error {
	if cfg.runs == 0 {
		cfg.runs = edgeProbes[probe]
	}
	t := &edgeTable{probe: probe, runs: cfg.runs, cases: cfg.cases}
	start := time.Now()
	var err error
	switch probe {
	case "slownet":
		err = probeSlownet(ctx, e, t)
	case "starved":
		err = probeStarved(ctx, e, t)
	case "deadlines":
		err = probeDeadlines(ctx, e, t)
	case "handoff":
		err = probeHandoff(ctx, e, t)
	}
	t.write(w, time.Since(start))
	return err
}

// edgeTable collects an edge probe's rows.
type edgeTable struct {
	probe  string
	runs   int
	cases  *regexp.Regexp
	header []string // what the probe did, printed above the table
	rows   []*edgeRow
}

// row returns the row of scenario and lib, or nil if -cases leaves it out.
func (t *edgeTable) row(scenario, lib string, nodes int) *edgeRow {
	if !t.cases.MatchString(scenario + " " + lib) {
		return nil
	}
	r := &edgeRow{scenario: scenario, lib: lib, nodes: nodes}
	t.rows = append(t.rows, r)
	return r
}

func (t *edgeTable) write(w io.Writer, took time.Duration) {
	fmt.Fprintf(w, "probe %s (%v)\n", t.probe, took.Round(100*time.Millisecond))
	for _, h := range t.header {
		fmt.Fprintf(w, "  %s\n", h)
	}
	if len(t.rows) == 0 {
		fmt.Fprintln(w, "  no row matches -cases")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tlibrary\tnodes\truns\twins\tp50\tmax\tnote\tcommand")
	for _, r := range t.rows {
		p50, worst := "-", "-"
		if len(r.took) > 0 {
			slices.Sort(r.took)
			p50 = roundDuration(r.took[(len(r.took)-1)/2])
			worst = roundDuration(r.took[len(r.took)-1])
		}
		cmd := fmt.Sprintf("cd bench && go run . -probe %s -runs %d -cases '^%s$'",
			t.probe, t.runs, regexp.QuoteMeta(r.scenario+" "+r.lib))
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", r.scenario, r.lib, r.nodes, r.runs, r.wins, p50, worst, r.note, cmd)
	}
	_ = tw.Flush()
	for _, r := range t.rows {
		if r.firstErr != "" {
			fmt.Fprintf(w, "%s %s: %d of %d failed; the first: %s\n", r.scenario, r.lib, r.runs-r.wins, r.runs, r.firstErr)
		}
	}
}

func roundDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// edgeRow is one scenario for one library.
type edgeRow struct {
	scenario, lib string
	nodes         int
	runs, wins    int
	took          []time.Duration // time to acquire, of the wins
	firstErr      string
	note          string
}

func (r *edgeRow) add(took time.Duration, err error) {
	r.runs++
	if err != nil {
		if r.firstErr == "" {
			r.firstErr = err.Error()
		}
		return
	}
	r.wins++
	r.took = append(r.took, took)
}

// edgeLocker is one library's lock as a program would call it.
type edgeLocker interface {
	// acquire takes the lock as the library's usual call does, retrying
	// as the library does by default, until ctx ends.
	acquire(ctx context.Context, key string, ttl time.Duration) (release func(context.Context) error, err error)
	// try makes a single attempt.
	try(ctx context.Context, key string, ttl time.Duration) (release func(context.Context) error, err error)
}

// edgeLib is a library and how it is set up on a set of go-redis clients.
type edgeLib struct {
	name  string
	nodes int // the clients it takes: 1 for redislock
	open  func(cs []*redis.Client) (edgeLocker, error)
}

func redlockLib(name string, opts ...redlock.Option) edgeLib {
	return edgeLib{name: name, nodes: 3, open: func(cs []*redis.Client) (edgeLocker, error) {
		c, err := redlock.New(cs, opts...)
		return redlockEdge{c}, err
	}}
}

// redsyncLib is redsync on its defaults; tries, if not 0, replaces its
// default of 32.
func redsyncLib(tries int) edgeLib {
	return edgeLib{name: "redsync", nodes: 3, open: func(cs []*redis.Client) (edgeLocker, error) {
		pools := make([]redsyncredis.Pool, len(cs))
		for i, c := range cs {
			pools[i] = redsyncgoredis.NewPool(c)
		}
		return redsyncEdge{rs: redsync.New(pools...), tries: tries}, nil
	}}
}

var redislockLib = edgeLib{name: "redislock", nodes: 1, open: func(cs []*redis.Client) (edgeLocker, error) {
	return redislockEdge{redislock.New(cs[0])}, nil
}}

// lone is lib on a single node.
func lone(lib edgeLib) edgeLib {
	lib.nodes = 1
	return lib
}

type redlockEdge struct{ c *redlock.Client }

func (l redlockEdge) acquire(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	lock, err := l.c.Acquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return lock.Release, nil
}

func (l redlockEdge) try(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	lock, err := l.c.TryAcquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return lock.Release, nil
}

type redsyncEdge struct {
	rs    *redsync.Redsync
	tries int
}

func (l redsyncEdge) acquire(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	opts := []redsync.Option{redsync.WithExpiry(ttl)}
	if l.tries > 0 {
		opts = append(opts, redsync.WithTries(l.tries))
	}
	m := l.rs.NewMutex(key, opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return unlocker(m), nil
}

func (l redsyncEdge) try(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	m := l.rs.NewMutex(key, redsync.WithExpiry(ttl))
	if err := m.TryLockContext(ctx); err != nil {
		return nil, err
	}
	return unlocker(m), nil
}

func unlocker(m *redsync.Mutex) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := m.UnlockContext(ctx)
		return err
	}
}

// redislockEdge is bsm/redislock on its defaults, which make one attempt:
// acquire and try are the same call.
type redislockEdge struct{ c *redislock.Client }

func (l redislockEdge) acquire(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	lock, err := l.c.Obtain(ctx, key, ttl, nil)
	if err != nil {
		return nil, err
	}
	return lock.Release, nil
}

func (l redislockEdge) try(ctx context.Context, key string, ttl time.Duration) (func(context.Context) error, error) {
	return l.acquire(ctx, key, ttl)
}

// dial connects to addrs with go-redis's default options, and with
// ContextTimeoutEnabled if ctxTimeout; stop closes the clients.
func dial(addrs []string, ctxTimeout bool) ([]*redis.Client, func()) {
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: ctxTimeout})
	}
	return cs, func() {
		for _, c := range cs {
			_ = c.Close()
		}
	}
}

// delayedLinks puts an in-process toxiproxy link in front of each address,
// delaying each direction by delay (a round trip of twice delay), and
// returns the links' addresses; stop closes the links.
func delayedLinks(addrs []string, delay time.Duration) (links []string, stop func(), err error) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	var proxies []*toxiproxy.Proxy
	stop = func() {
		for _, p := range proxies {
			p.Stop()
		}
	}
	for i, addr := range addrs {
		p := toxiproxy.NewProxy(srv, fmt.Sprintf("delay-%d", i), "127.0.0.1:0", addr)
		if err := p.Start(); err != nil {
			stop()
			return nil, nil, fmt.Errorf("proxy to %s: %w", addr, err)
		}
		proxies = append(proxies, p)
		for _, stream := range []string{"upstream", "downstream"} {
			toxic := fmt.Sprintf(`{"name":"delay-%s","type":"latency","stream":%q,"toxicity":1,"attributes":{"latency":%d}}`,
				stream, stream, delay.Milliseconds())
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
				stop()
				return nil, nil, fmt.Errorf("delay to %s: %w", addr, err)
			}
		}
		links = append(links, p.Listen)
	}
	return links, stop, nil
}

// acquireOnce dials new clients to addrs for lib, as a new process would,
// acquires key within bound, releases it and closes the clients. It
// returns how long the acquire took.
func acquireOnce(ctx context.Context, lib edgeLib, addrs []string, ctxTimeout bool, key string, ttl, bound time.Duration) (time.Duration, error) {
	cs, stop := dial(addrs[:lib.nodes], ctxTimeout)
	defer stop()
	l, err := lib.open(cs)
	if err != nil {
		return 0, err
	}
	actx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	start := time.Now()
	release, err := l.acquire(actx, key, ttl)
	took := time.Since(start)
	if err != nil {
		return took, err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = release(rctx)
	return took, nil
}

// flush empties the first n nodes.
func (e *benchEnv) flush(ctx context.Context, n int) error {
	_, stop, err := e.freshNodes(ctx, n)
	if err != nil {
		return err
	}
	stop()
	return nil
}

type slownetCase struct {
	name       string
	delay      time.Duration // each direction
	ttl, bound time.Duration
	lone       bool // one node, ContextTimeoutEnabled
}

func probeSlownet(ctx context.Context, e *benchEnv, t *edgeTable) error {
	const n = 3
	t.header = []string{
		"each node behind a link delaying each direction by L; each run dials new clients and acquires a fresh key within the bound",
		"default options: this library redlock.New(nodes); redsync redsync.New(pools) (32 tries 50-250 ms apart); redislock Obtain(…, nil) (one attempt)",
	}
	if err := e.flush(ctx, n); err != nil {
		return err
	}
	cases := []slownetCase{
		{name: "300ms-ttl5s", delay: 300 * time.Millisecond, ttl: 5 * time.Second, bound: 12 * time.Second},
		{name: "600ms-ttl30s", delay: 600 * time.Millisecond, ttl: 30 * time.Second, bound: 20 * time.Second},
		{name: "lone-150ms", delay: 150 * time.Millisecond, ttl: 5 * time.Second, bound: 8 * time.Second, lone: true},
	}
	for _, c := range cases {
		libs := []edgeLib{redlockLib("redlock"), redsyncLib(0), redislockLib}
		if c.lone {
			libs = []edgeLib{lone(redlockLib("redlock")), lone(redsyncLib(0)), redislockLib}
		}
		rows := make([]*edgeRow, len(libs))
		for i, lib := range libs {
			if rows[i] = t.row(c.name, lib.name, lib.nodes); rows[i] != nil {
				rows[i].note = fmt.Sprintf("L %v, ttl %v, bound %v", c.delay, c.ttl, c.bound)
				if c.lone {
					rows[i].note += ", ContextTimeoutEnabled"
				}
			}
		}
		if !slices.ContainsFunc(rows, func(r *edgeRow) bool { return r != nil }) {
			continue
		}
		addrs := e.addrs[:n]
		if c.lone {
			addrs = addrs[:1]
		}
		links, stop, err := delayedLinks(addrs, c.delay)
		if err != nil {
			return err
		}
		// Runs interleave the libraries, so that the machine's noise falls
		// on all of them.
		for run := range t.runs {
			for i, lib := range libs {
				if rows[i] == nil {
					continue
				}
				fmt.Fprintf(os.Stderr, "\rslownet %s run %d/%d %-10s", c.name, run+1, t.runs, lib.name)
				took, err := acquireOnce(ctx, lib, links, c.lone, newKey("probe-slownet:"), c.ttl, c.bound)
				rows[i].add(took, err)
			}
		}
		fmt.Fprintln(os.Stderr)
		stop()
	}
	return nil
}

// starvedChildFlag, as the first argument, makes the bench binary run one
// library's part of the starved probe (starvedChild) instead of anything
// else; it is how the probe re-executes itself, not for people.
const starvedChildFlag = "-starved-child"

// starvedRun is what a starved child reports of each run, as a JSON line.
type starvedRun struct {
	Procs int           `json:"procs"` // the child's GOMAXPROCS
	Took  time.Duration `json:"took"`
	Err   string        `json:"err,omitempty"`
}

func probeStarved(ctx context.Context, e *benchEnv, t *edgeTable) error {
	const (
		n     = 3
		busy  = 4
		bound = 3 * time.Second
	)
	t.header = []string{
		fmt.Sprintf("each library in a child process with GOMAXPROCS=1 and %d goroutines spinning; %d loopback nodes; each run dials new clients and acquires a fresh key within %v", busy, n, bound),
	}
	if err := e.flush(ctx, n); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		ttl  time.Duration
	}{{"ttl500ms", 500 * time.Millisecond}, {"ttl2s", 2 * time.Second}} {
		for _, lib := range []edgeLib{redlockLib("redlock"), redsyncLib(0), redislockLib} {
			row := t.row(c.name, lib.name, lib.nodes)
			if row == nil {
				continue
			}
			fmt.Fprintf(os.Stderr, "\rstarved %s %-10s", c.name, lib.name)
			cctx, cancel := context.WithTimeout(ctx, time.Duration(t.runs)*(bound+5*time.Second)+30*time.Second)
			cmd := exec.CommandContext(cctx, exe, starvedChildFlag, "-lib", lib.name,
				"-addrs", strings.Join(e.addrs[:lib.nodes], ","), "-ttl", c.ttl.String(), "-bound", bound.String(),
				"-runs", fmt.Sprint(t.runs), "-busy", fmt.Sprint(busy), "-prefix", fmt.Sprintf("probe-starved:%s:%s:", c.name, lib.name))
			cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			cancel()
			if err != nil {
				return fmt.Errorf("starved child %s %s: %w", c.name, lib.name, err)
			}
			procs := map[int]bool{}
			dec := json.NewDecoder(strings.NewReader(string(out)))
			for {
				var r starvedRun
				if err := dec.Decode(&r); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					return fmt.Errorf("starved child %s %s: %w", c.name, lib.name, err)
				}
				procs[r.Procs] = true
				var rerr error
				if r.Err != "" {
					rerr = errors.New(r.Err)
				}
				row.add(r.Took, rerr)
			}
			row.note = fmt.Sprintf("ttl %v, bound %v, GOMAXPROCS %v", c.ttl, bound, slices.Sorted(maps.Keys(procs)))
		}
	}
	fmt.Fprintln(os.Stderr)
	return nil
}

// starvedChild is a starved probe's child process: it keeps busy
// goroutines spinning and acquires a fresh key runs times, each within
// bound, printing a starvedRun per run on stdout. It returns the exit
// status.
func starvedChild(args []string) int {
	fs := flag.NewFlagSet("bench "+starvedChildFlag, flag.ContinueOnError)
	libName := fs.String("lib", "", "redlock, redsync or redislock")
	addrs := fs.String("addrs", "", "the nodes, comma-separated")
	ttl := fs.Duration("ttl", 0, "the locks' ttl")
	bound := fs.Duration("bound", 0, "each acquire's bound")
	runs := fs.Int("runs", 0, "acquires")
	busy := fs.Int("busy", 0, "goroutines spinning")
	prefix := fs.String("prefix", "", "the keys' prefix")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var lib edgeLib
	for _, l := range []edgeLib{redlockLib("redlock"), redsyncLib(0), redislockLib} {
		if l.name == *libName {
			lib = l
		}
	}
	if lib.open == nil {
		fmt.Fprintf(os.Stderr, "starved child: unknown library %q\n", *libName)
		return 2
	}
	redis.SetLogger(quiet{})
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range *busy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
			}
		}()
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
	}()
	enc := json.NewEncoder(os.Stdout)
	for i := range *runs {
		key := fmt.Sprintf("%s%d", *prefix, i)
		took, err := acquireOnce(context.Background(), lib, strings.Split(*addrs, ","), false, key, *ttl, *bound)
		r := starvedRun{Procs: runtime.GOMAXPROCS(0), Took: took}
		if err != nil {
			r.Err = err.Error()
		}
		if err := enc.Encode(r); err != nil {
			return 1
		}
	}
	return 0
}

func probeDeadlines(ctx context.Context, e *benchEnv, t *edgeTable) error {
	const (
		n      = 3
		noisy  = 4
		keys   = 64
		ttl    = 2 * time.Second
		minDue = 150 * time.Microsecond
		maxDue = 2 * time.Millisecond
	)
	t.header = []string{
		fmt.Sprintf("one client per library on %d loopback nodes; single attempts (TryAcquire) without a deadline on fresh free keys, ttl %v, each released", n, ttl),
		fmt.Sprintf("tiny-deadlines: meanwhile %d goroutines of the same client make single attempts on %d keys with deadlines of %v-%v, in a loop", noisy, keys, minDue, maxDue),
	}
	if err := e.flush(ctx, n); err != nil {
		return err
	}
	for _, scenario := range []string{"quiet", "tiny-deadlines"} {
		for _, lib := range []edgeLib{redlockLib("redlock"), redsyncLib(0), redislockLib} {
			row := t.row(scenario, lib.name, lib.nodes)
			if row == nil {
				continue
			}
			fmt.Fprintf(os.Stderr, "\rdeadlines %s %-10s", scenario, lib.name)
			cs, stop := dial(e.addrs[:lib.nodes], false)
			l, err := lib.open(cs)
			if err != nil {
				stop()
				return err
			}
			nctx, stopNoise := context.WithCancel(ctx)
			var (
				wg           sync.WaitGroup
				calls, holds atomic.Int64
			)
			if scenario == "tiny-deadlines" {
				for range noisy {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for nctx.Err() == nil {
							due := minDue + rand.N(maxDue-minDue)
							dctx, cancel := context.WithTimeout(nctx, due)
							release, err := l.try(dctx, fmt.Sprintf("probe-deadlines-noise:%d", rand.N(keys)), ttl)
							cancel()
							calls.Add(1)
							if err == nil {
								holds.Add(1)
								rctx, cancel := context.WithTimeout(context.Background(), time.Second)
								_ = release(rctx)
								cancel()
							}
						}
					}()
				}
				time.Sleep(100 * time.Millisecond)
			}
			for range t.runs {
				start := time.Now()
				release, err := l.try(ctx, newKey("probe-deadlines:"), ttl)
				row.add(time.Since(start), err)
				if err == nil {
					_ = release(ctx)
				}
			}
			stopNoise()
			wg.Wait()
			stop()
			if scenario == "tiny-deadlines" {
				row.note = fmt.Sprintf("%d tiny-deadline calls beside, %d got a lock", calls.Load(), holds.Load())
			}
		}
	}
	fmt.Fprintln(os.Stderr)
	return nil
}

type handoffCase struct {
	name   string  // the local client
	local  edgeLib // on the nodes directly
	remote edgeLib // through the delayed links
}

func probeHandoff(ctx context.Context, e *benchEnv, t *edgeTable) error {
	const (
		n        = 3
		locals   = 4
		ttl      = 2 * time.Second
		work     = time.Millisecond
		churn    = 300 * time.Millisecond
		bound    = 10 * time.Second
		delay    = time.Millisecond
		promptly = time.Second
	)
	t.header = []string{
		fmt.Sprintf("a local client, %d goroutines looping acquire / %v / release on one key (ttl %v) on %d loopback nodes;", locals, work, ttl, n),
		fmt.Sprintf("after %v of that, a remote client (this library on its defaults, or redsync) through links delaying each direction by %v acquires the key within %v", churn, delay, bound),
	}
	if err := e.flush(ctx, n); err != nil {
		return err
	}
	// redsync's default 32 tries, 50-250 ms apart, end before the bound.
	remoteRedsync := redsyncLib(1 << 20)
	cases := []handoffCase{
		{name: "redlock", local: redlockLib("redlock"), remote: redlockLib("redlock")},
		{name: "redlock-handoff0", local: redlockLib("redlock", redlock.WithHandOff(0)), remote: redlockLib("redlock")},
		{name: "redsync", local: redsyncLib(0), remote: remoteRedsync},
	}
	links, stopLinks, err := delayedLinks(e.addrs[:n], delay)
	if err != nil {
		return err
	}
	defer stopLinks()
	rows := make([]*edgeRow, len(cases))
	holds := make([][]int64, len(cases))
	prompt := make([]int, len(cases))
	for i, c := range cases {
		rows[i] = t.row("churn", c.name, n)
	}
	for run := range t.runs {
		for i, c := range cases {
			if rows[i] == nil {
				continue
			}
			fmt.Fprintf(os.Stderr, "\rhandoff run %d/%d %-18s", run+1, t.runs, c.name)
			took, held, err := handoffRun(ctx, c, e.addrs[:n], links, locals, ttl, work, churn, bound)
			rows[i].add(took, err)
			holds[i] = append(holds[i], held)
			if err == nil && took <= promptly {
				prompt[i]++
			}
		}
	}
	fmt.Fprintln(os.Stderr)
	for i, r := range rows {
		if r == nil {
			continue
		}
		slices.Sort(holds[i])
		r.note = fmt.Sprintf("remote within %v: %d of %d; local holds while it waited: median %d, max %d",
			promptly, prompt[i], r.runs, holds[i][(len(holds[i])-1)/2], holds[i][len(holds[i])-1])
	}
	return nil
}

// handoffRun is one run of the handoff probe: it returns how long the
// remote client took to get the key, and how many times the local client
// held it meanwhile.
func handoffRun(ctx context.Context, c handoffCase, addrs, links []string, locals int, ttl, work, churn, bound time.Duration) (time.Duration, int64, error) {
	key := newKey("probe-handoff:")
	localCs, stopLocal := dial(addrs, false)
	defer stopLocal()
	remoteCs, stopRemote := dial(links, false)
	defer stopRemote()
	local, err := c.local.open(localCs)
	if err != nil {
		return 0, 0, err
	}
	remote, err := c.remote.open(remoteCs)
	if err != nil {
		return 0, 0, err
	}
	lctx, stopChurn := context.WithCancel(ctx)
	var (
		wg    sync.WaitGroup
		holds atomic.Int64
	)
	for range locals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lctx.Err() == nil {
				release, err := local.acquire(lctx, key, ttl)
				if err != nil {
					continue
				}
				holds.Add(1)
				time.Sleep(work)
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				_ = release(rctx)
				cancel()
			}
		}()
	}
	defer func() {
		stopChurn()
		wg.Wait()
	}()
	time.Sleep(churn)
	before := holds.Load()
	actx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	start := time.Now()
	release, err := remote.acquire(actx, key, ttl)
	took := time.Since(start)
	held := holds.Load() - before
	if err != nil {
		return took, held, err
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = release(rctx)
	return took, held, nil
}
