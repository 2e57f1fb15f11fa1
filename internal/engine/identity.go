package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/internal/identity"
)

// Two node clients that reach one server (localhost:6379 and
// 127.0.0.1:6379, or ClusterClients of one cluster) would let one server
// count twice towards a quorum. New does not contact the nodes, so each
// node's server is identified on first contact, alongside the operation's
// own call, and a reply counts only once its server is. Until every node
// is, an operation waits for every node not known to be failing, so the
// first Acquire sees every reachable server before it grants a lock. Two
// nodes on one server make every later acquire fail (ErrMisconfigured). A
// node first reached after a lock was granted may share a server with
// another: that lock had a quorum of distinct servers, still a majority.

// identities is what a Client knows of its nodes' servers.
type identities struct {
	all    atomic.Bool           // every node is identified
	broken atomic.Pointer[error] // set once two nodes are found on one server
	// refused: by node, why its replies do not count, when its server is
	// one that can not hold a lock (a replica: see refusal)
	refused []atomic.Pointer[error]

	mu    sync.Mutex
	nodes []serverOf // by node
}

type serverOf struct {
	known   bool
	ids     []string       // the IDs that name the node's server(s)
	how     string         // how it was identified, for messages
	facts   identity.Facts // what its INFO told of its configuration
	pending chan struct{}  // non-nil while an identification runs; closed when it ends
	lastErr error          // why the last identification failed
	checked time.Time      // when its server was last identified
}

func (ids *identities) init(n int) {
	ids.nodes = make([]serverOf, n)
	ids.refused = make([]atomic.Pointer[error], n)
}

// Refused returns the error of a Client found to reach one server through
// two nodes, or nil.
func (c *Engine) Refused() error {
	if p := c.idents.broken.Load(); p != nil {
		return *p
	}
	return nil
}

// startIdentifying starts identifying every node that is not skipped, not
// identified and not being identified, each within deadline.
func (c *Engine) startIdentifying(skip []bool, deadline time.Time) {
	c.idents.mu.Lock()
	defer c.idents.mu.Unlock()
	for i := range c.idents.nodes {
		id := &c.idents.nodes[i]
		if id.known || id.pending != nil || skip != nil && skip[i] {
			continue
		}
		id.pending = make(chan struct{})
		go c.identifyNode(i, deadline, id.pending)
	}
}

// identifyNode identifies node i's server, refuses the Client when it is
// another node's, refuses the node when it is a replica, and warns when it
// may lose locks (an evicting memory policy).
func (c *Engine) identifyNode(i int, deadline time.Time, done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	ids, how, facts, err := identity.ServerIDs(ctx, c.nodes[i].IO.T)

	var tell func() // the Observer is told once the lock is let go: it may call the Client
	defer func() {
		if tell != nil {
			tell()
		}
	}()
	c.idents.mu.Lock()
	defer c.idents.mu.Unlock()
	id := &c.idents.nodes[i]
	id.pending = nil
	if err != nil {
		id.lastErr = err // tried again at the node's next call
		return
	}
	first := !id.known
	id.known, id.ids, id.how, id.facts, id.checked = true, ids, how, facts, realTime.Now()
	tell = c.judgeServer(i, facts, first)
	all := true
	for j := range c.idents.nodes {
		other := &c.idents.nodes[j]
		all = all && other.known
		if j == i || !other.known || !identity.Overlap(ids, other.ids) || c.idents.broken.Load() != nil {
			continue
		}
		a, b := min(i, j), max(i, j)
		err := c.NodeError(b, &Misconfiguration{
			Err:  fmt.Errorf("reaches the same server as node %d (%s): %s", a, c.nodes[a].Addr, how),
			Hint: "a configuration error: each node must be a different, independent Redis master",
		})
		c.idents.broken.Store(&err)
		c.cfg.Logger.Error("redlock: two nodes reach the same server; every acquire is refused", "err", err)
	}
	c.idents.all.Store(all)
}

