package nodeio

import (
	"context"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock/transport"
)

// TestNextBatch: a pipeline takes at most one call per key, in each key's
// order, and calls on other keys go past a key many calls wait for; a
// write of a hold whose operation ended goes at once (it is not sent).
// A call that takes away what was ours also waits for an acquire on its
// keys that is out (in an overdue send that another sender went past). The batch used to be the queue's prefix up to the first
// repeated key: a call on another key behind a hundred calls on one key
// waited a hundred round trips.
func TestNextBatch(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	mk := func(ctx context.Context, holds bool, keys ...string) Call {
		return Call{Ctx: ctx, Op: Op{Keys: keys, Holds: holds}}
	}
	names := func(cs []Call) string {
		var out []string
		for _, c := range cs {
			out = append(out, strings.Join(c.Op.Keys, "+"))
		}
		return strings.Join(out, " ")
	}
	for _, tt := range []struct {
		name        string
		queue       []Call
		out         []string
		batch, rest string
	}{
		{"one", []Call{mk(live, true, "a")}, nil, "a", ""},
		{"distinct keys", []Call{mk(live, true, "a"), mk(live, false, "b"), mk(live, true, "c")}, nil, "a b c", ""},
		{"a hot key does not hold the others up", []Call{mk(live, true, "a"), mk(live, false, "a"), mk(live, true, "a"), mk(live, true, "b")}, nil, "a b", "a a"},
		{"a multi-key call waits for each of its keys", []Call{mk(live, true, "a"), mk(live, true, "b", "a"), mk(live, true, "b")}, nil, "a", "b+a b"},
		{"an ended hold goes now and holds nothing up", []Call{mk(ended, true, "a"), mk(live, true, "a"), mk(ended, true, "a"), mk(live, false, "b")}, nil, "a a a b", ""},
		{"an ended delete keeps its place", []Call{mk(live, true, "a"), mk(ended, false, "a")}, nil, "a", "a"},
		{"a delete waits for an acquire out on its key", []Call{mk(live, false, "a")}, []string{"a"}, "", "a"},
		{"a write does not", []Call{mk(live, true, "a")}, []string{"a"}, "a", ""},
		{"calls on keys out wait, the others go", []Call{mk(live, false, "a"), mk(live, true, "b"), mk(live, true, "c", "a")}, []string{"a"}, "b", "a c+a"},
		{"an ended hold goes even on a key out", []Call{mk(ended, true, "a")}, []string{"a"}, "a", ""},
	} {
		out := map[string]int{}
		for _, k := range tt.out {
			out[k]++
		}
		batch, rest := nextBatch(slices.Clone(tt.queue), nil, out)
		if got := names(batch); got != tt.batch {
			t.Errorf("%s: batch %q, want %q", tt.name, got, tt.batch)
		}
		if got := names(rest); got != tt.rest {
			t.Errorf("%s: rest %q, want %q", tt.name, got, tt.rest)
		}
	}
}

