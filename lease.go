package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Lease safety: fencing tokens, the Done signal, automatic renewal, and Do,
// which puts them together.

type acquireOption func(*acquireConfig) error

func (f acquireOption) applyAcquire(c *acquireConfig) error { return f(c) }

// WithFencing makes the acquire also take a fencing token (see
// Lock.FencingToken). Each node keeps a counter per lock key under
// "{key}:fence" (for a key with a Redis Cluster hash tag, "key::fence", in
// the key's slot), which expires once the node's clock has passed its
// value and then the fence horizon (see WithFenceHorizon) has gone by, so
// that a node's keys do not grow with the keys ever fenced. Default: off.
func WithFencing() AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		c.fenced = true
		return nil
	})
}

// WithFenceHorizon sets how long, at least, a node keeps a key's fencing
// counter (and a fair lock's ticket counter) once its own clock has passed
// the counter's value; the lock's ttl when that is longer. A counter that
// is gone starts again from the node's clock, so tokens go on increasing
// as long as no node's clock is ever set back by more than the horizon
// (see docs/safety.md). A longer horizon tolerates larger steps back, at
// the cost of one small key per key fenced within it. A token is protected
// by the horizon of the Client that drew the highest value so far, so give
// every Client that fences a key the same horizon. d must not be negative;
// math.MaxInt64 keeps counters for good (about 292 years). Default: 0 (the
// lock's ttl).
func WithFenceHorizon(d time.Duration) Option {
	return clientOption(func(c *config) error {
		if d < 0 {
			return invalid("fence horizon %v is negative", d)
		}
		c.fenceHorizon = d
		return nil
	})
}

// fenceKeep is how long the acquire's fencing counters are kept once the
// node's clock has passed them: the ttl or the fence horizon, whichever is
// longer; 0 for an acquire without fencing.
func (ac acquireConfig) fenceKeep() time.Duration {
	if !ac.fenced {
		return 0
	}
	return max(ac.ttl, ac.fenceHorizon)
}

// WithAutoRenew keeps the lock alive until Release: it is extended by its
// ttl whenever two thirds of the validity a renewal gives (ttl less the
// drift allowance) are left: a third of the ttl after each renewal, and at
// once after an acquire that took more than a third of it. A renewal that
// fails is tried again every tenth of the ttl.
//
// When a majority of the nodes answers that it no longer holds the lock,
// or when no renewal has succeeded by the renewal margin before Until, the
// lock is lost: Done is closed, Validity drops to zero, and the renewal
// stops. The renewal margin is the per-node timeout before any round trip
// is known (WithNodeTimeout's, or a tenth of the ttl within its bounds)
// plus the drift allowance, at most a quarter of the ttl less the drift;
// it does not grow when the network gets slower. Done closes that long
// before the validity ends at the latest, whatever the nodes do.
//
// A renewal waits for the nodes until the margin (with WithNodeTimeout,
// for that timeout at most): a quorum's replies that come before it renew
// the lock, its validity counted from the renewal's start, however much
// slower the network got since the last renewal. So, without
// WithNodeTimeout, the lock is kept while a quorum's round trip stays
// below the time from a renewal's due time to the margin: two thirds of
// the ttl less the drift, less the margin (1.1 s for a 2 s ttl; never
// under 5/12 of the ttl less the drift), whether the round trip is
// steady, jumps, ramps or swings; the first renewal after an acquire has
// the validity the acquire left, less the margin.
//
// An acquire with this option succeeds only with more validity left than
// the margin. Renewals due together share one script call per node (up to
// 128 plain locks). Default: off.
func WithAutoRenew() AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		c.autoRenew = true
		return nil
	})
}

// FencingToken returns the lock's fencing token: a number that strictly
// increases from one holder of the key to the next, to be checked by the
// resource the lock protects (see FencedSet). It is 0 unless the lock was
// acquired WithFencing, and for a nil Lock.
//
// A new holder's token is larger than every earlier holder's as long as
// the nodes that hold the earlier token still make up a majority: node
// crashes that keep their data preserve it; a node that loses its data may
// not, if another node had missed the token. Tokens are large numbers (a
// node's clock in microseconds, or one more than the last token), not
// consecutive; they go on increasing after the counters expire as long as
// no node's clock is set back by more than the fence horizon (see
// WithFenceHorizon and docs/safety.md).
func (l *Lock) FencingToken() uint64 {
	if l == nil {
		return 0
	}
	return uint64(l.fence)
}

// lockKey is the context key under which Do passes its lock to fn.
type lockKey struct{}

// LockFrom returns the lock that Client.Do holds while its fn runs, given
// fn's context (or a context derived from it), for its fencing token,
// Until or Validity. It returns nil for any other context.
func LockFrom(ctx context.Context) *Lock {
	l, _ := ctx.Value(lockKey{}).(*Lock)
	return l
}

// closedDone is what Done returns for a nil Lock.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Done returns a channel that is closed when the lock ends: when it is
// released, when it is lost, or when its validity runs out (for a lock
// acquired WithAutoRenew, the renewal margin before that: see
// WithAutoRenew). The holder can select on it to stop its work the moment
// it is no longer protected. For a nil Lock the channel is closed. The
// first call has the Client's scheduler watch the lock: a Lock has no
// goroutine of its own.
func (l *Lock) Done() <-chan struct{} {
	if l == nil {
		return closedDone
	}
	l.mu.Lock()
	start := !l.watching && !l.released && !l.lost
	l.watching = true
	l.mu.Unlock()
	if start {
		l.client.sched.watch(l)
	}
	return l.done
}

