package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
)

// handsOver is a kind whose lock is handed to the next goroutine of its
// Client waiting for it (see handOff): the plain lock, a writer and a
// multi-key lock, the kinds that take local turns.
type handsOver interface {
	// handOff takes the lock for token on a node where it holds from's
	// token, or where an acquire of token would take it, and keeps it where
	// it holds token already. Its reply is a nodeio.HandOff: held, the
	// fencing counter (as the kind's acquire answers it), whether another
	// process listens for the lock's release on the node, and what the
	// node held (see handoff.lua). keep is as the kind's acquire's.
	handOff(token, from, run string, ttl, keep time.Duration) nodeOp
}

// handOffHad tells from a node's part in a hand-off (its answer ans and
// its reply r) whether the releasing lock's token was there (holds), was
// not (holdsNot), or is not known (failed, unanswered; or the node held
// the new token already: a resend whose first run's answer was lost). A
// node whose only failure is its replicas' (WithReplicaAck) ran the
// script: r is held.
func handOffHad(ans engine.Answer, r nodeio.Reply) engine.Answer {
	switch {
	case ans == engine.HoldsNot:
		return engine.HoldsNot // another token is there
	case ans == engine.Failed && !r.Held || ans == engine.Unanswered:
		return ans
	}
	switch r.Found {
	case nodeio.FoundFrom:
		return engine.Holds
	case nodeio.FoundOurs:
		return engine.Failed
	}
	return engine.HoldsNot
}

// handOffResult is what a hand-off did and learned.
type handOffResult struct {
	next      *Lock           // the waiter's lock, or nil when the hand-off failed
	had       []engine.Answer // by node: whether the releasing lock's token was there (holds, holdsNot), or unknown (failed, unanswered)
	contended bool            // a node that answered has another process waiting for the key
	errs      []error
}

// count returns how many nodes had the releasing lock's token until the
// hand-off (yes), how many did not (no), and which nodes it did not learn
// about (unknown, for a Release to finish the job).
func (h handOffResult) count() (yes, no int, unknown []bool) {
	unknown = make([]bool, len(h.had))
	for i, a := range h.had {
		switch a {
		case engine.Holds:
			yes++
		case engine.HoldsNot:
			no++
		default:
			unknown[i] = true
		}
	}
	return yes, no, unknown
}

// handOff gives l's key to w, the next goroutine of this Client waiting for
// it, in one round trip: each node swaps l's token for a new one, or takes
// the key if it is free (see handoff.lua). It is an acquire in every
// respect that matters for safety: a new token won on a quorum, validity
// counted from before the round trip, a higher fencing token; and it runs
// in l's Release, so l is given up first (docs/algorithm.md, "Hand-off").
// When it fails, its cleanup also frees the nodes where it had replaced
// l's token; the caller releases l on the nodes it did not hear from. It
// returns once the next lock is won and l's outcome is known too (see
// handedOver).
func (c *Client) handOff(ctx context.Context, l *Lock, next handsOver, w *waiter) handOffResult {
	a := c.newAcquisition(w.Want.kind, w.Want.ac, l.settled)
	a.token = l.run + a.token // one run: see runOf
	a.start = c.cfg.clock.Now()
	t := a.fanOut(ctx, c, c.handedOver(l), nil, next.handOff(a.token, l.token, l.run, a.cfg.TTL, a.cfg.counterKeep()))
	h := handOffResult{had: make([]engine.Answer, len(t.Answers)), errs: t.Errs}
	for i, ans := range t.Answers {
		h.had[i] = handOffHad(ans, t.Replies[i])
		h.contended = h.contended || ans == engine.Holds && t.Replies[i].Waiting
	}
	h.next, _ = c.conclude(ctx, &a, t)
	l.settled = a.settled
	return h
}

// handedOver is a hand-off's stop condition: the next lock is won on a
// quorum and l's outcome is decided (a quorum had l's token, or more than
// a minority did not; won on two of three nodes, one with l's token and one
// without, the third tells); or, after a grace (withGrace), every node yet
// to answer is failing and counts as holding l, as in any Release.
func (c *Client) handedOver(l *Lock) func(*engine.Tally) bool {
	n, q := len(c.nodes), l.quorum
	return engine.WithGrace(func(t *engine.Tally) bool {
		if t.Yes < q {
			return false
		}
		had, not := 0, 0
		for i, ans := range t.Answers {
			switch handOffHad(ans, t.Replies[i]) {
			case engine.Holds:
				had++
			case engine.HoldsNot:
				not++
			}
		}
		return had >= q || not > n-q
	}, c.e.OnlyFailingLeft(l.settled))
}

// release is a Release that hands l to the next goroutine of its Client
// waiting for the key, when there is one and the run of hand-offs allows
// (done is then true, and err Release's result). When the hand-off fails,
// it releases l on the nodes it did not hear from; the waiter contends.
func (t turn) release(ctx context.Context, l *Lock, tm engine.Terms) (done bool, err error) {
	c := l.client
	if c.e.Refused() != nil {
		return false, nil // no lock is granted on a Client that reaches one server twice
	}
	if _, ok := l.kind.(handsOver); !ok {
		return false, nil // this kind is not handed over: its release passes the turn on
	}
	w := t.NextForHandOff(l, c.cfg.handOffs)
	if w == nil {
		return false, nil
	}
	// The next waiter's own kind takes the lock: a writer's mark left where
	// it is refused is the next writer's, which its release removes.
	h := c.handOff(ctx, l, w.Want.kind.(handsOver), w)
	yes, no, unknown := h.count()
	if h.next != nil {
		t.HandOver(w, h.next, h.contended)
		l.finish()
		return true, l.releaseResult(ctx, engine.JudgeRelease(len(c.nodes), l.quorum, yes, no, false), yes, no, tm.TTL, h.errs)
	}
	defer t.GiveTurn(w)
	skipped := yes + no // the nodes the hand-off heard from
	r, settled := c.e.FanOut(ctx, tm, c.e.ReleasedAt(l.quorum, yes, no, skipped, false, l.settled), engine.Invert(unknown), l.settled, l.kind.release(l.token, l.run))
	l.settled = settled
	l.finish()
	// A node the hand-off did not hear from may have run it all the same
	// (its answer late or lost), and the failed hand-off's cleanup then
	// deleted the waiter's token there: such a node is free, but shows
	// nothing of whether l held until then.
	gone := r.No - skipped
	yes += r.Yes
	n := len(c.nodes)
	if outcome := engine.JudgeRelease(n, l.quorum, yes, no, false); outcome != engine.Incomplete || yes+no+gone < l.quorum {
		return true, l.releaseResult(ctx, outcome, yes, no, tm.TTL, r.Errs)
	}
	return true, &quorumError{sentinel: ErrNotConfirmed, nodes: r.Errs,
		detail: fmt.Sprintf("release of %s after a hand-off that did not win: deleted on %d of %d nodes, gone from %d more, which a late hand-off may have taken and its cleanup deleted: whether it held until the release is not known",
			l.kind.describe(), yes, n, gone)}
}
