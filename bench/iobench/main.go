// iobench measures the I/O path of a Redis lock library at one node: a
// "lock + unlock" pair per operation (acquire then release, a fresh key per
// op), as throughput K (16 goroutines in a loop) and latency U (1 goroutine,
// p50/p99 of the pair), across go-redis pooled / hand-made pipe / go-redis
// AutoPipeline / rueidis, with the acquire as an EVALSHA script or as
// SET NX PX GET. It starts its own redis-server on a loopback port in
// 6420-6429 (unless -addr is given) and kills it by PID when done.
//
//	cd bench && timeout 900 go run ./iobench -rounds 5 -dur 2s
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	flagRounds  = flag.Int("rounds", 3, "rounds (every variant runs once per round, order rotated)")
	flagDur     = flag.Duration("dur", 2*time.Second, "length of each K and each U run")
	flagK       = flag.Int("k", 16, "goroutines for the throughput run K")
	flagAddr    = flag.String("addr", "", "use this redis instead of starting one (host:port)")
	flagVar     = flag.String("variants", "1,2,2i,3,3fd,3u,4,6a,6b", "variants to run (ids: 1,2,2i,2ia,3,3fd,3u,4,6a,6b,6c)")
	flagAcq     = flag.String("acquire", "s,g", "acquire kinds: s = EVALSHA script, g = SET NX PX GET")
	flagSpinN   = flag.Int("spin", 8, "6a: runtime.Gosched() calls before the idle sender exits")
	flagLinger  = flag.Duration("linger", 50*time.Microsecond, "6b: how long the idle sender waits for a new call")
	flagLinger2 = flag.Duration("linger2", 20*time.Microsecond, "6c: as 6b, a second value")
	flagMaxTime = flag.Duration("maxtime", 20*time.Minute, "hard bound for the whole run")
	flagCheck   = flag.Bool("check", true, "run the AutoPipeline semantics checks (ctx, NOSCRIPT, hooks) after the benchmark")
	flagUi      = flag.Bool("ui", true, "also measure U interleaved: one goroutine doing one pair on each variant in turn (same noise for all)")
	flagUiBlock = flag.Int("uiblock", 20, "Ui: consecutive pairs per visit of a variant (the first of each block is not counted when > 1)")
	flagKU      = flag.Bool("ku", true, "run the K and U runs (false: only Ui)")
	flagOnly    = flag.Bool("checkonly", false, "run only the semantics checks")
)

type ids struct{ id, acq string }

func build(addr string, x ids) (*variant, error) {
	g := x.acq == "g"
	switch x.id {
	case "1":
		return newPool(addr, g), nil
	case "2":
		return newPipeVariant(addr, g, "2 pipe", "v2", idleExit, 0, 0, false), nil
	case "2i":
		return newPipeVariant(addr, g, "2i pipe, idle caller sends inline", "v2i", idleExit, 0, 0, true), nil
	case "6a":
		return newPipeVariant(addr, g, fmt.Sprintf("6a pipe + Gosched x%d", *flagSpinN), "v6a", idleGosched, *flagSpinN, 0, false), nil
	case "6b":
		return newPipeVariant(addr, g, fmt.Sprintf("6b pipe + linger %v", *flagLinger), "v6b", idleLinger, 0, *flagLinger, false), nil
	case "6c":
		return newPipeVariant(addr, g, fmt.Sprintf("6c pipe + linger %v", *flagLinger2), "v6c", idleLinger, 0, *flagLinger2, false), nil
	case "2ia":
		return newPipeVariant(addr, g, fmt.Sprintf("2ia pipe inline + Gosched x%d", *flagSpinN), "v2ia", idleGosched, *flagSpinN, 0, true), nil
	case "3":
		return newAutoPipe(addr, g, "3 AutoPipeline (default)", "v3", nil)
	case "3fd":
		return newAutoPipe(addr, g, "3fd AutoPipeline FullDuplex", "v3fd", &redis.AutoPipelineOptions{FullDuplex: true})
	case "3u":
		return newAutoPipe(addr, g, "3u AutoPipeline Unordered x4", "v3u",
			&redis.AutoPipelineOptions{Unordered: true, MaxConcurrentBatches: 4})
	case "4":
		return newRueidis(addr, g)
	}
	return nil, fmt.Errorf("unknown variant %q", x.id)
}

var srv *exec.Cmd
var srvOnce sync.Once

