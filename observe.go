package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
)

// Observer receives what a Client does, for metrics and tracing (the
// otelredlock module adapts it to OpenTelemetry). Observe is called after
// the operation, on the goroutine that ran it: the caller's for Acquire,
// TryAcquire, Extend, Release and Do (and their OpNode and OpDegraded
// events), the renewal's for OpRenew and a renewal's OpExtend and
// OpDegraded, and a goroutine of its own for OpMisconfigured. An operation
// decided before every node answered (an Acquire of a plain lock that is
// not fenced, an Extend, a renewal: once a quorum holds the lock) has its
// OpNode and OpDegraded events told by the goroutine that hears the nodes
// still to answer, after its OpAcquire or OpExtend, and they may come after
// the caller's next operation on the lock has begun. It must be
// safe for concurrent use, and quick: a slow Observer holds up its
// caller's operation, or the renewals of every lock of the Client.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f(ctx, e).
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Op is what an Event reports.
type Op string

// The operations an Observer hears about.
const (
	OpAcquire Op = "acquire" // an Acquire, TryAcquire or AcquireAll returned
	OpExtend  Op = "extend"  // an Extend returned (also each renewal's)
	OpRelease Op = "release" // a Release returned
	OpRenew   Op = "renew"   // an automatic renewal succeeded or failed
	OpLost    Op = "lost"    // a lock ended before its Release (see Lock.Done)
	OpNode    Op = "node"    // one node's part in an acquire, extend or release

	// OpMisconfigured: a node failed with an error that retrying cannot
	// cure (Err matches ErrMisconfigured and says what to change; Node and
	// Addr name it). Reported once, at the first operation that meets it,
	// until the node takes a lock again.
	OpMisconfigured Op = "misconfigured"

	// OpDegraded: a lock was granted, extended or renewed without a node
	// that failed (Err says how; Node and Addr name it): it survives fewer
	// failures. Reported once per node until the node answers again (a
	// node that hangs, once its call has failed: go-redis's read timeout);
	// and once per lock and node when a node that held the lock answers
	// an extend or a renewal without its key, or with the key taken again
	// (it expired, was evicted, or the node restarted empty). A node where
	// the lock was never taken (another's key sat there when it was won:
	// contention) is not reported, only logged at Debug.
	OpDegraded Op = "degraded"
)

// Event is one thing a Client did.
type Event struct {
	Op       Op
	Kind     string        // the lock's kind: plain, reentrant, read, write, semaphore, multi-key, fair
	Key      string        // the lock's (first) key
	Start    time.Time     // when it started, on the Client's Clock (default: the system's)
	Duration time.Duration // how long it took, on the Client's Clock; for OpNode, the node's round trip, in real time
	Attempts int           // OpAcquire: attempts made on the nodes; 0 for a lock handed over by another goroutine of the Client (see WithHandOff)
	Err      error         // nil on success; for OpNode, the node's error

	// OpRelease and OpLost: how long the lock was held, from the return of
	// its acquire (or hand-over) to the start of its release, or its loss.
	Held time.Duration

	// OpNode only: which node, for which operation (OpAcquire, OpExtend or
	// OpRelease), and what it answered.
	Node    int
	Addr    string
	NodeOp  Op
	Granted bool // the node holds the lock after the call
}

// WithObserver adds o to where the Client reports its operations, for
// metrics and tracing. It may be given several times (otelredlock's and
// one's own, say): each Observer is told every event, in the order the
// options were given. It must not be nil. Default: none.
func WithObserver(o Observer) Option {
	return clientOption(func(c *config) error {
		if isNil(o) {
			return engine.Invalid("observer is nil")
		}
		if c.observer == nil {
			c.observer = o
		} else {
			c.observer = observers{c.observer, o}
		}
		return nil
	})
}

// observers tells each of its Observers in turn.
type observers []Observer

func (os observers) Observe(ctx context.Context, e Event) {
	for _, o := range os {
		o.Observe(ctx, e)
	}
}

// observe reports e, if anyone listens.
func (c *Client) observe(ctx context.Context, e Event) {
	if c.cfg.observer != nil {
		c.cfg.observer.Observe(ctx, e)
	}
}

