package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"
)

// at0 is the start of a made-up history; ms(n) after it is tms(n).
var at0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func tms(n int) time.Time { return at0.Add(time.Duration(n) * time.Millisecond) }

// mkHold is a hold of key taken at from and released at to (ms), valid
// until until.
func mkHold(kind, key string, from, to, until int) *hold {
	return &hold{
		st:     planStep{Kind: kind, Keys: []string{key}},
		called: tms(from - 1), acquired: tms(from), released: tms(to), until: tms(until),
	}
}

func fenced(h *hold, token uint64) *hold {
	h.st.Fenced, h.token = true, token
	return h
}

func checksOf(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Check)
	}
	return out
}

func TestHistory_exclusion(t *testing.T) {
	owner := func(h *hold, o string) *hold { h.st.Owner = o; return h }
	for _, tt := range []struct {
		name  string
		holds []*hold
		want  int
	}{
		{"one after the other", []*hold{mkHold(stepPlain, "a", 0, 10, 100), mkHold(stepPlain, "a", 10, 20, 100)}, 0},
		{"two plain at once", []*hold{mkHold(stepPlain, "a", 0, 10, 100), mkHold(stepPlain, "a", 5, 20, 100)}, 1},
		{"on other keys", []*hold{mkHold(stepPlain, "a", 0, 10, 100), mkHold(stepPlain, "b", 5, 20, 100)}, 0},
		{"cut at Until", []*hold{mkHold(stepPlain, "a", 0, 50, 10), mkHold(stepPlain, "a", 10, 20, 100)}, 0},
		{"two readers", []*hold{mkHold(stepRead, "a", 0, 10, 100), mkHold(stepRead, "a", 5, 20, 100)}, 0},
		{"a reader and a plain lock", []*hold{mkHold(stepRead, "a", 0, 10, 100), mkHold(stepPlain, "a", 5, 20, 100)}, 1},
		{"a reader and a writer", []*hold{mkHold(stepRead, "a", 0, 10, 100), mkHold(stepWrite, "a", 5, 20, 100)}, 1},
		{"a reader and a permit", []*hold{mkHold(stepRead, "a", 0, 10, 100), mkHold(stepSemaphore, "a", 5, 20, 100)}, 1},
		{"one owner twice", []*hold{owner(mkHold(stepReentrant, "a", 0, 10, 100), "o1"), owner(mkHold(stepReentrant, "a", 5, 20, 100), "o1")}, 0},
		{"two owners", []*hold{owner(mkHold(stepReentrant, "a", 0, 10, 100), "o1"), owner(mkHold(stepReentrant, "a", 5, 20, 100), "o2")}, 1},
		{"K permits", []*hold{mkHold(stepSemaphore, "a", 0, 10, 100), mkHold(stepSemaphore, "a", 5, 20, 100)}, 0},
		{"K+1 permits", []*hold{mkHold(stepSemaphore, "a", 0, 10, 100), mkHold(stepSemaphore, "a", 5, 20, 100), mkHold(stepSemaphore, "a", 6, 20, 100)}, 1},
		{"a multi-key lock and a plain one", []*hold{{st: planStep{Kind: stepMulti, Keys: []string{"a", "b"}}, acquired: tms(0), released: tms(10), until: tms(100)},
			mkHold(stepPlain, "b", 5, 20, 100)}, 1},
	} {
		h := &history{start: at0, holds: tt.holds}
		if got := h.exclusion(); len(got) != tt.want {
			t.Errorf("%s: %d violations %v, want %d", tt.name, len(got), got, tt.want)
		}
	}
	lost := mkHold(stepPlain, "a", 0, 50, 100)
	lost.lost = tms(10) // Done closed: the holder stopped
	h := &history{start: at0, holds: []*hold{lost, mkHold(stepPlain, "a", 20, 30, 100)}}
	if got := h.exclusion(); len(got) != 0 {
		t.Errorf("a hold after the other's loss: %v", got)
	}
}

