package redlock

import (
	"math"
	"time"

	"github.com/quorumlock/redlock/internal/nodeio"
)

// The arithmetic of the algorithm, and the fan-out's decision rules (when
// an operation may stop waiting for the nodes), kept free of I/O so that
// they can be table-tested on their own.

// quorumOf is the number of nodes that must agree out of n: a strict
// majority, so that any two quorums share at least one node.
func quorumOf(n int) int { return n/2 + 1 }

// driftFor is the allowance for the difference between this process's clock
// rate and the nodes' over ttl. The 2 ms on top cover Redis's millisecond
// expiry resolution and keep a floor for small TTLs.
// The product is below 2^63 for any ttl, as factor < 1; the sum saturates.
func driftFor(ttl time.Duration, factor float64) time.Duration {
	return addSat(time.Duration(float64(ttl)*factor), 2*time.Millisecond)
}

// validity is how much of ttl is left to the holder once elapsed has passed
// since the operation started, less the drift: maybe negative, saturated
// rather than wrapped (ttl, elapsed and drift are not negative).
func validity(ttl, elapsed, drift time.Duration) time.Duration {
	v := ttl - drift // no overflow: both are non-negative
	if v < 0 && elapsed > v-math.MinInt64 {
		return math.MinInt64
	}
	return v - elapsed
}

// addSat returns a+b for non-negative a and b, or the longest Duration
// when that overflows: a user's durations may be up to math.MaxInt64
// ("forever"), and a sum must not wrap to a negative one.
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// mulSat returns n·d for non-negative n and d, or the longest Duration when
// that overflows.
func mulSat(n int64, d time.Duration) time.Duration {
	if n != 0 && d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return time.Duration(n) * d
}

// decide reports whether yes answers already make a quorum (won), or whether
// so many nodes answered other than yes that a quorum can no longer be
// reached (lost). Both are false while the outcome is open.
func decide(n, quorum, yes, notYes int) (won, lost bool) {
	return yes >= quorum, n-notYes < quorum
}

// releaseOutcome is what a release learned about the lock.
type releaseOutcome uint8

const (
	released   releaseOutcome = iota // a quorum of nodes is free of the token
	lostBefore                       // the lock did not hold until the release
	incomplete                       // too few nodes answered to tell
)

// judgeRelease reads a release's answers: yes nodes deleted our key, no nodes
// did not hold it, the rest failed; expired tells whether the validity had
// run out before the release started. The rules, and why a failed node
// counts as still holding the token: docs/algorithm.md, "Release".
func judgeRelease(n, quorum, yes, no int, expired bool) releaseOutcome {
	switch {
	case yes >= quorum:
		return released
	case no > n-quorum || expired:
		return lostBefore
	case yes+no >= quorum:
		return released
	default:
		return incomplete
	}
}

// renewDue is when a renewed lock valid until until for ttl is renewed next:
// once two thirds of the validity that a renewal gives (ttl less the drift)
// are left, so a lock whose acquire took long is renewed at once.
func renewDue(until time.Time, ttl, drift time.Duration) time.Time {
	v := ttl - drift
	return until.Add(-(2*(v/3) + 2*(v%3)/3)) // ⌊2v/3⌋, without overflowing 2·v
}

// renewMargin is how long before its Until a renewed lock is declared lost
// at the latest when its renewals keep failing: the node timeout before
// any round trip is known (a tenth of the ttl, or WithNodeTimeout's) and
// the drift, so that the holder learns of the loss while still protected;
// at most a quarter of the validity a renewal gives, so that the renewals
// are tried for most of the rest.
func renewMargin(ttl, nodeTimeout, drift time.Duration) time.Duration {
	return min(addSat(nodeTimeout, drift), (ttl-drift)/4)
}

// maxPX is the most milliseconds sent to Redis as a time to live: the
// whole milliseconds of the longest Duration (about 292 years). A server
// that keeps TTLs as Durations in nanoseconds (miniredis) holds it
// exactly; one millisecond more would overflow there.
const maxPX = int64(math.MaxInt64 / time.Millisecond)

// pxMillis converts ttl to the whole milliseconds given to Redis, rounding
// up: a key may outlive the lock's validity, never the other way round.
// Within the last millisecond below math.MaxInt64 it rounds down (to
// maxPX), which the 2 ms of the drift allowance (driftFor) cover.
func pxMillis(ttl time.Duration) int64 {
	ms := int64(ttl / time.Millisecond)
	if ttl%time.Millisecond != 0 && ms < maxPX {
		ms++
	}
	return ms
}

// invert returns the negation of each of b.
func invert(b []bool) []bool {
	out := make([]bool, len(b))
	for i, v := range b {
		out[i] = !v
	}
	return out
}

// Stop conditions for fanOut: when it may return before every node replied.

// decidedAt stops once q of n nodes hold, or so many do not that q can no
// longer be reached.
func decidedAt(n, q int) func(*tally) bool {
	return func(t *tally) bool {
		won, lost := decide(n, q, t.yes, t.notYes)
		return won || lost
	}
}

// graceFloor is the least withGrace waits for the nodes yet to answer
// once the outcome is known: on loopback a round trip is well under a
// millisecond, and a node that answers within a few is not worth leaving.
const graceFloor = 5 * time.Millisecond

// withGrace stops when stop does, or once decided says the outcome is
// known and as long again has passed (at least graceFloor), and the time
// that the nodes about as fast as a quorum usually take (tally.usual,
// which grows with the round trips a loaded machine shows): the nodes
// about as fast as the deciding ones are still waited for (their keys
// known and counted by Confirmed, a release confirmed there), but not a
// frozen or slow node, whose
// call finishes in the background, in order (see fanOut).
func withGrace(stop, decided func(*tally) bool) func(*tally) bool {
	return func(t *tally) bool {
		if stop(t) {
			return true
		}
		if t.graceEnd.IsZero() && decided(t) {
			d := realTime.Since(t.begun)
			t.graceEnd = t.begun.Add(max(d+max(d, graceFloor), t.usual))
		}
		return !t.graceEnd.IsZero() && !realTime.Now().Before(t.graceEnd)
	}
}

