package chaos

import (
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Register is the resource the locks protect, kept outside the lock nodes:
// one counter per key, read and written in two separate steps as a GET and
// a SET would be. Only mutual exclusion keeps an increment from being lost.
type Register struct {
	mu sync.Mutex
	v  map[string]int64
}

func newRegister() *Register { return &Register{v: map[string]int64{}} }

func (r *Register) read(key string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.v[key]
}

func (r *Register) write(key string, v int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.v[key] = v
}

// Section is one critical section as a worker saw it.
type Section struct {
	Worker   int
	Key      string
	Acquired time.Time // Acquire returned
	Until    time.Time // the lock's validity ended
	Released time.Time // Release was called
	ReadAt   time.Time
	Read     int64
	Wrote    bool // false when the worker found its validity spent and did not write
	WroteAt  time.Time
}

// held returns the interval in which the worker was entitled to the lock:
// from the acquire to the release, cut at the end of the validity.
func (s Section) held() (from, to time.Time) {
	to = s.Released
	if s.Until.Before(to) {
		to = s.Until
	}
	return s.Acquired, to
}

// Verdict is what the checkers found in a history.
type Verdict struct {
	Sections     int  `json:"sections"`     // critical sections completed
	Overlaps     int  `json:"overlaps"`     // pairs of sections on one key held at the same time within validity
	StaleWrites  int  `json:"stale_writes"` // writes made after the writer's validity had ended
	LostUpdates  int  `json:"lost_updates"` // increments that the register does not show
	Linearizable bool `json:"linearizable"` // the register's history is linearizable (porcupine)
	Unknown      bool `json:"lin_unknown"`  // the linearizability check ran out of time
}

// Violations counts everything that breaks mutual exclusion or its purpose.
func (v Verdict) Violations() int {
	n := v.Overlaps + v.StaleWrites + v.LostUpdates
	if v.Sections > 0 && !v.Linearizable && !v.Unknown {
		n++
	}
	return n
}

// check runs every checker over the sections and the register's final
// values.
func check(sections []Section, final map[string]int64) Verdict {
	v := Verdict{Sections: len(sections)}
	byKey := map[string][]Section{}
	for _, s := range sections {
		byKey[s.Key] = append(byKey[s.Key], s)
		if s.Wrote && s.WroteAt.After(s.Until) {
			v.StaleWrites++
		}
	}
	for key, ss := range byKey {
		v.Overlaps += overlaps(ss)
		writes := 0
		for _, s := range ss {
			if s.Wrote {
				writes++
			}
		}
		v.LostUpdates += writes - int(final[key])
	}
	switch linearizable(sections) {
	case porcupine.Ok:
		v.Linearizable = true
	case porcupine.Unknown:
		v.Unknown = true
	}
	return v
}

// overlaps counts the pairs of sections whose held intervals intersect.
func overlaps(ss []Section) int {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b Section) int { return a.Acquired.Compare(b.Acquired) })
	n := 0
	for i := range ss {
		_, end := ss[i].held()
		for j := i + 1; j < len(ss) && ss[j].Acquired.Before(end); j++ {
			n++
		}
	}
	return n
}

// increment is a critical section as an operation on the register: it read
// a value and, if it wrote, wrote that value plus one.
type increment struct {
	read  int64
	wrote bool
}

// registerModel is a register of counters, one per key, that only
// critical sections change. A history in which two sections read the same
// value and both wrote is not linearizable.
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(string)
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return int64(0) },
	Step: func(state, _, output any) (bool, any) {
		s, out := state.(int64), output.(increment)
		if out.read != s {
			return false, state
		}
		if out.wrote {
			return true, s + 1
		}
		return true, s
	},
}

func linearizable(sections []Section) porcupine.CheckResult {
	if len(sections) == 0 {
		return porcupine.Ok
	}
	base := sections[0].ReadAt
	ops := make([]porcupine.Operation, 0, len(sections))
	for _, s := range sections {
		ret := s.ReadAt.Add(time.Nanosecond)
		if s.Wrote {
			ret = s.WroteAt
		}
		ops = append(ops, porcupine.Operation{
			ClientId: s.Worker,
			Input:    s.Key,
			Call:     s.ReadAt.Sub(base).Nanoseconds(),
			Output:   increment{read: s.Read, wrote: s.Wrote},
			Return:   ret.Sub(base).Nanoseconds(),
		})
	}
	return porcupine.CheckOperationsTimeout(registerModel, ops, 30*time.Second)
}
