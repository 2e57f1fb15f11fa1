package redlock

import (
	"context"
)

// Drain waits until every call this Client has sent to its nodes to take,
// keep or give up a lock has returned, including those that operations
// which already returned left running in the background (a failed
// attempt's deletes on nodes that had not answered, a Release's on nodes
// slower than its quorum), and the hearing of the nodes slower than the
// quorum that decided an Acquire, an Extend or a renewal (what they
// answered is recorded, and told to the Observer and the logger, by
// then).
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
	idle := c.e.Calls.Wait()
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
