// The fan-out: an operation's calls to every node at once, each under the
// node timeout, and the tally of their answers until the outcome is known.
// The stop conditions and the arithmetic that judges a tally: quorum.go.

package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/internal/nodeio"
)

// Answer is one node's part in an operation.
type Answer uint8

const (
	Unanswered Answer = iota // not waited for: the outcome was known before
	Holds                    // the node holds our token after the operation
	HoldsNot                 // the node certainly does not hold our token
	Failed                   // an error or no reply in time: it may hold our token
)

// Tally is what one fan-out learned from the nodes.
type Tally struct {
	Answers []Answer        // by node index
	Replies []nodeio.Reply  // by node index: what a node answered (a failed one's script too, when it ran: WithReplicaAck)
	Yes     int             // nodes that answered holds
	No      int             // nodes that answered holdsNot
	NotYes  int             // nodes that answered holdsNot, failed or did not answer
	Errs    []error         // a *NodeError for every failed or unanswered node
	Broken  int             // nodes that failed with an error retrying cannot cure (ErrMisconfigured)
	Took    []time.Duration // by node: from the fan-out's start to its reply; nil without an Observer
	Begun   time.Time       // when the fan-out began waiting for replies
	LastAt  time.Duration   // from begun to the last reply without an error
	Unsent  []bool          // by node, when a call was never sent (see notSent); nil when none was
	// Usual is how long after begun the slowest node about as fast as the
	// quorum usually answers (Engine.UsualReply): WithGrace waits for it
	Usual time.Duration
	// graceEnd, once set by a stop condition (see withGrace), is when
	// FanOut returns, decided, without waiting for the nodes yet to answer
	GraceEnd time.Time
}

type nodeReply struct {
	node    int
	reply   nodeio.Reply
	err     error
	skipped bool          // not contacted: tells nothing about the node
	took    time.Duration // from the call's sending to its end
}

// Settlement tells when each node's call of one operation has returned, or
// its deadline has passed. The zero value is settled.
type Settlement struct {
	Done      []chan struct{} // by node, closed when its call returns
	Deadlines []time.Time     // by node: a call that first waited for the call before it has its own timeout after that one's deadline
}

// Out reports whether node i's call has not returned yet.
func (s Settlement) Out(i int) bool {
	if s.Done == nil {
		return false
	}
	select {
	case <-s.Done[i]:
		return false
	default:
		return true
	}
}

// pending reports whether node i's call has neither returned nor passed
// its deadline.
func (s Settlement) pending(i int) bool {
	return s.Out(i) && realTime.Now().Before(s.Deadlines[i])
}

// overdue reports whether node i's call is still out after its deadline:
// the node is frozen, cut off or down.
func (s Settlement) overdue(i int) bool {
	return s.Out(i) && realTime.Now().After(s.Deadlines[i])
}

// WaitNode blocks until node i's call has returned or its deadline passed.
func (s Settlement) WaitNode(i int) {
	if !s.Out(i) {
		return
	}
	t := realTime.NewTimer(realTime.Until(s.Deadlines[i]))
	defer t.Stop()
	select {
	case <-s.Done[i]:
	case <-t.Chan():
	}
}

// Wait blocks until every node's call has returned or passed its
// deadline, or ctx ends; it reports whether ctx is still going.
func (s Settlement) Wait(ctx context.Context) bool {
	for i := range s.Done {
		if !s.Out(i) {
			continue
		}
		t := realTime.NewTimer(realTime.Until(s.Deadlines[i]))
		select {
		case <-s.Done[i]:
		case <-t.Chan():
		case <-ctx.Done():
			t.Stop()
			return false
		}
		t.Stop()
	}
	return ctx.Err() == nil
}

// FanOut runs op on every node at once, each under the same per-node
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
func (c *Engine) FanOut(ctx context.Context, tm Terms, stop func(*Tally) bool, skip []bool, after Settlement, op nodeio.Op) (Tally, Settlement) {
	f := c.prepare(ctx, tm, stop, skip, op)
	f.sendAll(skip, after)
	f.collect(nil)
	return f.t, f.settled
}

