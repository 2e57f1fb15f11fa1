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
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/rtt"
)

// Defaults, in one place. The per-node timeout is derived from the ttl when
// WithNodeTimeout is not given: a tenth of it, but no less than a healthy
// node on a loaded machine needs and no more than a hung node may cost.
const (
	defaultDriftFactor    = 0.01
	nodeTimeoutFraction   = 10
	maxDerivedNodeTimeout = time.Second
)

// minDerivedNodeTimeout is the least a derived node timeout is. The tests
// raise it (export_test.go): two copies of the suite at once on two cores
// with the race detector delay healthy replies past 50 ms.
var minDerivedNodeTimeout = 50 * time.Millisecond

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
	// misconfigured: by node, whether its last failure was one that
	// retrying cannot cure (warned once until it answers properly)
	misconfigured []atomic.Bool
	// told: by node, a failure of it has been logged (and a lock held
	// without it reported: OpDegraded) since it last answered; see news
	told []atomic.Bool
	// rtts: by node, what its replies tell of its round trip, for the
	// node timeout (see nodeTimeout); allKnown once every one has told
	// something (see anyUnknown)
	rtts        []rtt.Estimate
	allKnown    atomic.Bool
	idents      identities    // see identity.go
	subscribers []*subscriber // by node: the waiters' release subscriptions (see wakeup.go)
	calls       inflight      // node calls sent and not yet returned (see Drain)
	sched       *scheduler    // renewals and ends of its locks (see renewal.go)
	// batchRenewals: plain locks due for renewal together are renewed in
	// one script call per node (batching is on, and no node is a Redis
	// Cluster, where their keys would span slots)
	batchRenewals bool
}

