package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// history is what one schedule did: every step as its actor saw it, and
// what was left on the nodes afterwards.
type history struct {
	schedule Schedule
	start    time.Time
	maxTTL   time.Duration
	holds    []*hold
	left     []keyLeft
	losses   []dataLoss
	errs     []error
	spans    []faultSpan // when each fault was in force
	// stalls is when the process did not run (nil: not watched), and
	// stalled how many late signals they explained.
	stalls  *stallWatch
	stalled int
}

// Violation is one thing a history shows that must never happen.
type Violation struct {
	Check  string `json:"check"` // exclusion, fencing, stale write, signal, liveness, left behind, harness, goroutines
	Detail string `json:"detail"`
}

func (v Violation) String() string { return v.Check + ": " + v.Detail }

// The checks, by name.
const (
	checkExclusion = "exclusion"   // two holders at once where the kinds exclude each other
	checkFencing   = "fencing"     // a later holder of a key with a token not above an earlier one's
	checkStale     = "stale write" // a write accepted after a later holder of the key had written
	checkSignal    = "signal"      // a holder told it may count on its lock at or after its Until
	checkLiveness  = "liveness"    // an acquire without the lock it had to get (see liveness)
	checkLeft      = "left behind" // a key left on a node for good, or for longer than any lock's ttl
	checkHarness   = "harness"     // the harness failed, or a call gave an error no caller should see
	checkLeak      = "goroutines"  // goroutines left once every lock and client was gone
)

// check runs every checker over the history.
func (h *history) check() []Violation {
	var vs []Violation
	for _, err := range h.errs {
		vs = append(vs, Violation{checkHarness, err.Error()})
	}
	vs = append(vs, h.exclusion()...)
	vs = append(vs, h.fencing()...)
	vs = append(vs, h.signals()...)
	vs = append(vs, h.liveness()...)
	vs = append(vs, h.leftovers()...)
	return vs
}

// at is t as an offset from the schedule's start.
func (h *history) at(t time.Time) string {
	return t.Sub(h.start).Round(100 * time.Microsecond).String()
}

// who names x's actor, step and run.
func (x *hold) who() string {
	s := fmt.Sprintf("actor %d.%d step %d", x.client, x.actor, x.step)
	if x.st.Repeat > 0 {
		s += fmt.Sprintf(" run %d", x.run)
	}
	return s
}

func (h *history) describe(x *hold) string {
	s := fmt.Sprintf("%s (%s %s %q", x.who(), x.st.Call, x.st.Kind, x.st.Keys)
	if x.st.Owner != "" {
		s += " owner " + x.st.Owner
	}
	if x.token > 0 {
		s += fmt.Sprintf(" token %d", x.token)
	}
	return s + fmt.Sprintf(", held %s to %s)", h.at(x.acquired), h.at(x.end()))
}

// holdsOn returns the holds that acquired key, in the order of the steps.
func (h *history) holdsOn(key string) []*hold {
	var out []*hold
	for _, x := range h.holds {
		if !x.acquired.IsZero() && containsKey(x.st.Keys, key) {
			out = append(out, x)
		}
	}
	return out
}

func containsKey(keys []string, key string) bool {
	for _, k := range keys {
		if k == key {
			return true
		}
	}
	return false
}

// mayShare tells whether two holds may hold one key at once: readers with
// readers, permits of one semaphore (of one K) with each other, and the
// holds of one owner of a reentrant lock.
func mayShare(a, b *hold) bool {
	switch {
	case a.st.Kind != b.st.Kind:
		return false
	case a.st.Kind == stepRead:
		return true
	case a.st.Kind == stepSemaphore:
		return a.st.permits() == b.st.permits()
	case a.st.Kind == stepReentrant:
		return a.st.Owner == b.st.Owner
	}
	return false
}

func overlap(a, b *hold) bool {
	return a.acquired.Before(b.end()) && b.acquired.Before(a.end())
}

// exclusion finds two holds of one key at once that their kinds forbid,
// and more than K permits of a semaphore at once. A hold lasts from the
// return of its acquire to the first of its release, its loss (Done closed)
// and its Until.
func (h *history) exclusion() []Violation {
	var vs []Violation
	for _, key := range exploreKeys {
		// by the time they were acquired, so that only the holds that begin
		// before one ends are compared with it (a repeated step makes
		// thousands)
		hs := slices.Clone(h.holdsOn(key))
		slices.SortStableFunc(hs, func(a, b *hold) int { return a.acquired.Compare(b.acquired) })
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				if !b.acquired.Before(a.end()) {
					break
				}
				if overlap(a, b) && !mayShare(a, b) {
					vs = append(vs, Violation{checkExclusion, fmt.Sprintf("%q held by %s and %s at once", key, h.describe(a), h.describe(b))})
				}
			}
			if a.st.Kind != stepSemaphore {
				continue
			}
			holding := 1
			for _, b := range hs {
				if b.acquired.After(a.acquired) {
					break
				}
				if b != a && b.st.Kind == stepSemaphore && a.acquired.Before(b.end()) {
					holding++
				}
			}
			if k := a.st.permits(); holding > k {
				vs = append(vs, Violation{checkExclusion, fmt.Sprintf("%q: %d permits held at once, K = %d, when %s acquired", key, holding, k, h.describe(a))})
			}
		}
	}
	return vs
}

