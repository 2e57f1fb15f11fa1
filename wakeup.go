package redlock

import (
	"context"
	mrand "math/rand/v2"
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

// releaseWatch is one Acquire's subscription to a key's release channel.
// A nil *releaseWatch watches nothing.
type releaseWatch struct {
	ps   *redis.PubSub
	ch   <-chan *redis.Message
	node int
}

// watchRelease subscribes to a lock's release channels on node, and waits
// for the subscriptions to be confirmed, so that a release announced after
// it returns is heard. It returns nil when the node does not answer in time.
//
// A go-redis client without ContextTimeoutEnabled ignores ctx's deadline
// while it dials and greets a new connection (HELLO), and a frozen node
// would then hold the Acquire for the client's ReadTimeout; so the
// subscription is made in a goroutine of its own, and one that comes too
// late is closed when it comes.
func (c *Client) watchRelease(ctx context.Context, channels []string, node int, timeout time.Duration) *releaseWatch {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	made := make(chan *releaseWatch, 1)
	go func() {
		defer cancel()
		ps := c.nodes[node].rdb.Subscribe(ctx, channels...)
		for range channels {
			if _, err := ps.ReceiveTimeout(ctx, timeout); err != nil {
				_ = ps.Close()
				made <- nil
				return
			}
		}
		made <- &releaseWatch{ps: ps, ch: ps.Channel(), node: node}
	}()
	select {
	case w := <-made:
		return w
	case <-ctx.Done():
		go func() { (<-made).close() }()
		return nil
	}
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
		_ = w.ps.Close()
	}
}

// wakeSpread is the real time over which the waiters woken by one release
// spread their attempts, so that they do not all split the votes. A local
// waiter yielding to them (see acquireQueued) starts after it.
const wakeSpread = 500 * time.Microsecond

// wakeDelay is how long a waiter woken by a release waits before its next
// attempt, after failed attempts: a random part of wakeSpread that shrinks
// as failed grows, so that the waiters that have lost most often tend to
// go first, which keeps the longest waits across processes short.
func wakeDelay(failed int) time.Duration {
	return mrand.N(wakeSpread / time.Duration(max(failed, 1)))
}
