// Package redlock implements distributed locks over N independent Redis
// masters with the Redlock algorithm: a lock is held when a majority of the
// nodes took it, and it is valid for its TTL less the time the acquisition
// took and an allowance for clock drift.
//
// A Client acquires a lock in five steps (see docs/algorithm.md):
//
//  1. note the start time on a monotonic Clock;
//  2. run SET-if-absent with the TTL on every node at once, each under a
//     small per-node timeout;
//  3. count the nodes that took the lock and compute the validity:
//     ttl − elapsed − (ttl·driftFactor + 2ms); the lock is acquired only if a
//     quorum (N/2+1) took it and the validity is positive;
//  4. otherwise release it on every node that may have taken it, with a
//     context of its own;
//  5. retry after a random delay until the caller's context ends (Acquire),
//     or give up after one attempt (TryAcquire).
//
// The lock key is stored under the key as given, with a random token of 128
// bits or more as its value, so `redis-cli GET key` shows the holder.
//
// The algorithm is safe only under the assumptions in docs/safety.md:
// bounded clock rate error, nodes that persist every write or stay down
// longer than the largest TTL, and a holder that stops working when its
// validity ends.
package redlock

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/reply"
	"github.com/quorumlock/redlock/internal/wait"
)

// The five steps of the package doc run in this file, in order: attempt
// (1 and 2: newAcquisition, acquisition.fanOut), conclude (3; settleFence
// for a fenced lock), cleanup (4) and acquireLoop (5; internal/wait/wakeup.go). The
// Client and New are in client.go; Extend and Release in lock.go.

// Acquire acquires the lock on key for ttl, retrying after failed attempts
// (see WithRetry) until it succeeds or ctx ends. The Lock is valid for ttl
// less the time the successful attempt took and the drift allowance; see
// Lock.Until. Goroutines of one Client that Acquire the same key take turns,
// first come first served, so that only one of them at a time contends on
// the nodes; a release hands the lock to the next in one round trip (see
// WithHandOff). A waiting Acquire also tries again at once when it hears
// the lock's release announced by the nodes.
//
// Options choose another kind of lock (WithOwner, ForRead, ForWrite,
// WithPermits, Fair; AcquireAll for several keys; see docs/kinds.md).
// Writers and multi-key locks take local turns and are handed over as the
// plain lock is; readers, permits, an owner's holds and fair waiters do
// not.
//
// It returns an error matching ErrInvalidArgument for an empty key, a ttl
// that is not larger than the drift allowance, a bad option, or two kind
// options, before any node is contacted. When two nodes reach one server,
// or misconfigured nodes keep a quorum out of reach (see
// ErrMisconfigured), it returns at once with an error matching both
// ErrNotAcquired and ErrMisconfigured. When ctx ends first, the error
// matches both ErrNotAcquired and ctx.Err(), and joins the last attempt's
// *NodeError values; it also matches ErrTaken when a quorum refused that
// attempt because another holder has the key.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if err := nilContext(ctx, "Client.Acquire"); err != nil {
		return nil, err
	}
	ac, err := c.acquireConfig(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	k := ac.kindFor(key)
	return c.observed(ctx, k, func(ctx context.Context, attempts *int) (*Lock, error) { return c.inTurn(ctx, k, ac, attempts) })
}

// TryAcquire makes exactly one attempt to acquire the lock on key for ttl.
//
// It returns an error matching ErrNotAcquired when fewer than a quorum of
// nodes took the lock or its validity was spent, joined with a *NodeError
// for every node that failed; it also matches ErrTaken when a quorum
// refused because another holder has the key, and ctx.Err() when ctx ended;
// when two nodes reach one server, or misconfigured nodes keep
// a quorum out of reach, it also matches ErrMisconfigured. Bad input gives an error matching ErrInvalidArgument,
// before any node is contacted.
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if err := nilContext(ctx, "Client.TryAcquire"); err != nil {
		return nil, err
	}
	ac, err := c.acquireConfig(key, ttl, opts)
	if err != nil {
		return nil, err
	}
	k := ac.kindFor(key)
	return c.observed(ctx, k, func(ctx context.Context, attempts *int) (*Lock, error) { return c.tryOnce(ctx, k, ac, attempts) })
}

