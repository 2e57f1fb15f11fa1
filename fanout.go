// The fan-out: an operation's calls to every node at once, each under the
// node timeout, and the tally of their answers until the outcome is known.
// The stop conditions and the arithmetic that judges a tally: quorum.go.

package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/internal/nodeio"
)

// answer is one node's part in an operation.
type answer uint8

const (
	unanswered answer = iota // not waited for: the outcome was known before
	holds                    // the node holds our token after the operation
	holdsNot                 // the node certainly does not hold our token
	failed                   // an error or no reply in time: it may hold our token
)

// tally is what one fan-out learned from the nodes.
type tally struct {
	answers []answer        // by node index
	replies []nodeio.Reply  // by node index: what a node answered (a failed one's script too, when it ran: WithReplicaAck)
	yes     int             // nodes that answered holds
	no      int             // nodes that answered holdsNot
	notYes  int             // nodes that answered holdsNot, failed or did not answer
	errs    []error         // a *NodeError for every failed or unanswered node
	broken  int             // nodes that failed with an error retrying cannot cure (ErrMisconfigured)
	took    []time.Duration // by node: from the fan-out's start to its reply; nil without an Observer
	begun   time.Time       // when the fan-out began waiting for replies
	lastAt  time.Duration   // from begun to the last reply without an error
	unsent  []bool          // by node, when a call was never sent (see notSent); nil when none was
	// usual is how long after begun the slowest node about as fast as the
	// quorum usually answers (Client.usualReply): withGrace waits for it
	usual time.Duration
	// graceEnd, once set by a stop condition (see withGrace), is when
	// fanOut returns, decided, without waiting for the nodes yet to answer
	graceEnd time.Time
}

type nodeReply struct {
	node    int
	reply   nodeio.Reply
	err     error
	skipped bool          // not contacted: tells nothing about the node
	took    time.Duration // from the call's sending to its end
}

// settlement tells when each node's call of one operation has returned, or
// its deadline has passed. The zero value is settled.
type settlement struct {
	done      []chan struct{} // by node, closed when its call returns
	deadlines []time.Time     // by node: a call that first waited for the call before it has its own timeout after that one's deadline
}

// out reports whether node i's call has not returned yet.
func (s settlement) out(i int) bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done[i]:
		return false
	default:
		return true
	}
}

// pending reports whether node i's call has neither returned nor passed
// its deadline.
func (s settlement) pending(i int) bool {
	return s.out(i) && realTime.Now().Before(s.deadlines[i])
}

// overdue reports whether node i's call is still out after its deadline:
// the node is frozen, cut off or down.
func (s settlement) overdue(i int) bool {
	return s.out(i) && realTime.Now().After(s.deadlines[i])
}

// waitNode blocks until node i's call has returned or its deadline passed.
func (s settlement) waitNode(i int) {
	if !s.out(i) {
		return
	}
	t := realTime.NewTimer(realTime.Until(s.deadlines[i]))
	defer t.Stop()
	select {
	case <-s.done[i]:
	case <-t.Chan():
	}
}

// wait blocks until every node's call has returned or passed its
// deadline, or ctx ends; it reports whether ctx is still going.
func (s settlement) wait(ctx context.Context) bool {
	for i := range s.done {
		if !s.out(i) {
			continue
		}
		t := realTime.NewTimer(realTime.Until(s.deadlines[i]))
		select {
		case <-s.done[i]:
		case <-t.Chan():
		case <-ctx.Done():
			t.Stop()
			return false
		}
		t.Stop()
	}
	return ctx.Err() == nil
}

