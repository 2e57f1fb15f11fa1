package redlock

import (
	"context"
	"log/slog"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/pubsub"
	"github.com/quorumlock/redlock/internal/sched"
	"github.com/quorumlock/redlock/internal/turns"
	"github.com/quorumlock/redlock/internal/wait"
	"github.com/quorumlock/redlock/transport"
)

// defaultDriftFactor is the clock drift allowed for, by default.
const defaultDriftFactor = 0.01

// Client acquires locks over a fixed set of nodes; safe for concurrent use.
type Client struct {
	nodes       []engine.Node
	quorum      int
	cfg         config
	queues      *turns.Queues[*Lock, want] // its goroutines' local turns (see localqueue.go)
	e           *engine.Engine             // the quorum engine: the nodes' state and the fan-out
	subscribers []*pubsub.Subscriber       // by node: the waiters' release subscriptions (see wakeup.go)
	sched       *sched.Scheduler[*Lock]    // renewals and ends of its locks (see renewal.go)
	// batchRenewals: plain locks due together are renewed in one script
	// call per node (batching on, and no Cluster node: keys would span slots)
	batchRenewals bool
}

// New returns a Client over nodes, which must be independent Redis masters
// (not replicas of one another). A single node gives a plain single-node lock
// with the same API; an even number is allowed, with quorum N/2+1.
// Any go-redis client type may be given, e.g. []*redis.Client or
// []redis.UniversalClient. New does not contact the nodes. The first
// operation identifies each node's server (INFO run_id; a ClusterClient by
// its cluster's node IDs) alongside its call, and no lock is granted before
// every reachable node is identified: two nodes that reach one server
// (localhost:6379 and 127.0.0.1:6379, or ClusterClients of one cluster)
// make every acquire fail with ErrMisconfigured. A server that does not
// answer INFO (an ACL user without it) is known by its address only.
//
// It returns an error matching ErrInvalidArgument when nodes is empty, a
// node is nil, the same node appears twice (the same client, or clients with
// the same address), or an option's value is out of range.
func New[C redis.UniversalClient](nodes []C, opts ...Option) (*Client, error) {
	ts := make([]transport.Node, len(nodes))
	for i, rdb := range nodes {
		if isNil(rdb) {
			return nil, engine.Invalid("node %d is nil", i)
		}
		ts[i] = transport.GoRedis(rdb)
	}
	return newClient(ts, opts)
}

// NewOver is New for the nodes of another client than go-redis: each node
// a transport.Node, as an adapter in a module of its own makes them
// (rueidisredlock for rueidis). An adapter's own New calls it; a program
// calls the adapter's. It returns an error matching ErrInvalidArgument
// when nodes is empty, a node is nil, the same node appears twice, or an
// option's value is out of range.
func NewOver(nodes []transport.Node, opts ...Option) (*Client, error) {
	for i, t := range nodes {
		if isNil(t) {
			return nil, engine.Invalid("node %d is nil", i)
		}
	}
	return newClient(nodes, opts)
}

// newClient is New over nodes, checked not to be nil.
func newClient(nodes []transport.Node, opts []Option) (*Client, error) {
	if len(nodes) == 0 {
		return nil, engine.Invalid("no nodes")
	}
	c := &Client{
		nodes:  make([]engine.Node, len(nodes)),
		quorum: engine.QuorumOf(len(nodes)),
		cfg: config{
			driftFactor: defaultDriftFactor,
			retry:       defaultRetry,
			clock:       systemClock{},
			logger:      slog.Default(),
			handOffs:    wait.HandOffs,
		},
	}
	for i, t := range nodes {
		info := t.Info()
		c.nodes[i] = engine.Node{Info: info, Addr: info.Addr}
		for j := range i {
			if sameNode(c.nodes[j], c.nodes[i]) {
				return nil, engine.Invalid("node %d is the same as node %d (%s): the nodes must be independent", i, j, describe(c.nodes[i]))
			}
		}
	}
	for _, o := range opts {
		if isNil(o) {
			return nil, engine.Invalid("option is nil")
		}
		if err := o.applyClient(&c.cfg); err != nil {
			return nil, err
		}
	}
	c.subscribers = make([]*pubsub.Subscriber, len(c.nodes))
	c.batchRenewals = !c.cfg.unbatched
	for i, t := range nodes {
		c.subscribers[i] = pubsub.New(t)
		c.nodes[i].IO = nodeio.New(t, c.cfg.replicaAck, !c.cfg.unbatched)
		if c.nodes[i].Info.Cluster {
			c.batchRenewals = false // the keys of a batch span slots
		}
		if c.cfg.replicaAck.Replicas > 0 && !c.nodes[i].Info.OneConnection {
			return nil, engine.Invalid("node %d's client does not send a pipeline on one connection: WithReplicaAck needs WAIT on the write's own connection (a go-redis *redis.Client; a Cluster or Ring client routes a keyless WAIT to a server of its choosing)", i)
		}
	}
	c.e = engine.New(c.nodes, c.engineConfig())
	c.queues = newQueues(c)
	c.sched = newScheduler(c)
	return c, nil
}

