package chaos

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// waiter is an Acquire of key on client c, ttl 1 s (node timeout 100 ms),
// called at from and returning at to (ms), with a lock when got.
func waiter(c int, key string, from, to int, got bool) *hold {
	x := &hold{client: c, st: planStep{Call: "acquire", Kind: stepPlain, Keys: []string{key}, TTL: ms(1000), Wait: ms(10000)},
		called: tms(from), returned: tms(to), finished: tms(to)}
	if got {
		x.acquired, x.released, x.freed, x.until, x.finished = tms(to), tms(to+10), tms(to+10), tms(to+900), tms(to+10)
	} else {
		x.failure = "redlock: not acquired"
	}
	return x
}

// holder is a lock of key on client c, acquired at from and released
// cleanly at to (ms).
func holder(c int, key string, from, to int) *hold {
	return &hold{client: c, st: planStep{Call: "acquire", Kind: stepPlain, Keys: []string{key}, TTL: ms(1000)},
		called: tms(from), returned: tms(from), acquired: tms(from), released: tms(to), freed: tms(to), until: tms(from + 990), finished: tms(to)}
}

func liveHistory(clients int, faults []planFault, spans []faultSpan, holds ...*hold) *history {
	s := Schedule{Nodes: 3, Faults: faults}
	for range clients {
		s.Clients = append(s.Clients, clientPlan{Batching: true})
	}
	return &history{start: at0, schedule: s, holds: holds, spans: spans}
}

func TestLiveBound(t *testing.T) {
	// 1 s + 2 × 100 ms + 8 × 250 ms + 40 ms
	if got := liveBound(100*time.Millisecond, 250*time.Millisecond, false, exploreRetryMax); got != 3240*time.Millisecond {
		t.Errorf("liveBound = %v, want 3.24s", got)
	}
	if got := liveBound(100*time.Millisecond, 250*time.Millisecond, true, exploreRetryMax); got != 5240*time.Millisecond {
		t.Errorf("liveBound of a busy Client = %v, want 5.24s", got)
	}
	if got := liveBound(math.MaxInt64, time.Second, false, math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("liveBound saturates: %v", got)
	}
	for _, tt := range []struct {
		ttl, want time.Duration
	}{{250 * time.Millisecond, 50 * time.Millisecond}, {time.Second, 100 * time.Millisecond}, {5 * time.Second, 500 * time.Millisecond}, {math.MaxInt64, time.Second}} {
		if got := derivedTimeout(tt.ttl); got != tt.want {
			t.Errorf("derivedTimeout(%v) = %v, want %v", tt.ttl, got, tt.want)
		}
	}
}

func TestQuorumOf(t *testing.T) {
	for _, tt := range []struct {
		permits, n, want int
	}{{2, 3, 3}, {2, 5, 4}, {1, 3, 2}, {3, 5, 4}, {math.MaxInt, 5, 5}, {math.MaxInt, 3, 3}} {
		if got := quorumOf(planStep{Kind: stepSemaphore, Permits: tt.permits}, tt.n); got != tt.want {
			t.Errorf("a semaphore of %d permits on %d nodes: quorum %d, want %d", tt.permits, tt.n, got, tt.want)
		}
	}
	if got := quorumOf(planStep{Kind: stepPlain}, 5); got != 3 {
		t.Errorf("a plain lock on 5 nodes: quorum %d", got)
	}
}

func TestUnionComplement(t *testing.T) {
	iv := func(a, b int) interval { return interval{tms(a), tms(b)} }
	got := union([]interval{iv(50, 60), iv(0, 10), iv(5, 20), iv(20, 30), iv(40, 40)})
	if want := []interval{iv(0, 30), iv(50, 60)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("union = %v, want %v", got, want)
	}
	if got, want := complement(tms(-10), tms(100), got), []interval{iv(-10, 0), iv(30, 50), iv(60, 100)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("complement = %v, want %v", got, want)
	}
	if got := complement(tms(0), tms(30), []interval{iv(-5, 40)}); len(got) != 0 {
		t.Fatalf("complement of a covered span = %v", got)
	}
}