// fanOut runs op on every node at once, each under the same per-node
// timeout, and tallies the replies. Nodes marked in skip (which may be nil)
// are not contacted and count as holdsNot. It returns when every node has
// replied, when the timeout or ctx ends, or as soon as stop (which may be
// nil) says the outcome is known.
//
// Calls still running when it returns are left to finish; the settlement
// it returns tells when they have. Without batching, the next operation
// with the same token is given it as after, and each of its calls waits
// for the same node's call before, so that a late SET cannot land after
// the release's DEL while a dead node delays only its own calls (with
// batching, each node's pipe keeps that order).
//
// It uses no errgroup, whose Wait would wait out a hung node's ReadTimeout
// (go-redis without ContextTimeoutEnabled ignores context deadlines on the
// socket), and cancels no call: that would close its connection.
func (c *Client) fanOut(ctx context.Context, tm terms, stop func(*tally) bool, skip []bool, after settlement, op nodeOp) (tally, settlement) {
	timeout := tm.timeout
	deadline := realTime.Now().Add(timeout)
	if !c.idents.all.Load() {
		// First contact: the nodes' servers are identified alongside the
		// calls (see identity.go), and a call that grants or keeps a lock
		// waits for every node not known to be failing, so that two nodes
		// on one server are found before a lock is granted.
		c.startIdentifying(skip, deadline)
		if inner := stop; inner != nil && op.Holds {
			stop = func(t *tally) bool { return inner(t) && !c.awaits(t, settlement{}) }
		}
	}
	// A node nothing is known of yet gets the longest timeout (see
	// nodeTimeout), for a first contact over a slow network, but only until
	// another node answers: from then on the base timeout, so that a node
	// that hangs from the start costs no more than that.
	var unknownCut time.Time
	if c.anyUnknown() {
		unknownCut = realTime.Now().Add(min(tm.base, timeout))
	}
	if len(c.nodes) > 1 {
		op.Share() // one command for every node
	}
	io, cancelIO := context.WithDeadlineCause(context.WithoutCancel(ctx), deadline, errNodeTimeout)
	opCtx, cancel := io, cancelIO // a caller that cannot end the operation sooner
	if ctx.Done() != nil {
		opCtx, cancel = context.WithDeadlineCause(ctx, deadline, errNodeTimeout)
	}
	replies := make(chan nodeReply, len(c.nodes))
	f := &fan{c: c, ctx: opCtx, io: io, cancel: cancel, cancelIO: cancelIO, timeout: timeout, deadline: deadline, op: op, replies: replies}
	settled := f.send(skip, after)
	return c.collect(opCtx, timeout, stop, replies, unknownCut, tm.base), settled
}

// anyUnknown reports whether some node has neither answered nor timed out
// yet. A node once known stays known.
func (c *Client) anyUnknown() bool {
	if c.allKnown.Load() {
		return false
	}
	for i := range c.rtts {
		if _, known := c.rtts[i].Wait(); !known {
			return true
		}
	}
	c.allKnown.Store(true)
	return false
}

// fan is one operation's calls to the nodes, op on each, and their
// replies. It notes which nodes time out (Client.failing), and calls cancel
// once every call has returned. ctx is the operation's (see lateIO); io,
// the node timeout alone, is what a sent call runs under, not ctx: a call
// cut when the caller gives up could land after the operation's next call
// there (on another connection) and leave a key until its ttl. The
// exception: a lone node whose client cuts calls at their deadline.
type fan struct {
	c        *Client
	ctx, io  context.Context
	cancel   context.CancelFunc // ctx's: with cancelIO, frees the timers once every call has returned
	cancelIO context.CancelFunc // io's (io is ctx too when the caller's context cannot end)
	timeout  time.Duration
	deadline time.Time
	op       nodeOp
	replies  chan<- nodeReply
	running  atomic.Int32 // calls not yet returned
	// buf holds the settlement's slices (send) for up to 8 nodes, so that
	// a fan-out's pieces come in one allocation
	buf struct {
		done      [8]chan struct{}
		deadlines [8]time.Time
		calls     [8]batchedCall
	}
	settled settlement    // its calls' (send)
	calls   []batchedCall // by node, with batching
}

