package redlock

import (
	"context"
	"crypto/rand"
	"hash/fnv"
	"slices"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/pubsub"
	"github.com/quorumlock/redlock/internal/wait"
	"github.com/quorumlock/redlock/transport"
)

// A waiting Acquire listens on one node where another holder's key was
// for the lock's release (PUBLISHed by release.lua) and tries again at once
// when it hears it; a missed announcement costs only the retry delay, which
// still runs. The waiters of a Client share one pub/sub connection per
// node (internal/pubsub). See docs/algorithm.md, "Wake-ups".

// releaseWatch is one Acquire's subscription to a key's release channels
// on one node. A nil *releaseWatch watches nothing.
type releaseWatch struct {
	node     int
	channels []string
	own      string // the waiter's own channel, where a release names it among the first two in line; "" when none
	sub      *pubsub.Subscriber
	w        *pubsub.Watch
}

// watchRelease subscribes to a lock's release channels on node, and waits
// up to timeout for the subscriptions to be confirmed, so that a release
// announced after it returns is heard. A slower one (a loaded or frozen
// node) goes on in the background; until it is confirmed, the retry delay
// runs as always.
func (c *Client) watchRelease(ctx context.Context, channels []string, ln *waitLine, node int, timeout time.Duration) *releaseWatch {
	if own := ln.channel(); own != "" {
		channels = append(slices.Clip(channels), own)
	}
	sub := c.subscribers[node]
	w := &releaseWatch{node: node, own: ln.channel(), channels: channels, sub: sub, w: sub.Watch(channels)}
	t := realTime.NewTimer(timeout) // the node's confirmation: I/O, in real time
	defer t.Stop()
	select {
	case <-w.w.Ready():
	case <-t.Chan():
	case <-ctx.Done():
	}
	return w
}

// released returns a channel that receives when a release is announced; nil
// (never ready) for a nil watch.
func (w *releaseWatch) released() <-chan transport.Message {
	if w == nil {
		return nil
	}
	return w.w.Messages()
}

// subscribed reports whether every channel's subscription is confirmed
// and the connection still receives: a release is then heard as it is
// announced.
func (w *releaseWatch) subscribed() bool {
	if w == nil || w.sub.Deaf() {
		return false
	}
	select {
	case <-w.w.Ready():
		return true
	default:
		return false
	}
}

// deaf reports whether the watch's connection has stopped receiving (see
// pubsub.Subscriber.Deaf): its node's releases are not heard.
func (w *releaseWatch) deaf() bool {
	return w != nil && w.sub.Deaf()
}

// waitLine is a plain lock's waiter's place in the key's line on the node it
// listens on (line.lua): a release there wakes the first two in line that
// still listen (should the first have given up or hung, the second goes
// on). The line is a hint: a waiter missing from it is woken by its retry
// timer, or by a release that finds the line empty and tells everyone.
type waitLine struct {
	key  string
	name string        // the waiter's, random
	ttl  time.Duration // how long the line lasts after a join
	node int           // where it joined; -1 when it has not
}

func newLine(key string, ttl time.Duration) *waitLine {
	return &waitLine{key: key, name: rand.Text(), ttl: max(ttl, wait.LineLinger), node: -1}
}

// channel is the waiter's own channel for key.
func (ln *waitLine) channel() string {
	if ln == nil {
		return ""
	}
	return releaseChannel(ln.key) + ":" + ln.name
}

// join takes or keeps the waiter's place in the line on node, leaving the
// line of the node it was in before, if another.
func (ln *waitLine) join(c *Client, node int, timeout time.Duration) {
	if ln == nil || node < 0 {
		return
	}
	if ln.node >= 0 && ln.node != node {
		c.sendOne(ln.node, lineOn(ln.key, ln.name, false, ln.ttl), timeout)
	}
	ln.node = node
	c.sendOne(node, lineOn(ln.key, ln.name, true, ln.ttl), timeout)
}

// leave leaves the line, when the waiter won the lock or gave up.
func (ln *waitLine) leave(c *Client, timeout time.Duration) {
	if ln == nil || ln.node < 0 {
		return
	}
	c.sendOne(ln.node, lineOn(ln.key, ln.name, false, ln.ttl), timeout)
	ln.node = -1
}