// TestHistory_liveness_acquire: an Acquire on a free key with a quorum
// healthy must get its lock within the bound (1 s + 2 × 100 ms + 40 ms for
// a ttl of 1 s on a healthy network).
func TestHistory_liveness_acquire(t *testing.T) {
	freeze := []planFault{{Kind: "freeze", Nodes: []int{0, 1}}, {Kind: "freeze", Nodes: []int{0}}}
	slow := func(lat int) []planFault { return []planFault{{Kind: "slow", Nodes: []int{0, 1, 2}, Latency: ms(lat)}} }
	for _, tt := range []struct {
		name   string
		h      *history
		failed bool
	}{
		{"got it at once", liveHistory(1, nil, nil, waiter(0, "a", 0, 5, true)), false},
		{"free, and nothing for 5 s", liveHistory(1, nil, nil, waiter(0, "a", 0, 5000, false)), true},
		{"free, and the lock after 2 s", liveHistory(1, nil, nil, waiter(0, "a", 0, 2000, true)), true},
		{"free for 1.2 s, within the bound", liveHistory(1, nil, nil, waiter(0, "a", 0, 1200, false)), false},
		{"held by another until 4 s", liveHistory(2, nil, nil, holder(1, "a", 0, 4000), waiter(0, "a", 10, 5000, true)), false},
		{"held until 2 s, then free for 3 s", liveHistory(2, nil, nil, holder(1, "a", 0, 2000), waiter(0, "a", 10, 5000, false)), true},
		{"held on another key", liveHistory(2, nil, nil, holder(1, "b", 0, 5000), waiter(0, "a", 10, 5000, false)), true},
		{"a majority frozen throughout", liveHistory(1, freeze[:1], []faultSpan{{fault: 0, from: tms(-1), to: tms(6000)}}, waiter(0, "a", 0, 5000, false)), false},
		{"a minority frozen throughout", liveHistory(1, freeze[1:], []faultSpan{{fault: 0, from: tms(-1), to: tms(6000)}}, waiter(0, "a", 0, 5000, false)), true},
		{"a majority frozen until 3.5 s (back at 4 s)", liveHistory(1, freeze[:1], []faultSpan{{fault: 0, from: tms(-1), to: tms(3500)}}, waiter(0, "a", 0, 5000, false)), false},
		{"a majority frozen until 1 s", liveHistory(1, freeze[:1], []faultSpan{{fault: 0, from: tms(-1), to: tms(1000)}}, waiter(0, "a", 0, 5000, false)), true},
		// a round trip of 200 ms, within a quarter of the ttl: the bound is 2.84 s
		{"a slow network, 4.5 s", liveHistory(1, slow(100), []faultSpan{{fault: 0, from: tms(-1), to: tms(6000)}}, waiter(0, "a", 0, 4500, false)), true},
		{"a slow network, 2.5 s", liveHistory(1, slow(100), []faultSpan{{fault: 0, from: tms(-1), to: tms(6000)}}, waiter(0, "a", 0, 2500, false)), false},
		{"a network too slow for the ttl", liveHistory(1, slow(200), []faultSpan{{fault: 0, from: tms(-1), to: tms(9000)}}, waiter(0, "a", 0, 9000, false)), false},
		{"a network too slow until 6 s (what was sent lands until 6.4 s)", liveHistory(1, slow(200), []faultSpan{{fault: 0, from: tms(-1), to: tms(6000)}}, waiter(0, "a", 0, 9000, false)), true},
	} {
		got := checksOf(tt.h.liveness())
		if tt.failed != (len(got) > 0) {
			t.Errorf("%s: %v, want a violation: %v", tt.name, tt.h.liveness(), tt.failed)
		}
	}

	// refused, or bounded in attempts: not judged
	w := waiter(0, "a", 0, 5000, false)
	w.refused = true
	if got := liveHistory(1, nil, nil, w).liveness(); len(got) != 0 {
		t.Errorf("a refusal: %v", got)
	}
	h := liveHistory(1, nil, nil, waiter(0, "a", 0, 5000, false))
	h.schedule.Clients[0].MaxAttempts = 3
	if got := h.liveness(); len(got) != 0 {
		t.Errorf("bounded attempts: %v", got)
	}

	// the process's stalls lengthen the bound
	h = liveHistory(1, nil, nil, waiter(0, "a", 0, 2000, false))
	if got := h.liveness(); len(got) != 1 || !strings.Contains(got[0].Detail, "bound 1.24s") {
		t.Fatalf("no stall: %v", got)
	}
	h.stalls = &stallWatch{spans: [][2]time.Time{{tms(100), tms(900)}}}
	if got := h.liveness(); len(got) != 0 {
		t.Errorf("800 ms of stall in the stretch: %v", got)
	}
}

