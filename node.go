package redlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/reply"
	"github.com/quorumlock/redlock/internal/rtt"
)

// node is one Redis master.
type node struct {
	rdb     redis.UniversalClient
	addr    string   // "" when the client does not reveal it
	pipe    *pipe    // nil when batching is off
	scripts *scripts // the scripts it is known to hold
	stand   *standIns
	// inline: the client itself ends a call at its context's deadline
	// (ContextTimeoutEnabled), so a lone node's call may run in the
	// calling goroutine without losing the per-node timeout.
	inline bool
}

// terms are what a lease of ttl means on a Client's nodes, worked out when
// an operation starts: how long each node is waited for and how much is
// allowed for clock drift.
type terms struct {
	ttl     time.Duration
	timeout time.Duration // per node: see Client.nodeTimeout
	// base is the node timeout before any round trip is known (see
	// baseTimeout): how long a first contact waits for every node
	base  time.Duration
	drift time.Duration // see driftFor
}

// termsFor returns the terms of a lease of ttl, or an error matching
// ErrInvalidArgument when ttl is not positive or not larger than its drift
// allowance.
func (c *Client) termsFor(ttl time.Duration) (terms, error) {
	t := terms{ttl: ttl, drift: driftFor(ttl, c.cfg.driftFactor)}
	switch {
	case ttl <= 0:
		return t, invalid("ttl %v must be positive", ttl)
	case ttl <= t.drift:
		return t, invalid("ttl %v is not larger than its drift allowance %v", ttl, t.drift)
	case c.cfg.replicaAck.on() && c.cfg.replicaAck.timeout >= c.baseTimeout(ttl):
		return t, invalid("replica ack timeout %v is not shorter than the node timeout %v for ttl %v: give WithNodeTimeout, or a longer ttl", c.cfg.replicaAck.timeout, c.baseTimeout(ttl), ttl)
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

// maxAdaptedTimeout is the most the round trips seen lengthen the node
// timeout to, whatever the ttl: as TCP's retransmission timeout is capped
// at a minute (RFC 6298), so that a "forever" lock's first contact with a
// majority of hung nodes does not wait for ever.
const maxAdaptedTimeout = time.Minute

// baseTimeout is the node timeout of a lease of ttl before any round trip
// is known: WithNodeTimeout's, or a tenth of the ttl, at least
// minDerivedNodeTimeout and at most maxDerivedNodeTimeout.
func (c *Client) baseTimeout(ttl time.Duration) time.Duration {
	if c.cfg.nodeTimeout > 0 {
		return c.cfg.nodeTimeout
	}
	return min(max(ttl/nodeTimeoutFraction, minDerivedNodeTimeout), maxDerivedNodeTimeout)
}

// nodeTimeout is how long an operation on a lease of ttl (with drift)
// waits for each node's reply. WithNodeTimeout's is kept as given.
// Otherwise it is the base timeout (baseTimeout), lengthened to what the
// nodes' round trips ask for: the time the quorum-th fastest node is
// expected to take (see rtt.Timeout: its smoothed round trip plus four
// times the variation, or twice a wait that timed out), but no more than
// two thirds of the validity a lease of ttl has to give (ttl less drift),
// so that an operation that takes all of it still leaves the lock a third
// of that, and no more than maxAdaptedTimeout. A node of which nothing is known yet (no reply, no timeout)
// counts as needing that much: a first contact over a slow network takes
// several round trips (a new connection's greeting, then the call).
// So nodes farther away than the base timeout slow operations down but do
// not stop them, as long as they answer well within the ttl; a minority
// that hangs costs no more than before. The safety arithmetic does not
// change: a lock is valid for its ttl less the time its operation took and
// the drift, whatever the timeout.
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
// before its Until it is declared lost unless renewed.
func (t terms) renewMargin() time.Duration {
	return renewMargin(t.ttl, t.timeout, t.drift)
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

// What a node's replies tell of it.

// Why a call ended, when not for anything its node did.
var (
	// errNodeTimeout is the cause of an operation's context that its node
	// timeout ended (rather than the caller's context).
	errNodeTimeout = errors.New("node timeout")
	// errNotSent: the call was never sent, its operation having ended
	// first (the caller gave up, or its deadline passed while the call
	// waited behind the node's previous one).
	errNotSent = errors.New("not sent")
	// errCutByCaller: the call was cut when its caller's context ended,
	// before the node timeout.
	errCutByCaller = errors.New("cut by the caller's context")
)

func notSent(cause error) error { return fmt.Errorf("%w: %w", errNotSent, cause) }

// noteReply records what node i's call, which ended with err after took,
// tells of the node: a reply within the node timeout is a sample of its
// round trip (see nodeTimeout), a reply after it lengthens its next
// timeout, and either clears its failing mark; no reply within the node
// timeout marks it failing (Client.failing) and lengthens its next
// timeout. Only a node that does not answer is worth not waiting for; one
// that fails at once (refused, reset) costs nothing, and is soon back after
// a restart. A call that the caller's context ended (not sent, cut or
// cancelled) tells nothing of the node, and changes nothing: another
// goroutine's tiny deadline must not make a healthy node look failing.
func (c *Client) noteReply(i int, err error, took, timeout time.Duration) {
	h := &c.failing[i]
	switch {
	case errors.Is(err, errNotSent) || errors.Is(err, errCutByCaller) || errors.Is(err, context.Canceled):
		return
	case err == nil || reply.IsReply(err):
		if err == nil && c.told[i].Load() {
			c.told[i].Store(false) // it answers again: its next failure is news
		}
		if took > timeout {
			// An answer after the node timeout: the node is slower than
			// it was given, and the next wait is longer (not this long:
			// a node that was frozen for a while answers late once, and
			// is not that far away).
			c.rtts[i].TimedOut(timeout)
		} else {
			c.rtts[i].Sample(took)
		}
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

// noteMisconfigured warns, through the logger and the Observer, when node
// i's call failed with an error that retrying cannot cure: once, until the
// node answers properly again. It sees every reply, also those that come
// after the operation's outcome was known, so that a misconfigured minority
// is reported at the first operation.
func (c *Client) noteMisconfigured(ctx context.Context, i int, value int64, err error) {
	if err == nil {
		// Only a reply that holds the lock proves the node takes writes: a
		// replica answers a release or an extend that finds nothing without
		// an error.
		if value > 0 && c.misconfigured[i].Load() {
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
	go c.observe(ctx, Event{Op: OpMisconfigured, Start: time.Now(), Err: c.nodeError(i, err), Node: i, Addr: c.nodes[i].addr})
}

func noReply(timeout time.Duration, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no reply within %v: %w", timeout, err)
	}
	return fmt.Errorf("no reply: %w", err)
}
