package chaos

import (
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// register is the resource the locks protect, kept outside the lock nodes:
// one counter per key, read and written in two separate steps as a GET and
// a SET would be. Only mutual exclusion keeps an increment from being lost.
type register struct {
	mu     sync.Mutex
	v      map[string]int64
	fences map[string]uint64 // highest fencing token applied per key
}

func newRegister() *register { return &register{v: map[string]int64{}, fences: map[string]uint64{}} }

func (r *register) read(key string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.v[key]
}

func (r *register) write(key string, v int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.v[key] = v
}

// writeFenced writes v unless a write with a higher fencing token was
// applied to key before, the rule of redlock.FencedSet; it reports whether
// it wrote.
func (r *register) writeFenced(key string, v int64, token uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.fences[key] {
		return false
	}
	r.fences[key] = token
	r.v[key] = v
	return true
}

// section is one critical section as a worker saw it.
type section struct {
	Worker   int
	Key      string
	Acquired time.Time // Acquire returned
	Until    time.Time // the lock's validity ended
	Released time.Time // Release was called
	ReadAt   time.Time
	Read     int64
	Wrote    bool // false when the worker found its validity spent, or its write was refused
	WroteAt  time.Time
	Token    uint64 // the lock's fencing token; 0 when not fenced
	Refused  bool   // the register refused the write for a stale token
	Shared   bool   // a reader's or a semaphore permit's: may overlap other shared ones
	Ticket   uint64 // a fair lock's place in its queue; 0 for the other kinds
	Started  time.Time
	// A fair lock's: when the waiter was surely in the queue on a quorum
	// (the answers of a quorum of nodes to its acquire attempts had come
	// back), and the start of the earliest node call that granted it (its
	// winning attempt ran on the nodes after this). Zero when unknown.
	Queued, Won time.Time
}

// held returns the interval in which the worker was entitled to the lock:
// from the acquire to the release, cut at the end of the validity.
func (s section) held() (from, to time.Time) {
	to = s.Released
	if s.Until.Before(to) {
		to = s.Until
	}
	return s.Acquired, to
}

// verdict is what the checkers found in a history.
type verdict struct {
	Sections     int  `json:"sections"`          // critical sections completed
	Overlaps     int  `json:"overlaps"`          // pairs of sections on one key held at the same time within validity
	StaleWrites  int  `json:"stale_writes"`      // writes made after the writer's validity had ended
	LostUpdates  int  `json:"lost_updates"`      // increments that the register does not show
	Linearizable bool `json:"linearizable"`      // the register's history is linearizable (porcupine)
	Unknown      bool `json:"lin_unknown"`       // the linearizability check ran out of time
	Regressions  int  `json:"token_regressions"` // holders whose fencing token was not above every earlier holder's
	Refused      int  `json:"refused_writes"`    // stale writes the fenced register refused: not violations
	Excess       int  `json:"over_permits"`      // semaphore: acquisitions that made more than K holders at once
	OutOfOrder   int  `json:"out_of_order"`      // fair lock: grants before a waiter with a lower ticket that had queued
}

// Violations counts everything that breaks mutual exclusion or its purpose.
func (v verdict) Violations() int {
	n := v.Overlaps + v.StaleWrites + v.LostUpdates + v.Regressions + v.Excess + v.OutOfOrder
	if v.Sections > 0 && !v.Linearizable && !v.Unknown {
		n++
	}
	return n
}

// checkOptions say what else a history must satisfy.
type checkOptions struct {
	fenced  bool        // the locks were to carry fencing tokens
	permits int         // semaphore: at most this many holders at once (0: not a semaphore)
	fair    bool        // fair lock: waiters queued on a quorum are granted in ticket order
	resets  []time.Time // fair lock: when nodes came back empty or thawed (queues lost or lapsed)
}

// check runs every checker over the sections and the register's final
// values.
func check(sections []section, final map[string]int64, o checkOptions) verdict {
	fenced := o.fenced
	v := verdict{Sections: len(sections)}
	byKey := map[string][]section{}
	for _, s := range sections {
		byKey[s.Key] = append(byKey[s.Key], s)
		if s.Wrote && s.WroteAt.After(s.Until) {
			v.StaleWrites++
		}
		if s.Refused {
			v.Refused++
		}
	}
	for key, ss := range byKey {
		v.Overlaps += overlaps(ss)
		if o.permits > 0 {
			v.Excess += excess(ss, o.permits)
		}
		if o.fair {
			v.OutOfOrder += outOfOrder(ss, o.resets)
		}
		v.Regressions += regressions(ss, fenced)
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

// overlaps counts the pairs of sections whose held intervals intersect,
// but for two shared ones (readers, semaphore permits).
func overlaps(ss []section) int {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b section) int { return a.Acquired.Compare(b.Acquired) })
	n := 0
	for i := range ss {
		_, end := ss[i].held()
		for j := i + 1; j < len(ss) && ss[j].Acquired.Before(end); j++ {
			if !ss[i].Shared || !ss[j].Shared {
				n++
			}
		}
	}
	return n
}

// excess counts the acquisitions after which more than permits sections
// were held at once.
func excess(ss []section, permits int) int {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b section) int { return a.Acquired.Compare(b.Acquired) })
	n := 0
	for i := range ss {
		holding := 1
		for j := range i {
			if _, end := ss[j].held(); end.After(ss[i].Acquired) {
				holding++
			}
		}
		if holding > permits {
			n++
		}
	}
	return n
}

// outOfOrder counts the pairs in which a fair lock went to a waiter before
// one with a lower ticket that was already in the queue on a quorum when
// the other's winning attempt began. It decides on what the waiters saw,
// not on how long drawing a ticket may take, so a loaded machine does not
// make it cry wolf. A node that came back empty (or thawed, its waiters'
// places lapsed) in between excuses the pair: the queue it lost is not on
// a quorum any more.
func outOfOrder(ss []section, resets []time.Time) int {
	n := 0
	for _, a := range ss {
		if a.Ticket == 0 || a.Queued.IsZero() {
			continue
		}
		for _, b := range ss {
			if a.Ticket < b.Ticket && b.Acquired.Before(a.Acquired) && a.Queued.Before(b.Won) &&
				!slices.ContainsFunc(resets, func(r time.Time) bool { return !r.Before(a.Queued) && !r.After(b.Won) }) {
				n++
			}
		}
	}
	return n
}

// regressions counts the fenced sections whose token is not above the
// token of every section acquired before them, or, when fenced, missing.
func regressions(ss []section, fenced bool) int {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b section) int { return a.Acquired.Compare(b.Acquired) })
	n := 0
	var highest uint64
	for _, s := range ss {
		if s.Token == 0 {
			if fenced {
				n++
			}
			continue
		}
		if s.Token <= highest {
			n++
		}
		highest = max(highest, s.Token)
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

func linearizable(sections []section) porcupine.CheckResult {
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
