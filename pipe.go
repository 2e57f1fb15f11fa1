package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/reply"
)

// Calls bound for one node go through its pipe. A call that finds the node
// idle is sent at once, alone, as a plain EVALSHA: nothing waits for company.
// Calls that arrive while a send to the node is in flight queue, and the
// moment it returns they all go together as one pipeline, one round trip for
// all of them. Under load the batches grow by themselves; with no
// concurrency every call is sent alone, as without the pipe.
//
// One send at a time per node also keeps each node's calls in the order
// they were made, so a lock's later operation does not overtake its earlier
// one there (a late SET can not land after the release's DEL). A write of a
// hold still queued when its deadline passes or its context ends is
// answered with that error and never sent: a write that can no longer
// count is not made. A release or a delete is sent all the same (lateIO).
//
// A send whose reply has not come by its deadline (a hung connection, in a
// go-redis client that ignores context deadlines) stops holding up the
// queue: the next call starts a new sender. A call that takes away what
// was ours (a release, a failed attempt's delete) still waits for an
// acquire or hand-off on its keys in the overdue send, so that it is not
// sent over another connection while that one is out: landing first, it
// would leave the acquire's key behind until its ttl. Every other call
// goes on (an extend landing late is harmless: it extends nothing that
// was released). (A send the client gives up on at its deadline may still be in
// transit when the next one goes; landing late, its write holds the key
// until its ttl, as in any Redis client.)

// nodeOp is one node's share of an operation: a script and its arguments.
// The script's result is positive when the node holds the token once it has
// run (for a fenced acquire, the node's fencing counter), zero when it does
// not.
//
// An op that is many (a batch of renewals, see renewal.go) returns one such
// number per lock; its value is then how many of them are positive.
type nodeOp struct {
	script *redis.Script
	keys   []string
	args   []any
	many   bool
	// holds: the op writes a hold (an acquire, extend, renewal, hand-off
	// or fencing raise), which, with WithReplicaAck, counts only once the
	// node's replicas confirm it (see replicaAck)
	holds bool
	// takes: the op may take a key that was not ours (an acquire, a
	// hand-off); a later call that takes away what was ours is not sent
	// while it is out (see nextBatch)
	takes bool
	// find is where in args (from 1) the token is that the op looks for on
	// the node (a release's, a delete's, a hand-off's holder's), 0 for
	// none; next is the token a hand-off writes. A node that was never
	// sent a hand-off may hold the holder's token in place of next's (see
	// standIns).
	find int
	next string
}

// run sends op alone: EVALSHA when the node is known to hold the script,
// EVAL when it is not known to (the first call of each script, which loads
// it: one round trip rather than a NOSCRIPT answer and a second), or when
// it answered NOSCRIPT (it restarted, or its scripts were flushed); with
// ack, followed on the same connection by WAIT. An EVAL of an op that
// writes no hold is sent even when the NOSCRIPT answer came after ctx's
// deadline, with timeout from then (see lateIO).
func (op nodeOp) run(ctx context.Context, rdb redis.UniversalClient, known *scripts, ack replicaAck, timeout time.Duration) (int64, []int64, error) {
	if !ack.on() || !op.holds {
		sha := known.has(op.script)
		cmd := op.script.Eval
		if sha {
			cmd = op.script.EvalSha
		}
		reply := cmd(ctx, rdb, op.keys, op.args...)
		if sha && noScript(reply.Err()) {
			known.forget(op.script)
			again := ctx
			if ctx.Err() != nil {
				late, cancel, send := lateIO(op, ctx, timeout)
				if !send {
					// Not a node that keeps no scripts: its NOSCRIPT came
					// after the deadline, and the write is not made.
					return 0, nil, notResent(ctx.Err())
				}
				defer cancel()
				again = late
			}
			reply = op.script.Eval(again, rdb, op.keys, op.args...)
		}
		known.note(op.script, reply.Err())
		return op.result(reply)
	}
	var cmd *redis.Cmd
	var wait *redis.Cmd
	send := func(sha bool) {
		_, _ = rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			if sha {
				cmd = op.script.EvalSha(ctx, pl, op.keys, op.args...)
			} else {
				cmd = op.script.Eval(ctx, pl, op.keys, op.args...)
			}
			wait = ack.wait(ctx, pl)
			return nil
		})
	}
	sha := known.has(op.script)
	send(sha)
	if sha && noScript(cmd.Err()) {
		known.forget(op.script)
		send(false)
	}
	known.note(op.script, cmd.Err())
	v, vs, err := op.result(cmd)
	if err == nil && v > 0 {
		err = ack.check(wait)
	}
	return v, vs, err
}