// TestHistory_liveness_remoteWaiter: a churn of brief holds from one other
// client must let a waiter in within the bound and a second more.
func TestHistory_liveness_remoteWaiter(t *testing.T) {
	churn := func(c, from, to, d int) []*hold {
		var out []*hold
		for at := from; at < to; at += d + 1 {
			x := holder(c, "a", at, at+d)
			x.called = tms(at - 1)
			out = append(out, x)
		}
		return out
	}
	for _, tt := range []struct {
		name   string
		holds  []*hold
		failed bool
	}{
		{"brief holds of one other client", append(churn(1, 0, 5000, 2), waiter(0, "a", 10, 5000, false)), true},
		{"brief holds, got it at 2 s", append(churn(1, 0, 5000, 2), waiter(0, "a", 10, 2000, true)), false},
		{"brief holds of its own client", append(churn(0, 0, 5000, 2), waiter(0, "a", 10, 5000, false)), false},
		{"long holds", append(churn(1, 0, 5000, 300), waiter(0, "a", 10, 5000, false)), false},
		{"brief holds of two other clients", append(append(churn(1, 0, 5000, 2), churn(2, 0, 5000, 2)...), waiter(0, "a", 10, 5000, false)), false},
	} {
		h := liveHistory(3, nil, nil, tt.holds...)
		got := h.liveness()
		if tt.failed != (len(got) > 0) {
			t.Errorf("%s: %v, want a violation: %v", tt.name, got, tt.failed)
		}
		if len(got) > 0 && !strings.Contains(got[0].Detail, "handed over") {
			t.Errorf("%s: %v", tt.name, got)
		}
	}
}

// TestHistory_liveness_try: a TryAcquire without a deadline on a free key
// with a quorum healthy must get the lock, once its Client has had one.
func TestHistory_liveness_try(t *testing.T) {
	try := func(key string, from int) *hold {
		return &hold{client: 0, st: planStep{Call: "try", Kind: stepPlain, Keys: []string{key}, TTL: ms(2000)},
			called: tms(from), returned: tms(from + 3), finished: tms(from + 3), failure: "redlock: not acquired: not waited for, failing since its last call"}
	}
	first := holder(0, "b", 0, 10)
	for _, tt := range []struct {
		name   string
		h      *history
		failed bool
	}{
		{"failed on a free key", liveHistory(1, nil, nil, first, try("a", 100)), true},
		{"the Client's first call", liveHistory(1, nil, nil, try("a", 100)), false},
		{"a deadline", liveHistory(1, nil, nil, first, func() *hold { x := try("a", 100); x.st.Wait = ms(1); return x }()), false},
		{"the key held", liveHistory(2, nil, nil, first, holder(1, "a", 50, 150), try("a", 100)), false},
		{"a failed acquire's key may be left", liveHistory(2, nil, nil, first, waiter(1, "a", 20, 80, false), try("a", 100)), false},
		{"a minority frozen", liveHistory(1, []planFault{{Kind: "freeze", Nodes: []int{2}}}, []faultSpan{{fault: 0, from: tms(50), to: tms(200)}}, first, try("a", 100)), true},
		{"a majority slow", liveHistory(1, []planFault{{Kind: "slow", Nodes: []int{0, 2}, Latency: ms(30)}}, []faultSpan{{fault: 0, from: tms(50), to: tms(200)}}, first, try("a", 100)), false},
	} {
		got := checksOf(tt.h.liveness())
		if tt.failed != reflect.DeepEqual(got, []string{checkLiveness}) {
			t.Errorf("%s: %v, want a violation: %v", tt.name, tt.h.liveness(), tt.failed)
		}
	}
	// a ttl of 500 ms: a node timeout of 50 ms, under which a loaded
	// machine may miss a reply
	x := try("a", 100)
	x.st.TTL = ms(500)
	if got := liveHistory(1, nil, nil, first, x).liveness(); len(got) != 0 {
		t.Errorf("a short node timeout: %v", got)
	}
}

