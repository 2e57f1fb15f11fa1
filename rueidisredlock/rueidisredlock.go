// Package rueidisredlock runs the redlock library over rueidis clients
// (github.com/redis/rueidis): the Redlock algorithm over N independent
// Redis masters, with every lock kind, fencing, renewal, hand-offs, wake-ups
// and election, as redlock.New gives them over go-redis. Give it one
// rueidis.Client per master:
//
//	nodes := []rueidis.Client{a, b, c} // each rueidis.NewClient of one master
//	locker, err := rueidisredlock.New(nodes)
//	lock, err := locker.Acquire(ctx, "job", 10*time.Second)
//
// What is the same: the options, errors and guarantees of package redlock
// (the returned value is a *redlock.Client). What differs from go-redis:
//
//   - A node's calls are sent as rueidis pipelines (DoMulti), one at a time
//     per node, in the order they were made; rueidis's own auto-pipelining
//     shares its connections with the program's other commands.
//   - Every call waits for its reply, as go-redis does on its default
//     options: the library gives up on a node at its node timeout and
//     leaves the call to finish in the background, so that a write sent
//     late cannot land after the release that follows it. A hung node's
//     call ends at rueidis's ConnWriteTimeout.
//   - Client-side caching is not used: a lock's keys are read and written
//     by Lua scripts only.
//   - Release announcements come on a dedicated connection per node (one
//     per Client, shared by its waiting Acquires and observers).
//   - A node's calls share rueidis's pipelined connections: a call that is
//     late on its connection holds up the calls behind it there (go-redis
//     gives each call a pooled connection of its own).
//   - A node whose connection broke or was refused is answered with that
//     error for 50 ms without another dial (see downFor); one whose
//     connection broke after it had worked (it restarted) is sent the
//     call again at once, on each stale connection (staleResends).
//   - WithReplicaAck needs a client of one master (not a Cluster client),
//     whose pipeline runs on one connection.
//   - A rueidis client dials its node when it is made: make it once the
//     node is up (rueidis.NewClient fails for a node that is down), where
//     go-redis dials at the first call.
//
// valkey-go (github.com/valkey-io/valkey-go), Valkey's fork of rueidis,
// has the same API in other types; this package does not take its clients.
package rueidisredlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/transport"
)

// New returns a redlock Client over nodes, one rueidis client per
// independent Redis master, configured by opts as redlock.New is. It
// returns an error matching redlock.ErrInvalidArgument when nodes is
// empty, a node is nil, the same client is given twice, or an option is
// out of range; it does not contact the nodes.
func New(nodes []rueidis.Client, opts ...redlock.Option) (*redlock.Client, error) {
	ts := make([]transport.Node, len(nodes))
	for i, c := range nodes {
		if c == nil {
			return nil, fmt.Errorf("%w: node %d is nil", redlock.ErrInvalidArgument, i)
		}
		ts[i] = Transport(c)
	}
	return redlock.NewOver(ts, opts...)
}

// Transport returns c as the library's node transport.
func Transport(c rueidis.Client) transport.Node {
	n := &node{c: c}
	n.worked.Store(true)
	n.info.Addr = strings.Join(slices.Sorted(maps.Keys(c.Nodes())), ",")
	n.info.ID = c
	if c.Mode() == rueidis.ClientModeCluster {
		n.info.Cluster = true
	} else {
		n.info.OneConnection = true // DoMulti pipelines on one connection
	}
	return n
}

// downFor is how long a node whose connection broke or was refused is
// answered with that error without another dial: rueidis takes about a
// millisecond to fail a call to a node that is gone (go-redis a tenth of
// that), a node's calls go one batch at a time, and every operation waited
// for the dead node's answer. With a minority killed under the chaos
// suite's load, 1,014 sections a second passed on go-redis; on rueidis 392
// without it and 1,055 with it (a read-write lock: 427, 40 and 1,051). A
// node back up is used again within downFor. go-redis answers a node it
// could not dial with the last dial error until a dial, made once a
// second, works.
const downFor = 50 * time.Millisecond

// staleResends is how many times a call whose connection broke is sent
// again to a node whose last call had worked: once per connection rueidis
// pipelines a node's commands on by default (PipelineMultiplex 2). With
// one resend, a fair lock stalled 2 s after a node's instant restart (its
// other stale connections failed the next calls); with these, 1 s, as on
// go-redis (the fair waiters' poll).
const staleResends = 4