// scripts is the set of scripts a node is known to hold: it ran them (as
// EVAL or EVALSHA) since it last answered NOSCRIPT. A nil *scripts knows
// none.
type scripts struct{ m sync.Map } // *redis.Script → struct{}

func (s *scripts) has(sc *redis.Script) bool {
	if s == nil {
		return false
	}
	_, ok := s.m.Load(sc)
	return ok
}

// note records what the node's answer to a call of sc (err) tells: any
// answer but NOSCRIPT shows that it now holds the script.
func (s *scripts) note(sc *redis.Script, err error) {
	if s != nil && (err == nil || reply.IsReply(err) && !noScript(err)) && !s.has(sc) {
		s.m.Store(sc, struct{}{})
	}
}

func (s *scripts) forget(sc *redis.Script) {
	if s != nil {
		s.m.Delete(sc)
	}
}

// noScript reports whether err is the node's answer that it does not know
// the script (NOSCRIPT). It checks for nil first: go-redis's
// HasErrorPrefix allocates on every call, and nearly every reply is nil.
func noScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// notResent is the error of a write of a hold whose EVALSHA was answered
// NOSCRIPT after its deadline (cause): its EVAL is not sent, and the node is
// not taken for one that keeps no scripts (ErrMisconfigured): it was slow.
func notResent(cause error) error {
	return fmt.Errorf("not sent again after NOSCRIPT: %w", cause)
}

// result reads op's reply.
func (op nodeOp) result(cmd *redis.Cmd) (int64, []int64, error) {
	if !op.many {
		v, err := cmd.Int64()
		return v, nil, err
	}
	values, err := cmd.Int64Slice()
	if err == nil && len(values) != len(op.keys) {
		err = fmt.Errorf("redlock: %d results for %d keys", len(values), len(op.keys))
	}
	if err != nil {
		return 0, nil, err
	}
	var held int64
	for _, v := range values {
		if v > 0 {
			held++
		}
	}
	return held, values, nil
}

// call is one op on its way to one node; reply is called once with the
// result (values only for an op that is many). ctx is the operation's:
// once it ends, a call that writes a hold is not sent (see lateIO). io is
// what the call runs under once sent (see Client.send), for up to timeout.
type call struct {
	ctx     context.Context
	io      context.Context
	timeout time.Duration
	op      nodeOp
	reply   func(value int64, values []int64, err error)
}

// lateIO is what a call whose operation ended (ctx) before it was sent
// runs under, and whether it is sent at all. A write of a hold that can no
// longer count is not made. Any other call (a release, a failed attempt's
// delete, leaving a line or a queue) is still sent, with timeout from now:
// it only takes away what was ours, and a node it does not reach keeps our
// key until its ttl. cancel frees the context.
func lateIO(op nodeOp, io context.Context, timeout time.Duration) (_ context.Context, cancel context.CancelFunc, send bool) {
	if op.holds {
		return nil, nil, false
	}
	io, cancel = context.WithTimeout(context.WithoutCancel(io), timeout)
	return io, cancel, true
}

// standIns are the hand-offs of locks a node was never sent (their
// operation ended while they queued behind a slow call there): the node
// may still hold the token a run of hand-offs began with, in place of the
// current holder's. A later release, delete or hand-off of the current
// holder's token is sent with the token the node may hold instead, so that
// it does not stay until its ttl. Every token of the run was our own and
// given up along it, so taking it away takes nothing from anyone. The
// hand-offs are noted in any order (a queue answers a call it drops before
// an earlier one that still waits for its key).
type standIns struct {
	mu sync.Mutex
	m  map[string]string // by key and the hand-off's new token: the holder's token it was to replace
}

