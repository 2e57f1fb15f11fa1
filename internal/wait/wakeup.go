package wait

import (
	"context"
	"crypto/rand"
	"hash/fnv"
	"slices"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/pubsub"
	"github.com/quorumlock/redlock/internal/realclock"
	"github.com/quorumlock/redlock/transport"
)

// A waiting Acquire listens on one node where another holder's key was
// for the lock's release (PUBLISHed by release.lua) and tries again at once
// when it hears it; a missed announcement costs only the retry delay, which
// still runs. The waiters of a Client share one pub/sub connection per
// node (internal/pubsub). See docs/algorithm.md, "Wake-ups".

// Watch is one Acquire's subscription to a key's release channels on one
// node. A nil *Watch watches nothing.
type Watch struct {
	Node     int
	channels []string
	own      string // the waiter's own channel, where a release names it among the first two in line; "" when none
	sub      *pubsub.Subscriber
	w        *pubsub.Watch
}

// WatchRelease subscribes through sub, node's subscriber, to a lock's
// release channels and to the waiter's own channel in ln, and waits
// up to timeout for the subscriptions to be confirmed, so that a release
// announced after it returns is heard. A slower one (a loaded or frozen
// node) goes on in the background; until it is confirmed, the retry delay
// runs as always.
func WatchRelease(ctx context.Context, sub *pubsub.Subscriber, channels []string, ln *Line, node int, timeout time.Duration) *Watch {
	own := ln.Channel()
	if own != "" {
		channels = append(slices.Clip(channels), own)
	}
	w := &Watch{Node: node, own: own, channels: channels, sub: sub, w: sub.Watch(channels)}
	t := realclock.Clock{}.NewTimer(timeout) // the node's confirmation: I/O, in real time
	defer t.Stop()
	select {
	case <-w.w.Ready():
	case <-t.Chan():
	case <-ctx.Done():
	}
	return w
}

// Released returns a channel that receives when a release is announced;
// nil (never ready) for a nil watch.
func (w *Watch) Released() <-chan transport.Message {
	if w == nil {
		return nil
	}
	return w.w.Messages()
}

// Ready is closed once every channel's subscription is confirmed.
func (w *Watch) Ready() <-chan struct{} { return w.w.Ready() }

// Subscribed reports whether every channel's subscription is confirmed
// and the connection still receives: a release is then heard as it is
// announced.
func (w *Watch) Subscribed() bool {
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

// Deaf reports whether the watch's connection has stopped receiving (see
// pubsub.Subscriber.Deaf): its node's releases are not heard.
func (w *Watch) Deaf() bool {
	return w != nil && w.sub.Deaf()
}

// Drain drops the announcements received so far, and reports whether
// there was one.
func (w *Watch) Drain() (heard bool) {
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

// Close ends the subscription.
func (w *Watch) Close() {
	if w != nil {
		w.w.Stop()
	}
}

// Naming is whom a queue's release message names first in line.
type Naming int

const (
	NamedNobody  Naming = iota // the queue is empty: anyone may try
	NamedUs                    // this waiter: it tries at once
	NamedAnother               // another waiter: this one keeps waiting
)

// Retry waits before the next attempt: until timer fires, a release is
// announced on watch, or the watch's subscription, not confirmed yet, is
// (a release before it was announced to nobody). named, for a waiter in a
// queue (nil for others), tells whom a release names first in line. It
// returns false when ctx ends first, whether the announcement named this
// waiter first in line, and whether a release announcement ended the wait.
func Retry(ctx context.Context, timer <-chan time.Time, watch *Watch, named func(payload string) Naming) (ok, first, woken bool) {
	var late <-chan struct{} // the subscription's confirmation, while it is to come
	if watch != nil {
		select {
		case <-watch.w.Ready():
		default:
			late = watch.w.Ready()
		}
	}
	for {
		select {
		case <-timer:
			return true, false, false
		case <-late:
			return true, false, false
		case m := <-watch.Released():
			if waitOn, first, woken := watch.heard(m, named); !waitOn {
				return true, first, woken
			}
		case <-ctx.Done():
			return false, false, false
		}
	}
}

// heard decides what the release announcement m tells a waiter that
// listens on w: wait on (it named another first in line), or try now, as
// the one named first or as one woken.
func (w *Watch) heard(m transport.Message, named func(string) Naming) (waitOn, first, woken bool) {
	if w.own != "" && m.Channel == w.own {
		// Among the first two in line, the only ones woken: try now.
		return false, false, true
	}
	if named != nil {
		// A queue's release names the first in line: it alone tries.
		switch named(m.Payload) {
		case NamedUs:
			return false, true, false
		case NamedAnother:
			return true, false, false
		}
	}
	// Everyone subscribed heard it and tries at once; a split vote among
	// them is resolved by the designated one (split.go).
	return false, false, named == nil
}

// Line is a plain lock's waiter's place in the key's line on the node it
// listens on (line.lua): a release there wakes the first two in line that
// still listen (should the first have given up or hung, the second goes
// on). The line is a hint: a waiter missing from it is woken by its retry
// timer, or by a release that finds the line empty and tells everyone. A
// nil *Line is no place.
type Line struct {
	Name    string        // the waiter's, random
	TTL     time.Duration // how long the line lasts after a join
	channel string        // the waiter's own: where a release names it among the first two in line
	node    int           // where it joined; -1 when it has not
	// send joins (join) or leaves the line on node within timeout, not
	// waiting for the reply
	send func(node int, join bool, timeout time.Duration)
}

// NewLine is a new waiter's place, not taken yet, in a line that lasts
// ttl (LineLinger at least) after a join, its own channel the key's
// release channel and its name; send joins or leaves it on a node.
func NewLine(ttl time.Duration, channel string, send func(node int, join bool, timeout time.Duration)) *Line {
	name := rand.Text()
	return &Line{Name: name, TTL: max(ttl, LineLinger), channel: channel + ":" + name, node: -1, send: send}
}

// Channel is the waiter's own channel; "" for no place.
func (ln *Line) Channel() string {
	if ln == nil {
		return ""
	}
	return ln.channel
}

// Join takes or keeps the waiter's place in the line on node, leaving the
// line of the node it was in before, if another, each within timeout.
func (ln *Line) Join(node int, timeout time.Duration) {
	if ln == nil || node < 0 {
		return
	}
	if ln.node >= 0 && ln.node != node {
		ln.send(ln.node, false, timeout)
	}
	ln.node = node
	ln.send(node, true, timeout)
}

// Leave leaves the line within timeout, when the waiter won the lock or
// gave up.
func (ln *Line) Leave(timeout time.Duration) {
	if ln == nil || ln.node < 0 {
		return
	}
	ln.send(ln.node, false, timeout)
	ln.node = -1
}

// ListenNode picks the node an Acquire refused with answers listens on for
// the release: one of the nodes where another holder had the key, by a
// hash of the lock's first channel, so that waiters on different keys
// spread over the nodes. Nodes for which deaf (maybe nil) is true are
// passed over while another named a holder; -1 when none named one.
func ListenNode(channels []string, answers []engine.Answer, deaf func(node int) bool) int {
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
