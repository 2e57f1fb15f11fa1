package wait

import (
	"math"
	"testing"
	"time"
)

// TestNext: the waiting policy, case by case, at both ends of its random
// spreads.
func TestNext(t *testing.T) {
	const never = time.Duration(math.MaxInt64)
	ms := time.Millisecond
	low := func(time.Duration) time.Duration { return 0 }
	high := func(n time.Duration) time.Duration { return n - 1 }
	base := Facts{Given: 40 * ms, Paced: true, SinceWoken: never, NodeTimeout: 50 * ms}
	with := func(change func(*Facts)) Facts { f := base; change(&f); return f }
	for _, tc := range []struct {
		name      string
		f         Facts
		low, high time.Duration
	}{
		{"the policy's delay", base, 40 * ms, 40 * ms},
		{"a given policy's delay", with(func(f *Facts) { f.Paced = false }), 40 * ms, 40 * ms},
		{"subscribed: paced to the poll", with(func(f *Facts) { f.Subscribed = true }), SubscribedPoll, SubscribedPoll*3/2 - 1},
		{"subscribed, a given policy: its delay", with(func(f *Facts) { f.Subscribed, f.Paced = true, false }), 40 * ms, 40 * ms},
		{"subscribed, a longer delay kept", with(func(f *Facts) { f.Subscribed, f.Given = true, 2*SubscribedPoll }), 2 * SubscribedPoll, 2 * SubscribedPoll},
		{"subscribed, woken a moment ago: no poll", with(func(f *Facts) { f.Subscribed, f.SinceWoken = true, SubscribedPoll }), 40 * ms, 40 * ms},
		{"woken, still refused, no new holder: quick", with(func(f *Facts) { f.SinceWoken = ms }), WakeSpread, 5*WakeSpread - 1},
		{"woken, refused by a new holder: the delay", with(func(f *Facts) { f.SinceWoken, f.NewHolder = ms, true }), 40 * ms, 40 * ms},
		{"woken a node timeout ago: the delay", with(func(f *Facts) { f.SinceWoken = 50 * ms }), 40 * ms, 40 * ms},
		{"woken, a given policy shorter still", with(func(f *Facts) { f.SinceWoken, f.Paced, f.Given = ms, false, 0 }), 0, 0},
		{"fresh subscription: at once", with(func(f *Facts) { f.Subscribed, f.Fresh = true, true }), 0, 0},
		{"unreachable: the floor", with(func(f *Facts) { f.Unreachable = true }), UnreachablePoll, UnreachablePoll*3/2 - 1},
		{"unreachable, woken: the floor all the same", with(func(f *Facts) { f.Unreachable, f.SinceWoken = true, ms }), UnreachablePoll, UnreachablePoll*3/2 - 1},
		{"unreachable, fresh: the floor", with(func(f *Facts) { f.Unreachable, f.Fresh = true, true }), UnreachablePoll, UnreachablePoll*3/2 - 1},
		{"unreachable, a longer delay kept", with(func(f *Facts) { f.Unreachable, f.Given = true, time.Second }), time.Second, time.Second},
		{"unreachable, a given policy: as given", with(func(f *Facts) { f.Unreachable, f.Paced, f.SinceWoken = true, false, ms }), 40 * ms, 40 * ms},
		{"in line: a quarter of the patience at most", with(func(f *Facts) { f.InLine, f.Patience, f.Given = true, 100*ms, 300*ms }), 25 * ms, 25 * ms},
		{"in line, first: the wake spread", with(func(f *Facts) { f.InLine, f.First, f.Patience = true, true, time.Second }), WakeSpread, WakeSpread},
		{"in line, a given policy: its delay", with(func(f *Facts) { f.InLine, f.Paced, f.Patience, f.Given = true, false, 100*ms, 300*ms }), 300 * ms, 300 * ms},
		{"in line, unreachable: its own pace", with(func(f *Facts) { f.InLine, f.Unreachable, f.Patience = true, true, time.Second }), 40 * ms, 40 * ms},
		{"in line, subscribed: paced, then a quarter of the patience", with(func(f *Facts) { f.InLine, f.Subscribed, f.Patience = true, true, 4*time.Second }), SubscribedPoll, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Next(tc.f, low); got != tc.low {
				t.Errorf("at the low end: %v, want %v", got, tc.low)
			}
			if got := Next(tc.f, high); got != tc.high {
				t.Errorf("at the high end: %v, want %v", got, tc.high)
			}
		})
	}
}

