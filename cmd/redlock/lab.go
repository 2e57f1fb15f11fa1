package main

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/chaos"
)

// labRow places a chaos scenario in the experiment matrix: which
// configuration it runs and which fault it meets.
type labRow struct {
	Setup, Strike string
}

// labMatrix is the lab's default experiment matrix, in the order of the
// report: each safe configuration beside the unsafe one it is contrasted
// with.
var labMatrix = []struct {
	scenario string
	row      labRow
}{
	{"restart-aof-always", labRow{"appendfsync always", "a majority restarts mid-section"}},
	{"restart-no-persistence", labRow{"no persistence, immediate restart", "a majority restarts mid-section"}},
	{"rolling-restart-delayed", labRow{"no persistence, restart after 1.5×TTL", "each node restarts in turn"}},
	{"minority-kill", labRow{"5 independent masters", "kill -9 a minority"}},
	{"minority-freeze", labRow{"5 independent masters", "SIGSTOP a minority"}},
	{"minority-partition", labRow{"5 independent masters", "partition a minority"}},
	{"clock-jump", labRow{"node clocks that may step", "a majority's clocks jump 10×TTL"}},
	{"client-pause", labRow{"no fencing", "the holder pauses past its validity"}},
	{"client-pause-fenced", labRow{"fencing tokens checked by the resource", "the holder pauses past its validity"}},
	{"replica-promotion", labRow{"master + replica with failover", "the master dies before replicating"}},
}

// labMeasure is one N's latency and throughput.
type labMeasure struct {
	N           int
	P50, P99    time.Duration // one goroutine, lock + unlock
	SerialOps   float64       // the same, per second
	ParallelOps float64       // 16 goroutines, a key each, per second
}

type labReport struct {
	Server   chaos.ServerKind
	Seed     uint64
	Size     int
	When     time.Time
	Results  []labResult
	Measures []labMeasure
}

type labResult struct {
	chaos.Result
	labRow
}

const labHelp = `Usage: redlock lab [flags]

Runs the experiment matrix, configurations × faults, on Redis nodes it
starts on loopback, and measures lock latency and throughput against the
number of nodes. Writes a self-contained HTML report (tables and charts)
and prints the matrix. The exit status is 0 when every safe configuration
showed no violation and every unsafe one showed its violation.

Flags:
`

func runLab(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("lab", labHelp, stdout, stderr)
	var (
		cfg       chaos.Config
		server    = fs.String("server", string(chaos.DefaultServerKind()), "node program: redis (redis-server) or embedded")
		out       = fs.String("out", "redlock-lab.html", "where to write the HTML report")
		only      = fs.String("only", "", "comma-separated scenarios of the matrix to run (default all)")
		measure   = fs.Duration("measure", 2*time.Second, "how long each latency and throughput measurement runs (0: none)")
		measureNs = fs.String("ns", "1,3,5", "the N to measure latency and throughput at")
	)
	fs.IntVar(&cfg.Size, "size", 1000, "critical sections in each count-bounded scenario")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the random choices (0: from the time; printed)")
	fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Minute, "give up on a scenario after this long")
	if exit, ok := fs.parse(args, noArgs); !ok {
		return exit
	}
	err := errors.Join(fs.positive("size", "timeout"), fs.notNegative("measure"))
	if err == nil {
		err = checkChaosFlags(*server, "", cfg.Size)
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock lab: %v\n", err)
		return 2
	}
	cfg.Server = chaos.ServerKind(*server)
	cfg.Nodes = 5
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	ns, err := parseNs(*measureNs)
	if err != nil {
		fmt.Fprintf(stderr, "redlock lab: --ns %s: %v\n", *measureNs, err)
		return 2
	}
	rows := map[string]labRow{}
	for _, m := range labMatrix {
		rows[m.scenario] = m.row
		cfg.Only = append(cfg.Only, m.scenario)
	}
	if *only != "" {
		cfg.Only = nil
		for _, name := range splitAddrs(*only) {
			if _, ok := rows[name]; !ok {
				fmt.Fprintf(stderr, "redlock lab: no scenario %q in the matrix (%s)\n", name, strings.Join(slices.Sorted(mapsKeys(rows)), ", "))
				return 2
			}
			cfg.Only = append(cfg.Only, name)
		}
	}

	fmt.Fprintf(stderr, "redlock lab: %s nodes, size %d, seed %d, report %s\n", cfg.Server, cfg.Size, cfg.Seed, *out)
	cfg.OnStart = func(s chaos.Scenario) { fmt.Fprintf(stderr, "  %-26s %s ...\n", s.Name, rows[s.Name].Strike) }
	cfg.OnFinish = func(r chaos.Result) {
		fmt.Fprintf(stderr, "  %-26s %d sections, %d violations, %v\n", r.Scenario, r.Sections, r.Violations(), r.Elapsed.Round(10*time.Millisecond))
	}
	results, err := chaos.Run(ctx, cfg)
	if err != nil && len(results) == 0 {
		fmt.Fprintf(stderr, "redlock lab: %v\n", err)
		return 2
	}
	rep := labReport{Server: cfg.Server, Seed: cfg.Seed, Size: cfg.Size, When: time.Now()}
	failed := 0
	for _, r := range results {
		rep.Results = append(rep.Results, labResult{Result: r, labRow: rows[r.Scenario]})
		if !r.Pass() {
			failed++
		}
	}
	if *measure > 0 {
		for _, n := range ns {
			fmt.Fprintf(stderr, "  measuring N=%d for %v ...\n", n, 2**measure)
			m, err := measureN(ctx, cfg.Server, n, *measure)
			if err != nil {
				fmt.Fprintf(stderr, "redlock lab: measuring N=%d: %v\n", n, err)
				return 1
			}
			rep.Measures = append(rep.Measures, m)
		}
	}

	f, err := os.Create(*out)
	if err == nil {
		err = errors.Join(writeLabHTML(f, rep), f.Close())
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock lab: %v\n", err)
		return 1
	}
	writeLabTable(stdout, rep)
	fmt.Fprintf(stdout, "report: %s\n", *out)
	if failed > 0 {
		fmt.Fprintf(stderr, "redlock lab: %d of %d experiments did not show what they must (seed %d)\n", failed, len(results), cfg.Seed)
		return 1
	}
	return 0
}

