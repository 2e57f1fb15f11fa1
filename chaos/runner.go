// The runner of the chaos suite: it starts the nodes and links of each
// scenario, runs the workload while the scenario's faults strike, and checks
// the history. The scenarios themselves are in scenario.go.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"
)

// Config sets the size and shape of a run.
type Config struct {
	Server ServerKind // DefaultServerKind() when empty
	Nodes  int        // N for the multi-node scenarios; default 5
	Size   int        // critical sections per count-bounded scenario; default 1500
	Seed   uint64     // 0: chosen from the time, and reported
	Only   []string   // scenario names to run; all when empty
	// NodeTimeout is the lock Clients' WithNodeTimeout, at most half a
	// scenario's ttl; 0 derives it from the ttl, as by default. A loaded
	// machine (the race detector, two suites at once) delays healthy
	// replies past the derived timeouts of the short ttls.
	NodeTimeout time.Duration
	dir         string // where node data goes; a temporary directory when empty
	Timeout     time.Duration
	OnStart     func(Scenario)
	OnFinish    func(Result)
}

// Result is the outcome of one scenario.
type Result struct {
	Scenario    string        `json:"scenario"`
	Fault       string        `json:"fault"`
	Assumption  string        `json:"assumption,omitempty"`
	Safe        bool          `json:"safe"`
	Server      ServerKind    `json:"server"`
	Nodes       int           `json:"nodes"`
	Seed        uint64        `json:"seed"`
	verdict                   // what the checkers found
	DuringFault int           `json:"during_fault"`          // sections acquired while a fault was in force
	MinRefused  int           `json:"min_refused,omitempty"` // stale writes the fence had to refuse
	Elapsed     time.Duration `json:"elapsed_ns"`
	Skipped     string        `json:"skipped,omitempty"` // why it did not run
	Err         string        `json:"error,omitempty"`
}

// Pass tells whether the scenario showed what it must: a safe one no
// violation and progress during its faults, an unsafe one a violation.
func (r Result) Pass() bool {
	switch {
	case r.Skipped != "":
		return true
	case r.Err != "":
		return false
	case r.Safe:
		return r.Violations() == 0 && r.Sections > 0 && r.DuringFault > 0 && r.Refused >= r.MinRefused
	default:
		return r.Violations() > 0
	}
}

