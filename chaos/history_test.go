package chaos

import (
	"slices"
	"testing"
	"time"
)

// at returns a time t milliseconds after a fixed origin.
func at(ms int) time.Time {
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
}

// sec is a section on key "k" acquired at from, read at from+1, written at
// to-1 and released at to, valid until until.
func sec(worker, from, to, until int, read int64) section {
	return section{
		Worker: worker, Key: "k", Acquired: at(from), Until: at(until), Released: at(to),
		ReadAt: at(from + 1), Read: read, Wrote: true, WroteAt: at(to - 1),
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name     string
		sections []section
		final    int64
		want     verdict
	}{
		{
			name:     "one after another",
			sections: []section{sec(0, 0, 10, 100, 0), sec(1, 10, 20, 110, 1), sec(0, 25, 30, 120, 2)},
			final:    3,
			want:     verdict{Sections: 3, Linearizable: true},
		},
		{
			name:     "two holders at once, both read 0",
			sections: []section{sec(0, 0, 10, 100, 0), sec(1, 5, 15, 100, 0)},
			final:    1,
			want:     verdict{Sections: 2, Overlaps: 1, LostUpdates: 1},
		},
		{
			// The first holder's validity ended at 8; the second acquired at
			// 9: no overlap in valid holds, but the first wrote late.
			name:     "holder paused past its validity",
			sections: []section{sec(0, 0, 20, 8, 0), sec(1, 9, 15, 100, 0)},
			final:    1,
			want:     verdict{Sections: 2, StaleWrites: 1, LostUpdates: 1},
		},
		{
			name: "a section that found its validity spent and did not write",
			sections: []section{
				{Worker: 0, Key: "k", Acquired: at(0), Until: at(5), Released: at(10), ReadAt: at(1), Read: 0},
				sec(1, 11, 20, 100, 0),
			},
			final: 1,
			want:  verdict{Sections: 2, Linearizable: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := check(tt.sections, map[string]int64{"k": tt.final}, checkOptions{})
			if got != tt.want {
				t.Fatalf("check = %+v, want %+v", got, tt.want)
			}
			if (got.Violations() == 0) != (tt.want == verdict{Sections: len(tt.sections), Linearizable: true}) {
				t.Fatalf("Violations = %d for %+v", got.Violations(), got)
			}
		})
	}
}

func TestCheck_keysAreIndependent(t *testing.T) {
	a, b := sec(0, 0, 10, 100, 0), sec(1, 5, 15, 100, 0)
	b.Key = "other"
	got := check([]section{a, b}, map[string]int64{"k": 1, "other": 1}, checkOptions{})
	if got.Violations() != 0 {
		t.Fatalf("sections on different keys counted as violations: %+v", got)
	}
}

func TestCheck_tokens(t *testing.T) {
	a, b, c := sec(0, 0, 10, 100, 0), sec(1, 10, 20, 110, 1), sec(0, 20, 30, 120, 2)
	a.Token, b.Token, c.Token = 3, 5, 9
	if got := check([]section{a, b, c}, map[string]int64{"k": 3}, checkOptions{fenced: true}); got.Regressions != 0 || got.Violations() != 0 {
		t.Fatalf("increasing tokens: %+v", got)
	}
	c.Token = 5 // the same token as an earlier holder
	if got := check([]section{a, b, c}, map[string]int64{"k": 3}, checkOptions{fenced: true}); got.Regressions != 1 || got.Violations() != 1 {
		t.Fatalf("a repeated token: %+v, want 1 regression", got)
	}
	c.Token = 0 // no token where one was asked for
	if got := check([]section{a, b, c}, map[string]int64{"k": 3}, checkOptions{fenced: true}); got.Regressions != 1 {
		t.Fatalf("a missing token: %+v, want 1 regression", got)
	}
}

func TestRegister_writeFenced(t *testing.T) {
	r := newRegister()
	for _, w := range []struct {
		token uint64
		ok    bool
	}{{2, true}, {5, true}, {4, false}, {5, true}, {6, true}} {
		if got := r.writeFenced("k", int64(w.token), w.token); got != w.ok {
			t.Fatalf("writeFenced(token %d) = %v, want %v", w.token, got, w.ok)
		}
	}
	if r.read("k") != 6 {
		t.Fatalf("register holds %d, want the last accepted write 6", r.read("k"))
	}
}