// dropped notes that op did not run on the node (see unrun).
func (s *standIns) dropped(op nodeOp) {
	if op.next == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil || len(s.m) >= 1<<12 { // a bound: a key it forgets stays until its ttl
		s.m = map[string]string{}
	}
	s.m[op.keys[0]+"\x00"+op.next] = op.args[op.find-1].(string)
}

// unrun reports whether err says that a call did not run on its node: it
// was not sent, or the client gave up on it before it was written (the
// context's own error, where a call cut while it was out fails with the
// network's).
func unrun(err error) bool {
	var cut *net.OpError
	return (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) && !errors.As(err, &cut)
}

// sending returns op as it is sent to the node: with the token the node
// may hold in place of the one op looks for.
func (s *standIns) sending(op nodeOp) nodeOp {
	if op.find == 0 || op.holds && op.next == "" {
		return op // an acquire, an extend: they look for no token of a run
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) == 0 {
		return op
	}
	tok := op.args[op.find-1].(string)
	for {
		from, ok := s.m[op.keys[0]+"\x00"+tok]
		if !ok {
			break
		}
		delete(s.m, op.keys[0]+"\x00"+tok)
		tok = from
	}
	if tok != op.args[op.find-1] {
		op.args = slices.Clone(op.args)
		op.args[op.find-1] = tok
	}
	return op
}

// pipe sends the calls bound for one node.
type pipe struct {
	rdb      redis.UniversalClient
	known    *scripts  // the node's
	stand    *standIns // the node's
	ack      replicaAck
	mu       sync.Mutex
	queue    []call
	spare    []call         // a finished batch's slice, reused for the next queue
	busy     bool           // a sender goroutine is running
	out      map[string]int // the keys of the acquires and hand-offs being sent, by every sender: see nextBatch
	sender   uint64         // which sender is the current one
	deadline time.Time      // of the batch in flight; zero when it has none
}

// submit queues c. It never blocks: the first call on an idle node starts a
// sender goroutine, which goes on sending what queued behind it and ends
// when the queue is empty. A send that is past its deadline (a connection
// that hangs) no longer holds up the calls behind it: the next call starts
// a new sender and the old one ends with its send.
func (p *pipe) submit(c call) {
	p.mu.Lock()
	p.queue = append(p.queue, c)
	if p.busy && (p.deadline.IsZero() || time.Now().Before(p.deadline)) {
		p.mu.Unlock()
		return
	}
	p.busy = true
	p.deadline = time.Time{} // until the new sender takes its batch
	p.sender++
	id := p.sender
	p.mu.Unlock()
	go p.drain(id)
}

