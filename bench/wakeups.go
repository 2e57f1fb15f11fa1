package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/quorumlock/redlock"
)

// The wake-ups probe (issue 28) asks whether a waiter hears the release it
// waits for, for every lock kind, on 3 loopback nodes with every Client on
// the library's default options:
//
//	-probe wakeups    per kind (plain, reentrant, write, semaphore-1,
//	                  semaphore-2, multi-key, fair): a holder Client holds
//	                  a fresh key for a random 5-20 ms, then releases it; a
//	                  waiter Client (another process's: go-redis clients of
//	                  its own) calls Acquire on the key at a random moment
//	                  of the hold. Each trial is timed from the holder's
//	                  Release returning to the waiter's Acquire returning.
//	                  Then the read-write case of the issue: 8 readers
//	                  holding the key 20 ms at a time, 0-5 ms apart, in one
//	                  Client (rw-readers-1client) or in a Client each
//	                  (rw-readers-8clients), and a writer in a Client of its
//	                  own that takes the write lock for 1 ms, 0-10 ms
//	                  apart, timed from its Acquire call to its return.
//	                  -runs sets the trials per kind and the writer's
//	                  acquisitions per read-write row (default 1000);
//	                  -cases picks rows by name.

// wakeMissed is the delay past which a waiter did not hear the release:
// only a poll explains it. A waiter that hears the release tries at once
// (after at most wakeSpread, 0.5 ms), and if the release has not reached
// a quorum yet, again within 2.5 ms. A waiter not yet subscribed follows
// the default policy's delays, 5-10 ms doubling: the first four add up to
// at most 150 ms, and a hold of at most 20 ms is over long before. Once
// subscribed, the default policy waits 1-1.5 s (a fair waiter 1 s): that
// is what a missed release costs, four times this threshold.
const wakeMissed = 250 * time.Millisecond

const (
	wakeRuns    = 1000 // default trials per row
	wakeLanes   = 4    // trials run at once, each lane on keys of its own
	wakeTTL     = 10 * time.Second
	wakeBound   = 10 * time.Second // a waiter's ctx: generous, a miss costs 1.5 s at most
	wakeHoldMin = 5 * time.Millisecond
	wakeHoldMax = 20 * time.Millisecond

	rwReaders    = 8
	rwReaderHold = 20 * time.Millisecond
	rwReaderGap  = 5 * time.Millisecond
	rwWriterHold = time.Millisecond
	rwWriterGap  = 10 * time.Millisecond
	rwTarget     = 100 * time.Millisecond // the writer's p99 the issue asks for
)

// wakeKind is a lock kind as the probe takes it: holders locks are taken by
// the holder Client before the waiter comes, and the first is released.
type wakeKind struct {
	name    string
	holders int
	// acquire takes the lock on key for who ("holder" or "waiter": a
	// reentrant lock's owner).
	acquire func(ctx context.Context, c *redlock.Client, key, who string) (*redlock.Lock, error)
}

func wakeKinds() []wakeKind {
	with := func(opts ...redlock.AcquireOption) func(context.Context, *redlock.Client, string, string) (*redlock.Lock, error) {
		return func(ctx context.Context, c *redlock.Client, key, _ string) (*redlock.Lock, error) {
			return c.Acquire(ctx, key, wakeTTL, opts...)
		}
	}
	return []wakeKind{
		{name: "plain", holders: 1, acquire: with()},
		{name: "reentrant", holders: 1, acquire: func(ctx context.Context, c *redlock.Client, key, who string) (*redlock.Lock, error) {
			return c.Acquire(ctx, key, wakeTTL, redlock.WithOwner(who))
		}},
		{name: "write", holders: 1, acquire: with(redlock.ForWrite())},
		{name: "semaphore-1", holders: 1, acquire: with(redlock.WithPermits(1))},
		{name: "semaphore-2", holders: 2, acquire: with(redlock.WithPermits(2))},
		{name: "multi-key", holders: 1, acquire: func(ctx context.Context, c *redlock.Client, key, _ string) (*redlock.Lock, error) {
			return c.AcquireAll(ctx, []string{key, "{" + key + "}:second"}, wakeTTL)
		}},
		{name: "fair", holders: 1, acquire: with(redlock.Fair())},
	}
}

// wakeRow is one row of the probe's table.
type wakeRow struct {
	name     string
	trials   int
	waited   int             // trials whose waiter came before the release began; -1 for read-write
	delays   []time.Duration // per kind: release to lock; read-write: the writer's wait
	failed   int
	firstErr string
	note     string
}

func (r *wakeRow) missed() int {
	n := 0
	for _, d := range r.delays {
		if d > wakeMissed {
			n++
		}
	}
	return n
}

