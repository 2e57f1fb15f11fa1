package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// A Schedule is one run of the explorer (see Explore): lock clients, what
// each of their goroutines does, over a few keys, and the faults injected
// meanwhile. Generate draws one from a seed; its JSON form runs again with
// Replay.
type Schedule struct {
	Seed uint64 `json:"seed"`
	// Shape is what the schedule was drawn to try (see generate): empty for
	// the general mix, else one of the shapes that put progress under test.
	Shape   string       `json:"shape,omitempty"`
	Nodes   int          `json:"nodes"`   // N
	Persist bool         `json:"persist"` // a killed node comes back at once with its data (appendfsync always); else it stays down longer than the largest TTL and comes back empty
	Clients []clientPlan `json:"clients"`
	Faults  []planFault  `json:"faults,omitempty"`
}

// clientPlan is one redlock.Client, with connections of its own, and its
// goroutines (actors), each running its steps in order.
type clientPlan struct {
	Batching bool         `json:"batching"`
	HandOff  bool         `json:"hand_off"` // WithHandOff's default; false: WithHandOff(0)
	Actors   [][]planStep `json:"actors"`
	// Options other than the explorer's defaults, most of them extreme
	// values (see genExtreme); zero: not given.
	NodeTimeout  jsonDur    `json:"node_timeout,omitempty"`  // WithNodeTimeout
	FenceHorizon jsonDur    `json:"fence_horizon,omitempty"` // WithFenceHorizon
	Retry        *planRetry `json:"retry,omitempty"`         // WithRetry; nil: ExponentialBackoff(2ms, 40ms)
	MaxAttempts  int        `json:"max_attempts,omitempty"`  // WithMaxAttempts
	// ContextTimeout has go-redis end each call at its context's deadline
	// (ContextTimeoutEnabled), as docs/benchmarks.md suggests for a lone
	// node.
	ContextTimeout bool `json:"context_timeout,omitempty"`
}

// planRetry is a retry policy: ExponentialBackoff(Min, Max),
// RandomDelay(Min, Max), or the library's default (no WithRetry).
type planRetry struct {
	Policy string  `json:"policy"` // exponential, random or default
	Min    jsonDur `json:"min,omitempty"`
	Max    jsonDur `json:"max,omitempty"`
}

// planStep is one lock taken, used and given up by an actor.
type planStep struct {
	At      jsonDur      `json:"at"`   // starts no earlier than this after the schedule's start
	Call    string       `json:"call"` // acquire, try (TryAcquire), do (Client.Do) or campaign (Election.Campaign)
	Kind    string       `json:"kind"` // plain, reentrant, read, write, semaphore, multi, fair
	Keys    []string     `json:"keys"`
	Owner   string       `json:"owner,omitempty"` // reentrant
	Fenced  bool         `json:"fenced,omitempty"`
	Renew   bool         `json:"renew,omitempty"` // WithAutoRenew (always, with do)
	TTL     jsonDur      `json:"ttl"`
	Wait    jsonDur      `json:"wait,omitempty"` // how long an acquire may wait (acquire, do)
	Actions []planAction `json:"actions,omitempty"`
	Keep    bool         `json:"keep,omitempty"` // not released: left to expire
	// Permits is a semaphore's K (0: explorePermits).
	Permits int `json:"permits,omitempty"`
	// Repeat runs the step again and again (acquire, actions, release), Gap
	// apart, until Repeat has passed since its first run began; each run
	// is a hold of its own in the history. Zero: once.
	Repeat jsonDur `json:"repeat,omitempty"`
	Gap    jsonDur `json:"gap,omitempty"`
}

// planAction is what a holder does with its lock.
type planAction struct {
	Op string  `json:"op"`          // work (sleeps D), extend (to D), write (reads the key's register and writes it one higher), pause (sleeps past the validity, then writes: a fenced holder's stale write), resume (Client.Resume of the lock's own token with ttl D; the holder goes on with the resumed lock)
	D  jsonDur `json:"d,omitempty"` // work and extend
}

