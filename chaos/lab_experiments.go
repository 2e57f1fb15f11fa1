package chaos

import (
	"context"
	"time"
)

// The lab's experiments, one row each: a researcher adds a fault or a
// configuration here, in a few lines. A trial's holder and contender, and
// what counts as a violation, are in lab_trial.go.

// Setups the experiments share.
var (
	redlock3        = LabSetup{Name: "Redlock N=3", Nodes: 3}
	redlock3Fenced  = LabSetup{Name: "Redlock N=3, FencedSet", Nodes: 3, Fenced: true}
	redlock3RMW     = LabSetup{Name: "Redlock N=3, FencedGet + FencedSet", Nodes: 3, Fenced: true, FencedRead: true}
	redlock3Faked   = LabSetup{Name: "Redlock N=3, clocks under libfaketime", Nodes: 3, FakeClock: true}
	redlock3Rewrite = LabSetup{Name: "Redlock N=3, jump simulated (TTLs rewritten)", Nodes: 3}
	failoverPair    = LabSetup{Name: "master + replica, Sentinel", Nodes: 1, Failover: true}
	failoverAcked   = LabSetup{Name: "master + replica, Sentinel, WithReplicaAck(1, 100ms)", Nodes: 1, Failover: true, ReplicaAck: true}
)

// configurations are the setups of the side-by-side table: what most users
// run (one Redis), a failover pair, and Redlock at N=3 and N=5, each
// without persistence and with appendfsync always.
func configurations() []LabSetup {
	var out []LabSetup
	for _, fsync := range []string{"", "always"} {
		suffix := ", no persistence"
		if fsync != "" {
			suffix = ", appendfsync always"
		}
		out = append(out,
			LabSetup{Name: "single node" + suffix, Nodes: 1, Fsync: fsync},
			LabSetup{Name: "master + replica, Sentinel" + suffix, Nodes: 1, Failover: true, Fsync: fsync},
			LabSetup{Name: "Redlock N=3" + suffix, Nodes: 3, Fsync: fsync},
			LabSetup{Name: "Redlock N=5" + suffix, Nodes: 5, Fsync: fsync})
	}
	return out
}

