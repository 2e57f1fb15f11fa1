package redlock

import (
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

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

// terms are what a lease of ttl means on a Client's nodes, worked out once
// per operation: how long each node is waited for and how much is allowed
// for clock drift.
type terms struct {
	ttl     time.Duration
	timeout time.Duration // per node: the Client's WithNodeTimeout, or derived from ttl
	drift   time.Duration // see driftFor
}

// termsFor returns the terms of a lease of ttl, or an error matching
// ErrInvalidArgument when ttl is not positive or not larger than its drift
// allowance.
func (c *Client) termsFor(ttl time.Duration) (terms, error) {
	t := terms{ttl: ttl, timeout: c.cfg.nodeTimeout, drift: driftFor(ttl, c.cfg.driftFactor)}
	if t.timeout <= 0 {
		t.timeout = min(max(ttl/nodeTimeoutFraction, minDerivedNodeTimeout), maxDerivedNodeTimeout)
	}
	switch {
	case ttl <= 0:
		return t, invalid("ttl %v must be positive", ttl)
	case ttl <= t.drift:
		return t, invalid("ttl %v is not larger than its drift allowance %v", ttl, t.drift)
	case c.cfg.replicaAck.on() && c.cfg.replicaAck.timeout >= t.timeout:
		return t, invalid("replica ack timeout %v is not shorter than the node timeout %v for ttl %v: give WithNodeTimeout, or a longer ttl", c.cfg.replicaAck.timeout, t.timeout, ttl)
	}
	return t, nil
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
