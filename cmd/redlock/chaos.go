package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/quorumlock/redlock/chaos"
)

// chaosHelp is the help of redlock chaos; %s is the list of scenarios.
const chaosHelp = `Usage: redlock chaos [flags]

Runs the fault-injection scenarios: Redis nodes as separate processes on
loopback, killed, frozen, restarted, partitioned, slowed and with clocks
jumped while lock clients contend, and counts every violation. Safe
scenarios must show none; unsafe ones must show the violation they cause.
The exit status is 0 when every scenario showed what it must.

Scenarios: %s

Flags:
`

func runChaos(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("chaos", fmt.Sprintf(chaosHelp, strings.Join(scenarioNames(), ", ")), stderr)
	var (
		cfg      chaos.Config
		server   = fs.String("server", string(chaos.DefaultServerKind()), "node program: redis (redis-server) or embedded")
		only     = fs.String("only", "", "comma-separated scenarios to run (default all)")
		jsonPath = fs.String("json", "", "also write the results as JSON to this file (- for stdout)")
	)
	fs.IntVar(&cfg.Nodes, "nodes", 5, "N, the nodes of the multi-node scenarios")
	fs.IntVar(&cfg.Size, "size", 1500, "critical sections in each count-bounded scenario")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the random choices (0: from the time; printed)")
	fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Minute, "give up on a scenario after this long")
	if exit, ok := parseFlags(fs, args); !ok {
		return exit
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

func writeJSON(path string, stdout io.Writer, results []chaos.Result) error {
	if path == "-" {
		return chaos.WriteJSON(stdout, results)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := chaos.WriteJSON(f, results); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func scenarioNames() []string {
	var names []string
	for _, s := range chaos.Scenarios(1) {
		names = append(names, s.Name)
	}
	return names
}
