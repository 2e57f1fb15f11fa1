package redlock

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
)

// WithOwner makes the lock reentrant, held by owner: while owner holds it,
// another Acquire with the same owner succeeds at once (a new hold, with
// its own Lock, token and validity), and the key is free again only when
// every hold was released or ended. Holds of another owner are refused.
// Each hold lengthens the key's time to live, never shortens it. The owner
// must not be empty; choose one per holder identity (a worker ID, a request
// ID), not per process. Default: not reentrant.
func WithOwner(owner string) AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		if owner == "" {
			return engine.Invalid("empty owner")
		}
		c.owner = owner
		c.kinds = append(c.kinds, "WithOwner")
		return nil
	})
}

// ForRead takes the read side of a read-write lock: any number of readers
// may hold the key at once, but no writer; a reader is refused while a
// writer holds or awaits the key (see ForWrite). Default: a plain lock.
func ForRead() AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		c.role = 'r'
		c.kinds = append(c.kinds, "ForRead")
		return nil
	})
}

// ForWrite takes the write side of a read-write lock: one writer, and no
// reader, at a time. A writer that finds readers marks the key as awaited,
// keeping new readers out until it gets the lock, gives up, or its mark
// expires after its ttl: readers cannot starve it. Default: a plain lock.
func ForWrite() AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		c.role = 'w'
		c.kinds = append(c.kinds, "ForWrite")
		return nil
	})
}

// WithPermits takes one of permits permits of a semaphore named by the key:
// at most permits holders at once. Every holder must give the same number
// for a key, or its acquire fails at once with an error matching
// ErrMisconfigured. Each permit expires with its own ttl, so a crashed
// holder does not keep one. Once permits > 1 a permit is held on
// ⌊permits·N/(permits+1)⌋+1 nodes (under a bare majority, permits+1
// holders could each hold a different one: docs/kinds.md), so the
// semaphore tolerates fewer node failures than a plain lock. permits must
// be at least 1. Default: a plain lock.
func WithPermits(permits int) AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		if permits < 1 {
			return engine.Invalid("%d permits: a semaphore needs at least 1", permits)
		}
		c.permits = permits
		c.kinds = append(c.kinds, "WithPermits")
		return nil
	})
}

// Fair makes the lock first come, first served across processes: an
// Acquire draws a ticket from a quorum of the nodes, queues with it on
// every node, and the lock goes to the waiter with the lowest ticket. A
// waiter that stops trying (its process died) loses its place on a node
// after its patience from its last attempt there: 4s, or 8 node timeouts
// if longer (WithNodeTimeout's, or a tenth of the ttl, not lengthened by
// the round trips). A fair Acquire with the default retry policy tries at
// least every quarter of its patience, to keep its place; one given
// WithRetry waits as its policy says, and a delay longer than the patience
// loses the place on the nodes until its next attempt. An attempt that
// took the key on some nodes and failed keeps the waiter's place there.
// TryAcquire with Fair draws a ticket, tries once, and leaves the queue
// when it fails. Default: not fair.
func Fair() AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		c.fair = true
		c.kinds = append(c.kinds, "Fair")
		return nil
	})
}

// WithWaitTimeout bounds how long Acquire, AcquireAll and Do wait for the
// lock: no attempt starts once d has passed on the Client's Clock since
// the call (the first always does), and an attempt under way is heard out
// (at most the node timeout); once it has passed, a failed attempt ends
// the call at once. The call then returns the last attempt's
// outcome: an error matching ErrNotAcquired (and ErrTaken when that
// attempt found the key held elsewhere) that says it gave up waiting, and
// never a context error, as ctx has not ended. It bounds the wait only:
// once Do's fn runs, ctx alone bounds it. TryAcquire makes one attempt and
// ignores it. d must be positive (0 is refused, not read as "no bound").
// Default: no bound beyond ctx.
func WithWaitTimeout(d time.Duration) AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		if d <= 0 {
			return engine.Invalid("wait timeout %v must be positive", d)
		}
		c.waitTimeout = d
		return nil
	})
}

// AcquireAll acquires a lock on every key at once, all or nothing: on each
// node one script takes every key if none is held by someone else, so two
// holders of overlapping sets exclude each other, and no holder can wait
// for another while holding part of what that one needs (no deadlock).
// Extend and Release act on every key; Keys lists them. With WithFencing
// the fencing token is above every key's counter, and each key's counter
// is raised to it. On a Redis Cluster node the keys must hash to one slot.
//
// It returns an error matching ErrInvalidArgument, before any node is
// contacted, for an empty set, an empty or repeated key, a bad ttl, or a
// kind option (a multi-key lock is plain); otherwise as Acquire.
func (c *Client) AcquireAll(ctx context.Context, keys []string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if err := nilContext(ctx, "Client.AcquireAll"); err != nil {
		return nil, err
	}
	k, ac, err := c.multiConfig(keys, ttl, opts)
	if err != nil {
		return nil, err
	}
	return c.observed(ctx, k, func(ctx context.Context, attempts *int) (*Lock, error) { return c.inTurn(ctx, k, ac, attempts) })
}