// Run runs the configured scenarios one after another and returns their
// results. It returns an error only when the harness itself cannot run
// (no server, no directory); a scenario that fails to run reports its
// error in its Result.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.Server == "" {
		cfg.Server = DefaultServerKind()
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 5
	}
	if cfg.Size == 0 {
		cfg.Size = 1500
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	switch {
	case cfg.Nodes < 1:
		return nil, fmt.Errorf("chaos: %d nodes: need at least one", cfg.Nodes)
	case cfg.Size < 10:
		return nil, fmt.Errorf("chaos: size %d: need at least 10 sections", cfg.Size)
	case cfg.Server != Redis && cfg.Server != Embedded:
		return nil, fmt.Errorf("chaos: unknown server kind %q (redis or embedded)", cfg.Server)
	}
	if cfg.dir == "" {
		dir, err := os.MkdirTemp("", "redlock-chaos-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		cfg.dir = dir
	}
	all := Scenarios(cfg.Size)
	var chosen []Scenario
	for _, s := range all {
		if len(cfg.Only) == 0 || contains(cfg.Only, s.Name) {
			chosen = append(chosen, s)
		}
	}
	if len(chosen) == 0 {
		return nil, fmt.Errorf("chaos: no scenario named %s", strings.Join(cfg.Only, ", "))
	}
	var results []Result
	for _, s := range chosen {
		if ctx.Err() != nil {
			return results, ctx.Err()
		}
		if cfg.OnStart != nil {
			cfg.OnStart(s)
		}
		r := runScenario(ctx, cfg, s, scenarioSeed(cfg.Seed, s.Name))
		if cfg.OnFinish != nil {
			cfg.OnFinish(r)
		}
		results = append(results, r)
	}
	return results, nil
}

// scenarioSeed derives a scenario's seed from the run's and its name, so
// that it is the same whichever other scenarios run.
func scenarioSeed(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return seed ^ h.Sum64()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func runScenario(ctx context.Context, cfg Config, s Scenario, seed uint64) Result {
	n := cfg.Nodes
	if s.nodes > 0 {
		n = s.nodes
	}
	r := Result{Scenario: s.Name, Fault: s.Fault, Assumption: s.Assumption, Safe: s.Safe, Server: cfg.Server, Nodes: n, Seed: seed, MinRefused: s.minRefused}
	if s.redisOnly && cfg.Server != Redis {
		r.Skipped = "needs redis-server (persistence or replication)"
		return r
	}
	start := time.Now()
	err := s.run(ctx, cfg, n, seed, &r)
	r.Elapsed = time.Since(start)
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

func (s Scenario) run(ctx context.Context, cfg Config, n int, seed uint64, r *Result) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	dir, err := os.MkdirTemp(cfg.dir, s.Name+"-")
	if err != nil {
		return err
	}
	toxi := newToxiServer()
	e := &env{rng: rand.New(rand.NewPCG(seed, 0x5eed)), ttl: s.ttl, tolerated: (n - 1) / 2}
	if s.kind == kindSemaphore {
		// A permit needs more than a majority (see redlock.WithPermits).
		e.tolerated = n - (s.permits*n/(s.permits+1) + 1)
	}
	defer func() {
		for _, l := range append(e.links, e.repl) {
			if l != nil {
				l.close()
			}
		}
		for _, nd := range append(e.nodes, e.replica) {
			if nd != nil {
				nd.stop()
			}
		}
	}()
	for i := range n {
		nd, err := startNode(dir, nodeSpec{kind: cfg.Server, persist: s.persist})
		if err != nil {
			return err
		}
		e.nodes = append(e.nodes, nd)
		l, err := newLink(toxi, fmt.Sprintf("node-%d", i), nd.Addr())
		if err != nil {
			return err
		}
		e.links = append(e.links, l)
	}
	if s.replica {
		if e.repl, err = newLink(toxi, "replication", e.nodes[0].Addr()); err != nil {
			return err
		}
		if e.replica, err = startNode(dir, nodeSpec{kind: cfg.Server, replica: e.repl.Addr()}); err != nil {
			return err
		}
		if err := waitReplicating(ctx, e.replica.Addr()); err != nil {
			return err
		}
	}

	wl := &workload{
		workers: s.workers, perClient: s.perClient, keys: s.keys, ttl: s.ttl, work: s.work,
		target: cfg.Size, seed: seed, fenced: s.fenced, kind: s.kind, permits: s.permits,
		nodeTimeout: cfg.NodeTimeout,
	}
	if s.directed {
		wl.target = 1 << 30 // until the faults are done
	}
	for _, l := range e.links {
		wl.addrs = append(wl.addrs, l.Addr())
	}
	if s.pause > 0 {
		wl.pause = e.takePause
		e.pauseFor = s.pause
	}
	wl.init()
	e.wl = wl

	opts := checkOptions{fenced: s.fenced, permits: s.permits}
	if !s.Safe {
		e.shown = func() bool {
			sections, final := wl.history()
			return check(sections, final, opts).Violations() > 0
		}
	}

	wctx, stopWorkload := context.WithCancel(ctx)
	defer stopWorkload()
	werr := make(chan error, 1)
	go func() { werr <- wl.run(wctx) }()
	ferr := s.faults(ctx, e)
	if s.directed || ferr != nil {
		stopWorkload()
	}
	err = errors.Join(ferr, <-werr)
	if ctx.Err() != nil {
		err = errors.Join(err, fmt.Errorf("did not finish within %v", cfg.Timeout))
	}

	sections, final := wl.history()
	if s.kind == kindFair {
		opts.fair = true
		for _, w := range e.windows {
			opts.resets = append(opts.resets, w[1])
		}
	}
	r.verdict = check(sections, final, opts)
	for _, w := range e.windows {
		r.DuringFault += wl.sectionsBetween(w[0], w[1])
	}
	return err
}

// env is what a scenario's faults act on.
type env struct {
	tolerated int // how many nodes may fail without stopping the lock: a minority, or fewer for a semaphore
	nodes     []*Node
	links     []*netLink // links[i] leads to nodes[i]
	replica   *Node      // the replica, in the failover scenario
	repl      *netLink   // the replica's link to the master
	wl        *workload
	rng       *rand.Rand
	ttl       time.Duration
	// shown, for an unsafe scenario, tells whether the history so far
	// shows a violation (see rounds)
	shown func() bool

	mu       sync.Mutex
	windows  [][2]time.Time // when a fault was in force
	pauses   int            // pending client pauses
	pauseFor time.Duration
}

func (e *env) window(from time.Time) {
	e.mu.Lock()
	e.windows = append(e.windows, [2]time.Time{from, time.Now()})
	e.mu.Unlock()
}

// pick returns k distinct node indexes at random.
func (e *env) pick(k int) []int { return e.rng.Perm(len(e.nodes))[:k] }

func (e *env) majority() []int { return e.pick(len(e.nodes)/2 + 1) }

func (e *env) minority() []int { return e.pick(e.tolerated) }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *env) each(idx []int, f func(*Node) error) error {
	var errs []error
	for _, i := range idx {
		errs = append(errs, f(e.nodes[i]))
	}
	return errors.Join(errs...)
}

// pauseHolder arranges for the next worker past its validity check to pause.
func (e *env) pauseHolder(context.Context) error {
	e.mu.Lock()
	e.pauses++
	e.mu.Unlock()
	return nil
}

// takePause hands a pending client pause to the worker that asks.
func (e *env) takePause(int) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pauses == 0 {
		return 0
	}
	e.pauses--
	return e.pauseFor
}

func (w *workload) pauseLen() time.Duration {
	if w.pause == nil {
		return 0
	}
	return 3 * w.ttl
}

// waitReplicating waits until the replica's link to its master is up.
func waitReplicating(ctx context.Context, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		info, err := doOn(ctx, addr, "INFO", "replication")
		if s, ok := info.(string); err == nil && ok && strings.Contains(s, "master_link_status:up") {
			return nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	return errors.New("chaos: the replica did not connect to its master")
}
