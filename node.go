package redlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/reply"
	"github.com/quorumlock/redlock/internal/rtt"
	"github.com/quorumlock/redlock/transport"
)

// node is one Redis master.
type node struct {
	io   *nodeio.Node   // sends its calls (through its pipe, with batching)
	info transport.Info // what its client is
	addr string         // "" when the client does not reveal it
}

// nodeOp is one node's share of an operation (see nodeio.Op).
type nodeOp = nodeio.Op

// terms are what a lease of ttl means on a Client's nodes when an
// operation starts: how long each node is waited for, and the drift.
type terms struct {
	ttl     time.Duration
	timeout time.Duration // per node: see Client.nodeTimeout
	// base is the node timeout before any round trip is known (see
	// baseTimeout): how long a first contact waits for every node
	base  time.Duration
	drift time.Duration // see driftFor
}

// termsFor returns the terms of a lease of ttl, or an error matching
// ErrInvalidArgument when ttl is not positive, not larger than its drift
// allowance, or too short for the replica ack timeout.
func (c *Client) termsFor(ttl time.Duration) (terms, error) {
	t := terms{ttl: ttl, drift: driftFor(ttl, c.cfg.driftFactor)}
	switch {
	case ttl <= 0:
		return t, invalid("ttl %v must be positive", ttl)
	case ttl <= t.drift:
		return t, invalid("ttl %v is not larger than its drift allowance %v", ttl, t.drift)
	case c.cfg.replicaAck.Replicas > 0 && c.cfg.replicaAck.Timeout >= c.baseTimeout(ttl):
		return t, invalid("replica ack timeout %v is not shorter than the node timeout %v for ttl %v: give WithNodeTimeout, or a longer ttl", c.cfg.replicaAck.Timeout, c.baseTimeout(ttl), ttl)
	}
	return t.now(c), nil
}

// now returns the terms for an operation starting now: with the node
// timeout as the nodes' round trips make it now (see Client.nodeTimeout).
func (t terms) now(c *Client) terms {
	t.timeout, t.base = c.nodeTimeout(t.ttl, t.drift), c.baseTimeout(t.ttl)
	return t
}

// within returns the terms with the node timeout cut to d, if shorter.
func (t terms) within(d time.Duration) terms {
	t.timeout = min(t.timeout, d)
	return t
}

// maxAdaptedTimeout caps how far the round trips seen lengthen the node
// timeout, as TCP caps its retransmission timeout (RFC 6298), so that a
// "forever" lock's first contact with hung nodes does not wait for ever.
const maxAdaptedTimeout = time.Minute

// baseTimeout is the node timeout of a lease of ttl before any round trip
// is known: WithNodeTimeout's, or a tenth of the ttl within the bounds.
func (c *Client) baseTimeout(ttl time.Duration) time.Duration {
	if c.cfg.nodeTimeout > 0 {
		return c.cfg.nodeTimeout
	}
	return min(max(ttl/nodeTimeoutFraction, minDerivedNodeTimeout), maxDerivedNodeTimeout)
}

// nodeTimeout is how long an operation on a lease of ttl (with drift)
// waits for each node's reply: WithNodeTimeout's as given, or else the
// base timeout lengthened to what the quorum-th fastest node's round trips
// ask for (rtt.Timeout), at most two thirds of ttl less drift (an
// operation that takes all of it leaves the lock a third) and
// maxAdaptedTimeout; a node nothing is known of yet counts as needing that
// much. The validity arithmetic does not depend on it. See
// docs/algorithm.md, "The node timeout follows the round trips".
func (c *Client) nodeTimeout(ttl, drift time.Duration) time.Duration {
	base := c.baseTimeout(ttl)
	if c.cfg.nodeTimeout > 0 {
		return base
	}
	v := ttl - drift
	ceiling := max(base, min(2*(v/3), maxAdaptedTimeout))
	return rtt.Timeout(c.rtts, c.quorum, base, ceiling, ceiling)
}

// renewMargin is renewMargin for a renewed lock on these terms: how long
// before its Until it is declared lost unless renewed. It counts the base
// timeout, not the one the round trips lengthened: a slower network must
// not shorten the time left to renew.
func (t terms) renewMargin() time.Duration {
	return renewMargin(t.ttl, t.base, t.drift)
}

func (c *Client) nodeError(i int, err error) error {
	return &NodeError{Node: i, Addr: c.nodes[i].addr, Err: err}
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

func sameNode(a, b node) bool {
	if a.addr != "" && a.addr == b.addr {
		return true
	}
	return a.info.ID != nil && a.info.ID == b.info.ID
}

func (n node) describe() string {
	if n.addr == "" {
		return "same client"
	}
	return n.addr
}

// What a node's replies tell of it.

// Why a call ended, when not for anything its node did (and
// nodeio.ErrNotSent: its operation ended before it was sent).
var (
	// errNodeTimeout is the cause of an operation's context that its node
	// timeout ended (rather than the caller's context).
	errNodeTimeout = errors.New("node timeout")
	// errCutByCaller: the call was cut when its caller's context ended,
	// before the node timeout.
	errCutByCaller = errors.New("cut by the caller's context")
)

// noteReply records what node i's call, which ended with err after took,
// tells of the node: a reply within the node timeout is a round-trip
// sample (see nodeTimeout), a later one lengthens its next timeout, and
// either clears its failing mark; no reply in time marks it failing
// (Client.failing) and lengthens its next timeout. A node that fails at
// once (refused, reset) costs nothing to wait for and is not marked. A
// call the caller's context ended tells nothing: another goroutine's tiny
// deadline must not make a healthy node look failing.
func (c *Client) noteReply(i int, err error, took, timeout time.Duration) {
	h := &c.failing[i]
	switch {
	case errors.Is(err, nodeio.ErrNotSent) || errors.Is(err, errCutByCaller) || errors.Is(err, context.Canceled):
		return
	case err == nil || reply.IsReply(err):
		c.noteAnswer(i, err, took, timeout)
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

// noteAnswer records what node i's reply (err: nil, or an error reply)
// after took tells of its round trips: a sample within the node timeout,
// a longer next timeout after it; a node that answers again after it was
// told of as failing is news again when it next fails.
func (c *Client) noteAnswer(i int, err error, took, timeout time.Duration) {
	if err == nil && c.told[i].Load() {
		c.told[i].Store(false) // it answers again: its next failure is news
	}
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
// known, so that a misconfigured minority is reported at once.
func (c *Client) noteMisconfigured(ctx context.Context, i int, held bool, err error) {
	if err == nil {
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
	c.cfg.logger.WarnContext(ctx, "redlock: a node is misconfigured; locks need a quorum of the other nodes until it is fixed",
		"node", i, "addr", c.nodes[i].addr, "err", err)
	// On a goroutine of its own: this runs on the goroutine that sends the
	// node's calls, which a slow Observer must not hold up.
	go c.observe(ctx, Event{Op: OpMisconfigured, Start: c.cfg.clock.Now(), Err: c.nodeError(i, err), Node: i, Addr: c.nodes[i].addr})
}

func noReply(timeout time.Duration, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no reply within %v: %w", timeout, err)
	}
	return fmt.Errorf("no reply: %w", err)
}
