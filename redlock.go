// Package redlock implements distributed locks over N independent Redis
// masters with the Redlock algorithm: a lock is held when a majority of the
// nodes took it, and it is valid for its TTL less the time the acquisition
// took and an allowance for clock drift.
//
// A Client acquires a lock in five steps (see docs/algorithm.md):
//
//  1. note the start time on a monotonic Clock;
//  2. run SET-if-absent with the TTL on every node at once, each under a
//     small per-node timeout;
//  3. count the nodes that took the lock and compute the validity:
//     ttl − elapsed − (ttl·driftFactor + 2ms); the lock is acquired only if a
//     quorum (N/2+1) took it and the validity is positive;
//  4. otherwise release it on every node that may have taken it, with a
//     context of its own;
//  5. retry after a random delay until the caller's context ends (Acquire),
//     or give up after one attempt (TryAcquire).
//
// The lock key is stored under the key as given, with a random token of 128
// bits or more as its value, so `redis-cli GET key` shows the holder.
//
// The algorithm is safe only under the assumptions in docs/safety.md:
// bounded clock rate error, nodes that persist every write or stay down
// longer than the largest TTL, and a holder that stops working when its
// validity ends.
package redlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrNotAcquired is returned when a lock could not be acquired: fewer than a
	// quorum of nodes took it, its validity was spent before a quorum answered,
	// or the context ended first. In the last case the error also matches the
	// context's error with errors.Is.
	ErrNotAcquired = errors.New("redlock: not acquired")

	// ErrLockLost is returned by Extend when fewer than a quorum of nodes
	// still held the lock's token, and by Release when the lock did not hold
	// until the release (see Release): the lock may have expired and another
	// holder may have taken it, so the work done under it may not have been
	// protected.
	ErrLockLost = errors.New("redlock: lock lost")

	// ErrInvalidArgument is returned, before any node is contacted, for input
	// that can never work: no nodes, a nil or repeated node, an empty key, a
	// ttl that is not positive or not larger than the drift allowance, or an
	// option with a value out of range. The message names the problem.
	ErrInvalidArgument = errors.New("redlock: invalid argument")

	// errReleaseIncomplete heads a release that too many nodes failed to
	// judge; the *NodeError values it joins are what a caller acts on.
	errReleaseIncomplete = errors.New("redlock: release incomplete")
)

// NodeError is one node's failure during an operation. The errors that
// Acquire, TryAcquire, Extend and Release return join one NodeError for every
// node that failed or did not answer in time; find them with errors.As.
type NodeError struct {
	Node int    // index of the node in the slice given to New
	Addr string // the node's address, when its client reveals one
	Err  error  // what went wrong
}

// Error names the node, by index and address, and what went wrong.
func (e *NodeError) Error() string {
	if e.Addr == "" {
		return fmt.Sprintf("redlock: node %d: %v", e.Node, e.Err)
	}
	return fmt.Sprintf("redlock: node %d (%s): %v", e.Node, e.Addr, e.Err)
}

// Unwrap returns the node's error, so that errors.Is sees through it.
func (e *NodeError) Unwrap() error { return e.Err }

// quorumError reports an operation that did not reach its quorum on one line,
// and unwraps to its sentinel, the context's error if the context ended, and
// every node's error.
type quorumError struct {
	kind   error // ErrNotAcquired, ErrLockLost or errReleaseIncomplete
	detail string
	cause  error // the context's error, or nil
	nodes  []error
	heldOn int // a node where another holder had the key, or -1
	// taken: the nodes that answered show one other holder on a quorum:
	// someone else won, and will announce its release
	taken bool
}

func (e *quorumError) Error() string {
	var b strings.Builder
	b.WriteString(e.kind.Error())
	b.WriteString(": ")
	b.WriteString(e.detail)
	if e.cause != nil {
		b.WriteString(": ")
		b.WriteString(e.cause.Error())
	}
	for _, n := range e.nodes {
		b.WriteString("; ")
		b.WriteString(n.Error())
	}
	return b.String()
}

