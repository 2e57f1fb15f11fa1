package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/redlock/chaos"
)

const labHelp = `Usage: redlock lab [flags]

Measures how often each configuration breaks mutual exclusion, as a rate
per trial with a 95 % confidence interval (Wilson), against the size of a
fault: a client pause after the last validity check, a clock jump (real,
under libfaketime, beside its TTL-rewrite simulation) on a minority and on
a majority, a restart delay of crashed nodes, the persistence modes under
kill -9, a Sentinel failover with and without WithReplicaAck, and a single
node, a failover pair and Redlock N=3 and N=5 side by side on the same
crashes. Everything runs on redis-server processes (and redis-sentinel)
that it starts and stops on loopback.

Writes into --out: report.html (self-contained: charts and tables),
points.csv and points.json (every point, with its interval). A progress
line goes to stderr; the seed is printed, and the same seed draws the same
choices again. --quick runs few sizes and few trials (about 3 minutes on 2
cores); a full run about 20 minutes. The exit status is 0 when every
point ran, 1 when some could not (see their error), 2 for bad flags or
when redis-server is missing.

Needs Debian's redis-server; the failover experiment redis-sentinel; the
real clock jumps faketime and a C compiler (points are marked skipped
without them).

Experiments: EXPERIMENTS

Flags:
`

func runLab(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var names []string
	for _, ex := range chaos.Experiments() {
		names = append(names, ex.Name)
	}
	fs := newFlags("lab", strings.Replace(labHelp, "EXPERIMENTS", strings.Join(names, ", "), 1), stdout, stderr)
	var (
		quick   = fs.Bool("quick", false, "few sizes and few trials per point (about 3 minutes), as CI runs it")
		out     = fs.String("out", "redlock-lab", "directory to write report.html, points.csv and points.json into")
		only    = fs.String("only", "", "comma-separated experiments to run (default all)")
		trials  = fs.Int("trials", 0, "trials per point (0: each experiment's own, fewer with --quick)")
		seed    = fs.Uint64("seed", 0, "seed of the random choices (0: from the time; printed)")
		from    = fs.String("from", "", "run nothing: write the report, CSV and charts again from this points.json of an earlier run")
		timeout = fs.Duration("timeout", time.Hour, "give up after this long")
	)
	if exit, ok := fs.parse(args, noArgs); !ok {
		return exit
	}
	if err := errors.Join(fs.positive("timeout"), fs.notNegative("trials")); err != nil {
		fmt.Fprintf(stderr, "redlock lab: %v\n", err)
		return 2
	}
	if *from != "" {
		return relabel(*from, *out, stdout, stderr)
	}
	cfg := chaos.LabConfig{Quick: *quick, Seed: *seed, Trials: *trials}
	if *only != "" {
		for _, name := range splitAddrs(*only) {
			if !slices.Contains(names, name) {
				fmt.Fprintf(stderr, "redlock lab: no experiment %q (%s)\n", name, strings.Join(names, ", "))
				return 2
			}
			cfg.Only = append(cfg.Only, name)
		}
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		fmt.Fprintln(stderr, "redlock lab: needs redis-server on PATH (apt-get install redis-server redis-sentinel faketime gcc)")
		return 2
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(stderr, "redlock lab: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	run := labRun{
		Command: "redlock lab " + strings.Join(args, " "),
		Seed:    cfg.Seed, Quick: cfg.Quick, Started: time.Now(),
		Machine: fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version()),
		Server:  serverVersion(),
	}
	for _, ex := range chaos.Experiments() {
		if len(cfg.Only) > 0 && !slices.Contains(cfg.Only, ex.Name) {
			continue
		}
		e := labExperiment{Name: ex.Name, Title: ex.Title, Fault: ex.Fault, XLabel: ex.XLabel, TTL: ex.TTL.String()}
		for _, s := range ex.Setups {
			e.Setups = append(e.Setups, s.Name)
		}
		run.Experiments = append(run.Experiments, e)
	}
	fmt.Fprintf(stderr, "redlock lab: seed %d%s, writing into %s\n", cfg.Seed, map[bool]string{true: ", quick"}[cfg.Quick], *out)
	p := newProgress(stderr)
	cfg.Progress = func(done, total int, pt chaos.LabPoint) {
		elapsed := time.Since(run.Started)
		eta := time.Duration(float64(elapsed) / float64(done) * float64(total-done))
		status := fmt.Sprintf("%d/%d", pt.Violations, pt.Trials)
		switch {
		case pt.Err != "":
			status = "error"
		case pt.Skipped != "":
			status = "skipped"
		}
		p.update(fmt.Sprintf("[%d/%d] %s / %s / x=%g: %s violated, %v elapsed, about %v left",
			done, total, pt.Experiment, pt.Setup, pt.X, status, elapsed.Round(time.Second), eta.Round(time.Second)))
	}
	points, err := chaos.RunLab(ctx, cfg)
	run.Points, run.Elapsed = points, time.Since(run.Started).Round(time.Second)
	p.done(fmt.Sprintf("redlock lab: %d points in %v", len(points), run.Elapsed))
	if err != nil && len(points) == 0 {
		fmt.Fprintf(stderr, "redlock lab: %v\n", err)
		return 2
	}
	if werr := writeLabFiles(*out, run); werr != nil {
		fmt.Fprintf(stderr, "redlock lab: %v\n", werr)
		return 1
	}
	writeLabTable(stdout, run)
	fmt.Fprintf(stdout, "report: %s (seed %d)\n", filepath.Join(*out, "report.html"), cfg.Seed)
	failed := 0
	for _, pt := range points {
		if pt.Err != "" {
			failed++
		}
	}
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "redlock lab: stopped early: %v\n", err)
		return 1
	case failed > 0:
		fmt.Fprintf(stderr, "redlock lab: %d points could not be measured (seed %d)\n", failed, cfg.Seed)
		return 1
	}
	return 0
}