// TryAcquireAll is AcquireAll with exactly one attempt; see TryAcquire.
func (c *Client) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if err := nilContext(ctx, "Client.TryAcquireAll"); err != nil {
		return nil, err
	}
	k, ac, err := c.multiConfig(keys, ttl, opts)
	if err != nil {
		return nil, err
	}
	return c.observed(ctx, k, func(ctx context.Context, attempts *int) (*Lock, error) { return c.tryOnce(ctx, k, ac, attempts) })
}

func (c *Client) multiConfig(keys []string, ttl time.Duration, opts []AcquireOption) (kind, acquireConfig, error) {
	if len(keys) == 0 {
		return nil, acquireConfig{}, engine.Invalid("no keys")
	}
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		if k == "" {
			return nil, acquireConfig{}, engine.Invalid("key %d is empty", i)
		}
		if seen[k] {
			return nil, acquireConfig{}, engine.Invalid("key %q appears twice", k)
		}
		seen[k] = true
	}
	ac, err := c.acquireConfig(keys[0], ttl, opts)
	if err != nil {
		return nil, ac, err
	}
	if len(ac.kinds) > 0 {
		return nil, ac, engine.Invalid("%s: a lock on several keys is a plain lock", ac.kinds[0])
	}
	return newMulti(slices.Clone(keys)), ac, nil
}

// Keys returns the locked keys: one, or those given to AcquireAll, in their
// order. It returns nil for a nil Lock.
func (l *Lock) Keys() []string {
	if l == nil {
		return nil
	}
	return slices.Clone(l.kind.keys())
}

// Ticket returns a fair lock's ticket, its place in the queue it waited in:
// waiters are granted the lock in the order of their tickets. It is 0 for
// the other kinds and for a nil Lock.
func (l *Lock) Ticket() uint64 {
	if l == nil {
		return 0
	}
	if f, ok := l.kind.(*fair); ok {
		return f.ticket
	}
	return 0
}

// kindFor is the kind of lock the options ask for on key.
func (ac acquireConfig) kindFor(key string) kind {
	switch {
	case ac.owner != "":
		return newReentrant(key, ac.owner)
	case ac.role != 0:
		return newReadWrite(key, ac.role == 'w')
	case ac.permits > 0:
		return newSemaphore(key, ac.permits)
	case ac.fair:
		return newFair(key)
	}
	return plain{key}
}

type acquireConfig struct {
	engine.Terms // of the Acquire's ttl, the same for every attempt
	retry        RetryPolicy
	maxAttempts  int           // 0: no limit
	waitTimeout  time.Duration // 0: no bound beyond ctx
	waitUntil    time.Time     // on the Client's Clock, when waitTimeout ends the waits (Acquire sets it)
	fenced       bool
	// counterHorizon: the Client's WithFenceHorizon (see counterKeep)
	counterHorizon time.Duration
	autoRenew      bool
	metadata       string // stored after the token: see WithMetadata

	// the kind of lock (see kinds.go); at most one of these is set
	owner   string // reentrant
	role    byte   // 'r' reader, 'w' writer
	permits int    // semaphore
	fair    bool
	kinds   []string // the kind options given, for the error when several are
}

// checkLease checks a lease of ttl on key and returns its terms.
func (c *Client) checkLease(key string, ttl time.Duration) (engine.Terms, error) {
	if key == "" {
		return engine.Terms{}, engine.Invalid("empty key")
	}
	return c.e.TermsFor(ttl)
}

func (c *Client) acquireConfig(key string, ttl time.Duration, opts []AcquireOption) (acquireConfig, error) {
	ac := acquireConfig{retry: c.cfg.retry, maxAttempts: c.cfg.maxAttempts, counterHorizon: c.cfg.counterHorizon}
	var err error
	if ac.Terms, err = c.checkLease(key, ttl); err != nil {
		return ac, err
	}
	for _, o := range opts {
		if isNil(o) {
			return ac, engine.Invalid("acquire option is nil")
		}
		if err := o.applyAcquire(&ac); err != nil {
			return ac, err
		}
	}
	if len(ac.kinds) > 1 {
		return ac, engine.Invalid("%s cannot be combined: a lock is of one kind", strings.Join(ac.kinds, " and "))
	}
	return ac, nil
}