func probeWakeups(ctx context.Context, w io.Writer, e *benchEnv, cfg probeConfig) error {
	const n = 3
	runs := cfg.runs
	if runs == 0 {
		runs = wakeRuns
	}
	_, stopAdmin, err := e.freshNodes(ctx, n)
	if err != nil {
		return err
	}
	defer stopAdmin()
	start := time.Now()
	var rows []*wakeRow
	for _, k := range wakeKinds() {
		if !cfg.cases.MatchString(k.name) {
			continue
		}
		row, err := wakeKindRow(ctx, e, n, k, runs)
		if err != nil {
			return fmt.Errorf("%s: %w", k.name, err)
		}
		rows = append(rows, row)
	}
	for _, clients := range []int{1, rwReaders} {
		name := fmt.Sprintf("rw-readers-%dclient", clients)
		if clients > 1 {
			name += "s"
		}
		if !cfg.cases.MatchString(name) {
			continue
		}
		row, err := wakeRWRow(ctx, e, n, name, clients, runs)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, row)
	}
	fmt.Fprintln(os.Stderr)
	writeWakeTable(w, rows, runs, time.Since(start))
	return nil
}

// wakeKindRow runs trials of kind k in wakeLanes lanes at once, the lanes
// sharing one holder Client and one waiter Client.
func wakeKindRow(ctx context.Context, e *benchEnv, n int, k wakeKind, runs int) (*wakeRow, error) {
	holder, stopHolder, err := e.redlockClient(n)
	if err != nil {
		return nil, err
	}
	defer stopHolder()
	waiter, stopWaiter, err := e.redlockClient(n)
	if err != nil {
		return nil, err
	}
	defer stopWaiter()
	row := &wakeRow{name: k.name}
	var (
		mu   sync.Mutex
		next int
		wg   sync.WaitGroup
		ferr error
	)
	for range wakeLanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if next >= runs || ferr != nil {
					mu.Unlock()
					return
				}
				next++
				i := next
				mu.Unlock()
				fmt.Fprintf(os.Stderr, "\rwakeups %-12s %d/%d   ", k.name, i, runs)
				t, err := wakeTrial(ctx, k, holder, waiter, newKey("probe-wakeups:"+k.name+":"))
				mu.Lock()
				switch {
				case err != nil:
					ferr = err // the holder could not take a free key: the setup is broken
				case t.err != nil:
					row.trials++
					row.failed++
					if row.firstErr == "" {
						row.firstErr = t.err.Error()
					}
				default:
					row.trials++
					row.delays = append(row.delays, t.delay)
					if t.waited {
						row.waited++
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	row.note = fmt.Sprintf("hold %v-%v", wakeHoldMin, wakeHoldMax)
	return row, ferr
}

// wakeTrialResult is one trial: how long after the release's return the
// waiter got the lock (0 when it got it first), whether it came before the
// release began, and the waiter's error.
type wakeTrialResult struct {
	delay  time.Duration
	waited bool
	err    error
}

// wakeTrial holds key with the holder Client for a random 5-20 ms while the
// waiter Client calls Acquire on it at a random moment of the hold.
func wakeTrial(ctx context.Context, k wakeKind, holder, waiter *redlock.Client, key string) (wakeTrialResult, error) {
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	held := make([]*redlock.Lock, k.holders)
	for i := range held {
		l, err := k.acquire(hctx, holder, key, "holder")
		if err != nil {
			for _, l := range held[:i] {
				_ = l.Release(ctx)
			}
			return wakeTrialResult{}, fmt.Errorf("holder on a free key: %w", err)
		}
		held[i] = l
	}
	heldAt := time.Now()
	hold := wakeHoldMin + rand.N(wakeHoldMax-wakeHoldMin)
	comes := rand.N(hold)
	type outcome struct {
		called, returned time.Time
		lock             *redlock.Lock
		err              error
	}
	got := make(chan outcome, 1)
	go func() {
		time.Sleep(time.Until(heldAt.Add(comes)))
		wctx, cancel := context.WithTimeout(ctx, wakeBound)
		defer cancel()
		called := time.Now()
		l, err := k.acquire(wctx, waiter, key, "waiter")
		got <- outcome{called: called, returned: time.Now(), lock: l, err: err}
	}()
	time.Sleep(time.Until(heldAt.Add(hold)))
	releasing := time.Now()
	_ = held[0].Release(ctx)
	released := time.Now()
	o := <-got
	for _, l := range held[1:] {
		_ = l.Release(ctx)
	}
	if o.err != nil {
		return wakeTrialResult{err: o.err}, nil
	}
	_ = o.lock.Release(ctx)
	// A waiter woken by the first node to delete the key may have the
	// lock before the release has returned.
	return wakeTrialResult{delay: max(0, o.returned.Sub(released)), waited: o.called.Before(releasing)}, nil
}

// wakeRWRow is the read-write case: readers 8 goroutines in clients
// Clients, and a writer in a Client of its own taking the write lock runs
// times.
func wakeRWRow(ctx context.Context, e *benchEnv, n int, name string, clients, runs int) (*wakeRow, error) {
	readers := make([]*redlock.Client, clients)
	for i := range readers {
		c, stop, err := e.redlockClient(n)
		if err != nil {
			return nil, err
		}
		defer stop()
		readers[i] = c
	}
	writer, stopWriter, err := e.redlockClient(n)
	if err != nil {
		return nil, err
	}
	defer stopWriter()
	key := newKey("probe-wakeups:rw:")
	rctx, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	var (
		wg          sync.WaitGroup
		mu          sync.Mutex
		readerWaits []time.Duration
	)
	for g := range rwReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := readers[g%clients]
			for {
				time.Sleep(rand.N(rwReaderGap + 1))
				t0 := time.Now()
				l, err := c.Acquire(rctx, key, wakeTTL, redlock.ForRead())
				if err != nil {
					return // the run is over
				}
				wait := time.Since(t0)
				mu.Lock()
				readerWaits = append(readerWaits, wait)
				mu.Unlock()
				time.Sleep(rwReaderHold)
				_ = l.Release(context.Background())
			}
		}()
	}
	row := &wakeRow{name: name, waited: -1}
	time.Sleep(100 * time.Millisecond) // the readers are at it
	for i := range runs {
		if i%10 == 0 {
			fmt.Fprintf(os.Stderr, "\rwakeups %-12s %d/%d   ", name, i, runs)
		}
		time.Sleep(rand.N(rwWriterGap + 1))
		wctx, cancel := context.WithTimeout(ctx, wakeBound)
		t0 := time.Now()
		l, err := writer.Acquire(wctx, key, wakeTTL, redlock.ForWrite())
		wait := time.Since(t0)
		cancel()
		row.trials++
		if err != nil {
			row.failed++
			if row.firstErr == "" {
				row.firstErr = err.Error()
			}
			continue
		}
		row.delays = append(row.delays, wait)
		time.Sleep(rwWriterHold)
		_ = l.Release(ctx)
	}
	stopReaders()
	wg.Wait()
	var late int
	for _, d := range readerWaits {
		if d > wakeMissed {
			late++
		}
	}
	p50, p99, worst := quantiles(readerWaits)
	row.note = fmt.Sprintf("writer's p99 target %v; readers' waits: %d, p50 %s, p99 %s, max %s, over %v: %d",
		rwTarget, len(readerWaits), p50, p99, worst, wakeMissed, late)
	return row, nil
}