// planFault is a fault injected into some nodes for a while.
type planFault struct {
	At    jsonDur `json:"at"`
	For   jsonDur `json:"for"`
	Kind  string  `json:"kind"` // slow, freeze, partition, kill, script-flush, starve
	Nodes []int   `json:"nodes,omitempty"`
	// Clients are the clients whose links to the nodes a slow or partition
	// fault strikes (their own network); none: every client's (the nodes').
	Clients []int `json:"clients,omitempty"`
	// Anchor, when set, strikes the fault when an actor is about to take
	// an action, instead of At after the start; the actor goes on once the
	// fault is in place.
	Anchor  *faultAnchor `json:"anchor,omitempty"`
	Latency jsonDur      `json:"latency,omitempty"` // slow: each way
	Jitter  jsonDur      `json:"jitter,omitempty"`
	// Whole, instead of For, keeps the fault in place until every actor is
	// done (a network slow for the whole run).
	Whole bool `json:"whole,omitempty"`
	// Busy is, for starve, how many goroutines spin while the explorer's
	// process runs on one processor (GOMAXPROCS 1); Nodes is empty: the
	// process's CPU is starved, not a node's.
	Busy int `json:"busy,omitempty"`
}

// faultAnchor is a point in an actor's steps: before the Action-th action of
// its Step-th step, or before its acquire when Action is -1.
type faultAnchor struct {
	Client int `json:"client"`
	Actor  int `json:"actor"`
	Step   int `json:"step"`
	Action int `json:"action"`
}

// jsonDur is a time.Duration written as "250ms" in JSON.
type jsonDur time.Duration

func (d jsonDur) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string.
func (d jsonDur) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string.
func (d *jsonDur) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = jsonDur(v)
	return err
}

func ms(n int) jsonDur { return jsonDur(time.Duration(n) * time.Millisecond) }

// The keys the explorer locks: few, so that holders meet; one with a hash
// tag, so that the companion keys' naming is under test too.
var exploreKeys = []string{"a", "b", "{t}:c"}

// keyWeights make some keys busier than others, so that holders meet.
var keyWeights = []int{3, 2, 1}

// Lock kinds a step may take; shared kinds hold a key together.
const (
	stepPlain     = "plain"
	stepReentrant = "reentrant"
	stepRead      = "read"
	stepWrite     = "write"
	stepSemaphore = "semaphore"
	stepMulti     = "multi"
	stepFair      = "fair"
)

// explorePermits is the K of the semaphores the explorer takes, but for
// the extreme values (planStep.Permits).
const explorePermits = 2

// permits is the K of st's semaphore.
func (st planStep) permits() int {
	if st.Permits > 0 {
		return st.Permits
	}
	return explorePermits
}

// pick draws from choices with weights.
func pick[T any](rng *rand.Rand, choices []T, weights []int) T {
	total := 0
	for _, w := range weights {
		total += w
	}
	n := rng.IntN(total)
	for i, w := range weights {
		if n < w {
			return choices[i]
		}
		n -= w
	}
	return choices[len(choices)-1]
}

// generate draws the schedule of seed. persist says whether the nodes can
// persist every write (redis-server can; the embedded server cannot).
// Most schedules are of the general mix (genMix); the others are of a
// shape that puts progress to the test (see shapes). The shape is drawn
// from a stream of its own, so that a seed whose schedule is of the
// general mix draws the same schedule as before the shapes were added.
func generate(seed uint64, persist bool) Schedule {
	shape := pick(rand.New(rand.NewPCG(seed, 0x5a9e)), shapeNames, shapeWeights)
	if shape == "" {
		return genMix(seed, persist)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5a9f))
	s := shapes[shape](rng, persist)
	s.Seed, s.Shape = seed, shape
	return s
}

// genMix draws a schedule of the general mix: locks of every kind, and the
// faults within the safety assumptions.
func genMix(seed uint64, persist bool) Schedule {
	rng := rand.New(rand.NewPCG(seed, 0xe4b1))
	s := Schedule{Seed: seed, Nodes: pick(rng, []int{3, 5}, []int{3, 1})}
	s.Persist = persist && rng.IntN(2) == 0
	for range 2 + rng.IntN(3) {
		c := clientPlan{Batching: rng.IntN(4) != 0, HandOff: rng.IntN(4) != 0}
		for range 1 + rng.IntN(2) {
			var steps []planStep
			at := rng.IntN(150)
			for range 1 + rng.IntN(3) {
				steps = append(steps, genStep(rng, ms(at)))
				at += rng.IntN(250)
			}
			c.Actors = append(c.Actors, steps)
		}
		s.Clients = append(s.Clients, c)
	}
	s.Faults = genFaults(rng, s)
	return s
}