// tryOnce is one attempt of a TryAcquire: for a fair lock, with the ticket
// drawn first and its place in the queue left when the attempt fails.
func (c *Client) tryOnce(ctx context.Context, k kind, ac acquireConfig, attempts *int) (*Lock, error) {
	if line, ok := k.(waitsInLine); ok {
		once := ac
		once.retry = nil
		if qe := line.join(ctx, c, once); qe != nil {
			return nil, qe
		}
	}
	a := c.newAcquisition(k, ac, engine.Settlement{})
	*attempts = 1
	lock, qe := c.attempt(ctx, &a, false)
	if qe != nil {
		c.leave(ctx, &a)
		return nil, qe
	}
	return lock, nil
}

// inTurn is Acquire's attempts for a lock of kind k, made in the turn of
// the kind's local queue when it has one (see localqueue.go).
func (c *Client) inTurn(ctx context.Context, k kind, ac acquireConfig, attempts *int) (*Lock, error) {
	// The attempts run under ctx alone: WithWaitTimeout's bound ends the
	// waits between them (acquireLoop), and the wait for a local turn,
	// never an attempt under way, so that its nodes' answers are heard
	// and nothing in the error says that ctx ended.
	turn := ctx
	if ac.waitTimeout > 0 {
		ac.waitUntil = c.cfg.clock.Now().Add(ac.waitTimeout)
		wctx, stop := c.waitBound(ctx, ac.waitTimeout)
		defer stop()
		turn = wctx
	}
	// An Acquire bounded by WithMaxAttempts does not wait in the local
	// queue, whose wait is bounded only by ctx.
	queue := k.turns()
	if queue == "" || ac.maxAttempts > 0 {
		return c.acquireLoop(ctx, k, ac, attempts)
	}
	lock, err := c.takeTurn(turn, queue, k, ac, attempts, func() (*Lock, error) {
		return c.acquireLoop(ctx, k, ac, attempts)
	})
	return lock, waitedOut(turn, err)
}

// waitBound is ctx, which also ends, with a *waitedOutError as its cause,
// once d has passed on the Client's Clock (WithWaitTimeout): what waits for
// a local turn. stop lets it go.
func (c *Client) waitBound(ctx context.Context, d time.Duration) (_ context.Context, stop func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-c.cfg.clock.After(d):
			cancel(&waitedOutError{d})
		case <-wctx.Done():
		}
	}()
	return wctx, func() { cancel(nil) }
}

// waitedOutError is why an Acquire's wait ended at its WithWaitTimeout.
type waitedOutError struct{ d time.Duration }

func (e *waitedOutError) Error() string {
	return fmt.Sprintf("gave up after waiting %v (WithWaitTimeout)", e.d)
}

// waitedOut is err, an Acquire's error under wctx (see waitBound): when
// the wait bound ended it, not the caller's context, the error says so
// rather than carry a context's error.
func waitedOut(wctx context.Context, err error) error {
	var qe *quorumError
	var wo *waitedOutError
	if err != nil && errors.As(context.Cause(wctx), &wo) && errors.As(err, &qe) && qe.cause != nil {
		qe.cause = nil
		qe.detail += ", " + wo.Error()
	}
	return err
}