func stopServer() {
	srvOnce.Do(func() {
		if srv != nil && srv.Process != nil {
			fmt.Fprintf(os.Stderr, "stopping redis-server pid %d\n", srv.Process.Pid)
			_ = srv.Process.Kill()
			_ = srv.Wait()
		}
	})
}

func startServer() (string, error) {
	for p := 6420; p <= 6429; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		srv = exec.Command("redis-server", "--port", strconv.Itoa(p), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "")
		srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := srv.Start(); err != nil {
			return "", err
		}
		addr := "127.0.0.1:" + strconv.Itoa(p)
		fmt.Printf("redis-server pid %d on %s\n", srv.Process.Pid, addr)
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		for i := 0; i < 50; i++ {
			if c.Ping(context.Background()).Err() == nil {
				return addr, nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		stopServer()
		return "", fmt.Errorf("redis-server on %s did not answer", addr)
	}
	return "", fmt.Errorf("no free port in 6420-6429")
}

// cpuTimes returns this process's and the redis-server's CPU time (user+sys).
func cpuTimes() (self, server time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if srv != nil && srv.Process != nil {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(srv.Process.Pid) + "/stat"); err == nil {
			s := string(b)
			if i := strings.LastIndexByte(s, ')'); i > 0 {
				f := strings.Fields(s[i+1:])
				if len(f) > 13 {
					ut, _ := strconv.ParseInt(f[11], 10, 64)
					st, _ := strconv.ParseInt(f[12], 10, 64)
					server = time.Duration(ut+st) * time.Second / 100 // USER_HZ
				}
			}
		}
	}
	return
}

type result struct {
	cliCPU float64 // K: client CPU µs per pair
	srvCPU float64 // K: server CPU µs per pair
	ops    float64 // K: pairs/s
	p50    float64 // U: µs
	p99    float64 // U: µs
	uops   float64 // U: pairs/s
	ui50   float64 // U interleaved: µs
	ui99   float64
}

var runSeq, pairsDone atomic.Int64

// runK: k goroutines doing lock+unlock pairs for d; returns pairs/s.
func runK(v *variant, k int, d time.Duration) (float64, int64, error) {
	var n, nerr atomic.Int64
	var firstErr atomic.Value
	var stop atomic.Bool
	prefix := "k" + strconv.FormatInt(runSeq.Add(1), 10) + ":"
	var wg sync.WaitGroup
	start := time.Now()
	t := time.AfterFunc(d, func() { stop.Store(true) })
	defer t.Stop()
	for i := 0; i < k; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx := context.Background()
			tok := "tok-" + strconv.Itoa(i) + "-" + strconv.FormatUint(rand.Uint64(), 36)
			kp := prefix + strconv.Itoa(i) + ":"
			var local int64
			for j := 0; !stop.Load(); j++ {
				key := kp + strconv.Itoa(j)
				err := v.lock(ctx, key, tok)
				if err == nil {
					err = v.unlock(ctx, key, tok)
				}
				if err != nil {
					nerr.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				local++
			}
			n.Add(local)
			pairsDone.Add(local)
		}(i)
	}
	wg.Wait()
	el := time.Since(start)
	var err error
	if e, ok := firstErr.Load().(error); ok {
		err = e
	}
	return float64(n.Load()) / el.Seconds(), nerr.Load(), err
}

// runU: one goroutine doing pairs for d; returns p50/p99 (µs) and pairs/s.
func runU(v *variant, d time.Duration) (result, int64, error) {
	ctx := context.Background()
	tok := "tok-u-" + strconv.FormatUint(rand.Uint64(), 36)
	kp := "u" + strconv.FormatInt(runSeq.Add(1), 10) + ":"
	lat := make([]time.Duration, 0, 1<<17)
	var nerr int64
	var first error
	start := time.Now()
	end := start.Add(d)
	for j := 0; ; j++ {
		t0 := time.Now()
		if !t0.Before(end) {
			break
		}
		key := kp + strconv.Itoa(j)
		err := v.lock(ctx, key, tok)
		if err == nil {
			err = v.unlock(ctx, key, tok)
		}
		if err != nil {
			nerr++
			if first == nil {
				first = err
			}
			continue
		}
		lat = append(lat, time.Since(t0))
	}
	el := time.Since(start)
	slices.Sort(lat)
	r := result{uops: float64(len(lat)) / el.Seconds()}
	if len(lat) > 0 {
		r.p50 = float64(lat[len(lat)*50/100]) / 1e3
		r.p99 = float64(lat[len(lat)*99/100]) / 1e3
	}
	return r, nerr, first
}

