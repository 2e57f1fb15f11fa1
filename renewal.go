package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/sched"
)

// One scheduler per Client, one goroutine while any lock is scheduled,
// renews the locks acquired WithAutoRenew when due (plain locks due within
// their slack together: renewBatch) and ends those whose Done was called
// when their validity runs out (docs/algorithm.md, "Fencing, Done,
// renewal, Do"). Nothing it tells (a loss, to the logger and the Observer)
// runs on its goroutine or with a lock of a batch held: an Observer may
// Release any lock, and wait for the nodes to do it.

const (
	// renewBatchMax is the most locks one script call renews: a script
	// holds its node for its whole run, about a microsecond per lock.
	renewBatchMax = 128
	// renewSlackMax bounds how much earlier than due a renewal may go out
	// with others: at most a twentieth of the ttl, and at most this.
	renewSlackMax = 100 * time.Millisecond
)

// newScheduler is the Client's scheduler of its locks' ends and renewals.
func newScheduler(c *Client) *sched.Scheduler[*Lock] {
	clock := c.cfg.clock
	return sched.New(sched.Hooks[*Lock]{
		Now:      clock.Now,
		NewTimer: func(d time.Duration) sched.Timer { return newTimer(clock, d) },
		Times:    (*Lock).schedTimes,
		Lose:     func(l *Lock) { go l.lose(l.lossReason()) }, // in a goroutine: see the top of this file
		Renew:    c.startRenewals,
	}, func(l *Lock) *sched.Entry { return &l.sched })
}

// schedTimes is when the lock needs the scheduler, as its lease is now.
func (l *Lock) schedTimes() sched.Times {
	l.mu.Lock()
	tm, until, over := l.terms, l.until, l.released || l.lost
	l.mu.Unlock()
	t := sched.Times{Over: over, Deadline: l.deadline(tm, until)}
	if l.renewed {
		t.Due, t.Slack = engine.RenewDue(until, tm.TTL, tm.Drift), min(tm.TTL/20, renewSlackMax)
	}
	return t
}

// lossReason is why a lock whose deadline passed is lost.
func (l *Lock) lossReason() error {
	if l.renewed {
		tm, _ := l.lease()
		return fmt.Errorf("not renewed by %v before the end of its validity", tm.RenewMargin())
	}
	return errors.New("its validity ran out")
}

// startRenewals renews the locks: plain ones together, up to
// renewBatchMax a call (see renewBatch), each of the others on its own, as
// an Extend (other kinds, a renewal close to its deadline, Clients of Redis
// Cluster nodes or without batching). It does not wait.
func (c *Client) startRenewals(locks []*Lock) {
	if len(locks) == 0 {
		return
	}
	clock := c.cfg.clock
	var batch []*Lock
	for _, l := range locks {
		tm, until := l.lease()
		// A renewal close to its deadline goes alone: in a batch, it
		// would cut the wait for the nodes of all the others to its own.
		left := l.deadline(tm, until).Sub(clock.Now())
		if _, plain := l.kind.(plain); plain && c.batchRenewals && left >= (tm.TTL-tm.Drift)/4 {
			batch = append(batch, l)
			continue
		}
		go l.renewOnce()
	}
	for len(batch) > 0 {
		n := min(len(batch), renewBatchMax)
		go c.renewBatch(batch[:n:n])
		batch = batch[n:]
	}
}

// renewOnce renews the lock once, as an Extend waiting for the nodes until
// its deadline (renewalWait), and tells the scheduler how it went. It
// renews the lease an Extend or Release busy with the lock leaves.
func (l *Lock) renewOnce() {
	c := l.client
	var retryAt time.Time
	defer func() { c.sched.Renewed(l, retryAt) }()
	l.op.Lock()
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		// Released while this renewal waited for the op: nothing to
		// renew, and nothing to tell (it was not lost).
		l.op.Unlock()
		return
	}
	tm, until := l.lease()
	left := l.deadline(tm, until).Sub(c.cfg.clock.Now())
	if left <= 0 {
		l.op.Unlock()
		l.lose(l.lossReason())
		return
	}
	// The node timeout of now (the round trips may have changed), as long
	// as renewalWait says: extendHeld cuts the wait to it, not past it.
	tm = tm.Now(c.e)
	tm.Timeout = c.renewalWait(tm, left)
	lost, tell, err := l.extendHeld(context.Background(), tm, tm.Timeout)
	l.op.Unlock()
	tell()
	l.renewalOver(tm, lost, err, &retryAt)
}

