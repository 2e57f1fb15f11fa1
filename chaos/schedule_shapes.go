package chaos

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// The shapes drawn beside the general mix (genMix), each to put the
// library's progress to a test the mix never sets, with the liveness check
// (see liveness) asking that waiting acquires get their locks:
//
//   - slow network: every node slower than the node timeout the library
//     derives from the ttl, for the whole run, the round trip still well
//     inside the ttl;
//   - starved CPU: the explorer's process on one processor with
//     goroutines spinning, for a window;
//   - tiny deadlines: goroutines of a Client calling TryAcquire and Acquire
//     with deadlines of 100 µs to 2 ms, which fail as they must, beside
//     goroutines of the same Client calling TryAcquire without a deadline
//     on keys nobody else takes;
//   - remote waiter: a Client whose links are a millisecond or two slower
//     waiting for a key that another Client's goroutines hand each other
//     over and over;
//   - election: candidates of several Clients campaigning for one name
//     again and again (each leadership a fenced, renewed lock), writing
//     under their terms, with the mix's faults;
//   - extreme values: ttls, extends and resumes of math.MaxInt64 and
//     near it, WithNodeTimeout and WithFenceHorizon of as much, WithPermits
//     near math.MaxInt, retry policies at their limits: each either
//     refused with ErrInvalidArgument (a refusal, not a failure) or
//     honoured exactly, which the safety checks then hold it to.
const (
	shapeSlow    = "slow network"
	shapeStarve  = "starved CPU"
	shapeTiny    = "tiny deadlines"
	shapeChurn   = "remote waiter"
	shapeExtreme = "extreme values"
	shapeElect   = "election"
)

// shapeNames and shapeWeights say how often each shape is drawn, of 100:
// the general mix ("") keeps about three schedules in four. The starved CPU runs
// alone (see Schedule.exclusive), which holds the other lanes up: it is
// drawn least.
var (
	shapeNames   = []string{"", shapeSlow, shapeStarve, shapeTiny, shapeChurn, shapeExtreme, shapeElect}
	shapeWeights = []int{76, 5, 2, 4, 3, 6, 4}
	shapes       = map[string]func(*rand.Rand, bool) Schedule{
		shapeSlow:    genSlow,
		shapeStarve:  genStarve,
		shapeTiny:    genTiny,
		shapeChurn:   genChurn,
		shapeExtreme: genExtreme,
		shapeElect:   genElection,
	}
)

// dur draws a duration in [lo, hi], in whole milliseconds (microseconds
// below 10 ms), so that a printed schedule reads well.
func dur(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	unit := time.Millisecond
	if hi < 10*time.Millisecond {
		unit = time.Microsecond
	}
	return max(lo, (lo + time.Duration(rng.Int64N(int64(hi-lo)+1))).Truncate(unit))
}

// newShape starts a schedule of 3 or 5 nodes.
func newShape(rng *rand.Rand, persist bool) Schedule {
	s := Schedule{Nodes: pick(rng, []int{3, 5}, []int{3, 1})}
	s.Persist = persist && rng.IntN(2) == 0
	return s
}

// allNodes lists the nodes of s.
func (s Schedule) allNodes() []int {
	out := make([]int, s.Nodes)
	for i := range out {
		out[i] = i
	}
	return out
}