// runUi: one goroutine doing one pair on each variant in turn, for d per
// variant in all; returns p50/p99 (µs) per variant.
func runUi(vs []*variant, d time.Duration, rot int) ([][2]float64, error) {
	ctx := context.Background()
	tok := "tok-ui-" + strconv.FormatUint(rand.Uint64(), 36)
	kp := "ui" + strconv.FormatInt(runSeq.Add(1), 10) + ":"
	lat := make([][]time.Duration, len(vs))
	end := time.Now().Add(d * time.Duration(len(vs)))
	var first error
	order := make([]int, len(vs))
	for i := range order {
		order[i] = (i + rot) % len(vs)
	}
	for j := 0; time.Now().Before(end); j++ {
		// a fresh random order each pass, so that no variant always follows
		// the same one (a sender goroutine still exiting or lingering from the
		// previous variant's call would otherwise always tax the same neighbour)
		rand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, i := range order {
			v := vs[i]
			for b := 0; b < *flagUiBlock; b++ {
				key := kp + strconv.Itoa(i) + ":" + strconv.Itoa(j) + ":" + strconv.Itoa(b)
				t0 := time.Now()
				err := v.lock(ctx, key, tok)
				if err == nil {
					err = v.unlock(ctx, key, tok)
				}
				if err != nil {
					if first == nil {
						first = err
					}
					continue
				}
				if b > 0 || *flagUiBlock == 1 { // the first pair of a block may pay for the previous variant's leftovers
					lat[i] = append(lat[i], time.Since(t0))
				}
			}
		}
	}
	out := make([][2]float64, len(vs))
	for i, l := range lat {
		slices.Sort(l)
		if len(l) > 0 {
			out[i] = [2]float64{float64(l[len(l)*50/100]) / 1e3, float64(l[len(l)*99/100]) / 1e3}
		}
	}
	return out, first
}

// connsByName counts the server's client connections per client name.
func connsByName(admin *redis.Client) map[string]int {
	out := map[string]int{}
	s, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		return out
	}
	for _, line := range strings.Split(s, "\n") {
		for _, f := range strings.Fields(line) {
			if name, ok := strings.CutPrefix(f, "name="); ok {
				out[name]++
			}
		}
	}
	return out
}

func mmm(xs []float64) (float64, float64, float64) {
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0, 0, 0
	}
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[0], med, s[len(s)-1]
}

func main() {
	flag.Parse()
	deadline := time.AfterFunc(*flagMaxTime, func() {
		fmt.Fprintln(os.Stderr, "iobench: -maxtime reached, stopping")
		stopServer()
		os.Exit(3)
	})
	defer deadline.Stop()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		stopServer()
		os.Exit(2)
	}()

	addr := *flagAddr
	if addr == "" {
		a, err := startServer()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		addr = a
	}
	code := run(addr)
	stopServer()
	os.Exit(code)
}