// relabel writes the files of the run in the points.json file from into
// dir again, without running anything.
func relabel(from, dir string, stdout, stderr io.Writer) int {
	b, err := os.ReadFile(from)
	var run labRun
	if err == nil {
		err = json.Unmarshal(b, &run)
	}
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = writeLabFiles(dir, run)
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock lab: --from %s: %v\n", from, err)
		return 1
	}
	writeLabTable(stdout, run)
	fmt.Fprintf(stdout, "report: %s (seed %d)\n", filepath.Join(dir, "report.html"), run.Seed)
	return 0
}

// writeLabFiles writes report.html, points.csv, points.json and one SVG
// chart per experiment (EXPERIMENT.svg) into dir.
func writeLabFiles(dir string, run labRun) error {
	files := map[string]func(io.Writer) error{
		"report.html": func(w io.Writer) error { return writeLabHTML(w, run) },
		"points.csv":  func(w io.Writer) error { return writeLabCSV(w, run.Points) },
		"points.json": func(w io.Writer) error { return writeLabJSON(w, run) },
	}
	for _, ex := range run.Experiments {
		points := run.pointsOf(ex.Name)
		if len(points) == 0 {
			continue
		}
		files[ex.Name+".svg"] = func(w io.Writer) error {
			svg, err := labChart(ex, points, false)
			if err == nil {
				_, err = io.WriteString(w, string(svg))
			}
			return err
		}
	}
	for name, write := range files {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := errors.Join(write(f), f.Close()); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// writeLabTable prints every point, one line each.
func writeLabTable(w io.Writer, run labRun) {
	fmt.Fprintf(w, "%-20s %-58s %7s %7s %9s  %-17s %s\n", "experiment", "setup", "x", "trials", "violated", "95 % interval", "note")
	for _, p := range run.Points {
		fmt.Fprintf(w, "%-20s %-58s %7g %7d %9d  %6.1f – %5.1f %%  %s%s\n", p.Experiment, p.Setup, p.X, p.Trials, p.Violations, 100*p.Low, 100*p.High, p.Skipped, p.Err)
	}
}

// serverVersion is redis-server's version line, for the report.
func serverVersion() string {
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "redis-server: unknown version"
	}
	return strings.TrimSpace(string(out))
}
