package nodeio

import (
	"context"
	"sync"
	"time"

	"github.com/quorumlock/redlock/internal/realclock"
)

// pipe sends a node's calls, one send at a time (see the package doc).
type pipe struct {
	n        *Node
	mu       sync.Mutex
	queue    []Call
	spare    []Call         // a finished batch's slice, reused for the next queue
	busy     bool           // a sender goroutine is running
	out      map[string]int // the keys of the acquires and hand-offs being sent, by every sender: see nextBatch
	sender   uint64         // which sender is the current one
	deadline time.Time      // of the batch in flight; zero when it has none
	idle     bool           // the sender waits for a call (see linger)
	wake     chan struct{}  // Submit's word to the idle sender
	timer    *time.Timer    // ends the idle sender's wait
}

// linger is how long a sender whose queue has emptied waits for the next
// call before it ends: a call made meanwhile is handed to it rather than
// to a new goroutine, whose start (and stack growth through the client's
// code) costs about as much as the rest of the call's work in the
// library. A Client has no Close: an idle sender ends by itself.
var linger = 100 * time.Millisecond

// Submit queues c for the node's pipe (the node must be batched). It never
// blocks: the first call on an idle node starts a sender goroutine, which
// sends what queues behind it and, once the queue is empty, waits for the
// next call (linger) and then ends. A send past its deadline (a hung
// connection) does not hold up the calls behind it: the next call starts
// a new sender.
func (n *Node) Submit(c Call) {
	p := n.p
	p.mu.Lock()
	p.queue = append(p.queue, c)
	if p.busy && (p.deadline.IsZero() || realclock.Now().Before(p.deadline)) {
		p.mu.Unlock()
		return
	}
	p.busy = true
	p.deadline = time.Time{} // until the sender takes its batch
	if p.idle {
		p.idle = false
		p.mu.Unlock()
		p.wake <- struct{}{} // never blocks: one word per wait
		return
	}
	p.sender++
	id := p.sender
	p.mu.Unlock()
	go p.drain(id)
}

// Queued returns how many calls wait behind the send in flight, and
// whether a send is in flight or a call queued (for tests).
func (n *Node) Queued() (queued int, busy bool) {
	if n.p == nil {
		return 0, false
	}
	n.p.mu.Lock()
	defer n.p.mu.Unlock()
	return len(n.p.queue), n.p.busy || len(n.p.queue) > 0
}

