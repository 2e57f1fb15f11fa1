package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// runLog records what Run and its hooks did, in order.
type runLog struct {
	mu     sync.Mutex
	events []string
	terms  []uint64
}

func (r *runLog) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *runLog) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.events...)
}

// hooks returns Run options that log each hook.
func (r *runLog) hooks() []redlock.RunOption {
	return []redlock.RunOption{
		redlock.OnStartedLeading(func(l *redlock.Leadership) {
			r.mu.Lock()
			r.terms = append(r.terms, l.Term())
			r.mu.Unlock()
			r.add("started")
		}),
		redlock.OnStoppedLeading(func(_ *redlock.Leadership, err error) {
			switch {
			case err == nil:
				r.add("stopped")
			case errors.Is(err, redlock.ErrLockLost):
				r.add("stopped: lost")
			case errors.Is(err, context.Canceled):
				r.add("stopped: canceled")
			default:
				r.add("stopped: %v", err)
			}
		}),
	}
}

// goRun runs e.Run in a goroutine; the channel gets its result.
func goRun(ctx context.Context, e *redlock.Election, value string, fn func(context.Context, *redlock.Leadership) error, opts ...redlock.RunOption) <-chan error {
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx, value, fn, opts...) }()
	return done
}

func within(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: Run did not return", what)
		return nil
	}
}