// engineConfig is what the engine takes of the Client's options, with the
// hooks through which it tells the API what it finds.
func (c *Client) engineConfig() engine.Config {
	return engine.Config{
		NodeTimeout: c.cfg.nodeTimeout, DriftFactor: c.cfg.driftFactor, ReplicaAck: c.cfg.replicaAck,
		Logger: c.cfg.logger, Timed: c.cfg.observer != nil,
		NodeError: func(i int, err error) error { return &NodeError{Node: i, Addr: c.nodes[i].Addr, Err: err} },
		Misconfigured: func(ctx context.Context, i int, err error) {
			c.observe(ctx, Event{Op: OpMisconfigured, Start: c.cfg.clock.Now(), Err: err, Node: i, Addr: c.nodes[i].Addr})
		},
	}
}

// Quorum returns how many nodes must agree for a lock: N/2+1.
func (c *Client) Quorum() int { return c.quorum }

type config struct {
	driftFactor float64
	nodeTimeout time.Duration // 0: derived from the ttl
	retry       RetryPolicy
	maxAttempts int // 0: no limit
	clock       Clock
	logger      *slog.Logger
	unbatched   bool
	handOffs    int
	observer    Observer
	replicaAck  nodeio.Ack
	// counterHorizon: how long, at least, fencing counters are kept (WithFenceHorizon)
	counterHorizon time.Duration
}

// Option configures a Client. Pass options to New.
type Option interface {
	applyClient(*config) error
}

// AcquireOption configures one Acquire or TryAcquire call.
type AcquireOption interface {
	applyAcquire(*acquireConfig) error
}

// RetryOption is an option that may be given to New, where it sets the
// Client's default, or to Acquire, where it applies to that call only.
type RetryOption interface {
	Option
	AcquireOption
}

type clientOption func(*config) error

func (f clientOption) applyClient(c *config) error { return f(c) }

// WithDriftFactor sets the fraction of the ttl set aside for the difference
// between the clock rates of this process and the nodes. The drift allowance
// is ttl·factor + 2ms. The factor must be in [0, 1). Default: 0.01.
func WithDriftFactor(factor float64) Option {
	return clientOption(func(c *config) error {
		if !(factor >= 0 && factor < 1) {
			return engine.Invalid("drift factor %v is not in [0, 1)", factor)
		}
		c.driftFactor = factor
		return nil
	})
}

// WithNodeTimeout sets how long an operation waits for each node's reply,
// kept as given whatever the nodes' round trips. It must be positive. A
// node that does not answer in time counts as failed for that operation;
// nodes all farther away than d never give a lock. A caller's own
// deadline, which cuts or skips a call, never counts against a node.
// Default: a tenth of the operation's ttl (at least 50ms, at most 1s),
// lengthened to what the quorum-th fastest node's replies show it needs,
// up to two thirds of the ttl less its drift allowance and a minute (a
// node not heard from yet is given that much); see docs/algorithm.md. The
// timeout is enforced whether or not the go-redis client was created
// with ContextTimeoutEnabled; with it, the late command's socket is also
// cut at the deadline, and a Client over a single node runs its calls in
// the calling goroutine.
func WithNodeTimeout(d time.Duration) Option {
	return clientOption(func(c *config) error {
		if d <= 0 {
			return engine.Invalid("node timeout %v must be positive", d)
		}
		c.nodeTimeout = d
		return nil
	})
}

// WithLogger sets where the Client logs: failed attempts (Debug); lost
// locks, locks held without a node, nodes it could not clean up, failed
// renewals and misconfigured nodes (Warn), a node's failure once until it
// answers again. It must not be nil. Default: slog.Default(), which shows
// Info and above; give slog.New(slog.DiscardHandler) for no logging.
func WithLogger(logger *slog.Logger) Option {
	return clientOption(func(c *config) error {
		if logger == nil {
			return engine.Invalid("logger is nil")
		}
		c.logger = logger
		return nil
	})
}

// WithBatching turns the batching of concurrent calls on or off. With it,
// a call bound for an idle node is sent at once, alone; calls made while
// one is in flight to that node then go together as one pipeline, so that
// under load many locks share each round trip. Each node gets one send at
// a time, in the order the calls were made, and a write of a hold whose
// deadline passed while it waited is never sent.
//
// Turn it off for nodes whose client cannot pipeline, or to let a node's
// calls use its whole connection pool (a hung connection then holds up
// only its own calls). Without it, a sent call runs to its answer even
// when its caller gave up, so a stream of callers that give up at once
// can hold every connection past other callers' node timeouts. Default: on.
func WithBatching(on bool) Option {
	return clientOption(func(c *config) error {
		c.unbatched = !on
		return nil
	})
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

func sameNode(a, b engine.Node) bool {
	if a.Addr != "" && a.Addr == b.Addr {
		return true
	}
	return a.Info.ID != nil && a.Info.ID == b.Info.ID
}

func describe(n engine.Node) string {
	if n.Addr == "" {
		return "same client"
	}
	return n.Addr
}

// nodeOp is one node's share of an operation (see nodeio.Op).
type nodeOp = nodeio.Op