func TestHistory_fencing(t *testing.T) {
	for _, tt := range []struct {
		name  string
		holds []*hold
		want  []string
	}{
		{"rising", []*hold{fenced(mkHold(stepPlain, "a", 0, 10, 100), 1), fenced(mkHold(stepPlain, "a", 20, 30, 100), 2)}, nil},
		{"falling", []*hold{fenced(mkHold(stepPlain, "a", 0, 10, 100), 6), fenced(mkHold(stepPlain, "a", 20, 30, 100), 2)}, []string{checkFencing}},
		{"equal", []*hold{fenced(mkHold(stepPlain, "a", 0, 10, 100), 2), fenced(mkHold(stepPlain, "a", 20, 30, 100), 2)}, []string{checkFencing}},
		{"across kinds", []*hold{fenced(mkHold(stepMulti, "a", 0, 10, 100), 6), fenced(mkHold(stepRead, "a", 20, 30, 100), 3)}, []string{checkFencing}},
		// readers called before the other returned may get tokens in any order
		{"concurrent readers", []*hold{fenced(mkHold(stepRead, "a", 0, 10, 100), 6), fenced(mkHold(stepRead, "a", 1, 30, 100), 5)}, nil},
		{"unfenced", []*hold{mkHold(stepPlain, "a", 0, 10, 100), mkHold(stepPlain, "a", 20, 30, 100)}, nil},
	} {
		h := &history{start: at0, holds: tt.holds, schedule: Schedule{Nodes: 3}}
		if got := checksOf(h.fencing()); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, h.fencing(), tt.want)
		}
	}

	// a stale write accepted after a later holder's
	a, b := fenced(mkHold(stepPlain, "a", 0, 10, 100), 6), fenced(mkHold(stepPlain, "a", 20, 30, 100), 2)
	a.writes = []write{{key: "a", at: tms(40), accepted: true, stale: true}}
	b.writes = []write{{key: "a", at: tms(25), accepted: true}}
	h := &history{start: at0, holds: []*hold{a, b}, schedule: Schedule{Nodes: 3}}
	if got := checksOf(h.fencing()); !reflect.DeepEqual(got, []string{checkFencing, checkStale}) {
		t.Errorf("a stale write accepted: %v", h.fencing())
	}
	a.writes[0].accepted = false
	if got := checksOf(h.fencing()); !reflect.DeepEqual(got, []string{checkFencing}) {
		t.Errorf("a stale write refused: %v", h.fencing())
	}

	// A node lost its data between the two, and the nodes left with a's
	// token were no longer a majority: the guarantee does not cover them.
	h.losses = []dataLoss{{at: tms(15), counters: map[string][]int64{"a": {6, 1}}}}
	if got := h.fencing(); len(got) != 0 {
		t.Errorf("a pair the guarantee does not cover: %v", got)
	}
	h.losses[0].counters["a"] = []int64{6, 7}
	if got := h.fencing(); len(got) == 0 {
		t.Error("a pair the guarantee covers passed")
	}
}

