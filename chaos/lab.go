// The lab: how often each configuration breaks mutual exclusion, as a rate
// with a confidence interval, against the size of one fault. Each
// experiment is a row of Experiments (lab_experiments.go): a fault swept
// over its sizes and the configurations that meet it. Each trial is one
// holder and one contender on real nodes: the holder takes a lock, the
// fault strikes, the holder works (it stops once its validity check
// fails, as a correct holder does) and makes one read-modify-write on a
// protected resource; the contender tries the lock all along, and makes its
// own read-modify-write once it has it. The trial then tells what went
// wrong (see trialOutcome).

package chaos

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"time"
)

// LabSetup is one configuration of the lock's nodes and of the resource.
type LabSetup struct {
	Name       string `json:"setup"`
	Nodes      int    `json:"nodes"`                 // independent masters (Redlock's N); 1 is a single Redis
	Failover   bool   `json:"failover,omitempty"`    // one master and one replica, promoted by Redis Sentinel
	Fsync      string `json:"appendfsync,omitempty"` // "" (no persistence), "everysec" or "always"
	Fenced     bool   `json:"fenced,omitempty"`      // the resource takes writes through redlock.FencedSet
	FencedRead bool   `json:"fenced_read,omitempty"` // and reads through redlock.FencedGet (with Fenced)
	ReplicaAck bool   `json:"replica_ack,omitempty"` // redlock.WithReplicaAck(1, ...)
	FakeClock  bool   `json:"fake_clock,omitempty"`  // the nodes run under libfaketime: clock jumps are real
}

// LabExperiment is one fault swept over its sizes, met by each of Setups.
type LabExperiment struct {
	Name   string
	Title  string
	Fault  string // what is done, in words
	XLabel string // the fault's size, with its unit, for the axis
	// Xs are the fault's sizes of a full run, QuickXs those of --quick.
	Xs, QuickXs []float64
	Setups      []LabSetup
	// Trials per point of a full run and of --quick.
	Trials, QuickTrials int
	TTL                 time.Duration
	// Work is how much of its validity the holder spends working before
	// its last validity check (and its write, if the check passes).
	Work float64
	// Pause: after its check the holder pauses x × the validity left,
	// then writes (a GC pause, a stalled VM).
	Pause bool
	// ContenderWrites last: the contender, once it holds the lock and has
	// read the counter, writes only after the holder's write (or once the
	// holder is done): the interleaving in which a holder's stale write of
	// a value computed from an old read lands before the next holder's.
	ContenderWritesLast bool
	// Concurrent trials run at once on one set of nodes: for faults that
	// touch no node.
	Concurrent int
	// Fresh: each trial gets nodes of its own (the failover experiment,
	// whose trial leaves the nodes swapped).
	Fresh bool

	// everywhere: the fault strikes only once the holder's key is on every
	// node. An acquire returns at a quorum, and a call to the last node may
	// land later; a holder on a bare quorum loses the lock to a fault on
	// one node of it (the lost copy leaves fewer than a quorum), which is
	// not what a minority's fault is meant to show.
	everywhere bool

	// prepare, when set, runs before the holder's acquire: the part of the
	// fault that comes first.
	prepare func(ctx context.Context, t *trial) error
	// strike is the fault, run as soon as the holder has its lock; it
	// returns once the fault is over.
	strike func(ctx context.Context, t *trial) error
}

// LabPoint is the outcome of one experiment's trials at one size of the
// fault, for one setup.
type LabPoint struct {
	Experiment string  `json:"experiment"`
	Setup      string  `json:"setup"`
	X          float64 `json:"x"`
	Trials     int     `json:"trials"`
	// Violations counts the trials with an overlap that the resource let
	// through (for a fenced resource, a stale write or a lost update), a
	// stale write, a lost update or a fencing token that went back.
	Violations int     `json:"violations"`
	Rate       float64 `json:"rate"`
	Low        float64 `json:"ci95_low"` // Wilson score interval, 95 %
	High       float64 `json:"ci95_high"`
	// What the trials showed, each counted once per trial.
	Overlaps    int `json:"overlaps"`     // the contender held the lock before the holder was done
	StaleWrites int `json:"stale_writes"` // the holder's write landed after the contender's
	LostUpdates int `json:"lost_updates"` // the resource's counter lost an increment
	Regressions int `json:"token_regressions"`
	// Unavailable counts the trials whose holder got no lock at all (with
	// WithReplicaAck, replicas that lag refuse it).
	Unavailable int    `json:"unavailable"`
	Refusal     string `json:"refusal,omitempty"` // the first such trial's error
	Skipped     string `json:"skipped,omitempty"`
	Err         string `json:"error,omitempty"`
}

// LabConfig sets what a lab run does.
type LabConfig struct {
	Quick  bool     // few sizes and trials: a few minutes
	Seed   uint64   // 0: from the time
	Trials int      // 0: each experiment's own
	Only   []string // experiment names; all when empty
	// Progress, when set, is called after each point with how many of
	// the run's points are done.
	Progress func(done, total int, p LabPoint)
}