// acquireLoop is Acquire's attempts, until one succeeds or ctx ends.
func (c *Client) acquireLoop(ctx context.Context, k kind, ac acquireConfig, attempts *int) (*Lock, error) {
	w, joinErr := c.startWaiting(ctx, k, ac)
	if joinErr != nil {
		return nil, joinErr
	}
	defer func() {
		w.ln.Leave(ac.Timeout)
		w.watch.Close()
	}()
	// The attempts, their cleanups and the leave reach each node in order:
	// a late cleanup landing after a later attempt's calls would put a fair
	// waiter back in a queue it had left.
	var settled engine.Settlement
	for failed := 1; ; failed++ {
		*attempts = failed
		// A token per attempt (see cleanup); what lasts across attempts (a
		// writer's mark, a place in a fair queue) has a waiter ID in the kind.
		a := c.newAcquisition(k, ac, settled)
		w.attempting()
		// A fair waiter named first in line is eager: refused, it tries
		// again at once rather than wait out a frozen node's timeout.
		lock, qe := c.attempt(ctx, &a, w.first)
		if qe == nil {
			return lock, nil
		}
		settled = a.settled
		if qe.final() {
			return nil, c.giveUp(ctx, &a, qe, qe.cause)
		}
		if failed == ac.maxAttempts {
			qe.detail += fmt.Sprintf(", after %d attempts (WithMaxAttempts)", failed)
			return nil, c.giveUp(ctx, &a, qe, nil)
		}
		c.cfg.logger.DebugContext(ctx, "redlock: attempt failed", "key", k.keys()[0], "kind", k.name(), "attempt", failed, "err", qe)
		// WithWaitTimeout's bound passed: give up before subscribing or
		// taking a place in line, which would only be left again.
		if c.waitedOut(ac) {
			qe.detail += ", " + (&waitedOutError{ac.waitTimeout}).Error()
			return nil, c.giveUp(ctx, &a, qe, nil)
		}
		fresh := w.listen(ctx, c, qe, a.cfg.Timeout)
		delay, listen := w.delay(ac, qe, failed, a.cfg.Timeout, fresh)
		if qe.silent && !a.settled.Wait(ctx) {
			// No node answered in time and the calls are still on their way:
			// the next attempt's calls would spend their node timeout queued
			// behind them, so they are waited for first (to their deadlines).
			return nil, c.giveUp(ctx, &a, qe, ctx.Err())
		}
		var ok bool
		if ok, w.first, w.woken = c.waitRetry(ctx, k, listen, c.toWaitedOut(ac, delay)); !ok {
			return nil, c.giveUp(ctx, &a, qe, ctx.Err())
		}
	}
}

// startWaiting is what an Acquire of k keeps between its attempts, before
// the first: a fair waiter's place in its queues, taken now (the error
// when it cannot be), and a plain lock's line when it may wait.
func (c *Client) startWaiting(ctx context.Context, k kind, ac acquireConfig) (waiting, *quorumError) {
	w := waiting{kind: k, clock: c.cfg.clock}
	w.line, w.inLine = k.(waitsInLine)
	if w.inLine {
		if qe := w.line.join(ctx, c, ac); qe != nil {
			return w, qe
		}
	}
	if p, ok := k.(plain); ok && ac.retry != nil {
		w.ln = c.newLine(p.key, ac.TTL)
	}
	return w, nil
}

// waitedOut reports whether WithWaitTimeout's bound (ac.waitUntil) has
// passed on the Client's Clock.
func (c *Client) waitedOut(ac acquireConfig) bool {
	return !ac.waitUntil.IsZero() && !c.cfg.clock.Now().Before(ac.waitUntil)
}

// toWaitedOut is delay, cut to what is left of WithWaitTimeout's bound
// (ac.waitUntil) on the Client's Clock.
func (c *Client) toWaitedOut(ac acquireConfig, delay time.Duration) time.Duration {
	if ac.waitUntil.IsZero() {
		return delay
	}
	return min(delay, max(ac.waitUntil.Sub(c.cfg.clock.Now()), 0))
}

// giveUp ends an Acquire after its failed attempt a: it drops what the
// waiter left on the nodes (see leave) and returns qe, with cause as its
// cause when not nil.
func (c *Client) giveUp(ctx context.Context, a *acquisition, qe *quorumError, cause error) *quorumError {
	if cause != nil {
		qe.cause = cause
	}
	c.leave(ctx, a)
	return qe
}

// waiting is what an Acquire keeps between its attempts: where it listens
// for the release, its place in line, and what the last waits told.
type waiting struct {
	kind       kind
	clock      Clock
	line       waitsInLine // the kind, when it waits in a queue (fair)
	inLine     bool
	watch      *wait.Watch   // subscribed after the first refusal that named a holder
	ln         *wait.Line    // a plain lock's waiter's place in line, once it waits
	first      bool          // a fair lock's last announcement named this waiter first in line
	woken      bool          // the last wait ended with a release announcement
	wokeAt     time.Time     // when a release was last heard
	lastHolder nodeio.Holder // the other holder the last refusal named on a quorum, if any
}

