package chaos

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Liveness: the safety checks ask that no two holders overlap; a library
// that never grants a lock passes them all. The liveness check asks the
// other half: once the nodes and the key allow it, a waiting acquire gets
// its lock within a bound. It asks it only where no correct library can
// fail, so that a violation is a defect and not bad luck: a stretch of a
// step's wait during which
//
//   - the network is good for the step's client: a quorum of the nodes
//     (of the step's kind: a majority, or ⌊K·N/(K+1)⌋+1 for a semaphore of
//     K permits) is up (not frozen, killed or cut off from that client,
//     nor just back: see recovery) and each of them answers that client
//     within a round trip of at most a quarter of the ttl (the slow faults
//     on its links, and a starved CPU, add to its round trip: see
//     faultEffect);
//   - the CPU is starved no more than the explorer starves it (one
//     processor, at most two goroutines spinning: their cost is in the
//     round trip), and what the machine took from the process, as
//     measured during the run (see delayed), lengthens the bound: a bound
//     is of the time the process ran;
//   - the key is free: no other step holds it, waits for it, or may have
//     left a key on the nodes (see occupancy).
//
// Three rules follow.
//
// Acquire (and Do): once such a stretch has lasted the bound B, the
// acquire must have returned its lock. B is liveBound: 1 s, plus two node
// timeouts (a hung node costs one per attempt until it is known to fail;
// the Client's WithNodeTimeout, else the library's documented default for
// the ttl), plus eight round trips of the quorum's slowest node over the
// stretch, sixteen when other steps of the same Client are under way
// meanwhile, plus the longest delay of the retry policy. A Client's first
// lock on a slow network costs four or five round trips (go-redis's
// handshake of a new connection is three; the nodes' identification and
// a fencing token cost one each, measured through the explorer's links),
// later ones one or two; a first attempt may time out and have to be
// cleaned up. A Client sends one batch at a time to a node, so a call may
// first wait out another's round trip: twice the round trips when the
// Client is busy. The base second and the rest of the factor cover a loaded
// machine. The defects the rule is for give no lock at all for seconds.
//
// Remote waiter: a stretch in which the key is not free, but taken and
// given back over and over by the steps of one other client only, each
// holding it for briefHold at most (a churn of hand-offs), counts too,
// with handOffGrace more: a waiter must not starve while another process
// hands the key among its own goroutines.
//
// TryAcquire without a deadline: one attempt on a free key, with a quorum
// answering within a quarter of the node timeout (of 100 ms at least: a
// healthy node on a loaded machine answers well within it) from the call
// to its return, and the process not stalled for a quarter of the node
// timeout meanwhile, must get the lock, once the Client has had a lock
// (its connections and its identification of the nodes are in place),
// unless the Client does not batch (see tryLive).
// Another caller's deadline or cancellation must not make it fail.
//
// A value refused with ErrInvalidArgument is a refusal, never a liveness
// failure. Acquires with a bounded number of attempts are not judged.

// The terms of liveBound, and of the rules above.
const (
	liveBase     = time.Second
	liveTimeouts = 2
	liveRTTs     = 8
	// handOffGrace is what the remote waiter rule adds to the bound.
	handOffGrace = time.Second
	// briefHold is the longest hold of a churn the remote waiter rule
	// allows (from the acquire's return to the release's).
	briefHold = 100 * time.Millisecond
	// tryMinTimeout is the least node timeout under which a TryAcquire is
	// judged.
	tryMinTimeout = 100 * time.Millisecond
	// freedMargin is how long a key is taken to stay after its release
	// returned nil: the release returns once a quorum answered, and the
	// other nodes' deletes may still be under way.
	freedMargin = 20 * time.Millisecond
)

// exploreRetryMax is the longest delay of the explorer's retry policy,
// ExponentialBackoff(2ms, 40ms), which every Client has unless its plan
// gives another.
const exploreRetryMax = 40 * time.Millisecond

// derivedTimeout is the node timeout the library derives from a ttl when
// WithNodeTimeout is not given, as its documentation states: a tenth of
// the ttl, at least 50 ms, at most 1 s.
func derivedTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 50*time.Millisecond), time.Second)
}

