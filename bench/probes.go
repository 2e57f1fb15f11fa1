package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// Probes measure what a workload costs the nodes and the process rather
// than how fast it runs:
//
//	-probe wait       W Acquires waiting on W distinct keys held by another
//	                  Client (N = 3): connections per node, goroutines and
//	                  heap per waiter, script calls per second per node while
//	                  they wait; then the keys are released and each waiter
//	                  is timed from the release to its lock (a waiter not
//	                  woken by its release waits out its retry timer, a
//	                  second at least).
//	-probe leftovers  K distinct keys locked WithFencing and Fair and
//	                  released (N = 3): the keys left per node once every
//	                  lock's TTL has passed, and the longest time to live
//	                  among them (the counters' horizon).
//	-probe renewal    L locks on distinct keys, acquired WithAutoRenew with
//	                  a 3 s ttl and watched with Done, held for -hold
//	                  (N = 3): locks lost, the process's CPU (cores) and
//	                  goroutines while it holds them, and per node the
//	                  script calls and the server's CPU.
//	-probe handover   P Clients (as P processes) wait for one key and take
//	                  it in turn, each holding it 1 ms (N = 3): the time
//	                  from one holder's release to the next holder's lock
//	                  (p50, p99, max), attempts and script calls per node
//	                  per critical section.
//
// The edge probes (slownet, starved, deadlines, handoff) are in edges.go,
// the wake-ups probe (wakeups) in wakeups.go, the paired timing of
// workload U (paired) in paired.go.

func runProbe(ctx context.Context, w io.Writer, e *benchEnv, probe string, cfg probeConfig) error {
	switch probe {
	case "wait":
		return probeWait(ctx, w, e, cfg.size)
	case "leftovers":
		return probeLeftovers(ctx, w, e, cfg.size)
	case "renewal":
		return probeRenewal(ctx, w, e, cfg.size, cfg.hold)
	case "handover":
		return probeHandover(ctx, w, e, cfg.size)
	case "wakeups":
		return probeWakeups(ctx, w, e, cfg)
	case "election":
		return probeElection(ctx, w, e, cfg)
	case "paired":
		return probePaired(ctx, w, e, cfg)
	}
	if _, ok := edgeProbes[probe]; ok {
		return runEdgeProbe(ctx, w, e, probe, cfg)
	}
	return fmt.Errorf("unknown probe %q (wait, leftovers, renewal, handover; slownet, starved, deadlines, handoff; wakeups; election; paired)", probe)
}

// nodeStats reads INFO from every node: connected clients, and the script
// calls (EVALSHA and EVAL) made so far.
func nodeStats(ctx context.Context, cs []*redis.Client) (conns, scripts []int64, err error) {
	for _, c := range cs {
		info, err := c.Info(ctx, "clients", "commandstats").Result()
		if err != nil {
			return nil, nil, err
		}
		conns = append(conns, infoField(info, "connected_clients"))
		scripts = append(scripts, commandCalls(info, "evalsha")+commandCalls(info, "eval"))
	}
	return conns, scripts, nil
}

func infoField(info, name string) int64 {
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}