// attempting is called before each attempt. Only an announcement made
// while the attempt runs ends the next wait; one heard since the last wait
// ended (the timer fired first, or it came just after) still counts as a
// wake-up: the attempt may find the release not yet landed on a quorum.
func (w *waiting) attempting() {
	if w.watch.Drain() {
		w.wokeAt = w.clock.Now()
	}
}

// listen subscribes to the release on a node that named a holder (qe),
// after the first attempt that heard one named (an attempt before it may
// have heard no node at all), and moves to another when the one listened
// to is failing (frozen or cut off) or its subscriptions' connection no
// longer receives: its releases would never be heard. It reports whether a
// new subscription was confirmed.
func (w *waiting) listen(ctx context.Context, c *Client, qe *quorumError, timeout time.Duration) (fresh bool) {
	watch := w.watch
	if qe.heldOn >= 0 && (watch == nil || watch.Node != qe.heldOn && (c.e.Failing(watch.Node) || watch.Deaf())) {
		watch.Close()
		w.watch = c.watchRelease(ctx, w.kind.channels(), w.ln, qe.heldOn, timeout)
		fresh = w.watch.Subscribed()
	}
	if w.watch != nil {
		// Take a place in line, or keep it: a release wakes the first
		// two in line that listen.
		w.ln.Join(w.watch.Node, timeout)
	}
	return fresh
}

// delay is the wait before the next attempt after the failed attempt that
// qe tells of (see wait.Next), and the watch to listen on meanwhile (nil:
// none).
func (w *waiting) delay(ac acquireConfig, qe *quorumError, failed int, timeout time.Duration, fresh bool) (time.Duration, *wait.Watch) {
	now := w.clock.Now()
	if w.woken {
		w.wokeAt = now
	}
	f := wait.Facts{
		Given: ac.retry.Delay(failed), Paced: ac.retry == defaultRetry,
		Subscribed: w.watch.Subscribed(), SinceWoken: now.Sub(w.wokeAt), NodeTimeout: timeout,
		NewHolder: qe.taken && qe.holder != w.lastHolder, Fresh: fresh, Unreachable: qe.unreachable,
		InLine: w.inLine, First: w.first,
	}
	if w.inLine {
		f.Patience = w.line.linePatience()
	}
	if qe.taken {
		w.lastHolder = qe.holder
	}
	d := wait.Next(f, mrand.N[time.Duration])
	if qe.unreachable {
		return d, nil
	}
	return d, w.watch
}

// leave drops what an Acquire that gives up left on the nodes between its
// attempts (a writer's mark, a place in a fair queue), waiting at most the
// node timeout; on each node after the calls of its last attempt.
func (c *Client) leave(ctx context.Context, a *acquisition) {
	if op := a.kind.leave(a.token); op != nil {
		a.fanOut(context.WithoutCancel(ctx), c, nil, nil, *op)
	}
}

// acquisition is one attempt to acquire a lock: what its steps need, the
// node timeout worked out once, and the settlement of the last calls it
// sent, which the next calls to each node wait for.
type acquisition struct {
	kind    kind
	token   string        // the attempt's own
	cfg     acquireConfig // the Acquire's options and terms (ttl, node timeout, drift)
	start   time.Time     // on the Clock, when the attempt's calls were sent
	settled engine.Settlement
	// rest, when the acquire's fan-out returned at the quorum, hears the
	// nodes yet to answer (see attempt)
	rest *engine.Fan
}

// newAcquisition prepares an attempt with a fresh token, whose calls go to
// each node after those of after, with the node timeout of now.
func (c *Client) newAcquisition(k kind, ac acquireConfig, after engine.Settlement) acquisition {
	ac.Terms = ac.Terms.Now(c.e)
	return acquisition{kind: k, token: storedValue(newToken(k), ac.metadata), cfg: ac, settled: after}
}

