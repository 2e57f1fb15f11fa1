package redlock

import (
	"context"
	"crypto/rand"
)

// handOff gives l's key to w, the next goroutine of this Client waiting for
// it, in one round trip: each node swaps l's token for a new one, or takes
// the key if it is free (see handoff.lua). It is an acquire in every
// respect that matters for safety: a new token, won on a quorum, with its
// validity counted from before the round trip and less the drift; a fenced
// lock gets a new, higher fencing token. No node lets the key go in
// between, so no other process can take it, and l's holder has already
// given it up (this runs in l's Release).
//
// It returns the next Lock, or nil when the hand-off failed (the keys it
// may have set are released again, and the caller releases l), and, for
// l's release, how many nodes held l's token until then (yes) and how many
// did not (no).
func (c *Client) handOff(ctx context.Context, l *Lock, w *waiter) (next *Lock, yes, no int, t tally) {
	token := rand.Text()
	start := c.cfg.clock.Now()
	t, settled := c.fanOut(ctx, c.nodeTimeout(w.ttl), c.won, nil, l.settled, handOffOn(l.key, token, l.token, w.ttl, w.ac.fenced))
	for i, a := range t.answers {
		if a != holds {
			continue
		}
		if t.values[i]&1 == 1 {
			yes++
		} else {
			no++
		}
		t.values[i] >>= 1
	}
	no += t.no
	next, l.settled, _ = c.conclude(ctx, l.key, token, w.ttl, w.ac, start, t, settled)
	return next, yes, no, t
}