// lease returns the ttl of the lock's last acquire or extend and its Until.
func (l *Lock) lease() (tm terms, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.terms, l.until
}

// setLease records the lease of a successful extend, and tells the
// scheduler, whose times for the lock it moves.
func (l *Lock) setLease(tm terms, until time.Time) {
	l.mu.Lock()
	l.terms, l.until = tm, until
	l.mu.Unlock()
	l.client.sched.moved(l)
}

// deadline is when a lock on the terms tm valid until until ends for its
// holder unless extended: Until, or for a renewed lock the renewal margin
// before it.
func (l *Lock) deadline(tm terms, until time.Time) time.Time {
	if !l.renewed {
		return until
	}
	return until.Add(-tm.renewMargin())
}

// lose ends the lock for a reason other than Release: Validity drops to
// zero, Extend refuses, and Done is closed.
func (l *Lock) lose(why error) {
	l.mu.Lock()
	if l.released || l.lost {
		l.mu.Unlock()
		return
	}
	l.lost = true
	if !errors.Is(why, ErrLockLost) {
		why = fmt.Errorf("%w: %q: %w", ErrLockLost, l.key, why)
	}
	l.lostWhy = why
	l.mu.Unlock()
	l.client.sched.drop(l)
	// Done closes before the logger and the Observer are told, so that a
	// slow Observer does not keep it open.
	l.end()
	l.client.cfg.logger.Warn("redlock: lock lost", "key", l.key, "kind", l.kind.name(), "err", why)
	now := time.Now()
	l.client.observe(context.Background(), Event{Op: OpLost, Kind: l.kind.name(), Key: l.key, Start: now, Err: why, Held: now.Sub(l.acquired)})
	l.finish()
}

// end closes done, once, and runs what afterEnd was given.
func (l *Lock) end() {
	l.closeDone.Do(func() {
		close(l.done)
		l.mu.Lock()
		fns := l.onEnd
		l.onEnd = nil
		l.mu.Unlock()
		for _, f := range fns {
			f()
		}
	})
}

// afterEnd runs f when done is closed, or at once if it is.
func (l *Lock) afterEnd(f func()) {
	l.mu.Lock()
	if isOpen(l.done) {
		l.onEnd = append(l.onEnd, f)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	f()
}

// isOpen reports whether ch is not closed.
func isOpen(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// Do runs fn while holding the lock on key: it acquires the lock (retrying
// until ctx ends, as Acquire does), renews it while fn runs (WithAutoRenew),
// and releases it when fn returns or panics. fn's context is cancelled as
// soon as the lock is lost, at the latest the renewal margin before its
// validity ends (see WithAutoRenew), so that fn can stop while it is still
// protected; context.Cause of it then says why, with an error matching
// ErrLockLost. fn may get the lock from its context with LockFrom.
//
// Do returns the acquire's error if the lock was not acquired (fn did not
// run); otherwise fn's error, joined with an error matching ErrLockLost if
// the lock was lost while fn ran, and with the release's error, if any. A
// panic in fn is passed on after the lock is released. A nil fn gives
// ErrInvalidArgument.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error, opts ...AcquireOption) (err error) {
	if fn == nil {
		return invalid("fn is nil")
	}
	lock, err := c.Acquire(ctx, key, ttl, append(slices.Clip(opts), WithAutoRenew())...)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(context.WithValue(ctx, lockKey{}, lock))
	lock.Done() // its end is watched, and cancels fn's context with why
	lock.afterEnd(func() { cancel(lock.lossCause()) })
	defer func() {
		p := recover()
		cancel(nil)
		var lost error
		select {
		case <-lock.Done(): // ended before the release: lost while fn ran
			lost = lock.lossCause()
		default:
		}
		rerr := lock.Release(context.WithoutCancel(ctx))
		if lost != nil && errors.Is(rerr, ErrLockLost) {
			rerr = nil // the same news
		}
		if p != nil {
			panic(p)
		}
		err = errors.Join(err, lost, rerr)
	}()
	return fn(fnCtx)
}

// lossCause is why the lock was lost (matching ErrLockLost), or nil when
// it was not.
func (l *Lock) lossCause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostWhy
}

// Confirmed returns how many nodes confirmed the lock at its last acquire,
// extend or renewal: at least its quorum. Fewer than the Client's nodes
// means the lock is degraded: held without nodes that failed (each
// reported once, as an OpDegraded event and a warning), it survives fewer
// failures. It returns 0 for a nil Lock.
func (l *Lock) Confirmed() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.confirmed
}

// Key returns the locked key, or "" for a nil Lock.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Token returns the lock's random token, stored under the key on each node
// (followed by the WithMetadata value), or "" for a nil Lock. With the key,
// it is what Client.Resume needs to rebuild the lock in another process.
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	token, _ := splitValue(l.token)
	return token
}

// Metadata returns the metadata the lock was acquired with (WithMetadata),
// or "".
func (l *Lock) Metadata() string {
	if l == nil {
		return ""
	}
	_, meta := splitValue(l.token)
	return meta
}

// Until returns the end of the lock's validity: the start of the last
// successful acquire or extend plus its ttl less the drift allowance, on
// the Client's Clock. It returns the zero time for a nil Lock.
func (l *Lock) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Validity returns how much of the lock's validity is left: never negative,
// and zero for a released, lost or nil Lock.
func (l *Lock) Validity() time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	until, over := l.until, l.released || l.lost
	l.mu.Unlock()
	if over {
		return 0
	}
	return max(0, until.Sub(l.client.cfg.clock.Now()))
}
