package redlock

import (
	"context"
	"sync"
	"sync/atomic"
)

// inflight counts the node calls a Client has sent and not yet seen
// return, those left to finish in the background included. The channel
// Drain waits on is made only when one waits.
type inflight struct {
	n    atomic.Int64
	mu   sync.Mutex
	idle chan struct{} // closed when n drops to zero; nil when none waits
}

func (f *inflight) add() { f.n.Add(1) }

func (f *inflight) done() {
	if f.n.Add(-1) != 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.idle != nil && f.n.Load() == 0 {
		close(f.idle)
		f.idle = nil
	}
}

// wait returns a channel closed once no call is in flight.
func (f *inflight) wait() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n.Load() == 0 {
		return closedChan
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	return f.idle
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Drain waits until every call this Client has sent to its nodes to take,
// keep or give up a lock has returned, including those that operations
// which already returned left running in the background (a failed
// attempt's deletes on nodes that had not answered, a Release's on nodes
// slower than its quorum).
//
// A program that exits right after an operation (a cron job, a command, a
// serverless function) calls Drain before it exits, so that no key it
// wrote is left on a node that answers to expire with its ttl. Calls sent
// while Drain waits, by other goroutines or by renewals, are waited for
// too: Drain is for when the program has stopped using the Client. It
// does not wait for what writes nothing (release subscriptions, the first
// contact's INFO).
//
// A call returns when its node answers or when the node's client gives up
// on it: at the node timeout for a client with ContextTimeoutEnabled,
// otherwise at its ReadTimeout (go-redis's default: 3 s). So with a frozen
// node, bound the wait with ctx.
//
// It returns nil once no call is in flight, also when ctx has ended by
// then, or ctx.Err() if ctx ends first; ErrInvalidArgument for a nil ctx.
func (c *Client) Drain(ctx context.Context) error {
	if err := nilContext(ctx, "Client.Drain"); err != nil {
		return err
	}
	idle := c.calls.wait()
	select {
	case <-idle:
		return nil
	default:
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
