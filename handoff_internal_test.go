package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestHandOff_neverSentLeavesNoKey: on a node that lags, a run of hand-offs
// is never sent there (each write of a hold queued past its deadline is
// dropped), so the node keeps the token of the lock the run began with.
// The run's last release must still delete it: the released token stayed
// until its ttl, and with one more node down no other process got the key.
func TestHandOff_neverSentLeavesNoKey(t *testing.T) {
	bg := context.Background()
	ended, cancel := context.WithCancel(bg)
	cancel()
	for _, k := range []handsOver{plain{key: "k"}, newReadWrite("k", true), newMulti([]string{"k", "l"})} {
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		p := &pipe{rdb: rdb, known: &scripts{}, stand: &standIns{}}
		run := func(ctx context.Context, op nodeOp) error {
			done := make(chan error, 1)
			p.submit(call{ctx: ctx, io: ctx, timeout: time.Second, op: op, reply: func(_ int64, _ []int64, err error) { done <- err }})
			return <-done
		}
		name := k.(kind).name()
		if err := run(bg, k.(kind).acquire("A", time.Minute, 0)); err != nil {
			t.Fatal(err)
		}
		// A to B, then B to C, never sent; C is released.
		for _, op := range []nodeOp{k.handOff("B", "A", time.Minute, 0), k.handOff("C", "B", time.Minute, 0)} {
			if err := run(ended, op); !errors.Is(err, errNotSent) {
				t.Fatalf("%s: hand-off queued after its end: %v, want not sent", name, err)
			}
		}
		if err := run(bg, k.(kind).release("C")); err != nil {
			t.Fatal(err)
		}
		if m.Exists("k") {
			t.Errorf("%s: after the run's release the node still holds the key: %s", name, m.Dump())
		}
		if len(p.stand.m) != 0 {
			t.Errorf("%s: stand-ins left: %v", name, p.stand.m)
		}
	}
}

// TestHandOff_sentAfterNeverSentTakesTheKey: a hand-off sent after one that
// was not takes the key from the token the node holds.
func TestHandOff_sentAfterNeverSentTakesTheKey(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	p := &pipe{rdb: rdb, known: &scripts{}, stand: &standIns{}}
	run := func(ctx context.Context, op nodeOp) (int64, error) {
		type r struct {
			v   int64
			err error
		}
		done := make(chan r, 1)
		p.submit(call{ctx: ctx, io: ctx, timeout: time.Second, op: op, reply: func(v int64, _ []int64, err error) { done <- r{v, err} }})
		x := <-done
		return x.v, x.err
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	m.Set("k", "D")
	if _, err := run(ended, handOffOn("k", "E", "D", time.Minute, 0)); !errors.Is(err, errNotSent) {
		t.Fatal(err)
	}
	v, err := run(context.Background(), handOffOn("k", "F", "E", time.Minute, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get("k"); got != "F" {
		t.Errorf("after a sent hand-off the node holds %q, want F", got)
	}
	if _, _, had := handOffFlags(v); had != holds {
		t.Errorf("the hand-off answered %d: the holder's token (standing in for E) was not there", v)
	}
	if len(p.stand.m) != 0 {
		t.Errorf("stand-ins left: %v", p.stand.m)
	}
}

// failNext fails the next command: without sending it, as a call cut at
// its deadline before it was written, or, with ran, after it ran, as one
// whose reply did not come in time.
type failNext struct{ on, ran bool }

func (h *failNext) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failNext) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on {
			h.on = false
			err := error(context.DeadlineExceeded)
			if h.ran {
				_ = next(ctx, cmd)
				err = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
			}
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h *failNext) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestHandOff_failedLeavesNoKey: a hand-off that failed, cut before it was
// written, or after it ran, leaves no key once the lock it was for is
// released: the release deletes the token the node holds.
func TestHandOff_failedLeavesNoKey(t *testing.T) {
	for _, ran := range []bool{false, true} {
		t.Run(fmt.Sprint("ran=", ran), func(t *testing.T) { failedLeavesNoKey(t, ran) })
	}
}

func failedLeavesNoKey(t *testing.T, ran bool) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	h := &failNext{ran: ran}
	rdb.AddHook(h)
	p := &pipe{rdb: rdb, known: &scripts{}, stand: &standIns{}}
	run := func(op nodeOp) error {
		done := make(chan error, 1)
		p.submit(call{ctx: context.Background(), io: context.Background(), timeout: time.Second, op: op, reply: func(_ int64, _ []int64, err error) { done <- err }})
		return <-done
	}
	if err := run(acquireOn("k", "A", time.Minute, 0)); err != nil {
		t.Fatal(err)
	}
	h.on = true
	if err := run(handOffOn("k", "B", "A", time.Minute, 0)); err == nil {
		t.Fatal("the hand-off did not fail")
	}
	if err := run(releaseOn("k", "B")); err != nil {
		t.Fatal(err)
	}
	if m.Exists("k") {
		v, _ := m.Get("k")
		t.Errorf("after the release the node still holds %q", v)
	}
}
