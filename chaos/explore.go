package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/goleak"
)

// The explorer draws random schedules (see Schedule) from a seed, in the
// spirit of Jepsen's generators: several lock clients, some goroutines
// sharing one, mix every kind of lock, fenced or not, acquire, try, Do,
// renew, extend to longer and shorter ttls, hand locks over, give up
// waiting, write to a protected resource and release, over a few keys,
// while faults within the safety assumptions strike the nodes: slow nodes
// and jitter (any number of them), a minority frozen, cut off or killed
// (coming back with its data, or empty after the largest TTL), and script
// caches flushed. One schedule in five is of a shape that tries progress
// (see shapes): a network slower than the derived node timeout, a starved
// CPU, callers with tiny deadlines, a remote waiter against hand-offs, or
// extreme option values. Checkers then read each history (see
// history.check): exclusion per kind, fencing tokens rising per key across
// kinds, no stale write accepted by a fenced resource, a loss signalled
// before the validity ends, waiting acquires getting their locks once the
// nodes and the key allow (liveness), nothing left on a node for good,
// and, at the end of a run, no goroutine left behind. A schedule that fails
// is shrunk to a smaller one that still fails, and printed with its seed;
// Replay runs it again.

// ExploreConfig sets the size of an exploration.
type ExploreConfig struct {
	Server    ServerKind    // DefaultServerKind() when empty
	Seed      uint64        // the first schedule's seed; the i-th is Seed+i. 0: from the time
	Schedules int           // stop after this many schedules (0: no limit)
	Duration  time.Duration // stop starting schedules after this long (0: no limit)
	Lanes     int           // schedules run at once, each on nodes of its own; default 4
	// Shape, when set, runs only the schedules of that shape (ShapeNames):
	// the seeds of the others are passed over, so that each seed run still
	// draws its schedule again alone.
	Shape    string
	dir      string // where node data goes; a temporary directory when empty
	NoShrink bool   // report a failing schedule as drawn
	// Replay runs this schedule (read with ReadSchedule) instead of drawing
	// any, up to Schedules times (default 1).
	Replay *Schedule
	// OnSchedule is called after each schedule, from the lane that ran it.
	OnSchedule func(ScheduleResult)
}

// ScheduleResult is the outcome of one schedule.
type ScheduleResult struct {
	Seed       uint64
	Shape      string // see Schedule.Shape
	Steps      int    // locks asked for
	Acquired   int    // locks held
	Operations int    // acquires, extends, writes and releases
	Faults     int
	// Refused is how many extreme values the library refused with
	// ErrInvalidArgument: refusals, not failures.
	Refused int
	// Stalled is how many late signals the process's own stalls explained
	// (see the signal check in docs/chaos.md); they are not violations.
	Stalled    int
	Elapsed    time.Duration
	Violations []Violation
}

// ExploreResult is the outcome of an exploration.
type ExploreResult struct {
	Schedules  int           `json:"schedules"`
	Acquired   int           `json:"acquired"`
	Operations int           `json:"operations"`
	Faults     int           `json:"faults"`
	Refused    int           `json:"refused"` // extreme values refused with ErrInvalidArgument
	Stalled    int           `json:"stalled"` // late signals explained by the process's stalls
	Elapsed    time.Duration `json:"elapsed_ns"`
	// Failure is the first schedule that showed a violation, if any.
	Failure *ExploreFailure `json:"failure,omitempty"`
}

// ExploreFailure is a schedule that showed a violation: as drawn, and
// shrunk to fewer steps and faults that still show one.
type ExploreFailure struct {
	Replayed bool `json:"replayed,omitempty"` // the schedule was given (Replay), not drawn
	// FoundAfter is how long the exploration had run when the schedule
	// failed, and Schedules how many had run by then.
	FoundAfter time.Duration `json:"found_after_ns"`
	Schedules  int           `json:"schedules"`
	Schedule   Schedule      `json:"schedule"`
	Violations []Violation   `json:"violations"`
	Shrunk     *Schedule     `json:"shrunk,omitempty"`
	ShrunkTo   []Violation   `json:"shrunk_violations,omitempty"`
}

