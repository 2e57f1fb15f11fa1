package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/pubsub"
)

// Leader election over the quorum: a leadership is a lock on the
// election's name, acquired WithFencing and WithAutoRenew, whose fencing
// token is the term; a record beside the key, written only where the key
// holds the leader's token, tells observers the leader's value, term and
// since when (lua/leader.lua). See docs/election.md.

var leaderScript = loadScript("leader.lua")

// ErrNoLeader is returned by Election.Leader when a quorum of the nodes
// answered and no candidate leads: none holds the election on a quorum, or
// the one that does has not announced itself yet (Campaign returns once it
// has).
var ErrNoLeader = errors.New("redlock: no leader")

// Election is the leader election of one name, among candidates in any
// number of processes: at most one leads at a time, under the same
// assumptions as a lock (docs/safety.md). Get one with Client.Election.
// It is safe for concurrent use.
type Election struct {
	c    *Client
	name string
	ttl  time.Duration
}

// Election returns the election of name, whose leaderships are leases of
// ttl renewed automatically (see WithAutoRenew): a leader whose process
// dies is followed within ttl plus a retry of the candidates' Campaign. The
// name is the key of the election's lock on the nodes (an election and a
// lock must not share a key); its leader record is kept beside it under
// "{name}:leader", and announced on "{name}:leader-changed" (see
// companion key names in docs/election.md). An empty name or a ttl that
// Acquire would refuse gives ErrInvalidArgument; no node is contacted.
func (c *Client) Election(name string, ttl time.Duration) (*Election, error) {
	if _, err := c.acquireConfig(name, ttl, []AcquireOption{WithAutoRenew()}); err != nil {
		return nil, err
	}
	return &Election{c: c, name: name, ttl: ttl}, nil
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// Leader is a leadership as observers see it.
type Leader struct {
	Value string    // what the leader proclaimed (Campaign's value, or its last Proclaim)
	Term  uint64    // the leadership's fencing token: higher than every earlier leader's
	Since time.Time // when it was elected, on the leader's Client's Clock (default: the system's)
	// Revision counts the leader's proclamations: 1 for Campaign's value,
	// one more for each Proclaim. (Term, Revision) only grows.
	Revision uint64
}

// newer reports whether l comes after m: a later term, or a later
// proclamation in the same term.
func (l Leader) newer(m Leader) bool {
	return l.Term > m.Term || l.Term == m.Term && l.Revision > m.Revision
}

// record is how the nodes keep a leader: "token term since rev value".
func (l Leader) record(token string) string {
	return fmt.Sprintf("%s %d %d %d %s", token, l.Term, l.Since.UnixMicro(), l.Revision, l.Value)
}

// parseRecord reads a record; ok is false for one that is not.
func parseRecord(s string) (token string, l Leader, ok bool) {
	f := strings.SplitN(s, " ", 5)
	if len(f) != 5 {
		return "", l, false
	}
	term, err1 := strconv.ParseUint(f[1], 10, 64)
	since, err2 := strconv.ParseInt(f[2], 10, 64)
	rev, err3 := strconv.ParseUint(f[3], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", l, false
	}
	return f[0], Leader{Value: f[4], Term: term, Since: time.UnixMicro(since), Revision: rev}, true
}

func (e *Election) recordKey() string { return companion(e.name, "leader") }
func (e *Election) channel() string   { return companion(e.name, "leader-changed") }

// op is a call of lua/leader.lua on the election's key and record.
func (e *Election) op(args ...any) nodeOp {
	return nodeOp{Script: leaderScript, Keys: []string{e.name, e.recordKey()}, Args: args}
}

// checkValue refuses a value longer than MaxMetadata.
func checkValue(value string) error {
	if len(value) > MaxMetadata {
		return engine.Invalid("value of %d bytes is longer than MaxMetadata (%d)", len(value), MaxMetadata)
	}
	return nil
}

// Campaign blocks until this candidate leads the election, with value as
// what it proclaims (at most MaxMetadata bytes), or until ctx ends. The
// Leadership is renewed automatically until Resign; its Done channel and
// Context say when it is lost, at the latest the renewal margin before its
// validity ends.
//
// It returns what Acquire returns when it does not lead (an error matching
// ErrNotAcquired, and ctx's error when ctx ended; ErrMisconfigured when
// the nodes' setup keeps the quorum out of reach); a value that is too
// long gives ErrInvalidArgument. Elected, it writes the leader record on
// the nodes; when that is not confirmed on a quorum (the lock's nodes
// failed since), or the leadership is lost by then (a validity spent on
// slow nodes), it resigns and campaigns again, or, once ctx has ended,
// returns that error (matching ErrNotConfirmed or ErrLockLost). A
// Leadership it returns is Leading.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if err := nilContext(ctx, "Election.Campaign"); err != nil {
		return nil, err
	}
	if err := checkValue(value); err != nil {
		return nil, err
	}
	for {
		lock, err := e.c.Acquire(ctx, e.name, e.ttl, WithFencing(), WithAutoRenew())
		if err != nil {
			return nil, err
		}
		l := &Leadership{e: e, lock: lock, leader: Leader{Term: lock.FencingToken(), Since: e.c.cfg.clock.Now()}}
		l.ctx, _ = newLockContext(context.Background(), lock, errResigned)
		err = l.Proclaim(ctx, value)
		if err == nil && !l.Leading() {
			// Lost while its record was written (its validity or the
			// renewal margin spent on slow nodes): not a leadership.
			err = cmp.Or(lock.lossCause(), lock.over(), error(errExpiredAtWin))
		}
		if err == nil {
			go l.keep()
			return l, nil
		}
		if ctx.Err() != nil {
			// The caller is gone: its deadline is not held up by the
			// release, which goes on in the background.
			go func() { _ = l.Resign(context.WithoutCancel(ctx)) }()
			return nil, err
		}
		// Won, but the record did not reach a quorum (the lock's nodes
		// failed since), or the leadership was lost meanwhile: not a
		// leadership anyone can see. Again.
		_ = l.Resign(context.WithoutCancel(ctx))
	}
}

