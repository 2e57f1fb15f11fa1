// Package nodeio sends a Client's calls to one node, over any client that
// implements transport.Node: each call is a script, sent as EVALSHA once
// the node is known to hold it, else as EVAL (also after NOSCRIPT); with
// replica acks, WAIT follows the writes. With batching, calls go through
// the node's pipe: a call to an idle node is sent at once, alone; calls
// made meanwhile go together as one pipeline when it returns. One send at
// a time per node keeps its calls in order, so a late SET cannot land
// after the release's DEL (docs/algorithm.md, "Batching"); LateIO says
// what is sent once its operation ended, and Submit how an overdue send
// is overtaken. It decides nothing about locks: a call's Holds and Takes
// say what ordering and lateness rules it needs.
package nodeio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/quorumlock/redlock/internal/transport"
)

// Op is one node's share of an operation: a script and its arguments.
// Its result is positive when the node holds the token after it (for a
// fenced acquire, the node's fencing counter), else zero; an op that is
// Many answers per lock, and its value counts the positives; an op that is
// Read answers as it is (Result.Raw).
type Op struct {
	Script *transport.Script
	Keys   []string
	Args   []any
	Many   bool
	Read   bool
	// Holds: the op writes a hold (acquire, extend, renewal, hand-off or
	// fencing raise); with replica acks it counts once replicas confirm it
	Holds bool
	// Takes: the op may take a key that was not ours (an acquire, a
	// hand-off); see nextBatch
	Takes bool
	// evalsha is the op's EVALSHA, built once for every node (Share)
	evalsha transport.Cmd
}

// Share builds op's EVALSHA once, for every node it is sent to: a
// command is only read on its way to a node, so the nodes' calls share
// it rather than each building (and boxing the keys of) its own.
func (op *Op) Share() {
	op.evalsha = op.Script.Eval(false, op.Keys, op.Args)
}

// cmd is op's command: EVAL, with the script's text, when text; else its
// EVALSHA, the shared one when built (Share).
func (op *Op) cmd(text bool) transport.Cmd {
	if !text && op.evalsha != nil {
		return op.evalsha
	}
	return op.Script.Eval(text, op.Keys, op.Args)
}

// Result is what a node answered to an Op.
type Result struct {
	Value  int64
	Values []int64 // for an op that is Many: one per lock
	Raw    []any   // for an op that is Read
	Err    error
}

// Why a call ended, when not for anything its node did.
var (
	// ErrNotSent: the call was never sent, its operation having ended
	// first (the caller gave up, or its deadline passed while it queued).
	ErrNotSent = errors.New("not sent")
	// ErrReplicasBehind: a node's replicas did not confirm a write in time.
	ErrReplicasBehind = errors.New("replicas behind")
)

// NotSent is the error of a call never sent because of cause.
func NotSent(cause error) error { return fmt.Errorf("%w: %w", ErrNotSent, cause) }

// notResent is the error of a write of a hold whose EVALSHA was answered
// NOSCRIPT after its deadline (cause): its EVAL is not sent, and the node is
// not taken for one that keeps no scripts (a misconfiguration): it was slow.
func notResent(cause error) error {
	return fmt.Errorf("not sent again after NOSCRIPT: %w", cause)
}

// Ack is a replica ack (WithReplicaAck); the zero value is off.
type Ack struct {
	Replicas int
	Timeout  time.Duration
}

func (a Ack) on() bool { return a.Replicas > 0 }

// check reads a WAIT's reply: nil when enough replicas confirmed.
func (a Ack) check(wait transport.Reply) error {
	n, err := wait.Int()
	if err != nil {
		return fmt.Errorf("WAIT for %d replicas (WithReplicaAck): %w", a.Replicas, err)
	}
	if n < int64(a.Replicas) {
		return fmt.Errorf("%w: %d of %d replicas confirmed the write within %v (WithReplicaAck)", ErrReplicasBehind, n, a.Replicas, a.Timeout)
	}
	return nil
}