// liveBound is B: how long a waiting acquire may go without its lock
// through a stretch in which it must get it, for a node timeout, the
// round trip of the quorum's slowest node, whether other steps of its
// Client are under way (busy), and the longest retry delay (see the rules
// above). It saturates rather than overflow.
func liveBound(timeout, rtt time.Duration, busy bool, retryMax time.Duration) time.Duration {
	rtts := int64(liveRTTs)
	if busy {
		rtts *= 2
	}
	return satAdd(satAdd(liveBase, satMul(timeout, liveTimeouts)), satAdd(satMul(rtt, rtts), retryMax))
}

func satAdd(a, b time.Duration) time.Duration {
	if a > 0 && b > maxDuration-a {
		return maxDuration
	}
	return a + b
}

func satMul(d time.Duration, n int64) time.Duration {
	if d > 0 && d > maxDuration/time.Duration(n) {
		return maxDuration
	}
	return d * time.Duration(n)
}

const maxDuration = time.Duration(1<<63 - 1)

// recovery is how long after a fault that took a node out the node still
// counts as out: a restarted node is dialled again, a thawed one works
// off what it was sent, and the calls sent into a partition hold their
// connections until go-redis's read timeout (2 s in the explorer) ends
// them.
func recovery(kind string) time.Duration {
	if kind == "partition" {
		return 2 * time.Second
	}
	return 500 * time.Millisecond
}

// quorumOf is how many nodes of n a lock of st must win: a majority, or
// ⌊K·n/(K+1)⌋+1 for a semaphore of K permits (docs/kinds.md), written so
// that no K overflows.
func quorumOf(st planStep, n int) int {
	if st.Kind != stepSemaphore {
		return n/2 + 1
	}
	k := st.permits()
	return n - ceilDiv(n, k) + 1
}

// ceilDiv is ⌈n/(k+1)⌉ for n, k ≥ 1, without computing k+1.
func ceilDiv(n, k int) int {
	if k >= n {
		return 1
	}
	return (n + k) / (k + 1)
}

// clientTimeout is the node timeout of st's calls on its Client.
func (h *history) clientTimeout(x *hold) time.Duration {
	if t := time.Duration(h.schedule.Clients[x.client].NodeTimeout); t > 0 {
		return t
	}
	return derivedTimeout(time.Duration(x.st.TTL))
}

// retryMax is the longest delay of x's Client's retry policy.
func (h *history) retryMax(x *hold) time.Duration {
	switch r := h.schedule.Clients[x.client].Retry; {
	case r == nil:
		return exploreRetryMax
	case r.Policy == "default":
		return defaultRetryMax
	default:
		return max(time.Duration(r.Max), time.Duration(r.Min))
	}
}

// defaultRetryMax is the longest delay of the library's default retry
// policy (WithRetry's documentation): up to 1.5 s between attempts once
// the Acquire listens for the lock's release.
const defaultRetryMax = 1500 * time.Millisecond

// interval is a span of time, from its first moment up to its last.
type interval struct{ from, to time.Time }

// union merges intervals that overlap or touch; the result is sorted.
func union(is []interval) []interval {
	is = slices.DeleteFunc(slices.Clone(is), func(i interval) bool { return !i.to.After(i.from) })
	slices.SortFunc(is, func(a, b interval) int { return a.from.Compare(b.from) })
	var out []interval
	for _, i := range is {
		if n := len(out); n > 0 && !i.from.After(out[n-1].to) {
			out[n-1].to = later(out[n-1].to, i.to)
			continue
		}
		out = append(out, i)
	}
	return out
}

// complement returns the parts of [from, to] outside the sorted, merged
// intervals bad.
func complement(from, to time.Time, bad []interval) []interval {
	var out []interval
	at := from
	for _, b := range bad {
		if !b.to.After(at) {
			continue
		}
		if !b.from.Before(to) {
			break
		}
		if b.from.After(at) {
			out = append(out, interval{at, b.from})
		}
		at = b.to
	}
	if to.After(at) {
		out = append(out, interval{at, to})
	}
	return out
}

// addTime is t+d, capped a century ahead: a key of an extreme ttl
// outlives every history.
func addTime(t time.Time, d time.Duration) time.Time {
	return t.Add(min(d, 100*365*24*time.Hour))
}