// keepEvery is how often a leader keeps its record (see keep): every third
// of the ttl, at least once a minute.
func (e *Election) keepEvery() time.Duration { return min(e.ttl/3, time.Minute) }

// recordLife is how long a leader record lives after it was written or
// kept: the ttl, as the lock key, but no more than three keeps, so that the
// record of a leadership lost with a long ttl goes within minutes.
func (e *Election) recordLife() int64 { return engine.PXMillis(min(e.ttl, 3*e.keepEvery())) }

// keep keeps the leader record alive as long as the leadership: every
// keepEvery it lengthens it where the election's key holds the leader's
// token. (A reader trusts a record only while its token holds the key on
// a quorum; Resign deletes it, and a lost leadership's expires.)
func (l *Leadership) keep() {
	t := newTicker(l.e.c.cfg.clock, l.e.keepEvery())
	defer t.Stop()
	lk, c := l.lock, l.e.c
	op := l.e.op("keep", lk.token, l.e.recordLife())
	for {
		select {
		case <-lk.Done():
			return
		case <-t.c:
			tm, _ := lk.lease()
			c.e.FanOut(context.Background(), tm, nil, nil, engine.Settlement{}, op)
		}
	}
}

// errResigned is the cause of a Leadership's context after Resign.
var errResigned = errors.New("redlock: resigned")

// errExpiredAtWin is why Campaign, out of time, returns no leadership it
// won but could not keep until its record was written.
var errExpiredAtWin = fmt.Errorf("%w: its validity ran out while the leader record was written", ErrLockLost)

// Leadership is a candidate's term as leader, from Campaign until Resign
// or its loss. It is safe for concurrent use.
type Leadership struct {
	e    *Election
	lock *Lock
	ctx  context.Context

	mu     sync.Mutex // serialises Proclaim
	leader Leader
	tried  uint64 // the highest revision a Proclaim wrote, or tried to
}

// Term returns the leadership's term: its fencing token, higher than every
// earlier leader's of the election. Give it to the resources the leader
// writes to (FencedSet), so that a deposed leader's late writes are
// refused.
func (l *Leadership) Term() uint64 { return l.lock.FencingToken() }

// Leader returns the leadership as observers see it once proclaimed.
func (l *Leadership) Leader() Leader {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leader
}

// Lock returns the lock that holds the leadership (for Until, Validity,
// Confirmed).
func (l *Leadership) Lock() *Lock { return l.lock }

// Done returns a channel that is closed when the leadership ends: on
// Resign, or when it is lost, at the latest the renewal margin before its
// validity ends (see WithAutoRenew), when the Client's scheduler gets to
// it; after a process pause, Context().Err() and Leading may tell first
// (and then have it closed at once).
func (l *Leadership) Done() <-chan struct{} { return l.lock.Done() }