func mapsKeys(m map[string]labRow) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func parseNs(s string) ([]int, error) {
	var ns []int
	for _, part := range splitAddrs(s) {
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 || n > 9 {
			return nil, fmt.Errorf("%q is not a node count from 1 to 9 (give them like 1,3,5)", part)
		}
		ns = append(ns, n)
	}
	if len(ns) == 0 {
		return nil, errors.New("no node count (give them like 1,3,5)")
	}
	return ns, nil
}

func verdict(r chaos.Result) string {
	switch {
	case r.Skipped != "":
		return "skipped: " + r.Skipped
	case r.Pass() && r.Safe:
		return "safe: no violation"
	case r.Pass():
		return "unsafe: violation shown"
	default:
		return "FAIL"
	}
}

func writeLabTable(w io.Writer, rep labReport) {
	fmt.Fprintf(w, "%-40s %-36s %9s %11s  %s\n", "configuration", "fault", "sections", "violations", "verdict")
	for _, r := range rep.Results {
		fmt.Fprintf(w, "%-40s %-36s %9d %11d  %s\n", r.Setup, r.Strike, r.Sections, r.Violations(), verdict(r.Result))
	}
	for _, m := range rep.Measures {
		fmt.Fprintf(w, "N=%d: lock+unlock p50 %v p99 %v, %.0f/s serial, %.0f/s with 16 goroutines\n",
			m.N, m.P50.Round(time.Microsecond), m.P99.Round(time.Microsecond), m.SerialOps, m.ParallelOps)
	}
}

// measureN starts n nodes and measures a lock + unlock: one goroutine on
// fresh keys (latency), then 16 goroutines with a key each (throughput).
func measureN(ctx context.Context, kind chaos.ServerKind, n int, d time.Duration) (labMeasure, error) {
	dir, err := os.MkdirTemp("", "redlock-lab-")
	if err != nil {
		return labMeasure{}, err
	}
	defer os.RemoveAll(dir)
	var clients []redis.UniversalClient
	for range n {
		node, err := chaos.StartNode(dir, kind)
		if err != nil {
			return labMeasure{}, err
		}
		defer node.Stop()
		c := redis.NewClient(&redis.Options{Addr: node.Addr(), PoolSize: 64})
		defer c.Close()
		clients = append(clients, c)
	}
	locker, err := redlock.New(clients)
	if err != nil {
		return labMeasure{}, err
	}
	m := labMeasure{N: n}
	once := func(key string) error {
		l, err := locker.TryAcquire(ctx, key, 10*time.Second)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}

	var lat []time.Duration
	for start, i := time.Now(), 0; time.Since(start) < d; i++ {
		t := time.Now()
		if err := once(fmt.Sprintf("lab:u:%d", i)); err != nil {
			return m, err
		}
		lat = append(lat, time.Since(t))
	}
	slices.Sort(lat)
	m.P50, m.P99 = lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond)
	m.SerialOps = float64(len(lat)) / d.Seconds()

	var (
		ops  atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, 16)
	)
	deadline := time.Now().Add(d)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				if err := once(fmt.Sprintf("lab:k:%d:%d", g, i)); err != nil {
					errs <- err
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	m.ParallelOps = float64(ops.Load()) / d.Seconds()
	return m, <-errs
}

// bar is one bar of a chart, with its label and value already placed.
type bar struct {
	X, Y, W, H float64
	Label      string
	Value      string
	Class      string
}

type chart struct {
	Title  string
	Width  float64
	Height float64
	Bars   []bar
}

