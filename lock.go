package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/sched"
)

// Lock is a lock held on a quorum of nodes. It is safe for concurrent use,
// and its methods may be called on a nil *Lock (as after a failed acquire):
// they report that nothing is held.
type Lock struct {
	client *Client
	kind   kind
	key    string // the first of kind.keys()
	quorum int    // how many nodes must hold it
	token  string // what the nodes store: the random token, and the metadata if any
	// run is the prefix of the tokens of the lock's run of hand-offs in
	// this Client (runOf); "" for a resumed lock, which knows no run
	run string

	// op serialises Extend and Release: each sends its call to a node once
	// the previous operation's call there settled, so writes land in order.
	op      sync.Mutex
	settled engine.Settlement

	fence    uint64    // the fencing token: 0 unless acquired WithFencing
	renewed  bool      // acquired WithAutoRenew: it ends the renewal margin before Until
	acquired time.Time // on the Client's clock, when it was acquired (for Event.Held)

	mu        sync.Mutex
	terms     engine.Terms // of the last acquire or extend
	confirmed int          // nodes that hold the lock after its last acquire or extend
	had       []bool       // by node: it has held the lock's token (see goneNews)
	// heard, when the last acquire or extend was decided before every node
	// it waits for had answered, is closed once they have (hearLater)
	heard    chan struct{}
	gone     []bool // by node: told that it does not hold the lock (see goneNews); nil until one is
	until    time.Time
	released bool
	lost     bool  // the lock ended otherwise: see lose
	lostWhy  error // why, matching ErrLockLost
	// lostShown: an Extend or renewal found a majority without the token
	lostShown bool
	watching  bool     // Done was called: the scheduler ends it at its deadline
	onEnd     []func() // see afterEnd

	sched sched.Entry // its place in the Client's scheduler

	done      chan struct{} // closed when the lock ends; see Done
	closeDone sync.Once
	next      successor // what follows the lock in its Client, if anything
}

// successor is what follows a Lock in its Client: the local turn it holds
// (localqueue.go), which Release may hand to the next waiter (handoff.go).
type successor interface {
	// release may do l's Release by handing the lock to a waiter; done
	// tells whether it did, and err is then Release's result.
	release(ctx context.Context, l *Lock, tm engine.Terms) (done bool, err error)
	// ended is told once when l ended without being handed over.
	ended(l *Lock)
}

// finish tells the lock's successor, once, that the lock has ended.
func (l *Lock) finish() {
	l.mu.Lock()
	next := l.next
	l.next = nil
	l.mu.Unlock()
	if next != nil {
		next.ended(l)
	}
}

// Extend makes the lock valid for ttl from the start of this call: every
// node that still holds its token, asked all at once, keeps the key for at
// least ttl; a plain lock also takes its key on every node where the key
// is free (as an acquire would there; another's key is never touched), so
// a lock won while a node held another's key is back on that node, and
// Confirmed counts it. It succeeds when a quorum of the nodes that still
// held the token did so within the new validity (a key taken where it was
// free does not count toward it, and is deleted again when the lock is
// found lost); it waits for the nodes about as fast as that quorum (as
// long again as the quorum took, at least 5 ms), not for slower ones;
// Until is then the start of the call plus ttl less the drift allowance,
// earlier than before when ttl is shorter than what was left. A node never
// shortens a key (it keeps the longer of what is left and ttl), so a late
// call never ends a key before the validity the lock reports, and a failed
// Extend leaves the lock valid until its old Until. To give a lock up
// early, Release it.
//
// Its errors match, with errors.Is: ErrLockLost, joined with each failed
// node's *NodeError, when a majority answered that they no longer hold the
// token or the validity ran out before a quorum confirmed; the lock is
// then lost (Done is closed). ErrNotConfirmed when a quorum did not
// confirm (nodes failed or were slow, or the new validity was spent) but
// nothing shows the lock lost: the message says until when it is still
// valid, Until is unchanged, and Extend may be tried again; on a Client
// found to reach one server through two nodes it also matches
// ErrMisconfigured. ErrLockLost, without contacting the nodes, for a lock
// released, lost or past its validity; ErrInvalidArgument for bad input
// and ctx's error for an ended ctx, before any node is contacted;
// ErrNotAcquired on a nil Lock.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := nilContext(ctx, "Lock.Extend"); err != nil {
		return err
	}
	if l == nil {
		return ErrNotAcquired
	}
	tm, err := l.client.checkLease(l.key, ttl)
	if err != nil {
		return err
	}
	// An extend confirmed after Until could not give the lock back, so the
	// nodes are not waited for past it.
	_, until := l.lease()
	ctx = l.startOp(ctx, OpExtend)
	lost, err := l.extend(ctx, tm, min(tm.Timeout, until.Sub(l.client.cfg.clock.Now())))
	if lost {
		l.lose(err)
	}
	return err
}