// renewalWait is how long a renewal on the terms tm, left before the
// lock's deadline, waits for the nodes: all of left, since a quorum's
// replies that come before the deadline keep the lock, however much
// slower than the node timeout (which follows the round trips seen so
// far) the network just got; the deadline, the renewal margin before
// Until, bounds it. A node timeout given WithNodeTimeout is kept as given,
// cut to left.
func (c *Client) renewalWait(tm engine.Terms, left time.Duration) time.Duration {
	if c.cfg.nodeTimeout > 0 {
		return min(tm.Timeout, left)
	}
	return left
}

// holdForRenewal takes the op lock of each of locks that is free and not
// over, and returns those; one held by its own Extend or Release renews on
// its own (renewOnce), one over is done with.
func (c *Client) holdForRenewal(locks []*Lock) []*Lock {
	held := locks[:0]
	for _, l := range locks {
		if !l.op.TryLock() {
			go l.renewOnce()
			continue
		}
		if l.over() != nil {
			l.op.Unlock()
			c.sched.Renewed(l, time.Time{})
			continue
		}
		held = append(held, l)
	}
	return held
}

// renewalOp is the one call per node that renews the locks held, each
// lock's lease, and the terms of the call, whose timeout is the shortest
// of the locks' renewalWait (each lock's wait ends by its deadline).
func (c *Client) renewalOp(held []*Lock) (op nodeOp, leases []engine.Terms, wait engine.Terms) {
	leases = make([]engine.Terms, len(held))
	keys := make([]string, len(held))
	args := make([]any, 0, 2*len(held))
	now := c.cfg.clock.Now()
	for j, l := range held {
		tm, until := l.lease()
		tm = tm.Now(c.e)
		leases[j] = tm
		keys[j] = l.key
		args = append(args, l.token, engine.PXMillis(tm.TTL))
		tm.Timeout = c.renewalWait(tm, l.deadline(tm, until).Sub(now))
		if j == 0 || tm.Timeout < wait.Timeout {
			wait = tm
		}
	}
	return nodeOp{Script: renewBatchScript, Keys: keys, Args: args, Shape: nodeio.Batch, Holds: true, Takes: true}, leases, wait
}

// renewalOver reports a renewal's outcome, ends the lock if the nodes
// showed it lost, and sets retryAt after a failure that may pass.
func (l *Lock) renewalOver(tm engine.Terms, lost bool, err error, retryAt *time.Time) {
	c := l.client
	c.observe(context.Background(), Event{Op: OpRenew, Kind: l.kind.name(), Key: l.key, Start: c.cfg.clock.Now(), Err: err})
	switch {
	case err == nil:
	case !isOpen(l.done): // released or lost meanwhile
	case lost:
		// A majority that no longer holds the token will not hold it again.
		l.lose(err)
	default:
		c.cfg.logger.Warn("redlock: renewal failed; trying again", "key", l.key, "kind", l.kind.name(), "err", err)
		*retryAt = c.cfg.clock.Now().Add(tm.TTL / 10)
	}
}

// renewBatch renews plain locks with one script call per node
// (renew_batch.lua), waiting for the nodes until the earliest of their
// deadlines at most, and judges each lock on its own, as Extend does. A
// lock that an Extend or Release is busy with is renewed alone, after it.
func (c *Client) renewBatch(locks []*Lock) {
	clock := c.cfg.clock
	held := c.holdForRenewal(locks)
	if len(held) == 0 {
		return
	}
	n := len(c.nodes)
	op, leases, wait := c.renewalOp(held)

	ctx := context.Background()
	start := clock.Now()
	refusedBefore := c.e.Refused()
	var t engine.Tally
	var settled engine.Settlement
	var rest *engine.Fan // the nodes yet to answer once every lock was kept on a quorum
	if refusedBefore == nil {
		t, settled, rest = c.e.FanOutEarly(ctx, wait, c.renewedEach(n, held), keptEach(n, held), engine.Settlement{}, op)
	}
	elapsed := clock.Now().Sub(start)
	if rest != nil && !keepsAll(held, leases, elapsed) {
		t, rest = rest.Whole(), nil // a verdict that drops keys needs every node
	}
	refused := c.e.Refused()
	outcomes := make([]renewal, len(held))
	for j, l := range held {
		o := &outcomes[j]
		if refused == nil {
			l.settled = settled
			l.outdateHearing()
			o.t = t.Of(j, n)
			o.lost, o.err = l.judgeExtend(ctx, leases[j], start, elapsed, o.t)
		} else {
			o.err = l.refusedExtend()
		}
	}
	c.hearBatch(rest, held, start, outcomes)
	// Every lock of the batch is let go before anything is told: an
	// Observer may Release any of them.
	for _, l := range held {
		l.op.Unlock()
	}
	c.tellRenewals(held, leases, start, outcomes, refused == nil)
}