func TestHistory_signals(t *testing.T) {
	x := mkHold(stepPlain, "a", 0, 50, 100)
	h := &history{start: at0, holds: []*hold{x}}
	if got := h.signals(); len(got) != 0 {
		t.Fatalf("nothing to say: %v", got)
	}
	x.lost, x.lostTill = tms(90), tms(100)
	if got := h.signals(); len(got) != 0 {
		t.Fatalf("a loss before Until: %v", got)
	}
	x.lost = tms(100)
	if got := checksOf(h.signals()); !reflect.DeepEqual(got, []string{checkSignal}) {
		t.Fatalf("a loss at Until: %v", got)
	}
	x.lost = time.Time{}
	x.unsignalled = []time.Time{tms(130)}
	if got := checksOf(h.signals()); !reflect.DeepEqual(got, []string{checkSignal}) {
		t.Fatalf("held past Until: %v", got)
	}

	// The process stalled from 80 to 115: a signal 20 late is its doing,
	// one 40 late is not, nor one next to a stall long before.
	h.stalls = &stallWatch{spans: [][2]time.Time{{tms(80), tms(115)}}}
	x.unsignalled = []time.Time{tms(120)}
	if got := h.signals(); len(got) != 0 || h.stalled != 1 {
		t.Fatalf("a stall of 35 explains a signal 20 late: %v, stalled %d", got, h.stalled)
	}
	x.unsignalled = []time.Time{tms(140)}
	if got := checksOf(h.signals()); !reflect.DeepEqual(got, []string{checkSignal}) {
		t.Fatalf("a stall of 35 explains no signal 40 late: %v", got)
	}
	h.stalls = &stallWatch{spans: [][2]time.Time{{tms(-200), tms(-100)}}}
	x.unsignalled = []time.Time{tms(101)}
	if got := checksOf(h.signals()); !reflect.DeepEqual(got, []string{checkSignal}) {
		t.Fatalf("a stall long before Until explains nothing: %v", got)
	}
}

