package chaos

import (
	"testing"
	"time"
)

// at returns a time t milliseconds after a fixed origin.
func at(ms int) time.Time {
	return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
}

// sec is a section on key "k" acquired at from, read at from+1, written at
// to-1 and released at to, valid until until.
func sec(worker, from, to, until int, read int64) Section {
	return Section{
		Worker: worker, Key: "k", Acquired: at(from), Until: at(until), Released: at(to),
		ReadAt: at(from + 1), Read: read, Wrote: true, WroteAt: at(to - 1),
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name     string
		sections []Section
		final    int64
		want     Verdict
	}{
		{
			name:     "one after another",
			sections: []Section{sec(0, 0, 10, 100, 0), sec(1, 10, 20, 110, 1), sec(0, 25, 30, 120, 2)},
			final:    3,
			want:     Verdict{Sections: 3, Linearizable: true},
		},
		{
			name:     "two holders at once, both read 0",
			sections: []Section{sec(0, 0, 10, 100, 0), sec(1, 5, 15, 100, 0)},
			final:    1,
			want:     Verdict{Sections: 2, Overlaps: 1, LostUpdates: 1},
		},
		{
			// The first holder's validity ended at 8; the second acquired at
			// 9: no overlap in valid holds, but the first wrote late.
			name:     "holder paused past its validity",
			sections: []Section{sec(0, 0, 20, 8, 0), sec(1, 9, 15, 100, 0)},
			final:    1,
			want:     Verdict{Sections: 2, StaleWrites: 1, LostUpdates: 1},
		},
		{
			name: "a section that found its validity spent and did not write",
			sections: []Section{
				{Worker: 0, Key: "k", Acquired: at(0), Until: at(5), Released: at(10), ReadAt: at(1), Read: 0},
				sec(1, 11, 20, 100, 0),
			},
			final: 1,
			want:  Verdict{Sections: 2, Linearizable: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := check(tt.sections, map[string]int64{"k": tt.final}, false)
			if got != tt.want {
				t.Fatalf("check = %+v, want %+v", got, tt.want)
			}
			if (got.Violations() == 0) != (tt.want == Verdict{Sections: len(tt.sections), Linearizable: true}) {
				t.Fatalf("Violations = %d for %+v", got.Violations(), got)
			}
		})
	}
}

func TestCheck_keysAreIndependent(t *testing.T) {
	a, b := sec(0, 0, 10, 100, 0), sec(1, 5, 15, 100, 0)
	b.Key = "other"
	got := check([]Section{a, b}, map[string]int64{"k": 1, "other": 1}, false)
	if got.Violations() != 0 {
		t.Fatalf("sections on different keys counted as violations: %+v", got)
	}
}

func TestCheck_tokens(t *testing.T) {
	a, b, c := sec(0, 0, 10, 100, 0), sec(1, 10, 20, 110, 1), sec(0, 20, 30, 120, 2)
	a.Token, b.Token, c.Token = 3, 5, 9
	if got := check([]Section{a, b, c}, map[string]int64{"k": 3}, true); got.Regressions != 0 || got.Violations() != 0 {
		t.Fatalf("increasing tokens: %+v", got)
	}
	c.Token = 5 // the same token as an earlier holder
	if got := check([]Section{a, b, c}, map[string]int64{"k": 3}, true); got.Regressions != 1 || got.Violations() != 1 {
		t.Fatalf("a repeated token: %+v, want 1 regression", got)
	}
	c.Token = 0 // no token where one was asked for
	if got := check([]Section{a, b, c}, map[string]int64{"k": 3}, true); got.Regressions != 1 {
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
