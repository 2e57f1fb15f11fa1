package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/rtt"
)

// setNodeTimeoutFloor sets MinDerivedNodeTimeout and returns the former.
func setNodeTimeoutFloor(d time.Duration) time.Duration {
	old := MinDerivedNodeTimeout
	MinDerivedNodeTimeout = d
	return old
}

func TestQuorumOf(t *testing.T) {
	for _, tt := range []struct{ n, want int }{
		{1, 1}, {2, 2}, {3, 2}, {4, 3}, {5, 3}, {6, 4}, {7, 4}, {9, 5},
	} {
		if got := QuorumOf(tt.n); got != tt.want {
			t.Errorf("quorumOf(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}

func TestDriftFor(t *testing.T) {
	for _, tt := range []struct {
		ttl    time.Duration
		factor float64
		want   time.Duration
	}{
		{time.Second, 0.01, 12 * time.Millisecond},
		{10 * time.Second, 0.01, 102 * time.Millisecond},
		{100 * time.Millisecond, 0.01, 3 * time.Millisecond},
		{time.Second, 0, 2 * time.Millisecond},
		{time.Second, 0.5, 502 * time.Millisecond},
	} {
		if got := DriftFor(tt.ttl, tt.factor); got != tt.want {
			t.Errorf("driftFor(%v, %v) = %v, want %v", tt.ttl, tt.factor, got, tt.want)
		}
	}
}

func TestValidity(t *testing.T) {
	for _, tt := range []struct {
		ttl, elapsed, drift, want time.Duration
	}{
		{time.Second, 0, 12 * time.Millisecond, 988 * time.Millisecond},
		{time.Second, 100 * time.Millisecond, 12 * time.Millisecond, 888 * time.Millisecond},
		{time.Second, 988 * time.Millisecond, 12 * time.Millisecond, 0},
		{time.Second, 2 * time.Second, 12 * time.Millisecond, -1012 * time.Millisecond},
	} {
		if got := Validity(tt.ttl, tt.elapsed, tt.drift); got != tt.want {
			t.Errorf("validity(%v, %v, %v) = %v, want %v", tt.ttl, tt.elapsed, tt.drift, got, tt.want)
		}
	}
}

func TestRenewDue(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name       string
		until      time.Time
		ttl, drift time.Duration
		want       time.Time
	}{
		{"fresh: a third of the validity on", t0.Add(988 * time.Millisecond), time.Second, 12 * time.Millisecond, t0.Add(988*time.Millisecond - 658666666*time.Nanosecond)},
		{"acquired late: due at once", t0.Add(286 * time.Millisecond), time.Second, 12 * time.Millisecond, t0.Add(286*time.Millisecond - 658666666*time.Nanosecond)},
		{"large drift: still a third of what a renewal gives", t0.Add(498 * time.Millisecond), time.Second, 502 * time.Millisecond, t0.Add(498*time.Millisecond - 332*time.Millisecond)},
	} {
		if got := RenewDue(tt.until, tt.ttl, tt.drift); !got.Equal(tt.want) {
			t.Errorf("%s: renewDue = %v, want %v", tt.name, got.Sub(t0), tt.want.Sub(t0))
		}
	}
}

func TestRenewMargin(t *testing.T) {
	for _, tt := range []struct {
		ttl, nodeTimeout, drift, want time.Duration
	}{
		{time.Second, 100 * time.Millisecond, 12 * time.Millisecond, 112 * time.Millisecond},
		{30 * time.Second, time.Second, 302 * time.Millisecond, 1302 * time.Millisecond},
		// the node timeout's floor is large for a short ttl: a quarter of
		// the validity caps it
		{100 * time.Millisecond, 50 * time.Millisecond, 3 * time.Millisecond, 24250 * time.Microsecond},
		// a node timeout longer than the ttl (WithNodeTimeout)
		{time.Second, 2 * time.Second, 12 * time.Millisecond, 247 * time.Millisecond},
	} {
		if got := RenewMargin(tt.ttl, tt.nodeTimeout, tt.drift); got != tt.want {
			t.Errorf("renewMargin(%v, %v, %v) = %v, want %v", tt.ttl, tt.nodeTimeout, tt.drift, got, tt.want)
		}
		if due := tt.ttl - tt.drift - (tt.ttl-tt.drift)*2/3; tt.ttl-tt.drift-RenewMargin(tt.ttl, tt.nodeTimeout, tt.drift) <= due {
			t.Errorf("ttl %v: the margin leaves no time to renew", tt.ttl)
		}
	}
}

func TestDecide(t *testing.T) {
	for _, tt := range []struct {
		n, quorum, yes, notYes int
		won, lost              bool
	}{
		{5, 3, 0, 0, false, false},
		{5, 3, 2, 2, false, false},
		{5, 3, 3, 0, true, false},
		{5, 3, 3, 2, true, false},
		{5, 3, 0, 3, false, true},
		{5, 3, 2, 3, false, true},
		{3, 2, 1, 1, false, false},
		{3, 2, 0, 2, false, true},
		{1, 1, 0, 0, false, false},
		{1, 1, 1, 0, true, false},
		{1, 1, 0, 1, false, true},
		{4, 3, 2, 1, false, false},
		{4, 3, 2, 2, false, true},
	} {
		won, lost := Decide(tt.n, tt.quorum, tt.yes, tt.notYes)
		if won != tt.won || lost != tt.lost {
			t.Errorf("decide(n=%d, q=%d, yes=%d, notYes=%d) = (%v, %v), want (%v, %v)",
				tt.n, tt.quorum, tt.yes, tt.notYes, won, lost, tt.won, tt.lost)
		}
	}
}

func TestPxMillis(t *testing.T) {
	for _, tt := range []struct {
		ttl  time.Duration
		want int64
	}{
		{time.Second, 1000},
		{time.Millisecond, 1},
		{1500 * time.Microsecond, 2},
		{time.Nanosecond, 1},
		{10*time.Second + 1, 10001},
	} {
		if got := PXMillis(tt.ttl); got != tt.want {
			t.Errorf("pxMillis(%v) = %d, want %d", tt.ttl, got, tt.want)
		}
	}
}

func TestTerms_nodeTimeoutDerivedFromTTL(t *testing.T) {
	defer setNodeTimeoutFloor(setNodeTimeoutFloor(50 * time.Millisecond)) // the library's, not the tests' (main_test.go)
	c := &Engine{cfg: Config{DriftFactor: 0.01}}
	for _, tt := range []struct{ ttl, want, drift time.Duration }{
		{100 * time.Millisecond, 50 * time.Millisecond, 3 * time.Millisecond},
		{time.Second, 100 * time.Millisecond, 12 * time.Millisecond},
		{5 * time.Second, 500 * time.Millisecond, 52 * time.Millisecond},
		{time.Minute, time.Second, 602 * time.Millisecond},
	} {
		tm, err := c.TermsFor(tt.ttl)
		if err != nil || tm != (Terms{TTL: tt.ttl, Timeout: tt.want, Base: tt.want, Drift: tt.drift}) {
			t.Errorf("termsFor(%v) = %+v, %v; want timeout %v, drift %v", tt.ttl, tm, err, tt.want, tt.drift)
		}
	}
	c.cfg.NodeTimeout = 7 * time.Millisecond
	if tm, _ := c.TermsFor(time.Minute); tm.Timeout != 7*time.Millisecond {
		t.Errorf("node timeout with WithNodeTimeout(7ms) = %v", tm.Timeout)
	}
	for _, ttl := range []time.Duration{0, -time.Second, 2 * time.Millisecond} {
		if _, err := c.TermsFor(ttl); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("termsFor(%v) = %v, want ErrInvalidArgument", ttl, err)
		}
	}
}

// TestTerms_nodeTimeoutFollowsRoundTrips: the derived node timeout is
// the base one until the nodes' replies show that a quorum of them needs
// longer, and then what they need, up to two thirds of the validity;
// nothing is known of a node before its first reply, and a first contact
// gets those two thirds. WithNodeTimeout's is kept as given.
func TestTerms_nodeTimeoutFollowsRoundTrips(t *testing.T) {
	defer setNodeTimeoutFloor(setNodeTimeoutFloor(50 * time.Millisecond))
	c := &Engine{cfg: Config{DriftFactor: 0.01}, quorum: 2, rtts: make([]rtt.Estimate, 3)}
	timeout := func(ttl time.Duration) time.Duration {
		tm, err := c.TermsFor(ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tm.Timeout
	}
	if got := timeout(5 * time.Second); got != 3298666666 {
		t.Errorf("before any reply: %v, want two thirds of the validity, 3.298666666s", got)
	}
	for range 50 {
		for i := range c.rtts {
			c.rtts[i].Sample(time.Millisecond)
		}
	}
	if got := timeout(5 * time.Second); got != 500*time.Millisecond {
		t.Errorf("nodes a millisecond away: %v, want the base 500ms", got)
	}
	for range 50 {
		c.rtts[0].Sample(time.Second) // a minority far away does not count
		c.rtts[1].Sample(600 * time.Millisecond)
		c.rtts[2].Sample(600 * time.Millisecond)
	}
	if got := timeout(5 * time.Second); got < 890*time.Millisecond || got > 950*time.Millisecond {
		t.Errorf("a quorum 600ms away: %v, want about 900ms", got)
	}
	if got := timeout(time.Second); got != 658666666 {
		t.Errorf("a quorum 600ms away, ttl 1s: %v, want two thirds of the validity, 658.666666ms", got)
	}
	c.cfg.NodeTimeout = 7 * time.Millisecond
	if got := timeout(5 * time.Second); got != 7*time.Millisecond {
		t.Errorf("WithNodeTimeout(7ms): %v", got)
	}
}

func TestJudgeRelease(t *testing.T) {
	for _, tt := range []struct {
		n, quorum, yes, no int
		expired            bool
		want               ReleaseOutcome
	}{
		{5, 3, 5, 0, false, Released},
		{5, 3, 3, 0, false, Released},   // two nodes failed: they keep the key until its TTL
		{5, 3, 3, 0, true, Released},    // ran over, but a quorum proves nobody else got in
		{5, 3, 2, 1, false, Released},   // held on three, one of which died since
		{5, 3, 2, 1, true, LostBefore},  // ran over and no quorum confirms
		{5, 3, 2, 3, false, LostBefore}, // a majority had lost the key
		{5, 3, 0, 5, false, LostBefore},
		{5, 3, 0, 0, false, Incomplete}, // nobody answered
		{5, 3, 2, 0, false, Incomplete},
		{5, 3, 0, 0, true, LostBefore},
		{1, 1, 1, 0, false, Released},
		{1, 1, 0, 1, false, LostBefore},
		{1, 1, 0, 0, false, Incomplete},
		{3, 2, 1, 1, false, Released},
		{3, 2, 0, 2, false, LostBefore},
	} {
		if got := JudgeRelease(tt.n, tt.quorum, tt.yes, tt.no, tt.expired); got != tt.want {
			t.Errorf("judgeRelease(n=%d, q=%d, yes=%d, no=%d, expired=%v) = %d, want %d",
				tt.n, tt.quorum, tt.yes, tt.no, tt.expired, got, tt.want)
		}
	}
}

func TestTakenByOne(t *testing.T) {
	h, o := HoldsNot, Holds
	named := func(name int64) nodeio.Reply { return nodeio.Reply{Holder: nodeio.Holder{Name: name}} }
	held, other, none := nodeio.Reply{Held: true, Counter: 1}, nodeio.Reply{Holder: nodeio.Holder{OtherKind: true}}, nodeio.Reply{}
	for _, tt := range []struct {
		name    string
		answers []Answer
		replies []nodeio.Reply
		q       int
		want    nodeio.Holder
		taken   bool
	}{
		{"one holder on a quorum", []Answer{h, h, h, o, o}, []nodeio.Reply{named(7), named(7), named(7), held, held}, 3, nodeio.Holder{Name: 7}, true},
		{"a split vote", []Answer{h, h, h, o, o}, []nodeio.Reply{named(7), named(7), named(9), held, held}, 3, nodeio.Holder{}, false},
		{"not seen on a quorum yet", []Answer{h, h, Unanswered, h, o}, []nodeio.Reply{named(7), named(9), none, named(7), held}, 3, nodeio.Holder{}, false},
		{"kinds that do not name the holder", []Answer{h, h, h}, []nodeio.Reply{none, none, none}, 2, nodeio.Holder{}, false},
		{"a lock of another kind", []Answer{h, h, o}, []nodeio.Reply{other, other, held}, 2, nodeio.Holder{OtherKind: true}, true},
	} {
		holder, got := TakenByOne(Tally{Answers: tt.answers, Replies: tt.replies}, tt.q)
		if got != tt.taken || holder != tt.want {
			t.Errorf("%s: takenByOne = %+v, %v, want %+v, %v", tt.name, holder, got, tt.want, tt.taken)
		}
	}
}

// TestNoteReply_callerEndedCallsTellNothing: a call that its caller's
// context ended (never sent, cut, cancelled) leaves a node's failing mark
// and its round-trip estimate as they were. A cancelled call used to clear
// the mark (with callers cancelling their contexts, a frozen node was
// waited out again about once per node timeout), and a call never sent or
// cut for a caller's deadline set it (other goroutines' tiny deadlines
// made healthy nodes look failing).
func TestNoteReply_callerEndedCallsTellNothing(t *testing.T) {
	c := &Engine{failing: make([]atomic.Pointer[error], 2), rtts: make([]rtt.Estimate, 2), told: make([]atomic.Bool, 2)}
	c.NoteReply(0, fmt.Errorf("no reply within 1s: %w", context.DeadlineExceeded), time.Second, time.Second)
	for _, err := range []error{
		nodeio.NotSent(context.Canceled),
		nodeio.NotSent(context.DeadlineExceeded),
		fmt.Errorf("%w: %w", ErrCutByCaller, context.DeadlineExceeded),
		fmt.Errorf("%w: i/o timeout", ErrCutByCaller),
		context.Canceled,
	} {
		c.NoteReply(0, err, time.Millisecond, time.Second)
		c.NoteReply(1, err, time.Millisecond, time.Second)
	}
	if c.failing[0].Load() == nil {
		t.Fatal("a call the caller ended cleared the node's failing mark")
	}
	if c.failing[1].Load() != nil {
		t.Fatal("a call the caller ended marked a node failing")
	}
	if w, _ := c.rtts[1].Wait(); w != 0 {
		t.Fatalf("a call the caller ended changed the node's round trip: %v", w)
	}
	c.NoteReply(0, nil, time.Millisecond, time.Second)
	if c.failing[0].Load() != nil {
		t.Fatal("an answer did not clear the node's failing mark")
	}
}

// TestAttemptDone_eagerGivesFailingNodesAGrace: an eager attempt (a fair
// waiter first in line) whose undecided nodes are all failing stops after
// the grace, not at their timeout. It waited them out.
func TestAttemptDone_eagerGivesFailingNodesAGrace(t *testing.T) {
	c := &Engine{nodes: make([]Node, 5), failing: make([]atomic.Pointer[error], 5)}
	frozen := errors.New("no reply")
	c.failing[3].Store(&frozen)
	c.failing[4].Store(&frozen)
	tl := NewTally(5, false)
	tl.Answers = []Answer{Holds, Holds, HoldsNot, Unanswered, Unanswered}
	tl.Yes, tl.No, tl.NotYes = 2, 1, 1
	stop := c.AttemptDone(3, true)
	if stop(&tl) {
		t.Fatal("stopped before the grace")
	}
	time.Sleep(2 * GraceFloor)
	if !stop(&tl) {
		t.Fatal("an eager attempt waits on for nodes known to be failing after the grace")
	}
}

// TestWithGrace_waitsTheUsualReply: once decided, the grace lasts as long
// again as the decision took (at least graceFloor), and at least until
// the nodes about as fast as the quorum usually answer (tally.usual), as
// on a loaded machine whose round trips are long for every node.
func TestWithGrace_waitsTheUsualReply(t *testing.T) {
	never := func(*Tally) bool { return false }
	always := func(*Tally) bool { return true }
	for _, tc := range []struct {
		name  string
		usual time.Duration
		want  time.Duration // from begun, for a decision at once
	}{
		{"nothing usual: the floor", 0, GraceFloor},
		{"a usual reply under the floor", time.Millisecond, GraceFloor},
		{"a usual reply past the floor", 40 * time.Millisecond, 40 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := Tally{Begun: time.Now(), Usual: tc.usual}
			WithGrace(never, always)(&tl)
			if got := tl.GraceEnd.Sub(tl.Begun); got < tc.want || got > tc.want+20*time.Millisecond {
				t.Fatalf("grace ends %v after the start, want %v (and a little for the decision's own time)", got, tc.want)
			}
		})
	}
}

// TestUsualReply: the usual reply that the grace waits for is the longest
// among the nodes about as fast as a quorum; a node much farther, one
// failing and one never heard from are not counted.
func TestUsualReply(t *testing.T) {
	c := &Engine{quorum: 3, rtts: make([]rtt.Estimate, 5), failing: make([]atomic.Pointer[error], 5)}
	for i, d := range []time.Duration{time.Millisecond, time.Millisecond, 2 * time.Millisecond, 100 * time.Millisecond, 0} {
		for range 8 {
			if d > 0 {
				c.rtts[i].Sample(d)
			}
		}
	}
	got := c.UsualReply()
	if want := c.rtts[2].Usual(); got != want {
		t.Fatalf("usualReply = %v, want node 2's usual %v (node 3 is far, node 4 unknown)", got, want)
	}
	err := error(ErrNodeTimeout)
	c.failing[2].Store(&err)
	// Then a quorum needs the far node: it decides when the far node
	// answers, and the grace waits for nothing longer.
	if got, want := c.UsualReply(), c.rtts[3].Usual(); got != want {
		t.Fatalf("usualReply with node 2 failing = %v, want node 3's %v (the quorum's own)", got, want)
	}
}