// genLiveStep draws a step that waits (Acquire or Do) up to wait for a lock
// of any kind with ttl, uses it briefly and releases it: what the liveness
// check asks to succeed once the nodes and the key allow.
func genLiveStep(rng *rand.Rand, at, ttl, wait time.Duration) planStep {
	st := planStep{
		At:     jsonDur(at),
		Kind:   pick(rng, []string{stepPlain, stepMulti, stepRead, stepWrite, stepReentrant, stepSemaphore, stepFair}, []int{4, 1, 1, 1, 1, 1, 1}),
		Call:   pick(rng, []string{"acquire", "do"}, []int{3, 1}),
		Fenced: rng.IntN(2) == 0,
		TTL:    jsonDur(ttl),
		Wait:   jsonDur(wait),
	}
	if st.Kind == stepMulti {
		first := rng.IntN(len(exploreKeys))
		st.Keys = []string{exploreKeys[first], exploreKeys[(first+1)%len(exploreKeys)]}
		st.Call = "acquire"
	} else {
		st.Keys = []string{pick(rng, exploreKeys, keyWeights)}
	}
	if st.Kind == stepReentrant {
		st.Owner = pick(rng, []string{"o1", "o2"}, []int{1, 1})
	}
	st.Renew = st.Call == "do"
	exclusive := st.Kind != stepRead && st.Kind != stepSemaphore
	for range 1 + rng.IntN(3) {
		a := planAction{Op: pick(rng, []string{"work", "extend", "write"}, []int{3, 1, 2})}
		switch {
		case a.Op == "work" || a.Op == "write" && !exclusive:
			a = planAction{Op: "work", D: jsonDur(dur(rng, 5*time.Millisecond, ttl/5))}
		case a.Op == "extend":
			a.D = jsonDur(dur(rng, ttl, 2*ttl))
		}
		st.Actions = append(st.Actions, a)
	}
	return st
}

// genSlow draws a slow network: every link of every client to every node
// slowed, each way, by 6 % to 11 % of the ttl (± a twentieth; 400 ms at
// most, so that the run stays short), for the whole run. The round trip,
// 12 % to 23 % of the ttl, is more than the node timeout the library
// derives from it (a tenth) and well inside the ttl (a quarter at most, as
// liveness asks). Each step waits for the liveness bound of that round
// trip (for a busy Client) and 1.5 s more. One slow network in four is
// slowed less (withinTimeout), and one in four is a lone node (loneNode).
func genSlow(rng *rand.Rand, persist bool) Schedule {
	s := newShape(rng, persist)
	ttl := pick(rng, []time.Duration{time.Second, 2 * time.Second, 5 * time.Second}, []int{3, 2, 1})
	lat := dur(rng, ttl*6/100, min(ttl/9, 400*time.Millisecond))
	jitter := lat / 20
	wait := liveBound(derivedTimeout(ttl), 2*(lat+jitter), true, exploreRetryMax) + 1500*time.Millisecond
	for range 1 + rng.IntN(3) {
		c := clientPlan{Batching: rng.IntN(4) != 0, HandOff: rng.IntN(4) != 0}
		for range 1 + rng.IntN(2) {
			// the fault is in place before any step begins
			steps := []planStep{genLiveStep(rng, dur(rng, 20*time.Millisecond, 300*time.Millisecond), ttl, wait)}
			if ttl == time.Second && rng.IntN(2) == 0 {
				steps = append(steps, genLiveStep(rng, time.Duration(steps[0].At)+dur(rng, 0, time.Second), ttl, wait))
			}
			c.Actors = append(c.Actors, steps)
		}
		s.Clients = append(s.Clients, c)
	}
	s.Faults = []planFault{{Kind: "slow", Nodes: s.allNodes(), Whole: true, Latency: jsonDur(lat), Jitter: jsonDur(jitter)}}
	if rng.IntN(3) == 0 { // and a minority frozen for a while
		s.Faults = append(s.Faults, planFault{Kind: "freeze", At: jsonDur(dur(rng, 0, 2*time.Second)),
			For: jsonDur(dur(rng, 100*time.Millisecond, 500*time.Millisecond)), Nodes: rng.Perm(s.Nodes)[:1+rng.IntN(s.tolerated())]})
	}
	// drawn last, so that the other slow networks of a seed stay as they
	// were drawn before these
	switch rng.IntN(4) {
	case 0:
		loneNode(rng, &s, ttl)
	case 1:
		withinTimeout(rng, &s, ttl)
	}
	return s
}