func TestHistory_liveness_starved(t *testing.T) {
	// one goroutine spinning adds 100 ms to the round trip: within a
	// quarter of a 500 ms ttl, the bound is 1 s + 2 × 50 ms + 8 × 100 ms + 40 ms
	faults := []planFault{{Kind: "starve", Busy: 1}}
	w := waiter(0, "a", 0, 2000, false)
	w.st.TTL = ms(500)
	h := liveHistory(1, faults, []faultSpan{{fault: 0, from: tms(-1), to: tms(3000)}}, w)
	if got := h.liveness(); len(got) != 1 || !strings.Contains(got[0].Detail, "bound 1.94s") {
		t.Fatalf("starved, no lock for 2 s: %v", got)
	}
	// two spinning: 200 ms, more than a quarter of the ttl
	h.schedule.Faults[0].Busy = 2
	if got := h.liveness(); len(got) != 0 {
		t.Fatalf("starved beyond the bound: %v", got)
	}

	// What the machine took from the starved process, as measured,
	// lengthens the bound; the stall watcher's stalls in the starved window
	// do not: a starved process stalls at every wake-up.
	h.schedule.Faults[0].Busy = 1
	ran := func(rate float64) []cpuMark {
		var marks []cpuMark
		for at := 0; at <= 3000; at += 20 {
			marks = append(marks, cpuMark{tms(at), time.Duration(rate * float64(at) * float64(time.Millisecond))})
		}
		return marks
	}
	h.stalls = &stallWatch{spans: [][2]time.Time{{tms(-1), tms(3000)}}}
	h.spans[0].ran = ran(1)
	if got := h.liveness(); len(got) != 1 || !strings.Contains(got[0].Detail, "bound 1.94s") || !strings.Contains(got[0].Detail, "+ 0s the machine delayed this process") {
		t.Fatalf("starved, running all along, no lock for 2 s: %v", got)
	}
	h.spans[0].ran = ran(0.5)
	if got := h.liveness(); len(got) != 0 {
		t.Fatalf("starved, running half the time (1 s of the 2 s lost), no lock for 2 s: %v", got)
	}
	w.returned, w.finished = tms(4500), tms(4500)
	if got := h.liveness(); len(got) != 1 || !strings.Contains(got[0].Detail, "bound 3.44s") || !strings.Contains(got[0].Detail, "+ 1.5s the machine delayed this process") {
		t.Fatalf("starved until 3 s, running half the time, no lock for 4.5 s: %v", got)
	}
}

func TestLost(t *testing.T) {
	d := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// 50 ms lost in the first 100 ms, none in the next; more processor
	// time than wall time (other threads) makes up for nothing
	marks := []cpuMark{{tms(0), 0}, {tms(100), d(50)}, {tms(200), d(150)}, {tms(300), d(260)}}
	for _, tt := range []struct {
		from, to, want int
	}{{0, 300, 50}, {50, 150, 25}, {100, 300, 0}, {-100, 50, 25}, {400, 500, 0}} {
		if got := lost(marks, tms(tt.from), tms(tt.to)); got != d(tt.want) {
			t.Errorf("lost over [%d, %d] = %v, want %v", tt.from, tt.to, got, tt.want)
		}
	}
}