// occupancy is when x may keep others off its keys: from its call (a
// waiter competes) until its release returned nil (and freedMargin), or,
// when it did not release cleanly (kept, lost, failed, released with an
// error), until its last call plus the longest ttl it set: a key it left
// on a node lives no longer. A fair waiter that gave up may keep its
// place in a node's queue for its patience more.
func (h *history) occupancy(x *hold) interval {
	switch {
	case x.refused:
		return interval{x.called, x.returned}
	case !x.freed.IsZero():
		return interval{x.called, x.freed.Add(freedMargin)}
	}
	to := addTime(later(x.finished, x.returned), x.st.maxTTL())
	if x.st.Kind == stepFair {
		to = addTime(to, max(fairQueuePatience, 8*h.clientTimeout(x)))
	}
	return interval{x.called, to}
}

// sharesKey tells whether a and b name a key in common.
func sharesKey(a, b *hold) bool {
	return slices.ContainsFunc(a.st.Keys, func(k string) bool { return containsKey(b.st.Keys, k) })
}

// linkState is a node as one client reaches it over a span of time.
type linkState struct {
	down bool
	rtt  time.Duration // what faults add to its round trip
}

// faultEffect is the span over which fault f, in force over sp, affects
// node n for client c, and how; ok is false when it does not.
func (h *history) faultEffect(sp faultSpan, c, n int) (interval, linkState, bool) {
	f := h.schedule.Faults[sp.fault]
	onNode := slices.Contains(f.Nodes, n)
	onClient := len(f.Clients) == 0 || slices.Contains(f.Clients, c)
	switch {
	case (f.Kind == "freeze" || f.Kind == "kill") && onNode, f.Kind == "partition" && onNode && onClient:
		return interval{sp.from, sp.to.Add(recovery(f.Kind))}, linkState{down: true}, true
	case f.Kind == "slow" && onNode && onClient:
		rtt := 2 * time.Duration(f.Latency+f.Jitter)
		return interval{sp.from, sp.to.Add(rtt)}, linkState{rtt: rtt}, true // what was sent meanwhile lands late
	case f.Kind == "starve":
		return interval{sp.from, sp.to.Add(100 * time.Millisecond)}, linkState{rtt: time.Duration(f.Busy) * starveRTT}, true
	}
	return interval{}, linkState{}, false
}

// network returns, for client c over [from, to], the intervals in which
// fewer than q nodes are up with a round trip of at most limit (bad), and
// the quorum's round trip (the q-th smallest) in each interval that is not.
func (h *history) network(c, q int, limit time.Duration, from, to time.Time) (bad []interval, good []interval, rtts []time.Duration) {
	cuts := []time.Time{from, to}
	for _, sp := range h.spans {
		for n := range h.schedule.Nodes {
			if iv, _, ok := h.faultEffect(sp, c, n); ok {
				for _, t := range []time.Time{iv.from, iv.to} {
					if t.After(from) && t.Before(to) {
						cuts = append(cuts, t)
					}
				}
			}
		}
	}
	slices.SortFunc(cuts, func(a, b time.Time) int { return a.Compare(b) })
	cuts = slices.CompactFunc(cuts, func(a, b time.Time) bool { return a.Equal(b) })
	for i := 0; i+1 < len(cuts); i++ {
		seg := interval{cuts[i], cuts[i+1]}
		mid := seg.from.Add(seg.to.Sub(seg.from) / 2)
		var ok []time.Duration
		for n := range h.schedule.Nodes {
			st := linkState{}
			for _, sp := range h.spans {
				if iv, eff, in := h.faultEffect(sp, c, n); in && !mid.Before(iv.from) && mid.Before(iv.to) {
					st.down = st.down || eff.down
					st.rtt += eff.rtt
				}
			}
			if !st.down && st.rtt <= limit {
				ok = append(ok, st.rtt)
			}
		}
		if len(ok) < q {
			bad = append(bad, seg)
			continue
		}
		slices.Sort(ok)
		good = append(good, seg)
		rtts = append(rtts, ok[q-1])
	}
	return union(bad), good, rtts
}

// quorumRTT is the largest quorum round trip of the good segments over iv.
func quorumRTT(iv interval, good []interval, rtts []time.Duration) time.Duration {
	var m time.Duration
	for i, g := range good {
		if g.from.Before(iv.to) && iv.from.Before(g.to) {
			m = max(m, rtts[i])
		}
	}
	return m
}

