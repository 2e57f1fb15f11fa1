// Package wait is an Acquire's waiting policy: how long it waits before
// its next attempt, from what its attempts so far told, and what it waits
// on meanwhile (a release announced on the node it listens on, its place
// in the key's line: wakeup.go). Its core, Next, is a pure function of
// Facts. Every constant that times a wait between attempts stands in the
// table below, with the figure it moves, measured with and without it
// (docs/benchmarks.md, "Timing heuristics: an inventory", gives each
// command and the whole rows).
package wait

import (
	"time"

	"github.com/quorumlock/redlock/internal/engine"
)

// The waiting policy's constants.
const (
	// RetryBase and RetryMax make the default retry policy,
	// ExponentialBackoff(10ms, 320ms): the bench's workloads run on it.
	RetryBase = 10 * time.Millisecond
	RetryMax  = 320 * time.Millisecond

	// SubscribedPoll is the least wait (up to half as long again) between
	// the attempts of a waiter that hears the lock's release announced:
	// at most 5 attempts in 3 s while the holder holds; about 10 without.
	SubscribedPoll = time.Second

	// UnreachablePoll is the least wait (up to half as long again) while
	// so many nodes fail that no quorum can form: 7 attempts in 2 s with
	// a majority down; 42 without (655 with the cleanups' own releases).
	UnreachablePoll = 250 * time.Millisecond

	// WakeSpread scales the quick retry after a wake-up (0.5–2.5 ms) when
	// a release was heard but not yet landed on a quorum: the longest wait
	// 1.6–5.1 ms per kind (bench -probe wakeups); 23–31 ms without.
	WakeSpread = 500 * time.Microsecond

	// LineLinger is the least a wait line lasts after a join: 20 waiters
	// on a 100 ms lock held 300 ms at a time made 373–445 attempts in
	// 12 s; 608–787 without.
	LineLinger = 3 * time.Second

	// HandOffs is the default run of hand-offs within one Client once
	// another process waits (WithHandOff); YieldFirst, doubling up to
	// YieldMax, is how long the Client then waits before it contends
	// again, and YieldDeaf how long a listener that never takes the key is
	// ignored: a remote waiter got the lock within 1 s in 10 of 10 runs,
	// p50 66 ms (bench -probe handoff); 6 of 10 without.
	//
	// YieldProbe is the pause of the one run a YieldMax that a listener
	// taken for deaf still cuts: a remote waiter stalled 1.5 s at the
	// start of another Client's 4 s run of hand-offs got the key 2.6 s
	// in, at the latest, in 6 of 6 runs (chaos explorer, remote waiter
	// shape, its links slowed to 700 ms for 1.5 s); without, 2 of 3 runs
	// that set the deaf window starved until the run ended (4.5 s).
	HandOffs   = 12
	YieldFirst = 2 * WakeSpread
	YieldMax   = time.Second
	YieldDeaf  = 10 * time.Second
	YieldProbe = 32 * time.Millisecond

	// FairPatience is how long a fair waiter keeps its place in a node's
	// queue without trying again there, or FairPatienceTimeouts node
	// timeouts when longer: a bound, not a tuning (without it a vanished
	// waiter holds the queue for ever).
	FairPatience         = 4 * time.Second
	FairPatienceTimeouts = 8

	// SplitRounds is how many more rounds a client a split vote designates
	// makes at most: 100 Clients racing one TryAcquire had no winner in 0
	// of 20 races (N = 3, and N = 5); 2 and 6 of 20 without.
	SplitRounds = 3
)

// Facts is what an Acquire's attempts so far told, for its next wait.
type Facts struct {
	Given       time.Duration // the retry policy's delay after this many failed attempts
	Paced       bool          // the policy is the default one, which the library paces
	Subscribed  bool          // the waiter hears the lock's release announced
	SinceWoken  time.Duration // since a release was last heard (the largest Duration: never)
	NodeTimeout time.Duration
	NewHolder   bool // a quorum refused for another holder than the refusal before
	Fresh       bool // a subscription was just confirmed: a release before it was heard by nobody
	Unreachable bool // so many nodes failed that no quorum could form
	// A fair waiter's: its place in the queue, and whether the last
	// release named it first in line.
	InLine, First bool
	Patience      time.Duration
}

// Next is the wait before the next attempt; random(n) is a random
// duration in [0, n), for n > 0.
func Next(f Facts, random func(time.Duration) time.Duration) time.Duration {
	d := woken(f, random)
	if f.InLine {
		d = inLine(f, d)
	}
	if f.Fresh {
		d = 0 // one more attempt at once sees a release announced to nobody
	}
	if f.Unreachable {
		return unreachable(f, d, random)
	}
	return d
}