// waitMillis is WAIT's timeout in whole milliseconds, rounded up.
func (a Ack) waitMillis() int64 {
	ms := int64(a.Timeout / time.Millisecond)
	if a.Timeout%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// Node sends the calls bound for one node.
type Node struct {
	T     transport.Node
	ack   Ack
	known sync.Map // the scripts the node is known to hold: *transport.Script → struct{}
	p     *pipe    // nil without batching
}

// New returns the Node that sends calls to t, through a pipe when batched.
func New(t transport.Node, ack Ack, batched bool) *Node {
	n := &Node{T: t, ack: ack}
	if batched {
		n.p = &pipe{n: n}
	}
	return n
}

// Batched reports whether the node's calls go through its pipe (Submit).
func (n *Node) Batched() bool { return n.p != nil }

// Run sends op alone, now, in the calling goroutine, under ctx; a NOSCRIPT
// answered past ctx's deadline is followed as LateIO allows, for up to
// timeout.
func (n *Node) Run(ctx context.Context, op Op, timeout time.Duration) Result {
	var res [1]Result
	n.exec(ctx, []Op{op}, res[:], timeout)
	return res[0]
}

func (n *Node) has(s *transport.Script) bool {
	_, ok := n.known.Load(s)
	return ok
}

// note records what the node's answer to a call of s (err) tells: any
// answer but NOSCRIPT shows that it now holds the script.
func (n *Node) note(s *transport.Script, err error) {
	if (err == nil || transport.IsReply(err) && !transport.NoScript(err)) && !n.has(s) {
		n.known.Store(s, struct{}{})
	}
}

// exec sends ops to the node under ctx in one pipeline (a lone op alone),
// each as EVALSHA when the node is known to hold its script, else as EVAL,
// followed by WAIT when replica acks are on and an op holds: WAIT confirms
// every write made before it on its connection. The ops answered NOSCRIPT
// ran nowhere, so they are sent again with the script's text, after the
// others (their calls on other keys: see nextBatch), and nothing runs
// twice; past ctx's deadline, a write of a hold is not sent again, any
// other op is, for up to late. It sets res[i] to ops[i]'s result.
func (n *Node) exec(ctx context.Context, ops []Op, res []Result, late time.Duration) {
	ack := n.ack.on() && slices.ContainsFunc(ops, func(op Op) bool { return op.Holds })
	replies := n.send(ctx, ops, nil, ack)
	again, waitAgain := n.resend(ctx, ops, res, replies, ack, late)
	for i, op := range ops {
		if res[i].Err != nil { // not sent again
			continue
		}
		n.note(op.Script, replies[i].Err)
		res[i] = op.result(replies[i])
		if res[i].Err == nil && res[i].Value > 0 && ack && op.Holds {
			wait := replies[len(ops)]
			if slices.Contains(again, i) {
				wait = waitAgain
			}
			res[i].Err = n.ack.check(wait)
		}
	}
}

// resend sends again, with the scripts' text, the ops whose replies are
// NOSCRIPT (see exec), setting their replies, and returns which it sent and
// the WAIT that followed them; a write of a hold past ctx's deadline is
// not sent again, its result's error set instead.
func (n *Node) resend(ctx context.Context, ops []Op, res []Result, replies []transport.Reply, ack bool, late time.Duration) (again []int, wait transport.Reply) {
	for i := range ops {
		if transport.NoScript(replies[i].Err) {
			n.known.Delete(ops[i].Script)
			again = append(again, i)
		}
	}
	if len(again) > 0 && ctx.Err() != nil {
		again = slices.DeleteFunc(again, func(i int) bool {
			if ops[i].Holds {
				res[i].Err = notResent(context.DeadlineExceeded)
				return true
			}
			return false
		})
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), late)
		defer cancel()
	}
	if len(again) == 0 {
		return nil, wait
	}
	resent := n.send(ctx, ops, again, ack)
	for j, i := range again {
		replies[i] = resent[j]
	}
	if ack {
		wait = resent[len(again)]
	}
	return again, wait
}

// send sends the ops of ops (only those of only, when not nil, with their
// text) in one pipeline, and a WAIT after when ack; it returns their
// replies in order, the WAIT's last.
func (n *Node) send(ctx context.Context, ops []Op, only []int, ack bool) []transport.Reply {
	var cmds []transport.Cmd
	var replies []transport.Reply
	if len(ops) == 1 {
		// Nearly every send: its command and reply in one allocation.
		one := new(struct {
			cmds    [2]transport.Cmd
			replies [2]transport.Reply
		})
		cmds, replies = one.cmds[:0], one.replies[:]
	} else {
		cmds = make([]transport.Cmd, 0, len(ops)+1)
	}
	if only == nil {
		for i := range ops {
			cmds = append(cmds, ops[i].cmd(!n.has(ops[i].Script)))
		}
	} else {
		for _, i := range only {
			cmds = append(cmds, ops[i].cmd(true))
		}
	}
	if ack {
		cmds = append(cmds, transport.Cmd{"wait", n.ack.Replicas, n.ack.waitMillis()})
	}
	if replies == nil {
		replies = make([]transport.Reply, len(cmds))
	}
	replies = replies[:len(cmds)]
	n.T.Do(ctx, cmds, replies)
	return replies
}

// result reads op's reply.
func (op Op) result(r transport.Reply) Result {
	switch {
	case op.Read:
		raw, err := r.Slice()
		return Result{Raw: raw, Err: err}
	case !op.Many:
		v, err := r.Int()
		return Result{Value: v, Err: err}
	}
	values, err := r.Ints()
	if err == nil && len(values) != len(op.Keys) {
		err = fmt.Errorf("redlock: %d results for %d keys", len(values), len(op.Keys))
	}
	if err != nil {
		return Result{Err: err}
	}
	var held int64
	for _, v := range values {
		if v > 0 {
			held++
		}
	}
	return Result{Value: held, Values: values}
}

// Call is one op on its way to one node; Reply's Reply is called once
// with the result. Ctx is the operation's (see LateIO); IO is what the
// call runs under once sent, for up to Timeout.
type Call struct {
	Ctx     context.Context
	IO      context.Context
	Timeout time.Duration
	Op      Op
	Reply   Replier
}

// Replier takes a call's result. An interface rather than a func, so that
// a fan-out's calls reply to parts of its own allocation rather than each
// to a closure of its own.
type Replier interface{ Reply(Result) }

// ReplyFunc is a func as a Replier.
type ReplyFunc func(Result)

// Reply calls f(r).
func (f ReplyFunc) Reply(r Result) { f(r) }

// LateIO is what a call whose operation ended (ctx) before it was sent
// runs under, and whether it is sent at all. A write of a hold that can no
// longer count is not made. Any other call (a release, a delete, leaving a
// line or a queue) is sent with timeout from now: it only takes away what
// was ours, and a node it does not reach keeps our key until its ttl.
func LateIO(op Op, io context.Context, timeout time.Duration) (_ context.Context, cancel context.CancelFunc, send bool) {
	if op.Holds {
		return nil, nil, false
	}
	io, cancel = context.WithTimeout(context.WithoutCancel(io), timeout)
	return io, cancel, true
}
