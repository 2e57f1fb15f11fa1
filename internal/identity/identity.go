// Package identity tells which server a node's client reaches, and what
// its INFO says of the settings that decide whether it can keep a lock:
// two nodes on one server, a replica, or an evicting memory policy are
// found at first contact. It knows nothing of locks.
package identity

import (
	"bufio"
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/quorumlock/redlock/internal/reply"
	"github.com/quorumlock/redlock/transport"
)

// ServerIDs returns the IDs that name node's server, and what its INFO
// tells of its configuration: for a plain client its run_id and, in
// cluster mode, its Cluster node ID; for a Cluster client the node IDs of
// its cluster (no facts: it chooses its masters). A server that will not
// tell (no run_id, or an ACL user without INFO) is named by its address.
func ServerIDs(ctx context.Context, node transport.Node) (ids []string, how string, facts Facts, err error) {
	addr := node.Info().Addr
	if node.Info().Cluster {
		if ids, err = clusterIDs(ctx, node); err != nil {
			return nil, "", facts, err
		}
		return ids, "the same cluster", facts, nil
	}
	// INFO without arguments: its default sections hold all we read,
	// and Redis before 7 takes at most one section.
	info, err := do(ctx, node, "info")
	if err != nil {
		if reply.IsReply(err) && !reply.Transient(err) {
			// The server answered but will not tell: name it by its
			// address (its own calls report a misconfiguration, if any).
			facts.Denied = err.Error()
			return addrID(addr), "address " + addr, facts, nil
		}
		return nil, "", facts, err // no answer, or a passing state: tried again later
	}
	runID, clusterOn, facts := readInfo(info)
	if runID == "" {
		return addrID(addr), "address " + addr, facts, nil
	}
	ids = []string{"run:" + runID}
	if clusterOn == "1" {
		if id, err := do(ctx, node, "cluster", "myid"); err == nil {
			ids = append(ids, "node:"+id)
		}
	}
	return ids, "run_id " + runID, facts, nil
}

// do sends one command to node and returns its reply as text.
func do(ctx context.Context, node transport.Node, cmd ...any) (string, error) {
	var r [1]transport.Reply
	node.Do(ctx, []transport.Cmd{cmd}, r[:])
	return reply.Text(r[0])
}

// clusterIDs names a cluster by the IDs of its nodes (CLUSTER NODES).
func clusterIDs(ctx context.Context, node transport.Node) ([]string, error) {
	nodes, err := do(ctx, node, "cluster", "nodes")
	if err != nil {
		return nil, err
	}
	var ids []string
	for line := range strings.Lines(nodes) {
		if id, _, _ := strings.Cut(strings.TrimSpace(line), " "); id != "" {
			ids = append(ids, "node:"+id)
		}
	}
	if len(ids) == 0 {
		return nil, errors.New("CLUSTER NODES named no node")
	}
	return ids, nil
}

// readInfo reads what identifies a server and what its configuration says
// from an INFO reply.
func readInfo(info string) (runID, clusterOn string, facts Facts) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		k, v, _ := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		switch k {
		case "run_id":
			runID = v
		case "cluster_enabled":
			clusterOn = v
		case "role":
			facts.Role = v
		case "master_host":
			facts.Master = v + facts.Master
		case "master_port":
			facts.Master += ":" + v
		case "maxmemory":
			facts.Maxmemory, _ = strconv.ParseInt(v, 10, 64)
		case "maxmemory_policy":
			facts.Policy = v
		case "aof_enabled":
			facts.AOF = v
		}
	}
	return runID, clusterOn, facts
}

// Facts is what a node's INFO tells of the settings that decide whether
// it can keep a lock (docs/safety.md): empty where it does not tell.
type Facts struct {
	Role      string // "master", or "slave" for a replica
	Master    string // a replica's master, host:port
	Maxmemory int64  // bytes; 0: no limit
	Policy    string // maxmemory-policy
	AOF       string // "1" when the append-only file is on
	Denied    string // INFO's error reply, when the server would not tell
}

// Evicts reports whether the server may evict keys that have a time to
// live, as every lock key has (a memory limit with a policy other than
// noeviction): under memory pressure, a held lock's keys may then go.
func (f Facts) Evicts() bool {
	return f.Maxmemory > 0 && f.Policy != "" && f.Policy != "noeviction"
}

// addrID names a server by its address, when it will not tell its run_id;
// a client that does not reveal its address is named by nothing.
func addrID(addr string) []string {
	if addr == "" {
		return nil
	}
	return []string{"addr:" + addr}
}

// Overlap reports whether two servers' IDs name one server.
func Overlap(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}