func (e *quorumError) Unwrap() []error {
	errs := make([]error, 0, 2+len(e.nodes))
	errs = append(errs, e.kind)
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return append(errs, e.nodes...)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// Defaults, in one place. The per-node timeout is derived from the ttl when
// WithNodeTimeout is not given: a tenth of it, but no less than a healthy
// node on a loaded machine needs and no more than a hung node may cost.
const (
	defaultDriftFactor    = 0.01
	nodeTimeoutFraction   = 10
	minDerivedNodeTimeout = 50 * time.Millisecond
	maxDerivedNodeTimeout = time.Second
)

type config struct {
	driftFactor float64
	nodeTimeout time.Duration // 0: derived from the ttl
	retry       RetryPolicy
	clock       Clock
	logger      *slog.Logger
	unbatched   bool
	handOffs    int
	observer    Observer
}

type acquireConfig struct {
	retry     RetryPolicy
	fenced    bool
	autoRenew bool

	// the kind of lock (see kinds.go); at most one of these is set
	owner   string // reentrant
	role    byte   // 'r' reader, 'w' writer
	permits int    // semaphore
	fair    bool
	kinds   []string // the kind options given, for the error when several are
}

// Option configures a Client. Pass options to New.
type Option interface {
	applyClient(*config) error
}

// AcquireOption configures one Acquire or TryAcquire call.
type AcquireOption interface {
	applyAcquire(*acquireConfig) error
}

// RetryOption is an option that may be given to New, where it sets the
// Client's default, or to Acquire, where it applies to that call only.
type RetryOption interface {
	Option
	AcquireOption
}

type clientOption func(*config) error

func (f clientOption) applyClient(c *config) error { return f(c) }

// WithDriftFactor sets the fraction of the ttl set aside for the difference
// between the clock rates of this process and the nodes. The drift allowance
// is ttl·factor + 2ms. The factor must be in [0, 1). Default: 0.01.
func WithDriftFactor(factor float64) Option {
	return clientOption(func(c *config) error {
		if !(factor >= 0 && factor < 1) {
			return invalid("drift factor %v is not in [0, 1)", factor)
		}
		c.driftFactor = factor
		return nil
	})
}

// WithNodeTimeout sets how long an operation waits for each node's reply. It
// must be positive. A node that does not answer in time counts as failed for
// that operation. Default: a tenth of the operation's ttl, but at least 50ms
// and at most 1s.
//
// The timeout is enforced whether or not the go-redis client was created
// with ContextTimeoutEnabled; with it, the late command's socket is also
// cut at the deadline, and a Client over a single node runs its calls in
// the calling goroutine, which makes it as fast as a plain single-node
// lock.
func WithNodeTimeout(d time.Duration) Option {
	return clientOption(func(c *config) error {
		if d <= 0 {
			return invalid("node timeout %v must be positive", d)
		}
		c.nodeTimeout = d
		return nil
	})
}

// WithBatching turns the batching of concurrent calls on or off. With it,
// a call bound for a node that is idle is sent at once and alone; calls made
// while one is in flight to that node wait for it and then go together as
// one pipeline, so that under load many locks share each round trip. Each
// node then gets one send at a time, in the order the calls were made, and
// a call whose deadline passed while it waited is never sent.
//
// Turn it off for nodes whose client can not pipeline, or to let a node's
// calls use all of its connection pool at once: a hung connection then
// holds up only the calls on it. Default: on.
func WithBatching(on bool) Option {
	return clientOption(func(c *config) error {
		c.unbatched = !on
		return nil
	})
}

// WithHandOff sets how many times in a row a released lock may be handed
// straight to the next goroutine of this Client waiting in Acquire for the
// same key. A hand-off is one round trip in which every node that holds the
// releasing token swaps it for the next holder's: the next lock is won on a
// quorum with its own token, fencing token and validity, like any acquire,
// and no other process can take the key in between. While no other process
// waits for the key, hand-offs go on without limit; once the nodes show one
// waiting, the lock is released on the nodes after limit more, so that the
// other processes get their chance. The limit must be at least 0; 0 turns
// hand-offs off. Default: 12.
func WithHandOff(limit int) Option {
	return clientOption(func(c *config) error {
		if limit < 0 {
			return invalid("hand-off limit %d is negative", limit)
		}
		c.handOffs = limit
		return nil
	})
}

// WithClock sets the monotonic Clock used for validity and retry waits. It
// must not be nil. Default: the system's monotonic clock.
func WithClock(clock Clock) Option {
	return clientOption(func(c *config) error {
		if isNil(clock) {
			return invalid("clock is nil")
		}
		c.clock = clock
		return nil
	})
}

// WithLogger sets where the Client logs failed attempts (Debug) and nodes it
// could not clean up (Warn). It must not be nil. Default: no logging.
func WithLogger(logger *slog.Logger) Option {
	return clientOption(func(c *config) error {
		if logger == nil {
			return invalid("logger is nil")
		}
		c.logger = logger
		return nil
	})
}

type retryOption struct{ policy RetryPolicy }

func (o retryOption) check() error {
	if isNil(o.policy) {
		return invalid("retry policy is nil")
	}
	if v, ok := o.policy.(interface{ validate() error }); ok {
		return v.validate()
	}
	return nil
}

func (o retryOption) applyClient(c *config) error {
	if err := o.check(); err != nil {
		return err
	}
	c.retry = o.policy
	return nil
}

func (o retryOption) applyAcquire(c *acquireConfig) error {
	if err := o.check(); err != nil {
		return err
	}
	c.retry = o.policy
	return nil
}

// WithRetry sets how long Acquire waits between attempts. Given to New it
// sets the Client's default; given to Acquire it applies to that call.
// TryAcquire makes one attempt and ignores it. The policy must not be nil.
// Default: ExponentialBackoff(10ms, 320ms).
func WithRetry(p RetryPolicy) RetryOption { return retryOption{policy: p} }

// node is one Redis master.
type node struct {
	rdb  redis.UniversalClient
	addr string // "" when the client does not reveal it
	pipe *pipe  // nil when batching is off
	// inline: the client itself ends a call at its context's deadline
	// (ContextTimeoutEnabled), so a lone node's call may run in the
	// calling goroutine without losing the per-node timeout.
	inline bool
}

// Client acquires locks over a fixed set of nodes. It is safe for concurrent
// use.
type Client struct {
	nodes  []node
	quorum int
	cfg    config
	queues localQueues // see localqueue.go
	// failing[i] holds node i's error when its last call went unanswered
	// (timed out), and nil once it answers again (see fanOut). A failed
	// attempt, and a Release past its quorum, do not wait for a node that
	// is failing.
	failing []atomic.Pointer[error]
}

// New returns a Client over nodes, which must be independent Redis masters
// (not replicas of one another). A single node gives a plain single-node lock
// with the same API; an even number is allowed, with quorum N/2+1.
//
// Any go-redis client type may be given, e.g. []*redis.Client or
// []redis.UniversalClient. New does not contact the nodes.
//
// It returns an error matching ErrInvalidArgument when nodes is empty, a
// node is nil, the same node appears twice (the same client, or clients with
// the same address), or an option's value is out of range.
func New[C redis.UniversalClient](nodes []C, opts ...Option) (*Client, error) {
	if len(nodes) == 0 {
		return nil, invalid("no nodes")
	}
	c := &Client{
		nodes:   make([]node, len(nodes)),
		failing: make([]atomic.Pointer[error], len(nodes)),
		quorum:  quorumOf(len(nodes)),
		cfg: config{
			driftFactor: defaultDriftFactor,
			retry:       ExponentialBackoff(defaultRetryBase, defaultRetryMax),
			clock:       systemClock{},
			logger:      slog.New(slog.DiscardHandler),
			handOffs:    defaultHandOffs,
		},
	}
	for i, rdb := range nodes {
		if isNil(rdb) {
			return nil, invalid("node %d is nil", i)
		}
		c.nodes[i] = node{rdb: rdb, addr: addrOf(rdb), inline: cutsAtDeadline(rdb)}
		for j := range i {
			if sameNode(c.nodes[j], c.nodes[i]) {
				return nil, invalid("node %d is the same as node %d (%s): the nodes must be independent", i, j, c.nodes[i].describe())
			}
		}
	}
	for _, o := range opts {
		if isNil(o) {
			return nil, invalid("option is nil")
		}
		if err := o.applyClient(&c.cfg); err != nil {
			return nil, err
		}
	}
	if !c.cfg.unbatched {
		for i := range c.nodes {
			c.nodes[i].pipe = &pipe{rdb: c.nodes[i].rdb}
		}
	}
	return c, nil
}

// Quorum returns how many nodes must agree for a lock: N/2+1.
func (c *Client) Quorum() int { return c.quorum }

// Acquire acquires the lock on key for ttl, retrying after failed attempts
// (see WithRetry) until it succeeds or ctx ends. The Lock is valid for ttl
// less the time the successful attempt took and the drift allowance; see
// Lock.Until. Goroutines of one Client that Acquire the same key take turns,
// first come first served, so that only one of them at a time contends on
// the nodes; a release hands the lock to the next in one round trip (see
// WithHandOff). A waiting Acquire also tries again at once when it hears
// the lock's release announced by the nodes.
//
// Options choose another kind of lock (WithOwner, ForRead, ForWrite,
// WithPermits, Fair; AcquireAll for several keys; see docs/kinds.md); those
// do not take local turns.
//
// It returns an error matching ErrInvalidArgument for an empty key, a ttl
// that is not larger than the drift allowance, a bad option, or two kind
// options, before any node is contacted. When ctx ends first, the error matches both
// ErrNotAcquired and ctx.Err(), and joins the last attempt's *NodeError
// values.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	ac, err := c.acquireConfig(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	k := ac.kindFor(key)
	return c.observed(ctx, k, func(attempts *int) (*Lock, error) {
		if _, ok := k.(plain); !ok {
			// Holds of the other kinds may coexist (readers, permits, an
			// owner's holds) or are ordered on the nodes (fair): no local
			// turns.
			return c.acquireLoop(ctx, k, ttl, ac, attempts)
		}
		return c.acquireQueued(ctx, key, ttl, ac, func() (*Lock, error) {
			return c.acquireLoop(ctx, k, ttl, ac, attempts)
		})
	})
}