// New returns a Client over nodes, which must be independent Redis masters
// (not replicas of one another). A single node gives a plain single-node lock
// with the same API; an even number is allowed, with quorum N/2+1.
//
// Any go-redis client type may be given, e.g. []*redis.Client or
// []redis.UniversalClient. New does not contact the nodes. The first
// operation identifies each node's server (INFO run_id; a ClusterClient by
// its cluster's node IDs) alongside its call, and no lock is granted before
// every reachable node is identified: two nodes that reach one server
// (localhost:6379 and 127.0.0.1:6379, or ClusterClients of one cluster)
// make every acquire fail with ErrMisconfigured. A server that does not
// answer INFO (an ACL user without it) is known by its address only.
//
// It returns an error matching ErrInvalidArgument when nodes is empty, a
// node is nil, the same node appears twice (the same client, or clients with
// the same address), or an option's value is out of range.
func New[C redis.UniversalClient](nodes []C, opts ...Option) (*Client, error) {
	if len(nodes) == 0 {
		return nil, invalid("no nodes")
	}
	c := &Client{
		nodes:         make([]node, len(nodes)),
		failing:       make([]atomic.Pointer[error], len(nodes)),
		misconfigured: make([]atomic.Bool, len(nodes)),
		told:          make([]atomic.Bool, len(nodes)),
		rtts:          make([]rtt.Estimate, len(nodes)),
		quorum:        quorumOf(len(nodes)),
		cfg: config{
			driftFactor: defaultDriftFactor,
			retry:       defaultRetry,
			clock:       systemClock{},
			logger:      slog.Default(),
			handOffs:    defaultHandOffs,
		},
	}
	c.idents.init(len(nodes))
	for i, rdb := range nodes {
		if isNil(rdb) {
			return nil, invalid("node %d is nil", i)
		}
		c.nodes[i] = node{rdb: rdb, addr: addrOf(rdb), inline: cutsAtDeadline(rdb), scripts: &scripts{}}
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
	c.subscribers = make([]*subscriber, len(c.nodes))
	c.batchRenewals = !c.cfg.unbatched
	for i := range c.nodes {
		c.subscribers[i] = newSubscriber(c.nodes[i].rdb)
		if !c.cfg.unbatched {
			c.nodes[i].pipe = &pipe{rdb: c.nodes[i].rdb, known: c.nodes[i].scripts, ack: c.cfg.replicaAck}
		}
		if _, cluster := any(nodes[i]).(*redis.ClusterClient); cluster {
			c.batchRenewals = false // the keys of a batch span slots
		}
		if _, single := any(nodes[i]).(*redis.Client); c.cfg.replicaAck.on() && !single {
			return nil, invalid("node %d is a %T: WithReplicaAck needs WAIT on the write's own connection, which only a *redis.Client keeps (a Cluster or Ring client routes a keyless WAIT to a server of its choosing)", i, nodes[i])
		}
	}
	c.sched = newScheduler(c)
	return c, nil
}

// Quorum returns how many nodes must agree for a lock: N/2+1.
func (c *Client) Quorum() int { return c.quorum }

type config struct {
	driftFactor float64
	nodeTimeout time.Duration // 0: derived from the ttl
	retry       RetryPolicy
	maxAttempts int // 0: no limit
	clock       Clock
	logger      *slog.Logger
	unbatched   bool
	handOffs    int
	observer    Observer
	replicaAck  replicaAck
	// fenceHorizon: counters are kept at least this long once the node's
	// clock has passed them (see WithFenceHorizon)
	fenceHorizon time.Duration
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

// WithNodeTimeout sets how long an operation waits for each node's reply,
// kept as given whatever the nodes' round trips. It must be positive. A node
// that does not answer in time counts as failed for that operation; nodes
// all farther away than d never give a lock. Default: derived from the
// operation's ttl and the round trips the Client sees: a tenth of the ttl
// (at least 50ms, at most 1s), lengthened to what the quorum-th fastest
// node's replies show it needs, up to two thirds of the ttl less its drift
// allowance and at most a minute (a node not heard from yet is given that
// much); see docs/algorithm.md. A caller's own deadline, which cuts or
// skips a call, never counts against a node.
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

// WithLogger sets where the Client logs: failed attempts (Debug); lost
// locks, locks held without a node, nodes it could not clean up, failed
// renewals and misconfigured nodes (Warn), a node's failure once until it
// answers again. It must not be nil. Default: slog.Default(), which shows
// Info and above; give slog.New(slog.DiscardHandler) for no logging.
func WithLogger(logger *slog.Logger) Option {
	return clientOption(func(c *config) error {
		if logger == nil {
			return invalid("logger is nil")
		}
		c.logger = logger
		return nil
	})
}

// Lock is a lock held on a quorum of nodes. It is safe for concurrent use,
// and its methods may be called on a nil *Lock (as after a failed acquire):
// they report that nothing is held.
type Lock struct {
	client *Client
	kind   kind
	key    string // the first of kind.keys()
	quorum int    // how many nodes must hold it
	token  string // what the nodes store: the random token, and the metadata if any

	// op serialises Extend and Release. Each sends its call to a node once
	// the previous operation's call there has settled, so that the writes
	// reach each node in order.
	op      sync.Mutex
	settled settlement

	fence    int64     // 0 unless acquired WithFencing
	renewed  bool      // acquired WithAutoRenew: it ends the renewal margin before Until
	acquired time.Time // on the wall clock, when it was acquired (for Event.Held)

	mu        sync.Mutex
	terms     terms  // of the last acquire or extend
	confirmed int    // nodes that confirmed the last acquire or extend
	gone      []bool // by node: told that it no longer holds the lock (see goneNews); nil until one is
	until     time.Time
	released  bool
	lost      bool  // the lock ended otherwise: see lose
	lostWhy   error // why, matching ErrLockLost
	// lostShown: an Extend or a renewal found a majority of the nodes
	// without its token (set by judgeExtend, with op held)
	lostShown bool
	watching  bool     // Done was called: the scheduler ends it at its deadline
	onEnd     []func() // see afterEnd

	sched schedule // guarded by the Client's scheduler's mu

	done      chan struct{} // closed when the lock ends; see Done
	closeDone sync.Once
	next      successor // what follows the lock in its Client, if anything
}

// successor is what follows a Lock in its Client: the local turn it holds
// (localqueue.go), which its Release may hand to the next goroutine waiting
// for the key (handoff.go).
type successor interface {
	// release may do l's Release by handing the lock to a waiter; done
	// tells whether it did, and err is then Release's result.
	release(ctx context.Context, l *Lock, tm terms) (done bool, err error)
	// ended is told once when l ended without being handed over.
	ended(l *Lock)
}

// finish tells the lock's successor, once, that the lock has ended.
func (l *Lock) finish() {
	l.mu.Lock()
	next := l.next
	l.next = nil
	l.mu.Unlock()
	if next != nil {
		next.ended(l)
	}
}

// acquisition is one attempt to acquire a lock: what each of its steps
// (attempt, conclude, settleFence, cleanup, leave) needs, the node timeout
// worked out once, and the settlement of the last calls it sent, which the
// next calls to each node wait for.
type acquisition struct {
	kind    kind
	token   string        // the attempt's own
	cfg     acquireConfig // the Acquire's options and terms (ttl, node timeout, drift)
	start   time.Time     // on the Clock, when the attempt's calls were sent
	settled settlement
}

// newAcquisition prepares an attempt with a fresh token, whose calls go to
// each node after those of after, with the node timeout of now.
func (c *Client) newAcquisition(k kind, ac acquireConfig, after settlement) acquisition {
	ac.terms = ac.terms.now(c)
	return acquisition{kind: k, token: storedValue(newToken(k), ac.metadata), cfg: ac, settled: after}
}

// fanOut runs op on the nodes (see Client.fanOut) with the attempt's node
// timeout, after its last calls, and makes these its last calls.
func (a *acquisition) fanOut(ctx context.Context, c *Client, stop func(*tally) bool, skip []bool, op nodeOp) tally {
	t, settled := c.fanOut(ctx, a.cfg.terms, stop, skip, a.settled, op)
	a.settled = settled
	return t
}

// attempt is one run of steps 1 to 4 of the algorithm for a lock of kind
// k under token. Its error carries the context's error when the context had
// ended by the time it returned. eager returns a failure as soon as the
// quorum is out of reach, rather than after every node answered or timed
// out.
func (c *Client) attempt(ctx context.Context, a *acquisition, eager bool) (*Lock, *quorumError) {
	if err := ctx.Err(); err != nil {
		return nil, &quorumError{sentinel: ErrNotAcquired, detail: fmt.Sprintf("%s: no attempt made", a.kind.describe()), cause: err, heldOn: -1}
	}
	if err := c.refused(); err != nil {
		return nil, c.refusal(a, err)
	}
	a.start = c.cfg.clock.Now()
	// Return as soon as a quorum holds, leaving slower nodes to the
	// settlement. A failure waits for the nodes that answer about as fast
	// as those that decided it (withGrace), so that the cleanup sees which
	// of them took the key, but not for a frozen or slow node: its delete
	// follows its SET in the background. Nodes known to be failing (frozen
	// or cut off) get no more than that grace.
	q := a.kind.quorum(len(c.nodes))
	wall := time.Now()
	t := a.fanOut(ctx, c, c.attemptDone(q, eager), nil, a.kind.acquire(a.token, a.cfg.ttl, a.cfg.fenceKeep()))
	if t.yes < q && !t.outOfReach(q) {
		t = c.resolveSplit(ctx, a, t, q)
	}
	c.observeNodes(ctx, OpAcquire, a.kind, wall, t)
	return c.conclude(ctx, a, t)
}

// refusal is the error of an attempt on a Client found to reach one server
// through two nodes (err, a *NodeError that matches ErrMisconfigured).
func (c *Client) refusal(a *acquisition, err error) *quorumError {
	return &quorumError{sentinel: ErrNotAcquired, heldOn: -1, nodes: []error{err}, misconfigured: true,
		detail: fmt.Sprintf("%s: refused, two nodes reach one server", a.kind.describe())}
}

// conclude is steps 3 and 4 of attempt a, which got t from the nodes: the
// Lock when a quorum took the key within its validity (for a fenced lock,
// once a quorum stores its fencing token), or else the release of the key
// wherever it may have been taken.
func (c *Client) conclude(ctx context.Context, a *acquisition, t tally) (*Lock, *quorumError) {
	if err := c.refused(); err != nil {
		// Two nodes were found on one server (during this attempt, or
		// since a hand-off began): no lock is granted.
		c.cleanup(ctx, a, t)
		return nil, c.refusal(a, err)
	}
	k, ttl, drift := a.kind, a.cfg.ttl, a.cfg.drift
	q := k.quorum(len(c.nodes))
	var fence int64
	fenceStored := true // or not needed
	if a.cfg.fenced && t.yes >= q {
		fence, fenceStored = c.settleFence(ctx, a, t)
	}
	elapsed := c.cfg.clock.Now().Sub(a.start)
	v := validity(ttl, elapsed, drift)
	// A renewed lock must start with more validity than its renewal margin
	// (see renewMargin): it is declared lost by then at the latest.
	var need time.Duration
	if a.cfg.autoRenew {
		need = a.cfg.terms.now(c).renewMargin()
	}
	if t.yes >= q && fenceStored && v > need {
		c.degraded(ctx, k, t, nil)()
		c.leaveTheLine(ctx, a, t)
		l := &Lock{client: c, kind: k, key: k.keys()[0], quorum: q, token: a.token, fence: fence, terms: a.cfg.terms.now(c), until: a.start.Add(ttl - drift),
			settled: a.settled, done: make(chan struct{}), renewed: a.cfg.autoRenew, acquired: time.Now(), confirmed: t.yes}
		if a.cfg.autoRenew {
			c.sched.renew(l)
		}
		return l, nil
	}

	// Step 4: a node that failed or did not answer may still have taken the
	// lock, so everything but a definite "held by another" is released, each
	// node's delete sent once its SET has landed or timed out.
	c.cleanup(ctx, a, t)

	var detail string
	switch {
	case t.outOfReach(q):
		detail = fmt.Sprintf("%s: %d of %d nodes are misconfigured, so a quorum of %d is out of reach", k.describe(), t.broken, len(c.nodes), q)
	case t.yes < q:
		detail = fmt.Sprintf("%s: taken on %d of %d nodes, quorum %d", k.describe(), t.yes, len(c.nodes), q)
		if t.yes+t.no == 0 && ctx.Err() == nil && allTimedOut(t.errs) {
			detail += c.timeoutHint(a.cfg.timeout)
		}
	case !fenceStored:
		detail = fmt.Sprintf("%s: the fencing token could not be stored on a quorum", k.describe())
	case v > 0:
		detail = fmt.Sprintf("%s: quorum reached with %v of validity left, not more than the renewal margin %v (%v elapsed of ttl %v)", k.describe(), v, need, elapsed, ttl)
	default:
		detail = fmt.Sprintf("%s: quorum reached but its validity was spent (%v elapsed of ttl %v, drift %v)", k.describe(), elapsed, ttl, drift)
	}
	heldOn := listenNode(k.channels(), t.answers, c.deaf)
	holder, taken := takenByOne(t, q)
	return nil, &quorumError{sentinel: ErrNotAcquired, detail: detail, cause: ctx.Err(), nodes: t.errs, heldOn: heldOn,
		taken: taken, holder: holder, misconfigured: t.outOfReach(q), silent: t.yes+t.no == 0 && allTimedOut(t.errs),
		unreachable: len(t.errs) > len(c.nodes)-q}
}

// allTimedOut reports whether every error of errs is a node's that gave
// no reply in time.
func allTimedOut(errs []error) bool {
	for _, err := range errs {
		if !timedOut(err) {
			return false
		}
	}
	return len(errs) > 0
}

// timeoutHint says, for an attempt in which no node answered within the
// node timeout, what lets nodes that far away answer.
func (c *Client) timeoutHint(timeout time.Duration) string {
	if c.cfg.nodeTimeout > 0 {
		return fmt.Sprintf("; no node answered within the node timeout %v: if the nodes are that far away (or that loaded), give WithNodeTimeout a longer one", timeout)
	}
	return fmt.Sprintf("; no node answered within the node timeout %v, which grows with the round trips seen up to two thirds of the ttl's validity: if the nodes are farther away than that, give a longer ttl, or WithNodeTimeout", timeout)
}

// cleanup releases key after a failed attempt whose tally it is given,
// with a context that the caller's cancellation does not reach: the caller
// may have given up, but the keys must still go. It waits for the nodes that
// took the key or were not waited for; on those that failed, the delete goes
// on in the background, so that a dead node does not hold up the next
// attempt.
func (c *Client) cleanup(ctx context.Context, a *acquisition, t tally) {
	answers := t.answers
	skip := make([]bool, len(answers))
	for i, a := range answers {
		// A node that refused holds nothing of ours, nor one whose call
		// was never sent (its operation ended first: see notSent).
		skip[i] = a == holdsNot || t.unsent != nil && t.unsent[i]
	}
	// Wait for the nodes that took the key (they answer quickly); the
	// deletes on nodes that failed or were not waited for go on in the
	// background, each after the node's SET (see fanOut), so that a dead or
	// frozen node does not hold up the next attempt. Every attempt has its
	// own token, so a late delete can only remove this attempt's key.
	answered := func(t *tally) bool {
		for i, ans := range answers {
			if ans == holds && t.answers[i] == unanswered {
				return false
			}
		}
		return true
	}
	r := a.fanOut(context.WithoutCancel(ctx), c, answered, skip, a.kind.drop(a.token))
	if news := c.news(r.errs); len(news) > 0 {
		c.cfg.logger.WarnContext(ctx, "redlock: could not release after a failed attempt; the key expires with its ttl",
			"key", a.kind.keys()[0], "kind", a.kind.name(), "ttl", a.cfg.ttl, "err", errors.Join(news...))
	}
}

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
	return c.observed(ctx, k, func(ctx context.Context, attempts *int) (*Lock, error) { return c.inTurn(ctx, k, ac, attempts) })
}

// inTurn is Acquire's attempts for a lock of kind k, made in the turn of
// the kind's local queue when it has one (see localqueue.go).
func (c *Client) inTurn(ctx context.Context, k kind, ac acquireConfig, attempts *int) (*Lock, error) {
	// An Acquire bounded by WithMaxAttempts does not wait in the local
	// queue, whose wait is bounded only by ctx.
	queue := k.turns()
	if queue == "" || ac.maxAttempts > 0 {
		return c.acquireLoop(ctx, k, ac, attempts)
	}
	return c.queues.inTurn(ctx, queue, k, ac, attempts, func() (*Lock, error) {
		return c.acquireLoop(ctx, k, ac, attempts)
	})
}

// acquireLoop is Acquire's attempts, until one succeeds or ctx ends.
func (c *Client) acquireLoop(ctx context.Context, k kind, ac acquireConfig, attempts *int) (*Lock, error) {
	line, inLine := k.(waitsInLine)
	if inLine {
		if qe := line.join(ctx, c, ac); qe != nil {
			return nil, qe
		}
	}
	var watch *releaseWatch // subscribed after the first failure
	var ln *waitLine        // a plain lock's waiter's place in line, once it waits
	if p, ok := k.(plain); ok && ac.retry != nil {
		ln = newLine(p.key, ac.ttl)
	}
	defer func() {
		ln.leave(c, ac.timeout)
		watch.close()
	}()
	var (
		first      bool      // a fair lock's last announcement named this waiter first in line
		woken      bool      // the last wait ended with a release announcement
		wokeAt     time.Time // when a wait last did
		lastHolder int64     // the other holder the last refusal named on a quorum, if any
		// The calls of the attempts, their cleanups and the leave go to
		// each node in order: a late cleanup must not land after a later
		// attempt's calls (it would put a fair waiter back in a queue it
		// had left).
		settled settlement
	)
	for failed := 1; ; failed++ {
		*attempts = failed
		// Each attempt has a token of its own: a late delete from an
		// earlier attempt's cleanup can then never remove a later attempt's
		// key. What must last across attempts (a writer's mark, a place in
		// a fair queue) has a waiter ID in the kind.
		a := c.newAcquisition(k, ac, settled)
		// An announcement from before this attempt is old news; one that
		// comes while it runs is not, and ends the wait after it at once.
		watch.drain()
		// A fair waiter named first in line tries again at once if refused
		// (the release has not reached every node yet): it need not wait for
		// a frozen node's timeout to learn that. Its keys on nodes that had
		// not answered are deleted in order before its next attempt there.
		lock, qe := c.attempt(ctx, &a, first)
		if qe == nil {
			return lock, nil
		}
		settled = a.settled
		if qe.cause != nil || qe.misconfigured {
			c.leave(ctx, &a)
			return nil, qe
		}
		if failed == ac.maxAttempts {
			qe.detail += fmt.Sprintf(", after %d attempts (WithMaxAttempts)", failed)
			c.leave(ctx, &a)
			return nil, qe
		}
		c.cfg.logger.DebugContext(ctx, "redlock: attempt failed", "key", k.keys()[0], "kind", k.name(), "attempt", failed, "err", qe)
		// Listen on a node that named a holder, and move to another when
		// the one listened to is failing (frozen or cut off) or its
		// subscriptions' connection no longer receives: its releases would
		// never be heard.
		fresh := false
		if qe.heldOn >= 0 && (failed == 1 || watch != nil && watch.node != qe.heldOn && (c.failing[watch.node].Load() != nil || watch.deaf())) {
			watch.close()
			watch = c.watchRelease(ctx, k.channels(), ln, qe.heldOn, a.cfg.timeout)
			fresh = watch.subscribed()
		}
		if watch != nil {
			// Take a place in line, or keep it: a release wakes the first
			// in line that listens.
			ln.join(c, watch.node, a.cfg.timeout)
		}
		delay := ac.retry.Delay(failed)
		if woken {
			wokeAt = time.Now()
		}
		if watch.subscribed() && ac.retry == defaultRetry && time.Since(wokeAt) > subscribedPoll {
			// The release will be heard: the timer is only for the release
			// that is missed (the node fails) or never announced (the
			// holder's key expires). Not right after a release was heard,
			// though: a refusal then may be the release not yet landed on
			// a quorum (it is announced by the first node to delete the
			// key), and is tried again after the policy's delay.
			delay = max(delay, subscribedPoll+mrand.N(subscribedPoll/2))
		}
		if time.Since(wokeAt) < a.cfg.timeout && (!qe.taken || qe.holder == lastHolder) {
			// Woken by a release (within a node timeout) and still
			// refused, and no one holder shows on a quorum: the clients
			// woken with us may have split the votes, and then nobody
			// holds the key and nobody will announce a release. Or the
			// holder whose release woke us still shows on a quorum: the
			// release is announced by the first node to delete the key,
			// and has not landed on the others yet. Either way, try again
			// soon, at a random moment, rather than after the policy's
			// delay. (A new holder that won the key is waited for.)
			delay = min(delay, wakeSpread+mrand.N(4*wakeSpread))
		}
		if qe.taken {
			lastHolder = qe.holder
		}
		if inLine {
			delay = line.nextWait(delay, first)
		}
		if fresh {
			// A release between this attempt's refusal and the subscription
			// was announced before anyone listened: one more attempt at
			// once sees it (without it, about 1 wait in 12 on a key held
			// 5-20 ms fell back to the subscribed poll; bench -probe
			// wakeups).
			delay = 0
		}
		listen := watch
		if qe.unreachable {
			// A majority of the nodes is down, frozen or cut off: the
			// attempts fail at once (nodes known to be failing are not
			// waited for), and the next could not do better for a while.
			// A few a second, not hundreds; and a release heard meanwhile
			// (our own attempt's undo, announced: hundreds a second) does
			// not cut the wait short, as no quorum can form. A fair
			// waiter keeps its own pace (nextWait): held back 250 ms, one
			// that a node's restart had left out of some queues was
			// overtaken (1 grant in 15 out of ticket order with a node
			// down at each waiter's draw, under load).
			if !inLine {
				delay = max(delay, unreachablePoll+mrand.N(unreachablePoll/2))
			}
			listen = nil
		}
		if qe.silent && !a.settled.wait(ctx) {
			// No node answered in time, and the calls sent are still on
			// their way (a network slower than the node timeout): the next
			// attempt's calls would queue behind them and this attempt's
			// cleanup, and spend its node timeout waiting there. So they are
			// waited for first (up to their own deadlines).
			qe.cause = ctx.Err()
			c.leave(ctx, &a)
			return nil, qe
		}
		var ok bool
		if ok, first, woken = c.waitRetry(ctx, k, listen, delay, failed); !ok {
			qe.cause = ctx.Err()
			c.leave(ctx, &a)
			return nil, qe
		}
	}
}

// leave drops what an Acquire that gives up left on the nodes between its
// attempts (a writer's mark, a place in a fair queue), waiting at most the
// node timeout; on each node after the calls of its last attempt.
func (c *Client) leave(ctx context.Context, a *acquisition) {
	if op := a.kind.leave(a.token); op != nil {
		a.fanOut(context.WithoutCancel(ctx), c, nil, nil, *op)
	}
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
	return c.observed(ctx, k, func(ctx context.Context, attempts *int) (*Lock, error) { return c.tryOnce(ctx, k, ac, attempts) })
}

// tryOnce is one attempt of a TryAcquire: for a fair lock, with the ticket
// drawn first and its place in the queue left when the attempt fails.
func (c *Client) tryOnce(ctx context.Context, k kind, ac acquireConfig, attempts *int) (*Lock, error) {
	if line, ok := k.(waitsInLine); ok {
		once := ac
		once.retry = nil
		if qe := line.join(ctx, c, once); qe != nil {
			return nil, qe
		}
	}
	a := c.newAcquisition(k, ac, settlement{})
	*attempts = 1
	lock, qe := c.attempt(ctx, &a, false)
	if qe != nil {
		c.leave(ctx, &a)
		return nil, qe
	}
	return lock, nil
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
// *NodeError, when a majority of the nodes answered that they no longer
// hold the token, or the lock's validity ran out before a quorum confirmed
// the extend: the lock is then lost (Done is closed). When the extend was
// not confirmed on a quorum (nodes failed or did not answer in time, or
// its new validity was spent) but nothing shows the lock lost, it returns
// an error matching ErrNotConfirmed that says until when the lock is still
// valid; the lock stays usable, Until is left as it was, and Extend may be
// tried again. On a Client found to reach one server through two nodes
// (see ErrMisconfigured), Extend is not confirmed either, and the error
// also matches ErrMisconfigured. A lock that was released, lost, or whose
// validity has run out is over: Extend returns ErrLockLost without
// contacting the nodes. Bad input gives
// ErrInvalidArgument, and an ended ctx its error, before any node is
// contacted. On a nil Lock it returns ErrNotAcquired.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return ErrNotAcquired
	}
	tm, err := l.client.checkLease(l.key, ttl)
	if err != nil {
		return err
	}
	// An extend confirmed after Until could not give the lock back: the
	// nodes are not waited for past it (a majority that hangs would
	// otherwise cost the whole node timeout, which grows while they do).
	_, until := l.lease()
	ctx = l.startOp(ctx, OpExtend)
	_, lost, err := l.extend(ctx, tm, min(tm.timeout, until.Sub(l.client.cfg.clock.Now())))
	if lost {
		l.lose(err)
	}
	return err
}