// extend is Extend on the terms tm with the given per-node timeout, also
// returning whether the answers showed the lock lost: the caller
// then ends it (Lock.lose) once op is let go, as an Observer may Release.
func (l *Lock) extend(ctx context.Context, tm engine.Terms, timeout time.Duration) (lost bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("redlock: extend %q: %w", l.key, err)
	}
	l.op.Lock()
	l.awaitHeard() // an Extend is told against the nodes its lock was last heard from
	lost, tell, err := l.extendHeld(ctx, tm, timeout)
	l.op.Unlock()
	tell()
	return lost, err
}

// extendHeld is extend, called with op held. tell reports the extend to
// the Observer: call it once op is let go, as an Observer may Release.
func (l *Lock) extendHeld(ctx context.Context, tm engine.Terms, timeout time.Duration) (lost bool, tell func(), err error) {
	c := l.client
	if err := l.over(); err != nil {
		return false, func() {}, err
	}
	if err := l.refusedExtend(); err != nil {
		return false, func() {}, err
	}

	start := c.cfg.clock.Now()
	// Decided once a quorum kept the token: the nodes yet to answer are
	// heard behind it (hearLater), not waited for past the verdict.
	won := func(t *engine.Tally) bool { return t.Kept() >= l.quorum }
	t, settled, rest := c.e.FanOutEarly(ctx, tm.Within(timeout), c.e.ExtendDone(l.quorum, l.settled), won, l.settled, l.kind.extend(l.token, tm.TTL))
	l.settled = settled
	l.outdateHearing()
	elapsed := c.cfg.clock.Now().Sub(start)
	if rest != nil && !l.keeps(tm, elapsed) {
		t, rest = rest.Whole(), nil // a verdict that drops keys needs every node
	}
	lost, err = l.judgeExtend(ctx, tm, start, elapsed, t)
	switch {
	case rest != nil && err == nil:
		l.hearLater(ctx, OpExtend, start, rest.Rest)
		return lost, func() { l.observeOp(ctx, OpExtend, start, err) }, err
	case rest != nil:
		t = rest.Whole() // ended meanwhile: the nodes are told whole
	}
	degraded := func() {}
	if err == nil {
		degraded = c.degraded(ctx, l.kind, t, l)
	}
	return lost, func() {
		c.observeNodes(ctx, OpExtend, l.kind, start, t)
		l.observeOp(ctx, OpExtend, start, err)
		degraded()
	}, err
}

// keeps reports whether an extend on the terms tm that a quorum kept
// after elapsed renews the lock: it has not ended, and validity is left.
func (l *Lock) keeps(tm engine.Terms, elapsed time.Duration) bool {
	return l.over() == nil && engine.Validity(tm.TTL, elapsed, tm.Drift) > 0
}

