// Package nodeio sends a Client's calls to one node, over any client that
// implements transport.Node: each call is a script, sent as EVALSHA once
// the node is known to hold it, else as EVAL (also after NOSCRIPT); with
// replica acks, WAIT follows the writes. With batching, calls go through
// the node's pipe: a call to an idle node is sent at once, alone; calls
// made meanwhile go together as one pipeline when it returns. One send at
// a time per node keeps its calls in order, so a late SET cannot land
// after the release's DEL (docs/algorithm.md, "Batching"); LateIO says
// what is sent once its operation ended, and Submit how an overdue send
// is overtaken. Each reply is decoded once, by its call's Shape, into a
// Reply of typed fields. It decides nothing about locks: a call's Holds and
// Takes say what ordering and lateness rules it needs.
package nodeio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/internal/reply"
	"github.com/quorumlock/redlock/transport"
)

// Op is one node's share of an operation: a script and its arguments,
// and the Shape of its reply, which Run decodes into a Reply.
type Op struct {
	Script *Script
	Keys   []string
	Args   []any
	Shape  Shape
	// Holds: the op writes a hold (acquire, extend, renewal, hand-off or
	// fencing raise); with replica acks it counts once replicas confirm it
	Holds bool
	// Takes: the op may take a key that was not ours (an acquire, a
	// hand-off); see nextBatch
	Takes bool
	// SetNX: a Grant of a lock not fenced, Keys {key} and Args {token,
	// ttl in ms}, sent as SET key token NX PX ms GET, which takes a free
	// key in one command without the script; see exec for when the script
	// answers instead.
	SetNX bool
	// evalsha and set are the op's EVALSHA and SET, built once for every
	// node (Share)
	evalsha, set transport.Cmd
}

// Share builds op's EVALSHA once, for every node it is sent to: the
// nodes' calls share its boxed arguments rather than each boxing the keys
// again.
func (op *Op) Share() {
	if op.SetNX {
		// Its script goes only where the SET needs it: built there.
		op.set = op.setCmd()
		return
	}
	op.evalsha = op.Script.eval(false, op.Keys, op.Args)
}

func (op *Op) setCmd() transport.Cmd {
	return transport.Cmd{"set", op.Keys[0], op.Args[0], "nx", "px", op.Args[1], "get"}
}

// cmd is op's command: its SET when set (see SetNX); else EVAL, with the
// script's text, when text; else its EVALSHA. A shared one (Share) is
// copied: each node gets a command of its own, as a client may change the
// one it is given (a go-redis hook that prefixes keys rewrites its
// arguments in place), and the nodes must not see each other's changes.
func (op *Op) cmd(text, set bool) transport.Cmd {
	if set {
		if op.set != nil {
			return slices.Clone(op.set)
		}
		return op.setCmd()
	}
	if !text && op.evalsha != nil {
		return slices.Clone(op.evalsha)
	}
	return op.Script.eval(text, op.Keys, op.Args)
}

// Shape is the form of a script's reply: each is decoded once, here, into
// a Reply. The scripts of lua/ say which they answer.
type Shape uint8

const (
	// Status: an integer, positive when the node holds our token after
	// the op (extend.lua: 1 it held it, 2 it was free and now holds it),
	// or counting what the op did (a release: 1 it deleted our key).
	Status Shape = iota
	// Grant: an acquire's {held, counter, holder, other kind}: {1, c} when
	// the node holds our token (c its fencing counter, 1 for a lock not
	// fenced), {0, 0, n} when another token holds the key (n > 0 names its
	// holder), {0, 0, 0, 1} when a lock of another kind does, {0} when the
	// script does not say (the kinds' scripts).
	Grant
	// HandOff: a hand-off's {held, counter, waiting, found}: {0} when
	// another holder has the key, else {1, c, w, f} (handoff.lua): c as a
	// Grant's, w 1 when another process listens for the key's release
	// there, f what the node held (Found).
	HandOff
	// Ticket: a fair ticket's {counter, clock} (kind_fair.lua): the
	// ticket, and 1 when it is the node's clock (0 when the counter ran
	// ahead of it).
	Ticket
	// Batch: one Status per key (renew_batch.lua).
	Batch
	// Read: an array, kept as it is (leader.lua's read, fenced reads).
	Read
	// Inspection: inspect.lua's array, decoded into a Hold.
	Inspection
)

// Found is what a hand-off found in the key on a node that holds the lock
// after it.
type Found uint8

const (
	FoundOther Found = iota // neither token: the key was free, or held a token of the run left there
	FoundFrom               // the releasing holder's token
	FoundOurs               // our own: a resend, whose first run is the one that knew
)

// Reply is a node's answer to an Op, decoded from its script's reply by
// the Op's Shape; the fields another Shape does not set are zero.
type Reply struct {
	// Held: the node holds our token after the op (for a Batch, at least
	// one of them; for a Ticket, a ticket was drawn).
	Held    bool
	Status  int64   // Status: the script's integer
	Counter uint64  // Grant, HandOff: the fencing counter (1 when not fenced); Ticket: the ticket
	Holder  Holder  // Grant, refused: who holds the key; zero when not said
	Waiting bool    // HandOff: another process listens for the key's release
	Found   Found   // HandOff
	Clock   bool    // Ticket: the ticket is the node's clock
	Batch   []int64 // Batch: each key's Status
	Raw     []any   // Read
	Hold    *Hold   // Inspection
}