// Context returns a context that ends with the leadership. Its Err reads
// the Client's Clock: it is not nil as soon as the leadership is over
// (resigned, lost, or its validity run out), however late a timer fires
// after a pause, so that Leading, Lock().Validity() and Context().Err()
// never disagree. Check it right before each side effect (or give the
// Term to the resource as a fencing token). Its Done is closed when the
// leadership ends (at the latest the renewal margin before the validity
// ends, when the Client's scheduler gets to it), or once Err found it over.
//
// Its Err is then context.Canceled; context.Cause says why: an error
// matching ErrLockLost when the leadership was lost or its validity ran
// out, another after Resign. A context derived from it with a cancel or
// deadline (context.WithCancel, WithTimeout) learns the end only from
// Done: check this one's Err, or the derived one after a Value-only
// derivation, which keeps Err.
func (l *Leadership) Context() context.Context { return l.ctx }

// Leading reports whether this candidate still leads: the leadership has
// not ended and its validity has not run out, on the Client's Clock. It is
// false exactly when Context().Err() is not nil.
func (l *Leadership) Leading() bool { return l.ctx.Err() == nil }

// Proclaim sets the leader's value (at most MaxMetadata bytes) on the
// nodes, without an election: observers see it with the same term and a
// higher Revision. It returns nil once a quorum wrote it; an error
// matching ErrLockLost when the leadership is over or a majority of the
// nodes no longer hold it, ErrNotConfirmed when too few nodes answered,
// ErrInvalidArgument for a value that is too long.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	if err := nilContext(ctx, "Leadership.Proclaim"); err != nil {
		return err
	}
	if err := checkValue(value); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// A Proclaim that failed may have landed on some nodes: the next one
	// goes above it, so that no two values share a revision.
	l.tried++
	next := l.leader
	next.Value, next.Revision = value, l.tried
	lk, c := l.lock, l.e.c
	lk.op.Lock()
	defer lk.op.Unlock()
	if err := lk.over(); err != nil {
		return err
	}
	tm, _ := lk.lease()
	op := l.e.op("write", lk.token, l.e.recordLife(), next.record(lk.token), l.e.channel())
	t, settled := c.e.FanOut(ctx, tm, engine.DecidedAt(len(c.nodes), lk.quorum), nil, lk.settled, op)
	lk.settled = settled
	if t.Yes >= lk.quorum {
		l.leader = next
		return nil
	}
	sentinel := ErrNotConfirmed
	if t.No > len(c.nodes)-lk.quorum {
		sentinel = ErrLockLost
	}
	return &quorumError{sentinel: sentinel, cause: ctx.Err(), nodes: t.Errs, heldOn: -1,
		detail: fmt.Sprintf("proclaim %q: written on %d of %d nodes, quorum %d", l.e.name, t.Yes, len(c.nodes), lk.quorum)}
}

// Resign ends the leadership: the lock is released, the candidates
// campaigning are woken at once, and the leader record is deleted where it
// is still this leadership's. It returns what Lock.Release returns (for
// a nil ctx, ErrInvalidArgument: nothing is resigned).
func (l *Leadership) Resign(ctx context.Context) error {
	if err := nilContext(ctx, "Leadership.Resign"); err != nil {
		return err
	}
	err := l.lock.Release(ctx)
	c, lk := l.e.c, l.lock
	tm, _ := lk.lease()
	c.e.FanOut(context.WithoutCancel(ctx), tm, func(*engine.Tally) bool { return true }, nil, engine.Settlement{}, l.e.op("drop", lk.token))
	return err
}