// send makes the calls of f to every node not skipped, each after the node's
// call of the operation before (after), and returns their settlement.
func (f *fan) send(skip []bool, after settlement) settlement {
	c := f.c
	n := len(c.nodes)
	settled := settlement{done: f.buf.done[:0], deadlines: f.buf.deadlines[:0]}
	if n > len(f.buf.done) {
		settled = settlement{done: make([]chan struct{}, 0, n), deadlines: make([]time.Time, 0, n)}
	}
	settled.done, settled.deadlines = settled.done[:n], settled.deadlines[:n]
	f.settled = settled // its elements are set below, each before its call
	f.calls = f.buf.calls[:]
	if n > len(f.calls) {
		f.calls = make([]batchedCall, n)
	}
	f.running.Store(int32(n))
	for i, nd := range c.nodes {
		settled.done[i] = make(chan struct{})
		settled.deadlines[i] = f.deadline
		if !nd.io.Batched() && after.pending(i) {
			// This call waits for the one before; the next operation's
			// must not give up on it before it had its own timeout.
			settled.deadlines[i] = after.deadlines[i].Add(realTime.Until(f.deadline))
		}
		if skip != nil && skip[i] {
			// Not contacted: the node's last call is still the one
			// before, which the next operation's call there must follow.
			if after.done != nil {
				settled.done[i], settled.deadlines[i] = after.done[i], after.deadlines[i]
			} else {
				close(settled.done[i])
			}
			f.deliver(nodeReply{node: i, skipped: true})
			continue
		}
		c.calls.add()
		f.call(i, nd, settled, after)
	}
	return settled
}

// call makes node i's call: inline for a lone node whose client cuts calls
// at their deadline, through the node's pipe, or after the node's last.
func (f *fan) call(i int, nd node, settled, after settlement) {
	begun := f.deadline.Add(-f.timeout)
	switch {
	case nd.info.CutsAtDeadline && len(f.c.nodes) == 1:
		// No quorum to return early with: the call runs here.
		r := nd.io.Run(f.ctx, f.op, f.timeout)
		if r.Err != nil && f.ctx.Err() != nil && context.Cause(f.ctx) != errNodeTimeout {
			r.Err = fmt.Errorf("%w: %w", errCutByCaller, r.Err)
		}
		f.reply(settled, nodeReply{node: i, reply: r.Reply, err: r.Err, took: realTime.Since(begun)})
	case nd.io.Batched():
		f.calls[i] = batchedCall{f: f, node: i}
		nd.io.Submit(nodeio.Call{Ctx: f.ctx, IO: f.io, Timeout: f.timeout, Op: f.op, Reply: &f.calls[i]})
	default:
		go f.callAfter(i, nd, settled, after)
	}
}

// batchedCall is node i's call of a fan-out through the node's pipe: it
// takes the reply.
type batchedCall struct {
	f    *fan
	node int
}

func (b *batchedCall) Reply(r nodeio.Result) {
	f := b.f
	f.reply(f.settled, nodeReply{node: b.node, reply: r.Reply, err: r.Err, took: realTime.Since(f.deadline.Add(-f.timeout))})
}

// callAfter makes node i's call once the node's call before has returned
// (a Client without batching).
func (f *fan) callAfter(i int, nd node, settled, after settlement) {
	callIO := f.io
	if dl := settled.deadlines[i]; !dl.Equal(f.deadline) {
		// Its own timeout after the call before: in order, in the background.
		var cancelCall context.CancelFunc
		callIO, cancelCall = context.WithDeadline(context.WithoutCancel(f.ctx), dl)
		defer cancelCall()
	}
	after.waitNode(i)
	if err := f.ctx.Err(); err != nil && realTime.Now().Before(f.deadline) {
		// The caller gave up while this call waited: see lateIO. (Past
		// the node timeout, the call before took it all; this has its own.)
		late, cancelLate, send := nodeio.LateIO(f.op, callIO, f.timeout)
		if !send {
			f.reply(settled, nodeReply{node: i, err: nodeio.NotSent(err)})
			return
		}
		defer cancelLate()
		callIO = late
	}
	sent := realTime.Now()
	r := nd.io.Run(callIO, f.op, f.timeout)
	f.reply(settled, nodeReply{node: i, reply: r.Reply, err: r.Err, took: realTime.Since(sent)})
}

