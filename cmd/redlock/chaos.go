package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock/chaos"
)

// chaosHelp is the help of redlock chaos; %s is the list of scenarios.
const chaosHelp = `Usage: redlock chaos [flags]
       redlock chaos --explore [--duration D | --schedules N] [flags]

Runs the fault-injection scenarios: Redis nodes as separate processes on
loopback, killed, frozen, restarted, partitioned, slowed and with clocks
jumped while lock clients contend, and counts every violation. Safe
scenarios must show none; unsafe ones must show the violation they cause.
The exit status is 0 when every scenario showed what it must.

With --explore, runs the randomized explorer instead: schedules drawn from
the seed, each several lock clients mixing every kind of lock, fencing,
renewal, Do, extends, hand-offs and cancellations over a few keys, while
faults within the safety assumptions strike the nodes, and about one schedule in
four of a shape that tries progress (a slow network, a starved CPU, tiny
deadlines, a remote waiter against hand-offs, extreme option values, an
election);
every history is checked (exclusion, fencing tokens, stale writes, loss
signals, liveness, keys left behind, goroutines). It stops at the first failing schedule, shrinks it,
prints it with its seed and a JSON form for --replay, and exits 1; else 0.

Scenarios: %s

Flags:
`

func runChaos(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("chaos", fmt.Sprintf(chaosHelp, strings.Join(scenarioNames(), ", ")), stdout, stderr)
	var (
		cfg      chaos.Config
		server   = fs.String("server", string(chaos.DefaultServerKind()), "node program: redis (redis-server) or embedded")
		only     = fs.String("only", "", "comma-separated scenarios to run (default all)")
		jsonPath = fs.String("json", "", "also write the results as JSON to this file (- for stdout)")
		via      = fs.String("transport", chaos.Transport, "the lock Clients' node clients: go-redis or rueidis")
	)
	fs.IntVar(&cfg.Nodes, "nodes", 5, "N, the nodes of the multi-node scenarios")
	fs.IntVar(&cfg.Size, "size", 1500, "critical sections in each count-bounded scenario")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the random choices (0: from the time; printed)")
	fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Minute, "give up on a scenario after this long")
	var (
		explore   = fs.Bool("explore", false, "run the randomized explorer instead of the scenarios")
		duration  = fs.Duration("duration", 0, "explore: start schedules for this long (default 1m when --schedules is not given)")
		schedules = fs.Int("schedules", 0, "explore: run this many schedules")
		lanes     = fs.Int("lanes", 4, "explore: schedules run at once, each on nodes of its own")
		replay    = fs.String("replay", "", "explore: run the schedule in this JSON file (as a failure prints it)")
		noShrink  = fs.Bool("no-shrink", false, "explore: report a failing schedule as drawn")
		shape     = fs.String("shape", "", "explore: run only the schedules of this shape ("+strings.Join(chaos.ShapeNames(), ", ")+")")
	)
	if exit, ok := fs.parse(args, noArgs); !ok {
		return exit
	}
	err := fs.positive("nodes", "size", "timeout", "lanes")
	for _, name := range []string{"schedules", "duration"} {
		if err == nil && fs.isSet(name) {
			err = fs.positive(name)
		}
	}
	if err == nil {
		err = checkChaosFlags(*server, *only, cfg.Size)
	}
	if err == nil && *via != "go-redis" && *via != "rueidis" {
		err = fmt.Errorf("--transport %q: go-redis or rueidis", *via)
	}
	if err == nil && *shape != "" && !slices.Contains(chaos.ShapeNames(), *shape) {
		err = fmt.Errorf("--shape: no shape named %q (%s)", *shape, strings.Join(chaos.ShapeNames(), ", "))
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
		return 2
	}
	chaos.Transport = *via
	if *explore {
		ec := chaos.ExploreConfig{Server: chaos.ServerKind(*server), Seed: cfg.Seed, Schedules: *schedules,
			Duration: *duration, Lanes: *lanes, NoShrink: *noShrink, Shape: *shape}
		return runExplore(ctx, ec, *replay, *jsonPath, stdout, stderr)
	}
	if *replay != "" || *schedules != 0 || *duration != 0 || *shape != "" {
		fmt.Fprintln(stderr, "redlock chaos: --replay, --schedules, --duration and --shape go with --explore")
		return 2
	}
	cfg.Server = chaos.ServerKind(*server)
	cfg.Only = splitAddrs(*only)
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	fmt.Fprintf(stderr, "redlock chaos: %s nodes, N=%d, size %d, seed %d\n", cfg.Server, cfg.Nodes, cfg.Size, cfg.Seed)
	cfg.OnStart = func(s chaos.Scenario) { fmt.Fprintf(stderr, "  %-24s %s ...\n", s.Name, s.Fault) }
	cfg.OnFinish = func(r chaos.Result) {
		if r.Skipped != "" {
			fmt.Fprintf(stderr, "  %-24s skipped: %s\n", r.Scenario, r.Skipped)
			return
		}
		fmt.Fprintf(stderr, "  %-24s %d sections, %d violations, %v\n", r.Scenario, r.Sections, r.Violations(), r.Elapsed.Round(10*time.Millisecond))
	}

	results, err := chaos.Run(ctx, cfg)
	if err != nil && len(results) == 0 {
		fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
		return 2
	}
	_ = chaos.WriteTable(stdout, results)
	if *jsonPath != "" {
		if err := writeJSON(*jsonPath, stdout, results); err != nil {
			fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
			return 1
		}
	}
	failed := 0
	for _, r := range results {
		if !r.Pass() {
			failed++
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
		return 1
	}
	if failed > 0 {
		fmt.Fprintf(stderr, "redlock chaos: %d of %d scenarios did not show what they must (seed %d)\n", failed, len(results), cfg.Seed)
		return 1
	}
	return 0
}

