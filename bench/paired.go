package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// probePaired times workload U (one goroutine, a fresh key each time, lock
// and unlock) of the U cases that -cases picks (default: this library's
// and redsync's at N = 5), taking turns pair by pair: every library's
// pairs are spread over the same moments, so the machine's noise falls on
// each alike and the ratio of their p50s holds from run to run within a
// few percent, where a workload run's slices differ by more:
//
//	cd bench && go run . -probe paired -size 5000 -runs 3
//
// -size is the pairs per library and run (the first tenth are warm-up,
// not counted), -runs the runs (default 3), each on fresh Clients. Its
// table gives each library's p50 and p90 per run and its p50 over the
// first case's.
func probePaired(ctx context.Context, w io.Writer, e *benchEnv, cfg probeConfig) error {
	var cases []benchCase
	for _, c := range allCases() {
		if c.workload == "U" && cfg.cases.MatchString(c.name) {
			cases = append(cases, c)
		}
	}
	if cfg.cases.String() == "" {
		cases = slices.DeleteFunc(cases, func(c benchCase) bool {
			return c.n != 5 || c.lib != "redlock" && c.lib != "redsync"
		})
	}
	if len(cases) < 2 {
		return fmt.Errorf("paired: -cases picks %d U cases; it needs two at least", len(cases))
	}
	runs := cfg.runs
	if runs == 0 {
		runs = 3
	}
	warm := cfg.size / 10
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := []string{"run"}
	for _, c := range cases {
		header = append(header, c.name+" p50 µs", "p90 µs", "p50 ratio")
	}
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for run := range runs {
		lockers := make([]locker, len(cases))
		for i, c := range cases {
			l, stop := c.newLock(e, c.n)
			defer stop()
			lockers[i] = l
		}
		took := make([][]time.Duration, len(cases))
		for p := range cfg.size + warm {
			for i, l := range lockers {
				t0 := time.Now()
				_, unlock, err := l.lock(ctx, newKey("paired:"))
				if err != nil {
					return fmt.Errorf("paired: %s: %w", cases[i].name, err)
				}
				if err := unlock(); err != nil {
					return fmt.Errorf("paired: %s: unlock: %w", cases[i].name, err)
				}
				if p >= warm {
					took[i] = append(took[i], time.Since(t0))
				}
			}
		}
		row := []string{fmt.Sprint(run + 1)}
		var first time.Duration
		for i := range cases {
			slices.Sort(took[i])
			p50, p90 := took[i][len(took[i])/2], took[i][len(took[i])*9/10]
			if i == 0 {
				first = p50
			}
			row = append(row, micros(p50), micros(p90), fmt.Sprintf("%.3f", float64(p50)/float64(first)))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	return tw.Flush()
}

func micros(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)) }