// observed runs an acquire of k and reports it to the Observer, if any;
// acquire counts its attempts.
func (c *Client) observed(ctx context.Context, k kind, acquire func(attempts *int) (*Lock, error)) (*Lock, error) {
	attempts := 1
	if c.cfg.observer == nil {
		return acquire(&attempts)
	}
	start := time.Now()
	lock, err := acquire(&attempts)
	c.observe(ctx, Event{Op: OpAcquire, Kind: kindName(k), Key: k.keys()[0], Start: start, Duration: time.Since(start),
		Attempts: attempts, Err: err})
	return lock, err
}

// acquireLoop is Acquire's attempts, until one succeeds or ctx ends.
func (c *Client) acquireLoop(ctx context.Context, k kind, ttl time.Duration, ac acquireConfig, attempts *int) (*Lock, error) {
	if f, ok := k.(*fair); ok {
		f.patience = c.fairPatience(ttl)
		// A ticket that misses its quorum (nodes down or slow) is drawn
		// again after the retry delay, as a failed attempt is tried again.
		for failed := 1; ; failed++ {
			qe := c.drawTicket(ctx, f, ttl)
			if qe == nil {
				break
			}
			if qe.cause != nil {
				return nil, qe
			}
			select {
			case <-c.cfg.clock.After(ac.retry.Delay(failed)):
			case <-ctx.Done():
				qe.cause = ctx.Err()
				return nil, qe
			}
		}
	}
	var watch *releaseWatch // subscribed after the first failure
	defer func() { watch.close() }()
	// Each attempt has a token of its own: a late delete from an earlier
	// attempt's cleanup can then never remove a later attempt's key. What
	// must last across attempts (a writer's mark, a place in a fair queue)
	// has a waiter ID in the kind.
	var (
		token string
		first bool // a fair lock's last announcement named this waiter first in line
		woken bool // the last wait ended with a release announcement
		// The calls of the attempts, their cleanups and the leave go to
		// each node in order: a late cleanup must not land after a later
		// attempt's calls (it would put a fair waiter back in a queue it
		// had left).
		settled settlement
	)
	for failed := 1; ; failed++ {
		token = rand.Text()
		*attempts = failed
		// A fair waiter named first in line tries again at once if refused
		// (the release has not reached every node yet): it need not wait for
		// a frozen node's timeout to learn that. Its keys on nodes that had
		// not answered are deleted in order before its next attempt there.
		var (
			lock *Lock
			qe   *quorumError
		)
		lock, settled, qe = c.attempt(ctx, k, token, ttl, ac, first, settled)
		if qe == nil {
			return lock, nil
		}
		if qe.cause != nil {
			c.leave(ctx, k, token, ttl, settled)
			return nil, qe
		}
		c.cfg.logger.DebugContext(ctx, "redlock: attempt failed", "lock", k.describe(), "attempt", failed, "err", qe)
		// Listen on a node that named a holder, and move to another when
		// the one listened to is failing (frozen or cut off: its releases
		// would never be heard).
		if qe.heldOn >= 0 && (failed == 1 || watch != nil && watch.node != qe.heldOn && c.failing[watch.node].Load() != nil) {
			watch.close()
			watch = c.watchRelease(ctx, k.channels(), qe.heldOn, c.nodeTimeout(ttl))
		}
		watch.drain() // releases from before this attempt are old news
		delay := ac.retry.Delay(failed)
		if woken && !qe.taken {
			// Woken by a release and still refused, and no one holder
			// shows on a quorum: the clients woken with us may have split
			// the votes, and then nobody holds the key and nobody will
			// announce a release. Try again soon, at a random moment,
			// rather than after the growing delay.
			delay = min(delay, wakeSpread+mrand.N(4*wakeSpread))
		}
		if f, ok := k.(*fair); ok {
			delay = min(delay, f.patience/4) // keep our place in the queue
			if first {
				// First in line, and still refused: the release that named
				// us has not reached every node yet. Nobody else will
				// announce anything; try again soon.
				delay = wakeSpread
			}
		}
		var ok bool
		if ok, first, woken = c.waitRetry(ctx, k, watch, delay, failed); !ok {
			qe.cause = ctx.Err()
			c.leave(ctx, k, token, ttl, settled)
			return nil, qe
		}
	}
}