// Wilson returns the 95 % Wilson score interval of k events in n trials:
// unlike the normal approximation it stays within [0, 1] and is not empty
// at k = 0 or k = n (with 0 of 30, it is [0, 0.114]).
func Wilson(k, n int) (low, high float64) {
	if n <= 0 {
		return 0, 1
	}
	const z = 1.959963984540054
	p, nf := float64(k)/float64(n), float64(n)
	d := 1 + z*z/nf
	center := (p + z*z/(2*nf)) / d
	half := z * math.Sqrt(p*(1-p)/nf+z*z/(4*nf*nf)) / d
	return max(0, center-half), min(1, center+half)
}

// RunLab runs the chosen experiments on redis-server nodes it starts on
// loopback and returns one point per experiment, setup and fault size. It
// returns an error only when the lab cannot run at all (no redis-server,
// an unknown experiment); a point that cannot be measured says why.
func RunLab(ctx context.Context, cfg LabConfig) ([]LabPoint, error) {
	if DefaultServerKind() != Redis {
		return nil, errors.New("chaos: the lab needs redis-server (apt-get install redis-server)")
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	var chosen []LabExperiment
	for _, ex := range Experiments() {
		if len(cfg.Only) == 0 || contains(cfg.Only, ex.Name) {
			chosen = append(chosen, ex)
		}
	}
	if len(chosen) == 0 {
		return nil, fmt.Errorf("chaos: no experiment named %v", cfg.Only)
	}
	return runExperiments(ctx, cfg, chosen)
}

func runExperiments(ctx context.Context, cfg LabConfig, chosen []LabExperiment) ([]LabPoint, error) {
	dir, err := os.MkdirTemp("", "redlock-lab-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	total := 0
	for _, ex := range chosen {
		total += len(ex.Setups) * len(ex.sizes(cfg.Quick))
	}
	var points []LabPoint
	for _, ex := range chosen {
		for _, setup := range ex.Setups {
			for _, x := range ex.sizes(cfg.Quick) {
				if ctx.Err() != nil {
					return points, ctx.Err()
				}
				p := ex.point(ctx, dir, setup, x, ex.trials(cfg), labSeed(cfg.Seed, ex.Name, setup.Name, x))
				points = append(points, p)
				if cfg.Progress != nil {
					cfg.Progress(len(points), total, p)
				}
			}
		}
	}
	return points, nil
}

// formatX writes a fault's size as short as it reads.
func formatX(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

func (ex LabExperiment) sizes(quick bool) []float64 {
	if quick && len(ex.QuickXs) > 0 {
		return ex.QuickXs
	}
	return ex.Xs
}

func (ex LabExperiment) trials(cfg LabConfig) int {
	switch {
	case cfg.Trials > 0:
		return cfg.Trials
	case cfg.Quick:
		return ex.QuickTrials
	}
	return ex.Trials
}

// labSeed derives a point's seed from the run's, so that a point draws the
// same whichever others run.
func labSeed(seed uint64, parts ...any) uint64 {
	h := fnv.New64a()
	fmt.Fprint(h, parts...)
	return seed ^ h.Sum64()
}

// point runs the trials of one point.
func (ex LabExperiment) point(ctx context.Context, dir string, setup LabSetup, x float64, trials int, seed uint64) LabPoint {
	p := LabPoint{Experiment: ex.Name, Setup: setup.Name, X: x}
	if setup.FakeClock {
		if why := FakeTimeMissing(); why != "" {
			p.Skipped = why
			return p
		}
	}
	if setup.Failover {
		if why := sentinelMissing(); why != "" {
			p.Skipped = why
			return p
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x1ab))
	var lane *labLane
	defer func() {
		if lane != nil {
			lane.close()
		}
	}()
	outcomes := make([]trialOutcome, 0, trials)
	conc := max(ex.Concurrent, 1)
	for i := 0; i < trials; i += conc {
		if ctx.Err() != nil {
			p.Err = ctx.Err().Error()
			break
		}
		if lane == nil || ex.Fresh {
			if lane != nil {
				lane.close()
			}
			var err error
			if lane, err = startLane(ctx, dir, setup); err != nil {
				p.Err = err.Error()
				lane = nil
				break
			}
		}
		batch := min(conc, trials-i)
		results := make(chan trialResult, batch)
		for j := range batch {
			t := &trial{lane: lane, ex: &ex, x: x, key: fmt.Sprintf("lab:%s:%d", ex.Name, i+j), rng: rand.New(rand.NewPCG(rng.Uint64(), uint64(j)))}
			go func() {
				o, err := t.run(ctx)
				results <- trialResult{o, err}
			}()
		}
		var errs []error
		for range batch {
			r := <-results
			if r.err != nil {
				errs = append(errs, r.err)
				continue
			}
			outcomes = append(outcomes, r.outcome)
		}
		if err := errors.Join(errs...); err != nil {
			p.Err = err.Error()
			break
		}
	}
	for _, o := range outcomes {
		p.Trials++
		if o.unavailable {
			if p.Unavailable == 0 {
				p.Refusal = o.refusal
			}
			p.Unavailable++
			continue
		}
		p.Overlaps += b2i(o.overlap)
		p.StaleWrites += b2i(o.staleWrite)
		p.LostUpdates += b2i(o.lostUpdate)
		p.Regressions += b2i(o.regression)
		p.Violations += b2i(o.violation(setup.Fenced))
	}
	if p.Trials > 0 {
		p.Rate = float64(p.Violations) / float64(p.Trials)
	}
	p.Low, p.High = Wilson(p.Violations, p.Trials)
	return p
}

type trialResult struct {
	outcome trialOutcome
	err     error
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