// fanOut runs op on the nodes (see Engine.FanOut) with the attempt's node
// timeout, after its last calls, and makes these its last calls.
func (a *acquisition) fanOut(ctx context.Context, c *Client, stop func(*engine.Tally) bool, skip []bool, op nodeOp) engine.Tally {
	t, settled := c.e.FanOut(ctx, a.cfg.Terms, stop, skip, a.settled, op)
	a.settled = settled
	return t
}

// attempt is one run of steps 1 to 4 of the algorithm for a. Its error
// carries the context's error when the context had ended by its return.
// eager returns a failure as soon as the quorum is out of reach (see
// attemptDone).
func (c *Client) attempt(ctx context.Context, a *acquisition, eager bool) (*Lock, *quorumError) {
	if err := ctx.Err(); err != nil {
		return nil, &quorumError{sentinel: ErrNotAcquired, detail: fmt.Sprintf("%s: no attempt made", a.kind.describe()), cause: err, heldOn: -1}
	}
	if err := c.e.Refused(); err != nil {
		return nil, c.refusal(a, err)
	}
	a.start = c.cfg.clock.Now()
	// When to stop waiting for the nodes: see attemptDone. A plain lock
	// that is not fenced is granted once a quorum holds it, and the nodes
	// yet to answer are heard behind it (Lock.hearLater).
	q := a.kind.quorum(len(c.nodes))
	var early func(*engine.Tally) bool
	if _, plain := a.kind.(plain); plain && !a.cfg.fenced {
		early = engine.WonAt(q)
	}
	t, settled, rest := c.e.FanOutEarly(ctx, a.cfg.Terms, c.e.AttemptDone(q, eager), early, a.settled, a.kind.acquire(a.token, a.cfg.TTL, a.cfg.counterKeep()))
	a.settled, a.rest = settled, rest
	if t.Yes < q && !t.OutOfReach(q) {
		t = c.resolveSplit(ctx, a, t, q)
	}
	if rest == nil {
		c.observeNodes(ctx, OpAcquire, a.kind, a.start, t)
	}
	return c.conclude(ctx, a, t)
}

// heard is attempt a's tally t whole (see attempt), told to the Observer.
func (c *Client) heard(ctx context.Context, a *acquisition, t engine.Tally) engine.Tally {
	if a.rest != nil {
		t, a.rest = a.rest.Whole(), nil
		c.observeNodes(ctx, OpAcquire, a.kind, a.start, t)
	}
	return t
}

// refusal is the error of an attempt on a Client found to reach one server
// through two nodes (err, a *NodeError that matches ErrMisconfigured).
func (c *Client) refusal(a *acquisition, err error) *quorumError {
	return &quorumError{sentinel: ErrNotAcquired, heldOn: -1, nodes: []error{err}, misconfigured: true,
		detail: fmt.Sprintf("%s: refused, two nodes reach one server", a.kind.describe())}
}

// conclude is steps 3 and 4 of attempt a, which got t from the nodes: the
// Lock when a quorum took the key within its validity (for a fenced lock,
// once a quorum stores its fencing token), or else the release of the key
// wherever it may have been taken.
func (c *Client) conclude(ctx context.Context, a *acquisition, t engine.Tally) (*Lock, *quorumError) {
	if err := c.e.Refused(); err != nil {
		// Two nodes were found on one server (during this attempt, or
		// since a hand-off began): no lock is granted.
		c.cleanup(ctx, a, c.heard(ctx, a, t))
		return nil, c.refusal(a, err)
	}
	k, ttl, drift := a.kind, a.cfg.TTL, a.cfg.Drift
	q := k.quorum(len(c.nodes))
	var fence uint64
	fenceStored := true // or not needed
	if a.cfg.fenced && t.Yes >= q {
		fence, fenceStored = c.settleFence(ctx, a, t)
	}
	elapsed := c.cfg.clock.Now().Sub(a.start)
	v := engine.Validity(ttl, elapsed, drift)
	// A renewed lock must start with more validity than its renewal margin
	// (see renewMargin): it is declared lost by then at the latest.
	var need time.Duration
	if a.cfg.autoRenew {
		need = a.cfg.Terms.Now(c.e).RenewMargin()
	}
	if t.Yes >= q && fenceStored && v > need {
		return c.grant(ctx, a, t, fence), nil
	}

	// Step 4: a node that failed or did not answer may still have taken the
	// lock, so everything but a definite "held by another" is released.
	t = c.heard(ctx, a, t)
	c.cleanup(ctx, a, t)

	var detail string
	switch {
	case t.OutOfReach(q):
		detail = fmt.Sprintf("%s: %d of %d nodes are misconfigured, so a quorum of %d is out of reach", k.describe(), t.Broken, len(c.nodes), q)
	case t.Yes < q:
		detail = c.shortDetail(ctx, a, t, q)
	case !fenceStored:
		detail = fmt.Sprintf("%s: the fencing token could not be stored on a quorum", k.describe())
	case v > 0:
		detail = fmt.Sprintf("%s: quorum reached with %v of validity left, not more than the renewal margin %v (%v elapsed of ttl %v)", k.describe(), v, need, elapsed, ttl)
	default:
		detail = fmt.Sprintf("%s: quorum reached but its validity was spent (%v elapsed of ttl %v, drift %v)", k.describe(), elapsed, ttl, drift)
	}
	return nil, c.notAcquired(ctx, k, t, q, detail)
}

