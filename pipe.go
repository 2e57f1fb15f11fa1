package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/reply"
)

// Calls bound for one node go through its pipe: a call to an idle node is
// sent at once, alone; calls made meanwhile go together as one pipeline
// when it returns. One send at a time per node keeps its calls in order, so
// a late SET cannot land after the release's DEL (docs/algorithm.md,
// "Batching"); lateIO says what is sent once its operation ended, and
// submit how an overdue send is overtaken.

// nodeOp is one node's share of an operation: a script and its arguments.
// Its result is positive when the node holds the token after it (for a
// fenced acquire, the node's fencing counter), else zero; an op that is
// many (renewal.go) answers per lock, and its value counts the positives.
type nodeOp struct {
	script *redis.Script
	keys   []string
	args   []any
	many   bool
	// holds: the op writes a hold (acquire, extend, renewal, hand-off or
	// fencing raise); with WithReplicaAck it counts once replicas confirm it
	holds bool
	// takes: the op may take a key that was not ours (an acquire, a
	// hand-off); see nextBatch
	takes bool
}

// run sends op alone: EVALSHA when the node is known to hold the script,
// else EVAL, which loads it in one round trip (also after NOSCRIPT); with
// ack, followed on the same connection by WAIT. After a NOSCRIPT answered
// past ctx's deadline, the EVAL is sent only as lateIO allows.
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
					// Its NOSCRIPT came after the deadline: see notResent.
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

// scripts is the set of scripts a node is known to hold (it ran them since
// it last answered NOSCRIPT); a nil *scripts knows none.
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

// noScript reports whether err is a NOSCRIPT answer. nil is checked first:
// HasErrorPrefix allocates, and nearly every reply is nil.
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
// result (values only for an op that is many). ctx is the operation's (see
// lateIO); io is what the call runs under once sent, for up to timeout.
type call struct {
	ctx     context.Context
	io      context.Context
	timeout time.Duration
	op      nodeOp
	reply   func(value int64, values []int64, err error)
}

// lateIO is what a call whose operation ended (ctx) before it was sent
// runs under, and whether it is sent at all. A write of a hold that can no
// longer count is not made. Any other call (a release, a delete, leaving a
// line or a queue) is sent with timeout from now: it only takes away what
// was ours, and a node it does not reach keeps our key until its ttl.
func lateIO(op nodeOp, io context.Context, timeout time.Duration) (_ context.Context, cancel context.CancelFunc, send bool) {
	if op.holds {
		return nil, nil, false
	}
	io, cancel = context.WithTimeout(context.WithoutCancel(io), timeout)
	return io, cancel, true
}

// pipe sends the calls bound for one node.
type pipe struct {
	rdb      redis.UniversalClient
	known    *scripts // the node's
	ack      replicaAck
	mu       sync.Mutex
	queue    []call
	spare    []call         // a finished batch's slice, reused for the next queue
	busy     bool           // a sender goroutine is running
	out      map[string]int // the keys of the acquires and hand-offs being sent, by every sender: see nextBatch
	sender   uint64         // which sender is the current one
	deadline time.Time      // of the batch in flight; zero when it has none
}

// submit queues c. It never blocks: the first call on an idle node starts
// a sender goroutine, which sends what queues behind it and ends when the
// queue is empty. A send past its deadline (a hung connection) does not
// hold up the calls behind it: the next call starts a new sender.
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
			// The queue is empty, or every call in it waits for a key out in
			// an overdue send, whose end drains the queue again.
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
// the rest, which keep their order (appended to spare). A pipeline holds
// no two calls on one key: a call answered NOSCRIPT is resent after the
// others, and a later call on its key would then run first (a failed
// attempt's delete before its SET). So a call goes now only when no
// earlier call on its keys is queued and, if it takes away what was ours,
// no acquire or hand-off on them is out in an overdue send (landing first,
// it would leave that key until its ttl; other calls may land late). Calls
// on other keys go past it, so that a busy key holds up no others. A write
// of a hold whose operation has ended goes now: it is answered unsent.
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
	// One WAIT after the batch's scripts covers all its writes: WAIT
	// confirms every write made before it on its connection.
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

// pipeline sends the calls of live (only those of only, when not nil) in
// one pipeline, as EVALSHA when the node is known to have the script and
// as EVAL otherwise or when resent, into cmds, and a WAIT after when ack.
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
// NOSCRIPT: they ran nowhere, so nothing runs twice (they run after the
// batch's later calls, on other keys: see nextBatch). Past the calls'
// deadline, the writes of a hold are dropped, the others sent (lateIO). It
// returns the calls resent, those dropped, and the resend's WAIT when ack.
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
// calls' deadlines, a late delete's counted from now (see lateIO), so that
// late deletes are not taken for a hung send; zero when one has none.
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
