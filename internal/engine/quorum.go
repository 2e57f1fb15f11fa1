package engine

import (
	"errors"
	"math"
	"time"

	"github.com/quorumlock/redlock/internal/nodeio"
)

// The arithmetic of the algorithm, and the fan-out's decision rules (when
// an operation may stop waiting for the nodes), kept free of I/O so that
// they can be table-tested on their own.

// QuorumOf is the number of nodes that must agree out of n: a strict
// majority, so that any two quorums share at least one node.
func QuorumOf(n int) int { return n/2 + 1 }

// DriftFor is the allowance for the difference between this process's clock
// rate and the nodes' over ttl. The 2 ms on top cover Redis's millisecond
// expiry resolution and keep a floor for small TTLs.
// The product is below 2^63 for any ttl, as factor < 1; the sum saturates.
func DriftFor(ttl time.Duration, factor float64) time.Duration {
	return AddSat(time.Duration(float64(ttl)*factor), 2*time.Millisecond)
}

// Validity is how much of ttl is left to the holder once elapsed has passed
// since the operation started, less the drift: maybe negative, saturated
// rather than wrapped (ttl, elapsed and drift are not negative).
func Validity(ttl, elapsed, drift time.Duration) time.Duration {
	v := ttl - drift // no overflow: both are non-negative
	if v < 0 && elapsed > v-math.MinInt64 {
		return math.MinInt64
	}
	return v - elapsed
}

// AddSat returns a+b for non-negative a and b, or the longest Duration
// when that overflows: a user's durations may be up to math.MaxInt64
// ("forever"), and a sum must not wrap to a negative one.
func AddSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// MulSat returns n·d for non-negative n and d, or the longest Duration when
// that overflows.
func MulSat(n int64, d time.Duration) time.Duration {
	if n != 0 && d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return time.Duration(n) * d
}

// Decide reports whether yes answers already make a quorum (won), or whether
// so many nodes answered other than yes that a quorum can no longer be
// reached (lost). Both are false while the outcome is open.
func Decide(n, quorum, yes, notYes int) (won, lost bool) {
	return yes >= quorum, n-notYes < quorum
}

// ReleaseOutcome is what a release learned about the lock.
type ReleaseOutcome uint8

const (
	Released   ReleaseOutcome = iota // a quorum of nodes is free of the token
	LostBefore                       // the lock did not hold until the release
	Incomplete                       // too few nodes answered to tell
)

// JudgeRelease reads a release's answers: yes nodes deleted our key, no nodes
// did not hold it, the rest failed; expired tells whether the validity had
// run out before the release started. The rules, and why a failed node
// counts as still holding the token: docs/algorithm.md, "Release".
func JudgeRelease(n, quorum, yes, no int, expired bool) ReleaseOutcome {
	switch {
	case yes >= quorum:
		return Released
	case no > n-quorum || expired:
		return LostBefore
	case yes+no >= quorum:
		return Released
	default:
		return Incomplete
	}
}

// RenewDue is when a renewed lock valid until until for ttl is renewed next:
// once two thirds of the validity that a renewal gives (ttl less the drift)
// are left, so a lock whose acquire took long is renewed at once.
func RenewDue(until time.Time, ttl, drift time.Duration) time.Time {
	v := ttl - drift
	return until.Add(-(2*(v/3) + 2*(v%3)/3)) // ⌊2v/3⌋, without overflowing 2·v
}

// RenewMargin is how long before its Until a renewed lock is declared lost
// at the latest when its renewals keep failing: the node timeout before
// any round trip is known (a tenth of the ttl, or WithNodeTimeout's) and
// the drift, so that the holder learns of the loss while still protected;
// at most a quarter of the validity a renewal gives, so that the renewals
// are tried for most of the rest.
func RenewMargin(ttl, nodeTimeout, drift time.Duration) time.Duration {
	return min(AddSat(nodeTimeout, drift), (ttl-drift)/4)
}

// MaxPX is the most milliseconds sent to Redis as a time to live: the
// whole milliseconds of the longest Duration (about 292 years). A server
// that keeps TTLs as Durations in nanoseconds (miniredis) holds it
// exactly; one millisecond more would overflow there.
const MaxPX = int64(math.MaxInt64 / time.Millisecond)

// PXMillis converts ttl to the whole milliseconds given to Redis, rounding
// up: a key may outlive the lock's validity, never the other way round.
// Within the last millisecond below math.MaxInt64 it rounds down (to
// maxPX), which the 2 ms of the drift allowance (driftFor) cover.
func PXMillis(ttl time.Duration) int64 {
	ms := int64(ttl / time.Millisecond)
	if ttl%time.Millisecond != 0 && ms < MaxPX {
		ms++
	}
	return ms
}

// Invert returns the negation of each of b.
func Invert(b []bool) []bool {
	out := make([]bool, len(b))
	for i, v := range b {
		out[i] = !v
	}
	return out
}

