package redlock

import (
	"context"
	"crypto/rand"
)

// handOffResult is what a hand-off did and learned.
type handOffResult struct {
	next      *Lock    // the waiter's lock, or nil when the hand-off failed
	had       []answer // by node: whether the releasing lock's token was there (holds, holdsNot), or unknown (failed, unanswered)
	contended bool     // a node that answered has another process waiting for the key
	errs      []error
}

// count returns how many nodes had the releasing lock's token until the
// hand-off (yes), how many did not (no), and which nodes it did not learn
// about (unknown, for a Release to finish the job).
func (h handOffResult) count() (yes, no int, unknown []bool) {
	unknown = make([]bool, len(h.had))
	for i, a := range h.had {
		switch a {
		case holds:
			yes++
		case holdsNot:
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
// respect that matters for safety: a new token, won on a quorum, with its
// validity counted from before the round trip and less the drift; a fenced
// lock gets a new, higher fencing token. No node lets the key go in
// between, so no other process can take it, and l's holder has already
// given it up (this runs in l's Release).
//
// When it fails, the keys it may have set are released again, which also
// frees the nodes where it had replaced l's token; the caller releases l on
// the nodes the hand-off did not hear from.
func (c *Client) handOff(ctx context.Context, l *Lock, w *waiter) handOffResult {
	token := rand.Text()
	start := c.cfg.clock.Now()
	t, settled := c.fanOut(ctx, c.nodeTimeout(w.ttl), wonAt(l.quorum), nil, l.settled, handOffOn(l.key, token, l.token, w.ttl, w.ac.fenced))
	h := handOffResult{had: make([]answer, len(t.answers)), errs: t.errs}
	for i, a := range t.answers {
		switch a {
		case holds:
			v := t.values[i]
			h.had[i] = holdsNot
			if v&1 == 1 {
				h.had[i] = holds
			}
			h.contended = h.contended || v&2 == 2
			t.values[i] = v >> 2 // what the acquire scripts answer
		case holdsNot:
			h.had[i] = holdsNot // another token is there
		default:
			h.had[i] = a
		}
	}
	h.next, l.settled, _ = c.conclude(ctx, l.kind, token, w.ttl, w.ac, start, t, settled)
	return h
}