// shared returns a reader's or permit holder's section from..to (ms), which
// reads and does not write.
func shared(worker int, from, to int) section {
	s := sec(worker, from, to, 1000, 0)
	s.Shared, s.Wrote = true, false
	return s
}

func TestCheck_readersAndWriters(t *testing.T) {
	r1, r2 := shared(0, 0, 10), shared(1, 5, 15)
	if got := check([]section{r1, r2}, map[string]int64{"k": 0}, checkOptions{}); got.Violations() != 0 {
		t.Fatalf("two readers at once counted: %+v", got)
	}
	w := sec(2, 8, 20, 1000, 0) // a writer while both readers hold
	if got := check([]section{r1, r2, w}, map[string]int64{"k": 1}, checkOptions{}); got.Overlaps != 2 {
		t.Fatalf("a writer with two readers: %+v, want 2 overlaps", got)
	}
}

func TestCheck_permits(t *testing.T) {
	a, b, c := shared(0, 0, 10), shared(1, 2, 12), shared(2, 4, 14)
	if got := check([]section{a, b, c}, map[string]int64{}, checkOptions{permits: 3}); got.Violations() != 0 {
		t.Fatalf("3 holders of 3 permits: %+v", got)
	}
	if got := check([]section{a, b, c}, map[string]int64{}, checkOptions{permits: 2}); got.Excess != 1 || got.Violations() != 1 {
		t.Fatalf("3 holders of 2 permits: %+v, want 1 excess", got)
	}
	c = shared(2, 10, 20) // starts as a ends: 2 at once
	if got := check([]section{a, b, c}, map[string]int64{}, checkOptions{permits: 2}); got.Excess != 0 {
		t.Fatalf("a permit taken as another ends: %+v", got)
	}
}

func TestCheck_fairOrder(t *testing.T) {
	// read: the sections run one after another, in the order of from. A
	// waiter is in the queue on a quorum at queued; its winning attempt
	// starts 5 ms before it holds the lock.
	fair := func(worker int, ticket uint64, queued, from, to int) section {
		s := sec(worker, from, to, 1000, int64((from-100)/10))
		s.Ticket, s.Started, s.Queued, s.Won = ticket, at(queued-30), at(queued), at(from-5)
		return s
	}
	o := checkOptions{fair: true}
	// Tickets 1, 2, 3 queued at 0, 10, 20 and granted in that order.
	inOrder := []section{fair(0, 1, 0, 100, 110), fair(1, 2, 10, 110, 120), fair(2, 3, 20, 120, 130)}
	if got := check(inOrder, map[string]int64{"k": 3}, o); got.OutOfOrder != 0 {
		t.Fatalf("in order: %+v", got)
	}
	// Ticket 3 goes before ticket 2, which was in the queue.
	swapped := []section{fair(0, 1, 0, 100, 110), fair(1, 2, 10, 120, 130), fair(2, 3, 20, 110, 120)}
	if got := check(swapped, map[string]int64{"k": 3}, o); got.OutOfOrder != 1 || got.Violations() != 1 {
		t.Fatalf("ticket 3 before a queued ticket 2: %+v, want 1", got)
	}
	// Ticket 3 goes before ticket 2, which was not in the queue on a
	// quorum yet when 3's winning attempt began, however long ago it asked.
	late := []section{fair(0, 1, 0, 100, 110), fair(1, 2, 106, 120, 130), fair(2, 3, 20, 110, 120)}
	if got := check(late, map[string]int64{"k": 3}, o); got.OutOfOrder != 0 {
		t.Fatalf("ticket 2 not queued yet: %+v", got)
	}
	// Ticket 2's answers did not come from a quorum: no claim.
	unknown := slices.Clone(swapped)
	unknown[1].Queued = time.Time{}
	if got := check(unknown, map[string]int64{"k": 3}, o); got.OutOfOrder != 0 {
		t.Fatalf("ticket 2 never queued on a quorum: %+v", got)
	}
	// A node came back empty between ticket 2's queueing and 3's win.
	reset := checkOptions{fair: true, resets: []time.Time{at(50)}}
	if got := check(swapped, map[string]int64{"k": 3}, reset); got.OutOfOrder != 0 {
		t.Fatalf("a node lost its queue in between: %+v", got)
	}
}