func (p *pipe) drain(id uint64) {
	for {
		p.mu.Lock()
		if p.sender != id { // left behind by submit
			p.mu.Unlock()
			return
		}
		// What is not sent now waits for the next send: see nextBatch.
		batch, rest := nextBatch(p.queue, p.spare[:0], p.out)
		p.queue, p.spare = rest, nil
		if len(batch) == 0 {
			// Nothing to send now: the queue is empty, or every call in it
			// waits for a key whose call is still out in an overdue send;
			// that send's end drains the queue again.
			p.spare = batch
			p.busy = false
			p.mu.Unlock()
			return
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

// keysOut counts the keys of the calls of batch that take a key as out:
// they are being sent. Called with p.mu held.
func (p *pipe) keysOut(batch []call) {
	for _, c := range batch {
		if !c.op.takes {
			continue
		}
		if p.out == nil {
			p.out = map[string]int{}
		}
		for _, k := range c.op.keys {
			p.out[k]++
		}
	}
}

// answer replies to c, a call of a batch being sent, once its keys are
// back (see keysOut).
func (p *pipe) answer(c call, v int64, vs []int64, err error) {
	if unrun(err) {
		p.stand.dropped(c.op)
	}
	if c.op.takes {
		p.mu.Lock()
		for _, k := range c.op.keys {
			if p.out[k]--; p.out[k] == 0 {
				delete(p.out, k)
			}
		}
		p.mu.Unlock()
	}
	c.reply(v, vs, err)
}

// nextBatch splits queue into the calls sent next, as one pipeline, and
// the rest, which keep their order (rest is appended to spare). A pipeline
// holds no two calls on one key: within a pipeline, a call the node does
// not know the script of (NOSCRIPT) is sent again after the others have
// run (see send); were a later call on the same key among them, they would
// run out of order there (a failed attempt's delete before its SET, which
// would then stay until its ttl). So a call goes now only when no call
// before it on any of its keys is still queued, nor, for a call that takes
// away what was ours, an acquire or hand-off out (in an overdue send, which
// the queue no longer waits for: see submit); calls on other keys go
// past it, in any order, so that a key many calls wait for (one call per
// round trip) does not hold up the others. A write of a hold whose
// operation has ended goes now: it is answered without being sent, and
// holds no key up.
func nextBatch(queue, spare []call, out map[string]int) (batch, rest []call) {
	if len(queue) < 2 && len(out) == 0 {
		return queue, spare
	}
	taken := make(map[string]struct{}, 2*len(queue))
	batch = queue[:0] // filtered in place: each call is read before its slot is reused
	rest = spare
	for _, c := range queue {
		if c.op.holds && c.ctx.Err() != nil {
			batch = append(batch, c)
			continue
		}
		free := true
		for _, k := range c.op.keys {
			if _, seen := taken[k]; seen || !c.op.holds && out[k] > 0 {
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
func (p *pipe) send(batch []call) {
	live := batch[:0] // filtered in place: each call is read before its slot is reused
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			io, cancel, send := lateIO(c.op, c.io, c.timeout)
			if !send {
				p.answer(c, 0, nil, notSent(err))
				continue
			}
			defer cancel()
			c.io = io
		}
		c.op = p.stand.sending(c.op)
		live = append(live, c)
	}
	switch len(live) {
	case 0:
		return
	case 1:
		c := live[0]
		v, vs, err := c.op.run(c.io, p.rdb, p.known, p.ack, c.timeout)
		p.answer(c, v, vs, err)
		return
	}

	ctx, cancel := batchContext(live)
	defer cancel()
	// With WithReplicaAck, one WAIT after the batch's scripts covers every
	// write of the batch: WAIT confirms all the writes made before it on
	// its connection.
	ack := p.ack.on() && slices.ContainsFunc(live, func(c call) bool { return c.op.holds })
	cmds := make([]*redis.Cmd, len(live))
	wait := p.pipeline(ctx, live, cmds, nil, ack)
	again, dropped, waitAgain := p.resend(ctx, live, cmds, ack)
	for i, c := range live {
		if slices.Contains(dropped, i) {
			p.answer(c, 0, nil, notResent(context.DeadlineExceeded))
			continue
		}
		p.known.note(c.op.script, cmds[i].Err())
		v, vs, err := c.op.result(cmds[i])
		if err == nil && v > 0 && ack && c.op.holds {
			w := wait
			if slices.Contains(again, i) {
				w = waitAgain
			}
			err = p.ack.check(w)
		}
		p.answer(c, v, vs, err)
	}
}

// pipeline sends the calls of live (those of only, when it is not nil) in
// one pipeline, each as EVALSHA when the node is known to have its script,
// as EVAL otherwise (or when resent: only), their commands into cmds, and
// a WAIT after them when ack.
func (p *pipe) pipeline(ctx context.Context, live []call, cmds []*redis.Cmd, only []int, ack bool) (wait *redis.Cmd) {
	_, _ = p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, c := range live {
			switch {
			case only != nil && !slices.Contains(only, i):
			case only == nil && p.known.has(c.op.script):
				cmds[i] = c.op.script.EvalSha(ctx, pl, c.op.keys, c.op.args...)
			default:
				cmds[i] = c.op.script.Eval(ctx, pl, c.op.keys, c.op.args...)
			}
		}
		if ack {
			wait = p.ack.wait(ctx, pl)
		}
		return nil
	})
	return wait
}

// resend sends again, with the script's text, the calls the node answered
// NOSCRIPT (it restarted, or its script cache was flushed): they ran
// nowhere the first time, so nothing runs twice; they do run after the
// calls of the batch that followed them, which are on other keys (see
// nextBatch). When those answers came after the calls' deadline, the
// deletes among them are still sent (see lateIO), and the writes of a hold
// are dropped, answered as they are. It returns the calls resent, those
// dropped, and the resend's WAIT when ack.
func (p *pipe) resend(ctx context.Context, live []call, cmds []*redis.Cmd, ack bool) (again, dropped []int, wait *redis.Cmd) {
	for i, cmd := range cmds {
		if noScript(cmd.Err()) {
			p.known.forget(live[i].op.script)
			again = append(again, i)
		}
	}
	if len(again) > 0 && ctx.Err() != nil {
		again = slices.DeleteFunc(again, func(i int) bool {
			if live[i].op.holds {
				dropped = append(dropped, i)
				return true
			}
			return false
		})
		var late context.CancelFunc
		ctx, late = context.WithTimeout(context.WithoutCancel(ctx), maxTimeout(live))
		defer late()
	}
	if len(again) > 0 {
		wait = p.pipeline(ctx, live, cmds, again, ack)
	}
	return again, dropped, wait
}

// batchContext is the context a pipeline is sent under: the values of the
// first call's context (for the client's hooks), no cancellation (cancelling
// a go-redis command closes its connection, and the other calls still need
// their replies), and the latest of the calls' deadlines.
func batchContext(batch []call) (context.Context, context.CancelFunc) {
	ctx := context.WithoutCancel(batch[0].io)
	if d := latestDeadline(batch); !d.IsZero() {
		return context.WithDeadline(ctx, d)
	}
	return ctx, func() {}
}

// maxTimeout is the longest of the calls' timeouts.
func maxTimeout(batch []call) time.Duration {
	var d time.Duration
	for _, c := range batch {
		d = max(d, c.timeout)
	}
	return d
}

// sendDeadline is when the send of batch is overdue: the latest of its
// calls' deadlines, a late delete's counted from now (it gets a timeout of
// its own, see lateIO), so that a batch of late deletes in flight is not
// taken for a hung send and overtaken by a new sender; zero when a call
// has no deadline.
func sendDeadline(batch []call) time.Time {
	latest := latestDeadline(batch)
	if latest.IsZero() {
		return latest
	}
	now := time.Now()
	for _, c := range batch {
		if d, _ := c.io.Deadline(); !c.op.holds && (c.ctx.Err() != nil || !now.Before(d)) {
			latest = maxTime(latest, now.Add(c.timeout))
		}
	}
	return latest
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// latestDeadline is the latest of the calls' deadlines, or zero when one of
// them has none.
func latestDeadline(batch []call) time.Time {
	var latest time.Time
	for _, c := range batch {
		d, ok := c.io.Deadline()
		if !ok {
			return time.Time{}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return latest
}

// WithBatching turns the batching of concurrent calls on or off. With it,
// a call bound for a node that is idle is sent at once and alone; calls made
// while one is in flight to that node wait for it and then go together as
// one pipeline, so that under load many locks share each round trip. Each
// node then gets one send at a time, in the order the calls were made, and
// a call whose deadline passed while it waited is never sent.
//
// Turn it off for nodes whose client can not pipeline, or to let a node's
// calls use all of its connection pool at once: a hung connection then
// holds up only the calls on it. Without it, though, a call whose caller
// gave up still runs to its answer on a connection of the pool (a call
// once sent is not cut: it could land after the attempt's cleanup), and
// a stream of callers that give up at once (deadlines of a millisecond)
// can hold every connection, so that another caller's call waits for one
// past its node timeout; with batching, a write that can no longer count
// is never sent. Default: on.
func WithBatching(on bool) Option {
	return clientOption(func(c *config) error {
		c.unbatched = !on
		return nil
	})
}
