package nodeio

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// TestNextBatch: a pipeline takes at most one call per key, in each key's
// order, and calls on other keys go past a key many calls wait for; a
// write of a hold whose operation ended goes at once (it is not sent).
// A call that takes away what was ours also waits for an acquire on its
// keys that is out (in an overdue send that another sender went past). The batch used to be the queue's prefix up to the first
// repeated key: a call on another key behind a hundred calls on one key
// waited a hundred round trips.
func TestNextBatch(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	mk := func(ctx context.Context, holds bool, keys ...string) Call {
		return Call{Ctx: ctx, Op: Op{Keys: keys, Holds: holds}}
	}
	names := func(cs []Call) string {
		var out []string
		for _, c := range cs {
			out = append(out, strings.Join(c.Op.Keys, "+"))
		}
		return strings.Join(out, " ")
	}
	for _, tt := range []struct {
		name        string
		queue       []Call
		out         []string
		batch, rest string
	}{
		{"one", []Call{mk(live, true, "a")}, nil, "a", ""},
		{"distinct keys", []Call{mk(live, true, "a"), mk(live, false, "b"), mk(live, true, "c")}, nil, "a b c", ""},
		{"a hot key does not hold the others up", []Call{mk(live, true, "a"), mk(live, false, "a"), mk(live, true, "a"), mk(live, true, "b")}, nil, "a b", "a a"},
		{"a multi-key call waits for each of its keys", []Call{mk(live, true, "a"), mk(live, true, "b", "a"), mk(live, true, "b")}, nil, "a", "b+a b"},
		{"an ended hold goes now and holds nothing up", []Call{mk(ended, true, "a"), mk(live, true, "a"), mk(ended, true, "a"), mk(live, false, "b")}, nil, "a a a b", ""},
		{"an ended delete keeps its place", []Call{mk(live, true, "a"), mk(ended, false, "a")}, nil, "a", "a"},
		{"a delete waits for an acquire out on its key", []Call{mk(live, false, "a")}, []string{"a"}, "", "a"},
		{"a write does not", []Call{mk(live, true, "a")}, []string{"a"}, "a", ""},
		{"calls on keys out wait, the others go", []Call{mk(live, false, "a"), mk(live, true, "b"), mk(live, true, "c", "a")}, []string{"a"}, "b", "a c+a"},
		{"an ended hold goes even on a key out", []Call{mk(ended, true, "a")}, []string{"a"}, "a", ""},
	} {
		out := map[string]int{}
		for _, k := range tt.out {
			out[k]++
		}
		batch, rest := nextBatch(slices.Clone(tt.queue), nil, out)
		if got := names(batch); got != tt.batch {
			t.Errorf("%s: batch %q, want %q", tt.name, got, tt.batch)
		}
		if got := names(rest); got != tt.rest {
			t.Errorf("%s: rest %q, want %q", tt.name, got, tt.rest)
		}
	}
}