func (p *pipe) drain(id uint64) {
	for {
		p.mu.Lock()
		if p.sender != id { // left behind by Submit
			p.mu.Unlock()
			return
		}
		// What is not sent now waits for the next send: see nextBatch.
		batch, rest := nextBatch(p.queue, p.spare[:0], p.out)
		p.queue, p.spare = rest, nil
		if len(batch) == 0 {
			// The queue is empty, or every call in it waits for a key out in
			// an overdue send, whose end drains the queue again.
			p.spare = batch
			p.busy = false
			if len(p.queue) > 0 || !p.await() {
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			continue
		}
		p.keysOut(batch)
		p.deadline = sendDeadline(batch)
		p.mu.Unlock()

		p.send(batch) // gives their keys back as it answers the calls

		clear(batch) // drop the references to finished calls
		p.mu.Lock()
		p.spare = batch
		if p.sender != id && !p.busy && len(p.queue) > 0 {
			// Overtaken while this send was out, and the sender since has
			// stopped for calls that waited on its keys: drain on.
			p.busy = true
			p.sender++
			id = p.sender
		}
		p.mu.Unlock()
	}
}

// await waits, idle, up to linger for Submit to hand the sender a call,
// and reports whether it did. Called with p.mu held, which it gives up
// while it waits.
func (p *pipe) await() bool {
	p.idle = true
	if p.wake == nil {
		p.wake = make(chan struct{}, 1)
		p.timer = realclock.NewTimer(linger)
	} else {
		p.timer.Reset(linger)
	}
	p.mu.Unlock()
	select {
	case <-p.wake:
		p.timer.Stop()
		p.mu.Lock()
		return true
	case <-p.timer.C:
	}
	p.mu.Lock()
	if p.idle { // nothing came
		p.idle = false
		return false
	}
	p.mu.Unlock()
	<-p.wake // handed a call as the wait ended: its word is on its way
	p.mu.Lock()
	return true
}

// keysOut counts the keys of the calls of batch that take a key as out:
// they are being sent. Called with p.mu held.
func (p *pipe) keysOut(batch []Call) {
	for _, c := range batch {
		if !c.Op.Takes {
			continue
		}
		if p.out == nil {
			p.out = map[string]int{}
		}
		for _, k := range c.Op.Keys {
			p.out[k]++
		}
	}
}

// answer replies to c, a call of a batch being sent, once its keys are
// back (see keysOut).
func (p *pipe) answer(c Call, r Result) {
	if c.Op.Takes {
		p.mu.Lock()
		for _, k := range c.Op.Keys {
			if p.out[k]--; p.out[k] == 0 {
				delete(p.out, k)
			}
		}
		p.mu.Unlock()
	}
	c.Reply.Reply(r)
}

// nextBatch splits queue into the calls sent next, as one pipeline, and
// the rest, which keep their order (appended to spare). A pipeline holds
// no two calls on one key: a call answered NOSCRIPT is resent after the
// others, and a later call on its key would then run first (a failed
// attempt's delete before its SET). So a call goes now only when no
// earlier call on its keys is queued and, if it takes away what was ours,
// no acquire or hand-off on them is out in an overdue send (landing first,
// it would leave that key until its ttl; other calls may land late). Calls
// on other keys go past it, so that a busy key holds up no others. A write
// of a hold whose operation has ended goes now: it is answered unsent.
func nextBatch(queue, spare []Call, out map[string]int) (batch, rest []Call) {
	if len(queue) < 2 && len(out) == 0 {
		return queue, spare
	}
	taken := make(map[string]struct{}, 2*len(queue))
	batch = queue[:0] // filtered in place: each call is read before its slot is reused
	rest = spare
	for _, c := range queue {
		if c.Op.Holds && c.Ctx.Err() != nil {
			batch = append(batch, c)
			continue
		}
		free := true
		for _, k := range c.Op.Keys {
			if _, seen := taken[k]; seen || !c.Op.Holds && out[k] > 0 {
				free = false
			}
			taken[k] = struct{}{}
		}
		if free {
			batch = append(batch, c)
		} else {
			rest = append(rest, c)
		}
	}
	clear(queue[len(batch):]) // moved to rest
	return batch, rest
}

// send sends batch, alone or as a pipeline, and replies to every call.
func (p *pipe) send(batch []Call) {
	live := batch[:0] // filtered in place: each call is read before its slot is reused
	for _, c := range batch {
		if err := c.Ctx.Err(); err != nil {
			io, cancel, send := LateIO(c.Op, c.IO, c.Timeout)
			if !send {
				p.answer(c, Result{Err: NotSent(err)})
				continue
			}
			defer cancel()
			c.IO = io
		}
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		p.answer(c, p.n.Run(c.IO, c.Op, c.Timeout))
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	ops := make([]Op, len(live))
	for i, c := range live {
		ops[i] = c.Op
	}
	res := make([]Result, len(live))
	p.n.exec(ctx, ops, res, maxTimeout(live))
	for i, c := range live {
		p.answer(c, res[i])
	}
}

// batchContext is the context a pipeline is sent under: the values of the
// first call's context (for the client's hooks), no cancellation (cancelling
// a go-redis command closes its connection, and the other calls still need
// their replies), and the latest of the calls' deadlines.
func batchContext(batch []Call) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(batch[0].IO)
	if d := latestDeadline(batch); !d.IsZero() {
		return context.WithDeadline(ctx, d)
	}
	return ctx, func() {}
}

// maxTimeout is the longest of the calls' timeouts.
func maxTimeout(batch []Call) time.Duration {
	var d time.Duration
	for _, c := range batch {
		d = max(d, c.Timeout)
	}
	return d
}

// sendDeadline is when the send of batch is overdue: the latest of its
// calls' deadlines, a late delete's counted from now (see LateIO), so that
// late deletes are not taken for a hung send; zero when one has none.
func sendDeadline(batch []Call) time.Time {
	latest := latestDeadline(batch)
	if latest.IsZero() {
		return latest
	}
	now := realclock.Now()
	for _, c := range batch {
		if d, _ := c.IO.Deadline(); !c.Op.Holds && (c.Ctx.Err() != nil || !now.Before(d)) {
			if l := now.Add(c.Timeout); l.After(latest) {
				latest = l
			}
		}
	}
	return latest
}

// latestDeadline is the latest of the calls' deadlines, or zero when one of
// them has none.
func latestDeadline(batch []Call) time.Time {
	var latest time.Time
	for _, c := range batch {
		d, ok := c.IO.Deadline()
		if !ok {
			return time.Time{}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return latest
}