func genStep(rng *rand.Rand, at jsonDur) planStep {
	st := planStep{
		At:     at,
		Kind:   pick(rng, []string{stepPlain, stepMulti, stepRead, stepWrite, stepReentrant, stepSemaphore, stepFair}, []int{4, 2, 2, 2, 2, 2, 2}),
		Call:   pick(rng, []string{"acquire", "try", "do"}, []int{2, 1, 1}),
		Fenced: rng.IntN(2) == 0,
		TTL:    pick(rng, []jsonDur{ms(250), ms(500), ms(1000)}, []int{2, 2, 1}),
	}
	if st.Kind == stepMulti {
		first := pick(rng, []int{0, 1, 2}, keyWeights)
		second := (first + 1 + rng.IntN(len(exploreKeys)-1)) % len(exploreKeys)
		st.Keys = []string{exploreKeys[first], exploreKeys[second]}
		if st.Call == "do" { // Do takes one key
			st.Call = "acquire"
		}
	} else {
		st.Keys = []string{pick(rng, exploreKeys, keyWeights)}
	}
	if st.Kind == stepReentrant {
		st.Owner = pick(rng, []string{"o1", "o2"}, []int{1, 1})
	}
	st.Renew = st.Call == "do" || rng.IntN(10) < 3
	if st.Call != "try" {
		st.Wait = pick(rng, []jsonDur{ms(100), ms(300), ms(800)}, []int{1, 2, 2})
	}
	exclusive := st.Kind != stepRead && st.Kind != stepSemaphore
	for range 1 + rng.IntN(4) {
		a := planAction{Op: pick(rng, []string{"work", "extend", "write", "pause"}, []int{8, 5, 6, 1})}
		switch a.Op {
		case "work": // short, or a good part of the ttl
			a.D = ms(5 + rng.IntN(100))
			if rng.IntN(2) == 0 {
				a.D = jsonDur(time.Duration(st.TTL) * time.Duration(20+rng.IntN(70)) / 100)
			}
		case "extend":
			// longer or shorter than the ttl
			a.D = jsonDur(time.Duration(st.TTL) * time.Duration(10+rng.IntN(190)) / 100)
		case "write":
			if !exclusive {
				a = planAction{Op: "work", D: ms(5 + rng.IntN(50))}
			}
		case "pause":
			// a holder paused past its validity writes late: only with a
			// fenced, exclusive lock that nothing renews is that within the
			// safety assumptions
			if !st.Fenced || st.Renew || !exclusive {
				a = planAction{Op: "work", D: ms(5 + rng.IntN(50))}
			}
		}
		st.Actions = append(st.Actions, a)
		if a.Op == "extend" && rng.IntN(4) > 0 {
			// a holder extends because it has more to do
			st.Actions = append(st.Actions, planAction{Op: "work", D: jsonDur(time.Duration(st.TTL) * time.Duration(20+rng.IntN(70)) / 100)})
		}
	}
	st.Keep = !st.Renew && st.Call != "do" && rng.IntN(10) == 0
	return st
}

// anchorAction picks where in st a fault strikes: most often before an
// extend or the acquire, where a slow or cut-off network decides whether
// calls land late; else before any action (-1: the acquire).
func anchorAction(rng *rand.Rand, st planStep) int {
	var extends []int
	for i, a := range st.Actions {
		if a.Op == "extend" {
			extends = append(extends, i)
		}
	}
	switch n := rng.IntN(4); {
	case n < 2 && len(extends) > 0:
		return extends[rng.IntN(len(extends))]
	case n == 2:
		return -1
	}
	return rng.IntN(len(st.Actions)+1) - 1
}

// maxTTL is the longest time to live a lock of s may set: a node that
// loses its data stays down longer than that.
func (s Schedule) maxTTL() time.Duration {
	var m time.Duration
	for _, c := range s.Clients {
		for _, steps := range c.Actors {
			for _, st := range steps {
				m = max(m, st.maxTTL())
			}
		}
	}
	return m
}

// maxTTL is the longest time to live st may set: its ttl, or that of an
// extend or a resume.
func (st planStep) maxTTL() time.Duration {
	m := time.Duration(st.TTL)
	for _, a := range st.Actions {
		if a.Op == "extend" || a.Op == "resume" {
			m = max(m, time.Duration(a.D))
		}
	}
	return m
}

// maxHorizon is the longest fence horizon a Client of s is given.
func (s Schedule) maxHorizon() time.Duration {
	var m time.Duration
	for _, c := range s.Clients {
		m = max(m, time.Duration(c.FenceHorizon))
	}
	return m
}

// exclusive tells whether s must run alone: a starved CPU starves the
// whole explorer process, every lane's locks and links with it.
func (s Schedule) exclusive() bool {
	return slices.ContainsFunc(s.Faults, func(f planFault) bool { return f.Kind == "starve" })
}

