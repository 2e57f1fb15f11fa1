package redlock

import (
	"math"
	"time"
)

// The arithmetic of the algorithm, kept free of I/O so that it can be
// table-tested on its own.

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
// since the operation started, less the drift. It may be negative. ttl,
// elapsed and drift are not negative; the result saturates rather than
// wrap.
func validity(ttl, elapsed, drift time.Duration) time.Duration {
	v := ttl - drift // no overflow: both are non-negative
	if v < 0 && elapsed > v-math.MinInt64 {
		return math.MinInt64
	}
	return v - elapsed
}

// addSat returns a+b for non-negative a and b, or the longest Duration
// when that overflows: durations a user passes may be anything up to
// math.MaxInt64 ("forever"), and a sum of two must not wrap to a negative
// one.
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
// run out before the release started.
//
// The lock held to the end if a quorum still had the token. It was lost if
// a majority did not have it (their keys were gone: expiry, or a node that
// lost its data), or if the validity had run out and no quorum confirmed the
// token. A failed node counts as still holding it, as the safety
// assumptions say a crashed node does (it persists the key or stays down
// longer than the TTL). The release did its work once a quorum of nodes is
// known to be free of the token, so that another client can acquire.
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
// are left, i.e. a third of it after an acquire or a renewal that took no
// time. Counting from the validity actually left, a lock whose acquire
// took long is renewed at once.
func renewDue(until time.Time, ttl, drift time.Duration) time.Time {
	v := ttl - drift
	return until.Add(-(2*(v/3) + 2*(v%3)/3)) // ⌊2v/3⌋, without overflowing 2·v
}

// renewMargin is how long before its Until a renewed lock is declared lost
// at the latest when its renewals keep failing: the time one more renewal
// may take (the node timeout) and the drift allowance, so that the holder
// learns of the loss while it is still protected; but no more than a
// quarter of the validity a renewal gives, so that the renewals are tried
// for most of the rest.
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
// Only within the last millisecond below math.MaxInt64 does it round down
// (to maxPX), by less than a millisecond: the validity of such a lock ends
// at least the 2 ms of its drift allowance before the ttl (see driftFor),
// so its key still outlives it. (Rounding up by adding a millisecond less a
// nanosecond first overflowed there, and sent Redis a negative time.)
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