// FanOutEarly is FanOut that also returns as soon as early says the
// outcome is known, with the fan whose rest hears the nodes yet to
// answer; the fan is nil when stop ended it, and after a first contact
// (which identifies the nodes' servers: see prepare) of an acquire (Shape
// Grant; a hand-off does not return early at all). An extend or renewal of a lock already granted returns early on
// a first contact too: its lock had a quorum of distinct servers (see
// identity.go), and only the identified nodes' replies count; waiting for
// a slow node not yet identified would cost a renewal all its time. Its
// calls are sent under the node timeout alone, not ctx: a caller that ends
// ctx once the operation returned must not keep the calls still queued
// from being sent.
func (c *Engine) FanOutEarly(ctx context.Context, tm Terms, stop, early func(*Tally) bool, after Settlement, op nodeio.Op) (Tally, Settlement, *Fan) {
	f := c.prepare(ctx, tm, stop, nil, op)
	if f.first && op.Shape == nodeio.Grant || len(c.nodes) == 1 { // a grant waits: see prepare
		early = nil
	} else {
		f.ctx = f.io
	}
	f.sendAll(nil, after)
	if f.collect(early) {
		return f.t, f.settled, nil
	}
	return f.t, f.settled, f
}

// prepare returns the fan of op to the nodes (see FanOut): its sendAll
// sends the calls, and its collect tallies the replies.
func (c *Engine) prepare(ctx context.Context, tm Terms, stop func(*Tally) bool, skip []bool, op nodeio.Op) *Fan {
	timeout := tm.Timeout
	deadline := realTime.Now().Add(timeout)
	first := false
	if !c.idents.all.Load() {
		// First contact: the nodes' servers are identified alongside the
		// calls (see identity.go), and a call that grants or keeps a lock
		// waits for every node not known to be failing, so that two nodes
		// on one server are found before a lock is granted.
		c.startIdentifying(skip, deadline)
		first = true
		if inner := stop; inner != nil && op.Holds {
			stop = func(t *Tally) bool { return inner(t) && !c.Awaits(t, Settlement{}) }
		}
	}
	// A node nothing is known of yet gets the longest timeout (see
	// nodeTimeout), for a first contact over a slow network, but only until
	// another node answers: from then on the base timeout, so that a node
	// that hangs from the start costs no more than that.
	var unknownCut time.Time
	if c.anyUnknown() {
		unknownCut = realTime.Now().Add(min(tm.Base, timeout))
	}
	if len(c.nodes) > 1 {
		op.Share() // one command for every node
	}
	io, cancelIO := context.WithDeadlineCause(context.WithoutCancel(ctx), deadline, ErrNodeTimeout)
	opCtx, cancel := io, cancelIO // a caller that cannot end the operation sooner
	if ctx.Done() != nil {
		opCtx, cancel = context.WithDeadlineCause(ctx, deadline, ErrNodeTimeout)
	}
	f := &Fan{c: c, ctx: opCtx, io: io, cancel: cancel, cancelIO: cancelIO, timeout: timeout, base: tm.Base, deadline: deadline, op: op,
		replies: make(chan nodeReply, len(c.nodes)), stop: stop, first: first, end: opCtx, unknownCut: unknownCut}
	return f
}

