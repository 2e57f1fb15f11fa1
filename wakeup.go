package redlock

import (
	"context"
	"time"

	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/wait"
)

// watchRelease subscribes to a lock's release channels on node, with the
// waiter's own channel of ln (see wait.WatchRelease).
func (c *Client) watchRelease(ctx context.Context, channels []string, ln *wait.Line, node int, timeout time.Duration) *wait.Watch {
	return wait.WatchRelease(ctx, c.subscribers[node], channels, ln, node, timeout)
}

// newLine is a plain lock's waiter's place in the line of key.
func (c *Client) newLine(key string, ttl time.Duration) *wait.Line {
	var ln *wait.Line
	ln = wait.NewLine(ttl, releaseChannel(key), func(node int, join bool, timeout time.Duration) {
		c.sendOne(node, lineOn(key, ln.Name, join, ln.TTL), timeout)
	})
	return ln
}

// waitRetry waits before the next attempt (see wait.Retry) on the
// Client's Clock.
func (c *Client) waitRetry(ctx context.Context, k kind, watch *wait.Watch, delay time.Duration) (ok, first, woken bool) {
	timer := newTimer(c.cfg.clock, delay)
	defer timer.Stop()
	var named func(string) wait.Naming
	if line, inLine := k.(waitsInLine); inLine {
		named = line.named
	}
	return wait.Retry(ctx, timer.Chan(), watch, named)
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

// deaf reports whether the Client's subscriptions' connection to node i
// has stopped receiving (see pubsub.Subscriber.Deaf).
func (c *Client) deaf(i int) bool { return c.subscribers[i].Deaf() }