// waitRetry waits before the next attempt: the retry delay, or until a
// release is announced. It returns false when ctx ends first, whether a
// fair lock's announcement named this waiter first in line, and whether a
// release announcement ended the wait.
func (c *Client) waitRetry(ctx context.Context, k kind, watch *releaseWatch, delay time.Duration, failed int) (ok, first, woken bool) {
	f, _ := k.(*fair)
	timer := c.cfg.clock.After(delay)
	for {
		select {
		case <-timer:
			return true, false, false
		case m := <-watch.released():
			if f != nil {
				// A fair lock's release names the first in line: only
				// that waiter tries, and at once.
				if m.Payload == f.waiter {
					return true, true, false
				}
				if m.Payload != "" {
					continue
				}
			}
			// Clients that heard the same release would all try at once
			// and split the votes: spread them a little, the ones that
			// have waited longest first. This is about the network, so it
			// is real time, not the Clock.
			time.Sleep(wakeDelay(failed))
			return true, false, f == nil
		case <-ctx.Done():
			return false, false, false
		}
	}
}

// leave drops what an Acquire that gives up left on the nodes between its
// attempts (a writer's mark, a place in a fair queue), waiting at most the
// node timeout; on each node after the calls of after.
func (c *Client) leave(ctx context.Context, k kind, token string, ttl time.Duration, after settlement) {
	op := k.leave(token)
	if op == nil {
		return
	}
	c.fanOut(context.WithoutCancel(ctx), c.nodeTimeout(ttl), nil, nil, after, *op)
}

// TryAcquire makes exactly one attempt to acquire the lock on key for ttl.
//
// It returns an error matching ErrNotAcquired when fewer than a quorum of
// nodes took the lock or its validity was spent, joined with a *NodeError
// for every node that failed; when ctx ended, the error also matches
// ctx.Err(). Bad input gives an error matching ErrInvalidArgument, before
// any node is contacted.
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	ac, err := c.acquireConfig(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	k := ac.kindFor(key)
	return c.observed(ctx, k, func(*int) (*Lock, error) { return c.tryOnce(ctx, k, ttl, ac) })
}

// tryOnce is one attempt of a TryAcquire: for a fair lock, with the ticket
// drawn first and its place in the queue left when the attempt fails.
func (c *Client) tryOnce(ctx context.Context, k kind, ttl time.Duration, ac acquireConfig) (*Lock, error) {
	if f, ok := k.(*fair); ok {
		f.patience = c.fairPatience(ttl)
		if qe := c.drawTicket(ctx, f, ttl); qe != nil {
			return nil, qe
		}
	}
	token := rand.Text()
	lock, settled, qe := c.attempt(ctx, k, token, ttl, ac, false, settlement{})
	if qe != nil {
		c.leave(ctx, k, token, ttl, settled)
		return nil, qe
	}
	return lock, nil
}