// Explore runs schedules until one fails, Schedules have run, or Duration
// has passed, and returns what it saw. It returns an error only when the
// harness cannot run (no server, no directory).
func Explore(ctx context.Context, cfg ExploreConfig) (ExploreResult, error) {
	if cfg.Server == "" {
		cfg.Server = DefaultServerKind()
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	if cfg.Lanes <= 0 {
		cfg.Lanes = 4
	}
	if cfg.Replay != nil {
		cfg.Lanes = 1
		if cfg.Schedules == 0 {
			cfg.Schedules = 1
		}
	}
	if cfg.Schedules == 0 && cfg.Duration == 0 {
		return ExploreResult{}, errors.New("chaos: explore needs a number of schedules or a duration")
	}
	if cfg.Shape != "" && !slices.Contains(ShapeNames(), cfg.Shape) {
		return ExploreResult{}, fmt.Errorf("chaos: unknown shape %q (%s)", cfg.Shape, strings.Join(ShapeNames(), ", "))
	}
	if cfg.Server != Redis && cfg.Server != Embedded {
		return ExploreResult{}, fmt.Errorf("chaos: unknown server kind %q (redis or embedded)", cfg.Server)
	}
	if cfg.dir == "" {
		// Nodes that persist every write fsync each one: on a memory file
		// system that costs nothing, and a kill -9 still keeps the data.
		dir, err := os.MkdirTemp(shmDir(), "redlock-explore-")
		if err != nil {
			return ExploreResult{}, err
		}
		defer os.RemoveAll(dir)
		cfg.dir = dir
	}
	before := goleak.IgnoreCurrent()
	stalls := watchStalls()
	defer stalls.close()

	start := time.Now()
	var (
		next    atomic.Int64 // the next seed's offset from cfg.Seed
		started atomic.Int64
		mu      sync.Mutex
		res     ExploreResult
		failing *struct {
			s     Schedule
			vs    []Violation
			after time.Duration
			count int
		}
		wg      sync.WaitGroup
		laneErr []error
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	// A schedule that starves the CPU runs alone (Schedule.exclusive): the
	// others hold this for reading while they run.
	var alone sync.RWMutex
	lanes := make([]*lane, cfg.Lanes)
	for i := range lanes {
		l, err := newLane(cfg.Server, cfg.dir, i)
		if err != nil {
			for _, l := range lanes[:i] {
				l.close()
			}
			return res, err
		}
		l.stalls = stalls
		lanes[i] = l
	}
	for _, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				if cfg.Duration > 0 && time.Since(start) > cfg.Duration {
					return
				}
				var s Schedule
				if cfg.Replay != nil {
					s = *cfg.Replay
				} else {
					s = generate(cfg.Seed+uint64(next.Add(1)-1), l.persist)
					if cfg.Shape != "" && shapeName(s.Shape) != cfg.Shape {
						continue
					}
				}
				if n := started.Add(1); cfg.Schedules > 0 && n > int64(cfg.Schedules) {
					return
				}
				lock, unlock := alone.RLock, alone.RUnlock
				if s.exclusive() {
					lock, unlock = alone.Lock, alone.Unlock
				}
				lock()
				sr, err := runOne(runCtx, l, s)
				unlock()
				if err != nil {
					if runCtx.Err() == nil {
						mu.Lock()
						laneErr = append(laneErr, fmt.Errorf("schedule %d: %w", s.Seed, err))
						mu.Unlock()
						stop()
					}
					return
				}
				mu.Lock()
				res.Schedules++
				res.Acquired += sr.Acquired
				res.Operations += sr.Operations
				res.Faults += sr.Faults
				res.Refused += sr.Refused
				res.Stalled += sr.Stalled
				if len(sr.Violations) > 0 && failing == nil {
					failing = &struct {
						s     Schedule
						vs    []Violation
						after time.Duration
						count int
					}{s, sr.Violations, time.Since(start), res.Schedules}
					stop()
				}
				mu.Unlock()
				if cfg.OnSchedule != nil {
					cfg.OnSchedule(sr)
				}
			}
		}()
	}
	wg.Wait()
	if failing != nil {
		res.Failure = &ExploreFailure{Schedule: failing.s, Violations: failing.vs, FoundAfter: failing.after, Schedules: failing.count,
			Replayed: cfg.Replay != nil}
		if !cfg.NoShrink && ctx.Err() == nil {
			res.Failure.Shrunk, res.Failure.ShrunkTo = shrink(ctx, lanes[0], failing.s, failing.vs)
		}
	}
	for _, l := range lanes {
		l.close()
	}
	stalls.close()
	res.Elapsed = time.Since(start)
	if len(laneErr) > 0 {
		return res, errors.Join(laneErr...)
	}
	if res.Failure == nil && ctx.Err() == nil {
		if err := goleak.Find(append(leakIgnores(), before)...); err != nil {
			res.Failure = &ExploreFailure{Violations: []Violation{{checkLeak, err.Error()}}}
		}
	}
	return res, nil
}

// ShapeNames lists the shapes a schedule may be drawn in: "mix", the
// general mix, and the shapes that try progress (see shapes).
func ShapeNames() []string {
	var out []string
	for _, s := range shapeNames {
		out = append(out, shapeName(s))
	}
	return out
}

// shapeName is what ExploreConfig.Shape calls a schedule's shape.
func shapeName(shape string) string {
	if shape == "" {
		return "mix"
	}
	return shape
}

// leakIgnores are the goroutines that are not the library's: go-redis's
// pool dialing again after a failed dial (it ends with its next attempt),
// and toxiproxy's links of stopped proxies blocked on a channel.
func leakIgnores() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
	}
}

// shmDir is a memory file system for the nodes' data, when there is one.
func shmDir() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if f, err := os.CreateTemp("/dev/shm", "redlock-probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return "/dev/shm"
		}
	}
	return ""
}

