// The fair lock: granted in ticket order (Fair, kind_fair.lua).

package redlock

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/wait"
)

// fair is a lock granted in the order of its waiters' tickets.
type fair struct {
	scripted
	key    string
	waiter string // the queue entry, across the Acquire's attempts
	ticket uint64 // set once the Acquire has drawn it
	// patience is how long the waiter keeps its place on a node without
	// trying again there (terms.patience), set by the Acquire.
	patience time.Duration
}

func newFair(key string) *fair {
	return &fair{key: key, waiter: rand.Text(), scripted: scripted{
		script: fairScript,
		lock:   []string{key, companion(key, "queue"), companion(key, "queue-deadlines"), companion(key, "tickets")},
		fences: []string{fenceKey(key)},
		chans:  []string{releaseChannel(key)},
	}}
}

func (k *fair) withArgs(op nodeOp) nodeOp {
	op.Args = append(op.Args, k.ticket, cmp.Or(k.patience, wait.FairPatience).Milliseconds(), k.waiter)
	return op
}

func (k *fair) keys() []string   { return []string{k.key} }
func (k *fair) describe() string { return fmt.Sprintf("fair lock %q", k.key) }
func (k *fair) name() string     { return "fair" }
func (k *fair) quorum(n int) int { return engine.QuorumOf(n) }

// ticketKeys is the ticket counter, for raiseFenceOn.
func (k *fair) ticketKeys() []string { return []string{companion(k.key, "tickets")} }

// ticketOp draws a ticket, the ticket counter kept for keep once the
// node's clock has passed it (prelude.lua).
func (k *fair) ticketOp(keep time.Duration) nodeOp {
	op := k.withArgs(k.op("ticket", "", keep, 0, false))
	op.Shape = nodeio.Ticket
	return op
}
func (k *fair) acquire(token string, ttl, keep time.Duration) nodeOp {
	return k.withArgs(k.scripted.acquire(token, ttl, keep))
}
func (k *fair) extend(token string, ttl time.Duration) nodeOp {
	return k.withArgs(k.scripted.extend(token, ttl))
}
func (k *fair) release(token, _ string) nodeOp { return k.withArgs(k.scripted.release(token, "")) }
func (k *fair) drop(token string) nodeOp       { return k.withArgs(k.scripted.drop(token)) }
func (k *fair) unmark() *nodeOp {
	op := k.withArgs(k.op("dequeue", "", time.Millisecond, 0, false))
	return &op
}
func (k *fair) leave(token string) *nodeOp {
	op := k.withArgs(k.op("leave", token, time.Millisecond, 0, true))
	return &op
}

// join gives a fair Acquire its place in the queue: its patience, and a
// ticket drawn from a quorum of the nodes (drawTicket). A draw that misses
// its quorum is made again after the retry delay while ctx lasts; with no
// retry policy, once.
func (k *fair) join(ctx context.Context, c *Client, ac acquireConfig) *quorumError {
	k.patience = wait.Patience(ac.Base)
	for failed := 1; ; failed++ {
		qe := c.drawTicket(ctx, k, ac.Terms.Now(c.e), max(ac.TTL, ac.counterHorizon))
		if qe == nil || qe.cause != nil || qe.misconfigured || ac.retry == nil || failed == ac.maxAttempts {
			return qe
		}
		select {
		case <-c.cfg.clock.After(ac.retry.Delay(failed)):
		case <-ctx.Done():
			qe.cause = ctx.Err()
			return qe
		}
	}
}

// linePatience is how long the waiter keeps its place (see wait.Next).
func (k *fair) linePatience() time.Duration { return k.patience }

func (k *fair) named(payload string) wait.Naming {
	switch payload {
	case "":
		return wait.NamedNobody
	case k.waiter:
		return wait.NamedUs
	}
	return wait.NamedAnother
}

// drawTicket draws a fair waiter's ticket: the highest of the ticket
// counters of a quorum of nodes, each incremented (docs/kinds.md, "Fair").
// A counter's next value is the node's clock in microseconds, or one more
// than its last when that is more (prelude.lua). When every answer is its
// node's clock, within ticketSpread of each other, a later waiter gets a
// higher ticket from any node, and nothing more is done. Otherwise (a
// node's clock is ahead, or a counter ran ahead of the clock) the counters
// of a quorum are raised to the ticket before the waiter queues, so that a
// later waiter, drawing from any quorum, cannot get an equal or lower
// ticket that could be granted first.
func (c *Client) drawTicket(ctx context.Context, f *fair, tm engine.Terms, keep time.Duration) *quorumError {
	q := f.quorum(len(c.nodes))
	t, _ := c.e.FanOut(ctx, tm, engine.WonAt(q), nil, engine.Settlement{}, f.ticketOp(keep))
	if t.Yes < q {
		return f.ticketRefused(ctx, "a ticket from", t, len(c.nodes), q)
	}
	hi, lo, clocks := drawn(t)
	f.ticket = max(f.ticket, hi)
	if clocks && f.ticket-lo <= ticketSpread {
		return nil
	}
	at := 0
	skip := make([]bool, len(t.Answers))
	for i, a := range t.Answers {
		if a == engine.Holds && t.Replies[i].Counter == f.ticket {
			at++
			skip[i] = true
		}
	}
	raised := func(r *engine.Tally) bool { return at+r.Yes >= q }
	r, _ := c.e.FanOut(ctx, tm, raised, skip, engine.Settlement{}, raiseFenceOn(f.ticketKeys(), f.ticket, keep))
	if !raised(&r) {
		f.ticket = 0
		return f.ticketRefused(ctx, "a ticket stored on", r, len(c.nodes), q-at)
	}
	return nil
}

// drawn is the highest and the lowest counter the nodes that gave a
// ticket in t answered, and whether every one of them was its node's
// clock.
func drawn(t engine.Tally) (hi, lo uint64, clocks bool) {
	lo, clocks = math.MaxUint64, true
	for i, a := range t.Answers {
		if a == engine.Holds {
			r := t.Replies[i]
			clocks = clocks && r.Clock
			hi, lo = max(hi, r.Counter), min(lo, r.Counter)
		}
	}
	return hi, lo, clocks
}

// ticketSpread is how far apart (in the counters' microseconds) the
// clock values of one ticket draw may be without raising the lower
// counters (see drawTicket).
const ticketSpread = 1000

// ticketRefused is the error of a ticket draw, or of its raise, that missed
// its quorum: yes of the n nodes answered, q were needed.
func (k *fair) ticketRefused(ctx context.Context, what string, t engine.Tally, n, q int) *quorumError {
	return &quorumError{sentinel: ErrNotAcquired, detail: fmt.Sprintf("%s: %s %d of %d nodes, quorum %d", k.describe(), what, t.Yes, n, q),
		cause: ctx.Err(), nodes: t.Errs, heldOn: -1, misconfigured: t.OutOfReach(q)}
}