func (c *Client) acquireConfig(key string, ttl time.Duration, opts []AcquireOption) (acquireConfig, error) {
	ac := acquireConfig{retry: c.cfg.retry}
	if err := c.checkLease(key, ttl); err != nil {
		return ac, err
	}
	for _, o := range opts {
		if isNil(o) {
			return ac, invalid("acquire option is nil")
		}
		if err := o.applyAcquire(&ac); err != nil {
			return ac, err
		}
	}
	if len(ac.kinds) > 1 {
		return ac, invalid("%s cannot be combined: a lock is of one kind", strings.Join(ac.kinds, " and "))
	}
	return ac, nil
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

func (c *Client) checkLease(key string, ttl time.Duration) error {
	if key == "" {
		return invalid("empty key")
	}
	if ttl <= 0 {
		return invalid("ttl %v must be positive", ttl)
	}
	if d := driftFor(ttl, c.cfg.driftFactor); ttl <= d {
		return invalid("ttl %v is not larger than its drift allowance %v", ttl, d)
	}
	return nil
}

// attempt is one run of steps 1 to 4 of the algorithm for a lock of kind
// k under token. Its error carries the context's error when the context had
// ended by the time it returned. eager returns a failure as soon as the
// quorum is out of reach, rather than after every node answered or timed
// out.
func (c *Client) attempt(ctx context.Context, k kind, token string, ttl time.Duration, ac acquireConfig, eager bool, after settlement) (*Lock, settlement, *quorumError) {
	if err := ctx.Err(); err != nil {
		return nil, after, &quorumError{kind: ErrNotAcquired, detail: fmt.Sprintf("%s: no attempt made", k.describe()), cause: err, heldOn: -1}
	}
	start := c.cfg.clock.Now()
	// Return as soon as a quorum holds, leaving slower nodes to the
	// settlement. A failure waits for every node (or its timeout), so that
	// the cleanup sees which nodes took the key: returning as soon as the
	// quorum was out of reach left slow nodes holding keys of attempts that
	// had moved on, and with one slow node the suite's workload ran at a
	// quarter of its speed. It does not wait for nodes known to be failing
	// (frozen or cut off): each attempt would lose their whole timeout.
	q := k.quorum(len(c.nodes))
	wall := time.Now()
	stop := c.settledOrFailing(q)
	if eager {
		stop = decidedAt(len(c.nodes), q)
	}
	t, settled := c.fanOut(ctx, c.nodeTimeout(ttl), stop, nil, after, k.acquire(token, ttl, ac.fenced))
	c.observeNodes(ctx, OpAcquire, k, wall, t)
	return c.conclude(ctx, k, token, ttl, ac, start, t, settled)
}

// conclude is steps 3 and 4 of an attempt that started at start and got t
// from the nodes: the Lock when a quorum took the key within its validity
// (for a fenced lock, once a quorum stores its fencing token), or else the
// release of the key wherever it may have been taken. The settlement is that
// of the last calls sent.
func (c *Client) conclude(ctx context.Context, k kind, token string, ttl time.Duration, ac acquireConfig, start time.Time, t tally, settled settlement) (*Lock, settlement, *quorumError) {
	q := k.quorum(len(c.nodes))
	var fence int64
	fenceStored := true // or not needed
	if ac.fenced && t.yes >= q {
		fence, settled, fenceStored = c.settleFence(ctx, k, ttl, t, settled)
	}
	drift := driftFor(ttl, c.cfg.driftFactor)
	elapsed := c.cfg.clock.Now().Sub(start)
	v := validity(ttl, elapsed, drift)
	// A renewed lock must start with more validity than its renewal margin
	// (see renewMargin): it is declared lost by then at the latest.
	var need time.Duration
	if ac.autoRenew {
		need = c.renewMargin(ttl)
	}
	if t.yes >= q && fenceStored && v > need {
		if len(t.errs) > 0 {
			c.cfg.logger.DebugContext(ctx, "redlock: acquired despite node failures", "lock", k.describe(), "err", errors.Join(t.errs...))
		}
		if f, ok := k.(*fair); ok && t.yes < len(c.nodes) {
			// Leave the queue where the key was not taken, so as not to
			// stand first in line there; in the background, in order
			// before the lock's later calls.
			skip := make([]bool, len(t.answers))
			for i, a := range t.answers {
				skip[i] = a == holds
			}
			now := func(*tally) bool { return true }
			_, settled = c.fanOut(context.WithoutCancel(ctx), c.nodeTimeout(ttl), now, skip, settled, f.dequeue())
		}
		l := &Lock{client: c, kind: k, key: k.keys()[0], quorum: q, token: token, fence: fence, ttl: ttl, until: start.Add(ttl - drift),
			settled: settled, done: make(chan struct{}), sooner: make(chan struct{}), renewed: ac.autoRenew}
		if ac.autoRenew {
			l.startRenewal()
		}
		return l, settled, nil
	}

	// Step 4: a node that failed or did not answer may still have taken the
	// lock, so everything but a definite "held by another" is released, each
	// node's delete sent once its SET has landed or timed out.
	settled = c.cleanup(ctx, k, token, ttl, t.answers, settled)

	var detail string
	switch {
	case t.yes < q:
		detail = fmt.Sprintf("%s: taken on %d of %d nodes, quorum %d", k.describe(), t.yes, len(c.nodes), q)
	case !fenceStored:
		detail = fmt.Sprintf("%s: the fencing token could not be stored on a quorum", k.describe())
	case v > 0:
		detail = fmt.Sprintf("%s: quorum reached with %v of validity left, not more than the renewal margin %v (%v elapsed of ttl %v)", k.describe(), v, need, elapsed, ttl)
	default:
		detail = fmt.Sprintf("%s: quorum reached but its validity was spent (%v elapsed of ttl %v, drift %v)", k.describe(), elapsed, ttl, drift)
	}
	heldOn := slices.Index(t.answers, holdsNot)
	return nil, settled, &quorumError{kind: ErrNotAcquired, detail: detail, cause: ctx.Err(), nodes: t.errs, heldOn: heldOn,
		taken: takenByOne(t, q)}
}

// takenByOne reports whether the nodes that refused name one holder on at
// least q of them (the acquire scripts return a negative number naming it).
func takenByOne(t tally, q int) bool {
	count := map[int64]int{}
	for i, a := range t.answers {
		if a == holdsNot && t.values[i] < 0 {
			count[t.values[i]]++
			if count[t.values[i]] >= q {
				return true
			}
		}
	}
	return false
}

// settleFence picks the fencing token of a fenced acquire that won its
// quorum: the highest counter the nodes that took the lock answered. It
// then makes sure that a quorum of the nodes that took the lock store at
// least that value, raising those that answered less (a node that
// restarted empty, or missed an earlier acquire) and, in the background,
// those that did not take part. Only a node that holds the lock counts: the
// next holder's quorum shares one with ours, and takes the key there only
// once our hold is gone, after the raise. A node where we lost may be where
// a competing acquire has already drawn its token, below ours, and wins
// once our lock has ended. The raises are answered before the validity is
// reckoned, so each landed while the node still held our key. In the usual
// case every node answered the same value and nothing is sent.
func (c *Client) settleFence(ctx context.Context, k kind, ttl time.Duration, t tally, after settlement) (int64, settlement, bool) {
	q := k.quorum(len(c.nodes))
	var fence int64
	for i, a := range t.answers {
		if a == holds {
			fence = max(fence, t.values[i])
		}
	}
	atFence := 0
	skip := make([]bool, len(t.answers))
	for i, a := range t.answers {
		if a == holds && t.values[i] == fence {
			atFence++
			skip[i] = true
		}
	}
	if atFence == len(t.answers) {
		return fence, after, true
	}
	stored := func(r *tally) bool {
		n := atFence
		for i, a := range r.answers {
			if a == holds && t.answers[i] == holds {
				n++
			}
		}
		return n >= q
	}
	r, settled := c.fanOut(ctx, c.nodeTimeout(ttl), stored, skip, after, raiseFenceOn(k.fenceKeys(), fence))
	return fence, settled, stored(&r)
}

// cleanup releases key after a failed attempt whose answers it is given,
// with a context that the caller's cancellation does not reach: the caller
// may have given up, but the keys must still go. It waits for the nodes that
// took the key or were not waited for; on those that failed, the delete goes
// on in the background, so that a dead node does not hold up the next
// attempt.
func (c *Client) cleanup(ctx context.Context, k kind, token string, ttl time.Duration, answers []answer, after settlement) settlement {
	skip := make([]bool, len(answers))
	for i, a := range answers {
		skip[i] = a == holdsNot
	}
	// Wait for the nodes that took the key (they answer quickly); the
	// deletes on nodes that failed or were not waited for go on in the
	// background, each after the node's SET (see fanOut), so that a dead or
	// frozen node does not hold up the next attempt. Every attempt has its
	// own token, so a late delete can only remove this attempt's key.
	answered := func(t *tally) bool {
		for i, a := range answers {
			if a == holds && t.answers[i] == unanswered {
				return false
			}
		}
		return true
	}
	t, settled := c.fanOut(context.WithoutCancel(ctx), c.nodeTimeout(ttl), answered, skip, after, k.drop(token))
	if len(t.errs) > 0 {
		c.cfg.logger.WarnContext(ctx, "redlock: could not release after a failed attempt; the key expires with its ttl",
			"lock", k.describe(), "ttl", ttl, "err", errors.Join(t.errs...))
	}
	return settled
}

func (c *Client) nodeTimeout(ttl time.Duration) time.Duration {
	if c.cfg.nodeTimeout > 0 {
		return c.cfg.nodeTimeout
	}
	return min(max(ttl/nodeTimeoutFraction, minDerivedNodeTimeout), maxDerivedNodeTimeout)
}

func (c *Client) nodeError(i int, err error) error {
	return &NodeError{Node: i, Addr: c.nodes[i].addr, Err: err}
}

// Lock is a lock held on a quorum of nodes. It is safe for concurrent use,
// and its methods may be called on a nil *Lock (as after a failed acquire):
// they report that nothing is held.
type Lock struct {
	client *Client
	kind   kind
	key    string // the first of kind.keys()
	quorum int    // how many nodes must hold it
	token  string

	// op serialises Extend and Release. Each sends its call to a node once
	// the previous operation's call there has settled, so that the writes
	// reach each node in order.
	op      sync.Mutex
	settled settlement

	fence   int64 // 0 unless acquired WithFencing
	renewed bool  // acquired WithAutoRenew: it ends the renewal margin before Until

	mu        sync.Mutex
	ttl       time.Duration // of the last acquire or extend
	until     time.Time
	sooner    chan struct{} // closed (and replaced) when until moves earlier: see lease
	released  bool
	lost      bool               // the lock ended otherwise: see lose
	watching  bool               // a goroutine closes done when the validity ends
	stopRenew context.CancelFunc // nil unless renewing

	done      chan struct{} // closed when the lock ends; see Done
	closeDone sync.Once
	onEnd     func()      // run once when the lock ends: passes the local turn on
	queue     *localQueue // the local queue whose turn this lock is, if any
}

// finish runs the lock's end hook, once.
func (l *Lock) finish() {
	l.mu.Lock()
	f := l.onEnd
	l.onEnd = nil
	l.mu.Unlock()
	if f != nil {
		f()
	}
}

// Key returns the locked key, or "" for a nil Lock.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.key
}

