package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
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
			return engine.Invalid("fence horizon %v is negative", d)
		}
		c.counterHorizon = d
		return nil
	})
}

// counterKeep is how long the acquire's fencing counters are kept once the
// node's clock has passed them: the ttl or the fence horizon, whichever is
// longer; 0 for an acquire without fencing.
func (ac acquireConfig) counterKeep() time.Duration {
	if !ac.fenced {
		return 0
	}
	return max(ac.TTL, ac.counterHorizon)
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
	return l.fence
}

// lockKey is the context key under which Do passes its lock to fn.
type lockKey struct{}

// LockFrom returns the lock that Client.Do holds while its fn runs, given
// fn's context (or a context derived from it), for its fencing token,
// Until or Validity. It returns nil for any other context, and for a nil
// one.
//
// fn's context and the contexts derived from it with values only
// (context.WithValue) report the lock's end in Err as soon as its validity
// is over, as Validity does; one derived with a cancel or a deadline
// (context.WithCancel, WithTimeout) learns it when Done is closed, which
// after a process pause may come later: check fn's own context, or the
// lock's Validity, right before a side effect.
func LockFrom(ctx context.Context) *Lock {
	if ctx == nil {
		return nil
	}
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
// WithAutoRenew), when the Client's scheduler gets to it, or as soon as
// the context of Do or of a Leadership found the validity over (see
// Leadership.Context). The holder can select on it to stop its work the
// moment it is no longer protected. For a nil Lock the channel is closed. The
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
		l.client.sched.Watch(l)
	}
	return l.done
}

// lease returns the ttl of the lock's last acquire or extend and its Until.
func (l *Lock) lease() (tm engine.Terms, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.terms, l.until
}

// setLease records the lease of a successful extend, and tells the
// scheduler, whose times for the lock it moves.
func (l *Lock) setLease(tm engine.Terms, until time.Time) {
	l.mu.Lock()
	l.terms, l.until = tm, until
	l.mu.Unlock()
	l.client.sched.Moved(l)
}

// deadline is when a lock on the terms tm valid until until ends for its
// holder unless extended: Until, or for a renewed lock the renewal margin
// before it.
func (l *Lock) deadline(tm engine.Terms, until time.Time) time.Time {
	if !l.renewed {
		return until
	}
	return until.Add(-tm.RenewMargin())
}

// lose ends the lock for a reason other than Release: Validity drops to
// zero, Extend refuses, and Done is closed.
func (l *Lock) lose(why error) {
	if why = l.markLost(why); why != nil {
		l.tellLost(why)
	}
}

// markLost marks the lock lost for why, unless it has ended: Validity
// drops to zero and Extend refuses from now. It returns why as the lock
// keeps it (matching ErrLockLost), or nil when the lock had ended.
func (l *Lock) markLost(why error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released || l.lost {
		return nil
	}
	l.lost = true
	if !errors.Is(why, ErrLockLost) {
		why = fmt.Errorf("%w: %q: %w", ErrLockLost, l.key, why)
	}
	l.lostWhy = why
	return why
}

// expire ends a lock whose validity is over on the Clock, as the
// scheduler does at its deadline, but at once, for a caller that found it
// over before the scheduler's timer fired (a lockContext's Err): it is
// marked lost now, and Done is closed and the loss told from a goroutine,
// as the caller may hold the lock's op (an Observer may Release).
func (l *Lock) expire() {
	if why := l.markLost(l.lossReason()); why != nil {
		go l.tellLost(why)
	}
}