// after tells whether b came after a on a key, so that b's fencing token
// must be above a's: b's acquire was called after a's returned, or their
// kinds exclude each other and b was granted after a had ended.
func after(a, b *hold) bool {
	return b.called.After(a.acquired) || (!mayShare(a, b) && !b.acquired.Before(a.end()))
}

// covered tells whether the fencing guarantee covers a and b on key: it
// holds while the nodes whose counter is at least a's token make up a
// majority. A node that lost its data in between (a kill without
// persistence) counts for nothing; if with it the nodes at a's token were no
// longer a majority, the documented guarantee does not cover the pair.
func (h *history) covered(key string, a, b *hold) bool {
	quorum := h.schedule.Nodes/2 + 1
	for _, d := range h.losses {
		if !d.at.After(a.acquired) || !d.at.Before(b.called) {
			continue
		}
		kept := 0
		for _, v := range d.counters[key] {
			if uint64(v) >= a.token {
				kept++
			}
		}
		if kept < quorum {
			return false
		}
	}
	return true
}

// fencing finds, per key, a fenced hold whose token is not above that of a
// fenced hold before it (see after), and a write accepted by the resource
// after a later holder's write: a stale write that fencing must refuse.
func (h *history) fencing() []Violation {
	var vs []Violation
	for _, key := range exploreKeys {
		hs := h.holdsOn(key)
		for _, a := range hs {
			for _, b := range hs {
				if a == b || !a.st.Fenced || !b.st.Fenced || !after(a, b) || !h.covered(key, a, b) {
					continue
				}
				if b.token <= a.token {
					vs = append(vs, Violation{checkFencing, fmt.Sprintf("%q: %s came after %s with a token not above it", key, h.describe(b), h.describe(a))})
				}
				for _, wa := range a.writes {
					for _, wb := range b.writes {
						if wa.key == key && wb.key == key && wa.accepted && wb.accepted && wb.at.Before(wa.at) {
							vs = append(vs, Violation{checkStale, fmt.Sprintf("%q: the write of %s at %s was accepted after that of %s, which came after it, at %s",
								key, h.describe(a), h.at(wa.at), h.describe(b), h.at(wb.at))})
						}
					}
				}
			}
		}
	}
	return vs
}

// signals finds holders told by their lock that they could count on it at
// or after its Until: Done still open, fn's context still alive, or a loss
// declared only once the validity had ended. A signal late by no more than
// the process stalled around Until is not the lock's doing (see
// stallWatch); it counts in stalled instead.
func (h *history) signals() []Violation {
	var vs []Violation
	for _, x := range h.holds {
		for _, t := range x.unsignalled {
			if h.stalls.explains(x.until, t) {
				h.stalled++
				continue
			}
			vs = append(vs, Violation{checkSignal, fmt.Sprintf("%s: its lock still said it was held at %s, at or after its Until %s", h.describe(x), h.at(t), h.at(x.until))})
		}
		if !x.lost.IsZero() && !x.lost.Before(x.lostTill) {
			if h.stalls.explains(x.lostTill, x.lost) {
				h.stalled++
				continue
			}
			vs = append(vs, Violation{checkSignal, fmt.Sprintf("%s: the loss was signalled at %s, not before its Until %s", h.describe(x), h.at(x.lost), h.at(x.lostTill))})
		}
	}
	return vs
}

// counter reports whether key is a fencing or ticket counter: it outlives
// its lock, until its node's clock has passed its value and then for the
// lock's ttl (docs/safety.md).
func counter(key string) bool {
	return strings.HasSuffix(key, ":fence") || strings.HasSuffix(key, ":tickets")
}

// leftovers finds keys left on a node with no time to live, or with more
// than any lock of the schedule could have set: both outlive every lock.
// The nodes run on this machine's clock, so a counter is never ahead of
// its node's clock by more than the raise of another node's value (the
// microseconds between their draws).
func (h *history) leftovers() []Violation {
	var vs []Violation
	for _, k := range h.left {
		bound := satAdd(h.maxTTL, 100*time.Millisecond)
		if strings.HasSuffix(k.key, ":queue") || strings.HasSuffix(k.key, ":queue-deadlines") {
			bound = 2*fairQueuePatience + 100*time.Millisecond
		}
		if counter(k.key) {
			// kept for the horizon of the Client that raised it last
			bound = satAdd(satAdd(h.maxTTL, h.schedule.maxHorizon()), 100*time.Millisecond)
		}
		if strings.HasSuffix(k.key, ":line") || strings.HasSuffix(k.key, ":line-woken") {
			// a plain lock's waiters' line, and the waiters a release woke
			// (it lasts as long as the line): the waiter's ttl, or 3 s at least
			bound = satAdd(max(h.maxTTL, lineLinger), 100*time.Millisecond)
		}
		switch {
		case k.pttl < 0:
			vs = append(vs, Violation{checkLeft, fmt.Sprintf("node %d: %q has no time to live", k.node, k.key)})
		case k.pttl > bound:
			vs = append(vs, Violation{checkLeft, fmt.Sprintf("node %d: %q has %v left, more than any lock's ttl (%v)", k.node, k.key, k.pttl, h.maxTTL)})
		}
	}
	return vs
}

// lineLinger is the least a plain lock's line of waiters lasts after a
// waiter joined it (the library's lineLinger).
const lineLinger = 3 * time.Second

// fairQueuePatience is how long a fair lock's waiter keeps its place on a
// node without trying again (docs/kinds.md); the queue lives twice that.
const fairQueuePatience = 4 * time.Second