// Token returns the random value stored under the key on each node, or ""
// for a nil Lock.
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.token
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

// Extend makes the lock valid for ttl from the start of this call: every
// node that still holds its token, asked all at once, keeps the key for at
// least ttl. It succeeds when a quorum did so within the new validity;
// Until is then the start of the call plus ttl less the drift allowance,
// earlier than before when ttl is shorter than what was left.
//
// A node never shortens a key: it keeps the longer of what the key has left
// and ttl. A call that lands late (one of an Extend that failed, or one that
// arrives after a later Extend) can then never end a key before the validity
// that the lock reports, and a failed Extend leaves the lock valid until its
// old Until. To give a lock up early, Release it.
//
// It returns an error matching ErrLockLost, joined with each failed node's
// *NodeError, when fewer than a quorum still held the token or the new
// validity was spent; Until is then left as it was. A lock that was
// released, lost, or whose validity has run out is over: Extend returns
// ErrLockLost without contacting the nodes. Bad input gives
// ErrInvalidArgument, and an ended ctx its error, before any node is
// contacted. On a nil Lock it returns ErrNotAcquired.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return ErrNotAcquired
	}
	_, err := l.extend(ctx, ttl, l.client.nodeTimeout(ttl))
	return err
}

// observeOp reports an extend or release of l that started at start.
func (l *Lock) observeOp(ctx context.Context, op Op, start time.Time, err error) {
	if l.client.cfg.observer == nil {
		return
	}
	l.client.observe(ctx, Event{Op: op, Kind: kindName(l.kind), Key: l.key, Start: start, Duration: time.Since(start), Err: err})
}