// commandCalls reads a command's calls from INFO commandstats, as in
// "cmdstat_evalsha:calls=12,usec=...".
func commandCalls(info, command string) int64 {
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "cmdstat_"+command+":calls="); ok {
			v, _, _ = strings.Cut(v, ",")
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func probeWait(ctx context.Context, w io.Writer, e *benchEnv, waiters int) error {
	const n = 3
	admin, stopAdmin, err := e.freshNodes(ctx, n)
	if err != nil {
		return err
	}
	defer stopAdmin()
	holder, stopHolder, err := e.redlockClient(n)
	if err != nil {
		return err
	}
	defer stopHolder()
	keys := make([]string, waiters)
	held := make([]*redlock.Lock, waiters)
	for i := range keys {
		keys[i] = fmt.Sprintf("probe-wait:%d", i)
		if held[i], err = holder.TryAcquire(ctx, keys[i], time.Minute); err != nil {
			return err
		}
	}
	conns0, _, err := nodeStats(ctx, admin)
	if err != nil {
		return err
	}
	goroutines0, heap0 := runtime.NumGoroutine(), heapInUse()

	waiterNodes, stopWaiter := e.clients(n)
	defer stopWaiter()
	rc, err := redlock.New(waiterNodes)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	acquiredAt := make([]time.Time, waiters)
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
	)
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := rc.Acquire(wctx, keys[i], time.Minute)
			if err != nil {
				failed.Add(1)
				return
			}
			acquiredAt[i] = time.Now()
			_ = l.Release(context.Background())
		}()
	}
	// Let every waiter fail its first attempt and subscribe, then measure
	// the steady wait.
	time.Sleep(3 * time.Second)
	conns1, cmds1, err := nodeStats(ctx, admin)
	if err != nil {
		return err
	}
	goroutines1, heap1 := runtime.NumGoroutine(), heapInUse()
	const window = 5 * time.Second
	time.Sleep(window)
	_, cmds2, err := nodeStats(ctx, admin)
	if err != nil {
		return err
	}

	releasedAt := make([]time.Time, waiters)
	for i, l := range held {
		releasedAt[i] = time.Now()
		_ = l.Release(ctx)
	}
	wg.Wait()
	var late, woken int
	var worst time.Duration
	for i := range keys {
		if acquiredAt[i].IsZero() {
			continue
		}
		d := acquiredAt[i].Sub(releasedAt[i])
		worst = max(worst, d)
		if d > 900*time.Millisecond {
			late++
		} else {
			woken++
		}
	}
	fmt.Fprintf(w, "probe wait: %d waiters on %d distinct keys, N = %d, one waiting Client\n", waiters, waiters, n)
	for i := range admin {
		fmt.Fprintf(w, "  node %d: %d connections more while waiting; %.0f script calls/s while waiting\n",
			i, conns1[i]-conns0[i], float64(cmds2[i]-cmds1[i])/window.Seconds())
	}
	fmt.Fprintf(w, "  goroutines per waiter beyond its own: %.3f\n", float64(goroutines1-goroutines0-waiters)/float64(waiters))
	fmt.Fprintf(w, "  heap per waiter: %.1f KB\n", float64(int64(heap1)-int64(heap0))/float64(waiters)/1024)
	fmt.Fprintf(w, "  after the releases: %d woken within 900 ms, %d later (missed wake-ups), %d failed; slowest %v\n",
		woken, late, failed.Load(), worst.Round(time.Millisecond))
	return nil
}

func probeLeftovers(ctx context.Context, w io.Writer, e *benchEnv, keys int) error {
	const n = 3
	const lockTTL = time.Second
	admin, stopAdmin, err := e.freshNodes(ctx, n)
	if err != nil {
		return err
	}
	defer stopAdmin()
	nodes, stop := e.clients(n)
	defer stop()
	rc, err := redlock.New(nodes)
	if err != nil {
		return err
	}
	errs := inParallel(keys, func(i int) error {
		opts := []redlock.AcquireOption{redlock.WithFencing()}
		if i%2 == 1 {
			opts = append(opts, redlock.Fair())
		}
		l, err := rc.TryAcquire(ctx, fmt.Sprintf("probe-left:%d", i), lockTTL, opts...)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	})
	_ = rc.Drain(ctx)
	time.Sleep(lockTTL + 100*time.Millisecond) // every lock's TTL has passed
	fmt.Fprintf(w, "probe leftovers: %d distinct keys locked WithFencing (half of them Fair) and released, N = %d, %d failed\n", keys, n, errs)
	for i, c := range admin {
		// DBSIZE counts keys whose time has passed but which the node has
		// not reclaimed yet; PTTL -2 (no such key) leaves those out.
		var size, longest, noTTL int64
		iter := c.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			ttl, err := c.PTTL(ctx, iter.Val()).Result()
			if err != nil {
				return err
			}
			if ttl == -2*time.Nanosecond {
				continue
			}
			size++
			if ttl < 0 {
				noTTL++
			}
			longest = max(longest, int64(ttl/time.Millisecond))
		}
		if err := iter.Err(); err != nil {
			return err
		}
		fmt.Fprintf(w, "  node %d: %d keys left, %d without a TTL, the longest expires in %v\n",
			i, size, noTTL, (time.Duration(longest) * time.Millisecond).Round(time.Millisecond))
	}
	return nil
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU reads each node's CPU time (INFO cpu, user and system).
func serverCPU(ctx context.Context, cs []*redis.Client) ([]time.Duration, error) {
	var out []time.Duration
	for _, c := range cs {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return nil, err
		}
		var secs float64
		for line := range strings.SplitSeq(info, "\r\n") {
			for _, f := range []string{"used_cpu_user:", "used_cpu_sys:"} {
				if v, ok := strings.CutPrefix(line, f); ok {
					x, _ := strconv.ParseFloat(v, 64)
					secs += x
				}
			}
		}
		out = append(out, time.Duration(secs*float64(time.Second)))
	}
	return out, nil
}

