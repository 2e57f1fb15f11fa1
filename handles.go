package redlock

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
)

// MaxMetadata is the longest metadata WithMetadata accepts, in bytes.
const MaxMetadata = 1024

// WithMetadata stores metadata with the lock on every node, after its
// token and a space: a short value that anyone may read, with
// Client.Inspect or redis-cli GET, to tell who holds the lock (a host, a
// process ID, a job). It is stored with each hold of every kind (a
// reentrant lock's holds, each permit, each reader); Lock.Metadata returns
// it. Metadata longer than MaxMetadata gives an error matching
// ErrInvalidArgument. Default: none.
func WithMetadata(metadata string) AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		if len(metadata) > MaxMetadata {
			return engine.Invalid("metadata of %d bytes is longer than MaxMetadata (%d)", len(metadata), MaxMetadata)
		}
		c.metadata = metadata
		return nil
	})
}

// newToken returns a fresh token for a hold of kind k: 26 random
// characters (crypto/rand, base 32), and for a kind other than the plain
// lock a dot and the kind's name, so that Inspect can tell the kinds that
// store a string apart and Resume can refuse them. The acquire scripts
// name a holder by its token's first 8 bytes, which stay random (a run of
// hand-offs is named as one holder: see runOf).
func newToken(k kind) string {
	if n := k.name(); n != "plain" {
		return rand.Text() + "." + n
	}
	return rand.Text()
}

// runLen is how long the prefix is that the tokens of a run of hand-offs
// share: newToken's random characters.
const runLen = 26

// runOf returns the prefix that token shares with the other tokens of its
// run of hand-offs: its first runLen characters, which a lock handed on
// puts before its own token (Client.handOff); "" for a shorter token. A
// hand-off that never ran on a node leaves an earlier token of the run
// there, which the run's later hand-offs and its release take (of_run in
// lua/prelude.lua) rather than leave until its ttl. Only one token of a
// run is live at a time, each taken over from the one before in the one
// Client that made them: only its Locks know their run (a resumed copy of
// a token, which may have been handed on since, does not).
func runOf(token string) string {
	if len(token) < runLen {
		return ""
	}
	return token[:runLen]
}

// kindOf returns the kind a token names (see newToken): "plain" for a
// token without a mark.
func kindOf(token string) string {
	if _, mark, ok := strings.Cut(token, "."); ok {
		return mark
	}
	return "plain"
}

// storedValue is what the nodes store for a hold: its token, and its
// metadata after a space when there is any. Tokens hold no space.
func storedValue(token, metadata string) string {
	if metadata == "" {
		return token
	}
	return token + " " + metadata
}

// splitValue splits a stored value into its token and its metadata.
func splitValue(v string) (token, metadata string) {
	token, metadata, _ = strings.Cut(v, " ")
	return token, metadata
}

// What Inspect reports a node's key to hold: the kinds of lock as the nodes
// store them, named as Event.Kind names them.
const (
	HeldByLock      = "plain"     // a plain lock (fenced, renewed or not)
	HeldByFair      = "fair"      // a fair lock (Fair)
	HeldByWriter    = "write"     // the writer of a read-write lock (ForWrite)
	HeldByMultiKey  = "multi-key" // a lock on several keys (AcquireAll); each key shows it
	HeldByReentrant = "reentrant" // a reentrant lock (WithOwner)
	HeldByReaders   = "read"      // the readers of a read-write lock (ForRead)
	HeldBySemaphore = "semaphore" // the permits of a semaphore (WithPermits)
)

// Inspection is what the nodes hold for a lock key (see Client.Inspect).
type Inspection struct {
	Key string
	// Quorum is how many nodes must hold a holder for it to count: a
	// majority, or the larger quorum of the semaphore most nodes keep.
	Quorum int
	Nodes  []NodeHold // by node index
	// Holders are the holders a quorum of the nodes agree on, the
	// longest-lived first: one for an exclusive lock; none when the key is
	// free or its nodes disagree (a split vote, a lock being taken or
	// released). A holder's TTL is how long a quorum keeps it.
	Holders []Holder
}

// Held reports whether a quorum of the nodes agree on at least one holder.
func (in *Inspection) Held() bool { return len(in.Holders) > 0 }

// NodeHold is what one node holds for a lock key.
type NodeHold struct {
	Node int
	Addr string // "" when the client does not reveal it
	Held bool   // the key is held on this node
	// Kind is what holds it: HeldByLock, HeldByFair, HeldByWriter,
	// HeldByMultiKey, HeldByReentrant, HeldByReaders, HeldBySemaphore, or
	// the Redis type of a key that is not a lock; "" when free.
	Kind     string
	Token    string        // the first holder's token ("" for a reentrant lock's owner without holds)
	Metadata string        // the first holder's metadata
	Owner    string        // a reentrant lock's owner
	Permits  int           // a semaphore's K; 0 for another kind
	TTL      time.Duration // the key's remaining time to live on this node (the first holder's, for a semaphore or readers)
	Holders  []Holder      // every holder on this node: several for readers and a semaphore
	Err      error         // a *NodeError when the node did not answer; the fields but Node and Addr are then zero
}

