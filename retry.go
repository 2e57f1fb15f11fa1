package redlock

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/wait"
)

// RetryPolicy decides how long Acquire waits after a failed attempt before
// it tries again; Acquire keeps trying until it succeeds or its context
// ends. Delay is called with the number of attempts that have failed so
// far (1 after the first). It must be safe for concurrent use: one policy
// serves every Acquire of a Client at once, so it should keep no state.
type RetryPolicy interface {
	Delay(failed int) time.Duration
}

// RetryFunc adapts a function to RetryPolicy.
type RetryFunc func(failed int) time.Duration

// Delay returns f(failed).
func (f RetryFunc) Delay(failed int) time.Duration { return f(failed) }

// ExponentialBackoff returns the default policy shape: the n-th delay is
// drawn uniformly from [d/2, d], where d = base·2^(n-1) capped at max; the
// random half spreads contenders apart so that they do not collide again.
// It requires 0 < base <= max; WithRetry reports other values.
func ExponentialBackoff(base, max time.Duration) RetryPolicy {
	return exponentialBackoff{base: base, max: max}
}

// RandomDelay returns a policy whose every delay is drawn uniformly from
// [min, max]. It requires 0 < min <= max; WithRetry reports other values.
func RandomDelay(min, max time.Duration) RetryPolicy {
	return randomDelay{min: min, max: max}
}

// defaultRetry is the default policy, ExponentialBackoff(wait.RetryBase,
// wait.RetryMax), which wait.Next paces.
var defaultRetry RetryPolicy = defaultPolicy{exponentialBackoff{base: wait.RetryBase, max: wait.RetryMax}}

// defaultPolicy is the default policy's own type, so that a policy given
// with WithRetry, even ExponentialBackoff(10ms, 320ms), is followed as given.
type defaultPolicy struct{ exponentialBackoff }

type exponentialBackoff struct{ base, max time.Duration }

func (p exponentialBackoff) Delay(failed int) time.Duration {
	d := p.max
	if failed < 1 {
		failed = 1
	}
	if shift := failed - 1; shift < 62 && p.base<<shift > 0 && p.base<<shift < p.max {
		d = p.base << shift
	}
	return d/2 + rand.N(d/2+1)
}

func (p exponentialBackoff) validate() error {
	if p.base <= 0 || p.max < p.base {
		return fmt.Errorf("%w: ExponentialBackoff(%v, %v) needs 0 < base <= max", ErrInvalidArgument, p.base, p.max)
	}
	return nil
}

type randomDelay struct{ min, max time.Duration }

func (p randomDelay) Delay(int) time.Duration { return p.min + rand.N(p.max-p.min+1) }

func (p randomDelay) validate() error {
	if p.min <= 0 || p.max < p.min {
		return fmt.Errorf("%w: RandomDelay(%v, %v) needs 0 < min <= max", ErrInvalidArgument, p.min, p.max)
	}
	return nil
}

// retryOption is WithRetry (policy) or WithMaxAttempts (bounded).
type retryOption struct {
	policy      RetryPolicy
	bounded     bool
	maxAttempts int
}

func (o retryOption) check() error {
	if o.bounded {
		if o.maxAttempts < 1 {
			return engine.Invalid("max attempts %d must be at least 1", o.maxAttempts)
		}
		return nil
	}
	if isNil(o.policy) {
		return engine.Invalid("retry policy is nil")
	}
	if v, ok := o.policy.(interface{ validate() error }); ok {
		return v.validate()
	}
	return nil
}

// apply checks o and sets what it sets: a retry policy or an attempt bound.
func (o retryOption) apply(retry *RetryPolicy, maxAttempts *int) error {
	if err := o.check(); err != nil {
		return err
	}
	if o.bounded {
		*maxAttempts = o.maxAttempts
	} else {
		*retry = o.policy
	}
	return nil
}

func (o retryOption) applyClient(c *config) error { return o.apply(&c.retry, &c.maxAttempts) }

func (o retryOption) applyAcquire(c *acquireConfig) error { return o.apply(&c.retry, &c.maxAttempts) }

// WithRetry sets how long Acquire waits between attempts: p.Delay(n)
// after the n-th failed attempt (an attempt itself lasts until the nodes
// answer, at most the node timeout; against nodes that answer nothing,
// the calls still out are waited for first, about two node timeouts). Given to New it sets the Client's
// default; given to Acquire it applies to that call. TryAcquire makes one
// attempt and ignores it. The policy must not be nil. A given policy is
// followed as given, but for the lock's release: announced by the nodes,
// it ends the wait at once (so does the subscription to the announcements
// when confirmed: a release before it was heard by nobody), and a waiter
// refused while the release reaches the other nodes tries again within
// 2.5 ms. Default: ExponentialBackoff(10ms, 320ms), paced by the library
// besides: at least 1 s (up to 1.5 s) between attempts once subscribed to
// the announcements, at least 250 ms (up to 375 ms) while so many nodes
// fail that no quorum can form, and for a fair lock at most a quarter of
// its patience (see Fair).
func WithRetry(p RetryPolicy) RetryOption { return retryOption{policy: p} }

// WithMaxAttempts bounds how many attempts Acquire makes: once n attempts
// have failed it returns an error matching ErrNotAcquired, joined with the
// last attempt's *NodeError values, even if ctx has time left. Given to New
// it sets the Client's default; given to Acquire it applies to that call.
// TryAcquire always makes one attempt. A bounded Acquire does not wait for
// its turn behind the Client's other Acquires of the key (it contends on
// the nodes at once), and a fair lock's ticket draw takes at most n draws.
// n must be at least 1 (0 is refused, not read as "no limit"). Default: no
// limit, Acquire tries until ctx ends.
func WithMaxAttempts(n int) RetryOption { return retryOption{bounded: true, maxAttempts: n} }
