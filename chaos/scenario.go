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

// Assumptions of docs/safety.md that the unsafe scenarios break.
const (
	assumeIndependent = "1: independent masters, no failover"
	assumeClock       = "2: bounded clock rate, no jumps"
	assumeRestart     = "3: a crashed node keeps its keys or stays down longer than the TTL"
	assumeHolder      = "4: the holder stops when its validity ends"
)

// Scenario is one configuration and the faults injected while the workload
// runs.
type Scenario struct {
	Name       string
	Fault      string // what is done to the nodes, in a few words
	Assumption string // for an unsafe scenario: the assumption it breaks
	Safe       bool   // expected to show no violation

	redisOnly bool // needs persistence or replication
	persist   bool // nodes run with appendfsync always
	nodes     int  // 0: the configured N
	replica   bool // one master with an asynchronous replica, N = 1
	directed  bool // the workload runs until the faults are done, not to a count
	fenced    bool // locks carry fencing tokens, which the register checks
	// minRefused is how many stale writes the fenced register must refuse
	// for the scenario to count: the fence has to have acted.
	minRefused int

	workers   int
	perClient int    // workers sharing one lock Client
	kind      string // the kind of lock (kindPlain and the others in workload.go)
	permits   int    // for kindSemaphore
	keys      int
	ttl       time.Duration
	work      time.Duration
	pause     time.Duration // client pause injected by the faults (see env.pauseNext)

	faults func(ctx context.Context, e *env) error
}