// TestYield: the pause after a cut run doubles while this Client wins at
// once after it, under YieldMax; past it the listeners are taken for deaf
// for YieldDeaf, and a run is then cut once every YieldMax only, with a
// YieldProbe pause; a refusal (another process took the key, even in a
// probe) starts it again, heeding every listener.
func TestYield(t *testing.T) {
	now := time.Unix(1000, 0)
	var y Yield
	var pauses []time.Duration
	for y.Deaf.IsZero() {
		if !y.Cut(now) {
			t.Fatalf("a run at its limit not cut while heeding (%v)", pauses)
		}
		pauses = append(pauses, y.Pause(now))
		y = y.After(1, now)
	}
	last := pauses[len(pauses)-1]
	if pauses[0] != YieldFirst || len(pauses) != 10 || last != 512*YieldFirst || 2*last <= YieldMax {
		t.Fatalf("pauses %v: want YieldFirst doubling while within YieldMax", pauses)
	}
	if !y.Deaf.Equal(now.Add(YieldDeaf)) || y.Pause(now) != YieldProbe {
		t.Fatalf("past YieldMax: deaf until %v, pause %v; want YieldDeaf on, YieldProbe", y.Deaf, y.Pause(now))
	}
	// Deaf: one cut a YieldMax; a probe won at once changes nothing.
	if y.Cut(now.Add(YieldMax - 1)) {
		t.Fatal("cut again within YieldMax of the last cut while deaf")
	}
	probe := now.Add(YieldMax)
	if !y.Cut(probe) || y.Cut(probe.Add(YieldMax-1)) {
		t.Fatal("deaf: not cut once a YieldMax")
	}
	if got := y.After(1, probe); got.Deaf != y.Deaf || got.Pause(probe) != YieldProbe {
		t.Fatalf("a probe won at once: %+v; want still deaf", got)
	}
	// The listener took the key in the probe: heeded again.
	if got := y.After(2, probe); !got.Deaf.IsZero() || got.Pause(probe) != YieldFirst || !got.Cut(probe) {
		t.Fatalf("a probe refused: %+v; want heeding, from YieldFirst", got)
	}
	// The deaf window over: every run cut again.
	end := now.Add(YieldDeaf)
	if !y.Cut(end) || !y.Cut(end.Add(time.Millisecond)) || y.Pause(end) == YieldProbe {
		t.Fatal("after the deaf window: runs not cut, or still probing")
	}
	if got := (Yield{For: 64 * YieldFirst}).After(2, now); got.Pause(now) != YieldFirst {
		t.Fatalf("after a refusal: pause %v; want YieldFirst", got.Pause(now))
	}
}

// TestPatienceAndSplitPause: a fair waiter's patience is FairPatience or
// FairPatienceTimeouts base node timeouts, bounded; a designated client's
// waits double from its first round's time, 1 ms at least.
func TestPatienceAndSplitPause(t *testing.T) {
	for base, want := range map[time.Duration]time.Duration{
		0: FairPatience, 100 * time.Millisecond: FairPatience, time.Second: FairPatienceTimeouts * time.Second, 1 << 62: maxPatience,
	} {
		if got := Patience(base); got != want {
			t.Errorf("Patience(%v) = %v, want %v", base, got, want)
		}
	}
	for _, c := range []struct {
		first time.Duration
		round int
		want  time.Duration
	}{{0, 0, time.Millisecond}, {0, 2, 4 * time.Millisecond}, {5 * time.Millisecond, 0, 5 * time.Millisecond}, {5 * time.Millisecond, 1, 10 * time.Millisecond}} {
		if got := SplitPause(c.first, c.round); got != c.want {
			t.Errorf("SplitPause(%v, %d) = %v, want %v", c.first, c.round, got, c.want)
		}
	}
}