// extend is Extend on the terms tm with the given per-node timeout, also
// returning what the nodes answered, and whether they showed the lock lost:
// the caller then ends it (Lock.lose), once the Extend is over, so that an
// Observer told of the loss may call Release.
func (l *Lock) extend(ctx context.Context, tm terms, timeout time.Duration) (_ tally, lost bool, err error) {
	if err := ctx.Err(); err != nil {
		return tally{}, false, fmt.Errorf("redlock: extend %q: %w", l.key, err)
	}
	l.op.Lock()
	t, lost, tell, err := l.extendHeld(ctx, tm, timeout)
	l.op.Unlock()
	tell()
	return t, lost, err
}

// extendHeld is extend, called with the lock's op held. tell reports the
// extend to the Observer: call it once op is let go, as an Observer may
// Release the lock.
func (l *Lock) extendHeld(ctx context.Context, tm terms, timeout time.Duration) (_ tally, lost bool, tell func(), err error) {
	c := l.client
	if err := l.over(); err != nil {
		return tally{}, false, func() {}, err
	}
	if err := l.refusedExtend(); err != nil {
		return tally{}, false, func() {}, err
	}

	start := c.cfg.clock.Now()
	wall := time.Now()
	t, settled := c.fanOut(ctx, tm.within(timeout), decidedAt(len(c.nodes), l.quorum), nil, l.settled, l.kind.extend(l.token, tm.ttl))
	l.settled = settled
	lost, err = l.judgeExtend(ctx, tm, start, c.cfg.clock.Now().Sub(start), t)
	degraded := func() {}
	if err == nil {
		degraded = c.degraded(ctx, l.kind, t, l)
	}
	return t, lost, func() {
		c.observeNodes(ctx, OpExtend, l.kind, wall, t)
		l.observeOp(ctx, OpExtend, wall, err)
		degraded()
	}, err
}