// runOne runs s on l and checks its history, bounded in time: a schedule
// that does not end within a minute is a violation of its own.
func runOne(parent context.Context, l *lane, s Schedule) (ScheduleResult, error) {
	ctx, cancel := context.WithTimeout(parent, time.Minute)
	defer cancel()
	start := time.Now()
	h, err := l.run(ctx, s)
	sr := ScheduleResult{Seed: s.Seed, Shape: s.Shape, Steps: s.steps(), Faults: len(s.Faults), Elapsed: time.Since(start)}
	if err != nil {
		if parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			sr.Violations = []Violation{{checkHarness, "the schedule did not end within a minute"}}
			return sr, nil
		}
		return sr, err
	}
	for _, x := range h.holds {
		sr.Operations += x.ops
		sr.Refused += x.refusals
		if !x.acquired.IsZero() {
			sr.Acquired++
		}
	}
	sr.Violations = h.check()
	sr.Stalled = h.stalled
	return sr, nil
}

// shrinkRuns is how many times a smaller candidate runs before it is taken
// not to fail: the runs are not deterministic, a timing may be needed.
// shrinkTime bounds the whole shrink.
const (
	shrinkRuns = 3
	shrinkTime = 3 * time.Minute
)

// shrink looks for a smaller schedule that still shows a violation of one
// of the checks that s showed: it drops faults, steps and actions one at a
// time while the failure stays, within a bounded number of runs.
func shrink(ctx context.Context, l *lane, s Schedule, vs []Violation) (*Schedule, []Violation) {
	checks := map[string]bool{}
	for _, v := range vs {
		checks[v.Check] = true
	}
	fails := func(c Schedule) []Violation {
		for range shrinkRuns {
			if ctx.Err() != nil {
				return nil
			}
			if err := l.reset(ctx); err != nil {
				return nil
			}
			sr, err := runOne(ctx, l, c)
			if err != nil {
				return nil
			}
			for _, v := range sr.Violations {
				if checks[v.Check] {
					return sr.Violations
				}
			}
		}
		return nil
	}
	best, bestVs := s, vs
	budget := 60 // candidate runs
	// and a time budget: the schedules that try progress take seconds each
	deadline := time.Now().Add(shrinkTime)
	for changed := true; changed && budget > 0; {
		changed = false
		for _, c := range candidates(best) {
			if budget--; budget < 0 || time.Now().After(deadline) {
				budget = 0
				break
			}
			if got := fails(c); got != nil {
				best, bestVs, changed = c, got, true
				break
			}
		}
	}
	if best.steps() == s.steps() && len(best.Faults) == len(s.Faults) {
		return nil, nil
	}
	return &best, bestVs
}

// candidates are the schedules one removal smaller than s: a fault, an
// actor, a step, an action.
func candidates(s Schedule) []Schedule {
	var out []Schedule
	clone := func() Schedule {
		b, _ := json.Marshal(s)
		var c Schedule
		_ = json.Unmarshal(b, &c)
		return c
	}
	for i := range s.Faults {
		c := clone()
		c.Faults = slices.Delete(c.Faults, i, i+1)
		out = append(out, c)
	}
	for ci, cp := range s.Clients {
		for ai, steps := range cp.Actors {
			if s.steps() > 1 {
				c := clone()
				c.Clients[ci].Actors = slices.Delete(c.Clients[ci].Actors, ai, ai+1)
				if len(c.Clients[ci].Actors) == 0 {
					c.Clients = slices.Delete(c.Clients, ci, ci+1)
				}
				out = append(out, c)
			}
			for si, st := range steps {
				if len(steps) > 1 {
					c := clone()
					c.Clients[ci].Actors[ai] = slices.Delete(c.Clients[ci].Actors[ai], si, si+1)
					out = append(out, c)
				}
				for ii := range st.Actions {
					c := clone()
					acts := &c.Clients[ci].Actors[ai][si].Actions
					*acts = slices.Delete(*acts, ii, ii+1)
					out = append(out, c)
				}
			}
		}
	}
	return out
}

// FormatFailure writes a failure for a reader: the violations, the schedule
// (shrunk, when it could be), its JSON for Replay, and how to run it again.
func FormatFailure(f *ExploreFailure) string {
	var b strings.Builder
	s, vs := f.Schedule, f.Violations
	if len(s.Clients) > 0 {
		fmt.Fprintf(&b, "schedule %d failed (found after %d schedules, %v)", s.Seed, f.Schedules, f.FoundAfter.Round(100*time.Millisecond))
	}
	if f.Shrunk != nil {
		s, vs = *f.Shrunk, f.ShrunkTo
		fmt.Fprintf(&b, "; shrunk from %d steps and %d faults to %d and %d", f.Schedule.steps(), len(f.Schedule.Faults), s.steps(), len(s.Faults))
	}
	b.WriteString(":\n")
	for _, v := range vs {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	if len(s.Clients) == 0 {
		return b.String()
	}
	b.WriteString(s.String())
	js, _ := json.Marshal(s)
	fmt.Fprintf(&b, "replay: redlock chaos --explore --replay FILE, with FILE holding:\n%s\n", js)
	if !f.Replayed {
		fmt.Fprintf(&b, "or draw it again: redlock chaos --explore --seed %d --schedules 1\n", f.Schedule.Seed)
	}
	return b.String()
}
