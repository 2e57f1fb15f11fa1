package redlock

import (
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/rtt"
)

// node is one Redis master.
type node struct {
	rdb     redis.UniversalClient
	addr    string   // "" when the client does not reveal it
	pipe    *pipe    // nil when batching is off
	scripts *scripts // the scripts it is known to hold
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