// Stop conditions for FanOut: when it may return before every node replied.

// DecidedAt stops once q of n nodes hold, or so many do not that q can no
// longer be reached.
func DecidedAt(n, q int) func(*Tally) bool {
	return func(t *Tally) bool {
		won, lost := Decide(n, q, t.Yes, t.NotYes)
		return won || lost
	}
}

// GraceFloor (a variable for tests) is the least withGrace waits for the
// nodes yet to answer once the outcome is known: on loopback a round trip
// is well under a millisecond, and one answering within a few is kept.
var GraceFloor = 5 * time.Millisecond

// WithGrace stops when stop does, or once decided says the outcome is
// known and as long again has passed (at least graceFloor), and the time
// that the nodes about as fast as a quorum usually take (tally.usual,
// which grows with the round trips a loaded machine shows): the nodes
// about as fast as the deciding ones are still waited for (their keys
// known and counted by Confirmed, a release confirmed there), but not a
// frozen or slow node, whose
// call finishes in the background, in order (see FanOut).
func WithGrace(stop, decided func(*Tally) bool) func(*Tally) bool {
	return func(t *Tally) bool {
		if stop(t) {
			return true
		}
		if t.GraceEnd.IsZero() && decided(t) {
			d := realTime.Since(t.Begun)
			t.GraceEnd = t.Begun.Add(max(d+max(d, GraceFloor), t.Usual))
		}
		return !t.GraceEnd.IsZero() && !realTime.Now().Before(t.GraceEnd)
	}
}

// WonAt stops once q nodes hold.
func WonAt(q int) func(*Tally) bool {
	return func(t *Tally) bool { return t.Yes >= q }
}

// OnlyFailingLeft says when every node yet to answer is failing (frozen or
// cut off), or still out past the deadline of the operation's previous
// call there (before), or there is none. As a withGrace decision, such
// nodes are not waited out, but one that recovered and answers about as
// fast as the others still counts (its mark goes with its first answer).
func (c *Engine) OnlyFailingLeft(before Settlement) func(*Tally) bool {
	return func(t *Tally) bool { return !c.Awaits(t, before) }
}

// AttemptDone is an attempt's stop condition: only failing nodes (frozen
// or cut off) have yet to answer; or, once q nodes hold or q is out of
// reach, a grace (withGrace) has passed: the nodes about as fast are still
// heard, so that a won lock's Confirmed counts them and a failed attempt's
// cleanup sees which of them took the key (a failing node's delete follows
// its SET there: see FanOut). An eager attempt returns at once when q is
// out of reach. Unlike a Release, it gives failing nodes no grace once the
// others have answered (an eager attempt: only the grace): under a load
// that makes nodes time out, that would double every failed attempt, and
// the calls queued behind them would pile up.
func (c *Engine) AttemptDone(q int, eager bool) func(*Tally) bool {
	n, failing := len(c.nodes), c.OnlyFailingLeft(Settlement{})
	if eager {
		return WithGrace(func(t *Tally) bool {
			won, lost := Decide(n, q, t.Yes, t.NotYes)
			return lost || won && failing(t)
		}, func(t *Tally) bool { return t.Yes >= q || failing(t) })
	}
	return WithGrace(func(t *Tally) bool {
		return t.Yes+t.NotYes > 0 && failing(t)
	}, DecidedAt(n, q))
}

// ExtendDone is an extend's stop condition: decided (q nodes kept the
// token, or so many did not that q is out of reach; see tally.kept) and
// only failing nodes, or nodes still out past the deadline of the lock's
// previous call there (before), are left; or the grace of withGrace has
// passed since it was decided, so that Confirmed counts the nodes about as
// fast as the deciding ones, but not a frozen or slow one.
func (c *Engine) ExtendDone(q int, before Settlement) func(*Tally) bool {
	n := len(c.nodes)
	decided := func(t *Tally) bool {
		kept := t.Kept()
		won, lost := Decide(n, q, kept, t.NotYes+t.Yes-kept)
		return won || lost
	}
	return WithGrace(func(t *Tally) bool {
		return decided(t) && !c.Awaits(t, before)
	}, decided)
}

// Kept counts the nodes of an extend's tally that held the lock's token
// before the call: its script answered 1 (extend.lua). A node that answered
// 2 took the key where it was free: it holds the lock now (counted in yes,
// and so by Confirmed) but says nothing of whether it held it until then,
// so an extend is won, or shown lost, on the kept nodes alone.
func (t *Tally) Kept() int {
	kept := 0
	for i, a := range t.Answers {
		if a == Holds && t.Replies[i].Status == 1 {
			kept++
		}
	}
	return kept
}

// TakenAt reports whether node i answered an extend that the key was free
// and is now the lock's (extend.lua's 2).
func (t *Tally) TakenAt(i int) bool {
	return t.Answers[i] == Holds && t.Replies[i].Status == takenFree
}

