package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/quorumlock/redlock"
)

// probeElection times leader election on N = 3 local redis-server nodes:
//
//   - observe: from a candidate's Campaign returning (it leads) to an
//     observer in another Client receiving that leader, over runs
//     leaderships that follow one another by resignation;
//   - resign: from a leader's Resign returning to the next candidate's
//     Campaign returning (the candidate waits in Campaign meanwhile);
//   - crash: from a leader that stops without resigning (its connections
//     closed, as when its process is killed: its lock is neither renewed
//     nor released) to the next candidate leading; the ttl is 1 s.
func probeElection(ctx context.Context, w io.Writer, e *benchEnv, cfg probeConfig) error {
	const n = 3
	runs := cfg.runs
	if runs == 0 {
		runs = 200
	}
	_, stop, err := e.freshNodes(ctx, n)
	if err != nil {
		return err
	}
	defer stop()
	observe, resign := newHist(), newHist()
	obsClient, stopObs, err := e.redlockClient(n)
	if err != nil {
		return err
	}
	defer stopObs()
	a, stopA, err := e.redlockClient(n)
	if err != nil {
		return err
	}
	defer stopA()
	b, stopB, err := e.redlockClient(n)
	if err != nil {
		return err
	}
	defer stopB()
	const ttl = 5 * time.Second
	ea, _ := a.Election("probe", ttl)
	eb, _ := b.Election("probe", ttl)
	eo, _ := obsClient.Election("probe", ttl)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := eo.Observe(octx)
	// The candidates take turns: one leads while the other waits in
	// Campaign, until the leader resigns.
	cands := []*redlock.Election{ea, eb}
	lead, err := cands[0].Campaign(ctx, "0")
	if err != nil {
		return err
	}
	if !waitTerm(seen, lead.Term()) {
		return fmt.Errorf("the observer did not see the first leader")
	}
	for i := 1; i <= runs; i++ {
		next := make(chan *redlock.Leadership, 1)
		elected := make(chan time.Time, 1)
		go func() {
			l, err := cands[i%2].Campaign(ctx, fmt.Sprint(i))
			elected <- time.Now()
			if err != nil {
				l = nil
			}
			next <- l
		}()
		time.Sleep(2 * time.Millisecond) // the candidate is waiting
		if err := lead.Resign(ctx); err != nil {
			return err
		}
		resigned := time.Now()
		at := <-elected
		if lead = <-next; lead == nil {
			return fmt.Errorf("run %d: no leader", i)
		}
		record(resign, at.Sub(resigned))
		if waitTerm(seen, lead.Term()) {
			record(observe, time.Since(at)) // an upper bound: the observer may have had it a moment before
		}
	}
	_ = lead.Resign(ctx)

	crash := newHist()
	crashRuns := max(runs/40, 3)
	next, _ := b.Election("crash", time.Second)
	for i := range crashRuns {
		c, stopC, err := e.redlockClient(n)
		if err != nil {
			return err
		}
		ec, _ := c.Election("crash", time.Second)
		if _, err := ec.Campaign(ctx, "doomed"); err != nil {
			stopC()
			return err
		}
		got := make(chan time.Time, 1)
		go func() {
			l, err := next.Campaign(ctx, "next")
			got <- time.Now()
			if err == nil {
				_ = l.Resign(context.Background())
			}
		}()
		time.Sleep(100 * time.Millisecond)
		stopC() // its connections closed: neither renewed nor released
		crashed := time.Now()
		d := (<-got).Sub(crashed)
		record(crash, d)
		fmt.Fprintf(w, "crash run %d: next leader after %v\n", i, d.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "\nElection on 3 local redis-server nodes (%d leaderships; crash: %d runs, ttl 1s)\n\n", runs, crashRuns)
	fmt.Fprintln(w, "| measure | p50 | p99 | max |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: |")
	for _, r := range []struct {
		name string
		h    *hdrhistogram.Histogram
	}{{"observer sees a new leader (after its Campaign returns)", observe}, {"next candidate leads after a Resign", resign}, {"next candidate leads after the leader crashed", crash}} {
		fmt.Fprintf(w, "| %s | %v | %v | %v |\n", r.name, q(r.h, 50), q(r.h, 99), time.Duration(r.h.Max())*time.Microsecond)
	}
	return nil
}

// waitTerm waits (at most 5 s) for the observer to see term.
func waitTerm(seen <-chan redlock.Leader, term uint64) bool {
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case l := <-seen:
			if l.Term >= term {
				return true
			}
		case <-t.C:
			return false
		}
	}
}

// newHist is a histogram of durations in microseconds, up to a minute.
func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
}

// record adds d to h (1 µs at least).
func record(h *hdrhistogram.Histogram, d time.Duration) { _ = h.RecordValue(max(d.Microseconds(), 1)) }

// q is h's p-th percentile.
func q(h *hdrhistogram.Histogram, p float64) time.Duration {
	return time.Duration(h.ValueAtQuantile(p)) * time.Microsecond
}