// tolerated is how many nodes may be down at once within the safety
// assumptions: a minority.
func (s Schedule) tolerated() int { return (s.Nodes - 1) / 2 }

func genFaults(rng *rand.Rand, s Schedule) []planFault {
	var faults []planFault
	for range rng.IntN(4) {
		f := planFault{
			At:   ms(rng.IntN(700)),
			Kind: pick(rng, []string{"slow", "freeze", "partition", "kill", "script-flush"}, []int{4, 2, 2, 2, 1}),
		}
		// A slow or cut-off network is the nodes' (every client's links) or
		// some clients' own: a client may be cut off from any number of
		// nodes (its locks must then tell it of their loss in time), the
		// nodes' network only from a minority.
		if (f.Kind == "slow" || f.Kind == "partition") && rng.IntN(2) == 0 {
			f.Clients = rng.Perm(len(s.Clients))[:1+rng.IntN(len(s.Clients))]
		}
		// Half the faults strike at a point of an actor's steps (just
		// before an extend, a write, an acquire...), where timing matters
		// most, rather than at a time; a network fault there is most often
		// that actor's own.
		if rng.IntN(2) == 0 {
			a := faultAnchor{Client: rng.IntN(len(s.Clients))}
			a.Actor = rng.IntN(len(s.Clients[a.Client].Actors))
			steps := s.Clients[a.Client].Actors[a.Actor]
			a.Step = rng.IntN(len(steps))
			a.Action = anchorAction(rng, steps[a.Step])
			f.Anchor = &a
			if (f.Kind == "slow" || f.Kind == "partition") && rng.IntN(4) > 0 {
				f.Clients = []int{a.Client}
			}
		}
		slices.Sort(f.Clients)
		switch {
		case f.Kind == "slow": // any number of nodes may be slow; most often a majority
			f.Nodes = rng.Perm(s.Nodes)[:1+rng.IntN(s.Nodes)]
			if rng.IntN(2) == 0 {
				f.Nodes = rng.Perm(s.Nodes)[:s.Nodes/2+1+rng.IntN(s.Nodes-s.Nodes/2)]
			}
			f.For = ms(100 + rng.IntN(500))
			f.Latency = ms(10 + rng.IntN(140))
			f.Jitter = ms(rng.IntN(30))
		case f.Kind == "partition" && len(f.Clients) > 0:
			f.Nodes = rng.Perm(s.Nodes)[:1+rng.IntN(s.Nodes)]
			f.For = ms(100 + rng.IntN(400))
		case f.Kind == "script-flush":
			f.Nodes = rng.Perm(s.Nodes)[:1+rng.IntN(s.Nodes)]
		default: // a minority may be down
			f.Nodes = rng.Perm(s.Nodes)[:1+rng.IntN(s.tolerated())]
			f.For = ms(100 + rng.IntN(400))
			if f.Kind == "kill" && !s.Persist {
				f.For = jsonDur(s.maxTTL() + 100*time.Millisecond)
			}
		}
		slices.Sort(f.Nodes)
		if f.down() && !fitsMinority(s, faults, f) {
			continue
		}
		faults = append(faults, f)
	}
	return faults
}

// down tells whether the fault takes its nodes out for every client: a
// minority at most.
func (f planFault) down() bool {
	return f.Kind == "freeze" || f.Kind == "kill" || f.Kind == "partition" && len(f.Clients) == 0
}

// fitsMinority reports whether f, with the faults before it, keeps the nodes
// that are down at once to a minority.
func fitsMinority(s Schedule, faults []planFault, f planFault) bool {
	down := map[int]bool{}
	for _, n := range f.Nodes {
		down[n] = true
	}
	for _, g := range faults {
		// an anchored fault may strike at any time
		if g.down() && (f.Anchor != nil || g.Anchor != nil || f.Whole || g.Whole || g.At < f.At+f.For && f.At < g.At+g.For) {
			for _, n := range g.Nodes {
				if down[n] && slices.Contains(f.Nodes, n) {
					return false // one fault at a time on a node
				}
				down[n] = true
			}
		}
	}
	return len(down) <= s.tolerated()
}

