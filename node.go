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

func (c *Client) nodeTimeout(ttl time.Duration) time.Duration {
	if c.cfg.nodeTimeout > 0 {
		return c.cfg.nodeTimeout
	}
	return min(max(ttl/nodeTimeoutFraction, minDerivedNodeTimeout), maxDerivedNodeTimeout)
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
