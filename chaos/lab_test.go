package chaos

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func TestWilson(t *testing.T) {
	for _, tc := range []struct {
		k, n      int
		low, high float64
	}{
		{0, 30, 0, 0.1135},
		{30, 30, 0.8865, 1},
		{5, 10, 0.2366, 0.7634},
		{1, 100, 0.0018, 0.0545},
		{0, 0, 0, 1},
	} {
		low, high := Wilson(tc.k, tc.n)
		if math.Abs(low-tc.low) > 5e-4 || math.Abs(high-tc.high) > 5e-4 {
			t.Errorf("Wilson(%d, %d) = [%.4f, %.4f], want [%.4f, %.4f]", tc.k, tc.n, low, high, tc.low, tc.high)
		}
	}
}

func TestExperiments_declared(t *testing.T) {
	seen := map[string]bool{}
	for _, ex := range Experiments() {
		switch {
		case seen[ex.Name]:
			t.Errorf("two experiments named %s", ex.Name)
		case ex.Title == "" || ex.Fault == "" || ex.XLabel == "":
			t.Errorf("%s: no title, fault or axis label", ex.Name)
		case len(ex.Xs) == 0 || len(ex.Setups) == 0 || ex.Trials < 10 || ex.QuickTrials < 1 || ex.TTL <= 0:
			t.Errorf("%s: sizes %v, %d setups, %d trials (%d quick), ttl %v", ex.Name, ex.Xs, len(ex.Setups), ex.Trials, ex.QuickTrials, ex.TTL)
		case ex.Pause == (ex.strike != nil):
			t.Errorf("%s: a trial strikes the nodes or pauses the holder, one of them", ex.Name)
		}
		seen[ex.Name] = true
	}
}

// labServer fails in CI and skips elsewhere when redis-server is missing.
func labServer(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts redis-server nodes")
	}
	if DefaultServerKind() != Redis {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and no redis-server: the lab needs it")
		}
		t.Skip("no redis-server")
	}
}

// TestRunLab_showsTheKnownOutcomes: at the fault sizes whose outcome the
// algorithm fixes, the lab measures it (no violation in 4 trials, or 3 of
// 4 at least): a pause of three times the
// validity overlaps every time and the fenced resource refuses every stale
// write; a jump of twice the TTL on a majority breaks the lock, on a
// minority it does not; nodes that restart empty at once break it, nodes
// that come back after twice the TTL do not.
func TestRunLab_showsTheKnownOutcomes(t *testing.T) {
	labServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	only := map[string][]float64{
		"client-pause":            {3},
		"read-modify-write-pause": {3},
		"clock-jump-minority":     {2},
		"clock-jump-majority":     {2},
		"restart-delay":           {0, 2},
	}
	var exps []LabExperiment
	for _, ex := range Experiments() {
		if xs, ok := only[ex.Name]; ok {
			ex.Xs, ex.QuickXs = xs, nil
			if raceEnabled {
				// Stalls of the race detector's goroutines past the
				// validity left after the holder's check would count
				// as violations: longer locks leave them room.
				ex.TTL *= 4
			}
			exps = append(exps, ex)
		}
	}
	points, err := runExperiments(ctx, LabConfig{Seed: 7, Trials: 4}, exps)
	if err != nil {
		t.Fatal(err)
	}
	rate := map[string]float64{}
	for _, p := range points {
		t.Logf("%s / %s / x=%g: %d of %d trials violated (overlaps %d, stale %d, lost %d, regressions %d, unavailable %d %s) %s %s",
			p.Experiment, p.Setup, p.X, p.Violations, p.Trials, p.Overlaps, p.StaleWrites, p.LostUpdates, p.Regressions, p.Unavailable, p.Refusal, p.Skipped, p.Err)
		if p.Err != "" {
			t.Errorf("%s / %s: %s", p.Experiment, p.Setup, p.Err)
		}
		if p.Skipped != "" {
			if os.Getenv("CI") == "true" {
				t.Errorf("%s / %s skipped in CI: %s", p.Experiment, p.Setup, p.Skipped)
			}
			continue
		}
		rate[p.Experiment+"/"+p.Setup+"/"+strings.TrimSpace(formatX(p.X))] = p.Rate
		if p.Trials != 4 {
			t.Errorf("%s / %s: %d trials, want 4", p.Experiment, p.Setup, p.Trials)
		}
	}
	for key, want := range map[string]float64{
		"client-pause/Redlock N=3/3":                                         1,
		"client-pause/Redlock N=3, FencedSet/3":                              0,
		"read-modify-write-pause/Redlock N=3, FencedSet/3":                   1,
		"read-modify-write-pause/Redlock N=3, FencedGet + FencedSet/3":       0,
		"clock-jump-majority/Redlock N=3, jump simulated (TTLs rewritten)/2": 1,
		"clock-jump-minority/Redlock N=3, jump simulated (TTLs rewritten)/2": 0,
		"clock-jump-majority/Redlock N=3, clocks under libfaketime/2":        1,
		"clock-jump-minority/Redlock N=3, clocks under libfaketime/2":        0,
		"restart-delay/Redlock N=3/0":                                        1,
		"restart-delay/Redlock N=3/2":                                        0,
	} {
		got, ok := rate[key]
		if !ok {
			continue // skipped, reported above
		}
		// A fault that breaks the lock breaks it in (nearly) every
		// trial: the full run saw 29 of 30 once, for the real clock jump.
		if want == 0 && got != 0 || want == 1 && got < 0.75 {
			t.Errorf("%s: violation rate %v, want %v", key, got, want)
		}
	}
}