// withinTimeout slows the network less: a round trip of two fifths to two
// thirds of the derived node timeout, which every call fits well in, but
// not a new connection's handshake (three round trips).
func withinTimeout(rng *rand.Rand, s *Schedule, ttl time.Duration) {
	timeout := derivedTimeout(ttl)
	lat := dur(rng, timeout/5, timeout/3)
	jitter := lat / 20
	s.Faults[0].Latency, s.Faults[0].Jitter = jsonDur(lat), jsonDur(jitter)
	setWaits(s, liveBound(timeout, 2*(lat+jitter), true, exploreRetryMax)+1500*time.Millisecond)
}

// setWaits has every step of s wait that long.
func setWaits(s *Schedule, wait time.Duration) {
	for i := range s.Clients {
		for _, steps := range s.Clients[i].Actors {
			for j := range steps {
				steps[j].Wait = jsonDur(wait)
			}
		}
	}
}

// loneNode turns a slow network into a lone node whose Clients have
// go-redis end each call at its deadline (ContextTimeoutEnabled, which
// docs/benchmarks.md suggests for a lone node), its round trip two fifths
// to two thirds of the node timeout: a new connection's handshake (three
// round trips) then outlasts the node timeout, while every call fits well
// in it.
func loneNode(rng *rand.Rand, s *Schedule, ttl time.Duration) {
	timeout := derivedTimeout(ttl)
	lat := dur(rng, timeout/5, timeout/3)
	jitter := lat / 20
	s.Nodes = 1
	s.Faults = []planFault{{Kind: "slow", Nodes: []int{0}, Whole: true, Latency: jsonDur(lat), Jitter: jsonDur(jitter)}}
	for i := range s.Clients {
		s.Clients[i].ContextTimeout = true
	}
	setWaits(s, liveBound(timeout, 2*(lat+jitter), true, exploreRetryMax)+1500*time.Millisecond)
}

// starveRTT is what each spinning goroutine of a starved CPU adds to a
// round trip through the explorer's links, at the most: toxiproxy runs in
// the explorer's process, and every hop of a call (the caller, go-redis,
// the proxy's goroutines each way) waits its turn behind the spinners,
// which the Go scheduler preempts every 10 ms. Measured on 2 cores: a PING
// took 60 ms a spinner (61 ms with one, 121 ms with two, 243 ms with four).
const starveRTT = 100 * time.Millisecond

// genStarve draws a starved CPU: for 2.5 s to 3.5 s the explorer's process
// runs on one processor while one or two goroutines spin, and Clients
// acquire meanwhile with ttls whose quarter holds the starved round trip.
// Such a schedule runs alone (see Schedule.exclusive).
func genStarve(rng *rand.Rand, persist bool) Schedule {
	s := newShape(rng, persist)
	busy := pick(rng, []int{1, 2}, []int{2, 1})
	ttls, weights := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}, []int{3, 2, 1}
	if busy > 1 {
		ttls, weights = ttls[1:], weights[1:]
	}
	s.Faults = []planFault{{Kind: "starve", At: jsonDur(dur(rng, 0, 100*time.Millisecond)),
		For: jsonDur(dur(rng, 2500*time.Millisecond, 3500*time.Millisecond)), Busy: busy}}
	for range 2 + rng.IntN(2) {
		c := clientPlan{Batching: rng.IntN(4) != 0, HandOff: rng.IntN(4) != 0}
		ttl := pick(rng, ttls, weights)
		wait := liveBound(derivedTimeout(ttl), time.Duration(busy)*starveRTT, false, exploreRetryMax) + 500*time.Millisecond
		steps := []planStep{genLiveStep(rng, dur(rng, 100*time.Millisecond, 800*time.Millisecond), ttl, wait)}
		if rng.IntN(3) == 0 {
			steps = append(steps, genLiveStep(rng, time.Duration(steps[0].At)+dur(rng, 0, 500*time.Millisecond), ttl, wait))
		}
		c.Actors = append(c.Actors, steps)
		s.Clients = append(s.Clients, c)
	}
	return s
}