// TestResult: each Shape's reply is decoded into its fields; a reply not
// of its Shape (a packed integer where an array is due, an empty array, a
// held grant without its counter, a batch of another length) is an error,
// never a hold.
func TestResult(t *testing.T) {
	arr := func(v ...any) transport.Reply { return transport.Reply{Val: v} }
	for _, tt := range []struct {
		name  string
		op    Op
		reply transport.Reply
		want  Reply
		fails bool
	}{
		{"status kept", Op{}, transport.Reply{Val: int64(1)}, Reply{Held: true, Status: 1}, false},
		{"status taken", Op{}, transport.Reply{Val: int64(2)}, Reply{Held: true, Status: 2}, false},
		{"status not held", Op{}, transport.Reply{Val: int64(0)}, Reply{}, false},
		{"grant", Op{Shape: Grant}, arr(int64(1), int64(1764680000000000)), Reply{Held: true, Counter: 1764680000000000}, false},
		{"grant refused, named", Op{Shape: Grant}, arr(int64(0), int64(0), int64(42)), Reply{Holder: Holder{Name: 42}}, false},
		{"grant refused, another kind", Op{Shape: Grant}, arr(int64(0), int64(0), int64(0), int64(1)), Reply{Holder: Holder{OtherKind: true}}, false},
		{"grant refused, unnamed", Op{Shape: Grant}, arr(int64(0)), Reply{}, false},
		{"grant without its counter", Op{Shape: Grant}, arr(int64(1)), Reply{}, true},
		{"grant packed in an integer", Op{Shape: Grant}, transport.Reply{Val: int64(1)}, Reply{}, true},
		{"grant empty", Op{Shape: Grant}, arr(), Reply{}, true},
		{"hand-off", Op{Shape: HandOff}, arr(int64(1), int64(7), int64(1), int64(1)), Reply{Held: true, Counter: 7, Waiting: true, Found: FoundFrom}, false},
		{"hand-off resent", Op{Shape: HandOff}, arr(int64(1), int64(7), int64(0), int64(2)), Reply{Held: true, Counter: 7, Found: FoundOurs}, false},
		{"hand-off refused", Op{Shape: HandOff}, arr(int64(0)), Reply{}, false},
		{"hand-off found nothing known", Op{Shape: HandOff}, arr(int64(1), int64(7), int64(0), int64(3)), Reply{}, true},
		{"ticket", Op{Shape: Ticket}, arr(int64(99), int64(1)), Reply{Held: true, Counter: 99, Clock: true}, false},
		{"ticket ahead of the clock", Op{Shape: Ticket}, arr(int64(99), int64(0)), Reply{Held: true, Counter: 99}, false},
		{"batch", Op{Shape: Batch, Keys: []string{"a", "b"}}, arr(int64(0), int64(2)), Reply{Held: true, Batch: []int64{0, 2}}, false},
		{"batch held nowhere", Op{Shape: Batch, Keys: []string{"a"}}, arr(int64(0)), Reply{Batch: []int64{0}}, false},
		{"batch short", Op{Shape: Batch, Keys: []string{"a", "b"}}, arr(int64(1)), Reply{}, true},
		{"read", Op{Shape: Read}, arr("string", int64(5)), Reply{Raw: []any{"string", int64(5)}}, false},
	} {
		got := tt.op.result(tt.reply, false)
		if (got.Err != nil) != tt.fails {
			t.Errorf("%s: error %v, want one: %v", tt.name, got.Err, tt.fails)
			continue
		}
		if !tt.fails && !reflect.DeepEqual(got.Reply, tt.want) {
			t.Errorf("%s: %+v, want %+v", tt.name, got.Reply, tt.want)
		}
		if tt.fails && got.Held {
			t.Errorf("%s: a reply not of its shape holds", tt.name)
		}
	}
}

// oneNode answers every command 1, at once, and notes the goroutine that
// sent it.
type oneNode struct{ senders chan string }

func (n oneNode) Do(_ context.Context, cmds []transport.Cmd, replies []transport.Reply) {
	n.senders <- goroutine()
	for i := range cmds {
		replies[i] = transport.Reply{Val: int64(1)}
	}
}

func (oneNode) PubSub() transport.PubSub { return nil }
func (oneNode) Info() transport.Info     { return transport.Info{} }

// goroutine is the calling goroutine's number, from its stack's header.
func goroutine() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return strings.Fields(string(buf))[1]
}

// TestPipe_senderLingers: a call made soon after the node's last one
// (within linger) is sent by the same sender goroutine, which ends once
// nothing came for linger. Every call used to start a goroutine of its
// own, whose start and stack growth cost about as much as the library's
// own work per call.
func TestPipe_senderLingers(t *testing.T) {
	n := New(oneNode{senders: make(chan string, 2)}, Ack{}, true)
	send := func() string {
		done := make(chan Result, 1)
		n.Submit(Call{Ctx: context.Background(), IO: context.Background(), Timeout: time.Minute,
			Op:    Op{Script: NewScript("return 1"), Keys: []string{"k"}},
			Reply: ReplyFunc(func(r Result) { done <- r })})
		if r := <-done; r.Err != nil || !r.Reply.Held {
			t.Fatalf("reply %+v, want 1", r)
		}
		return <-n.T.(oneNode).senders
	}
	if first, second := send(), send(); first != second {
		t.Errorf("the second call was sent by goroutine %s, the first by %s: want one sender", second, first)
	}
	for deadline := time.Now().Add(10 * time.Second); senders() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sender still runs 10 s after the last call (linger %v)", linger)
		}
	}
	if _, busy := n.Queued(); busy {
		t.Error("the pipe is busy with no call")
	}
}

