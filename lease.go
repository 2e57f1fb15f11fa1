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
// "{key}:fence", without TTL: it must outlive the locks, so it stays on the
// node for good, one small key per lock key ever fenced. Default: off.
func WithFencing() AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		c.fenced = true
		return nil
	})
}

// WithAutoRenew keeps the lock alive until Release: every third of its ttl
// the lock is extended by its ttl. A renewal that fails is tried again
// every tenth of the ttl; when a majority of the nodes no longer holds the
// lock, or too little validity is left for another try, the lock is lost:
// Done is closed before the validity ends, Validity drops to zero, and the
// renewal stops. The renewal runs in one goroutine, which ends with the
// lock. Default: off.
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
// as the nodes that stored the earlier token still make up a majority: any
// number of node crashes that keep their data, and a minority of nodes
// losing it, preserve it. See docs/safety.md.
func (l *Lock) FencingToken() uint64 {
	if l == nil {
		return 0
	}
	return uint64(l.fence)
}

// closedDone is what Done returns for a nil Lock.
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Done returns a channel that is closed when the lock ends: when it is
// released, when it is lost (see WithAutoRenew), or when its validity runs
// out without a renewal. The holder can select on it to stop its work the
// moment it is no longer protected. For a nil Lock the channel is closed.
//
// The first call starts one goroutine that waits on the Client's Clock for
// the end of the validity; it ends with the lock.
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

// watchValidity closes done once the validity runs out. An extend moves the
// end; the wait then starts again.
func (l *Lock) watchValidity() {
	clock := l.client.cfg.clock
	for {
		v := l.Validity()
		if v <= 0 {
			l.lose(errors.New("its validity ran out"))
			return
		}
		select {
		case <-clock.After(v):
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
	l.client.observe(context.Background(), Event{Op: OpLost, Kind: kindName(l.kind), Key: l.key, Start: time.Now(), Err: why})
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

// renew extends the lock every third of its ttl until ctx is cancelled
// (Release) or the lock is lost.
func (l *Lock) renew(ctx context.Context) {
	c := l.client
	n := len(c.nodes)
	for {
		l.mu.Lock()
		ttl := l.ttl
		l.mu.Unlock()
		if !l.sleep(ctx, ttl/3) {
			return
		}
		for {
			t, err := l.extend(ctx, ttl)
			c.observe(ctx, Event{Op: OpRenew, Kind: kindName(l.kind), Key: l.key, Start: time.Now(), Err: err})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			// A majority that no longer holds the token will not hold it
			// again; too little validity for another try is as bad.
			if t.no > n-l.quorum || l.Validity() <= ttl/10 {
				l.lose(err)
				return
			}
			c.cfg.logger.Warn("redlock: renewal failed; trying again", "key", l.key, "err", err)
			if !l.sleep(ctx, ttl/10) {
				return
			}
		}
	}
}

// sleep waits d on the Client's Clock; it reports false if the lock ended
// or ctx was cancelled first.
func (l *Lock) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-l.client.cfg.clock.After(d):
		return true
	case <-ctx.Done():
		return false
	case <-l.done:
		return false
	}
}

// Do runs fn while holding the lock on key: it acquires the lock (retrying
// until ctx ends, as Acquire does), renews it while fn runs (WithAutoRenew),
// and releases it when fn returns or panics. fn's context is cancelled as
// soon as the lock is lost, before its validity ends, so that fn can stop
// while it is still protected.
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
	fnCtx, cancel := context.WithCancel(ctx)
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