// genTiny draws callers with tiny deadlines: in client 0, two to four
// goroutines call TryAcquire or Acquire on key "a" again and again with
// deadlines of 100 µs to 2 ms (most fail, as they must), while one or two
// others call TryAcquire without a deadline, every 25 ms to 40 ms (longer
// than the freedMargin that liveness gives a released key), on keys
// nobody else takes, with ttls of 1 s to 5 s (node timeouts of 100 ms to
// 500 ms): those must succeed. Now and then a minority freezes for a
// while.
func genTiny(rng *rand.Rand, persist bool) Schedule {
	s := newShape(rng, persist)
	span := dur(rng, 1500*time.Millisecond, 2500*time.Millisecond)
	c := clientPlan{Batching: rng.IntN(4) != 0, HandOff: rng.IntN(4) != 0}
	for range 2 + rng.IntN(3) {
		c.Actors = append(c.Actors, []planStep{{
			Call: pick(rng, []string{"try", "acquire"}, []int{2, 1}), Kind: stepPlain, Keys: []string{"a"},
			TTL:  jsonDur(dur(rng, time.Second, 2*time.Second)),
			Wait: jsonDur(dur(rng, 100*time.Microsecond, 2*time.Millisecond)), Repeat: jsonDur(span),
			Gap: jsonDur(dur(rng, 0, 500*time.Microsecond)),
		}})
	}
	for _, key := range []string{"b", "{t}:c"}[:1+rng.IntN(2)] {
		st := planStep{
			At: ms(50), Call: "try", Kind: pick(rng, []string{stepPlain, stepWrite, stepReentrant, stepFair}, []int{3, 1, 1, 1}), Keys: []string{key},
			Fenced: rng.IntN(2) == 0, TTL: jsonDur(pick(rng, []time.Duration{time.Second, 2 * time.Second, 5 * time.Second}, []int{1, 2, 1})),
			Actions: []planAction{{Op: "work", D: jsonDur(dur(rng, time.Millisecond, 3*time.Millisecond))}},
			Repeat:  jsonDur(span - 50*time.Millisecond), Gap: jsonDur(dur(rng, 25*time.Millisecond, 40*time.Millisecond)),
		}
		if st.Kind == stepReentrant {
			st.Owner = "o1"
		}
		c.Actors = append(c.Actors, []planStep{st})
	}
	s.Clients = []clientPlan{c}
	if rng.IntN(3) == 0 {
		s.Faults = []planFault{{Kind: "freeze", At: jsonDur(dur(rng, 200*time.Millisecond, span-500*time.Millisecond)),
			For: jsonDur(dur(rng, 100*time.Millisecond, 400*time.Millisecond)), Nodes: rng.Perm(s.Nodes)[:1+rng.IntN(s.tolerated())]}}
	}
	return s
}