// senders counts the goroutines in a pipe's sender.
func senders() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "nodeio.(*pipe).drain")
}

// rewriter is a node whose client rewrites the keys of the commands it is
// given in place, as a go-redis hook that prefixes keys does, and records
// the first key of each EVALSHA it was sent, as given.
type rewriter struct{ keys chan string }

func (n rewriter) Do(_ context.Context, cmds []transport.Cmd, replies []transport.Reply) {
	for i, cmd := range cmds {
		at := 3 // an EVAL's or EVALSHA's first key
		if cmd[0] == "set" {
			at = 1
		}
		if cmd[0] != "eval" {
			n.keys <- cmd[at].(string)
		}
		cmd[at] = "t:" + cmd[at].(string)
		replies[i] = transport.Reply{Val: int64(1)}
		if cmd[0] == "set" {
			replies[i] = transport.Reply{} // nil: the key was free
		}
	}
}

func (rewriter) PubSub() transport.PubSub { return nil }
func (rewriter) Info() transport.Info     { return transport.Info{} }

// TestOp_Share_eachNodeItsOwnCommand: an op's EVALSHA built once for every
// node (Share) reaches each node as built, whatever another node's client
// did to its copy. One shared command used to be handed to every node: a
// key-prefixing hook prefixed it once per node, and the nodes stopped
// agreeing on the key.
func TestOp_Share_eachNodeItsOwnCommand(t *testing.T) {
	script := NewScript("return 1")
	nodes := []rewriter{{make(chan string, 4)}, {make(chan string, 4)}, {make(chan string, 4)}}
	op := Op{Script: script, Keys: []string{"k"}}
	op.Share()
	set := Op{Script: script, Shape: Grant, SetNX: true, Keys: []string{"k"}, Args: []any{"token", int64(1000)}}
	set.Share()
	for _, rw := range nodes {
		n := New(rw, Ack{}, false)
		n.Run(context.Background(), Op{Script: script, Keys: []string{"first"}}, time.Second) // EVAL: the node now has the script
		for _, op := range []Op{op, set} {
			if r := n.Run(context.Background(), op, time.Second); r.Err != nil {
				t.Fatal(r.Err)
			}
			if got := <-rw.keys; got != "k" {
				t.Errorf("a node was sent key %q, want %q", got, "k")
			}
		}
	}
}

// scriptedNode answers each command by its name from answers (a command
// with no answer left gets 1s), noting the commands of each Do.
type scriptedNode struct {
	answers map[string][]transport.Reply
	dos     [][]string
}

func (n *scriptedNode) Do(_ context.Context, cmds []transport.Cmd, replies []transport.Reply) {
	var names []string
	for i, c := range cmds {
		name := c[0].(string)
		names = append(names, name)
		if q := n.answers[name]; len(q) > 0 {
			replies[i], n.answers[name] = q[0], q[1:]
		} else {
			replies[i] = transport.Reply{Val: []any{int64(1), int64(1)}}
		}
	}
	n.dos = append(n.dos, names)
}

func (*scriptedNode) PubSub() transport.PubSub { return nil }
func (*scriptedNode) Info() transport.Info     { return transport.Info{} }

