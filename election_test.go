package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

func mustElection(t *testing.T, rc *redlock.Client, name string, ttl time.Duration) *redlock.Election {
	t.Helper()
	e, err := rc.Election(name, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestElection_campaignLeaderProclaimResign(t *testing.T) {
	c := newCluster(t, 3)
	e := mustElection(t, c.client(t), "scheduler", 2*time.Second)
	ctx := context.Background()
	if _, err := e.Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v, want ErrNoLeader", err)
	}
	before := time.Now()
	l, err := e.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	if !l.Leading() || l.Term() == 0 || l.Term() != l.Lock().FencingToken() {
		t.Fatalf("Leading %v, term %d (fencing token %d)", l.Leading(), l.Term(), l.Lock().FencingToken())
	}
	got, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Value != "host-a" || got.Term != l.Term() || got.Revision != 1 || got.Since.Before(before.Add(-time.Second)) || got.Since.After(time.Now()) {
		t.Fatalf("Leader = %+v, want host-a, term %d, revision 1, since about now", got, l.Term())
	}
	if err := l.Proclaim(ctx, "host-a with a new value"); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.Leader(ctx); got.Value != "host-a with a new value" || got.Term != l.Term() || got.Revision != 2 {
		t.Fatalf("after Proclaim, Leader = %+v", got)
	}
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if l.Leading() {
		t.Fatal("Leading after Resign")
	}
	select {
	case <-l.Context().Done():
	default:
		t.Fatal("the leadership's context is not cancelled after Resign")
	}
	if cause := context.Cause(l.Context()); errors.Is(cause, redlock.ErrLockLost) {
		t.Fatalf("cause after Resign %v: not a loss", cause)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) {
		t.Fatalf("Leader after Resign: %v, want ErrNoLeader", err)
	}
	if err := l.Proclaim(ctx, "x"); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Proclaim after Resign: %v, want ErrLockLost", err)
	}
}