// genChurn draws a remote waiter against hand-offs: client 0, hand-offs
// on, has three or four goroutines take key "a", work a millisecond or
// two, and release it, again and again for 4 s (a release hands the lock
// to the next of them); client 1, its links 1 ms to 2 ms slower each way,
// starts waiting for the key within the first 0.7 s, until a second after
// the churn ends. The liveness check asks it to get the key within its
// bound while the churn goes on.
func genChurn(rng *rand.Rand, persist bool) Schedule {
	s := newShape(rng, persist)
	const span = 5 * time.Second
	ttl := pick(rng, []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second}, []int{1, 2, 1})
	local := clientPlan{Batching: rng.IntN(4) != 0, HandOff: true}
	for range 3 + rng.IntN(2) {
		st := planStep{Call: "acquire", Kind: stepPlain, Keys: []string{"a"}, TTL: jsonDur(ttl), Wait: jsonDur(span),
			Actions: []planAction{{Op: "work", D: jsonDur(dur(rng, time.Millisecond, 2*time.Millisecond))}}, Repeat: jsonDur(span)}
		if rng.IntN(2) == 0 {
			st.Actions = append(st.Actions, planAction{Op: "write"})
		}
		local.Actors = append(local.Actors, []planStep{st})
	}
	at := dur(rng, 300*time.Millisecond, 700*time.Millisecond)
	remote := clientPlan{Batching: rng.IntN(4) != 0, HandOff: rng.IntN(2) == 0, Retry: &planRetry{Policy: "default"}, Actors: [][]planStep{{{
		At: jsonDur(at), Call: pick(rng, []string{"acquire", "do"}, []int{2, 1}), Kind: stepPlain, Keys: []string{"a"},
		TTL: jsonDur(ttl), Wait: jsonDur(span - at + time.Second), Fenced: rng.IntN(2) == 0,
		Actions: []planAction{{Op: "work", D: jsonDur(dur(rng, 5*time.Millisecond, 20*time.Millisecond))}, {Op: "write"}},
	}}}}
	remote.Actors[0][0].Renew = remote.Actors[0][0].Call == "do"
	s.Clients = []clientPlan{local, remote}
	lat := dur(rng, time.Millisecond, 2*time.Millisecond).Round(time.Millisecond)
	s.Faults = []planFault{{Kind: "slow", Nodes: s.allNodes(), Clients: []int{1}, Whole: true, Latency: jsonDur(lat)}}
	return s
}

// extremeDurations are the durations near math.MaxInt64 that a user may
// pass for "forever": rounded up to milliseconds, most overflow.
var extremeDurations = []time.Duration{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 999_999, math.MaxInt64/2 + 1, 1 << 62}

// extremePermits are permit counts near math.MaxInt, whose quorum
// arithmetic (permits·N) overflows.
var extremePermits = []int{math.MaxInt, math.MaxInt - 1, math.MaxInt/2 + 1, math.MaxInt/3 + 1}

// extremeFrom is where a value counts as extreme: no other draw comes
// near it. A step or Client with such a value may be refused with
// ErrInvalidArgument.
const (
	extremeFrom        = time.Duration(1) << 50 // 13 days
	extremePermitsFrom = 1 << 30
)

// extreme reports whether st carries an extreme value.
func (st planStep) extreme() bool {
	if time.Duration(st.TTL) >= extremeFrom || st.Permits >= extremePermitsFrom {
		return true
	}
	for _, a := range st.Actions {
		if time.Duration(a.D) >= extremeFrom {
			return true
		}
	}
	return false
}

// extreme reports whether c is given an extreme option value.
func (c clientPlan) extreme() bool {
	return time.Duration(c.NodeTimeout) >= extremeFrom || time.Duration(c.FenceHorizon) >= extremeFrom || c.MaxAttempts >= extremePermitsFrom ||
		c.Retry != nil && time.Duration(c.Retry.Max) >= extremeFrom
}