// Holder is who holds a key that an acquire was refused: a token's holder,
// by the name acquire.lua makes of the token's start, or a lock of another
// kind. Two nodes that name one holder give equal Holders.
type Holder struct {
	Name      int64 // > 0 for a token's holder
	OtherKind bool
}

// Result is what a node answered to an Op: its Reply, or why there is none
// (with replica acks, a Reply and the replicas' error: the script ran).
type Result struct {
	Reply
	Err error
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
// NOSCRIPT, or whose SET needs its script, after its deadline (cause):
// its EVAL is not sent, and the node is not taken for one that keeps no
// scripts (a misconfiguration): it was slow.
func notResent(cause error) error {
	return fmt.Errorf("not sent again as a script after its deadline: %w", cause)
}

// Ack is a replica ack (WithReplicaAck); the zero value is off.
type Ack struct {
	Replicas int
	Timeout  time.Duration
}

func (a Ack) on() bool { return a.Replicas > 0 }

// check reads a WAIT's reply: nil when enough replicas confirmed.
func (a Ack) check(wait transport.Reply) error {
	n, err := reply.Int(wait)
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
	known sync.Map // the scripts the node is known to hold: *Script → struct{}
	// noSet: the node refused an Op's SET (a Redis before 7.0), so its
	// SetNX ops run their script
	noSet atomic.Bool
	p     *pipe // nil without batching
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

func (n *Node) has(s *Script) bool {
	_, ok := n.known.Load(s)
	return ok
}

// note records what the node's answer to a call of s (err) tells: any
// answer but NOSCRIPT shows that it now holds the script.
func (n *Node) note(s *Script, err error) {
	if (err == nil || reply.IsReply(err) && !reply.NoScript(err)) && !n.has(s) {
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
// other op is, for up to late. A SetNX op is sent as its SET unless the
// node refused one; the script answers instead, sent the same way after
// the others, where the SET found our own token (a resend: the script
// lengthens the key's ttl, which SET NX leaves as it is, else a validity
// counted from this attempt's start could outlive the key) or where the
// node refused the SET (a syntax error: it is remembered). It sets res[i]
// to ops[i]'s result.
func (n *Node) exec(ctx context.Context, ops []Op, res []Result, late time.Duration) {
	ack := n.acked(ops)
	set := !n.noSet.Load()
	replies := n.send(ctx, ops, nil, set, ack)
	again, waitAgain := n.resend(ctx, ops, res, replies, n.toResend(ops, replies, set), late)
	for i, op := range ops {
		if res[i].Err != nil { // not sent again
			continue
		}
		sentSet := set && op.SetNX && !slices.Contains(again, i)
		if !sentSet {
			n.note(op.Script, replies[i].Err)
		}
		res[i] = op.result(replies[i], sentSet)
		if res[i].Err == nil && res[i].Held && ack && op.Holds {
			res[i].Err = n.ack.check(waitAfter(i, replies[len(ops)], again, waitAgain))
		}
	}
}

// waitAfter is the reply of the WAIT that followed op i's write: the one
// after the first send (wait), or after the resend (waitAgain) when op i
// was among those sent again.
func waitAfter(i int, wait transport.Reply, again []int, waitAgain transport.Reply) transport.Reply {
	if slices.Contains(again, i) {
		return waitAgain
	}
	return wait
}

// acked reports whether a WAIT follows a send of ops (WithReplicaAck, and
// a write of a hold among them).
func (n *Node) acked(ops []Op) bool {
	return n.ack.on() && slices.ContainsFunc(ops, func(op Op) bool { return op.Holds })
}

// toResend returns the ops of ops whose script must be sent (again) after
// replies (see exec): NOSCRIPT, or a SET (when set) that needs its script.
func (n *Node) toResend(ops []Op, replies []transport.Reply, set bool) (again []int) {
	for i := range ops {
		switch {
		case set && ops[i].SetNX:
			if n.scriptAfterSet(ops[i], replies[i]) {
				again = append(again, i)
			}
		case reply.NoScript(replies[i].Err):
			n.known.Delete(ops[i].Script)
			again = append(again, i)
		}
	}
	return again
}

// resend sends again, with the scripts' text, the ops of again (see
// exec), setting their replies, and returns which it sent and the WAIT
// that followed them; a write of a hold past ctx's deadline is not sent
// again, its result's error set instead.
func (n *Node) resend(ctx context.Context, ops []Op, res []Result, replies []transport.Reply, again []int, late time.Duration) ([]int, transport.Reply) {
	var wait transport.Reply
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
	ack := n.acked(ops)
	resent := n.send(ctx, ops, again, false, ack)
	for j, i := range again {
		replies[i] = resent[j]
	}
	if ack {
		wait = resent[len(again)]
	}
	return again, wait
}

// scriptAfterSet reports whether op's script must answer instead of its
// SET, which got r: the key holds our own token; the node refused the
// command's form (then it is not sent SET again); or it refuses writes for
// now (full memory, too few replicas, a failed save), which a SET meets at
// once and the script only at its write: the script still says who holds
// the key, or keeps (lengthens) our own token.
func (n *Node) scriptAfterSet(op Op, r transport.Reply) bool {
	if msg, ok := reply.Message(r.Err); ok {
		// Redis 6.2 refuses NX with GET, older servers GET too
		if strings.HasPrefix(msg, "ERR syntax error") || strings.HasPrefix(msg, "ERR wrong number of arguments") {
			n.noSet.Store(true)
			return true
		}
		return writesRefused(msg)
	}
	s, ok := r.Val.(string)
	return r.Err == nil && ok && s == op.Args[0]
}

// writesRefused reports whether msg is a node's refusal of every write for
// now, whatever the key.
func writesRefused(msg string) bool {
	for _, prefix := range []string{"OOM ", "NOREPLICAS ", "MISCONF "} {
		if strings.HasPrefix(msg, prefix) {
			return true
		}
	}
	return false
}

// send sends the ops of ops (only those of only, when not nil, with their
// text) in one pipeline, the SetNX ones as their SET when set, and a WAIT
// after when ack; it returns their replies in order, the WAIT's last.
func (n *Node) send(ctx context.Context, ops []Op, only []int, set, ack bool) []transport.Reply {
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
			cmds = append(cmds, ops[i].cmd(!n.has(ops[i].Script), set && ops[i].SetNX))
		}
	} else {
		for _, i := range only {
			cmds = append(cmds, ops[i].cmd(true, false))
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

// result decodes op's reply by its Shape, a Grant from its SET's reply
// when set.
func (op Op) result(r transport.Reply, set bool) Result {
	if set {
		return setResult(r)
	}
	switch op.Shape {
	case Read:
		raw, err := reply.Slice(r)
		return Result{Reply: Reply{Raw: raw}, Err: err}
	case Inspection:
		raw, err := reply.Slice(r)
		if err != nil {
			return Result{Err: err}
		}
		h, err := inspection(raw)
		return Result{Reply: Reply{Hold: h}, Err: err}
	case Status:
		v, err := reply.Int(r)
		return Result{Reply: Reply{Held: v > 0, Status: v}, Err: err}
	}
	v, err := reply.Ints(r)
	if err != nil {
		return Result{Err: err}
	}
	rep, err := op.decode(v)
	return Result{Reply: rep, Err: err}
}

// decode reads an array of integers of op's Shape (not Status, Read or
// Inspection).
func (op Op) decode(v []int64) (Reply, error) {
	at := func(i int) int64 {
		if i < len(v) {
			return v[i]
		}
		return 0
	}
	var rep Reply
	switch op.Shape {
	case Grant:
		rep = Reply{Held: at(0) > 0, Counter: uint64(max(at(1), 0)), Holder: Holder{Name: max(at(2), 0), OtherKind: at(3) == 1}}
	case HandOff:
		rep = Reply{Held: at(0) > 0, Counter: uint64(max(at(1), 0)), Waiting: at(2) == 1, Found: Found(at(3))}
	case Ticket:
		rep = Reply{Held: true, Counter: uint64(max(at(0), 0)), Clock: at(1) == 1}
	case Batch:
		if len(v) != len(op.Keys) {
			return Reply{}, fmt.Errorf("redlock: %d results for %d keys", len(v), len(op.Keys))
		}
		return Reply{Held: slices.ContainsFunc(v, func(s int64) bool { return s > 0 }), Batch: v}, nil
	}
	if len(v) == 0 || rep.Held && rep.Counter == 0 || rep.Found > FoundOurs || at(3) < 0 {
		return Reply{}, fmt.Errorf("redlock: reply %v is not of its script", v)
	}
	return rep, nil
}

// setResult decodes the reply of a SetNX op's SET (not our own token,
// which its script answers) as its script's Grant: nil, the key was free
// and is now ours; another token names its holder as acquire.lua does;
// WRONGTYPE, a lock of another kind holds the key.
func setResult(r transport.Reply) Result {
	if r.Err != nil {
		if msg, ok := reply.Message(r.Err); ok && strings.HasPrefix(msg, "WRONGTYPE") {
			return Result{Reply: Reply{Holder: Holder{OtherKind: true}}}
		}
		return Result{Err: r.Err}
	}
	switch v := r.Val.(type) {
	case nil:
		return Result{Reply: Reply{Held: true, Counter: 1}}
	case string:
		return Result{Reply: Reply{Holder: Holder{Name: HolderName(v)}}}
	}
	return Result{Err: fmt.Errorf("redlock: reply %v (%T) is not of SET", r.Val, r.Val)}
}

// HolderName is the name acquire.lua gives the holder of token: from its
// first 8 bytes, 6 bits each, plus 1, so that it is never 0.
func HolderName(token string) int64 {
	var n int64
	for i := range min(8, len(token)) {
		n = n*64 + int64(token[i]%64)
	}
	return n + 1
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