// TestElection_oneLeaderAndTermsGrow: candidates of three Clients campaign
// again and again; at no time do two lead, each term is higher than the
// one before, and a resignation hands the leadership to a waiting
// candidate.
func TestElection_oneLeaderAndTermsGrow(t *testing.T) {
	c := newCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var (
		mu       sync.Mutex
		leading  int
		terms    []uint64
		overlaps int
	)
	var wg sync.WaitGroup
	for i := range 3 {
		e := mustElection(t, c.client(t), "singleton", 2*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				l, err := e.Campaign(ctx, strings.Repeat("x", i+1))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				leading++
				if leading > 1 {
					overlaps++
				}
				terms = append(terms, l.Term())
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				leading--
				mu.Unlock()
				if err := l.Resign(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if overlaps > 0 {
		t.Fatalf("two leaders at once %d times", overlaps)
	}
	if len(terms) != 15 {
		t.Fatalf("%d terms, want 15", len(terms))
	}
	for i := 1; i < len(terms); i++ {
		if terms[i] <= terms[i-1] {
			t.Fatalf("terms %v do not grow", terms)
		}
	}
}

// TestElection_resignWakesTheNextCandidate: a candidate waiting in
// Campaign is elected as soon as the leader resigns, not at its next poll:
// its Client's clock does not move, so its poll never comes.
func TestElection_resignWakesTheNextCandidate(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	a := mustElection(t, c.client(t), "job", 5*time.Second)
	clock := fakeClock()
	b := mustElection(t, c.client(t, redlock.WithClock(clock)), "job", 5*time.Second)
	la, err := a.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *redlock.Leadership
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := b.Campaign(ctx, "b")
		done <- result{l, err}
	}()
	waitFor(t, "b to wait for the release", func() bool { return len(c.subscribedChannels()) > 0 })
	waiters(t, clock, 1) // b is between attempts, subscribed
	if err := la.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("b was not elected at the release (its poll, on a clock that does not move, never comes)")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.l.Resign(ctx)
	if r.l.Term() <= la.Term() {
		t.Fatalf("b's term %d is not above a's %d", r.l.Term(), la.Term())
	}
}

// TestElection_lostLeadershipIsSignalled: the nodes lose the election's key
// (a majority flushed); the leader's next renewal finds it gone: Done
// closes, the Context's cause matches ErrLockLost, Leading turns false, and
// Leader no longer reports it.
func TestElection_lostLeadershipIsSignalled(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	e := mustElection(t, c.client(t), "lost", 900*time.Millisecond)
	l, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.servers[:2] {
		s.FlushAll()
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the key was lost on a majority")
	}
	if l.Leading() {
		t.Fatal("still Leading after the loss")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, redlock.ErrLockLost) {
		t.Fatalf("cause %v, want ErrLockLost", cause)
	}
	if _, err := e.Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) {
		t.Fatalf("Leader after the loss: %v, want ErrNoLeader", err)
	}
}

// TestElection_observe: an observer gets the current leader, each
// proclamation and each new term, never one older than the last, and its
// channel closes when its context ends.
func TestElection_observe(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	e := mustElection(t, c.client(t), "watched", 2*time.Second)
	l, err := e.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	obs := mustElection(t, c.client(t), "watched", 2*time.Second).Observe(octx)
	next := func(want string) redlock.Leader {
		t.Helper()
		select {
		case got := <-obs:
			if got.Value != want {
				t.Fatalf("observed %+v, want value %q", got, want)
			}
			return got
		case <-time.After(5 * time.Second):
			t.Fatalf("nothing observed, want %q", want)
		}
		return redlock.Leader{}
	}
	first := next("v1")
	if err := l.Proclaim(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	if got := next("v2"); got.Term != first.Term || got.Revision != 2 {
		t.Fatalf("after Proclaim observed %+v", got)
	}
	// A reader that falls behind gets the latest.
	for _, v := range []string{"v3", "v4", "v5"} {
		if err := l.Proclaim(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "v5 to be observed", func() bool {
		select {
		case got := <-obs:
			return got.Value == "v5"
		default:
			return false
		}
	})
	if err := l.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := e.Campaign(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Resign(ctx)
	if got := next("w1"); got.Term <= first.Term || got.Revision != 1 {
		t.Fatalf("new term observed as %+v after term %d", got, first.Term)
	}
	stop()
	for range obs {
	}
}

// TestElection_leaderWithTooFewNodes: with a majority of the nodes down,
// Leader says it cannot tell, not that there is no leader.
func TestElection_leaderWithTooFewNodes(t *testing.T) {
	c := newCluster(t, 3)
	e := mustElection(t, c.client(t, redlock.WithNodeTimeout(200*time.Millisecond)), "down", time.Second)
	c.servers[0].Close()
	c.servers[1].Close()
	_, err := e.Leader(context.Background())
	if err == nil || errors.Is(err, redlock.ErrNoLeader) {
		t.Fatalf("Leader with 2 of 3 nodes down: %v, want an error other than ErrNoLeader", err)
	}
	var ne *redlock.NodeError
	if !errors.As(err, &ne) {
		t.Fatalf("%v has no *NodeError", err)
	}
}

func TestElection_badInput(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	before := c.commands() // a client that dials at once has greeted the nodes
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{{"", time.Second}, {"x", 0}, {"x", -time.Second}, {"x", time.Millisecond}} {
		if _, err := rc.Election(tc.name, tc.ttl); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("Election(%q, %v): %v, want ErrInvalidArgument", tc.name, tc.ttl, err)
		}
	}
	e := mustElection(t, rc, "x", time.Second)
	if _, err := e.Campaign(context.Background(), strings.Repeat("v", redlock.MaxMetadata+1)); !errors.Is(err, redlock.ErrInvalidArgument) {
		t.Errorf("Campaign with a value too long: %v", err)
	}
	if n := c.commands() - before; n != 0 {
		t.Errorf("bad input sent %d commands", n)
	}
}

// TestElection_termFencesADeposedLeader: a leader's term, given to
// FencedSet, refuses the writes of the leader before it.
func TestElection_termFencesADeposedLeader(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	e := mustElection(t, c.client(t), "fenced", time.Second)
	old, err := e.Campaign(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	oldTerm := old.Term()
	if err := old.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	cur, err := e.Campaign(ctx, "new")
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Resign(ctx)
	store := c.clients[0]
	if err := redlock.FencedSet(ctx, store, "resource", "new", cur.Term()); err != nil {
		t.Fatal(err)
	}
	if err := redlock.FencedSet(ctx, store, "resource", "old", oldTerm); err == nil {
		t.Fatal("the deposed leader's write was accepted")
	}
}

// TestElection_recordLivesAsLongAsTheLeadership: the leader record has a
// time to live (it never stays for good), and it is kept alive while the
// leadership lasts, well past its ttl.
func TestElection_recordLivesAsLongAsTheLeadership(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	e := mustElection(t, c.client(t), "kept", 600*time.Millisecond)
	l, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	// Campaign returns once a quorum wrote the record; the third node's
	// write may still be on its way.
	waitFor(t, "the record on every node, with a ttl", func() bool {
		for _, s := range c.servers {
			if s.TTL("{kept}:leader") <= 0 {
				return false
			}
		}
		return true
	})
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		for _, s := range c.servers {
			s.FastForward(100 * time.Millisecond) // miniredis ages keys only so
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got, err := e.Leader(ctx); err != nil || got.Value != "v" {
		t.Fatalf("after 3 s (5 ttls) Leader = %+v, %v", got, err)
	}
}

// TestElection_failedProclaimDoesNotShareARevision: a Proclaim that failed
// (its context had ended) may still land on the nodes; the next one goes
// above it, so that Leader and observers report the newest value.
func TestElection_failedProclaimDoesNotShareARevision(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	e := mustElection(t, c.client(t), "revisions", 2*time.Second)
	l, err := e.Campaign(ctx, "v1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Proclaim(ended, "failed"); err == nil {
		t.Fatal("a Proclaim with an ended context succeeded")
	}
	waitFor(t, "the failed Proclaim to land", func() bool {
		got, _ := e.Leader(ctx)
		return got.Value == "failed"
	})
	if err := l.Proclaim(ctx, "v3"); err != nil {
		t.Fatal(err)
	}
	if got, err := e.Leader(ctx); err != nil || got.Value != "v3" || got.Revision != 3 {
		t.Fatalf("Leader = %+v, %v; want v3 at revision 3", got, err)
	}
}

// TestElection_leaderDoesNotWaitForAHungNode: with one node of three hung,
// Leader answers from the two others, not after the read timeout (3 s).
func TestElection_leaderDoesNotWaitForAHungNode(t *testing.T) {
	c := newCluster(t, 2)
	hung := newHungNode(t)
	nodes := append(c.clients, redis.NewClient(&redis.Options{Addr: hung.Addr(), MaxRetries: -1}))
	t.Cleanup(func() { _ = nodes[2].Close() })
	rc := mustNew(t, nodes, redlock.WithNodeTimeout(3*time.Second))
	e := mustElection(t, rc, "hung", 5*time.Second)
	l, err := e.Campaign(context.Background(), "v")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(context.Background())
	start := time.Now()
	got, err := e.Leader(context.Background())
	if err != nil || got.Value != "v" {
		t.Fatalf("Leader = %+v, %v", got, err)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Fatalf("Leader took %v: it waited for the hung node", d)
	}
}

// TestElection_resignDeletesTheRecord: the leader record goes with the
// leadership, not a ttl later.
func TestElection_resignDeletesTheRecord(t *testing.T) {
	c := newCluster(t, 3)
	e := mustElection(t, c.client(t), "tidy", time.Minute)
	l, err := e.Campaign(context.Background(), "v")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Resign(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the record to go", func() bool { return len(c.holdersAny("{tidy}:leader")) == 0 })
}

// failLeaderWrites fails the first n leader-record writes it sees, as a
// node that failed between the Campaign's win and its record.
type failLeaderWrites struct {
	mu sync.Mutex
	n  int
}

func (h *failLeaderWrites) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failLeaderWrites) fail(cmds []redis.Cmder) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		for _, a := range c.Args() {
			if a == "write" && h.n > 0 {
				h.n--
				return true
			}
		}
	}
	return false
}
func (h *failLeaderWrites) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fail([]redis.Cmder{cmd}) {
			err := errors.New("node failed")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (h *failLeaderWrites) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.fail(cmds) {
			err := errors.New("node failed")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// TestElection_campaignAgainWhenTheRecordFails: a Campaign that won the
// lock but could not write its record on a quorum (two nodes failed in
// between) resigns and campaigns again, rather than return an error while
// its context lasts.
func TestElection_campaignAgainWhenTheRecordFails(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	clients := c.connect(t)
	for _, rdb := range clients[:2] {
		addHook(t, rdb.(*redis.Client), &failLeaderWrites{n: 1})
	}
	e := mustElection(t, mustNew(t, clients), "retry", time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	defer l.Resign(ctx)
	if got, err := e.Leader(ctx); err != nil || got.Value != "v" || got.Term != l.Term() {
		t.Fatalf("Leader = %+v, %v", got, err)
	}
}

// TestElection_leaderUndecidedWithAHolderUnanswered: with the leader's key
// on nodes 0 and 1 only and node 1 hung, the nodes that answer (0 holds,
// 2 does not) cannot tell whether anyone leads: Leader says so with the
// nodes' errors, not ErrNoLeader. It used to return ErrNoLeader as soon as
// a quorum had answered, while the leader led.
func TestElection_leaderUndecidedWithAHolderUnanswered(t *testing.T) {
	c := newCluster(t, 3)
	nodes, links := lateNodes(t, c)
	rc := mustNew(t, nodes, redlock.WithNodeTimeout(300*time.Millisecond))
	e := mustElection(t, rc, "undecided", time.Minute)
	ctx := context.Background()
	l, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Resign(ctx)
	redlock.WaitSettled(l.Lock())
	c.servers[2].Del("undecided")
	links[1].setDelay(time.Minute)
	_, err = e.Leader(ctx)
	var ne *redlock.NodeError
	if errors.Is(err, redlock.ErrNoLeader) || !errors.As(err, &ne) || ne.Node != 1 {
		t.Fatalf("Leader with the leader's node 1 hung: %v, want node 1's error and not ErrNoLeader (the leader leads: %v)", err, l.Leading())
	}
}

// TestElection_campaignReturnsOnlyALiveLeadership: a win whose validity
// is spent before its leader record is written (nodes slower than the
// ttl's renewal margin) is not returned: Campaign campaigns again, and
// returns, when its context ends, the last attempt's error. It used to
// return a Leadership already lost.
func TestElection_campaignReturnsOnlyALiveLeadership(t *testing.T) {
	c := newCluster(t, 3)
	nodes, links := lateNodes(t, c)
	rc := mustNew(t, nodes, redlock.WithNodeTimeout(2*time.Second))
	e := mustElection(t, rc, "slow", 300*time.Millisecond)
	// The acquire wins within its validity; the record, one more round
	// trip of the majority, lands after the renewal margin.
	links[1].setDelay(130 * time.Millisecond)
	links[2].setDelay(130 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	l, err := e.Campaign(ctx, "v")
	if err == nil {
		defer l.Resign(context.Background())
		if !l.Leading() {
			t.Fatalf("Campaign returned a leadership already lost (%v)", context.Cause(l.Context()))
		}
		return
	}
	if !errors.Is(err, redlock.ErrLockLost) && !errors.Is(err, redlock.ErrNotAcquired) && !errors.Is(err, redlock.ErrNotConfirmed) {
		t.Fatalf("Campaign: %v, want a live leadership, or ErrLockLost, ErrNotConfirmed or ErrNotAcquired", err)
	}
}
