package redlock

import (
	"context"
	"errors"

	"github.com/quorumlock/redlock/internal/engine"
)

// Election.Run: the loop every leader writes (campaign, lead, notice the
// loss, campaign again, resign on shutdown), with hooks.

// RunOption configures Election.Run.
type RunOption interface{ applyRun(*runConfig) error }

type runOption func(*runConfig) error

func (f runOption) applyRun(c *runConfig) error { return f(c) }

type runConfig struct {
	started   func(*Leadership)
	stopped   func(*Leadership, error)
	newLeader func(Leader)
	once      bool
}

// OnStartedLeading has Run call f on Run's goroutine each time this
// candidate is elected, before the leader function runs. f must not be
// nil. Default: none.
func OnStartedLeading(f func(lead *Leadership)) RunOption {
	return runOption(func(c *runConfig) error {
		if f == nil {
			return engine.Invalid("OnStartedLeading: nil function")
		}
		c.started = f
		return nil
	})
}

// OnStoppedLeading has Run call f on Run's goroutine each time a
// leadership of this candidate ended, once the leader function returned
// and the leadership was resigned (another candidate may lead by then),
// with what that term's end was (see Run: nil, the function's error, an
// error matching ErrLockLost, or ctx's error). f must not be nil.
// Default: none.
func OnStoppedLeading(f func(lead *Leadership, err error)) RunOption {
	return runOption(func(c *runConfig) error {
		if f == nil {
			return engine.Invalid("OnStoppedLeading: nil function")
		}
		c.stopped = f
		return nil
	})
}

// OnNewLeader has Run call f with each change of the election's leader
// (this candidate's leaderships included), as Observe sends them, from
// the start of Run until it returns. f is called on a goroutine of Run's,
// one call at a time and in order; Run returns once the last call has
// returned. A slow f sees the latest leader, never an older one. f must
// not be nil. Default: none.
func OnNewLeader(f func(leader Leader)) RunOption {
	return runOption(func(c *runConfig) error {
		if f == nil {
			return engine.Invalid("OnNewLeader: nil function")
		}
		c.newLeader = f
		return nil
	})
}

// RunOnce has Run return once its first leadership ended, with what that
// term's end was (see Run), rather than campaigning again. Default: Run
// campaigns again until ctx ends.
func RunOnce() RunOption {
	return runOption(func(c *runConfig) error {
		c.once = true
		return nil
	})
}

// Run campaigns with value (see Campaign) and, each time this candidate
// is elected, runs fn with a context that ends with the leadership and
// with ctx; then it resigns and campaigns again, until ctx ends. Run never
// runs fn twice at once: it waits for fn to return before it resigns and
// campaigns again.
//
// fn's context is the leadership's (see Leadership.Context): its Err reads
// the Client's Clock and is not nil as soon as the leadership is lost or
// its validity is over, which is before any other candidate can be
// elected. Check it right before each side effect, or give lead.Term()
// to the resource as a fencing token (FencedSet). Its context.Cause
// matches ErrLockLost when the leadership was lost.
//
// How a term ends:
//   - fn returns while still leading: Run resigns; with nil, it campaigns
//     again; with an error, Run returns that error (a leader that fails
//     steps down, and its caller decides what to do).
//   - the leadership is lost while fn runs: fn's context ends; once fn has
//     returned, Run resigns (which releases nothing the next leader
//     holds) and campaigns again. The term's end is an error matching
//     ErrLockLost, joined with fn's error unless that is context.Canceled.
//   - ctx ends: fn's context ends; once fn has returned, Run resigns (the
//     release is bounded by the Client's node timeout: see Lock.Release),
//     so that the next candidate is elected at once, and returns.
//
// A resignation that is not confirmed (too few nodes answered the
// release) is logged to the Client's logger and told to its Observer (the
// OpRelease event's Err), not returned: the term ended all the same.
//
// Run returns ctx.Err() once ctx has ended; Campaign's error when a
// campaign failed otherwise (an error matching ErrMisconfigured, or
// ErrNotAcquired once the Client's WithMaxAttempts ran out); the error of
// an fn that returned one while leading; with RunOnce, the end of its
// first term (nil when fn returned nil while leading). A nil ctx or fn, a
// value longer than MaxMetadata, or a bad option gives ErrInvalidArgument
// before any node is contacted. A panic in fn or a hook is passed on
// after the leadership was resigned.
func (e *Election) Run(ctx context.Context, value string, fn func(ctx context.Context, lead *Leadership) error, opts ...RunOption) error {
	if err := nilContext(ctx, "Election.Run"); err != nil {
		return err
	}
	cfg, err := runConfigOf(value, fn, opts)
	if err != nil {
		return err
	}
	if cfg.newLeader != nil {
		var stop func()
		ctx, stop = e.watchLeaders(ctx, cfg.newLeader)
		defer stop()
	}
	for {
		lead, err := e.Campaign(ctx, value)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		end, stop := e.term(ctx, lead, fn, cfg)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case cfg.once || stop:
			return end
		}
	}
}

