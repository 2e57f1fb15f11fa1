package chaos

import (
	"context"
	"errors"
	"fmt"
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
				func(e *env, idx []int) error { return e.each(idx, (*Node).kill) },
				func(e *env, idx []int) error {
					return e.each(idx, func(n *Node) error { return errors.Join(n.wipe(), n.start()) })
				}),
		}),
		generic(Scenario{
			Name: "minority-freeze", Fault: "SIGSTOP a minority for 2×TTL at 30%, then SIGCONT",
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).freeze) },
				func(e *env, idx []int) error { return e.each(idx, (*Node).thaw) }),
		}),
		generic(Scenario{
			Name: "rolling-restart-delayed", Fault: "kill -9 each node in turn, restart it empty after 1.5×TTL",
			faults: func(ctx context.Context, e *env) error {
				if err := e.wl.waitDone(ctx, size/10); err != nil {
					return nil
				}
				for _, n := range e.nodes {
					from := time.Now()
					if err := n.kill(); err != nil {
						return err
					}
					_ = sleep(ctx, e.ttl*3/2)
					e.window(from)
					if err := errors.Join(n.wipe(), n.start()); err != nil {
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
					if err := e.each(idx, (*Node).kill); err != nil {
						return err
					}
					_ = sleep(ctx, e.ttl*6/5)
					e.window(from)
					if err := e.each(idx, func(n *Node) error { return errors.Join(n.wipe(), n.start()) }); err != nil {
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
				func(e *env, idx []int) error { return e.each(idx, (*Node).kill) },
				func(e *env, idx []int) error {
					return e.each(idx, func(n *Node) error { return errors.Join(n.wipe(), n.start()) })
				}),
		}),
		generic(Scenario{
			Name: "reentrant-minority-freeze", Fault: "the owner takes the lock twice in each section; owners exclude each other; SIGSTOP a minority for 2×TTL at 30%, then SIGCONT",
			kind: kindReentrant, keys: 4,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).freeze) },
				func(e *env, idx []int) error { return e.each(idx, (*Node).thaw) }),
		}),
		generic(Scenario{
			Name: "read-write-minority-kill", Fault: "a quarter of the sections write, the rest read: never a writer with anyone else; kill -9 a minority at 30%, restart it empty after 2×TTL",
			kind: kindReadWrite, keys: 2,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).kill) },
				func(e *env, idx []int) error {
					return e.each(idx, func(n *Node) error { return errors.Join(n.wipe(), n.start()) })
				}),
		}),
		generic(Scenario{
			Name: "read-write-minority-freeze", Fault: "a quarter of the sections write, the rest read: never a writer with anyone else; SIGSTOP a minority for 2×TTL at 30%, then SIGCONT",
			kind: kindReadWrite, keys: 2,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).freeze) },
				func(e *env, idx []int) error { return e.each(idx, (*Node).thaw) }),
		}),
		generic(Scenario{
			Name: "semaphore-minority-kill", Fault: "2 permits on one key: never more than 2 holders; strikes the 1 node a permit can spare; kill -9 a minority at 30%, restart it empty after 2×TTL",
			kind: kindSemaphore, permits: 2, keys: 1,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).kill) },
				func(e *env, idx []int) error {
					return e.each(idx, func(n *Node) error { return errors.Join(n.wipe(), n.start()) })
				}),
		}),
		generic(Scenario{
			Name: "semaphore-minority-freeze", Fault: "2 permits on one key: never more than 2 holders; strikes the 1 node a permit can spare; SIGSTOP a minority for 2×TTL at 30%, then SIGCONT",
			kind: kindSemaphore, permits: 2, keys: 1,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).freeze) },
				func(e *env, idx []int) error { return e.each(idx, (*Node).thaw) }),
		}),
		generic(Scenario{
			Name: "multi-key-minority-kill", Fault: "each section locks 2 of 8 keys at once; kill -9 a minority at 30%, restart it empty after 2×TTL",
			kind: kindMultiKey, keys: 8,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).kill) },
				func(e *env, idx []int) error {
					return e.each(idx, func(n *Node) error { return errors.Join(n.wipe(), n.start()) })
				}),
		}),
		generic(Scenario{
			Name: "multi-key-minority-freeze", Fault: "each section locks 2 of 8 keys at once; SIGSTOP a minority for 2×TTL at 30%, then SIGCONT",
			kind: kindMultiKey, keys: 8,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).freeze) },
				func(e *env, idx []int) error { return e.each(idx, (*Node).thaw) }),
		}),
		generic(Scenario{
			Name: "fair-minority-kill", Fault: "one key, each waiter with a ticket: granted in ticket order; kill -9 a minority at 30%, restart it empty after 2×TTL",
			kind: kindFair, keys: 1,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).kill) },
				func(e *env, idx []int) error {
					return e.each(idx, func(n *Node) error { return errors.Join(n.wipe(), n.start()) })
				}),
		}),
		generic(Scenario{
			Name: "fair-minority-freeze", Fault: "one key, each waiter with a ticket: granted in ticket order; SIGSTOP a minority for 2×TTL at 30%, then SIGCONT",
			kind: kindFair, keys: 1,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).freeze) },
				func(e *env, idx []int) error { return e.each(idx, (*Node).thaw) }),
		}),
		generic(Scenario{
			Name: "election-minority-kill", Fault: "each section a leadership (Campaign to Resign), its term the fencing token; an observer's terms never go back; kill -9 a minority at 30%, restart it empty after 2×TTL",
			kind: kindElection, keys: 1, fenced: true,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).kill) },
				func(e *env, idx []int) error {
					return e.each(idx, func(n *Node) error { return errors.Join(n.wipe(), n.start()) })
				}),
		}),
		generic(Scenario{
			Name: "election-minority-freeze", Fault: "each section a leadership, its term the fencing token; an observer's terms never go back; SIGSTOP a minority for 2×TTL at 30%, then SIGCONT",
			kind: kindElection, keys: 1, fenced: true,
			faults: minorityFor(size,
				func(e *env, idx []int) error { return e.each(idx, (*Node).freeze) },
				func(e *env, idx []int) error { return e.each(idx, (*Node).thaw) }),
		}),
		directed(Scenario{
			Name: "restart-aof-always", Fault: "kill -9 a majority while a holder works, restart at once with its AOF",
			Safe: true, redisOnly: true, persist: true,
			faults: func(ctx context.Context, e *env) error { return restartMajority(ctx, e, true) },
		}),
		directed(Scenario{
			Name: "restart-no-persistence", Fault: "kill -9 a majority while a holder works, restart at once empty",
			Assumption: assumeRestart,
			// Sections long enough to outlast the restart and a waiter's
			// next attempt: two redis-servers killed, wiped and started on
			// a loaded machine took longer than 300 ms, and the holder was
			// done before anyone could take the lock from it.
			work:   time.Second,
			faults: func(ctx context.Context, e *env) error { return restartMajority(ctx, e, false) },
		}),
		directed(Scenario{
			Name: "clock-jump", Fault: "jump the clocks of a majority forward by 10×TTL while a holder works",
			Assumption: assumeClock,
			faults: func(ctx context.Context, e *env) error {
				return rounds(ctx, e, func(ctx context.Context) error {
					return e.each(e.majority(), func(n *Node) error { return n.jumpClock(ctx, 10*e.ttl) })
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
			// as restart-no-persistence: the holder outlasts the kill, the
			// promotion and the move of the link on a loaded machine
			work:   time.Second,
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

// faultRounds is how many times a directed scenario strikes; an unsafe one
// strikes again, up to maxFaultRounds times, until its violation shows: on
// a loaded machine a strike may land where it breaks nothing (the holder
// finished before the nodes restarted).
const (
	faultRounds    = 3
	maxFaultRounds = 12
)

// rounds strikes faultRounds times, each while a section is under way,
// leaving the workload time to run into the fault before the next.
func rounds(ctx context.Context, e *env, strike func(context.Context) error) error {
	for round := 0; round < faultRounds || round < maxFaultRounds && e.shown != nil && !e.shown(); round++ {
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
		if err := e.each(idx, (*Node).kill); err != nil {
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
					if errs[j] = n.wipe(); errs[j] != nil {
						return
					}
				}
				errs[j] = n.start()
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
	if err := e.nodes[0].kill(); err != nil {
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
