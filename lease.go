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
// the key's slot), which expires FenceHorizon after the last lock taken
// with it: the keys a node keeps do not grow with the number of keys ever
// fenced. Default: off.
func WithFencing() AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		c.fenced = true
		return nil
	})
}

// WithAutoRenew keeps the lock alive until Release: it is extended by its
// ttl whenever two thirds of the validity a renewal gives (ttl less the
// drift allowance) are left, so a third of the ttl after each renewal, and
// at once after an acquire that took more than a third of it. A renewal
// that fails is tried again every tenth of the ttl.
//
// When a majority of the nodes answers that it no longer holds the lock,
// or when the renewals have not succeeded by the renewal margin before
// Until, the lock is lost: Done is closed, Validity drops to zero, and the
// renewal stops. The renewal margin is the per-node timeout plus the drift
// allowance, but at most a quarter of the ttl less the drift; so Done
// closes at the latest that long before the validity ends, whether the
// nodes are down, slow or frozen, and each renewal's wait for the nodes is
// cut short so as not to run past it. An acquire with this option succeeds
// only with more validity left than the margin.
//
// The renewal runs in one goroutine, which ends with the lock. Default: off.
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
// The token of a new holder is larger than every earlier holder's as long
// as the nodes that hold the earlier token still make up a majority: any
// number of node crashes that keep their data preserve it; a node that
// loses its data may not, if another node had missed the token (it was cut
// off when the token was issued). Tokens are large numbers (a node's clock
// in microseconds, or one more than the last token when that is more), not
// consecutive; they go on increasing after the counters expire
// (FenceHorizon) as long as no node's clock is more than FenceHorizon
// ahead of another's or steps back by more. See docs/safety.md.
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
// it is no longer protected. For a nil Lock the channel is closed.
//
// The first call starts one goroutine that waits on the Client's Clock for
// the end; it ends with the lock.
func (l *Lock) Done() <-chan struct{} {
	if l == nil {
		return closedDone
	}
	l.mu.Lock()
	start := !l.watching && !l.released && !l.lost
	l.watching = true
	l.mu.Unlock()
	if start {
		go l.watchValidity()
	}
	return l.done
}

// lease returns the ttl of the lock's last acquire or extend, its Until,
// and a channel that is closed if Until moves earlier than that (an Extend
// to a shorter ttl): a goroutine that waits for a time computed from Until
// must wake up then. A later Until needs no wake-up: the waiter finds time
// left when it wakes, and waits again.
func (l *Lock) lease() (tm terms, until time.Time, sooner <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.terms, l.until, l.sooner
}

// setLease records the lease of a successful extend.
func (l *Lock) setLease(tm terms, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if until.Before(l.until) {
		close(l.sooner)
		l.sooner = make(chan struct{})
	}
	l.terms, l.until = tm, until
}

// deadline is when a lock on the terms tm valid until until ends for its holder
// unless it is extended: Until, or the renewal margin before Until for a
// renewed lock.
func (l *Lock) deadline(tm terms, until time.Time) time.Time {
	if !l.renewed {
		return until
	}
	return until.Add(-tm.renewMargin())
}

// watchValidity closes done at the lock's deadline. An extend moves it; the
// wait then starts again.
func (l *Lock) watchValidity() {
	clock := l.client.cfg.clock
	for {
		tm, until, sooner := l.lease()
		left := l.deadline(tm, until).Sub(clock.Now())
		if left <= 0 {
			why := errors.New("its validity ran out")
			if l.renewed {
				why = errors.New("not renewed by the renewal margin before the end of its validity")
			}
			l.lose(why)
			return
		}
		select {
		case <-clock.After(left):
		case <-sooner:
		case <-l.done:
			return
		}
	}
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
	stopRenew := l.stopRenew
	l.mu.Unlock()
	if stopRenew != nil {
		stopRenew()
	}
	l.client.cfg.logger.Warn("redlock: lock lost", "key", l.key, "why", why)
	l.client.observe(context.Background(), Event{Op: OpLost, Kind: l.kind.name(), Key: l.key, Start: time.Now(), Err: why})
	l.closeDone.Do(func() { close(l.done) })
	l.finish()
}

func (l *Lock) startRenewal() {
	ctx, cancel := context.WithCancel(context.Background())
	l.mu.Lock()
	l.stopRenew = cancel
	l.mu.Unlock()
	go l.renew(ctx)
}

// renew extends the lock when it is due (see renewDue), and after a failed
// renewal every tenth of the ttl, until ctx is cancelled (Release) or the
// lock is lost. Every wait, for the Clock or for the nodes, ends by the
// lock's deadline (see renewMargin), where the loss is declared if no
// renewal succeeded. Each round starts from the lease as it is then, so an
// Extend made meanwhile is followed, and one that brings Until nearer wakes
// the renewal at once.
func (l *Lock) renew(ctx context.Context) {
	c := l.client
	clock := c.cfg.clock
	var retryAt time.Time // after a failed renewal: when to try again
	for {
		tm, until, sooner := l.lease()
		deadline := l.deadline(tm, until)
		due := renewDue(until, tm.ttl, tm.drift)
		if !retryAt.IsZero() {
			due = retryAt
		}
		if due.After(deadline) {
			due = deadline
		}
		if wait := due.Sub(clock.Now()); wait > 0 {
			select {
			case <-clock.After(wait):
			case <-sooner:
				continue
			case <-ctx.Done():
				return
			case <-l.done:
				return
			}
		}
		if _, now, _ := l.lease(); !now.Equal(until) {
			retryAt = time.Time{} // extended meanwhile: start again from there
			continue
		}
		left := deadline.Sub(clock.Now())
		if left <= 0 {
			l.lose(fmt.Errorf("not renewed by %v before the end of its validity", tm.renewMargin()))
			return
		}
		_, lost, err := l.extend(ctx, tm, min(tm.timeout, left))
		c.observe(ctx, Event{Op: OpRenew, Kind: l.kind.name(), Key: l.key, Start: time.Now(), Err: err})
		if err == nil {
			retryAt = time.Time{}
			continue
		}
		if ctx.Err() != nil || !isOpen(l.done) {
			return
		}
		// A majority that no longer holds the token will not hold it again.
		if lost {
			l.lose(err)
			return
		}
		c.cfg.logger.Warn("redlock: renewal failed; trying again", "key", l.key, "err", err)
		retryAt = clock.Now().Add(tm.ttl / 10)
	}
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
// protected.
//
// fn may get the lock itself from its context with LockFrom, for its
// fencing token or its validity.
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
	fnCtx, cancel := context.WithCancel(context.WithValue(ctx, lockKey{}, lock))
	fnDone := make(chan struct{})
	go func() {
		select {
		case <-lock.Done():
			cancel()
		case <-fnDone:
		}
	}()
	defer func() {
		p := recover()
		close(fnDone)
		cancel()
		var lost error
		select {
		case <-lock.Done(): // ended before the release: lost while fn ran
			lost = fmt.Errorf("%w: %q was lost while fn ran", ErrLockLost, key)
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

// Key returns the locked key, or "" for a nil Lock.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Token returns the lock's random token, stored under the key on each node
// (followed by the metadata given with WithMetadata), or "" for a nil Lock.
// With the key, it is what Client.Resume needs to rebuild the lock in
// another process.
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