// observeNodes reports each node's part in one fan-out of op.
func (c *Client) observeNodes(ctx context.Context, op Op, k kind, start time.Time, t engine.Tally) {
	if c.cfg.observer == nil {
		return
	}
	errs := map[int]error{}
	for _, err := range t.Errs {
		if ne, ok := err.(*NodeError); ok {
			errs[ne.Node] = ne.Err
		}
	}
	for i, a := range t.Answers {
		if a == engine.Unanswered {
			continue
		}
		c.observe(ctx, Event{Op: OpNode, Kind: k.name(), Key: k.keys()[0], Start: start, Duration: t.Took[i],
			Err: errs[i], Node: i, Addr: c.nodes[i].Addr, NodeOp: op, Granted: a == engine.Holds})
	}
}

// observed runs an acquire of k, which counts its attempts on the nodes,
// under the context the Observer's Start returned, and reports it to the
// Observer, if any.
func (c *Client) observed(ctx context.Context, k kind, acquire func(ctx context.Context, attempts *int) (*Lock, error)) (*Lock, error) {
	attempts := 0
	if c.cfg.observer == nil {
		return acquire(ctx, &attempts)
	}
	e := Event{Op: OpAcquire, Kind: k.name(), Key: k.keys()[0], Start: c.cfg.clock.Now()}
	ctx = c.start(ctx, e)
	lock, err := acquire(ctx, &attempts)
	e.Duration, e.Attempts, e.Err = c.cfg.clock.Now().Sub(e.Start), attempts, err
	c.observe(ctx, e)
	return lock, err
}

// startOp tells the Observer that op of l starts, and returns the context
// the op runs under (see Starter).
func (l *Lock) startOp(ctx context.Context, op Op) context.Context {
	if l.client.cfg.observer == nil {
		return ctx
	}
	return l.client.start(ctx, Event{Op: op, Kind: l.kind.name(), Key: l.key, Start: l.client.cfg.clock.Now()})
}

// observeOp reports an extend or release of l that started at start; for
// a release, how long the lock was held.
func (l *Lock) observeOp(ctx context.Context, op Op, start time.Time, err error) {
	if l.client.cfg.observer == nil {
		return
	}
	e := Event{Op: op, Kind: l.kind.name(), Key: l.key, Start: start, Duration: l.client.cfg.clock.Now().Sub(start), Err: err}
	if op == OpRelease {
		e.Held = start.Sub(l.acquired)
	}
	l.client.observe(ctx, e)
}

// A Starter is an Observer that is also told when an acquire (Acquire,
// TryAcquire, AcquireAll, Do), an Extend or a Release starts, with an
// Event that has its Op, Kind, Key and Start. The context it returns is
// the one the operation runs under, its calls to the nodes included, and
// the one its outcome is then given to Observe with: a tracer's span
// started there is the parent of the Redis client's own spans
// (otelredlock does this). A renewal is not started this way.
type Starter interface {
	Observer
	Start(ctx context.Context, e Event) context.Context
}

// start tells the Observer that an operation starts, when it wants to
// know, and returns the context the operation runs under.
func (c *Client) start(ctx context.Context, e Event) context.Context {
	if s, ok := c.cfg.observer.(Starter); ok {
		return s.Start(ctx, e)
	}
	return ctx
}

// Start tells each Observer that is a Starter, in turn, each given the
// context the one before returned.
func (os observers) Start(ctx context.Context, e Event) context.Context {
	for _, o := range os {
		if s, ok := o.(Starter); ok {
			ctx = s.Start(ctx, e)
		}
	}
	return ctx
}

// news returns the errors of errs (each a node's *NodeError, or not) that
// are news: of a node whose failure has not been told since it last
// answered; and marks those told.
func (c *Client) news(errs []error) []error {
	var out []error
	for _, err := range errs {
		var ne *NodeError
		if errors.As(err, &ne) && c.e.Told(ne.Node) {
			continue
		}
		out = append(out, err)
	}
	return out
}