// env is what a scenario's faults act on.
type env struct {
	tolerated int // how many nodes may fail without stopping the lock: a minority, or fewer for a semaphore
	nodes     []*Node
	links     []*Link // links[i] leads to nodes[i]
	replica   *Node   // the replica, in the failover scenario
	repl      *Link   // the replica's link to the master
	wl        *workload
	rng       *rand.Rand
	ttl       time.Duration

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

// Scenarios returns every scenario of the suite, safe ones first. size is
// the number of critical sections each safe, count-bounded scenario runs.
func Scenarios(size int) []Scenario {
	const ttl = time.Second
	generic := func(s Scenario) Scenario {
		s.Safe, s.workers, s.perClient, s.ttl, s.work = true, 8, 2, ttl, 100*time.Microsecond
		if s.keys == 0 {
			s.keys = 4
		}
		return s
	}
	// The directed scenarios strike while a section is under way, with
	// sections long enough for the fault to land inside one.
	directed := func(s Scenario) Scenario {
		s.directed, s.workers, s.keys = true, 4, 1
		if s.work == 0 {
			s.work = 300 * time.Millisecond
		}
		if s.ttl == 0 {
			s.ttl = 2 * time.Second
		}
		return s
	}
	return []Scenario{
		generic(Scenario{
			Name: "minority-kill", Fault: "kill -9 a minority at 30%, restart it empty after 2×TTL",
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).Kill) },
				func(e *env, idx []int) error {
					return e.each(idx, func(n *Node) error { return errors.Join(n.Wipe(), n.Start()) })
				}),
		}),
		generic(Scenario{
			Name: "minority-freeze", Fault: "SIGSTOP a minority for 2×TTL at 30%, then SIGCONT",
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).Freeze) },
				func(e *env, idx []int) error { return e.each(idx, (*Node).Thaw) }),
		}),
		generic(Scenario{
			Name: "rolling-restart-delayed", Fault: "kill -9 each node in turn, restart it empty after 1.5×TTL",
			faults: func(ctx context.Context, e *env) error {
				if err := e.wl.waitDone(ctx, size/10); err != nil {
					return nil
				}
				for _, n := range e.nodes {
					from := time.Now()
					if err := n.Kill(); err != nil {
						return err
					}
					_ = sleep(ctx, e.ttl*3/2)
					e.window(from)
					if err := errors.Join(n.Wipe(), n.Start()); err != nil {
						return err
					}
				}
				return nil
			},
		}),
		generic(Scenario{
			Name: "minority-partition", Fault: "blackhole the links to a minority for 2×TTL at 30%, then heal",
			faults: minorityFor(size,
				func(e *env, idx []int) error {
					var errs []error
					for _, i := range idx {
						errs = append(errs, e.links[i].Blackhole())
					}
					return errors.Join(errs...)
				},
				func(e *env, idx []int) error {
					for _, i := range idx {
						e.links[i].Heal(context.Background())
					}
					return nil
				}),
		}),
		generic(Scenario{
			Name: "fencing-minority-restarts", Fault: "5 times: kill -9 a random minority, restart it empty after 1.2×TTL; fenced locks",
			fenced: true,
			faults: func(ctx context.Context, e *env) error {
				for round := range 5 {
					if err := e.wl.waitDone(ctx, size*(round+1)/7); err != nil {
						return nil
					}
					idx, from := e.pick(1+e.rng.IntN(len(e.nodes)/2)), time.Now()
					if len(e.nodes) < 3 {
						idx = nil
					}
					if err := e.each(idx, (*Node).Kill); err != nil {
						return err
					}
					_ = sleep(ctx, e.ttl*6/5)
					e.window(from)
					if err := e.each(idx, func(n *Node) error { return errors.Join(n.Wipe(), n.Start()) }); err != nil {
						return err
					}
				}
				return nil
			},
		}),
		generic(Scenario{
			Name: "latency-jitter", Fault: "one node 30ms ± 20ms slower, all run long",
			faults: func(ctx context.Context, e *env) error {
				from := time.Now()
				if err := e.links[e.rng.IntN(len(e.links))].Latency(30*time.Millisecond, 20*time.Millisecond); err != nil {
					return err
				}
				_ = e.wl.waitDone(ctx, size)
				e.window(from)
				return nil
			},
		}),
		// Each lock kind through a minority's crash and a minority's freeze,
		// checked for its own invariant (see docs/kinds.md).
		generic(Scenario{
			Name: "reentrant-minority-kill", Fault: "the owner takes the lock twice in each section; owners exclude each other; kill -9 a minority at 30%, restart it empty after 2×TTL",
			kind: kindReentrant, keys: 4,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).Kill) },
				func(e *env, idx []int) error {
					return e.each(idx, func(n *Node) error { return errors.Join(n.Wipe(), n.Start()) })
				}),
		}),
		generic(Scenario{
			Name: "reentrant-minority-freeze", Fault: "the owner takes the lock twice in each section; owners exclude each other; SIGSTOP a minority for 2×TTL at 30%, then SIGCONT",
			kind: kindReentrant, keys: 4,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).Freeze) },
				func(e *env, idx []int) error { return e.each(idx, (*Node).Thaw) }),
		}),
		generic(Scenario{
			Name: "read-write-minority-kill", Fault: "a quarter of the sections write, the rest read: never a writer with anyone else; kill -9 a minority at 30%, restart it empty after 2×TTL",
			kind: kindReadWrite, keys: 2,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).Kill) },
				func(e *env, idx []int) error {
					return e.each(idx, func(n *Node) error { return errors.Join(n.Wipe(), n.Start()) })
				}),
		}),
		generic(Scenario{
			Name: "read-write-minority-freeze", Fault: "a quarter of the sections write, the rest read: never a writer with anyone else; SIGSTOP a minority for 2×TTL at 30%, then SIGCONT",
			kind: kindReadWrite, keys: 2,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).Freeze) },
				func(e *env, idx []int) error { return e.each(idx, (*Node).Thaw) }),
		}),
		generic(Scenario{
			Name: "semaphore-minority-kill", Fault: "2 permits on one key: never more than 2 holders; strikes the 1 node a permit can spare; kill -9 a minority at 30%, restart it empty after 2×TTL",
			kind: kindSemaphore, permits: 2, keys: 1,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).Kill) },
				func(e *env, idx []int) error {
					return e.each(idx, func(n *Node) error { return errors.Join(n.Wipe(), n.Start()) })
				}),
		}),
		generic(Scenario{
			Name: "semaphore-minority-freeze", Fault: "2 permits on one key: never more than 2 holders; strikes the 1 node a permit can spare; SIGSTOP a minority for 2×TTL at 30%, then SIGCONT",
			kind: kindSemaphore, permits: 2, keys: 1,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).Freeze) },
				func(e *env, idx []int) error { return e.each(idx, (*Node).Thaw) }),
		}),
		generic(Scenario{
			Name: "multi-key-minority-kill", Fault: "each section locks 2 of 8 keys at once; kill -9 a minority at 30%, restart it empty after 2×TTL",
			kind: kindMultiKey, keys: 8,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).Kill) },
				func(e *env, idx []int) error {
					return e.each(idx, func(n *Node) error { return errors.Join(n.Wipe(), n.Start()) })
				}),
		}),
		generic(Scenario{
			Name: "multi-key-minority-freeze", Fault: "each section locks 2 of 8 keys at once; SIGSTOP a minority for 2×TTL at 30%, then SIGCONT",
			kind: kindMultiKey, keys: 8,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).Freeze) },
				func(e *env, idx []int) error { return e.each(idx, (*Node).Thaw) }),
		}),
		generic(Scenario{
			Name: "fair-minority-kill", Fault: "one key, each waiter with a ticket: granted in ticket order; kill -9 a minority at 30%, restart it empty after 2×TTL",
			kind: kindFair, keys: 1,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).Kill) },
				func(e *env, idx []int) error {
					return e.each(idx, func(n *Node) error { return errors.Join(n.Wipe(), n.Start()) })
				}),
		}),
		generic(Scenario{
			Name: "fair-minority-freeze", Fault: "one key, each waiter with a ticket: granted in ticket order; SIGSTOP a minority for 2×TTL at 30%, then SIGCONT",
			kind: kindFair, keys: 1,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).Freeze) },
				func(e *env, idx []int) error { return e.each(idx, (*Node).Thaw) }),
		}),
		directed(Scenario{
			Name: "restart-aof-always", Fault: "kill -9 a majority while a holder works, restart at once with its AOF",
			Safe: true, redisOnly: true, persist: true,
			faults: func(ctx context.Context, e *env) error { return restartMajority(ctx, e, true) },
		}),
		directed(Scenario{
			Name: "restart-no-persistence", Fault: "kill -9 a majority while a holder works, restart at once empty",
			Assumption: assumeRestart,
			faults:     func(ctx context.Context, e *env) error { return restartMajority(ctx, e, false) },
		}),
		directed(Scenario{
			Name: "clock-jump", Fault: "jump the clocks of a majority forward by 10×TTL while a holder works",
			Assumption: assumeClock,
			faults: func(ctx context.Context, e *env) error {
				return rounds(ctx, e, func(ctx context.Context) error {
					return e.each(e.majority(), func(n *Node) error { return n.JumpClock(ctx, 10*e.ttl) })
				})
			},
		}),
		directed(Scenario{
			Name: "client-pause", Fault: "a holder pauses for 2×TTL after its last validity check",
			Assumption: assumeHolder, ttl: 300 * time.Millisecond, work: 100 * time.Millisecond, pause: 600 * time.Millisecond,
			faults: func(ctx context.Context, e *env) error {
				return rounds(ctx, e, e.pauseHolder)
			},
		}),
		directed(Scenario{
			Name: "client-pause-fenced", Fault: "as client-pause, with fencing tokens checked by the register",
			Safe: true, fenced: true, minRefused: 1, ttl: 300 * time.Millisecond, work: 100 * time.Millisecond, pause: 600 * time.Millisecond,
			faults: func(ctx context.Context, e *env) error {
				return rounds(ctx, e, e.pauseHolder)
			},
		}),
		directed(Scenario{
			Name: "replica-promotion", Fault: "one master dies before replicating the lock; its replica is promoted",
			Assumption: assumeIndependent, redisOnly: true, replica: true, nodes: 1,
			faults: promoteReplica,
		}),
	}
}