// TestSetNX: a SetNX op is sent as SET NX PX GET and its reply decoded as
// acquire.lua's Grant: nil takes the key, another token names its holder
// as the script does, WRONGTYPE is another kind; our own token is
// answered by the script, sent after it in the same call (a SET NX
// leaves the ttl as it is); a node that refuses the command is answered
// by the script, then and from then on; with replica acks a WAIT follows
// each write; past the deadline the script is not sent.
func TestSetNX(t *testing.T) {
	const token = "bcdefghij-ours"
	other := "ABCDEFGHIJ-theirs"
	script := []transport.Reply{{Val: []any{int64(1), int64(1)}}}
	for _, tt := range []struct {
		name    string
		set     transport.Reply
		ack     bool
		ended   bool
		want    Reply
		fails   bool
		dos     string // each Do's commands, "|" between Dos
		thenDos string // a second call's
	}{
		{name: "free", set: transport.Reply{}, want: Reply{Held: true, Counter: 1}, dos: "set", thenDos: "set"},
		{name: "another token", set: transport.Reply{Val: other}, want: Reply{Holder: Holder{Name: HolderName(other)}}, dos: "set"},
		{name: "another kind", set: transport.Reply{Err: transport.ErrorReply("WRONGTYPE Operation against a key holding the wrong kind of value")}, want: Reply{Holder: Holder{OtherKind: true}}, dos: "set"},
		{name: "our token", set: transport.Reply{Val: token}, want: Reply{Held: true, Counter: 1}, dos: "set|eval", thenDos: "set"},
		{name: "our token, acked", set: transport.Reply{Val: token}, ack: true, want: Reply{Held: true, Counter: 1}, dos: "set wait|eval wait"},
		{name: "our token, past the deadline", set: transport.Reply{Val: token}, ended: true, fails: true, dos: "set"},
		{name: "refused", set: transport.Reply{Err: transport.ErrorReply("ERR syntax error")}, want: Reply{Held: true, Counter: 1}, dos: "set|eval", thenDos: "evalsha"},
		{name: "writes refused", set: transport.Reply{Err: transport.ErrorReply("OOM command not allowed when used memory > 'maxmemory'.")}, want: Reply{Held: true, Counter: 1}, dos: "set|eval", thenDos: "set"},
		{name: "too few replicas", set: transport.Reply{Err: transport.ErrorReply("NOREPLICAS Not enough good replicas to write.")}, want: Reply{Held: true, Counter: 1}, dos: "set|eval", thenDos: "set"},
		{name: "another error", set: transport.Reply{Err: transport.ErrorReply("READONLY You can't write against a read only replica.")}, fails: true, dos: "set", thenDos: "set"},
	} {
		tn := &scriptedNode{answers: map[string][]transport.Reply{"set": {tt.set}, "eval": script, "wait": {{Val: int64(1)}, {Val: int64(1)}}}}
		ack := Ack{}
		if tt.ack {
			ack = Ack{Replicas: 1, Timeout: time.Second}
		}
		n := New(tn, ack, false)
		ctx, cancel := context.WithCancel(context.Background())
		if tt.ended {
			cancel()
		}
		op := Op{Script: NewScript("return {1, 1}"), Keys: []string{"k"}, Args: []any{token, int64(1000)}, Shape: Grant, Holds: true, Takes: true, SetNX: true}
		op.Share()
		got := n.Run(ctx, op, time.Second)
		cancel()
		if (got.Err != nil) != tt.fails {
			t.Errorf("%s: error %v, want one: %v", tt.name, got.Err, tt.fails)
		} else if !tt.fails && !reflect.DeepEqual(got.Reply, tt.want) {
			t.Errorf("%s: %+v, want %+v", tt.name, got.Reply, tt.want)
		}
		if tt.fails && got.Held {
			t.Errorf("%s: held on an error", tt.name)
		}
		dos := func() string {
			var out []string
			for _, d := range tn.dos {
				out = append(out, strings.Join(d, " "))
			}
			tn.dos = nil
			return strings.Join(out, "|")
		}
		if got := dos(); got != tt.dos {
			t.Errorf("%s: sent %q, want %q", tt.name, got, tt.dos)
		}
		if tt.thenDos != "" {
			tn.answers["set"] = []transport.Reply{{}}
			if r := n.Run(context.Background(), op, time.Second); r.Err != nil || !r.Held {
				t.Errorf("%s: the next call got %+v", tt.name, r)
			}
			if got := dos(); got != tt.thenDos {
				t.Errorf("%s: the next call sent %q, want %q", tt.name, got, tt.thenDos)
			}
		}
	}
}

// TestHolderName: a holder is named as acquire.lua names it: its token's
// first 8 bytes, 6 bits each, plus 1.
func TestHolderName(t *testing.T) {
	for _, tt := range []struct {
		token string
		want  int64
	}{
		{"", 1},
		{"A", 'A'%64 + 1},
		{"AB", ('A'%64)*64 + 'B'%64 + 1},
		{"\xff\xff\xff\xff\xff\xff\xff\xff\xff", 1<<48 - 1 + 1},
	} {
		if got := HolderName(tt.token); got != tt.want {
			t.Errorf("HolderName(%q) = %d, want %d", tt.token, got, tt.want)
		}
	}
}
