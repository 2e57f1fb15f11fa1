package redlock

import (
	"context"
	"fmt"
	"strconv"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/wait"
)

// Split votes: when many clients try a free key at once, the nodes may pick
// different clients and nobody holds a quorum. The acquire script names the
// holder of a key it refuses, so every client of the split designates the
// same one to go on (engine.Designated), which keeps its keys and retries the
// nodes it lacks (resolveSplit); the others release. Its validity still
// counts from the first round. Safety does not rest on this: a key holds
// one token at a time, and a lock still needs a quorum. See
// docs/algorithm.md, "One winner when many try at once".

// shortOfQuorum says why an attempt that got t from n nodes fell short of
// its quorum q: held elsewhere on a quorum (heldElsewhere), or taken on
// too few nodes.
func shortOfQuorum(t engine.Tally, n, q int) string {
	if t.No >= q {
		return fmt.Sprintf(heldElsewhere(t, q), t.No, n, q)
	}
	s := fmt.Sprintf("taken on %d of %d nodes, quorum %d", t.Yes, n, q)
	if t.No > 0 {
		s += fmt.Sprintf(", held elsewhere on %d", t.No)
	}
	return s
}

// heldElsewhere says, for an attempt that a quorum of q refused (t), who
// holds the key on the nodes that refused: one holder, named by its
// token's start when the nodes named it; several; or, when the nodes did
// not say (locks of other kinds than plain), nobody in particular.
func heldElsewhere(t engine.Tally, q int) string {
	named := true // every node that refused said who holds the key
	for i, a := range t.Answers {
		if a == engine.HoldsNot && t.Replies[i].Holder == (nodeio.Holder{}) {
			named = false
		}
	}
	holder, one := engine.TakenByOne(t, q)
	switch {
	case one && holder.OtherKind:
		return "held by a lock of another kind on %d of %d nodes (quorum %d)"
	case one && engine.TokenStart(holder.Name) != "":
		return "held by another holder on %d of %d nodes (quorum %d), its token beginning " + strconv.Quote(engine.TokenStart(holder.Name))
	case one:
		return "held by another holder on %d of %d nodes (quorum %d)"
	case named:
		return "held by other holders on %d of %d nodes (quorum %d)"
	}
	return "held elsewhere on %d of %d nodes (quorum %d)"
}

// resolveSplit goes on with attempt a, whose first round got t, while a
// split vote designates it: it waits for the others to release (as long as
// its round took, then twice that, ...), tries the nodes it does not hold
// again, and returns the tally of every node. It stops when a quorum holds,
// when it is no longer designated, after wait.SplitRounds rounds, or when
// another round (its wait and a node timeout) could not leave the lock
// more validity than its renewal margin (renewMargin), renewed or not.
func (c *Client) resolveSplit(ctx context.Context, a *acquisition, t engine.Tally, q int) engine.Tally {
	first := t.LastAt
	for round := range wait.SplitRounds {
		pause := wait.SplitPause(first, round)
		if t.Yes >= q || !engine.Designated(&t, a.token) {
			return t
		}
		elapsed := c.cfg.clock.Now().Sub(a.start)
		if engine.Validity(a.cfg.TTL, engine.AddSat(elapsed, engine.AddSat(pause, a.cfg.Timeout)), a.cfg.Drift) <= a.cfg.RenewMargin() {
			return t
		}
		timer := newTimer(c.cfg.clock, pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return t
		case <-timer.Chan():
		}
		// Only the nodes another client of the split holds are tried again:
		// a node that failed is no likelier to answer now.
		retried := make([]bool, len(t.Answers))
		skip := make([]bool, len(t.Answers))
		for i, ans := range t.Answers {
			retried[i] = ans == engine.HoldsNot
			skip[i] = !retried[i]
		}
		r := a.fanOut(ctx, c, engine.WonAt(q-t.Yes), skip, a.kind.acquire(a.token, a.cfg.TTL, a.cfg.counterKeep()))
		t = merged(t, r, retried)
	}
	return t
}

// merged is t with the answers of round r for the nodes it retried.
func merged(t, r engine.Tally, retried []bool) engine.Tally {
	out := engine.Tally{Answers: t.Answers, Replies: t.Replies, Took: t.Took, Begun: t.Begun}
	out.Errs = errsOf(out.Errs, t.Errs, retried, false)
	out.Errs = errsOf(out.Errs, r.Errs, retried, true)
	for i, again := range retried {
		if again {
			out.Answers[i], out.Replies[i] = r.Answers[i], r.Replies[i]
			if out.Took != nil && r.Took != nil {
				out.Took[i] = r.Took[i]
			}
		}
	}
	out.Recount()
	return out
}

// errsOf appends to dst the errors of errs that are not a node's, and
// those of the nodes whose retried is again.
func errsOf(dst, errs []error, retried []bool, again bool) []error {
	for _, err := range errs {
		if ne, ok := err.(*NodeError); !ok || retried[ne.Node] == again {
			dst = append(dst, err)
		}
	}
	return dst
}