// delayed is how long the machine kept the process from running over iv,
// as measured during the run: the stalls the stall watcher saw, but in the
// windows in which the explorer starved the CPU on purpose (which stall
// every wake-up: what the starvation itself costs is in the round trip),
// and in those the time the process's processor did not run (lost).
func (h *history) delayed(iv interval) time.Duration {
	d := h.stalls.within(iv.from, iv.to)
	for _, sp := range h.spans {
		if h.schedule.Faults[sp.fault].Kind == "starve" {
			from, to := later(iv.from, sp.from), earlier(iv.to, sp.to)
			if to.After(from) {
				d += lost(sp.ran, from, to) - h.stalls.within(from, to)
			}
		}
	}
	return max(d, 0)
}

// liveness applies the three rules above to every step of the history.
func (h *history) liveness() []Violation {
	var vs []Violation
	// when each client first had a lock: its connections and the nodes'
	// identification are in place from then on
	firstLock := map[int]time.Time{}
	for _, x := range h.holds {
		if t, ok := firstLock[x.client]; !x.acquired.IsZero() && (!ok || x.acquired.Before(t)) {
			firstLock[x.client] = x.acquired
		}
	}
	for _, w := range h.holds {
		if w.refused || w.called.IsZero() || w.returned.IsZero() {
			continue
		}
		plan := h.schedule.Clients[w.client]
		if plan.MaxAttempts > 0 && plan.MaxAttempts < extremePermitsFrom {
			continue // may give up before its context ends
		}
		switch {
		case w.st.Call == "try" && w.st.Wait == 0:
			if t, ok := firstLock[w.client]; ok && t.Before(w.called) && w.acquired.IsZero() {
				if v, ok := h.tryLive(w); !ok {
					vs = append(vs, v)
				}
			}
		case w.st.Call == "acquire" || w.st.Call == "do":
			if v, ok := h.acquireLive(w); !ok {
				vs = append(vs, v)
			}
		}
	}
	return vs
}

// others returns the holds other than w on a key of w whose occupancy
// meets [from, to].
func (h *history) others(w *hold, from, to time.Time) []*hold {
	var out []*hold
	for _, x := range h.holds {
		if x == w || x.called.IsZero() || !sharesKey(w, x) {
			continue
		}
		if o := h.occupancy(x); o.from.Before(to) && from.Before(o.to) {
			out = append(out, x)
		}
	}
	return out
}

// acquireLive applies the Acquire rule, then the remote waiter rule, to w.
func (h *history) acquireLive(w *hold) (Violation, bool) {
	end := w.returned
	if !w.acquired.IsZero() {
		end = w.acquired
	}
	if end.Sub(w.called) <= liveBase {
		return Violation{}, true // no stretch can be as long as a bound
	}
	ttl := time.Duration(w.st.TTL)
	netBad, good, rtts := h.network(w.client, quorumOf(w.st, h.schedule.Nodes), ttl/4, w.called, end)
	var taken, blocking []interval
	byClient := map[int][]interval{}
	for _, x := range h.others(w, w.called, end) {
		o := h.occupancy(x)
		taken = append(taken, o)
		brief := !x.acquired.IsZero() && !x.freed.IsZero() && x.freed.Sub(x.acquired) <= briefHold
		if x.client == w.client || !brief {
			blocking = append(blocking, o)
		} else {
			byClient[x.client] = append(byClient[x.client], o)
		}
	}
	// the remote waiter rule allows the churn of one other client at a time
	var clients [][]interval
	for _, is := range byClient {
		clients = append(clients, union(is))
	}
	for i := range clients {
		for j := range i {
			for _, a := range clients[i] {
				for _, b := range clients[j] {
					if from, to := later(a.from, b.from), earlier(a.to, b.to); to.After(from) {
						blocking = append(blocking, interval{from, to})
					}
				}
			}
		}
	}
	for _, rule := range []struct {
		name  string
		bad   []interval
		grace time.Duration
	}{
		{"the key free", append(slices.Clone(netBad), taken...), 0},
		{"the key only handed over among the brief holds of one other client", append(slices.Clone(netBad), blocking...), handOffGrace},
	} {
		for _, s := range complement(w.called, end, union(rule.bad)) {
			rtt := quorumRTT(s, good, rtts)
			busy := h.busy(w, s)
			// the bound is of the time the process ran: what the machine
			// took from it over the stretch lengthens the bound
			delay := h.delayed(s)
			bound := satAdd(satAdd(liveBound(h.clientTimeout(w), rtt, busy, h.retryMax(w)), rule.grace), delay)
			if s.to.Sub(s.from) <= bound {
				continue
			}
			outcome := "returned without it at " + h.at(w.returned) + ": " + shorten(w.failure)
			if !w.acquired.IsZero() {
				outcome = "got it only at " + h.at(w.acquired)
			}
			n := liveRTTs
			if busy {
				n *= 2
			}
			return Violation{checkLiveness, fmt.Sprintf("%s waited from %s; from %s a quorum of nodes answered it within %s with %s, for %v, more than the bound %v (1s + %d node timeouts of %v + %d round trips of %v + retry %v%s + %v the machine delayed this process, as measured), and it %s",
				h.name(w), h.at(w.called), h.at(s.from), quarterOf(ttl), rule.name, s.to.Sub(s.from).Round(time.Millisecond), bound.Round(time.Millisecond),
				liveTimeouts, h.clientTimeout(w), n, rtt, h.retryMax(w), churnNote(rule.grace), delay.Round(time.Millisecond), outcome)}, false
		}
	}
	return Violation{}, true
}