// renewal is one lock's part in a batch renewal: its tally, its outcome,
// and the channel its heardAll closes when its nodes are heard behind it
// (hearBatch), or nil.
type renewal struct {
	t     engine.Tally
	err   error
	lost  bool
	heard chan struct{}
}

// keepsAll reports whether each lock of held keeps its lease (Lock.keeps).
func keepsAll(held []*Lock, leases []engine.Terms, elapsed time.Duration) bool {
	for j, l := range held {
		if !l.keeps(leases[j], elapsed) {
			return false
		}
	}
	return true
}

// tellRenewals tells the outcomes of a batch renewal of held, begun at
// start (sent: the nodes were asked), and hands each lock back to the
// scheduler.
func (c *Client) tellRenewals(held []*Lock, leases []engine.Terms, start time.Time, outcomes []renewal, sent bool) {
	ctx := context.Background()
	for j, l := range held {
		o := outcomes[j]
		if sent {
			l.observeOp(ctx, OpExtend, start, o.err)
		}
		if sent && o.heard == nil {
			c.observeNodes(ctx, OpExtend, l.kind, start, o.t)
			if o.err == nil {
				c.degraded(ctx, l.kind, o.t, l)()
			}
		}
		if o.lost {
			// In a goroutine: an Observer told of the loss holds up no other.
			go func() {
				var retryAt time.Time
				l.renewalOver(leases[j], true, o.err, &retryAt)
				c.sched.Renewed(l, retryAt)
			}()
			continue
		}
		var retryAt time.Time
		l.renewalOver(leases[j], false, o.err, &retryAt)
		c.sched.Renewed(l, retryAt)
	}
}

// renewedEach is a batch renewal's stop condition, as extendDone is an
// extend's: every lock of it decided (decidedEach) and only failing nodes
// left, or the grace of withGrace passed since, so that each lock's
// Confirmed counts the nodes about as fast as the deciding ones.
func (c *Client) renewedEach(n int, locks []*Lock) func(*engine.Tally) bool {
	decided := decidedEach(n, locks)
	return engine.WithGrace(func(t *engine.Tally) bool {
		return decided(t) && !c.e.Awaits(t, engine.Settlement{})
	}, decided)
}

// hearBatch hears behind a batch renewal of held, begun at start, that
// returned once every lock was kept on a quorum (rest; nil when it did
// not), the nodes that had yet to answer, for each lock it renewed: see
// Lock.hearLater. It sets each such lock's renewal.heard.
func (c *Client) hearBatch(rest *engine.Fan, held []*Lock, start time.Time, outcomes []renewal) {
	if rest == nil {
		return
	}
	for j, l := range held {
		if outcomes[j].err == nil {
			outcomes[j].heard = l.hearing()
		}
	}
	go func() {
		t := rest.Rest()
		ctx := context.Background()
		tells := make([]func(), len(held))
		tallies := make([]engine.Tally, len(held))
		for j, l := range held {
			if heard := outcomes[j].heard; heard != nil {
				tallies[j] = t.Of(j, len(c.nodes))
				tells[j] = l.heardAll(ctx, OpExtend, tallies[j], heard)
			}
		}
		for j, l := range held {
			if tells[j] != nil {
				c.observeNodes(ctx, OpExtend, l.kind, start, tallies[j])
				tells[j]()
				c.e.Calls.Done()
			}
		}
	}()
}

// keptEach says when every lock of a batch renewal is kept on a quorum
// (its token was there: see tally.kept).
func keptEach(n int, locks []*Lock) func(*engine.Tally) bool {
	return func(t *engine.Tally) bool {
		for j, l := range locks {
			kept := 0
			for i := range n {
				if t.HeldAt(i, j) && t.Replies[i].Batch[j] == 1 {
					kept++
				}
			}
			if kept < l.quorum {
				return false
			}
		}
		return true
	}
}

// decidedEach says when every lock of a batch renewal is held by a quorum,
// or can no longer be.
func decidedEach(n int, locks []*Lock) func(*engine.Tally) bool {
	return func(t *engine.Tally) bool {
		for j, l := range locks {
			yes, notYes := 0, 0
			for i, a := range t.Answers {
				switch {
				case a == engine.Unanswered:
				case t.HeldAt(i, j) && t.Replies[i].Batch[j] == 1: // kept (see tally.kept)
					yes++
				default:
					notYes++
				}
			}
			if won, lost := engine.Decide(n, l.quorum, yes, notYes); !won && !lost {
				return false
			}
		}
		return true
	}
}