// awaitIdentity waits until node i is identified, or its identification
// failed, or deadline passed. It returns nil once the node is identified.
func (c *Engine) awaitIdentity(i int, deadline time.Time) error {
	c.idents.mu.Lock()
	id := c.idents.nodes[i]
	c.idents.mu.Unlock()
	if id.known {
		return nil
	}
	if id.pending != nil {
		t := realTime.NewTimer(realTime.Until(deadline))
		select {
		case <-id.pending:
		case <-t.Chan():
		}
		t.Stop()
		c.idents.mu.Lock()
		id = c.idents.nodes[i]
		c.idents.mu.Unlock()
		if id.known {
			return nil
		}
	}
	if id.lastErr != nil {
		return fmt.Errorf("%w: %w", errNotIdentified, id.lastErr)
	}
	return errNotIdentified
}

// errNotIdentified is the failure of a node that answered before its
// server could be identified: its answer cannot count.
var errNotIdentified = errors.New("its server could not be identified yet (INFO), so its answer does not count")

// refusal is why a node on this server can not count towards a lock: a
// replica takes no lasting write of its own (replication overwrites it)
// and may copy another node; nil for a master, or a server that did not say.
func refusal(f identity.Facts) error {
	if f.Role == "" || f.Role == "master" {
		return nil
	}
	of := ""
	if f.Master != "" {
		of = " of " + f.Master
	}
	return &Misconfiguration{
		Err:  fmt.Errorf("the node is a replica%s (INFO role:%s)", of, f.Role),
		Hint: "a configuration error: give redlock masters only, each independent of the others",
	}
}

// judgeServer acts on what node i's INFO told (facts), the first time it
// was read when first: a replica's replies are refused (and it is checked
// again from time to time for a promotion: see refusedNode); an evicting
// memory policy is reported once, to the logger and the Observer; a server
// without the append-only file is noted at Debug, once. Called with
// c.idents.mu held; it returns what to tell the Observer after (or nil).
func (c *Engine) judgeServer(i int, facts identity.Facts, first bool) (tell func()) {
	addr := c.nodes[i].Addr
	if err := refusal(facts); err != nil {
		if c.idents.refused[i].Swap(&err) == nil {
			c.cfg.Logger.Warn("redlock: a node is a replica; it does not count towards any lock until it is a master",
				"node", i, "addr", addr, "err", err)
		}
	} else {
		c.idents.refused[i].Store(nil)
	}
	if !first {
		return nil
	}
	if strings.HasPrefix(facts.Denied, "NOPERM") || strings.HasPrefix(facts.Denied, "ERR unknown command") {
		// An ACL user without INFO (a missing password shows in its calls).
		c.cfg.Logger.Warn("redlock: a node does not answer INFO; whether it is a replica or evicts keys is not checked",
			"node", i, "addr", addr, "err", facts.Denied)
	}
	if facts.AOF == "0" {
		c.cfg.Logger.Debug("redlock: a node keeps no append-only file; after a crash it must stay down longer than the largest ttl (docs/safety.md)",
			"node", i, "addr", addr)
	}
	if !facts.Evicts() {
		return nil
	}
	err := &Misconfiguration{
		Err:  fmt.Errorf("maxmemory %d with maxmemory-policy %s: the node evicts keys with a time to live under memory pressure, lock keys among them", facts.Maxmemory, facts.Policy),
		Hint: "a configuration error: another client can take a lock the node evicted while it is held; set maxmemory-policy noeviction (or maxmemory 0)",
	}
	c.cfg.Logger.Warn("redlock: a node may evict lock keys", "node", i, "addr", addr, "err", err)
	return func() {
		c.cfg.Misconfigured(context.Background(), i, c.NodeError(i, err))
	}
}

// refusedNode returns why node i's replies do not count (an error matching
// ErrMisconfigured), or nil. A refused node's server is read again at most
// once a second, in the background, so that a promoted replica counts.
func (c *Engine) refusedNode(i int) error {
	p := c.idents.refused[i].Load()
	if p == nil {
		return nil
	}
	c.idents.mu.Lock()
	id := &c.idents.nodes[i]
	if id.pending == nil && realTime.Since(id.checked) >= recheckEvery {
		id.pending = make(chan struct{})
		id.checked = realTime.Now()
		go c.identifyNode(i, id.checked.Add(recheckEvery), id.pending)
	}
	c.idents.mu.Unlock()
	return *p
}

// recheckEvery is how often a refused node's server is read again.
const recheckEvery = time.Second