func TestStallWatch(t *testing.T) {
	w := watchStalls()
	defer w.close()
	w.armed.Wait() // on a loaded machine the watchers may not have run yet
	from := time.Now()
	// Stop the world: every goroutine, the watcher's too, stops for it.
	if err := stopTheWorld(60 * time.Millisecond); err != nil {
		t.Fatalf("could not stop the process: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for w.within(from, time.Now()) < 40*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("a 60 ms stop not seen: %v", w.within(from, time.Now()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.close()
	w.close() // again: nothing
	var none *stallWatch
	if none.within(from, time.Now()) != 0 || none.explains(from, time.Now()) {
		t.Fatal("a nil watcher saw a stall")
	}
}

func TestHistory_leftovers(t *testing.T) {
	h := &history{maxTTL: 500 * time.Millisecond, left: []keyLeft{
		{0, "{a}:fence", 450 * time.Millisecond},
		{0, "{t}:c::fence", 600 * time.Millisecond},
		{0, "{a}:tickets", 500 * time.Millisecond},
		{0, "{d}:fence", 23 * time.Hour}, // a counter kept as long as before
		{0, "a", 400 * time.Millisecond},
		{1, "{a}:queue", 7 * time.Second},
		{1, "{a}:line", 2900 * time.Millisecond},
		{1, "{a}:line-woken", 2900 * time.Millisecond}, // as long as its line
		{1, "b", -1},
		{2, "{b}:grants", time.Minute},
		{2, "{c}:fence", -1},
	}}
	got := h.leftovers()
	if len(got) != 4 || !strings.Contains(got[0].Detail, `"{d}:fence" has 23h0m0s left`) || !strings.Contains(got[1].Detail, `"b" has no time to live`) || !strings.Contains(got[2].Detail, `"{b}:grants" has 1m0s left`) || !strings.Contains(got[3].Detail, `"{c}:fence" has no time to live`) {
		t.Fatalf("leftovers: %v", got)
	}
}

func TestHistory_harness(t *testing.T) {
	h := &history{errs: []error{errors.New("boom")}}
	if got := checksOf(h.check()); !reflect.DeepEqual(got, []string{checkHarness}) {
		t.Fatalf("%v", got)
	}
}

func TestGenerate(t *testing.T) {
	for seed := range uint64(300) {
		s := generate(seed, true)
		if !reflect.DeepEqual(s, generate(seed, true)) {
			t.Fatalf("seed %d: two draws differ", seed)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ReadSchedule(b)
		if err != nil || !reflect.DeepEqual(back, s) {
			t.Fatalf("seed %d: the JSON form reads back as %+v (%v)", seed, back, err)
		}
		if len(s.Clients) > maxExploreClients || s.Nodes > maxExploreNodes {
			t.Fatalf("seed %d: %d clients, %d nodes", seed, len(s.Clients), s.Nodes)
		}
		// Within the safety assumptions: at every moment, at most a minority
		// of the nodes is down for every client; a node loses its data only
		// for longer than any ttl.
		for _, f := range s.Faults {
			if f.Kind == "kill" && !s.Persist && time.Duration(f.For) <= s.maxTTL() {
				t.Fatalf("seed %d: %s restarts empty before the largest ttl %v", seed, f, s.maxTTL())
			}
			if f.Anchor != nil {
				continue // its moment is not known; it counts at every other one
			}
			down := map[int]bool{}
			for _, g := range s.Faults {
				// an anchored fault may strike at any moment
				if g.down() && (g.Anchor != nil || g.At <= f.At && f.At < g.At+g.For) {
					for _, n := range g.Nodes {
						down[n] = true
					}
				}
			}
			if len(down) > s.tolerated() {
				t.Fatalf("seed %d: %d nodes down at %v:\n%s", seed, len(down), f.At, s)
			}
		}
		for _, c := range s.Clients {
			for _, steps := range c.Actors {
				for _, st := range steps {
					for _, a := range st.Actions {
						if a.Op == "pause" && (!st.Fenced || st.Renew) {
							t.Fatalf("seed %d: a pause in %s: only a fenced lock that nothing renews may write late", seed, st)
						}
					}
				}
			}
		}
	}
	if !strings.Contains(generate(7, true).String(), "client 0") {
		t.Fatal("the printed schedule names no client")
	}
}

// stopTheWorld has the process stopped (SIGSTOP) for d, and continued.
func stopTheWorld(d time.Duration) error {
	pid := os.Getpid()
	out, err := exec.Command("sh", "-c", fmt.Sprintf("kill -STOP %d && sleep %.3f; kill -CONT %d", pid, d.Seconds(), pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

func TestStallWatch_overlapsCountOnce(t *testing.T) {
	w := &stallWatch{spans: [][2]time.Time{{tms(10), tms(30)}, {tms(20), tms(40)}, {tms(15), tms(25)}, {tms(50), tms(60)}}}
	if got := w.within(tms(0), tms(100)); got != 40*time.Millisecond {
		t.Fatalf("within = %v, want 40ms: 10 to 40 and 50 to 60", got)
	}
	if got := w.within(tms(35), tms(55)); got != 10*time.Millisecond {
		t.Fatalf("within = %v, want 10ms: 35 to 40 and 50 to 55", got)
	}
}

// TestGenerate_shapes: the shapes that try progress are drawn about as
// often as their weights say, read back from their JSON (extreme values
// too), and set what the liveness check needs to judge them.
func TestGenerate_shapes(t *testing.T) {
	seen := map[string]int{}
	const draws = 3000
	for seed := range uint64(draws) {
		s := generate(seed, true)
		seen[s.Shape]++
		if s.Shape == "" {
			if !reflect.DeepEqual(s, genMix(seed, true)) {
				t.Fatalf("seed %d: the general mix is not drawn as before the shapes", seed)
			}
			continue
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := ReadSchedule(b); err != nil || !reflect.DeepEqual(back, s) {
			t.Fatalf("seed %d: the JSON form reads back as %+v (%v)\n%s", seed, back, err, b)
		}
		if len(s.Clients) > maxExploreClients || s.Nodes > maxExploreNodes || s.exclusive() != (s.Shape == shapeStarve) {
			t.Fatalf("seed %d: %d clients, %d nodes, alone %v:\n%s", seed, len(s.Clients), s.Nodes, s.exclusive(), s)
		}
		var steps []planStep
		for _, c := range s.Clients {
			for _, a := range c.Actors {
				steps = append(steps, a...)
			}
		}
		switch s.Shape {
		case shapeSlow:
			// every node slower than the derived timeout, well inside the ttl
			// (a lone node: a round trip within the timeout, but not a
			// handshake of three), and every step waits long enough to be
			// judged
			f := s.Faults[0]
			rtt := 2 * time.Duration(f.Latency+f.Jitter)
			for _, st := range steps {
				ttl := time.Duration(st.TTL)
				// a call slower than the node timeout, or a new connection's
				// handshake (three round trips; a lone node's Clients end it
				// at the deadline)
				slower := 2*time.Duration(f.Latency) > derivedTimeout(ttl) || 6*time.Duration(f.Latency) > derivedTimeout(ttl) && rtt < derivedTimeout(ttl)*3/4
				if s.Nodes == 1 {
					slower = slower && s.Clients[0].ContextTimeout
				}
				if f.Kind != "slow" || !f.Whole || len(f.Nodes) != s.Nodes || len(f.Clients) > 0 || !slower || rtt > ttl/4 ||
					time.Duration(st.Wait) <= liveBound(derivedTimeout(ttl), rtt, true, exploreRetryMax) {
					t.Fatalf("seed %d: %s with %s", seed, st, f)
				}
			}
		case shapeStarve:
			f := s.Faults[0]
			for _, st := range steps {
				if ttl := time.Duration(st.TTL); time.Duration(f.Busy)*starveRTT > ttl/4 || time.Duration(st.Wait) <= liveBound(derivedTimeout(ttl), time.Duration(f.Busy)*starveRTT, false, exploreRetryMax) {
					t.Fatalf("seed %d: %s with %s", seed, st, f)
				}
			}
		case shapeTiny:
			tiny, probes := 0, 0
			for _, st := range steps {
				switch {
				case st.Wait >= jsonDur(100*time.Microsecond) && st.Wait <= jsonDur(2*time.Millisecond) && st.Keys[0] == "a":
					tiny++
				case st.Call == "try" && st.Wait == 0 && st.Keys[0] != "a" && derivedTimeout(time.Duration(st.TTL)) >= tryMinTimeout:
					probes++
				}
			}
			if tiny == 0 || probes == 0 || tiny+probes != len(steps) {
				t.Fatalf("seed %d: %d tiny callers, %d probes:\n%s", seed, tiny, probes, s)
			}
		case shapeChurn:
			remote := s.Clients[1].Actors[0][0]
			if !s.Clients[0].HandOff || len(s.Clients[0].Actors) < 3 || s.Faults[0].Clients[0] != 1 ||
				time.Duration(remote.At)+liveBound(derivedTimeout(time.Duration(remote.TTL)), 4*time.Millisecond, false, defaultRetryMax)+handOffGrace >= time.Duration(s.Clients[0].Actors[0][0].Repeat) {
				t.Fatalf("seed %d: the churn does not outlast the remote waiter's bound:\n%s", seed, s)
			}
		case shapeExtreme:
			extreme := false
			for _, c := range s.Clients {
				extreme = extreme || c.extreme()
				for _, a := range c.Actors {
					for _, st := range a {
						extreme = extreme || st.extreme()
					}
				}
			}
			if !extreme && s.Clients[0].Retry == nil {
				t.Fatalf("seed %d: no extreme value:\n%s", seed, s)
			}
		case shapeElect:
			if len(s.Clients) < 2 {
				t.Fatalf("seed %d: fewer than 2 candidates' Clients:\n%s", seed, s)
			}
			for _, c := range s.Clients {
				for _, a := range c.Actors {
					for _, st := range a {
						if st.Call != "campaign" || !st.Fenced || !st.Renew || st.Repeat == 0 || st.Keys[0] != "a" {
							t.Fatalf("seed %d: a step that is not a repeated campaign for \"a\":\n%s", seed, s)
						}
					}
				}
			}
		default:
			t.Fatalf("seed %d: shape %q", seed, s.Shape)
		}
	}
	for i, name := range shapeNames {
		if got, want := seen[name], draws*shapeWeights[i]/100; got < want/2 || got > want*2 {
			t.Errorf("shape %q drawn %d times in %d, want about %d", shapeName(name), got, draws, want)
		}
	}
}