// anyUnknown reports whether some node has neither answered nor timed out
// yet. A node once known stays known.
func (c *Engine) anyUnknown() bool {
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

// Fan is one operation's calls to the nodes, op on each, and their
// replies. It notes which nodes time out (Engine.failing), and calls cancel
// once every call has returned. ctx is the operation's (see lateIO); io,
// the node timeout alone, is what a sent call runs under, not ctx: a call
// cut when the caller gives up could land after the operation's next call
// there (on another connection) and leave a key until its ttl. The
// exception: a lone node whose client cuts calls at their deadline.
type Fan struct {
	c        *Engine
	ctx, io  context.Context
	cancel   context.CancelFunc // ctx's: with cancelIO, frees the timers once every call has returned
	cancelIO context.CancelFunc // io's (io is ctx too when the caller's context cannot end)
	timeout  time.Duration
	base     time.Duration // see FanOut's unknownCut
	deadline time.Time
	op       nodeio.Op
	replies  chan nodeReply
	running  atomic.Int32 // calls not yet returned
	// buf holds the settlement's slices (send) for up to 8 nodes, so that
	// a fan-out's pieces come in one allocation
	buf struct {
		done      [8]chan struct{}
		deadlines [8]time.Time
		calls     [8]batchedCall
	}
	settled Settlement    // its calls' (sendAll)
	calls   []batchedCall // by node, with batching

	// What collect needs, from one call of it to the next (see rest).
	end        context.Context // what ends the count: ctx, then io (rest)
	stop       func(*Tally) bool
	first      bool      // a first contact: see prepare
	unknownCut time.Time // see fanOut
	t          Tally
	received   int
	grace      <-chan time.Time // set once the outcome is known
	cut        <-chan time.Time // see FanOut's unknownCut
	stops      [2]func() bool   // the two timers'
}

// sendAll makes the calls of f to every node not skipped, each after the
// node's call of the operation before (after), sets their settlement,
// and starts the tally.
func (f *Fan) sendAll(skip []bool, after Settlement) {
	c := f.c
	n := len(c.nodes)
	settled := Settlement{Done: f.buf.done[:0], Deadlines: f.buf.deadlines[:0]}
	if n > len(f.buf.done) {
		settled = Settlement{Done: make([]chan struct{}, 0, n), Deadlines: make([]time.Time, 0, n)}
	}
	settled.Done, settled.Deadlines = settled.Done[:n], settled.Deadlines[:n]
	f.settled = settled // its elements are set below, each before its call
	f.calls = f.buf.calls[:]
	if n > len(f.calls) {
		f.calls = make([]batchedCall, n)
	}
	f.running.Store(int32(n))
	for i, nd := range c.nodes {
		settled.Done[i] = make(chan struct{})
		settled.Deadlines[i] = f.deadline
		if !nd.IO.Batched() && after.pending(i) {
			// This call waits for the one before; the next operation's
			// must not give up on it before it had its own timeout.
			settled.Deadlines[i] = after.Deadlines[i].Add(realTime.Until(f.deadline))
		}
		if skip != nil && skip[i] {
			// Not contacted: the node's last call is still the one
			// before, which the next operation's call there must follow.
			if after.Done != nil {
				settled.Done[i], settled.Deadlines[i] = after.Done[i], after.Deadlines[i]
			} else {
				close(settled.Done[i])
			}
			f.deliver(nodeReply{node: i, skipped: true})
			continue
		}
		c.Calls.Add()
		f.call(i, nd, settled, after)
	}
	f.t = NewTally(n, c.cfg.Timed)
	f.t.Usual = c.UsualReply()
	f.cut, f.stops[0] = firesAt(f.unknownCut)
}

// call makes node i's call: inline for a lone node whose client cuts calls
// at their deadline, through the node's pipe, or after the node's last.
func (f *Fan) call(i int, nd Node, settled, after Settlement) {
	begun := f.deadline.Add(-f.timeout)
	switch {
	case nd.Info.CutsAtDeadline && len(f.c.nodes) == 1:
		// No quorum to return early with: the call runs here.
		r := nd.IO.Run(f.ctx, f.op, f.timeout)
		if r.Err != nil && f.ctx.Err() != nil && context.Cause(f.ctx) != ErrNodeTimeout {
			r.Err = fmt.Errorf("%w: %w", ErrCutByCaller, r.Err)
		}
		f.reply(settled, nodeReply{node: i, reply: r.Reply, err: r.Err, took: realTime.Since(begun)})
	case nd.IO.Batched():
		f.calls[i] = batchedCall{f: f, node: i}
		nd.IO.Submit(nodeio.Call{Ctx: f.ctx, IO: f.io, Timeout: f.timeout, Op: f.op, Reply: &f.calls[i]})
	default:
		go f.callAfter(i, nd, settled, after)
	}
}

// batchedCall is node i's call of a fan-out through the node's pipe: it
// takes the reply.
type batchedCall struct {
	f    *Fan
	node int
}

func (b *batchedCall) Reply(r nodeio.Result) {
	f := b.f
	f.reply(f.settled, nodeReply{node: b.node, reply: r.Reply, err: r.Err, took: realTime.Since(f.deadline.Add(-f.timeout))})
}

// callAfter makes node i's call once the node's call before has returned
// (a Client without batching).
func (f *Fan) callAfter(i int, nd Node, settled, after Settlement) {
	callIO := f.io
	if dl := settled.Deadlines[i]; !dl.Equal(f.deadline) {
		// Its own timeout after the call before: in order, in the background.
		var cancelCall context.CancelFunc
		callIO, cancelCall = context.WithDeadline(context.WithoutCancel(f.ctx), dl)
		defer cancelCall()
	}
	after.WaitNode(i)
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
	r := nd.IO.Run(callIO, f.op, f.timeout)
	f.reply(settled, nodeReply{node: i, reply: r.Reply, err: r.Err, took: realTime.Since(sent)})
}

// reply takes node i's reply (r): it settles the node's call, notes what
// the reply tells of the node, and delivers it once the node's server is
// identified (a reply counts only then).
func (f *Fan) reply(settled Settlement, r nodeReply) {
	c := f.c
	close(settled.Done[r.node])
	c.Calls.Done()
	c.NoteReply(r.node, r.err, r.took, f.timeout)
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
func (f *Fan) deliver(r nodeReply) {
	f.replies <- r
	if f.running.Add(-1) == 0 {
		f.cancel() // every call has returned: free the timers
		f.cancelIO()
	}
}

// collect counts the replies until f.stop says enough, every node has
// answered, or f.end ends (the operation's deadline, after timeout), and
// reports true then, its timers stopped; or until early (which may be nil)
// says the outcome is known, and reports false: see rest.
func (f *Fan) collect(early func(*Tally) bool) bool {
	for f.received < len(f.c.nodes) {
		if f.stop != nil && f.stop(&f.t) {
			f.t.failFailing(f.c)
			break
		}
		if early != nil && early(&f.t) {
			return false
		}
		if f.wait() {
			break
		}
	}
	for _, stop := range f.stops {
		if stop != nil {
			stop()
		}
	}
	return true
}

// wait takes the next reply, or the next timer of collect, and reports
// whether that ended the count. At the unknown cut (see FanOut), if a node
// has answered, the nodes nothing is known of that have not answered count
// as failed.
func (f *Fan) wait() (over bool) {
	c, t := f.c, &f.t
	if f.grace == nil && !t.GraceEnd.IsZero() {
		f.grace, f.stops[1] = firesAt(t.GraceEnd)
	}
	select {
	case r := <-f.replies:
		t.record(c, r)
		f.received++
	case <-f.grace:
		// stop says so too, unless it waits for more than the grace
		// (a first contact: see FanOut); then the replies decide.
		if f.stop(t) {
			t.failFailing(c)
			return true
		}
	case <-f.cut:
		f.cut = nil
		if t.Yes+t.No > 0 {
			t.failUnknown(c, f.base)
		}
	case <-f.end.Done():
		// Replies that came in together with the deadline still count.
		t.recordWaiting(c, f.replies, len(c.nodes)-f.received)
		t.failUnanswered(c, f.timeout, f.end)
		return true
	}
	return false
}

// Rest hears the replies that a fan-out returned early (fanOutEarly) left
// out, under the node timeout alone (the caller's context may end once the
// operation returned), until its stop says enough, and returns the whole
// tally. Only fanOutEarly's caller may call it, once, and it must not read
// the tally fanOutEarly returned after.
func (f *Fan) Rest() Tally {
	f.end = f.io
	return f.Whole()
}

// Whole is rest for fanOutEarly's caller, which waits for it: under the
// operation's context still.
func (f *Fan) Whole() Tally {
	f.collect(nil)
	return f.t
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
func (t *Tally) recordWaiting(c *Engine, replies <-chan nodeReply, left int) {
	for ; left > 0; left-- {
		select {
		case r := <-replies:
			t.record(c, r)
		default:
			return
		}
	}
}

// UsualReply is how long the slowest node about as fast as a quorum
// usually takes to answer: the longest usual reply (rtt.Estimate.Usual)
// among the nodes not failing whose usual reply is within twice the
// quorum's (the q-th shortest) and graceFloor. It follows the round trips
// the Client sees, which a loaded machine lengthens for every node alike;
// a node much farther than the quorum, or failing, is not counted.
func (c *Engine) UsualReply() time.Duration {
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
	within := AddSat(2*usual[c.quorum-1], GraceFloor)
	longest := time.Duration(0)
	for _, u := range usual {
		if u <= within {
			longest = u
		}
	}
	return longest
}

func NewTally(n int, timed bool) Tally {
	t := Tally{Answers: make([]Answer, n), Replies: make([]nodeio.Reply, n), Begun: realTime.Now()}
	if timed {
		t.Took = make([]time.Duration, n)
	}
	return t
}

// record counts one node's reply, unless the node was already counted as
// failed without it (failUnknown).
func (t *Tally) record(c *Engine, r nodeReply) {
	if t.Answers[r.node] != Unanswered {
		return
	}
	if t.Took != nil {
		t.Took[r.node] = realTime.Since(t.Begun)
	}
	if r.err == nil && !r.skipped {
		t.LastAt = realTime.Since(t.Begun)
	}
	// With an error, the script's reply when it ran and its replicas did
	// not confirm it (WithReplicaAck); zero otherwise.
	t.Replies[r.node] = r.reply
	switch {
	case r.err != nil:
		t.fail(c, r.node, r.err)
	case r.reply.Held || r.reply.Batch != nil:
		// A Batch: the node answered, and what it holds is in its reply,
		// lock by lock (see the root package's renewal.go).
		t.Answers[r.node] = Holds
		t.Yes++
	default:
		t.Answers[r.node] = HoldsNot
		t.No++
		t.NotYes++
	}
}

// fail counts node i as failed with err. A node that fails for a reason
// retrying cannot cure is counted as broken.
func (t *Tally) fail(c *Engine, i int, err error) {
	t.Answers[i] = Failed
	t.NotYes++
	if errors.Is(err, nodeio.ErrNotSent) {
		if t.Unsent == nil {
			t.Unsent = make([]bool, len(t.Answers))
		}
		t.Unsent[i] = true
	}
	err = misconfigured(err)
	if errors.Is(err, ErrMisconfigured) {
		t.Broken++
	}
	t.Errs = append(t.Errs, c.NodeError(i, err))
}

// OutOfReach reports whether so many nodes are broken (see fail) that no
// quorum of q can form.
func (t *Tally) OutOfReach(q int) bool {
	return len(t.Answers)-t.Broken < q
}

// failFailing counts the nodes not waited for that are failing as failed,
// with the error of their last call.
func (t *Tally) failFailing(c *Engine) {
	for i, a := range t.Answers {
		if a != Unanswered {
			continue
		}
		if last := c.failing[i].Load(); last != nil {
			if t.Took != nil {
				t.Took[i] = realTime.Since(t.Begun)
			}
			t.fail(c, i, fmt.Errorf("not waited for, failing since its last call: %w", *last))
		}
	}
}

// failUnknown counts the nodes yet to answer of which nothing is known as
// failed, having had base to answer, and notes them as failing.
func (t *Tally) failUnknown(c *Engine, base time.Duration) {
	for i, a := range t.Answers {
		if _, known := c.rtts[i].Wait(); a != Unanswered || known {
			continue
		}
		err := noReply(base, context.DeadlineExceeded)
		c.failing[i].Store(&err)
		c.rtts[i].TimedOut(base)
		if t.Took != nil {
			t.Took[i] = base
		}
		t.fail(c, i, err)
	}
}

// failUnanswered counts the nodes that did not answer before ctx, the
// operation's, ended as failed, and notes them as failing when the node
// timeout ended it: a node the caller did not wait for tells nothing.
func (t *Tally) failUnanswered(c *Engine, timeout time.Duration, ctx context.Context) {
	own := context.Cause(ctx) == ErrNodeTimeout
	for i, a := range t.Answers {
		if a != Unanswered {
			continue
		}
		err := noReply(timeout, ctx.Err())
		if own {
			c.failing[i].Store(&err)
		} else {
			err = fmt.Errorf("not waited for, the caller's context ended: %w", ctx.Err())
		}
		if t.Took != nil {
			t.Took[i] = timeout
		}
		t.fail(c, i, err)
	}
}