// judgeExtend is an extend's outcome on the terms tm, begun at start and
// answered as t after elapsed: whether the nodes showed the lock lost, and
// the error when it was not extended. It records the new lease.
func (l *Lock) judgeExtend(ctx context.Context, tm terms, start time.Time, elapsed time.Duration, t tally) (lost bool, err error) {
	c := l.client
	ttl, drift := tm.ttl, tm.drift
	if err := l.refusedExtend(); err != nil {
		return false, err
	}
	shown := t.no > len(c.nodes)-l.quorum
	l.mu.Lock()
	ended := l.released || l.lost
	if shown {
		// Shown lost: a Release from now on reports it so, also one that
		// comes before the caller ends the lock (Lock.lose), once the op
		// is let go (an Observer told of the loss may Release), and also
		// when the lock had already ended otherwise (at its renewal
		// margin) while the extend was out.
		l.lostShown = true
	}
	l.mu.Unlock()
	if ended {
		// Declared lost while the extend was out (its deadline passed):
		// the holder has been told it is over, and an extend does not
		// bring it back. Its keys expire with the ttl, or go with Release.
		return false, l.over()
	}
	if t.yes >= l.quorum && validity(ttl, elapsed, drift) > 0 {
		l.mu.Lock()
		l.confirmed = t.yes
		l.mu.Unlock()
		l.setLease(tm.now(c), start.Add(ttl-drift)) // with the node timeout its replies teach
		return false, nil
	}
	detail := fmt.Sprintf("%s: extended on %d of %d nodes, quorum %d", l.kind.describe(), t.yes, len(c.nodes), l.quorum)
	if t.yes >= l.quorum {
		detail = fmt.Sprintf("%s: quorum reached but the new validity was spent (%v elapsed of ttl %v, drift %v)", l.kind.describe(), elapsed, ttl, drift)
	}
	_, until := l.lease()
	now := c.cfg.clock.Now()
	switch {
	case shown:
		detail += fmt.Sprintf(", and %d nodes no longer hold its token", t.no)
	case !now.Before(until):
		detail += ", and its validity ran out"
	default:
		detail = fmt.Sprintf("extend of %s; the lock is still valid until %s (%v left)", detail, until.Format("15:04:05.000"), until.Sub(now).Round(time.Millisecond))
		return false, &quorumError{sentinel: ErrNotConfirmed, detail: detail, cause: ctx.Err(), nodes: t.errs}
	}
	return true, &quorumError{sentinel: ErrLockLost, detail: detail, cause: ctx.Err(), nodes: t.errs}
}