func run(addr string) int {
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: addr, ClientName: "admin"})
	defer admin.Close()
	info, _ := admin.Info(ctx, "server").Result()
	for _, l := range strings.Split(info, "\n") {
		if strings.HasPrefix(l, "redis_version:") {
			fmt.Printf("server %s, GOMAXPROCS %d, NumCPU %d, %s\n", strings.TrimSpace(l), runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version())
		}
	}
	if *flagOnly {
		return checks(addr)
	}
	// Load both scripts once (EVALSHA everywhere).
	if err := acqScript.Load(ctx, admin).Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := relScript.Load(ctx, admin).Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	var list []ids
	for _, id := range strings.Split(*flagVar, ",") {
		for _, a := range strings.Split(*flagAcq, ",") {
			list = append(list, ids{strings.TrimSpace(id), strings.TrimSpace(a)})
		}
	}
	vs := make([]*variant, len(list))
	for i, x := range list {
		v, err := build(addr, x)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		vs[i] = v
		defer v.close()
	}
	// Warm-up: connections, script caches, goroutines.
	for _, v := range vs {
		if _, nerr, err := runK(v, *flagK, 200*time.Millisecond); nerr > 0 {
			fmt.Fprintf(os.Stderr, "%s: warm-up errors %d: %v\n", v.name, nerr, err)
			return 1
		}
		if _, nerr, err := runU(v, 100*time.Millisecond); nerr > 0 {
			fmt.Fprintf(os.Stderr, "%s: warm-up errors %d: %v\n", v.name, nerr, err)
			return 1
		}
	}

	res := make([][]result, len(vs))
	conns := make([]int, len(vs))
	errorsSeen := false
	fmt.Printf("%d rounds x %d variants, K=%d goroutines, each run %v; order rotated per round\n",
		*flagRounds, len(vs), *flagK, *flagDur)
	for r := 0; r < *flagRounds; r++ {
		if !*flagKU {
			for i := range res {
				res[i] = append(res[i], result{})
			}
			continue
		}
		for jj := range vs {
			i := (jj + r*3) % len(vs) // rotate the order each round
			v := vs[i]
			c0, s0 := cpuTimes()
			n0 := pairsDone.Load()
			k, nerr, err := runK(v, *flagK, *flagDur)
			c1, s1 := cpuTimes()
			pairs := float64(pairsDone.Load() - n0)
			if nerr > 0 {
				errorsSeen = true
				fmt.Printf("  !! %s K: %d errors, first: %v\n", v.name, nerr, err)
			}
			if r == 0 {
				conns[i] = connsByName(admin)[v.clientName]
			}
			u, nerr, err := runU(v, *flagDur)
			if nerr > 0 {
				errorsSeen = true
				fmt.Printf("  !! %s U: %d errors, first: %v\n", v.name, nerr, err)
			}
			u.ops = k
			if pairs > 0 {
				u.cliCPU = float64(c1-c0) / 1e3 / pairs
				u.srvCPU = float64(s1-s0) / 1e3 / pairs
			}
			res[i] = append(res[i], u)
			fmt.Printf("round %d  %-36s K %8.0f pairs/s (CPU/pair: client %5.1f µs, server %5.1f µs)  U p50 %6.1f µs  p99 %7.1f µs\n", r+1, v.name, k, u.cliCPU, u.srvCPU, u.p50, u.p99)
		}
	}
	if *flagUi {
		for r := 0; r < *flagRounds; r++ {
			ui, err := runUi(vs, *flagDur, r)
			if err != nil {
				errorsSeen = true
				fmt.Printf("  !! Ui: %v\n", err)
			}
			for i := range vs {
				res[i][r].ui50, res[i][r].ui99 = ui[i][0], ui[i][1]
			}
			fmt.Printf("round %d  U interleaved p50 µs:", r+1)
			for i := range vs {
				fmt.Printf(" %s=%.0f", list[i].id+list[i].acq, ui[i][0])
			}
			fmt.Println()
		}
	}
	n, _ := admin.DBSize(ctx).Result()
	fmt.Printf("\nkeys left on the server after all runs: %d (each op released its key)\n", n)

	fmt.Printf("\n| variant | acquire | K pairs/s min / med / max | U p50 µs min / med / max | U p99 µs min / med / max | K CPU µs/pair client / server (med) | conns after K | Ui p50 µs min / med / max | Ui p99 µs med |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|\n")
	for i, v := range vs {
		var ks, p50s, p99s, ccs, scs, u50s, u99s []float64
		for _, x := range res[i] {
			u50s = append(u50s, x.ui50)
			u99s = append(u99s, x.ui99)
			ccs = append(ccs, x.cliCPU)
			scs = append(scs, x.srvCPU)
			ks = append(ks, x.ops)
			p50s = append(p50s, x.p50)
			p99s = append(p99s, x.p99)
		}
		a, b, c := mmm(ks)
		d, e, f := mmm(p50s)
		g, h, ii := mmm(p99s)
		acq := "EVALSHA script"
		if list[i].acq == "g" {
			acq = "SET NX PX GET"
		}
		name := strings.TrimSuffix(strings.TrimSuffix(v.name, "s"), "g")
		_, cc, _ := mmm(ccs)
		_, sc, _ := mmm(scs)
		ua, ub, uc := mmm(u50s)
		_, ud, _ := mmm(u99s)
		fmt.Printf("| %s | %s | %.0f / %.0f / %.0f | %.1f / %.1f / %.1f | %.1f / %.1f / %.1f | %.1f / %.1f | %d | %.1f / %.1f / %.1f | %.1f |\n",
			name, acq, a, b, c, d, e, f, g, h, ii, cc, sc, conns[i], ua, ub, uc, ud)
	}
	code := 0
	if errorsSeen {
		fmt.Println("\nERRORS were seen (see !! lines)")
		code = 1
	}
	if *flagCheck {
		if c := checks(addr); c != 0 {
			code = c
		}
	}
	return code
}