// reply takes node i's reply (r): it settles the node's call, notes what
// the reply tells of the node, and delivers it once the node's server is
// identified (a reply counts only then).
func (f *fan) reply(settled settlement, r nodeReply) {
	c := f.c
	close(settled.done[r.node])
	c.calls.done()
	c.noteReply(r.node, r.err, r.took, f.timeout)
	if r.err == nil && !c.idents.all.Load() {
		// Waited for here, not in the pipe, which runs the node's next
		// calls. (r is passed, not captured: a capture would move every
		// reply to the heap.)
		go func(r nodeReply) {
			if r.err = c.awaitIdentity(r.node, f.deadline); r.err == nil {
				r.err = c.refusedNode(r.node)
			}
			c.noteMisconfigured(f.ctx, r.node, r.reply.Held, r.err)
			f.deliver(r)
		}(r)
		return
	}
	if r.err == nil {
		r.err = c.refusedNode(r.node) // a replica's answer does not count
	}
	c.noteMisconfigured(f.ctx, r.node, r.reply.Held, r.err)
	f.deliver(r)
}

// deliver hands a reply to the collector; the last frees the timers.
func (f *fan) deliver(r nodeReply) {
	f.replies <- r
	if f.running.Add(-1) == 0 {
		f.cancel() // every call has returned: free the timers
		f.cancelIO()
	}
}

// collect counts the replies until stop says enough, every node has
// answered, or ctx ends (the operation's deadline, after timeout). At
// unknownCut, when not zero, if another node has answered, the nodes
// nothing is known of that have not answered count as failed (see fanOut).
func (c *Client) collect(ctx context.Context, timeout time.Duration, stop func(*tally) bool, replies <-chan nodeReply, unknownCut time.Time, base time.Duration) tally {
	n := len(c.nodes)
	t := newTally(n, c.cfg.observer != nil)
	t.usual = c.usualReply()
	var grace <-chan time.Time // set once the outcome is known
	cut, stopCut := firesAt(unknownCut)
	defer stopCut()
	for received := 0; received < n; {
		if stop != nil && stop(&t) {
			t.failFailing(c)
			return t
		}
		if grace == nil && !t.graceEnd.IsZero() {
			var stopGrace func() bool
			grace, stopGrace = firesAt(t.graceEnd)
			defer stopGrace()
		}
		select {
		case r := <-replies:
			t.record(c, r)
			received++
		case <-grace:
			// stop says so too, unless it waits for more than the grace
			// (a first contact: see fanOut); then the replies decide.
			if stop(&t) {
				t.failFailing(c)
				return t
			}
		case <-cut:
			cut = nil
			if t.yes+t.no > 0 {
				t.failUnknown(c, base)
			}
		case <-ctx.Done():
			// Replies that came in together with the deadline still count.
			t.recordWaiting(c, replies, n-received)
			t.failUnanswered(c, timeout, ctx)
			return t
		}
	}
	return t
}

// firesAt is a channel that receives the time at at on the real clock,
// and what stops its timer; a zero at never fires.
func firesAt(at time.Time) (<-chan time.Time, func() bool) {
	if at.IsZero() {
		return nil, func() bool { return false }
	}
	timer := realTime.NewTimer(realTime.Until(at))
	return timer.Chan(), timer.Stop
}

// recordWaiting records the replies already received on replies, of at
// most left calls still out, without waiting for more.
func (t *tally) recordWaiting(c *Client, replies <-chan nodeReply, left int) {
	for ; left > 0; left-- {
		select {
		case r := <-replies:
			t.record(c, r)
		default:
			return
		}
	}
}

// usualReply is how long the slowest node about as fast as a quorum
// usually takes to answer: the longest usual reply (rtt.Estimate.Usual)
// among the nodes not failing whose usual reply is within twice the
// quorum's (the q-th shortest) and graceFloor. It follows the round trips
// the Client sees, which a loaded machine lengthens for every node alike;
// a node much farther than the quorum, or failing, is not counted.
func (c *Client) usualReply() time.Duration {
	var buf [8]time.Duration
	usual := buf[:0]
	for i := range c.rtts {
		if c.failing[i].Load() == nil {
			if u := c.rtts[i].Usual(); u > 0 {
				usual = append(usual, u)
			}
		}
	}
	if len(usual) < c.quorum {
		return 0
	}
	slices.Sort(usual)
	within := addSat(2*usual[c.quorum-1], graceFloor)
	longest := time.Duration(0)
	for _, u := range usual {
		if u <= within {
			longest = u
		}
	}
	return longest
}