// woken is the policy's delay, paced while the release will be heard, and
// cut short right after a release was heard with no new holder since: the
// woken clients may have split the votes, or the release has not landed
// on every node yet.
func woken(f Facts, random func(time.Duration) time.Duration) time.Duration {
	d := f.Given
	if f.Paced && f.Subscribed && f.SinceWoken > SubscribedPoll {
		// The timer is only for a release missed (the node fails) or never
		// announced (the key expires).
		d = max(d, SubscribedPoll+random(SubscribedPoll/2))
	}
	if f.SinceWoken < f.NodeTimeout && !f.NewHolder {
		d = min(d, WakeSpread+random(4*WakeSpread))
	}
	return d
}

// inLine is a fair waiter's wait: WakeSpread when the last release named
// it first in line and it was still refused (the release had not reached
// every node yet); with the default policy, at most a quarter of its
// patience, which keeps its place.
func inLine(f Facts, d time.Duration) time.Duration {
	switch {
	case f.First:
		return WakeSpread
	case f.Paced:
		return min(d, f.Patience/4)
	}
	return d
}

// unreachable is the wait after an attempt that found a majority down,
// frozen or cut off: a given policy's delay as given, and the default's a
// few a second (a fair waiter keeps its own pace: held back, one that a
// node's restart left out of some queues was overtaken). A release heard
// meanwhile (the attempt's own undo) does not cut it.
func unreachable(f Facts, d time.Duration, random func(time.Duration) time.Duration) time.Duration {
	switch {
	case !f.Paced:
		return f.Given
	case !f.InLine:
		return max(d, UnreachablePoll+random(UnreachablePoll/2))
	}
	return d
}

// Yield is how a Client yields a key to other processes after it cut a
// run of hand-offs (see HandOffs): how long its next turn after a cut run
// waits before it contends, and until when a listener the nodes show is
// taken for one that never takes the key (deaf): a run at its limit is
// then cut only once every YieldMax, with a pause of YieldProbe, which a
// listener that was only slow (stalled) takes the key in, and is heeded
// again. The zero Yield waits YieldFirst and heeds every listener.
type Yield struct {
	For  time.Duration // 0 for YieldFirst
	Deaf time.Time
	cut  time.Time // when a run was last cut while deaf
}

// Pause is how long the turn after a cut run waits before it contends at
// now, less its random part (up to a quarter more).
func (y Yield) Pause(now time.Time) time.Duration {
	if now.Before(y.Deaf) {
		return YieldProbe
	}
	return max(y.For, YieldFirst)
}

// Cut reports whether a run of hand-offs at its limit, a listener shown,
// is cut at now (and then records it): always, but once every YieldMax
// while the listeners are taken for deaf.
func (y *Yield) Cut(now time.Time) bool {
	if !now.Before(y.Deaf) {
		return true
	}
	if now.Sub(y.cut) < YieldMax {
		return false
	}
	y.cut = now
	return true
}

// After is the Yield once the Acquire that followed a cut run took
// attempts: refused first (another process took the key), it starts
// again, heeding the listeners; won at once, the other was not first, and
// the pause doubles, up to YieldMax, past which the listeners are taken
// for deaf for YieldDeaf (a probe while deaf changes nothing).
func (y Yield) After(attempts int, now time.Time) Yield {
	switch next := 2 * max(y.For, YieldFirst); {
	case attempts > 1:
		return Yield{}
	case now.Before(y.Deaf):
		return y
	case next > YieldMax:
		return Yield{Deaf: now.Add(YieldDeaf), cut: now}
	default:
		return Yield{For: next}
	}
}

// Patience is how long a fair waiter keeps its place in a node's queue
// without trying again there, for a base node timeout (not the one the
// round trips lengthen, with which a queue would outlive its waiters by
// seconds): FairPatience, or FairPatienceTimeouts node timeouts when
// longer, at most maxPatience. A waiter on a slower network may lose its
// place between two attempts; it takes it back, by its ticket, at the next.
func Patience(base time.Duration) time.Duration {
	return min(max(FairPatience, engine.MulSat(FairPatienceTimeouts, base)), maxPatience)
}

// maxPatience is the longest patience: the queue's keys live twice that
// (kind_fair.lua), within the longest time to live (engine.MaxPX).
const maxPatience = time.Duration(engine.MaxPX/2) * time.Millisecond

// SplitPause is how long the client a split vote designates waits in its
// round'th more round (from 0) for the others to release: as long as its
// first round took (first, 1 ms at least), doubling each round.
func SplitPause(first time.Duration, round int) time.Duration {
	return max(first, time.Millisecond) << round
}