// judgeExtend is an extend's outcome on the terms tm, begun at start and
// answered as t after elapsed: whether the nodes showed the lock lost, and
// the error when it was not extended. It records the new lease. It is won,
// or shown lost, on the nodes that kept the token (tally.kept), as if no
// key had been taken where it was free: those taken count in Confirmed,
// and are dropped again when the lock is found lost.
func (l *Lock) judgeExtend(ctx context.Context, tm engine.Terms, start time.Time, elapsed time.Duration, t engine.Tally) (lost bool, err error) {
	c := l.client
	ttl, drift := tm.TTL, tm.Drift
	if err := l.refusedExtend(); err != nil {
		return false, err
	}
	n, kept := len(c.nodes), t.Kept()
	without := t.No + t.Yes - kept // answered without the token before the call
	shown := without > n-l.quorum
	l.mu.Lock()
	ended := l.released || l.lost
	if shown {
		// Shown lost: any Release from now on reports it, also one before
		// the caller calls lose, or when the lock had already ended (at its
		// renewal margin) while the extend was out.
		l.lostShown = true
	}
	l.mu.Unlock()
	if ended {
		// Declared lost while the extend was out: an extend does not bring
		// it back. Its keys expire with the ttl, or go with Release.
		l.dropTaken(ctx, tm, t)
		return false, l.over()
	}
	if kept >= l.quorum && engine.Validity(ttl, elapsed, drift) > 0 {
		l.mu.Lock()
		l.confirmed = t.Yes
		l.mu.Unlock()
		l.setLease(tm.Now(c.e), start.Add(ttl-drift)) // with the node timeout its replies teach
		return false, nil
	}
	return l.notExtended(ctx, tm, t, elapsed, shown)
}

// notExtended is the outcome of an extend on the terms tm, answered as t
// after elapsed, that the nodes did not confirm: the lock is lost when
// they showed it (shown) or its validity ran out, and the keys the extend
// took where they were free are dropped; else it is still valid, and the
// error matches ErrNotConfirmed.
func (l *Lock) notExtended(ctx context.Context, tm engine.Terms, t engine.Tally, elapsed time.Duration, shown bool) (lost bool, err error) {
	c := l.client
	ttl, drift := tm.TTL, tm.Drift
	n, kept := len(c.nodes), t.Kept()
	without := t.No + t.Yes - kept
	detail := fmt.Sprintf("%s: extended on %d of %d nodes, quorum %d", l.kind.describe(), kept, n, l.quorum)
	if kept >= l.quorum {
		detail = fmt.Sprintf("%s: quorum reached but the new validity was spent (%v elapsed of ttl %v, drift %v)", l.kind.describe(), elapsed, ttl, drift)
	}
	_, until := l.lease()
	now := c.cfg.clock.Now()
	switch {
	case shown:
		// Those that answered 0 or 2 (taken where free: it had not held
		// the token there either); a node not heard from may have lost
		// it too, or not.
		detail += fmt.Sprintf(", and %d nodes no longer held its token", without)
		if unheard := n - t.Yes - t.No; unheard > 0 {
			detail += fmt.Sprintf(" (%d not heard from)", unheard)
		}
	case !now.Before(until):
		detail += ", and its validity ran out"
	default:
		detail = fmt.Sprintf("extend of %s; the lock is still valid until %s (%v left)", detail, until.Format("15:04:05.000"), until.Sub(now).Round(time.Millisecond))
		return false, &quorumError{sentinel: ErrNotConfirmed, detail: detail, cause: ctx.Err(), nodes: t.Errs}
	}
	l.dropTaken(ctx, tm, t)
	return true, &quorumError{sentinel: ErrLockLost, detail: detail, cause: ctx.Err(), nodes: t.Errs}
}