// Holder is one holder of a lock key.
type Holder struct {
	Token    string
	Metadata string
	Owner    string        // a reentrant lock's owner, else ""
	TTL      time.Duration // remaining time to live
	Nodes    int           // how many nodes hold it
}

// Inspect reads what every node holds for key, all at once, each within
// the per-node timeout (WithNodeTimeout, or one second, more when the
// nodes' round trips need it): per node whether the key is held, by which
// token and metadata, and its remaining time to live; and the holders a
// quorum of nodes agrees on. It writes nothing, and is a snapshot, not a
// lock: what it reports may change at once. A node that fails is reported
// in its NodeHold's Err, as is a node that counts for no lock (a replica:
// ErrMisconfigured); Inspect itself returns an error only for an empty key
// (ErrInvalidArgument) or an ended ctx (ctx.Err()).
func (c *Client) Inspect(ctx context.Context, key string) (*Inspection, error) {
	if err := nilContext(ctx, "Client.Inspect"); err != nil {
		return nil, err
	}
	if key == "" {
		return nil, engine.Invalid("empty key")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := len(c.nodes)
	in := &Inspection{Key: key, Quorum: engine.QuorumOf(n), Nodes: make([]NodeHold, n)}
	keys := []string{key, companion(key, "grants"), companion(key, "permits")}
	t := c.readAll(ctx, nil, nodeOp{Script: inspectScript, Keys: keys, Shape: nodeio.Inspection})
	for i := range n {
		h := NodeHold{Err: errAt(&t, i)}
		if r := t.Replies[i].Hold; h.Err == nil && r != nil {
			h = holdOf(*r)
		}
		h.Node, h.Addr = i, c.nodes[i].Addr
		in.Nodes[i] = h
	}
	if k := agreedPermits(in.Nodes); k > 0 {
		in.Quorum = semaphoreQuorum(n, k) // a permit counts on more nodes
	}
	in.Holders = agreed(in.Nodes, in.Quorum)
	return in, nil
}

// agreedPermits is the K of the semaphore that most nodes hold the key as,
// or 0 when none does.
func agreedPermits(nodes []NodeHold) int {
	votes := map[int]int{}
	best := 0
	for _, nd := range nodes {
		if nd.Kind == HeldBySemaphore && nd.Permits > 0 {
			votes[nd.Permits]++
			if votes[nd.Permits] > votes[best] {
				best = nd.Permits
			}
		}
	}
	return best
}

// holdOf is what a node's Hold tells of the lock it holds.
func holdOf(r nodeio.Hold) NodeHold {
	h, lock := kindHeld(r)
	if !lock {
		return h
	}
	for _, v := range r.Values {
		token, meta := splitValue(v.Stored)
		h.Holders = append(h.Holders, Holder{Token: token, Metadata: meta, Owner: h.Owner, TTL: v.TTL, Nodes: 1})
	}
	switch {
	case r.Type == "string" && kindOf(h.Holders[0].Token) != "plain":
		h.Kind = kindOf(h.Holders[0].Token) // HeldByFair, HeldByWriter or HeldByMultiKey
	case r.Type == "hash" && len(h.Holders) == 0:
		h.Holders = []Holder{{Owner: h.Owner, TTL: r.TTL, Nodes: 1}}
	}
	if len(h.Holders) > 0 {
		h.Held = true
		h.Token, h.Metadata, h.TTL = h.Holders[0].Token, h.Holders[0].Metadata, h.Holders[0].TTL
	}
	return h
}

// kindHeld is the kind of lock a node's Hold is, by the key's type; lock
// is false for a free key and one that is not a lock (h is then whole).
func kindHeld(r nodeio.Hold) (h NodeHold, lock bool) {
	switch r.Type {
	case "none":
		return h, false
	case "string":
		h.Kind = HeldByLock
	case "hash":
		h.Kind, h.Owner = HeldByReentrant, r.Owner
	case "zset":
		h.Kind, h.Permits = HeldBySemaphore, r.Permits
		if r.Readers {
			h.Kind = HeldByReaders
		}
	default:
		return NodeHold{Kind: r.Type, TTL: r.TTL, Held: true}, false
	}
	return h, true
}

// agreed returns the holders found on at least q nodes, each with the time
// for which q nodes still hold it, the longest-lived first.
func agreed(nodes []NodeHold, q int) []Holder {
	type seen struct {
		h    Holder
		ttls []time.Duration
	}
	var order []string
	by := map[string]*seen{}
	for _, nd := range nodes {
		for _, h := range nd.Holders {
			id := h.Owner + "\x00" + h.Token
			s := by[id]
			if s == nil {
				s = &seen{h: h}
				by[id] = s
				order = append(order, id)
			}
			s.ttls = append(s.ttls, h.TTL)
		}
	}
	var out []Holder
	for _, id := range order {
		s := by[id]
		if len(s.ttls) < q {
			continue
		}
		slices.Sort(s.ttls)
		h := s.h
		h.Nodes = len(s.ttls)
		h.TTL = s.ttls[len(s.ttls)-q] // the q-th longest: until then a quorum holds it
		out = append(out, h)
	}
	slices.SortStableFunc(out, func(a, b Holder) int { return cmp.Compare(b.TTL, a.TTL) })
	return out
}

// Resume rebuilds a plain lock in this process from its key and token
// (Lock.Token of the lock acquired elsewhere: another process, or an
// earlier step of a pipeline), so that it can be extended and released
// here. It reads the value stored for the token (with its metadata), then
// extends the lock to ttl on a quorum, which gives it a fresh validity as
// an Acquire does, from the start of that extend. A resumed lock carries
// no fencing token (FencingToken is 0). Of the acquire options only
// WithAutoRenew applies; retry options are ignored (Resume makes one
// attempt). It applies to plain locks, with or without fencing, renewal
// and hand-offs; the other kinds keep state that a token alone does not
// name (see docs/kinds.md).
//
// The token is a capability: once a process hands it on for Resume, it
// must stop using its own Lock, and not release it either; two processes
// that both extend or release one token may undo each other's work.
//
// It returns an error matching ErrLockLost when a majority of the nodes
// answered that the key does not hold the token. When too few answer to
// tell, or the extend took longer than ttl allows, the error matches
// ErrNotConfirmed and Resume may be tried again; what it extended expires
// with ttl. Bad input (an empty key or token, a token that holds a space,
// a ttl not larger than its drift allowance, a kind, fencing or metadata
// option, a key held by another kind of lock) gives ErrInvalidArgument
// before anything is written; an ended ctx, its error.
func (c *Client) Resume(ctx context.Context, key, token string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if err := nilContext(ctx, "Client.Resume"); err != nil {
		return nil, err
	}
	ac, err := c.resumeConfig(key, token, ttl, opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redlock: resume %q: %w", key, err)
	}
	k := plain{key: key}
	q := engine.QuorumOf(len(c.nodes))
	value, err := c.heldValue(ctx, k, token)
	if err != nil {
		return nil, err
	}
	if err := c.resumeRefused(k); err != nil {
		return nil, err
	}

	l := &Lock{client: c, kind: k, key: key, quorum: q, token: value, terms: ac.Terms,
		done: make(chan struct{}), renewed: ac.autoRenew, acquired: c.cfg.clock.Now()}
	start := c.cfg.clock.Now()
	t, settled := c.e.FanOut(ctx, ac.Terms, c.e.ExtendDone(q, engine.Settlement{}), nil, engine.Settlement{}, k.extend(value, ttl))
	l.settled = settled
	c.observeNodes(ctx, OpExtend, k, start, t)
	elapsed := c.cfg.clock.Now().Sub(start)
	if err := c.resumeRefused(k); err != nil {
		return nil, err
	}
	tm := ac.Terms.Now(c.e) // with the node timeout its replies teach
	kept := t.Kept()        // as for an Extend: see judgeExtend
	if v := engine.Validity(ttl, elapsed, ac.Drift); kept >= q && ac.lasts(v, tm) {
		c.resumed(l, ac, tm, t, start.Add(ttl-ac.Drift))
		return l, nil
	}
	l.dropTaken(ctx, tm, t) // not resumed: a key taken where it was free is not left
	return nil, c.notResumed(ctx, k, t, elapsed, ttl)
}

// lasts reports whether a lock of ac on the terms tm may start with the
// validity v: more than none, and for a renewed lock more than its renewal
// margin (see renewMargin), as it is declared lost by then at the latest.
func (ac acquireConfig) lasts(v time.Duration, tm engine.Terms) bool {
	return v > 0 && (!ac.autoRenew || v > tm.RenewMargin())
}

// resumed makes l the lock that Resume confirmed on the nodes t, on the
// terms tm, valid until until, and starts its renewal when asked for (ac).
func (c *Client) resumed(l *Lock, ac acquireConfig, tm engine.Terms, t engine.Tally, until time.Time) {
	l.until, l.terms, l.confirmed, l.had = until, tm, t.Yes, heldOn(t)
	if ac.autoRenew {
		c.sched.Renew(l)
	}
}

// resumeRefused is Resume's error for k on a Client found to reach one
// server through two nodes, nil when it is not.
func (c *Client) resumeRefused(k plain) *quorumError {
	if err := c.e.Refused(); err != nil {
		return &quorumError{sentinel: ErrNotConfirmed, detail: fmt.Sprintf("resume of %s refused, two nodes reach one server", k.describe()), nodes: []error{err}}
	}
	return nil
}

// notResumed is the error of a Resume of k whose extend got t from the
// nodes in elapsed and was not confirmed: ErrLockLost when a majority
// answered without the token, ErrNotConfirmed when too few answered to
// tell or the validity was spent.
func (c *Client) notResumed(ctx context.Context, k plain, t engine.Tally, elapsed, ttl time.Duration) *quorumError {
	n, q, kept := len(c.nodes), engine.QuorumOf(len(c.nodes)), t.Kept()
	detail := fmt.Sprintf("resume of %s: extended on %d of %d nodes, quorum %d", k.describe(), kept, n, q)
	if without := t.No + t.Yes - kept; without > n-q {
		return &quorumError{sentinel: ErrLockLost, detail: detail + fmt.Sprintf(", and %d nodes do not hold its token", without), cause: ctx.Err(), nodes: t.Errs}
	}
	if kept >= q {
		detail += fmt.Sprintf(", but its validity was spent (%v elapsed of ttl %v)", elapsed, ttl)
	}
	return &quorumError{sentinel: ErrNotConfirmed, detail: detail, cause: ctx.Err(), nodes: t.Errs}
}

// resumeConfig checks Resume's arguments and returns its configuration.
func (c *Client) resumeConfig(key, token string, ttl time.Duration, opts []AcquireOption) (acquireConfig, error) {
	ac, err := c.acquireConfig(key, ttl, opts)
	switch {
	case err != nil:
		return ac, err
	case token == "" || strings.ContainsRune(token, ' '):
		return ac, engine.Invalid("token %q: give the Token of the lock to resume", token)
	case kindOf(token) != "plain":
		return ac, engine.Invalid("token %q is a %s lock's: Resume rebuilds plain locks", token, kindOf(token))
	case ac.fenced || ac.metadata != "" || len(ac.kinds) > 0:
		return ac, engine.Invalid("Resume takes WithAutoRenew only: the lock's kind, fencing and metadata are those it was acquired with")
	}
	return ac, nil
}

// heldValue returns the value the nodes store for token under k's key
// (with its metadata), or Resume's error when no node that answered has it.
func (c *Client) heldValue(ctx context.Context, k plain, token string) (string, error) {
	in, err := c.Inspect(ctx, k.key)
	if err != nil {
		return "", err
	}
	absent := 0
	var errs []error
	for _, nd := range in.Nodes {
		switch i := slices.IndexFunc(nd.Holders, func(h Holder) bool { return h.Token == token }); {
		case nd.Err != nil:
			errs = append(errs, nd.Err)
		case i >= 0 && nd.Kind != HeldByLock:
			return "", engine.Invalid("key %q holds the token in a %s lock: Resume rebuilds plain locks", k.key, nd.Kind)
		case i >= 0:
			return storedValue(token, nd.Holders[i].Metadata), nil
		default:
			absent++
		}
	}
	detail := fmt.Sprintf("%s: no node that answered holds token %s", k.describe(), token)
	if absent > len(c.nodes)-in.Quorum {
		return "", &quorumError{sentinel: ErrLockLost, detail: detail, nodes: errs}
	}
	return "", &quorumError{sentinel: ErrNotConfirmed, detail: detail + ", and too few answered to tell", cause: ctx.Err(), nodes: errs}
}

// readAll runs op, a read (Shape Read: it writes nothing), on every node at
// once through FanOut, each within readTimeout, and returns its tally once
// every node answered or, when stop is not nil, as soon as it says the
// answers so far decide (Inspect, Election.Leader). A read holds nothing:
// a node that answered it counts as holdsNot, its reply in t.replies.
func (c *Client) readAll(ctx context.Context, stop func(*engine.Tally) bool, op nodeOp) engine.Tally {
	timeout := c.e.ReadTimeout()
	t, _ := c.e.FanOut(ctx, engine.Terms{Timeout: timeout, Base: timeout}, stop, nil, engine.Settlement{}, op)
	return t
}

// errAt is node i's error in t (a *NodeError), or nil.
func errAt(t *engine.Tally, i int) error {
	for _, err := range t.Errs {
		if ne, ok := err.(*NodeError); ok && ne.Node == i {
			return err
		}
	}
	return nil
}