// extend is Extend with the given per-node timeout, also returning what the
// nodes answered.
func (l *Lock) extend(ctx context.Context, ttl, timeout time.Duration) (_ tally, err error) {
	if l == nil {
		return tally{}, ErrNotAcquired
	}
	c := l.client
	if err := c.checkLease(l.key, ttl); err != nil {
		return tally{}, err
	}
	if err := ctx.Err(); err != nil {
		return tally{}, fmt.Errorf("redlock: extend %q: %w", l.key, err)
	}
	l.op.Lock()
	defer l.op.Unlock()
	if err := l.over(); err != nil {
		return tally{}, err
	}

	start := c.cfg.clock.Now()
	wall := time.Now()
	t, settled := c.fanOut(ctx, timeout, decidedAt(len(c.nodes), l.quorum), nil, l.settled, l.kind.extend(l.token, ttl))
	l.settled = settled
	c.observeNodes(ctx, OpExtend, l.kind, wall, t)
	defer func() { l.observeOp(ctx, OpExtend, wall, err) }()
	drift := driftFor(ttl, c.cfg.driftFactor)
	elapsed := c.cfg.clock.Now().Sub(start)
	if t.yes >= l.quorum && validity(ttl, elapsed, drift) > 0 {
		l.setLease(ttl, start.Add(ttl-drift))
		return t, nil
	}
	detail := fmt.Sprintf("%s: extended on %d of %d nodes, quorum %d", l.kind.describe(), t.yes, len(c.nodes), l.quorum)
	if t.yes >= l.quorum {
		detail = fmt.Sprintf("%s: quorum reached but the new validity was spent (%v elapsed of ttl %v, drift %v)", l.kind.describe(), elapsed, ttl, drift)
	}
	return t, &quorumError{kind: ErrLockLost, detail: detail, cause: ctx.Err(), nodes: t.errs}
}

// over returns why the lock can no longer be extended, or nil.
func (l *Lock) over() error {
	l.mu.Lock()
	released, lost, until := l.released, l.lost, l.until
	l.mu.Unlock()
	switch {
	case released:
		return &quorumError{kind: ErrLockLost, detail: fmt.Sprintf("%s: already released", l.kind.describe())}
	case lost:
		return &quorumError{kind: ErrLockLost, detail: fmt.Sprintf("%s: already lost", l.kind.describe())}
	case !l.client.cfg.clock.Now().Before(until):
		return &quorumError{kind: ErrLockLost, detail: fmt.Sprintf("%s: its validity ran out", l.kind.describe())}
	}
	return nil
}

// Release deletes the lock on every node that still holds its token, all at
// once; a key that holds another token is left alone. It runs even if ctx
// has ended (it keeps ctx's values, not its cancellation), bounded by the
// per-node timeout, so `defer lock.Release(ctx)` is always right. It
// waits for every node to answer, so a program may close its Redis clients
// and exit right after it; once a quorum has confirmed, it does not wait
// for a node whose last call timed out (its key expires with the
// ttl). After Release, Validity is zero and Extend fails; calling Release
// again does nothing and returns nil.
//
// It returns nil when a quorum of nodes is free of the token afterwards
// and the lock held until the release: a quorum still had the token, or the
// validity had not run out and no majority had lost it. A node that fails is
// taken to still hold the token, as the safety assumptions say a crashed
// node does; its key expires with the ttl, and the failure is logged.
//
// It returns an error matching ErrLockLost when a majority of the nodes no
// longer had the token, or the validity had run out and fewer than a quorum
// confirmed it: the work done under the lock may not have been protected.
// When so many nodes fail that neither can be told, it returns an error that
// joins their *NodeError values; the keys they may hold expire with the
// ttl. On a nil Lock it returns ErrNotAcquired.
func (l *Lock) Release(ctx context.Context) (err error) {
	if l == nil {
		return ErrNotAcquired
	}
	l.op.Lock()
	defer l.op.Unlock()
	l.mu.Lock()
	ttl, until, released, stopRenew := l.ttl, l.until, l.released, l.stopRenew
	l.released = true
	l.mu.Unlock()
	if released {
		return nil
	}
	if stopRenew != nil {
		stopRenew()
	}
	l.closeDone.Do(func() { close(l.done) })

	c := l.client
	ctx = context.WithoutCancel(ctx)
	wall := time.Now()
	defer func() { l.observeOp(ctx, OpRelease, wall, err) }()
	expired := !c.cfg.clock.Now().Before(until)
	if !expired {
		if q, w := c.queues.nextForHandOff(l, c.cfg.handOffs); w != nil {
			h := c.handOff(ctx, l, w)
			yes, no, unknown := h.count()
			if h.next != nil {
				c.queues.handOver(q, w, h.next, h.contended)
				l.finish()
				return l.releaseResult(ctx, judgeRelease(len(c.nodes), l.quorum, yes, no, false), yes, no, ttl, h.errs)
			}
			// The hand-off failed; w contends once the key is released on
			// the nodes the hand-off did not hear from.
			defer c.queues.giveTurn(q, w)
			skipped := yes + no // the nodes the hand-off heard from
			t, settled := c.fanOut(ctx, c.nodeTimeout(ttl), c.releasedAt(l.quorum, yes, l.settled), invert(unknown), l.settled, l.kind.release(l.token))
			l.settled = settled
			l.finish()
			yes, no = yes+t.yes, no+t.no-skipped
			return l.releaseResult(ctx, judgeRelease(len(c.nodes), l.quorum, yes, no, false), yes, no, ttl, t.errs)
		}
	}
	t, settled := c.fanOut(ctx, c.nodeTimeout(ttl), c.releasedAt(l.quorum, 0, l.settled), nil, l.settled, l.kind.release(l.token))
	l.settled = settled
	c.observeNodes(ctx, OpRelease, l.kind, wall, t)
	l.finish()
	return l.releaseResult(ctx, judgeRelease(len(c.nodes), l.quorum, t.yes, t.no, expired), t.yes, t.no, ttl, t.errs)
}