// takenFree is what an extend script answers for a node where the key was
// free and now holds the lock's token (extend.lua, renew_batch.lua).
const takenFree = 2

// ReleasedAt is Release's stop condition: every node has answered, or q
// nodes (counting base confirmed before) deleted the token and the nodes
// yet to answer are failing, or out past the deadline of the lock's
// previous operation there (before); or the grace of withGrace has passed
// since q nodes (with base) were known free of the token and, unless known
// (found lost, or validity out), the answers tell whether the lock held (so
// that a loss the slower nodes show is reported), or only failing nodes
// are left. skipped is how many nodes the fan-out skips (holdsNot in its
// tally); baseNo of them were found without the token before. See
// docs/algorithm.md, "Release".
func (c *Engine) ReleasedAt(q, base, baseNo, skipped int, known bool, before Settlement) func(*Tally) bool {
	n := len(c.nodes)
	failing := c.OnlyFailingLeft(before)
	return WithGrace(func(t *Tally) bool {
		return base+t.Yes >= q && !c.Awaits(t, before)
	}, func(t *Tally) bool {
		free := base+baseNo+t.Yes+t.No-skipped >= q
		return free && (known || base+t.Yes >= q || baseNo+t.No-skipped > n-q) || failing(t)
	})
}

// Awaits reports whether a node yet to answer in t is worth waiting for:
// it is not failing, and its call of the operation before (if any) is not
// still out past its deadline.
func (c *Engine) Awaits(t *Tally, before Settlement) bool {
	for i, a := range t.Answers {
		if a == Unanswered && c.failing[i].Load() == nil && !before.overdue(i) {
			return true
		}
	}
	return false
}

// TakenByOne returns the holder that the nodes that refused name on at
// least q of them (acquire.lua names it), and whether there is one.
func TakenByOne(t Tally, q int) (holder nodeio.Holder, taken bool) {
	count := map[nodeio.Holder]int{}
	for i, a := range t.Answers {
		if h := t.Replies[i].Holder; a == HoldsNot && h != (nodeio.Holder{}) {
			count[h]++
			if count[h] >= q {
				return h, true
			}
		}
	}
	return nodeio.Holder{}, false
}

// ReadAt returns the j-th string of node i's answer to a read; ok is false
// when the node did not answer or that is not a string (a nil for a key
// that is not there).
func (t *Tally) ReadAt(i, j int) (v string, ok bool) {
	if raw := t.Replies[i].Raw; t.Answers[i] == HoldsNot && j < len(raw) {
		v, ok = raw[j].(string)
	}
	return v, ok
}

// NotTaken marks the nodes where the extend t cannot have taken the key
// (skip): all but those that answered they took it, and those whose call
// may still take it (not heard from, or failed after it was sent); some
// reports whether one may have.
func (t *Tally) NotTaken() (skip []bool, some bool) {
	skip = make([]bool, len(t.Answers))
	for i, a := range t.Answers {
		mayTake := a == Unanswered || a == Failed && (t.Unsent == nil || !t.Unsent[i])
		skip[i] = !t.TakenAt(i) && !mayTake
		some = some || !skip[i]
	}
	return skip, some
}

// Of is what a fan-out of a Batch (renew_batch.lua) learned about its
// lock j, as the tally of that lock's own fan-out.
func (t *Tally) Of(j, n int) Tally {
	if len(t.Answers) == 0 { // not sent
		return NewTally(n, false)
	}
	lt := *t
	lt.Answers = make([]Answer, n)
	lt.Replies = make([]nodeio.Reply, n)
	lt.Yes, lt.No, lt.NotYes = 0, 0, 0
	for i, a := range t.Answers {
		switch {
		case t.HeldAt(i, j):
			lt.Answers[i], lt.Replies[i] = Holds, nodeio.Reply{Held: true, Status: t.Replies[i].Batch[j]} // 1 kept, 2 taken where free
			lt.Yes++
		case a == Holds:
			lt.Answers[i] = HoldsNot
			lt.No++
			lt.NotYes++
		default:
			lt.Answers[i] = a
			if a != Unanswered {
				lt.NotYes++
			}
		}
	}
	return lt
}

// HeldAt reports whether node i answered, in a fan-out of a Batch, that it
// holds lock j.
func (t *Tally) HeldAt(i, j int) bool {
	return t.Answers[i] == Holds && j < len(t.Replies[i].Batch) && t.Replies[i].Batch[j] > 0
}

// Recount works out t's counts from its answers and errors.
func (t *Tally) Recount() {
	t.Yes, t.No, t.Broken = 0, 0, 0
	for _, a := range t.Answers {
		switch a {
		case Holds:
			t.Yes++
		case HoldsNot:
			t.No++
		}
	}
	t.NotYes = len(t.Answers) - t.Yes
	for _, err := range t.Errs {
		if errors.Is(err, ErrMisconfigured) {
			t.Broken++
		}
	}
}
