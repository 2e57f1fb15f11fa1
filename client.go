package redlock

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/pubsub"
	"github.com/quorumlock/redlock/internal/rtt"
	"github.com/quorumlock/redlock/transport"
)

// Defaults, in one place. A derived node timeout is a tenth of the ttl,
// within what a healthy node on a loaded machine needs and a hung one costs.
const (
	defaultDriftFactor    = 0.01
	nodeTimeoutFraction   = 10
	maxDerivedNodeTimeout = time.Second
)

// minDerivedNodeTimeout is the least a derived node timeout is; the tests
// raise it (export_test.go), as a loaded machine delays healthy replies.
var minDerivedNodeTimeout = 50 * time.Millisecond

// Client acquires locks over a fixed set of nodes; safe for concurrent use.
type Client struct {
	nodes  []node
	quorum int
	cfg    config
	queues localQueues // see localqueue.go
	// failing[i] holds node i's error while its last call went unanswered
	// (timed out; see noteReply). A failed attempt, and a Release past its
	// quorum, do not wait for a failing node.
	failing []atomic.Pointer[error]
	// misconfigured: by node, whether its last failure was one that
	// retrying cannot cure (warned once until it answers properly)
	misconfigured []atomic.Bool
	// told: by node, a failure of it has been logged (and a lock held
	// without it reported: OpDegraded) since it last answered; see news
	told []atomic.Bool
	// rtts: by node, its round trips, for the node timeout (nodeTimeout);
	// allKnown once every node has told something (see anyUnknown)
	rtts        []rtt.Estimate
	allKnown    atomic.Bool
	idents      identities           // see identity.go
	subscribers []*pubsub.Subscriber // by node: the waiters' release subscriptions (see wakeup.go)
	calls       inflight             // node calls sent and not yet returned (see Drain)
	sched       *scheduler           // renewals and ends of its locks (see renewal.go)
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
			return nil, invalid("node %d is nil", i)
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
			return nil, invalid("node %d is nil", i)
		}
	}
	return newClient(nodes, opts)
}

// newClient is New over nodes, checked not to be nil.
func newClient(nodes []transport.Node, opts []Option) (*Client, error) {
	if len(nodes) == 0 {
		return nil, invalid("no nodes")
	}
	c := &Client{
		nodes:         make([]node, len(nodes)),
		failing:       make([]atomic.Pointer[error], len(nodes)),
		misconfigured: make([]atomic.Bool, len(nodes)),
		told:          make([]atomic.Bool, len(nodes)),
		rtts:          make([]rtt.Estimate, len(nodes)),
		quorum:        quorumOf(len(nodes)),
		cfg: config{
			driftFactor: defaultDriftFactor,
			retry:       defaultRetry,
			clock:       systemClock{},
			logger:      slog.Default(),
			handOffs:    defaultHandOffs,
		},
	}
	c.idents.init(len(nodes))
	for i, t := range nodes {
		info := t.Info()
		c.nodes[i] = node{info: info, addr: info.Addr}
		for j := range i {
			if sameNode(c.nodes[j], c.nodes[i]) {
				return nil, invalid("node %d is the same as node %d (%s): the nodes must be independent", i, j, c.nodes[i].describe())
			}
		}
	}
	for _, o := range opts {
		if isNil(o) {
			return nil, invalid("option is nil")
		}
		if err := o.applyClient(&c.cfg); err != nil {
			return nil, err
		}
	}
	c.subscribers = make([]*pubsub.Subscriber, len(c.nodes))
	c.batchRenewals = !c.cfg.unbatched
	for i, t := range nodes {
		c.subscribers[i] = pubsub.New(t)
		c.nodes[i].io = nodeio.New(t, c.cfg.replicaAck, !c.cfg.unbatched)
		if c.nodes[i].info.Cluster {
			c.batchRenewals = false // the keys of a batch span slots
		}
		if c.cfg.replicaAck.Replicas > 0 && !c.nodes[i].info.OneConnection {
			return nil, invalid("node %d's client does not send a pipeline on one connection: WithReplicaAck needs WAIT on the write's own connection (a go-redis *redis.Client; a Cluster or Ring client routes a keyless WAIT to a server of its choosing)", i)
		}
	}
	c.queues.clock = c.cfg.clock
	c.sched = newScheduler(c)
	return c, nil
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
			return invalid("drift factor %v is not in [0, 1)", factor)
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
			return invalid("node timeout %v must be positive", d)
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
			return invalid("logger is nil")
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