func newTally(n int, timed bool) tally {
	t := tally{answers: make([]answer, n), replies: make([]nodeio.Reply, n), begun: realTime.Now()}
	if timed {
		t.took = make([]time.Duration, n)
	}
	return t
}

// record counts one node's reply, unless the node was already counted as
// failed without it (failUnknown).
func (t *tally) record(c *Client, r nodeReply) {
	if t.answers[r.node] != unanswered {
		return
	}
	if t.took != nil {
		t.took[r.node] = realTime.Since(t.begun)
	}
	if r.err == nil && !r.skipped {
		t.lastAt = realTime.Since(t.begun)
	}
	// With an error, the script's reply when it ran and its replicas did
	// not confirm it (WithReplicaAck); zero otherwise.
	t.replies[r.node] = r.reply
	switch {
	case r.err != nil:
		t.fail(c, r.node, r.err)
	case r.reply.Held || r.reply.Batch != nil:
		// A Batch: the node answered, and what it holds is in its reply,
		// lock by lock (see renewal.go).
		t.answers[r.node] = holds
		t.yes++
	default:
		t.answers[r.node] = holdsNot
		t.no++
		t.notYes++
	}
}

// fail counts node i as failed with err. A node that fails for a reason
// retrying cannot cure is counted as broken.
func (t *tally) fail(c *Client, i int, err error) {
	t.answers[i] = failed
	t.notYes++
	if errors.Is(err, nodeio.ErrNotSent) {
		if t.unsent == nil {
			t.unsent = make([]bool, len(t.answers))
		}
		t.unsent[i] = true
	}
	err = misconfigured(err)
	if errors.Is(err, ErrMisconfigured) {
		t.broken++
	}
	t.errs = append(t.errs, c.nodeError(i, err))
}

// outOfReach reports whether so many nodes are broken (see fail) that no
// quorum of q can form.
func (t *tally) outOfReach(q int) bool {
	return len(t.answers)-t.broken < q
}

// failFailing counts the nodes not waited for that are failing as failed,
// with the error of their last call.
func (t *tally) failFailing(c *Client) {
	for i, a := range t.answers {
		if a != unanswered {
			continue
		}
		if last := c.failing[i].Load(); last != nil {
			if t.took != nil {
				t.took[i] = realTime.Since(t.begun)
			}
			t.fail(c, i, fmt.Errorf("not waited for, failing since its last call: %w", *last))
		}
	}
}

// failUnknown counts the nodes yet to answer of which nothing is known as
// failed, having had base to answer, and notes them as failing.
func (t *tally) failUnknown(c *Client, base time.Duration) {
	for i, a := range t.answers {
		if _, known := c.rtts[i].Wait(); a != unanswered || known {
			continue
		}
		err := noReply(base, context.DeadlineExceeded)
		c.failing[i].Store(&err)
		c.rtts[i].TimedOut(base)
		if t.took != nil {
			t.took[i] = base
		}
		t.fail(c, i, err)
	}
}

// failUnanswered counts the nodes that did not answer before ctx, the
// operation's, ended as failed, and notes them as failing when the node
// timeout ended it: a node the caller did not wait for tells nothing.
func (t *tally) failUnanswered(c *Client, timeout time.Duration, ctx context.Context) {
	own := context.Cause(ctx) == errNodeTimeout
	for i, a := range t.answers {
		if a != unanswered {
			continue
		}
		err := noReply(timeout, ctx.Err())
		if own {
			c.failing[i].Store(&err)
		} else {
			err = fmt.Errorf("not waited for, the caller's context ended: %w", ctx.Err())
		}
		if t.took != nil {
			t.took[i] = timeout
		}
		t.fail(c, i, err)
	}
}