func probeRenewal(ctx context.Context, w io.Writer, e *benchEnv, locks int, hold time.Duration) error {
	const n = 3
	const ttl = 3 * time.Second
	admin, stopAdmin, err := e.freshNodes(ctx, n)
	if err != nil {
		return err
	}
	defer stopAdmin()
	goroutines0 := runtime.NumGoroutine()
	nodes, stop := e.clients(n)
	defer stop()
	rc, err := redlock.New(nodes)
	if err != nil {
		return err
	}
	held := make([]*redlock.Lock, locks)
	errs := inParallel(locks, func(i int) error {
		l, err := rc.TryAcquire(ctx, fmt.Sprintf("probe-renew:%d", i), ttl, redlock.WithAutoRenew())
		if err != nil {
			return err
		}
		l.Done()
		held[i] = l
		return nil
	})
	if errs > 0 {
		return fmt.Errorf("%d of %d acquires failed", errs, locks)
	}
	time.Sleep(ttl) // the renewals settle into their rhythm
	_, calls0, err := nodeStats(ctx, admin)
	if err != nil {
		return err
	}
	server0, err := serverCPU(ctx, admin)
	if err != nil {
		return err
	}
	cpu0, start := processCPU(), time.Now()
	goroutines := runtime.NumGoroutine() - goroutines0

	lost := 0
	for deadline := time.Now().Add(hold); time.Now().Before(deadline); time.Sleep(time.Second) {
		lost = 0
		for _, l := range held {
			select {
			case <-l.Done():
				lost++
			default:
			}
		}
	}
	wall := time.Since(start)
	cores := float64(processCPU()-cpu0) / float64(wall)
	_, calls1, err := nodeStats(ctx, admin)
	if err != nil {
		return err
	}
	server1, err := serverCPU(ctx, admin)
	if err != nil {
		return err
	}
	released := 0
	for _, l := range held {
		if l.Release(ctx) == nil {
			released++
		}
	}
	fmt.Fprintf(w, "probe renewal: %d locks on distinct keys, ttl %v, WithAutoRenew and Done, held %v, N = %d\n", locks, ttl, wall.Round(time.Second), n)
	fmt.Fprintf(w, "  locks lost: %d; released without error at the end: %d\n", lost, released)
	fmt.Fprintf(w, "  this process: %.3f cores; %d goroutines more than before the Client\n", cores, goroutines)
	for i := range admin {
		fmt.Fprintf(w, "  node %d: %.0f script calls/s (%.0f renewals/s expected), %.3f cores\n", i,
			float64(calls1[i]-calls0[i])/wall.Seconds(), float64(locks)/(ttl/3).Seconds(),
			float64(server1[i]-server0[i])/float64(wall))
	}
	return nil
}