// Experiments returns the lab's experiments in the order of the report.
func Experiments() []LabExperiment {
	const ttl = 300 * time.Millisecond
	jump := func(majority bool) func(context.Context, *trial) error {
		return func(ctx context.Context, t *trial) error {
			k := 1
			if majority {
				k = len(t.lane.nodes)/2 + 1
			}
			return t.lane.jump(ctx, t.pick(k), time.Duration(t.x*float64(t.ex.TTL)))
		}
	}
	return []LabExperiment{
		{
			Name: "client-pause", Title: "Client pause after the last validity check",
			Fault:  "the holder checks its validity, then pauses (a GC pause, a stalled VM) for x × the validity it had left, then writes",
			XLabel: "pause ÷ validity left", Xs: []float64{0.25, 0.5, 0.75, 0.9, 1, 1.1, 1.25, 1.5, 2, 3}, QuickXs: []float64{0.5, 1.5, 3},
			Setups: []LabSetup{redlock3, redlock3Fenced}, Trials: 40, QuickTrials: 8, Concurrent: 8,
			TTL: ttl, Pause: true,
		},
		{
			Name: "read-modify-write-pause", Title: "Client pause in a read-modify-write, the stale write landing first",
			Fault:  "the holder reads the counter, checks its validity, then pauses for x × the validity it had left, then writes the counter it read plus one; the contender, once it holds the lock and has read, writes only after the holder's write: write-only fencing takes the stale write (no higher token was written yet), a fenced read refuses it",
			XLabel: "pause ÷ validity left", Xs: []float64{0.5, 0.9, 1.1, 1.5, 2, 3}, QuickXs: []float64{0.5, 1.5, 3},
			Setups: []LabSetup{redlock3Fenced, redlock3RMW}, Trials: 40, QuickTrials: 8, Concurrent: 8,
			TTL: ttl, Pause: true, ContenderWritesLast: true,
		},
		{
			Name: "clock-jump-minority", Title: "Clock jump on a minority of the nodes",
			Fault:  "right after the acquire, once the holder's key is on every node, the wall clock of one node of three jumps forward by x × the TTL; the holder works half its validity",
			XLabel: "jump ÷ TTL", Xs: []float64{0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 1, 2}, QuickXs: []float64{0.25, 1},
			Setups: []LabSetup{redlock3Faked, redlock3Rewrite}, Trials: 30, QuickTrials: 3,
			TTL: ttl, Work: 0.5, strike: jump(false), everywhere: true,
		},
		{
			Name: "clock-jump-majority", Title: "Clock jump on a majority of the nodes",
			Fault:  "right after the acquire, once the holder's key is on every node, the wall clocks of two nodes of three jump forward by x × the TTL; the holder works half its validity",
			XLabel: "jump ÷ TTL", Xs: []float64{0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 1, 2}, QuickXs: []float64{0.25, 1},
			Setups: []LabSetup{redlock3Faked, redlock3Rewrite}, Trials: 30, QuickTrials: 3,
			TTL: ttl, Work: 0.5, strike: jump(true), everywhere: true,
		},
		{
			Name: "restart-delay", Title: "Crashed nodes restart empty after a delay",
			Fault:  "right after the acquire, kill -9 two nodes of three (no persistence) and restart them empty after x × the TTL; the holder works 80 % of its validity",
			XLabel: "restart delay ÷ TTL", Xs: []float64{0, 0.25, 0.5, 0.75, 0.9, 1, 1.25, 1.5, 2}, QuickXs: []float64{0, 1, 2},
			Setups: []LabSetup{redlock3}, Trials: 30, QuickTrials: 3,
			TTL: ttl, Work: 0.8,
			strike: func(ctx context.Context, t *trial) error {
				return t.lane.crash(ctx, t.pick(2), time.Duration(t.x*float64(t.ex.TTL)))
			},
		},
		{
			Name: "persistence", Title: "Persistence modes under kill -9",
			Fault:  "at a random moment within x ms of the acquire, kill -9 two nodes of three and restart them at once; the holder works 80 % of its validity",
			XLabel: "kill within (ms of the acquire)", Xs: []float64{2},
			Setups: []LabSetup{
				{Name: "Redlock N=3, no persistence", Nodes: 3},
				{Name: "Redlock N=3, appendfsync everysec", Nodes: 3, Fsync: "everysec"},
				{Name: "Redlock N=3, appendfsync always", Nodes: 3, Fsync: "always"},
			},
			Trials: 30, QuickTrials: 3, TTL: ttl, Work: 0.8,
			strike: func(ctx context.Context, t *trial) error {
				_ = sleep(ctx, time.Duration(t.rng.Float64()*t.x*float64(time.Millisecond)))
				return t.lane.crash(ctx, t.pick(2), 0)
			},
		},
		{
			Name: "failover", Title: "Master crash and Sentinel failover",
			Fault: "the replication link is cut x ms before the master is killed (kill -9, it stays down) and the Sentinel promotes the replica; " +
				"the lock was taken at a random moment within the 100 ms before the kill; the holder works 80 % of its validity",
			XLabel: "replication outage before the crash (ms)", Xs: []float64{0, 25, 50, 75, 100}, QuickXs: []float64{100},
			Setups: []LabSetup{failoverPair, failoverAcked}, Trials: 10, QuickTrials: 2, Fresh: true,
			// a ttl the Sentinel's failover (about a second) fits in
			TTL: 2 * time.Second, Work: 0.8,
			prepare: func(ctx context.Context, t *trial) error {
				// u: from the acquire to the kill; the link is cut x before the kill
				t.u = time.Duration(t.rng.Float64() * float64(100*time.Millisecond))
				cut := time.Duration(t.x * float64(time.Millisecond))
				if t.u < cut {
					if err := t.lane.replLink.Blackhole(); err != nil {
						return err
					}
					t.cut = true
					return sleep(ctx, cut-t.u)
				}
				return nil
			},
			strike: func(ctx context.Context, t *trial) error {
				l := t.lane
				cut := time.Duration(t.x * float64(time.Millisecond))
				if !t.cut {
					_ = sleep(ctx, t.u-cut)
					if err := l.replLink.Blackhole(); err != nil {
						return err
					}
					_ = sleep(ctx, cut)
				} else {
					_ = sleep(ctx, t.u)
				}
				m, err := l.master(ctx)
				if err != nil {
					return err
				}
				old := l.nodes[m].Addr()
				if err := l.nodes[m].kill(); err != nil {
					return err
				}
				return l.sentinel.waitFailover(ctx, old, 10*time.Second)
			},
		},
		{
			Name: "crash-one", Title: "One process crashes and restarts at once",
			Fault:  "right after the acquire, kill -9 one process (a random node; the master of a pair) and restart it at once; the holder works 80 % of its validity",
			XLabel: "configuration", Xs: []float64{1},
			Setups: configurations(), Trials: 30, QuickTrials: 3, TTL: ttl, Work: 0.8,
			strike: func(ctx context.Context, t *trial) error { return crashSome(ctx, t, false) },
		},
		{
			Name: "crash-majority", Title: "A majority of the processes crash and restart at once",
			Fault:  "right after the acquire, kill -9 a majority of the processes (the single node; both of a pair) and restart them at once; the holder works 80 % of its validity",
			XLabel: "configuration", Xs: []float64{1},
			Setups: configurations(), Trials: 30, QuickTrials: 3, TTL: ttl, Work: 0.8,
			strike: func(ctx context.Context, t *trial) error { return crashSome(ctx, t, true) },
		},
	}
}

// crashSome kills one node (for a failover pair, its master) or a
// majority, and restarts them at once.
func crashSome(ctx context.Context, t *trial, majority bool) error {
	l := t.lane
	switch {
	case majority:
		return l.crash(ctx, t.pick(len(l.nodes)/2+1), 0)
	case l.setup.Failover:
		m, err := l.master(ctx)
		if err != nil {
			return err
		}
		return l.crash(ctx, []int{m}, 0)
	}
	return l.crash(ctx, t.pick(1), 0)
}