func equal(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// TestElection_Run_resignsOnCancel: Run leads, tells the observers its
// value, and once ctx ends, ends fn's context, resigns (no leader is left)
// and returns ctx's error; the hooks come in order.
func TestElection_Run_resignsOnCancel(t *testing.T) {
	c := newCluster(t, 3)
	e := mustElection(t, c.client(t), "run", 2*time.Second)
	var log runLog
	var seen atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	done := goRun(ctx, e, "host-a", func(ctx context.Context, l *redlock.Leadership) error {
		log.add("fn")
		<-ctx.Done()
		log.add("fn done")
		return ctx.Err()
	}, append(log.hooks(), redlock.OnNewLeader(func(l redlock.Leader) { seen.Store(l) }))...)
	waitFor(t, "the leader observed", func() bool { l, ok := seen.Load().(redlock.Leader); return ok && l.Value == "host-a" })
	if got, err := e.Leader(context.Background()); err != nil || got.Value != "host-a" {
		t.Fatalf("Leader = %+v, %v", got, err)
	}
	cancel()
	if err := within(t, "cancel", done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if _, err := e.Leader(context.Background()); !errors.Is(err, redlock.ErrNoLeader) {
		t.Fatalf("Leader after Run returned: %v, want ErrNoLeader (resigned)", err)
	}
	if got, want := log.get(), []string{"started", "fn", "fn done", "stopped: canceled"}; !equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// TestElection_Run_campaignsAgainAfterALoss: a leadership lost on the
// nodes ends fn's context with ErrLockLost; Run campaigns again and leads
// with a higher term.
func TestElection_Run_campaignsAgainAfterALoss(t *testing.T) {
	c := newCluster(t, 3)
	e := mustElection(t, c.client(t), "run", 900*time.Millisecond)
	var log runLog
	causes := make(chan error, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := goRun(ctx, e, "a", func(ctx context.Context, l *redlock.Leadership) error {
		log.add("fn")
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}, log.hooks()...)
	waitFor(t, "the first leadership", func() bool { return len(log.get()) == 2 })
	for _, s := range c.servers[:2] {
		s.FlushAll()
	}
	if cause := <-causes; !errors.Is(cause, redlock.ErrLockLost) {
		t.Fatalf("fn's context ended with %v, want ErrLockLost", cause)
	}
	waitFor(t, "the second leadership", func() bool { return len(log.get()) == 5 })
	cancel()
	if err := within(t, "cancel", done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	<-causes
	if got, want := log.get(), []string{"started", "fn", "stopped: lost", "started", "fn", "stopped: canceled"}; !equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if log.terms[1] <= log.terms[0] {
		t.Fatalf("terms %v do not rise", log.terms)
	}
}

// TestElection_Run_fnReturns: fn returning nil while leading resigns and
// campaigns again; an error resigns and is Run's result; with RunOnce, nil
// is Run's result after the first term.
func TestElection_Run_fnReturns(t *testing.T) {
	c := newCluster(t, 3)
	e := mustElection(t, c.client(t), "run", 2*time.Second)
	bg := context.Background()
	failed := errors.New("job failed")
	var log runLog
	n := 0
	err := e.Run(bg, "a", func(ctx context.Context, l *redlock.Leadership) error {
		n++
		if n < 3 {
			return nil
		}
		return failed
	}, log.hooks()...)
	if !errors.Is(err, failed) || n != 3 {
		t.Fatalf("Run = %v after %d terms, want the job's error after 3", err, n)
	}
	if got, want := log.get(), []string{"started", "stopped", "started", "stopped", "started", "stopped: job failed"}; !equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	for i := 1; i < len(log.terms); i++ {
		if log.terms[i] <= log.terms[i-1] {
			t.Fatalf("terms %v do not rise", log.terms)
		}
	}
	if _, err := e.Leader(bg); !errors.Is(err, redlock.ErrNoLeader) {
		t.Fatalf("Leader after a failed fn: %v, want ErrNoLeader (resigned)", err)
	}
	n = 0
	if err := e.Run(bg, "a", func(context.Context, *redlock.Leadership) error { n++; return nil }, redlock.RunOnce()); err != nil || n != 1 {
		t.Fatalf("RunOnce: Run = %v after %d terms, want nil after 1", err, n)
	}
}

// TestElection_Run_noOverlap: two candidates on the same nodes run their
// functions one at a time, each in its own term, the terms rising.
func TestElection_Run_noOverlap(t *testing.T) {
	c := newCluster(t, 3)
	const terms = 20
	var inside, overlaps, runs atomic.Int32
	var mu sync.Mutex
	var seq []uint64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fn := func(ctx context.Context, l *redlock.Leadership) error {
		if inside.Add(1) != 1 {
			overlaps.Add(1)
		}
		defer inside.Add(-1)
		mu.Lock()
		seq = append(seq, l.Term())
		mu.Unlock()
		for range 3 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(time.Millisecond)
		}
		if runs.Add(1) >= terms {
			cancel()
		}
		return nil
	}
	var dones []<-chan error
	for _, v := range []string{"a", "b"} {
		dones = append(dones, goRun(ctx, mustElection(t, c.client(t), "run", 2*time.Second), v, fn))
	}
	for _, d := range dones {
		if err := within(t, "cancel", d); !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
	}
	if overlaps.Load() != 0 {
		t.Fatalf("%d functions ran beside another", overlaps.Load())
	}
	for i := 1; i < len(seq); i++ {
		if seq[i] <= seq[i-1] {
			t.Fatalf("terms %v do not rise", seq)
		}
	}
}

// TestElection_Run_contextEndsWithTheValidity: fn's context reads the
// Clock: past the validity, before any timer fires, its Err says the
// leadership is over, as Leading and Validity do.
func TestElection_Run_contextEndsWithTheValidity(t *testing.T) {
	c := newCluster(t, 3)
	clock := fakeClock()
	e := mustElection(t, c.client(t, redlock.WithClock(clock)), "run", 3*time.Second)
	var jobErr error
	err := e.Run(context.Background(), "a", func(ctx context.Context, l *redlock.Leadership) error {
		clock.jump(4 * time.Second)
		jobErr = overAtOnce(ctx, l.Lock(), false)
		if jobErr == nil && l.Leading() {
			jobErr = errors.New("Leading past the validity")
		}
		return nil
	}, redlock.RunOnce())
	if jobErr != nil {
		t.Fatal(jobErr)
	}
	if !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("RunOnce past the validity: %v, want ErrLockLost", err)
	}
}

func TestElection_Run_badInput(t *testing.T) {
	c := newCluster(t, 3)
	e := mustElection(t, c.client(t), "run", 2*time.Second)
	bg := context.Background()
	fn := func(context.Context, *redlock.Leadership) error { return nil }
	for name, err := range map[string]error{
		"nil fn":               e.Run(bg, "a", nil),
		"long value":           e.Run(bg, string(make([]byte, redlock.MaxMetadata+1)), fn),
		"nil option":           e.Run(bg, "a", fn, nil),
		"nil OnStartedLeading": e.Run(bg, "a", fn, redlock.OnStartedLeading(nil)),
		"nil OnStoppedLeading": e.Run(bg, "a", fn, redlock.OnStoppedLeading(nil)),
		"nil OnNewLeader":      e.Run(bg, "a", fn, redlock.OnNewLeader(nil)),
	} {
		if !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if got := c.holdersAny("run"); len(got) != 0 {
		t.Fatalf("bad input campaigned: held on %v", got)
	}
}

// TestElection_contextEndsBeforeTheNextLeader: a leader paused past its
// ttl (its clock jumps, no timer fires, its keys expire on the nodes)
// while another candidate is elected: the first check of its context
// after the pause says the leadership is over, both for Run's function
// and for a Campaign's Context; its resignation leaves the new leader be.
func TestElection_contextEndsBeforeTheNextLeader(t *testing.T) {
	for _, how := range []string{"Run", "Campaign"} {
		t.Run(how, func(t *testing.T) {
			c := newCluster(t, 3)
			clock := fakeClock()
			const ttl = 3 * time.Second
			a := mustElection(t, c.client(t, redlock.WithClock(clock)), "run", ttl)
			b := mustElection(t, c.client(t), "run", ttl)
			bg := context.Background()
			paused, resume := make(chan struct{}), make(chan struct{})
			var afterPause error
			fn := func(ctx context.Context, l *redlock.Leadership) error {
				close(paused)
				<-resume
				afterPause = ctx.Err() // the first check after the pause
				if afterPause != nil && l.Leading() {
					afterPause = nil
					t.Error("Leading while its context is over")
				}
				return nil
			}
			done := make(chan error, 1)
			go func() {
				if how == "Run" {
					done <- a.Run(bg, "a", fn, redlock.RunOnce())
					return
				}
				l, err := a.Campaign(bg, "a")
				if err == nil {
					err = fn(l.Context(), l)
					_ = l.Resign(bg)
				}
				done <- err
			}()
			<-paused
			clock.jump(ttl + time.Second)
			for _, s := range c.servers {
				s.FastForward(ttl + time.Second)
			}
			next, err := b.Campaign(bg, "b")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = next.Resign(bg) }()
			close(resume)
			<-done
			if afterPause == nil {
				t.Fatal("the paused leader's context was still live after the next leader was elected")
			}
			if got, err := b.Leader(bg); err != nil || got.Value != "b" || !next.Leading() {
				t.Fatalf("after the old leader's resignation: Leader %+v, %v, new leader Leading %v", got, err, next.Leading())
			}
		})
	}
}

// TestElection_Run_unconfirmedResignationIsLogged: a resignation that too
// few nodes confirm (a majority fails once fn returned) is told to the
// Client's logger, as Do's unconfirmed release is; Run used to drop it
// without a word, and the next candidate waited for the keys to expire.
func TestElection_Run_unconfirmedResignationIsLogged(t *testing.T) {
	c := newCluster(t, 3)
	var log syncBuffer
	rc := c.client(t, redlock.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	defer func() {
		for _, s := range c.servers {
			s.SetError("")
		}
	}()
	e := mustElection(t, rc, "run", time.Minute)
	err := e.Run(context.Background(), "a", func(context.Context, *redlock.Leadership) error {
		c.servers[1].SetError("ERR the node fails")
		c.servers[2].SetError("ERR the node fails")
		return nil
	}, redlock.RunOnce())
	if err != nil {
		t.Fatalf("Run of an fn that returned nil while leading: %v, want nil", err)
	}
	if !strings.Contains(log.String(), "resignation was not confirmed") {
		t.Fatalf("log %q: want a warning that the resignation was not confirmed", log.String())
	}
}

// TestElection_Run_hookPanicOnTheCallersGoroutine: a panic in OnNewLeader
// ends fn's term, which is resigned, and is passed on from Run, on the
// caller's goroutine (a recover there catches it); it crashed the process
// from a goroutine of the library's, with the leadership still held.
func TestElection_Run_hookPanicOnTheCallersGoroutine(t *testing.T) {
	c := newCluster(t, 3)
	e := mustElection(t, c.client(t), "run", 2*time.Second)
	got := make(chan any, 1)
	go func() {
		defer func() { got <- recover() }()
		_ = e.Run(context.Background(), "host-a", func(ctx context.Context, l *redlock.Leadership) error {
			<-ctx.Done()
			return ctx.Err()
		}, redlock.OnNewLeader(func(l redlock.Leader) {
			if l.Value == "host-a" {
				panic("hook failed")
			}
		}))
	}()
	select {
	case p := <-got:
		if p != "hook failed" {
			t.Fatalf("Run's panic = %v, want the hook's", p)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not pass the hook's panic on")
	}
	if _, err := e.Leader(context.Background()); !errors.Is(err, redlock.ErrNoLeader) {
		t.Fatalf("Leader after the panic: %v, want ErrNoLeader (resigned)", err)
	}
}