// wonAt stops once q nodes hold.
func wonAt(q int) func(*tally) bool {
	return func(t *tally) bool { return t.yes >= q }
}

// onlyFailingLeft says when every node yet to answer is failing (frozen or
// cut off), or still out past the deadline of the operation's previous
// call there (before), or there is none. As a withGrace decision, such
// nodes are not waited out, but one that recovered and answers about as
// fast as the others still counts (its mark goes with its first answer).
func (c *Client) onlyFailingLeft(before settlement) func(*tally) bool {
	return func(t *tally) bool { return !c.awaits(t, before) }
}

// attemptDone is an attempt's stop condition: only failing nodes (frozen
// or cut off) have yet to answer; or, once q nodes hold or q is out of
// reach, a grace (withGrace) has passed: the nodes about as fast are still
// heard, so that a won lock's Confirmed counts them and a failed attempt's
// cleanup sees which of them took the key (a failing node's delete follows
// its SET there: see fanOut). An eager attempt returns at once when q is
// out of reach. Unlike a Release, it gives failing nodes no grace once the
// others have answered (an eager attempt: only the grace): under a load
// that makes nodes time out, that would double every failed attempt, and
// the calls queued behind them would pile up.
func (c *Client) attemptDone(q int, eager bool) func(*tally) bool {
	n, failing := len(c.nodes), c.onlyFailingLeft(settlement{})
	if eager {
		return withGrace(func(t *tally) bool {
			won, lost := decide(n, q, t.yes, t.notYes)
			return lost || won && failing(t)
		}, func(t *tally) bool { return t.yes >= q || failing(t) })
	}
	return withGrace(func(t *tally) bool {
		return t.yes+t.notYes > 0 && failing(t)
	}, decidedAt(n, q))
}

// extendDone is an extend's stop condition: decided (q nodes kept the
// token, or so many did not that q is out of reach; see tally.kept) and
// only failing nodes, or nodes still out past the deadline of the lock's
// previous call there (before), are left; or the grace of withGrace has
// passed since it was decided, so that Confirmed counts the nodes about as
// fast as the deciding ones, but not a frozen or slow one.
func (c *Client) extendDone(q int, before settlement) func(*tally) bool {
	n := len(c.nodes)
	decided := func(t *tally) bool {
		kept := t.kept()
		won, lost := decide(n, q, kept, t.notYes+t.yes-kept)
		return won || lost
	}
	return withGrace(func(t *tally) bool {
		return decided(t) && !c.awaits(t, before)
	}, decided)
}

// kept counts the nodes of an extend's tally that held the lock's token
// before the call: its script answered 1 (extend.lua). A node that answered
// 2 took the key where it was free: it holds the lock now (counted in yes,
// and so by Confirmed) but says nothing of whether it held it until then,
// so an extend is won, or shown lost, on the kept nodes alone.
func (t *tally) kept() int {
	kept := 0
	for i, a := range t.answers {
		if a == holds && t.replies[i].Status == 1 {
			kept++
		}
	}
	return kept
}

// takenAt reports whether node i answered an extend that the key was free
// and is now the lock's (extend.lua's 2).
func (t *tally) takenAt(i int) bool {
	return t.answers[i] == holds && t.replies[i].Status == takenFree
}

// takenFree is what an extend script answers for a node where the key was
// free and now holds the lock's token (extend.lua, renew_batch.lua).
const takenFree = 2

// releasedAt is Release's stop condition: every node has answered, or q
// nodes (counting base confirmed before) deleted the token and the nodes
// yet to answer are failing, or out past the deadline of the lock's
// previous operation there (before); or the grace of withGrace has passed
// since q nodes (with base) were known free of the token and, unless known
// (found lost, or validity out), the answers tell whether the lock held (so
// that a loss the slower nodes show is reported), or only failing nodes
// are left. skipped is how many nodes the fan-out skips (holdsNot in its
// tally); baseNo of them were found without the token before. See
// docs/algorithm.md, "Release".
func (c *Client) releasedAt(q, base, baseNo, skipped int, known bool, before settlement) func(*tally) bool {
	n := len(c.nodes)
	failing := c.onlyFailingLeft(before)
	return withGrace(func(t *tally) bool {
		return base+t.yes >= q && !c.awaits(t, before)
	}, func(t *tally) bool {
		free := base+baseNo+t.yes+t.no-skipped >= q
		return free && (known || base+t.yes >= q || baseNo+t.no-skipped > n-q) || failing(t)
	})
}

// awaits reports whether a node yet to answer in t is worth waiting for:
// it is not failing, and its call of the operation before (if any) is not
// still out past its deadline.
func (c *Client) awaits(t *tally, before settlement) bool {
	for i, a := range t.answers {
		if a == unanswered && c.failing[i].Load() == nil && !before.overdue(i) {
			return true
		}
	}
	return false
}

// takenByOne returns the holder that the nodes that refused name on at
// least q of them (acquire.lua names it), and whether there is one.
func takenByOne(t tally, q int) (holder nodeio.Holder, taken bool) {
	count := map[nodeio.Holder]int{}
	for i, a := range t.answers {
		if h := t.replies[i].Holder; a == holdsNot && h != (nodeio.Holder{}) {
			count[h]++
			if count[h] >= q {
				return h, true
			}
		}
	}
	return nodeio.Holder{}, false
}