func probeHandover(ctx context.Context, w io.Writer, e *benchEnv, processes int) error {
	const n = 3
	const key = "probe-handover"
	sections := 5 * processes
	admin, stopAdmin, err := e.freshNodes(ctx, n)
	if err != nil {
		return err
	}
	defer stopAdmin()
	holder, stopHolder, err := e.redlockClient(n)
	if err != nil {
		return err
	}
	defer stopHolder()
	first, err := holder.TryAcquire(ctx, key, time.Minute)
	if err != nil {
		return err
	}

	var (
		mu         sync.Mutex
		releasedAt time.Time       // the last holder's release began
		gaps       []time.Duration // from a release to the next lock
		attempts   int64
		done       int
	)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for range processes {
		nodes, stop := e.clients(n)
		defer stop()
		rc, err := redlock.New(nodes, redlock.WithObserver(redlock.ObserverFunc(func(_ context.Context, ev redlock.Event) {
			if ev.Op == redlock.OpAcquire {
				mu.Lock()
				attempts += int64(ev.Attempts)
				mu.Unlock()
			}
		})))
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				l, err := rc.Acquire(rctx, key, 10*time.Second)
				if err != nil {
					return
				}
				now := time.Now()
				mu.Lock()
				gaps = append(gaps, now.Sub(releasedAt))
				done++
				over := done >= sections
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				releasedAt = time.Now()
				mu.Unlock()
				_ = l.Release(ctx)
				if over {
					cancel()
					return
				}
			}
		}()
	}
	time.Sleep(3 * time.Second) // every process fails its first attempt and waits
	_, calls0, err := nodeStats(ctx, admin)
	if err != nil {
		return err
	}
	mu.Lock()
	attempts0 := attempts
	releasedAt = time.Now()
	mu.Unlock()
	start := time.Now()
	_ = first.Release(ctx)
	wg.Wait()
	wall := time.Since(start)
	_, calls1, err := nodeStats(ctx, admin)
	if err != nil {
		return err
	}
	slices.Sort(gaps)
	at := func(q float64) time.Duration { return gaps[min(len(gaps)-1, int(q*float64(len(gaps))))] }
	fmt.Fprintf(w, "probe handover: %d Clients (as processes) take one key in turn, %d sections of 1 ms, N = %d, in %v\n",
		processes, len(gaps), n, wall.Round(time.Millisecond))
	if len(gaps) == 0 {
		return errors.New("no section ran")
	}
	fmt.Fprintf(w, "  from a release to the next lock: p50 %v, p99 %v, max %v\n",
		at(0.5).Round(10*time.Microsecond), at(0.99).Round(10*time.Microsecond), gaps[len(gaps)-1].Round(10*time.Microsecond))
	fmt.Fprintf(w, "  attempts per section (of the Acquires that returned): %.2f\n", float64(attempts-attempts0)/float64(len(gaps)))
	for i := range admin {
		fmt.Fprintf(w, "  node %d: %.1f script calls per section\n", i, float64(calls1[i]-calls0[i])/float64(len(gaps)))
	}
	return nil
}

// freshNodes connects to the first n nodes and empties them; stop closes
// the connections.
func (e *benchEnv) freshNodes(ctx context.Context, n int) ([]*redis.Client, func(), error) {
	admin, stop := e.clients(n)
	for _, c := range admin {
		if err := c.FlushAll(ctx).Err(); err != nil {
			stop()
			return nil, nil, err
		}
	}
	return admin, stop, nil
}

// inParallel runs fn for 0 to count-1 on 16 goroutines, and returns how
// many calls failed.
func inParallel(count int, fn func(i int) error) int64 {
	var (
		wg     sync.WaitGroup
		next   atomic.Int64
		failed atomic.Int64
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(count) {
					return
				}
				if fn(int(i)) != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return failed.Load()
}

// redlockClient is a Client of its own on the first n nodes, as another
// process's; stop closes its connections.
func (e *benchEnv) redlockClient(n int, opts ...redlock.Option) (*redlock.Client, func(), error) {
	nodes, stop := e.clients(n)
	rc, err := redlock.New(nodes, opts...)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return rc, stop, nil
}