// quantiles returns the p50, p99 and max of ds, rounded, or "-" each when
// ds is empty. It sorts ds.
func quantiles(ds []time.Duration) (p50, p99, worst string) {
	if len(ds) == 0 {
		return "-", "-", "-"
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(ds))+0.999999) - 1 // the nearest rank
		return ds[min(max(i, 0), len(ds)-1)]
	}
	return roundDuration(at(0.50)), roundDuration(at(0.99)), roundDuration(ds[len(ds)-1])
}

func writeWakeTable(w io.Writer, rows []*wakeRow, runs int, took time.Duration) {
	fmt.Fprintf(w, "probe wakeups (%v)\n", took.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  3 loopback nodes, every Client on the default options; %d lanes of trials at once per kind, sharing a holder Client and a waiter Client\n", wakeLanes)
	fmt.Fprintf(w, "  kinds: delay from the holder's Release returning to the waiter's Acquire returning (waited: the waiter called Acquire before the release began)\n")
	fmt.Fprintf(w, "  rw: the writer's wait, from its Acquire call to its return\n")
	fmt.Fprintf(w, "  missed: over %v, which only the poll of a subscribed waiter (1-1.5 s) explains\n", wakeMissed)
	if len(rows) == 0 {
		fmt.Fprintln(w, "  no row matches -cases")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "row\ttrials\twaited\tmissed\tp50\tp99\tmax\tfailed\tnote\tcommand")
	for _, r := range rows {
		p50, p99, worst := quantiles(r.delays)
		missed := fmt.Sprintf("%d", r.missed())
		if len(r.delays) > 0 {
			missed += fmt.Sprintf(" (%.2f%%)", 100*float64(r.missed())/float64(len(r.delays)))
		}
		waited := "-"
		if r.waited >= 0 {
			waited = fmt.Sprint(r.waited)
		}
		cmd := fmt.Sprintf("cd bench && go run . -probe wakeups -runs %d -cases '^%s$'", runs, regexp.QuoteMeta(r.name))
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.name, r.trials, waited, missed, p50, p99, worst, r.failed, r.note, cmd)
	}
	_ = tw.Flush()
	for _, r := range rows {
		if r.firstErr != "" {
			fmt.Fprintf(w, "%s: %d of %d failed; the first: %s\n", r.name, r.failed, r.trials, strings.TrimSpace(r.firstErr))
		}
	}
}