// barChart lays out one bar per value, scaled to the largest.
func barChart(title string, labels []string, values []float64, format func(float64) string, class func(int) string) chart {
	const w, h, left, top, bottom = 800.0, 240.0, 40.0, 30.0, 70.0
	c := chart{Title: title, Width: w, Height: h}
	top1 := 1.0
	for _, v := range values {
		top1 = max(top1, v)
	}
	slot := (w - left - 60) / float64(max(len(values), 1)) // room for the last label
	for i, v := range values {
		bh := (h - top - bottom) * v / top1
		c.Bars = append(c.Bars, bar{
			X: left + float64(i)*slot + slot*0.15, W: slot * 0.7,
			Y: h - bottom - bh, H: bh,
			Label: labels[i], Value: format(v), Class: class(i),
		})
	}
	return c
}

func (rep labReport) charts() []chart {
	var (
		names      []string
		violations []float64
	)
	for _, r := range rep.Results {
		names = append(names, r.Scenario)
		violations = append(violations, float64(r.Violations()))
	}
	safeClass := func(i int) string {
		if rep.Results[i].Safe {
			return "safe"
		}
		return "unsafe"
	}
	charts := []chart{barChart("Violations per experiment", names, violations,
		func(v float64) string { return fmt.Sprint(int(v)) }, safeClass)}
	if len(rep.Measures) == 0 {
		return charts
	}
	var ns []string
	var p50, p99, serial, parallel []float64
	for _, m := range rep.Measures {
		ns = append(ns, fmt.Sprintf("N=%d", m.N))
		p50 = append(p50, float64(m.P50.Microseconds())/1000)
		p99 = append(p99, float64(m.P99.Microseconds())/1000)
		serial = append(serial, m.SerialOps)
		parallel = append(parallel, m.ParallelOps)
	}
	ms := func(v float64) string { return fmt.Sprintf("%.2f ms", v) }
	perS := func(v float64) string { return fmt.Sprintf("%.0f/s", v) }
	plain := func(int) string { return "measure" }
	return append(charts,
		barChart("Lock + unlock latency, p50, against N", ns, p50, ms, plain),
		barChart("Lock + unlock latency, p99, against N", ns, p99, ms, plain),
		barChart("Throughput, one goroutine, against N", ns, serial, perS, plain),
		barChart("Throughput, 16 goroutines with a key each, against N", ns, parallel, perS, plain))
}

var labTemplate = template.Must(template.New("lab").Funcs(template.FuncMap{"verdict": verdict}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>redlock lab</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: left; }
td.n { text-align: right; }
tr.safe td.verdict { color: #176f2c; }
tr.unsafe td.verdict { color: #a33; }
tr.fail td { background: #fdd; }
svg { display: block; margin: 1em 0; }
rect.safe { fill: #4a9c5d; } rect.unsafe { fill: #c0504d; } rect.measure { fill: #4f81bd; }
text { font-size: 11px; }
</style>
</head>
<body>
<h1>redlock lab</h1>
<p>Nodes: {{.Server}}; critical sections per count-bounded experiment: {{.Size}}; seed {{.Seed}};
run {{.When.Format "2006-01-02 15:04 MST"}}. Safe configurations must show no violation; unsafe ones
must show the violation their broken assumption allows (docs/safety.md).</p>
<h2 id="matrix">Configurations × faults</h2>
<table>
<tr><th>configuration</th><th>fault</th><th>experiment</th><th>sections</th><th>overlaps</th><th>stale writes</th><th>lost updates</th><th>linearizable</th><th>violations</th><th>verdict</th></tr>
{{range .Results}}<tr class="{{if not .Pass}}fail{{else if .Safe}}safe{{else}}unsafe{{end}}">
<td>{{.Setup}}</td><td>{{.Strike}}</td><td>{{.Scenario}}</td><td class="n">{{.Sections}}</td><td class="n">{{.Overlaps}}</td><td class="n">{{.StaleWrites}}</td><td class="n">{{.LostUpdates}}</td><td>{{if .Linearizable}}yes{{else}}no{{end}}</td><td class="n">{{.Violations}}</td><td class="verdict">{{verdict .Result}}</td></tr>
{{end}}</table>
{{if .Measures}}<h2 id="measures">Latency and throughput against N</h2>
<table>
<tr><th>N</th><th>p50</th><th>p99</th><th>one goroutine</th><th>16 goroutines</th></tr>
{{range .Measures}}<tr><td class="n">{{.N}}</td><td class="n">{{.P50}}</td><td class="n">{{.P99}}</td><td class="n">{{printf "%.0f/s" .SerialOps}}</td><td class="n">{{printf "%.0f/s" .ParallelOps}}</td></tr>
{{end}}</table>{{end}}
<h2 id="charts">Charts</h2>
{{range .Charts}}<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" role="img" aria-label="{{.Title}}">
<text x="40" y="18" font-weight="bold">{{.Title}}</text>
{{range .Bars}}<rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}"></rect>
<text x="{{.X}}" y="{{.Y}}" dy="-3">{{.Value}}</text>
<text x="{{.X}}" y="{{$.BarBase}}" transform="rotate(30 {{.X}} {{$.BarBase}})">{{.Label}}</text>
{{end}}</svg>
{{end}}
</body>
</html>
`))

func writeLabHTML(w io.Writer, rep labReport) error {
	return labTemplate.Execute(w, struct {
		labReport
		Charts  []chart
		BarBase float64
	}{rep, rep.charts(), 240 - 70 + 14})
}