// shortDetail says how attempt a, which got t from the nodes, fell short
// of the quorum q, and when no node answered in time, what lets nodes
// that far away answer.
func (c *Client) shortDetail(ctx context.Context, a *acquisition, t engine.Tally, q int) string {
	detail := a.kind.describe() + ": " + shortOfQuorum(t, len(c.nodes), q)
	if t.Yes+t.No == 0 && ctx.Err() == nil && allTimedOut(t.Errs) {
		detail += c.timeoutHint(a.cfg.Timeout)
	}
	return detail
}

// grant makes the Lock of attempt a, won on the nodes t with the fencing
// token fence, and starts its renewal when asked for.
func (c *Client) grant(ctx context.Context, a *acquisition, t engine.Tally, fence uint64) *Lock {
	k := a.kind
	l := &Lock{client: c, kind: k, key: k.keys()[0], quorum: k.quorum(len(c.nodes)), token: a.token, run: runOf(a.token), fence: fence, terms: a.cfg.Terms.Now(c.e),
		until: a.start.Add(a.cfg.TTL - a.cfg.Drift), settled: a.settled, done: make(chan struct{}), renewed: a.cfg.autoRenew,
		acquired: c.cfg.clock.Now()}
	if a.rest != nil {
		l.hearLater(ctx, OpAcquire, a.start, a.rest.Rest)
	} else {
		l.confirmed, l.had = t.Yes, heldOn(t)
		c.degraded(ctx, k, t, nil)()
		c.leaveTheLine(ctx, a, t)
	}
	if a.cfg.autoRenew {
		c.sched.Renew(l)
	}
	return l
}

// hearLater hears, behind the lock's operation op (begun at start) that
// a quorum decided, the nodes that had yet to answer it (rest), as long
// as the operation would have waited for them (see heardAll).
func (l *Lock) hearLater(ctx context.Context, op Op, start time.Time, rest func() engine.Tally) {
	heard := l.hearing()
	go func() {
		defer l.client.e.Calls.Done()
		ctx := context.WithoutCancel(ctx)
		t := rest()
		tell := l.heardAll(ctx, op, t, heard)
		l.client.observeNodes(ctx, op, l.kind, start, t)
		tell()
	}()
}

// hearing marks the lock's last operation as decided before every node
// it waits for answered: heardAll closes the channel it returns, and Drain
// waits for that.
func (l *Lock) hearing() chan struct{} {
	heard := make(chan struct{})
	l.mu.Lock()
	l.heard = heard
	l.mu.Unlock()
	l.client.e.Calls.Add()
	return heard
}