// String writes the schedule as it would be read aloud, one line per step
// and fault.
func (s Schedule) String() string {
	var b strings.Builder
	persist := "a killed node restarts empty after the largest TTL"
	if s.Persist {
		persist = "nodes persist every write"
	}
	shape := ""
	if s.Shape != "" {
		shape = " (" + s.Shape + ")"
	}
	fmt.Fprintf(&b, "schedule %d%s: %d nodes, %s\n", s.Seed, shape, s.Nodes, persist)
	for i, c := range s.Clients {
		fmt.Fprintf(&b, "  client %d (batching %v, hand-offs %v%s)\n", i, c.Batching, c.HandOff, c.options())
		for j, steps := range c.Actors {
			for k, st := range steps {
				fmt.Fprintf(&b, "    actor %d.%d step %d: %s\n", i, j, k, st)
			}
		}
	}
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "  fault: %s\n", f)
	}
	return b.String()
}

// options writes the options c is given beside the explorer's defaults.
func (c clientPlan) options() string {
	var b strings.Builder
	if c.NodeTimeout > 0 {
		fmt.Fprintf(&b, ", node timeout %v", c.NodeTimeout)
	}
	if c.FenceHorizon > 0 {
		fmt.Fprintf(&b, ", fence horizon %v", c.FenceHorizon)
	}
	switch r := c.Retry; {
	case r != nil && r.Policy == "default":
		b.WriteString(", the default retry policy")
	case r != nil:
		fmt.Fprintf(&b, ", retry %s %v to %v", r.Policy, r.Min, r.Max)
	}
	if c.MaxAttempts > 0 {
		fmt.Fprintf(&b, ", at most %d attempts", c.MaxAttempts)
	}
	if c.ContextTimeout {
		b.WriteString(", go-redis ends calls at their deadline")
	}
	return b.String()
}

func (st planStep) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "at %v %s %s %q ttl %v", st.At, st.Call, st.Kind, st.Keys, st.TTL)
	if st.Owner != "" {
		fmt.Fprintf(&b, " owner %s", st.Owner)
	}
	if st.Permits > 0 {
		fmt.Fprintf(&b, " permits %d", st.Permits)
	}
	if st.Fenced {
		b.WriteString(" fenced")
	}
	if st.Renew {
		b.WriteString(" renewed")
	}
	if st.Wait > 0 {
		fmt.Fprintf(&b, " wait %v", st.Wait)
	}
	if st.Repeat > 0 {
		fmt.Fprintf(&b, " again and again for %v, %v apart", st.Repeat, st.Gap)
	}
	b.WriteString(":")
	for _, a := range st.Actions {
		switch a.Op {
		case "work":
			fmt.Fprintf(&b, " work %v,", a.D)
		case "extend", "resume":
			fmt.Fprintf(&b, " %s %v,", a.Op, a.D)
		default:
			fmt.Fprintf(&b, " %s,", a.Op)
		}
	}
	if st.Keep {
		b.WriteString(" keep")
	} else {
		b.WriteString(" release")
	}
	return b.String()
}

func (f planFault) String() string {
	whose := ""
	if len(f.Clients) > 0 {
		whose = fmt.Sprintf(" from clients %v", f.Clients)
	}
	when := fmt.Sprintf("at %v", f.At)
	if a := f.Anchor; a != nil {
		what := fmt.Sprintf("action %d", a.Action)
		if a.Action < 0 {
			what = "the acquire"
		}
		when = fmt.Sprintf("before %s of actor %d.%d step %d", what, a.Client, a.Actor, a.Step)
	}
	span := fmt.Sprintf("for %v", f.For)
	if f.Whole {
		span = "until every actor is done,"
	}
	switch f.Kind {
	case "slow":
		return fmt.Sprintf("%s %s slow %v%s: %v ± %v each way", when, span, f.Nodes, whose, f.Latency, f.Jitter)
	case "script-flush":
		return fmt.Sprintf("%s SCRIPT FLUSH %v", when, f.Nodes)
	case "starve":
		return fmt.Sprintf("%s %s starve the CPU: GOMAXPROCS 1, %d goroutines spinning", when, span, f.Busy)
	}
	return fmt.Sprintf("%s %s %s %v%s", when, span, f.Kind, f.Nodes, whose)
}

// steps counts the steps of s.
func (s Schedule) steps() int {
	n := 0
	for _, c := range s.Clients {
		for _, steps := range c.Actors {
			n += len(steps)
		}
	}
	return n
}

// ReadSchedule parses a schedule written as JSON (see Schedule).
func ReadSchedule(b []byte) (Schedule, error) {
	var s Schedule
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("chaos: reading a schedule: %w", err)
	}
	if s.Nodes < 1 || len(s.Clients) == 0 {
		return s, fmt.Errorf("chaos: a schedule needs nodes and clients")
	}
	return s, nil
}
