package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/reply"
	"github.com/quorumlock/redlock/internal/rtt"
	"github.com/quorumlock/redlock/transport"
)

// Node is one Redis master.
type Node struct {
	IO   *nodeio.Node   // sends its calls (through its pipe, with batching)
	Info transport.Info // what its client is
	Addr string         // "" when the client does not reveal it
}

// Terms are what a lease of ttl means on a Client's nodes when an
// operation starts: how long each node is waited for, and the drift.
type Terms struct {
	TTL     time.Duration
	Timeout time.Duration // per node: see Engine.nodeTimeout
	// Base is the node timeout before any round trip is known (see
	// baseTimeout): how long a first contact waits for every node
	Base  time.Duration
	Drift time.Duration // see driftFor
}

// TermsFor returns the terms of a lease of ttl, or an error matching
// ErrInvalidArgument when ttl is not positive, not larger than its drift
// allowance, or too short for the replica ack timeout.
func (c *Engine) TermsFor(ttl time.Duration) (Terms, error) {
	t := Terms{TTL: ttl, Drift: DriftFor(ttl, c.cfg.DriftFactor)}
	switch {
	case ttl <= 0:
		return t, Invalid("ttl %v must be positive", ttl)
	case ttl <= t.Drift:
		return t, Invalid("ttl %v is not larger than its drift allowance %v", ttl, t.Drift)
	case c.cfg.ReplicaAck.Replicas > 0 && c.cfg.ReplicaAck.Timeout >= c.baseTimeout(ttl):
		return t, Invalid("replica ack timeout %v is not shorter than the node timeout %v for ttl %v: give WithNodeTimeout, or a longer ttl", c.cfg.ReplicaAck.Timeout, c.baseTimeout(ttl), ttl)
	}
	return t.Now(c), nil
}

// Now returns the terms for an operation starting now: with the node
// timeout as the nodes' round trips make it now (see Engine.nodeTimeout).
func (t Terms) Now(c *Engine) Terms {
	t.Timeout, t.Base = c.nodeTimeout(t.TTL, t.Drift), c.baseTimeout(t.TTL)
	return t
}

// Within returns the terms with the node timeout cut to d, if shorter.
func (t Terms) Within(d time.Duration) Terms {
	t.Timeout = min(t.Timeout, d)
	return t
}

// A derived node timeout is a tenth of the ttl, within what a healthy node
// on a loaded machine needs and a hung one costs.
const (
	nodeTimeoutFraction   = 10
	MaxDerivedNodeTimeout = time.Second
)

// MinDerivedNodeTimeout is the least a derived node timeout is; the tests
// raise it (export_test.go), as a loaded machine delays healthy replies.
var MinDerivedNodeTimeout = 50 * time.Millisecond

// MaxAdaptedTimeout caps how far the round trips seen lengthen the node
// timeout, as TCP caps its retransmission timeout (RFC 6298), so that a
// "forever" lock's first contact with hung nodes does not wait for ever.
const MaxAdaptedTimeout = time.Minute

// baseTimeout is the node timeout of a lease of ttl before any round trip
// is known: WithNodeTimeout's, or a tenth of the ttl within the bounds.
func (c *Engine) baseTimeout(ttl time.Duration) time.Duration {
	if c.cfg.NodeTimeout > 0 {
		return c.cfg.NodeTimeout
	}
	return min(max(ttl/nodeTimeoutFraction, MinDerivedNodeTimeout), MaxDerivedNodeTimeout)
}

// nodeTimeout is how long an operation on a lease of ttl (with drift)
// waits for each node's reply: WithNodeTimeout's as given, or else the
// base timeout lengthened to what the quorum-th fastest node's round trips
// ask for (rtt.Timeout), at most two thirds of ttl less drift (an
// operation that takes all of it leaves the lock a third) and
// maxAdaptedTimeout; a node nothing is known of yet counts as needing that
// much. The validity arithmetic does not depend on it. See
// docs/algorithm.md, "The node timeout follows the round trips".
func (c *Engine) nodeTimeout(ttl, drift time.Duration) time.Duration {
	base := c.baseTimeout(ttl)
	if c.cfg.NodeTimeout > 0 {
		return base
	}
	v := ttl - drift
	ceiling := max(base, min(2*(v/3), MaxAdaptedTimeout))
	return rtt.Timeout(c.rtts, c.quorum, base, ceiling, ceiling)
}

// RenewMargin is renewMargin for a renewed lock on these terms: how long
// before its Until it is declared lost unless renewed. It counts the base
// timeout, not the one the round trips lengthened: a slower network must
// not shorten the time left to renew.
func (t Terms) RenewMargin() time.Duration {
	return RenewMargin(t.TTL, t.Base, t.Drift)
}

// NodeError returns node i's failure err as the API's error.
func (c *Engine) NodeError(i int, err error) error { return c.cfg.NodeError(i, err) }

// What a node's replies tell of it.

// Why a call ended, when not for anything its node did (and
// nodeio.ErrNotSent: its operation ended before it was sent).
var (
	// ErrNodeTimeout is the cause of an operation's context that its node
	// timeout ended (rather than the caller's context).
	ErrNodeTimeout = errors.New("node timeout")
	// errCutByCaller: the call was cut when its caller's context ended,
	// before the node timeout.
	ErrCutByCaller = errors.New("cut by the caller's context")
)

