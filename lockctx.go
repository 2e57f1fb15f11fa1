package redlock

import (
	"context"
	"fmt"

	"github.com/quorumlock/redlock/internal/engine"
)

// lockContext is a context that ends with a lock: the one a Leadership
// and Do hand to their users. Its Done is closed when the lock ends
// (released, or lost, at the latest the renewal margin before its validity
// ends, when the Client's scheduler gets to it); its Err does not wait for
// that: it also reads the Client's Clock, so that it reports the end as
// soon as the validity is over, however late a timer fires (after a
// process pause, say). Then it also ends the lock as the scheduler would
// at its deadline (lost now: Validity stays zero, Extend refuses; Done
// closed and the loss told from a goroutine) and cancels the context,
// closing its Done and the contexts derived from it.
//
// Its Err is context.Canceled (or the parent's error), and context.Cause
// says why: an error matching ErrLockLost when the lock was lost or its
// validity ran out, released when the lock was released.
type lockContext struct {
	context.Context // a cancelCtx, cancelled with the cause when the lock ends
	cancel          context.CancelCauseFunc
	lock            *Lock
	released        error // the cause once the lock was released; nil gives context.Canceled
}

// newLockContext returns a context derived from parent that ends with
// lock (see lockContext), and its cancel function.
func newLockContext(parent context.Context, lock *Lock, released error) (context.Context, context.CancelCauseFunc) {
	inner, cancel := context.WithCancelCause(parent)
	c := &lockContext{Context: inner, cancel: cancel, lock: lock, released: released}
	lock.Done() // its end is watched, and cancels the context with why
	lock.afterEnd(func() { cancel(c.cause()) })
	return c, cancel
}

// Err returns nil while the lock is held and its validity lasts, and the
// context's error once either is over (see lockContext). It costs a read
// of the Clock and of the lock's state.
func (c *lockContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.lock.held() {
		return nil
	}
	c.lock.expire() // past its validity: lost now, as the scheduler would at its deadline
	c.cancel(c.cause())
	return c.Context.Err()
}

// Value is the parent's value for key; it first checks the lock, as Err
// does, so that context.Cause, which reads the cancellation through Value,
// and a context derived after the end see the end.
func (c *lockContext) Value(key any) any {
	if key != (lockKey{}) {
		_ = c.Err()
	}
	return c.Context.Value(key)
}

// String describes the context, for debugging.
func (c *lockContext) String() string {
	return fmt.Sprintf("redlock.lockContext(%q)", c.lock.key)
}

// cause is why the lock is over: the loss's cause (its validity ran out,
// when Err found it over: see Lock.expire), or else the released cause.
func (c *lockContext) cause() error {
	if why := c.lock.lossCause(); why != nil {
		return why
	}
	return c.released
}

// held reports whether the lock is neither released nor lost and its
// validity is not over, on the Client's Clock.
func (l *Lock) held() bool {
	l.mu.Lock()
	until, over := l.until, l.released || l.lost
	l.mu.Unlock()
	return !over && l.client.cfg.clock.Now().Before(until)
}

// nilContext refuses a nil ctx given to the entry point named what, with
// an error matching ErrInvalidArgument.
func nilContext(ctx context.Context, what string) error {
	if ctx == nil {
		return engine.Invalid("%s: nil context (use context.Background() or context.TODO())", what)
	}
	return nil
}