// refusedExtend returns the error of an extend on a Client found to reach
// one server through two nodes: a quorum of its replies may be fewer
// servers. The lock, granted before that was found, stays valid until its
// Until.
func (l *Lock) refusedExtend() error {
	err := l.client.refused()
	if err == nil {
		return nil
	}
	_, until := l.lease()
	return &quorumError{sentinel: ErrNotConfirmed, nodes: []error{err},
		detail: fmt.Sprintf("extend of %s refused, two nodes reach one server; the lock is still valid until %s", l.kind.describe(), until.Format("15:04:05.000"))}
}

// over returns why the lock can no longer be extended, or nil.
func (l *Lock) over() error {
	l.mu.Lock()
	released, lost, until := l.released, l.lost, l.until
	l.mu.Unlock()
	switch {
	case released:
		return &quorumError{sentinel: ErrLockLost, detail: fmt.Sprintf("%s: already released", l.kind.describe())}
	case lost:
		return &quorumError{sentinel: ErrLockLost, detail: fmt.Sprintf("%s: already lost", l.kind.describe())}
	case !l.client.cfg.clock.Now().Before(until):
		return &quorumError{sentinel: ErrLockLost, detail: fmt.Sprintf("%s: its validity ran out", l.kind.describe())}
	}
	return nil
}