// busy tells whether another step of w's Client was under way during iv.
func (h *history) busy(w *hold, iv interval) bool {
	return slices.ContainsFunc(h.holds, func(x *hold) bool {
		return x != w && x.client == w.client && !x.called.IsZero() && x.called.Before(iv.to) && (x.finished.IsZero() || iv.from.Before(x.finished))
	})
}

// quarterOf writes a quarter of ttl, or says so for an extreme ttl.
func quarterOf(ttl time.Duration) string {
	if ttl >= extremeFrom {
		return "a quarter of its ttl"
	}
	return (ttl / 4).String()
}

func churnNote(grace time.Duration) string {
	if grace > 0 {
		return fmt.Sprintf(" + %v for a churn", grace)
	}
	return ""
}

// tryLive applies the TryAcquire rule to w, a TryAcquire without a
// deadline that got no lock.
func (h *history) tryLive(w *hold) (Violation, bool) {
	timeout := h.clientTimeout(w)
	if timeout < tryMinTimeout {
		return Violation{}, true
	}
	if len(h.others(w, w.called, w.returned)) > 0 {
		return Violation{}, true // the key was not free
	}
	if bad, _, _ := h.network(w.client, quorumOf(w.st, h.schedule.Nodes), timeout/4, w.called, w.returned); len(bad) > 0 {
		return Violation{}, true
	}
	if h.stalls.within(w.called, w.returned) > timeout/4 {
		return Violation{}, true
	}
	if !h.schedule.Clients[w.client].Batching {
		// Without batching, a Client's calls share its go-redis pool with
		// the calls its other callers gave up on, which run on to their
		// answers (a call once sent is not cut: it could land after the
		// cleanup's delete); a stream of callers that give up at once can
		// hold every connection past a node timeout. The nodes answer; the
		// Client's own pool does not (WithBatching's documentation).
		return Violation{}, true
	}
	return Violation{checkLiveness, fmt.Sprintf("%s, a TryAcquire without a deadline on a free key, from %s to %s, with a quorum of nodes answering within %v (a quarter of the node timeout %v), got no lock: %s",
		h.name(w), h.at(w.called), h.at(w.returned), timeout/4, timeout, shorten(w.failure))}, false
}

// name names w and what it asked for.
func (h *history) name(w *hold) string {
	s := fmt.Sprintf("%s (%s %s %q ttl %v", w.who(), w.st.Call, w.st.Kind, w.st.Keys, w.st.TTL)
	if w.st.Wait > 0 && w.st.Call != "try" {
		s += fmt.Sprintf(" wait %v", w.st.Wait)
	}
	return s + ")"
}

// shorten keeps an error's text to a readable length.
func shorten(s string) string {
	const most = 400
	if len(s) > most {
		return s[:most] + "…"
	}
	return strings.TrimSpace(s)
}