func writeJSON(path string, stdout io.Writer, v any) error {
	out := stdout
	if path != "-" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// runExplore runs the explorer and reports it: progress on stderr, the
// summary and any failure on stdout.
func runExplore(ctx context.Context, cfg chaos.ExploreConfig, replay, jsonPath string, stdout, stderr io.Writer) int {
	if replay != "" {
		b, err := os.ReadFile(replay)
		if err != nil {
			fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
			return 2
		}
		s, err := chaos.ReadSchedule(b)
		if err != nil {
			fmt.Fprintf(stderr, "redlock chaos: %s: %v\n", replay, err)
			return 2
		}
		cfg.Replay = &s
	}
	if cfg.Schedules == 0 && cfg.Duration == 0 {
		cfg.Duration = time.Minute
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.Server == "" {
		cfg.Server = chaos.DefaultServerKind()
	}
	fmt.Fprintf(stderr, "redlock chaos --explore: %s nodes, seed %d, %d lanes\n", cfg.Server, cfg.Seed, max(cfg.Lanes, 1))
	var (
		mu       sync.Mutex
		done     int
		lastNote = time.Now()
	)
	cfg.OnSchedule = func(r chaos.ScheduleResult) {
		mu.Lock()
		defer mu.Unlock()
		done++
		if time.Since(lastNote) >= 10*time.Second || len(r.Violations) > 0 {
			lastNote = time.Now()
			shape := ""
			if r.Shape != "" {
				shape = " (" + r.Shape + ")"
			}
			fmt.Fprintf(stderr, "  %d schedules; schedule %d%s: %d steps, %d held, %d faults, %d violations\n",
				done, r.Seed, shape, r.Steps, r.Acquired, r.Faults, len(r.Violations))
		}
	}
	res, err := chaos.Explore(ctx, cfg)
	fmt.Fprintf(stdout, "schedules %d, locks held %d, operations %d, faults %d, in %v\n",
		res.Schedules, res.Acquired, res.Operations, res.Faults, res.Elapsed.Round(time.Second))
	if res.Stalled > 0 {
		fmt.Fprintf(stdout, "late signals explained by this process's own stalls (not violations): %d\n", res.Stalled)
	}
	if res.Refused > 0 {
		fmt.Fprintf(stdout, "extreme values refused with ErrInvalidArgument (not violations): %d\n", res.Refused)
	}
	if jsonPath != "" {
		if err := writeJSON(jsonPath, stdout, res); err != nil {
			fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
		return 1
	}
	if res.Failure != nil {
		fmt.Fprint(stdout, chaos.FormatFailure(res.Failure))
		return 1
	}
	fmt.Fprintln(stdout, "violations 0")
	return 0
}

// checkChaosFlags checks what chaos.Run would refuse, before anything is
// printed or started.
func checkChaosFlags(server, only string, size int) error {
	if k := chaos.ServerKind(server); k != chaos.Redis && k != chaos.Embedded {
		return fmt.Errorf("--server: unknown server kind %q (redis or embedded)", server)
	}
	if size < 10 {
		return fmt.Errorf("--size %d: need at least 10 sections", size)
	}
	names := scenarioNames()
	for _, name := range splitAddrs(only) {
		if !slices.Contains(names, name) {
			return fmt.Errorf("--only: no scenario named %s (%s)", name, strings.Join(names, ", "))
		}
	}
	return nil
}

func scenarioNames() []string {
	var names []string
	for _, s := range chaos.Scenarios(1) {
		names = append(names, s.Name)
	}
	return names
}
