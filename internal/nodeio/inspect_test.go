package nodeio

import (
	"math"
	"reflect"
	"testing"
	"time"
)

// TestInspection: inspect.lua's reply is decoded once into a Hold: each
// type's holds, a semaphore's members ended at the node's time left out
// and the longest-lived first, the readers' mark, a malformed reply an
// error.
func TestInspection(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name string
		raw  []any
		want *Hold
	}{
		{"free", []any{"none", int64(-2), int64(1000)}, &Hold{Type: "none"}},
		{"a plain lock", []any{"string", int64(500), int64(1000), "TOKEN meta"}, &Hold{Type: "string", TTL: 500 * ms, Values: []Value{{"TOKEN meta", 500 * ms}}}},
		{"a reentrant lock", []any{"hash", int64(800), int64(1000), "owner", "T1", "T2"}, &Hold{Type: "hash", TTL: 800 * ms, Owner: "owner", Values: []Value{{"T1", 800 * ms}, {"T2", 800 * ms}}}},
		{"a semaphore", []any{"zset", int64(900), int64(1000), "3", "A", "1200", "B", "1500", "C", "999"}, &Hold{Type: "zset", TTL: 900 * ms, Permits: 3, Values: []Value{{"B", 500 * ms}, {"A", 200 * ms}}}},
		{"readers", []any{"zset", int64(-1), int64(1000), "", "readers", math.Inf(1), "R", "3000"}, &Hold{Type: "zset", Readers: true, Values: []Value{{"R", 0}}}},
		{"not a lock", []any{"list", int64(100), int64(1000)}, &Hold{Type: "list", TTL: 100 * ms}},
	} {
		got, err := inspection(c.raw)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
	for _, raw := range [][]any{{"string", int64(1)}, {"zset", int64(1), int64(1)}} {
		if _, err := inspection(raw); err == nil {
			t.Errorf("%v: no error", raw)
		}
	}
}