// dropTaken deletes the keys that the extend t may have taken where they
// were free, once the lock is found lost, in order after the extend's call
// on each node (see fanOut): a lost lock leaves no key it did not have.
// That is every node that answered it took the key, and every node whose
// call may still take it: one not heard from yet (its call goes on after
// the verdict), or one that failed after its call was sent. Only our
// token is deleted (dropOn). It waits for the nodes that answered they
// took it (at most the node timeout), so that the key is free there once
// the loss is told; elsewhere the delete follows the node's call in the
// background, and a node that fails keeps the key until its ttl.
func (l *Lock) dropTaken(ctx context.Context, tm engine.Terms, t engine.Tally) {
	skip, some := t.NotTaken()
	if !some {
		return
	}
	answered := func(r *engine.Tally) bool {
		for i := range r.Answers {
			if t.TakenAt(i) && r.Answers[i] == engine.Unanswered {
				return false
			}
		}
		return true
	}
	_, l.settled = l.client.e.FanOut(context.WithoutCancel(ctx), tm, answered, skip, l.settled, l.kind.drop(l.token))
}

// refusedExtend returns the error of an extend on a Client found to reach
// one server through two nodes (a quorum of replies may be fewer servers);
// the lock, granted before that was found, stays valid until its Until.
func (l *Lock) refusedExtend() error {
	err := l.client.e.Refused()
	if err == nil {
		return nil
	}
	_, until := l.lease()
	return &quorumError{sentinel: ErrNotConfirmed, nodes: []error{err},
		detail: fmt.Sprintf("extend of %s refused, two nodes reach one server; the lock is still valid until %s", l.kind.describe(), until.Format("15:04:05.000"))}
}

// over returns why the lock can no longer be extended, or nil.
func (l *Lock) over() error {
	l.mu.Lock()
	released, lost, until := l.released, l.lost, l.until
	l.mu.Unlock()
	switch {
	case released:
		return &quorumError{sentinel: ErrLockLost, detail: fmt.Sprintf("%s: already released", l.kind.describe())}
	case lost:
		return &quorumError{sentinel: ErrLockLost, detail: fmt.Sprintf("%s: already lost", l.kind.describe())}
	case !l.client.cfg.clock.Now().Before(until):
		return &quorumError{sentinel: ErrLockLost, detail: fmt.Sprintf("%s: its validity ran out", l.kind.describe())}
	}
	return nil
}

// Release deletes the lock on every node that still holds its token, all at
// once; a key that holds another token is left alone. It runs even if ctx
// has ended (it keeps ctx's values, not its cancellation), bounded by the
// per-node timeout, so `defer lock.Release(ctx)` is always right. It
// returns once a quorum of nodes is known to be free of the token and the
// nodes that answer about as fast have answered (as long again as the
// quorum took, at least 5 ms), so a program may exit right after it: a
// slow or frozen node's delete finishes in the background, or its key
// expires with the ttl. While the answers are mixed (neither a quorum
// deleted nor a majority lost), it waits for the others up to the per-node
// timeout, so that a loss they show is reported; nodes known to be failing
// are not waited for. After Release, Validity is zero and Extend fails;
// Release again does nothing and returns nil.
//
// It returns nil when a quorum of nodes is free of the token afterwards
// and the lock held until the release: a quorum still had the token, or
// the validity had not run out and no majority had lost it. A node that
// fails is taken to still hold the token, as a crashed node does in the
// safety assumptions; its key expires with the ttl, and it is logged.
//
// It returns an error matching ErrLockLost when a majority of the nodes no
// longer had the token, or the validity had run out and fewer than a quorum
// confirmed it, or an Extend or a renewal had found a majority without the
// token (and closed Done): the work done under the lock may not have been
// protected. The token is deleted all the same wherever it is left. It
// returns an error matching ErrNotConfirmed, joining the failed nodes'
// *NodeError values, when so many nodes fail that neither can be told (the
// keys they may hold expire with the ttl), or after a hand-off to a local
// waiter that did not win, when the nodes it did not hear from have no key
// and decide (the hand-off may have run there, and its cleanup deleted the
// swapped key). On a nil Lock it returns ErrNotAcquired; for a nil ctx,
// ErrInvalidArgument, and nothing is released.
func (l *Lock) Release(ctx context.Context) error {
	if err := nilContext(ctx, "Lock.Release"); err != nil {
		return err
	}
	if l == nil {
		return ErrNotAcquired
	}
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return nil // nothing to do, nor to tell
	}
	ctx = l.startOp(context.WithoutCancel(ctx), OpRelease)
	l.op.Lock()
	tell, err := l.releaseHeld(ctx)
	l.op.Unlock()
	// Told once op is let go: an Observer may Extend or Release the lock.
	tell(err)
	return err
}