// downAt is when a node's call last broke, and with what.
type downAt struct {
	at  time.Time
	err error
}

type node struct {
	down   atomic.Pointer[downAt] // see downFor
	c      rueidis.Client
	info   transport.Info
	worked atomic.Bool // the last call's connection did not break
}

func (n *node) Info() transport.Info { return n.info }

// Do sends cmds as one rueidis pipeline, and waits for every reply: see
// the package doc, "Every call waits for its reply". When the connection
// broke before the replies and the node's last call had worked (it
// restarted since, and the connection is stale: go-redis checks a pooled
// connection before it uses it), the pipeline is sent again: the
// library's scripts are idempotent for a token, and a pipeline holds no
// two calls on one key. A node whose calls still fail is answered with
// their error for downFor without another dial.
func (n *node) Do(ctx context.Context, cmds []transport.Cmd, replies []transport.Reply) {
	ctx = context.WithoutCancel(ctx)
	if p := n.down.Load(); p != nil && time.Since(p.at) < downFor {
		for i := range replies {
			replies[i] = transport.Reply{Err: p.err}
		}
		return
	}
	n.do(ctx, cmds, replies)
	// Each of rueidis's pipelined connections to a node that restarted is
	// stale, and breaks at its first use: sent again, up to once per
	// connection rueidis makes to a node by default.
	for try := 0; try < staleResends && n.worked.Load() && slices.ContainsFunc(replies, isBroken); try++ {
		n.do(ctx, cmds, replies)
	}
	for _, r := range replies {
		if isBroken(r) || errors.Is(r.Err, syscall.ECONNREFUSED) {
			n.worked.Store(false)
			n.down.Store(&downAt{at: time.Now(), err: r.Err})
			return
		}
	}
	n.worked.Store(true)
}

func isBroken(r transport.Reply) bool { return broken(r.Err) }

func (n *node) do(ctx context.Context, cmds []transport.Cmd, replies []transport.Reply) {
	if len(cmds) == 1 {
		replies[0] = reply(n.c.Do(ctx, n.build(cmds[0])))
		return
	}
	built := make(rueidis.Commands, len(cmds))
	for i, c := range cmds {
		built[i] = n.build(c)
	}
	for i, r := range n.c.DoMulti(ctx, built...) {
		replies[i] = reply(r)
	}
}

// broken reports whether err is a connection that broke: closed by the
// node, or reset.
func broken(err error) bool {
	return err != nil && !transport.IsReply(err) &&
		(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
			errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE))
}

// build is cmd as a rueidis command, its keys marked (EVAL and EVALSHA
// name them after numkeys, SET first), so that a Cluster client routes it.
func (n *node) build(cmd transport.Cmd) rueidis.Completed {
	words := make([]string, len(cmd))
	for i, w := range cmd {
		words[i] = word(w)
	}
	name := strings.ToLower(words[0])
	if (name == "evalsha" || name == "eval") && len(words) >= 3 {
		if nk, err := strconv.Atoi(words[2]); err == nil && 3+nk <= len(words) {
			return n.c.B().Arbitrary(words[:3]...).Keys(words[3 : 3+nk]...).Args(words[3+nk:]...).Build()
		}
	}
	if name == "set" && len(words) >= 3 {
		return n.c.B().Arbitrary(words[0]).Keys(words[1]).Args(words[2:]...).Build()
	}
	return n.c.B().Arbitrary(words...).Build()
}

// word is one argument as Redis reads it.
func word(w any) string {
	switch w := w.(type) {
	case string:
		return w
	case []byte:
		return string(w)
	case int:
		return strconv.Itoa(w)
	case int64:
		return strconv.FormatInt(w, 10)
	case uint64:
		return strconv.FormatUint(w, 10)
	}
	return fmt.Sprint(w)
}

// reply is r as the transport's reply: the server's error replies as
// transport.ErrorReply, a nil reply as a nil value.
func reply(r rueidis.RedisResult) transport.Reply {
	v, err := r.ToAny()
	if err == nil {
		return transport.Reply{Val: v}
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		if re.IsNil() {
			return transport.Reply{}
		}
		return transport.Reply{Err: transport.ErrorReply(re.Error())}
	}
	return transport.Reply{Err: err}
}