// Release deletes the lock on every node that still holds its token, all at
// once; a key that holds another token is left alone. It runs even if ctx
// has ended (it keeps ctx's values, not its cancellation), bounded by the
// per-node timeout, so `defer lock.Release(ctx)` is always right. It
// returns once a quorum of nodes is known to be free of the token and the
// nodes that answer about as fast have answered (as long again as the
// quorum took, at least 5 ms); a slow or frozen node's delete finishes in
// the background, and its key expires with the ttl if it cannot. So a
// program may close its Redis clients and exit right after it, leaving at
// most a slow node's key to its ttl. While the answers are mixed (some
// nodes deleted the token, others no longer had it, and neither makes a
// quorum or a majority), it waits for the other nodes up to the per-node
// timeout, so that a loss its slower nodes show is reported. After
// Release, Validity is zero and Extend fails; calling Release again does
// nothing and returns nil.
//
// It returns nil when a quorum of nodes is free of the token afterwards
// and the lock held until the release: a quorum still had the token, or the
// validity had not run out and no majority had lost it. A node that fails is
// taken to still hold the token, as the safety assumptions say a crashed
// node does; its key expires with the ttl, and the failure is logged.
//
// It returns an error matching ErrLockLost when a majority of the nodes no
// longer had the token, or the validity had run out and fewer than a quorum
// confirmed it, or an Extend or a renewal had found a majority without the
// token before (and closed Done): the work done under the lock may not
// have been protected. The token is deleted all the same wherever it is
// left.
// When so many nodes fail that neither can be told, it returns an error
// matching ErrNotConfirmed that joins their *NodeError values; the keys they
// may hold expire with the ttl. Nodes known to be failing (their last call
// went unanswered) are not waited for. ErrNotConfirmed also comes after a
// hand-off to a goroutine waiting for the lock that did not win, when the
// nodes it did not hear from have no key and those decide: the hand-off may
// have run there and its cleanup deleted the swapped key. On a nil Lock it
// returns ErrNotAcquired.
func (l *Lock) Release(ctx context.Context) error {
	if l == nil {
		return ErrNotAcquired
	}
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return nil // nothing to do, nor to tell
	}
	ctx = l.startOp(context.WithoutCancel(ctx), OpRelease)
	l.op.Lock()
	tell, err := l.releaseHeld(ctx)
	l.op.Unlock()
	// The Observer is told once the op is let go: it may Extend or Release
	// the lock (and be answered that it is over).
	tell(err)
	return err
}

