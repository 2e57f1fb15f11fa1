package redlock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Two node clients that reach one server (localhost:6379 and
// 127.0.0.1:6379), or two ClusterClients seeded with masters of one
// cluster, would let one server count twice towards a quorum. New cannot
// tell (it does not contact the nodes), so each node's server is
// identified on first contact, at the same time as the operation's own
// call there: a server by its run_id (and its Cluster node ID in cluster
// mode), a cluster by the IDs of its nodes. A node's reply counts only once
// its server is identified. Until every node is, an operation waits for
// every node not known to be failing, so that the first Acquire sees every
// reachable server before it grants a lock. A Client that finds two nodes
// on one server refuses every later acquire with ErrMisconfigured.
//
// A node first reached after a lock was granted (it was down) may turn out
// to share a server with another node: that lock had a quorum of replies
// from distinct servers, which is still a majority of the real servers.

// identities is what a Client knows of its nodes' servers.
type identities struct {
	all    atomic.Bool           // every node is identified
	broken atomic.Pointer[error] // set once two nodes are found on one server

	mu    sync.Mutex
	nodes []identity // by node
}

type identity struct {
	known   bool
	ids     []string      // the IDs that name the node's server(s)
	how     string        // how it was identified, for messages
	pending chan struct{} // non-nil while an identification runs; closed when it ends
	lastErr error         // why the last identification failed
}

func (ids *identities) init(n int) {
	ids.nodes = make([]identity, n)
	ids.all.Store(n == 1) // one node cannot be counted twice
}

// refused returns the error of a Client found to reach one server through
// two nodes, or nil.
func (c *Client) refused() error {
	if p := c.idents.broken.Load(); p != nil {
		return *p
	}
	return nil
}

// startIdentifying starts identifying every node that is not skipped, not
// identified and not being identified, each within deadline.
func (c *Client) startIdentifying(skip []bool, deadline time.Time) {
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

// identifyNode identifies node i's server, and refuses the Client when it
// is another node's.
func (c *Client) identifyNode(i int, deadline time.Time, done chan struct{}) {
	defer close(done)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	ids, how, err := serverIDs(ctx, c.nodes[i].rdb, c.nodes[i].addr)

	c.idents.mu.Lock()
	defer c.idents.mu.Unlock()
	id := &c.idents.nodes[i]
	id.pending = nil
	if err != nil {
		id.lastErr = err // tried again at the node's next call
		return
	}
	id.known, id.ids, id.how = true, ids, how
	all := true
	for j := range c.idents.nodes {
		other := &c.idents.nodes[j]
		all = all && other.known
		if j == i || !other.known || !overlap(ids, other.ids) || c.idents.broken.Load() != nil {
			continue
		}
		a, b := min(i, j), max(i, j)
		err := c.nodeError(b, &misconfiguration{
			err:  fmt.Errorf("reaches the same server as node %d (%s): %s", a, c.nodes[a].addr, how),
			hint: "a configuration error: each node must be a different, independent Redis master",
		})
		c.idents.broken.Store(&err)
		c.cfg.logger.Error("redlock: two nodes reach the same server; every acquire is refused", "err", err)
	}
	c.idents.all.Store(all)
}

// awaitIdentity waits until node i is identified, or its identification
// failed, or deadline passed. It returns nil once the node is identified.
func (c *Client) awaitIdentity(i int, deadline time.Time) error {
	c.idents.mu.Lock()
	id := c.idents.nodes[i]
	c.idents.mu.Unlock()
	if id.known {
		return nil
	}
	if id.pending != nil {
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-id.pending:
		case <-t.C:
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

// serverIDs returns the IDs that name rdb's server: for a plain client its
// run_id and, in cluster mode, its Cluster node ID; for a ClusterClient the
// node IDs of its cluster. A server that will not tell (a server without
// run_id, or an ACL user without INFO) is named by its address.
func serverIDs(ctx context.Context, rdb redis.UniversalClient, addr string) (ids []string, how string, err error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		nodes, err := cc.ClusterNodes(ctx).Result()
		if err != nil {
			return nil, "", err
		}
		for line := range strings.Lines(nodes) {
			if id, _, _ := strings.Cut(strings.TrimSpace(line), " "); id != "" {
				ids = append(ids, "node:"+id)
			}
		}
		if len(ids) == 0 {
			return nil, "", errors.New("CLUSTER NODES named no node")
		}
		return ids, "the same cluster", nil
	}
	// INFO without arguments: its default sections hold run_id and
	// cluster_enabled, and Redis before 7 takes at most one section.
	info, err := rdb.Info(ctx).Result()
	if err != nil {
		var re redis.Error
		if errors.As(err, &re) && !transient(re) {
			// The server answered but will not tell: name it by its
			// address. Its own calls report a misconfiguration if any.
			return addrID(addr), "address " + addr, nil
		}
		return nil, "", err // no answer, or a passing state: tried again later
	}
	var runID, clusterOn string
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, _ := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		switch k {
		case "run_id":
			runID = v
		case "cluster_enabled":
			clusterOn = v
		}
	}
	if runID == "" {
		return addrID(addr), "address " + addr, nil
	}
	ids = []string{"run:" + runID}
	if clusterOn == "1" {
		if id, err := rdb.Do(ctx, "CLUSTER", "MYID").Text(); err == nil {
			ids = append(ids, "node:"+id)
		}
	}
	return ids, "run_id " + runID, nil
}

// transient reports whether a server's error reply is a passing state.
func transient(err redis.Error) bool {
	prefix, _, _ := strings.Cut(err.Error(), " ")
	switch prefix {
	case "LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN":
		return true
	}
	return false
}

// addrID names a server by its address, when it will not tell its run_id;
// a client that does not reveal its address is named by nothing.
func addrID(addr string) []string {
	if addr == "" {
		return nil
	}
	return []string{"addr:" + addr}
}

func overlap(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}