// releaseHeld is Release, called with the lock's op held; tell reports it
// to the Observer.
func (l *Lock) releaseHeld(ctx context.Context) (tell func(error), err error) {
	began := l.client.cfg.clock.Now()
	tell = func(err error) { l.observeOp(ctx, OpRelease, began, err) }
	l.mu.Lock()
	tm, until, released, lost := l.terms, l.until, l.released, l.lostShown
	l.released = true
	l.mu.Unlock()
	if released {
		return tell, nil // released meanwhile by another goroutine
	}
	tm = tm.Now(l.client.e)
	l.client.sched.Drop(l)
	l.end()

	c := l.client
	expired := !c.cfg.clock.Now().Before(until)
	l.mu.Lock()
	next := l.next
	l.mu.Unlock()
	if !expired && !lost && next != nil {
		if done, err := next.release(ctx, l, tm); done {
			return tell, err
		}
	}
	t, settled := c.e.FanOut(ctx, tm, c.e.ReleasedAt(l.quorum, 0, 0, 0, lost || expired, l.settled), nil, l.settled, l.kind.release(l.token, l.run))
	l.settled = settled
	tell = func(err error) {
		c.observeNodes(ctx, OpRelease, l.kind, began, t)
		l.observeOp(ctx, OpRelease, began, err)
	}
	l.finish()
	if lost {
		// A majority was found without the token before (Done is closed):
		// what the nodes answer now does not make it held until the release.
		return tell, &quorumError{sentinel: ErrLockLost, nodes: t.Errs,
			detail: fmt.Sprintf("%s: a majority of the nodes had lost it before its release; deleted on %d of %d nodes", l.kind.describe(), t.Yes, len(c.nodes))}
	}
	return tell, l.releaseResult(ctx, engine.JudgeRelease(len(c.nodes), l.quorum, t.Yes, t.No, expired), t.Yes, t.No, tm.TTL, t.Errs)
}

// releaseResult is Release's result, given what the nodes answered: yes
// held the token until the release, no did not, errs are those that failed.
func (l *Lock) releaseResult(ctx context.Context, outcome engine.ReleaseOutcome, yes, no int, ttl time.Duration, errs []error) error {
	c := l.client
	n := len(c.nodes)
	switch outcome {
	case engine.LostBefore:
		detail := fmt.Sprintf("%s: held by %d of %d nodes at release, quorum %d", l.kind.describe(), yes, n, l.quorum)
		if no <= n-l.quorum {
			detail += ", after its validity had run out"
		}
		return &quorumError{sentinel: ErrLockLost, detail: detail, nodes: errs}
	case engine.Incomplete:
		return &quorumError{
			sentinel: ErrNotConfirmed,
			detail: fmt.Sprintf("release of %s: deleted on %d and absent from %d of %d nodes, quorum %d; the rest expire with the ttl %v",
				l.kind.describe(), yes, no, n, l.quorum, ttl),
			nodes: errs,
		}
	}
	if news := c.news(errs); len(news) > 0 {
		c.cfg.logger.WarnContext(ctx, "redlock: released, but some nodes failed; their keys expire with the ttl",
			"key", l.key, "kind", l.kind.name(), "ttl", ttl, "err", errors.Join(news...))
	}
	return nil
}