// heardAll records what every node answered the lock's operation op (t:
// Confirmed, and where the lock is held, which Confirmed and the next
// extend wait for) and closes heard; tell tells it, once every lock heard
// with this one is recorded (an Observer may ask any of them).
func (l *Lock) heardAll(ctx context.Context, op Op, t engine.Tally, heard chan struct{}) (tell func()) {
	var gone *Lock // an acquire's tally is where the lock is held
	l.mu.Lock()
	latest := l.heard == heard // no renewal was judged since (outdateHearing)
	if latest {
		l.confirmed = t.Yes
		if op == OpAcquire {
			l.had = heldOn(t)
		} else {
			gone = l
		}
	}
	l.mu.Unlock()
	tell = l.client.degraded(ctx, l.kind, t, gone)
	close(heard)
	return tell
}

// outdateHearing tells the lock's hearLater, if any, that an extend is
// judged from now on: what it hears is told, not recorded (a renewal does
// not wait for it: over a slow network, the grace it waits would be cut
// from the renewal's time). l.op is held.
func (l *Lock) outdateHearing() {
	l.mu.Lock()
	l.heard = nil
	l.mu.Unlock()
}

// awaitHeard waits for the lock's hearLater, if any, to record its nodes.
func (l *Lock) awaitHeard() {
	l.mu.Lock()
	heard := l.heard
	l.mu.Unlock()
	if heard != nil {
		<-heard
	}
}

// notAcquired is the error of an attempt that the nodes (t) did not grant,
// with what the next attempt needs: where to listen for the release,
// whether one holder has the key, whether the nodes failed or refused.
func (c *Client) notAcquired(ctx context.Context, k kind, t engine.Tally, q int, detail string) *quorumError {
	holder, taken := engine.TakenByOne(t, q)
	return &quorumError{sentinel: ErrNotAcquired, detail: detail, cause: ctx.Err(), nodes: t.Errs,
		heldOn: wait.ListenNode(k.channels(), t.Answers, c.deaf), taken: taken, holder: holder, elsewhere: t.No >= q,
		misconfigured: t.OutOfReach(q), silent: t.Yes+t.No == 0 && allTimedOut(t.Errs),
		unreachable: len(t.Errs) > len(c.nodes)-q}
}

// allTimedOut reports whether every error of errs is a node's that gave
// no reply in time.
func allTimedOut(errs []error) bool {
	for _, err := range errs {
		if !reply.TimedOut(err) {
			return false
		}
	}
	return len(errs) > 0
}

// timeoutHint says, for an attempt in which no node answered within the
// node timeout, what lets nodes that far away answer.
func (c *Client) timeoutHint(timeout time.Duration) string {
	if c.cfg.nodeTimeout > 0 {
		return fmt.Sprintf("; no node answered within the node timeout %v: if the nodes are that far away (or that loaded), give WithNodeTimeout a longer one", timeout)
	}
	return fmt.Sprintf("; no node answered within the node timeout %v, which grows with the round trips seen up to two thirds of the ttl's validity: if the nodes are farther away than that, give a longer ttl, or WithNodeTimeout", timeout)
}

// cleanup releases key after a failed attempt whose tally it is given,
// with a context the caller's cancellation does not reach (the keys must go
// even if the caller gave up). It waits for the nodes that took the key;
// elsewhere the delete goes on in the background after the node's SET (see
// fanOut), so a dead or frozen node does not hold up the next attempt. An
// attempt's own token means a late delete removes only its own key.
func (c *Client) cleanup(ctx context.Context, a *acquisition, t engine.Tally) {
	answers := t.Answers
	skip := make([]bool, len(answers))
	for i, a := range answers {
		// A node that refused holds nothing of ours, nor one whose call
		// was never sent (its operation ended first: see notSent).
		skip[i] = a == engine.HoldsNot || t.Unsent != nil && t.Unsent[i]
	}

	answered := func(t *engine.Tally) bool {
		for i, ans := range answers {
			if ans == engine.Holds && t.Answers[i] == engine.Unanswered {
				return false
			}
		}
		return true
	}
	r := a.fanOut(context.WithoutCancel(ctx), c, answered, skip, a.kind.drop(a.token))
	if news := c.news(r.Errs); len(news) > 0 {
		c.cfg.logger.WarnContext(ctx, "redlock: could not release after a failed attempt; the key expires with its ttl",
			"key", a.kind.keys()[0], "kind", a.kind.name(), "ttl", a.cfg.TTL, "err", errors.Join(news...))
	}
}