// NoteReply records what node i's call, which ended with err after took,
// tells of the node: a reply within the node timeout is a round-trip
// sample (see nodeTimeout), a later one lengthens its next timeout, and
// either clears its failing mark; no reply in time marks it failing
// (Engine.failing) and lengthens its next timeout. A node that fails at
// once (refused, reset) costs nothing to wait for and is not marked. A
// call the caller's context ended tells nothing: another goroutine's tiny
// deadline must not make a healthy node look failing.
func (c *Engine) NoteReply(i int, err error, took, timeout time.Duration) {
	h := &c.failing[i]
	switch {
	case errors.Is(err, nodeio.ErrNotSent) || errors.Is(err, ErrCutByCaller) || errors.Is(err, context.Canceled):
		return
	case err == nil || reply.IsReply(err):
		c.noteAnswer(i, took, timeout)
	case reply.TimedOut(err):
		c.rtts[i].TimedOut(timeout)
		last := err // allocated only here, not for every reply
		h.Store(&last)
		return
	}
	if h.Load() != nil {
		h.Store(nil)
	}
}

// noteAnswer records what node i's reply after took tells of its round
// trips: a sample within the node timeout, a longer next timeout after it.
func (c *Engine) noteAnswer(i int, took, timeout time.Duration) {
	if took > timeout {
		// Answered after the node timeout: the next wait is longer, but
		// not this long (a node frozen for a while answers late once,
		// and is not that far away).
		c.rtts[i].TimedOut(timeout)
	} else {
		c.rtts[i].Sample(took)
	}
}

// noteMisconfigured warns, through the logger and the Observer, when node
// i's call failed with an error that retrying cannot cure: once, until it
// answers properly again. It sees every reply, even after the outcome was
// known, so that a misconfigured minority is reported at once. A reply
// that counts (err nil: its server identified) makes the node's next
// failure news again; one from a server not identified yet does not.
func (c *Engine) noteMisconfigured(ctx context.Context, i int, held bool, err error) {
	if err == nil {
		if c.told[i].Load() {
			c.told[i].Store(false)
		}
		// Only a reply that holds the lock proves the node takes writes:
		// a replica answers 0, not an error, to an extend that finds none.
		if held && c.misconfigured[i].Load() {
			c.misconfigured[i].Store(false)
		}
		return
	}
	if err = misconfigured(err); !errors.Is(err, ErrMisconfigured) || c.misconfigured[i].Swap(true) {
		return
	}
	c.cfg.Logger.WarnContext(ctx, "redlock: a node is misconfigured; locks need a quorum of the other nodes until it is fixed",
		"node", i, "addr", c.nodes[i].Addr, "err", err)
	// On a goroutine of its own: this runs on the goroutine that sends the
	// node's calls, which a slow Observer must not hold up.
	go c.cfg.Misconfigured(ctx, i, c.NodeError(i, err))
}

func noReply(timeout time.Duration, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no reply within %v: %w", timeout, err)
	}
	return fmt.Errorf("no reply: %w", err)
}

// Inflight counts the node calls a Client has sent and not yet seen
// return, those left to finish in the background included. The channel
// Drain waits on is made only when one waits.
type Inflight struct {
	n    atomic.Int64
	mu   sync.Mutex
	idle chan struct{} // closed when n drops to zero; nil when none waits
}

func (f *Inflight) Add() { f.n.Add(1) }

func (f *Inflight) Done() {
	if f.n.Add(-1) != 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.idle != nil && f.n.Load() == 0 {
		close(f.idle)
		f.idle = nil
	}
}

// Wait returns a channel closed once no call is in flight.
func (f *Inflight) Wait() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n.Load() == 0 {
		return closedChan
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	return f.idle
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// The sentinels the engine's errors match; the API names them
// (ErrMisconfigured, ErrInvalidArgument).
var (
	ErrMisconfigured   = errors.New("redlock: misconfigured")
	ErrInvalidArgument = errors.New("redlock: invalid argument")
)

// Misconfiguration is a node's error that retrying cannot cure, with what
// to do about it; it matches ErrMisconfigured.
type Misconfiguration struct {
	Err  error
	Hint string
}

func (e *Misconfiguration) Error() string        { return reply.Tidy(e.Err.Error()) + " (" + e.Hint + ")" }
func (e *Misconfiguration) Unwrap() error        { return e.Err }
func (e *Misconfiguration) Is(target error) bool { return target == ErrMisconfigured }

// misconfigured returns err as a *misconfiguration when it is an error that
// retrying cannot cure (see reply.Hint), and err otherwise.
func misconfigured(err error) error {
	if hint := reply.Hint(err); hint != "" {
		return &Misconfiguration{Err: err, Hint: hint}
	}
	return err
}

func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// ReadTimeout is how long a read of every node (Inspect, Election.Leader)
// waits for each: WithNodeTimeout, or, with no ttl to derive it from, the
// longest derived timeout or what the nodes' round trips ask for (see
// nodeTimeout), up to a minute.
func (c *Engine) ReadTimeout() time.Duration {
	if c.cfg.NodeTimeout > 0 {
		return c.cfg.NodeTimeout
	}
	return rtt.Timeout(c.rtts, c.quorum, MaxDerivedNodeTimeout, MaxAdaptedTimeout, MaxDerivedNodeTimeout)
}