// sendOne sends op to node i without waiting for its reply: through the
// node's pipe, in order with the node's other calls (a leave lands before
// the holder's release), or, without batching, from a goroutine. Drain
// waits for it as for any call.
func (c *Client) sendOne(i int, op nodeOp, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	c.e.Calls.Add()
	reply := func(nodeio.Result) {
		cancel()
		c.e.Calls.Done()
	}
	if n := c.nodes[i].IO; n.Batched() {
		n.Submit(nodeio.Call{Ctx: ctx, IO: ctx, Timeout: timeout, Op: op, Reply: nodeio.ReplyFunc(reply)})
		return
	}
	go func() { reply(c.nodes[i].IO.Run(ctx, op, timeout)) }()
}

// drain drops the announcements received so far, and reports whether
// there was one.
func (w *releaseWatch) drain() (heard bool) {
	if w == nil {
		return false
	}
	for {
		select {
		case <-w.w.Messages():
			heard = true
		default:
			return heard
		}
	}
}

func (w *releaseWatch) close() {
	if w != nil {
		w.w.Stop()
	}
}

// deaf reports whether the Client's subscriptions' connection to node i
// has stopped receiving (see pubsub.Subscriber.Deaf).
func (c *Client) deaf(i int) bool { return c.subscribers[i].Deaf() }

// waitRetry waits before the next attempt: the retry delay, or until a
// release is announced, or until the watch's subscription, not confirmed
// yet, is (a release before it was announced to nobody). It returns false
// when ctx ends first, whether a fair lock's announcement named this
// waiter first in line, and whether a release announcement ended the wait.
func (c *Client) waitRetry(ctx context.Context, k kind, watch *releaseWatch, delay time.Duration) (ok, first, woken bool) {
	line, inLine := k.(waitsInLine)
	timer := newTimer(c.cfg.clock, delay)
	defer timer.Stop()
	var late <-chan struct{}
	if watch != nil && isOpen(watch.w.Ready()) {
		late = watch.w.Ready()
	}
	for {
		select {
		case <-timer.Chan():
			return true, false, false
		case <-late:
			return true, false, false
		case m := <-watch.released():
			if waitOn, first, woken := watch.heard(m, line, inLine); !waitOn {
				return true, first, woken
			}
		case <-ctx.Done():
			return false, false, false
		}
	}
}

// heard decides what the release announcement m tells a waiter that
// listens on w (line: its kind, when it waits in a queue): wait on (it
// named another first in line), or try now, as the one named first or as
// one woken.
func (w *releaseWatch) heard(m transport.Message, line waitsInLine, inLine bool) (waitOn, first, woken bool) {
	if w.own != "" && m.Channel == w.own {
		// Among the first two in line, the only ones woken: try now.
		return false, false, true
	}
	if inLine {
		// A queue's release names the first in line: it alone tries.
		switch line.named(m.Payload) {
		case namedUs:
			return false, true, false
		case namedAnother:
			return true, false, false
		}
	}
	// Everyone subscribed heard it and tries at once; a split vote among
	// them is resolved by the designated one (split.go).
	return false, false, !inLine
}

// listenNode picks the node an Acquire refused with answers listens on for
// the release: one of the nodes where another holder had the key, by a
// hash of the lock's first channel, so that waiters on different keys
// spread over the nodes. Nodes for which deaf (maybe nil) is true are
// passed over while another named a holder; -1 when none named one.
func listenNode(channels []string, answers []engine.Answer, deaf func(node int) bool) int {
	if len(channels) == 0 {
		return -1
	}
	var held, heard []int // the nodes that named a holder; those of them whose releases are heard
	for i, a := range answers {
		if a == engine.HoldsNot {
			held = append(held, i)
			if deaf == nil || !deaf(i) {
				heard = append(heard, i)
			}
		}
	}
	if len(heard) > 0 {
		held = heard // only the nodes whose releases are heard, if any is
	}
	if len(held) == 0 {
		return -1
	}
	h := fnv.New32a()
	h.Write([]byte(channels[0]))
	return held[h.Sum32()%uint32(len(held))]
}
