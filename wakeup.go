package redlock

import (
	"context"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// An Acquire that has to wait does not only sleep its retry delay: it
// listens on one node for the lock's release, which release.lua announces
// with PUBLISH, and tries again at once when it hears it. One node is
// enough for a hint, and it is one that another holder's key was on, so its
// release is announced there. A missed announcement (the node is down, or
// the release came before the subscription) costs nothing but the retry
// delay, which still runs. The subscription lives as long as the Acquire.

// releaseWatch is one Acquire's subscription to a key's release channels
// on one node. A nil *releaseWatch watches nothing.
type releaseWatch struct {
	node  int
	ch    chan *redis.Message // announcements, once subscribed
	ready chan struct{}       // closed once every channel is subscribed
	quit  chan struct{}       // closed by close
	stop  func()
}

// watchRelease subscribes to a lock's release channels on node, and waits
// up to timeout for the subscriptions to be confirmed, so that a release
// announced after it returns is heard. A subscription that takes longer
// (a loaded or frozen node) is not given up: it goes on in the background,
// and announcements count from when it is confirmed; until then the retry
// delay runs as always.
//
// The subscription runs in a goroutine of its own: a go-redis client
// without ContextTimeoutEnabled ignores context deadlines while it dials
// and greets a new connection (HELLO), and a frozen node would otherwise
// hold the Acquire for the client's ReadTimeout. After close, that
// goroutine ends once the node answers or the client gives up.
func (c *Client) watchRelease(ctx context.Context, channels []string, node int, timeout time.Duration) *releaseWatch {
	w := &releaseWatch{
		node:  node,
		ch:    make(chan *redis.Message, 1),
		ready: make(chan struct{}),
		quit:  make(chan struct{}),
	}
	w.stop = sync.OnceFunc(func() { close(w.quit) })
	sub, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer cancel()
		ps := c.nodes[node].rdb.Subscribe(sub, channels...)
		ended := make(chan struct{})
		defer close(ended)
		go func() {
			// Closing the subscription ends a read that waits for the
			// node, whatever the client's deadlines.
			select {
			case <-w.quit:
			case <-ended:
			}
			_ = ps.Close()
		}()
		for range channels {
			if _, err := ps.Receive(sub); err != nil {
				return // closed, or the node failed: the retry delay remains
			}
		}
		close(w.ready)
		for m := range ps.Channel() { // until ps is closed
			select {
			case w.ch <- m:
			default: // one pending announcement is enough to wake up
			}
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.ready:
	case <-sub.Done(): // the subscription failed
	case <-t.C:
	case <-ctx.Done():
	}
	return w
}

// released returns a channel that receives when a release is announced; nil
// (never ready) for a nil watch.
func (w *releaseWatch) released() <-chan *redis.Message {
	if w == nil {
		return nil
	}
	return w.ch
}

// drain drops the announcements received so far.
func (w *releaseWatch) drain() {
	if w == nil {
		return
	}
	for {
		select {
		case <-w.ch:
		default:
			return
		}
	}
}

func (w *releaseWatch) close() {
	if w != nil {
		w.stop()
	}
}

// wakeSpread is the real time over which the waiters woken by one release
// spread their attempts, so that they do not all split the votes. A local
// waiter yielding to them (see localQueues.inTurn) starts after it.
const wakeSpread = 500 * time.Microsecond

// wakeDelay is how long a waiter woken by a release waits before its next
// attempt, after failed attempts: a random part of wakeSpread that shrinks
// as failed grows, so that the waiters that have lost most often tend to
// go first, which keeps the longest waits across processes short.
func wakeDelay(failed int) time.Duration {
	return mrand.N(wakeSpread / time.Duration(max(failed, 1)))
}

// waitRetry waits before the next attempt: the retry delay, or until a
// release is announced. It returns false when ctx ends first, whether a
// fair lock's announcement named this waiter first in line, and whether a
// release announcement ended the wait.
func (c *Client) waitRetry(ctx context.Context, k kind, watch *releaseWatch, delay time.Duration, failed int) (ok, first, woken bool) {
	line, inLine := k.(waitsInLine)
	timer := c.cfg.clock.After(delay)
	for {
		select {
		case <-timer:
			return true, false, false
		case m := <-watch.released():
			if inLine {
				// A queue's release names the first in line: only that
				// waiter tries, and at once.
				switch line.named(m.Payload) {
				case namedUs:
					return true, true, false
				case namedAnother:
					continue
				}
			}
			// Clients that heard the same release would all try at once
			// and split the votes: spread them a little, the ones that
			// have waited longest first. This is about the network, so it
			// is real time, not the Clock.
			time.Sleep(wakeDelay(failed))
			return true, false, !inLine
		case <-ctx.Done():
			return false, false, false
		}
	}
}