// minorityFor strikes a random minority with apply once 30% of the
// sections are done, keeps the fault for 2×TTL, then calls undo.
func minorityFor(size int, apply, undo func(e *env, idx []int) error) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		if err := e.wl.waitDone(ctx, size*3/10); err != nil {
			return nil // the run ended first
		}
		idx, from := e.minority(), time.Now()
		if err := apply(e, idx); err != nil {
			return err
		}
		_ = sleep(ctx, 2*e.ttl)
		e.window(from)
		return undo(e, idx)
	}
}

// faultRounds is how many times a directed scenario strikes.
const faultRounds = 3

// rounds strikes faultRounds times, each while a section is under way,
// leaving the workload time to run into the fault before the next.
func rounds(ctx context.Context, e *env, strike func(context.Context) error) error {
	for range faultRounds {
		if err := e.wl.waitHolder(ctx); err != nil {
			return err
		}
		from := time.Now()
		if err := strike(ctx); err != nil {
			return err
		}
		_ = sleep(ctx, 3*e.wl.work+e.wl.pauseLen())
		e.window(from)
	}
	return nil
}

// restartMajority kills a majority of the nodes at once and starts them
// again in parallel, with or without their data.
func restartMajority(ctx context.Context, e *env, keepData bool) error {
	return rounds(ctx, e, func(context.Context) error {
		idx := e.majority()
		if err := e.each(idx, (*Node).Kill); err != nil {
			return err
		}
		errs := make([]error, len(idx))
		var wg sync.WaitGroup
		for j, i := range idx {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := e.nodes[i]
				if !keepData {
					if errs[j] = n.Wipe(); errs[j] != nil {
						return
					}
				}
				errs[j] = n.Start()
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	})
}

// promoteReplica: the replication link is cut, a worker acquires on the
// master (so its key cannot reach the replica), the master dies, and the
// replica is promoted and put where the master was.
func promoteReplica(ctx context.Context, e *env) error {
	if err := e.repl.Blackhole(); err != nil {
		return err
	}
	if err := e.wl.waitHolder(ctx); err != nil {
		return err
	}
	from := time.Now()
	if err := e.nodes[0].Kill(); err != nil {
		return err
	}
	if _, err := doOn(ctx, e.replica.Addr(), "REPLICAOF", "NO", "ONE"); err != nil {
		return fmt.Errorf("promoting the replica: %w", err)
	}
	if err := e.links[0].Retarget(e.replica.Addr()); err != nil {
		return err
	}
	_ = sleep(ctx, 3*e.wl.work)
	e.window(from)
	return nil
}

// Config sets the size and shape of a run.
type Config struct {
	Server   ServerKind // DefaultServerKind() when empty
	Nodes    int        // N for the multi-node scenarios; default 5
	Size     int        // critical sections per count-bounded scenario; default 1500
	Seed     uint64     // 0: chosen from the time, and reported
	Only     []string   // scenario names to run; all when empty
	Dir      string     // where node data goes; a temporary directory when empty
	Timeout  time.Duration
	OnStart  func(Scenario)
	OnFinish func(Result)
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
	Verdict                   // what the checkers found
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
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "redlock-chaos-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		cfg.Dir = dir
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
	dir, err := os.MkdirTemp(cfg.Dir, s.Name+"-")
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
	opts := checkOptions{fenced: s.fenced, permits: s.permits}
	if s.kind == kindFair {
		opts.fair = true
		for _, w := range e.windows {
			opts.resets = append(opts.resets, w[1])
		}
	}
	r.Verdict = check(sections, final, opts)
	for _, w := range e.windows {
		r.DuringFault += wl.sectionsBetween(w[0], w[1])
	}
	return err
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
