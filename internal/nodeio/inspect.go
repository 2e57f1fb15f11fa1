package nodeio

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// Hold is a node's answer to inspect.lua (Shape Inspection): what holds a
// lock key there.
type Hold struct {
	Type    string        // the key's Redis type: "none" when free
	TTL     time.Duration // the key's time to live (0 without one)
	Owner   string        // a hash's (a reentrant lock's) owner
	Permits int           // a sorted set's K: a semaphore's, 0 when none is kept
	Readers bool          // the sorted set is a read-write lock's readers
	// Values are the holds' stored values (a token, and the metadata
	// after a space) and how long each is left: the key's own TTL, or for
	// a sorted set its member's end at the node's time, if shorter (the
	// longest first; ended members are left out).
	Values []Value
}

// Value is one hold of a Hold.
type Value struct {
	Stored string
	TTL    time.Duration
}

// inspection decodes inspect.lua's {type, pttl, now, ...}.
func inspection(raw []any) (*Hold, error) {
	if len(raw) < 3 {
		return nil, fmt.Errorf("unexpected reply %v", raw)
	}
	h := &Hold{}
	h.Type, _ = raw[0].(string)
	pttl, _ := raw[1].(int64)
	now, _ := raw[2].(int64)
	h.TTL = time.Duration(max(pttl, 0)) * time.Millisecond
	rest := raw[3:]
	switch h.Type {
	case "string":
		h.Values = []Value{{"", h.TTL}}
		if len(rest) > 0 {
			h.Values[0].Stored = text(rest[0])
		}
	case "hash":
		if len(rest) > 0 {
			h.Owner = text(rest[0])
			for _, m := range rest[1:] {
				h.Values = append(h.Values, Value{text(m), h.TTL})
			}
		}
	case "zset":
		if len(rest) == 0 {
			return nil, fmt.Errorf("unexpected reply %v", raw)
		}
		h.setHolds(rest, now)
	}
	return h, nil
}

// setHolds reads a sorted set's part of the reply (rest): a semaphore's K,
// then each member and its end, keeping those live at the node's time now.
func (h *Hold) setHolds(rest []any, now int64) {
	h.Permits, _ = strconv.Atoi(text(rest[0]))
	for j := 1; j+1 < len(rest); j += 2 {
		end, _ := strconv.ParseFloat(fmt.Sprint(rest[j+1]), 64)
		if v := text(rest[j]); v == "readers" && math.IsInf(end, 1) {
			h.Readers, h.Permits = true, 0
		} else if left := time.Duration(end-float64(now)) * time.Millisecond; left > 0 {
			h.Values = append(h.Values, Value{v, min(left, h.TTL)})
		}
	}
	slices.SortFunc(h.Values, func(a, b Value) int { return cmp.Compare(b.TTL, a.TTL) })
}

// text is v when it is a string, else "".
func text(v any) string {
	s, _ := v.(string)
	return s
}