// watchLeaders calls f with each change of leader (OnNewLeader) on a
// goroutine of its own until stop is called, and returns ctx, which also
// ends if f panics. stop waits for the goroutine and, if f panicked,
// panics with its value on the caller's goroutine (Run's, once the term
// in hand was resigned), never on the library's.
func (e *Election) watchLeaders(ctx context.Context, f func(Leader)) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	var panicked any
	go func() {
		defer close(watched)
		defer func() {
			if p := recover(); p != nil {
				panicked = p
				cancel()
			}
		}()
		for l := range e.Observe(ctx) {
			f(l)
		}
	}()
	return ctx, func() {
		cancel()
		<-watched
		if panicked != nil {
			panic(panicked)
		}
	}
}

// runConfigOf checks Run's input and applies its options.
func runConfigOf(value string, fn func(context.Context, *Leadership) error, opts []RunOption) (runConfig, error) {
	var cfg runConfig
	if fn == nil {
		return cfg, engine.Invalid("Election.Run: nil function")
	}
	if err := checkValue(value); err != nil {
		return cfg, err
	}
	for _, o := range opts {
		if o == nil {
			return cfg, engine.Invalid("Election.Run: nil option")
		}
		if err := o.applyRun(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// term runs fn for the leadership lead and resigns it: end is how the
// term ended (see Run), stop whether Run returns it (fn failed while
// leading).
func (e *Election) term(ctx context.Context, lead *Leadership, fn func(context.Context, *Leadership) error, cfg runConfig) (end error, stop bool) {
	fnCtx, cancel := newLockContext(ctx, lead.lock, errResigned)
	resigned := false
	defer func() {
		cancel(nil)
		if !resigned { // a panic of fn or a hook
			_ = lead.Resign(context.WithoutCancel(ctx))
		}
	}()
	if cfg.started != nil {
		cfg.started(lead)
	}
	err := fn(fnCtx, lead)
	leading := lead.Leading()
	cancel(nil)
	if rerr := lead.Resign(context.WithoutCancel(ctx)); rerr != nil && !errors.Is(rerr, ErrLockLost) {
		// As Do's release: the Observer hears of it as the OpRelease event.
		e.c.cfg.logger.WarnContext(ctx, "redlock: Run: the resignation was not confirmed; the next candidate may wait for the keys left to expire",
			"election", e.name, "err", rerr)
	}
	resigned = true
	switch {
	case !leading:
		end = context.Cause(lead.Context())
		if err != nil && !errors.Is(err, context.Canceled) {
			end = errors.Join(end, err)
		}
	case ctx.Err() != nil:
		end = ctx.Err()
	default:
		end, stop = err, err != nil
	}
	if cfg.stopped != nil {
		cfg.stopped(lead, end)
	}
	return end, stop
}