// tellLost ends a lock marked lost for why: Done is closed, and the
// logger, the Observer and the lock's successor are told.
func (l *Lock) tellLost(why error) {
	l.client.sched.Drop(l)
	// Done closes before the logger and the Observer are told, so that a
	// slow Observer does not keep it open.
	l.end()
	l.client.cfg.logger.Warn("redlock: lock lost", "key", l.key, "kind", l.kind.name(), "err", why)
	now := l.client.cfg.clock.Now()
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
// until ctx ends or the WithWaitTimeout bound passes, as Acquire does),
// renews it while fn runs (WithAutoRenew), and releases it when fn returns
// or panics. fn's context is cancelled as soon as the lock is lost, at the
// latest the renewal margin before its validity ends (see WithAutoRenew),
// so that fn can stop while it is still protected; context.Cause of it
// then says why, with an error matching ErrLockLost. Its Err also reads
// the Client's Clock: it is not nil as soon as the lock's validity is
// over, however late a timer fires (after a process pause), so that it
// never disagrees with LockFrom(ctx).Validity(); check it right before
// each side effect. fn may get the lock from its context with LockFrom.
//
// Do returns the acquire's error if the lock was not acquired (fn did not
// run): it matches ErrNotAcquired (see Acquire). When the lock held until
// fn returned, Do returns fn's own result, nil included: a release that
// could not be confirmed then (nodes failed; their keys expire with the
// ttl) is logged as a warning and is the Err of the OpRelease event, not
// fn's failure. When the lock was lost while fn ran (fn's context was
// cancelled, or the release found a majority without the lock), Do
// returns an error matching ErrLockLost, even if fn returned nil: fn may
// have run unprotected. If fn returned an error too, the one error matches
// both and tells of the loss once (an error of fn that wraps its context's
// cause is returned as it is). A worker that runs jobs checks:
//
//	err := c.Do(ctx, key, ttl, job, redlock.WithWaitTimeout(time.Second))
//	switch {
//	case errors.Is(err, redlock.ErrNotAcquired):
//		// job did not run: another holder has the key (ErrTaken), the
//		// nodes failed, or the wait or ctx ended
//	case errors.Is(err, redlock.ErrLockLost):
//		// job may have run in part without the lock: check before a rerun
//	case err != nil:
//		// job failed under the lock
//	}
//
// A panic in fn is passed on after the lock is released. A nil fn gives
// ErrInvalidArgument.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error, opts ...AcquireOption) (err error) {
	if err := nilContext(ctx, "Client.Do"); err != nil {
		return err
	}
	if fn == nil {
		return engine.Invalid("fn is nil")
	}
	lock, err := c.Acquire(ctx, key, ttl, append(slices.Clip(opts), WithAutoRenew())...)
	if err != nil {
		return err
	}
	fnCtx, cancel := newLockContext(context.WithValue(ctx, lockKey{}, lock), lock, nil)
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
		switch {
		case errors.Is(rerr, ErrLockLost):
			lost = cmp.Or(lost, rerr) // the same news, or found at the release
		case rerr != nil:
			// fn ran under the lock: only the release is unconfirmed, which
			// the Observer hears of as the OpRelease event's Err.
			c.cfg.logger.WarnContext(ctx, "redlock: Do: the release was not confirmed; the keys left expire with the ttl", "key", key, "err", rerr)
		}
		if p != nil {
			panic(p)
		}
		err = withLoss(err, lost)
	}()
	return fn(fnCtx)
}

// withLoss is Do's result when fn returned err and the lock was lost while
// it ran (lost, nil if it held): the loss, told once, matching err too.
func withLoss(err, lost error) error {
	switch {
	case lost == nil:
		return err
	case err == nil:
		return lost
	case errors.Is(err, lost):
		return err // fn returned its context's cause: the loss
	}
	return fmt.Errorf("%w; the job returned: %w", lost, err)
}

// lossCause is why the lock was lost (matching ErrLockLost), or nil when
// it was not.
func (l *Lock) lossCause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostWhy
}

// Confirmed returns how many nodes hold the lock after its last acquire,
// extend or renewal, as they answered it: at least its quorum. The nodes
// about as fast as the quorum (those that answer within as long again as
// the quorum took, at least 5 ms) are heard, so on healthy nodes it is
// the Client's node count. An Extend, a renewal and an Acquire of a plain
// lock that is not fenced return as soon as a quorum holds the lock and
// hear them in the background: Confirmed (and the lock's next Extend)
// waits for them first, for that long at most.
// Fewer than the
// Client's nodes means the lock survives fewer failures: it is held
// without nodes that failed or did not answer in that time (each failure
// reported once, as an OpDegraded event and a warning), that lost the key
// (OpDegraded), or where it was never taken because another's key sat
// there when it was won: contention, not a fault (the previous holder's
// release had not reached that node yet; logged at Debug only), common
// right after an Acquire of a key that Clients take in turns. A plain
// lock's Extend, and its renewal, take the key on every node where it is
// free, so its count comes back by the next of them once the nodes do. It
// returns 0 for a nil Lock.
func (l *Lock) Confirmed() int {
	if l == nil {
		return 0
	}
	l.awaitHeard()
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