// degraded tells, once per node until it answers again, that a lock of
// kind k was granted or kept (t) without nodes that failed, and, for a lock
// l kept (nil at its acquire), once per node until it holds l again,
// without nodes that answered that they no longer hold it (see OpDegraded).
// A node that had lost the key and where the extend took it again is
// told of too (OpDegraded: the node lost a key it should have kept), but
// the lock is held there now, and the warning says so, not "held
// without". It logs at Warn at once and returns the telling of the
// Observer, to be called once no lock's op is held.
func (c *Client) degraded(ctx context.Context, k kind, t engine.Tally, l *Lock) (tell func()) {
	news := c.news(t.Errs)
	var retaken []error
	if l != nil {
		lost, never, again := l.goneNews(c, t)
		news, retaken = append(news, lost...), again
		if len(never) > 0 {
			// Contention, not a fault: another holder's key (an attempt
			// that lost, a release not landed yet) sat there when the lock
			// was won, and still does.
			c.cfg.logger.DebugContext(ctx, "redlock: a lock is held without nodes where it was never taken; its extends take the key there once it is free",
				"key", k.keys()[0], "kind", k.name(), "confirmed", t.Yes, "nodes", len(c.nodes), "err", errors.Join(never...))
		}
	}
	if len(retaken) > 0 {
		c.cfg.logger.WarnContext(ctx, "redlock: a node had lost a lock's key (it expired, was evicted, or the node restarted empty); the extend took it there again",
			"key", k.keys()[0], "kind", k.name(), "confirmed", t.Yes, "nodes", len(c.nodes), "err", errors.Join(retaken...))
	}
	if len(news) > 0 {
		c.cfg.logger.WarnContext(ctx, "redlock: a lock is held without some nodes; it survives fewer failures until they answer again",
			"key", k.keys()[0], "kind", k.name(), "confirmed", t.Yes, "nodes", len(c.nodes), "err", errors.Join(news...))
	}
	news = append(news, retaken...)
	if len(news) == 0 {
		return func() {}
	}
	return func() {
		now := c.cfg.clock.Now()
		for _, err := range news {
			e := Event{Op: OpDegraded, Kind: k.name(), Key: k.keys()[0], Start: now, Err: err}
			var ne *NodeError
			if errors.As(err, &ne) {
				e.Node, e.Addr = ne.Node, ne.Addr
			}
			c.observe(ctx, e)
		}
	}
}

// Why a node that answers an extend does not count, or counts anew: the
// lock was never taken there (it was won on a quorum while the node held
// another's key, and the key is not free yet, or the kind's extend does
// not take a free key: see docs/algorithm.md, "Extend"), or the node held
// it and no longer does.
var (
	errNeverTakenThere = errors.New("the lock was never taken on the node: when it was acquired, the node held the key for another holder, and the key is not free for this lock yet")
	errLostThere       = errors.New("the node held the lock and no longer does: its key expired, was evicted, or the node restarted empty")
	errRetakenThere    = errors.New("the node held the lock and had lost it (its key expired, was evicted, or the node restarted empty); the extend took the key there again")
)

// heldOn returns, by node, whether t answered that it holds the lock.
func heldOn(t engine.Tally) []bool {
	had := make([]bool, len(t.Answers))
	for i, a := range t.Answers {
		had[i] = a == engine.Holds
	}
	return had
}

// goneNews returns, for each node that answered t without l's token, or
// took it again after losing it, and has not been told of since it last
// held it, an error to tell: in lost, the nodes that held the lock and
// lost it (OpDegraded); in never, those where it was never taken, which
// tell of contention rather than of a node's fault; in retaken, those
// that had lost it and hold it again (OpDegraded). It notes the nodes
// that hold it now.
func (l *Lock) goneNews(c *Client, t engine.Tally) (lost, never, retaken []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.had == nil {
		l.had = make([]bool, len(t.Answers))
	}
	for i, ans := range t.Answers {
		switch {
		case ans == engine.Holds:
			if l.holdsAt(&t, i) {
				retaken = append(retaken, c.e.NodeError(i, errRetakenThere))
			}
		case ans == engine.HoldsNot:
			if l.gone == nil {
				l.gone = make([]bool, len(t.Answers))
			}
			if l.gone[i] {
				continue
			}
			l.gone[i] = true
			if l.had[i] {
				lost = append(lost, c.e.NodeError(i, errLostThere))
			} else {
				never = append(never, c.e.NodeError(i, errNeverTakenThere))
			}
		}
	}
	return lost, never, retaken
}

// holdsAt notes that node i, in t, holds l's token, and reports whether it
// took it again after it had lost it. l.mu is held.
func (l *Lock) holdsAt(t *engine.Tally, i int) (retaken bool) {
	retaken = t.TakenAt(i) && l.had[i]
	l.had[i] = true
	if l.gone != nil {
		l.gone[i] = false
	}
	return retaken
}