// releaseHeld is Release, called with the lock's op held; tell reports it
// to the Observer.
func (l *Lock) releaseHeld(ctx context.Context) (tell func(error), err error) {
	wall := time.Now()
	tell = func(err error) { l.observeOp(ctx, OpRelease, wall, err) }
	l.mu.Lock()
	tm, until, released, lost := l.terms, l.until, l.released, l.lostShown
	l.released = true
	l.mu.Unlock()
	if released {
		return tell, nil // released meanwhile by another goroutine
	}
	tm = tm.now(l.client)
	l.client.sched.drop(l)
	l.end()

	c := l.client
	expired := !c.cfg.clock.Now().Before(until)
	l.mu.Lock()
	next := l.next
	l.mu.Unlock()
	if !expired && !lost && next != nil {
		if done, err := next.release(ctx, l, tm); done {
			return tell, err
		}
	}
	t, settled := c.fanOut(ctx, tm, c.releasedAt(l.quorum, 0, 0, 0, lost || expired, l.settled), nil, l.settled, l.kind.release(l.token))
	l.settled = settled
	tell = func(err error) {
		c.observeNodes(ctx, OpRelease, l.kind, wall, t)
		l.observeOp(ctx, OpRelease, wall, err)
	}
	l.finish()
	if lost {
		// A majority was found without the token before (Done is
		// closed): what the nodes answer now does not make it held until
		// the release.
		return tell, &quorumError{sentinel: ErrLockLost, nodes: t.errs,
			detail: fmt.Sprintf("%s: a majority of the nodes had lost it before its release; deleted on %d of %d nodes", l.kind.describe(), t.yes, len(c.nodes))}
	}
	return tell, l.releaseResult(ctx, judgeRelease(len(c.nodes), l.quorum, t.yes, t.no, expired), t.yes, t.no, tm.ttl, t.errs)
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
		return &quorumError{sentinel: ErrLockLost, detail: detail, nodes: errs}
	case incomplete:
		return &quorumError{
			sentinel: ErrNotConfirmed,
			detail: fmt.Sprintf("release of %s: deleted on %d and absent from %d of %d nodes, quorum %d; the rest expire with the ttl %v",
				l.kind.describe(), yes, no, n, l.quorum, ttl),
			nodes: errs,
		}
	}
	if news := c.news(errs); len(news) > 0 {
		c.cfg.logger.WarnContext(ctx, "redlock: released, but some nodes failed; their keys expire with the ttl",
			"key", l.key, "kind", l.kind.name(), "ttl", ttl, "err", errors.Join(news...))
	}
	return nil
}