// genExtreme draws extreme option values, one variant a schedule:
//
//   - extend, resume: a holder extends its lock (or resumes it by its
//     token) to an extreme ttl and works on for twice its first ttl, while
//     another client waits for the key: if the nodes did not take the new
//     ttl, the other gets the key while the holder still counts on it (an
//     exclusion);
//   - ttl: an acquire with an extreme ttl on a free key must either be
//     refused or get the lock (liveness);
//   - permits: a semaphore of extreme permits (a permit needs
//     ⌊K·N/(K+1)⌋+1 nodes: all of them, for such a K) asked by a client
//     cut off from every node but one must not be granted, while another
//     client takes the key (an exclusion);
//   - node timeout: a renewed lock of a Client with an extreme node
//     timeout, its client cut off from every node, must signal its loss
//     before its Until (signal);
//   - fence horizon: fenced locks of a Client with an extreme horizon
//     and of another with none must still get rising tokens (fencing);
//   - retry: a Client with a retry policy at its limits contends with
//     another for a key.
func genExtreme(rng *rand.Rand, persist bool) Schedule {
	s := newShape(rng, persist)
	x := pick(rng, extremeDurations, []int{3, 1, 1, 1, 1})
	ttl := dur(rng, 300*time.Millisecond, 500*time.Millisecond).Round(time.Millisecond)
	rival := func(key string, at, wait time.Duration, kind string) clientPlan {
		return clientPlan{Batching: true, HandOff: true, Actors: [][]planStep{{{At: jsonDur(at), Call: "acquire", Kind: kind, Keys: []string{key},
			TTL: ms(500), Wait: jsonDur(wait), Actions: []planAction{{Op: "write"}}}}}}
	}
	holder := clientPlan{Batching: rng.IntN(4) != 0, HandOff: rng.IntN(4) != 0}
	switch pick(rng, []string{"extend", "resume", "ttl", "permits", "node timeout", "fence horizon", "retry"}, []int{3, 1, 2, 1, 1, 1, 1}) {
	case "extend":
		st := genLiveStep(rng, 0, ttl, 300*time.Millisecond)
		st.Call = pick(rng, []string{"acquire", "try", st.Call}, []int{2, 1, 1})
		if st.Call == "try" {
			st.Wait = 0 // TryAcquire without a deadline
		}
		st.Actions = []planAction{{Op: "extend", D: jsonDur(x)}, {Op: "work", D: jsonDur(2*ttl + 300*time.Millisecond)}, {Op: "write"}}
		kind := stepPlain
		if st.Kind == stepRead || st.Kind == stepSemaphore {
			kind = stepWrite // one that excludes it
			st.Actions = st.Actions[:2]
		}
		holder.Actors = [][]planStep{{st}}
		s.Clients = []clientPlan{holder, rival(st.Keys[0], ttl/2, 2*ttl+time.Second, kind)}
	case "resume":
		st := planStep{Call: "acquire", Kind: stepPlain, Keys: []string{"a"}, TTL: jsonDur(ttl), Wait: ms(300),
			Actions: []planAction{{Op: "resume", D: jsonDur(x)}, {Op: "work", D: jsonDur(2*ttl + 300*time.Millisecond)}, {Op: "write"}}}
		holder.Actors = [][]planStep{{st}}
		s.Clients = []clientPlan{holder, rival("a", ttl/2, 2*ttl+time.Second, stepPlain)}
	case "ttl":
		// an answer from every node first, so that a TryAcquire is held to
		// its one attempt (see liveness)
		warm := planStep{Call: "try", Kind: stepPlain, Keys: []string{"b"}, TTL: ms(500)}
		st := genLiveStep(rng, 100*time.Millisecond, x, liveBound(derivedTimeout(x), 0, false, exploreRetryMax)+time.Second)
		st.Call = pick(rng, []string{"acquire", "try", st.Call}, []int{2, 1, 1})
		st.Renew = st.Call == "do"
		if st.Call == "try" {
			st.Wait = 0
		}
		st.Actions = []planAction{{Op: "work", D: ms(50)}, {Op: "extend", D: ms(500)}}
		if st.Keys[0] == "b" {
			st.Keys[0] = "a"
		}
		holder.Actors = [][]planStep{{warm, st}}
		s.Clients = []clientPlan{holder}
	case "permits":
		st := planStep{At: ms(50), Call: pick(rng, []string{"try", "acquire"}, []int{1, 1}), Kind: stepSemaphore, Keys: []string{"a"},
			Permits: pick(rng, extremePermits, []int{1, 1, 1, 1}), TTL: ms(1000), Wait: ms(300),
			Actions: []planAction{{Op: "work", D: ms(800)}}}
		if st.Call == "try" {
			st.Wait = 0
		}
		holder.Actors = [][]planStep{{st}}
		s.Clients = []clientPlan{holder, rival("a", 150*time.Millisecond, time.Second, stepPlain)}
		cut := rng.Perm(s.Nodes)[1:]
		slices.Sort(cut)
		s.Faults = []planFault{{Kind: "partition", Nodes: cut, Clients: []int{0}, Whole: true}}
	case "node timeout":
		holder.NodeTimeout = jsonDur(x)
		st := planStep{Call: pick(rng, []string{"acquire", "do"}, []int{1, 1}), Kind: stepPlain, Keys: []string{"a"}, Renew: true,
			TTL: jsonDur(ttl), Wait: ms(500), Actions: []planAction{{Op: "work", D: jsonDur(2*ttl + 300*time.Millisecond)}}}
		holder.Actors = [][]planStep{{st}}
		s.Clients = []clientPlan{holder, rival("a", ttl, 2*ttl+time.Second, stepPlain)}
		s.Faults = []planFault{{Kind: "partition", Nodes: s.allNodes(), Clients: []int{0}, Anchor: &faultAnchor{Action: 0},
			For: jsonDur(2*ttl + 500*time.Millisecond)}}
	case "fence horizon":
		holder.FenceHorizon = jsonDur(x)
		other := clientPlan{Batching: true, HandOff: true}
		step := func(at time.Duration) planStep {
			st := genLiveStep(rng, at, ttl, time.Second)
			st.Fenced, st.Keys = true, []string{"a"}
			if st.Kind == stepMulti {
				st.Keys = []string{"a", "b"}
			}
			return st
		}
		holder.Actors = [][]planStep{{step(0), step(2 * ttl)}}
		other.Actors = [][]planStep{{step(ttl)}}
		s.Clients = []clientPlan{holder, other}
	case "retry":
		holder.Retry = pick(rng, []*planRetry{
			{Policy: "exponential", Min: 1, Max: math.MaxInt64},
			{Policy: "exponential", Min: math.MaxInt64, Max: math.MaxInt64},
			{Policy: "exponential", Min: 1, Max: 1},
			{Policy: "random", Min: 1, Max: 2},
			{Policy: "random", Min: 1, Max: math.MaxInt64},
			{Policy: "random", Min: math.MaxInt64 - 1, Max: math.MaxInt64},
		}, []int{1, 1, 1, 1, 1, 1})
		if rng.IntN(2) == 0 {
			holder.MaxAttempts = pick(rng, []int{math.MaxInt, math.MaxInt - 1}, []int{1, 1})
		}
		for range 2 {
			st := genLiveStep(rng, dur(rng, 0, 200*time.Millisecond), ttl, dur(rng, 300*time.Millisecond, 800*time.Millisecond))
			holder.Actors = append(holder.Actors, []planStep{st})
		}
		s.Clients = []clientPlan{holder, rival(holder.Actors[0][0].Keys[0], 100*time.Millisecond, time.Second, stepPlain)}
	}
	return s
}

// genElection draws candidates of 2 to 4 Clients campaigning for the
// election "a" for 3 s, each leadership working a little and writing
// under its term, with the general mix's faults.
func genElection(rng *rand.Rand, persist bool) Schedule {
	s := newShape(rng, persist)
	const span = 3 * time.Second
	ttl := pick(rng, []time.Duration{500 * time.Millisecond, time.Second}, []int{1, 1})
	for range 2 + rng.IntN(3) {
		st := planStep{Call: "campaign", Kind: stepPlain, Keys: []string{"a"}, TTL: jsonDur(ttl), Wait: jsonDur(span + time.Second),
			Fenced: true, Renew: true, Repeat: jsonDur(span),
			Actions: []planAction{{Op: "work", D: jsonDur(dur(rng, 5*time.Millisecond, 50*time.Millisecond))}, {Op: "write"}}}
		s.Clients = append(s.Clients, clientPlan{Batching: rng.IntN(4) != 0, HandOff: rng.IntN(2) == 0, Actors: [][]planStep{{st}}})
	}
	s.Faults = genFaults(rng, s)
	return s
}