// settledOrFailing is an attempt's stop condition: q nodes hold, or only
// nodes that are failing (frozen or cut off) have yet to answer. A
// failed attempt does not wait out their timeout: its cleanup's delete
// follows each one's SET there (see fanOut).
func (c *Client) settledOrFailing(q int) func(*tally) bool {
	return func(t *tally) bool {
		return t.yes >= q || t.yes+t.notYes > 0 && !c.awaits(t, settlement{})
	}
}

// releasedAt is Release's stop condition: every node has answered, or q
// nodes (counting base confirmed before) deleted the token and the nodes
// yet to answer are failing, or still out past the deadline of the lock's
// previous operation there (before). Release waits for the nodes that
// answer, not only a quorum, so that a program that closes its clients or
// exits right after Release leaves no key behind on the node that answered
// last; it does not wait out the timeout of a node that is frozen or cut
// off, whose key expires with the ttl anyway. Waiters are woken by each
// node's delete, so the wait costs the next holder nothing.
func (c *Client) releasedAt(q, base int, before settlement) func(*tally) bool {
	return func(t *tally) bool {
		return base+t.yes >= q && !c.awaits(t, before)
	}
}

// awaits reports whether a node yet to answer in t is worth waiting for:
// it is not failing, and its call of the operation before (if any) is not
// still out past its deadline.
func (c *Client) awaits(t *tally, before settlement) bool {
	for i, a := range t.answers {
		if a == unanswered && c.failing[i].Load() == nil && !before.overdue(i) {
			return true
		}
	}
	return false
}

// releaseResult is Release's result, given what the nodes answered: yes nodes
// held the token until the release, no nodes did not, errs are the nodes
// that failed.
func (l *Lock) releaseResult(ctx context.Context, outcome releaseOutcome, yes, no int, ttl time.Duration, errs []error) error {
	c := l.client
	n := len(c.nodes)
	switch outcome {
	case lostBefore:
		detail := fmt.Sprintf("%s: held by %d of %d nodes at release, quorum %d", l.kind.describe(), yes, n, l.quorum)
		if no <= n-l.quorum {
			detail += ", after its validity had run out"
		}
		return &quorumError{kind: ErrLockLost, detail: detail, nodes: errs}
	case incomplete:
		return &quorumError{
			kind: errReleaseIncomplete,
			detail: fmt.Sprintf("%s: deleted on %d and absent from %d of %d nodes, quorum %d; the rest expire with the ttl %v",
				l.kind.describe(), yes, no, n, l.quorum, ttl),
			nodes: errs,
		}
	}
	if len(errs) > 0 {
		c.cfg.logger.WarnContext(ctx, "redlock: released, but some nodes failed; their keys expire with the ttl",
			"lock", l.kind.describe(), "ttl", ttl, "err", errors.Join(errs...))
	}
	return nil
}

// invert returns the negation of each of b.
func invert(b []bool) []bool {
	out := make([]bool, len(b))
	for i, v := range b {
		out[i] = !v
	}
	return out
}

// isNil reports whether v is nil or an interface holding a nil pointer,
// map, slice, func or channel.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// cutsAtDeadline reports whether a client ends its calls at their context's
// deadline (go-redis's ContextTimeoutEnabled).
func cutsAtDeadline(rdb redis.UniversalClient) bool {
	switch v := rdb.(type) {
	case *redis.Client:
		return v.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return v.Options().ContextTimeoutEnabled
	}
	return false
}

// addrOf returns the address a client connects to, when it reveals one.
func addrOf(rdb redis.UniversalClient) string {
	switch v := rdb.(type) {
	case *redis.Client:
		return v.Options().Addr
	case *redis.ClusterClient:
		addrs := slices.Clone(v.Options().Addrs)
		slices.Sort(addrs)
		return strings.Join(addrs, ",")
	}
	return ""
}

func sameNode(a, b node) bool {
	if a.addr != "" && a.addr == b.addr {
		return true
	}
	ta, tb := reflect.TypeOf(a.rdb), reflect.TypeOf(b.rdb)
	return ta == tb && ta.Comparable() && a.rdb == b.rdb
}

func (n node) describe() string {
	if n.addr == "" {
		return "same client"
	}
	return n.addr
}