// Leader returns the election's current leader: the record of the
// candidate that holds the election on a quorum of the nodes. It writes
// nothing. It returns ErrNoLeader when the nodes that answered show that
// none leads (no candidate can hold a quorum even with the nodes that did
// not answer, or the one that holds it has not announced itself yet), an
// error with each failed node's *NodeError and ctx's error when too few
// answered to tell, ctx's error when ctx had ended, and
// ErrInvalidArgument for a nil ctx.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := nilContext(ctx, "Election.Leader"); err != nil {
		return Leader{}, err
	}
	if err := ctx.Err(); err != nil {
		return Leader{}, err
	}
	q := e.c.quorum
	read := e.op("read")
	read.Shape = nodeio.Read
	t := e.c.readAll(ctx, leaderDecided(q), read)
	best, found, answered := leaderOf(&t, q)
	_, most := holders(&t)
	n := len(t.Answers)
	switch {
	case found:
		return best, nil
	case most >= q || most+n-answered < q:
		// A holder that has not announced itself yet, or none can hold
		// a quorum even with the nodes that did not answer.
		return Leader{}, ErrNoLeader
	}
	return Leader{}, fmt.Errorf("redlock: leader of %q: %d of %d nodes answered, quorum %d: %w",
		e.name, answered, n, q, errors.Join(append(t.Errs, ctx.Err())...))
}

// leaderOf is the leader the answers of a read (t) show: the newest record
// of the token that holds the election on q nodes, if any; answered counts
// the nodes that answered.
func leaderOf(t *engine.Tally, q int) (best Leader, found bool, answered int) {
	held, _ := holders(t)
	for i, a := range t.Answers {
		if a != engine.HoldsNot {
			continue
		}
		answered++
		rec, ok := t.ReadAt(i, 1)
		if !ok {
			continue
		}
		token, l, ok := parseRecord(rec)
		if ok && held[token] >= q && (!found || l.newer(best)) {
			best, found = l, true
		}
	}
	return best, found, answered
}

// holders counts, by token, the nodes of a read (t) whose election key
// holds it, and returns the largest count.
func holders(t *engine.Tally) (held map[string]int, most int) {
	held = map[string]int{}
	for i := range t.Answers {
		if v, ok := t.ReadAt(i, 0); ok {
			held[v]++
			most = max(most, held[v])
		}
	}
	return held, most
}

// leaderDecided tells readAll when the answers so far decide Leader: a
// token holds the election on q of the nodes that answered (whose records
// then include the newest one confirmed: a Proclaim is confirmed on a
// quorum, which meets any q holders), or no token can reach q with the
// nodes yet to answer.
func leaderDecided(q int) func(*engine.Tally) bool {
	return func(t *engine.Tally) bool {
		_, most := holders(t) // a node yet to answer holds nothing yet
		waiting := 0
		for _, a := range t.Answers {
			if a == engine.Unanswered {
				waiting++
			}
		}
		return most >= q || most+waiting < q
	}
}

// Observe returns a channel that receives the election's leader each time
// it changes (a new term, or a Proclaim), starting with the current one,
// until ctx ends; then it is closed. It always holds the latest: a reader
// that falls behind gets the newest leader, never an older one, and the
// terms it sees never go backwards. Changes are announced by the nodes
// (each node's pub/sub connection, shared with the Client's waiters), and
// the leader is read again at least every pollEvery, for a node whose
// announcement was lost. A time without a leader is not sent: after a
// leadership ends with no successor, the last leader sent stays the
// latest (Leader tells whether anyone leads now). A nil ctx panics, on
// the caller's goroutine.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	if ctx == nil {
		panic("redlock: Election.Observe: nil context (use context.Background() or context.TODO())")
	}
	out := make(chan Leader, 1)
	poke := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for _, s := range e.c.subscribers {
		w := s.Watch([]string{e.channel(), releaseChannel(e.name)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Stop()
			forward(ctx, w, poke)
		}()
	}
	go func() {
		defer close(out)
		defer wg.Wait()
		var last Leader
		t := newTimer(e.c.cfg.clock, 0)
		defer func() { t.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case <-poke:
			case <-t.Chan():
			}
			if l, err := e.Leader(ctx); err == nil && l.newer(last) {
				last = l
				latest(out, l)
			}
			t.Stop()
			t = newTimer(e.c.cfg.clock, e.pollEvery())
		}
	}()
	return out
}

// forward pokes for each message of w until ctx ends.
func forward(ctx context.Context, w *pubsub.Watch, poke chan<- struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.Messages():
			select {
			case poke <- struct{}{}:
			default:
			}
		}
	}
}

// latest puts l in out, in place of a value not yet taken.
func latest(out chan Leader, l Leader) {
	for {
		select {
		case out <- l:
			return
		default:
		}
		select {
		case <-out:
		default:
		}
	}
}

// pollEvery is how often Observe reads the leader without an
// announcement: a third of the ttl, at most a second.
func (e *Election) pollEvery() time.Duration { return min(e.ttl/3, time.Second) }
