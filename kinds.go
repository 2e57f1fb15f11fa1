package redlock

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A lock's kind is how it is stored on each node and what it excludes: the
// plain lock (one holder), reentrant (one owner, many holds), read-write
// (many readers or one writer), semaphore (at most K holders), multi-key
// (several keys, all or nothing) and fair (granted in ticket order). Every
// kind is acquired, extended and released on a quorum exactly as the plain
// lock is (see attempt and Lock); the kind only supplies the per-node
// scripts and, for the semaphore, the quorum. docs/kinds.md has the storage
// and the guarantees.

// kind is what a Lock is on the nodes.
type kind interface {
	// keys are the locked keys; the first names the lock in messages.
	keys() []string
	// describe names the lock in messages, e.g. `read lock "k"`.
	describe() string
	// quorum is how many of n nodes must hold the lock.
	quorum(n int) int
	// fence: how long the fencing counters are kept once the node's clock
	// has passed them (acquireConfig.fenceKeep); 0 for a lock not fenced
	acquire(token string, ttl, fence time.Duration) nodeOp
	extend(token string, ttl time.Duration) nodeOp
	// release gives the lock up and announces it on its release channels.
	release(token string) nodeOp
	// drop undoes a failed attempt, without announcing it (except a
	// reader's, which may leave the key free for a waiting writer).
	drop(token string) nodeOp
	// leave is sent when an Acquire gives up for good: it drops what the
	// waiter left on the nodes between attempts (a writer's mark, a place in
	// a fair queue). Nil when there is nothing.
	leave(token string) *nodeOp
	// fenceKeys are the fencing counters of the locked keys.
	fenceKeys() []string
	// channels are where its releases are announced.
	channels() []string
	// name names the kind in Events: plain, reentrant, read, write,
	// semaphore, multi-key or fair.
	name() string
	// turns names the local queue in which the Client's goroutines that
	// want the lock wait for it (see localqueue.go), or is "" when they do
	// not: the plain lock's, a writer's and a multi-key lock's do, each in
	// a queue of its own kind and keys. The holds of the other kinds may
	// coexist (readers, permits, an owner's holds) or are ordered on the
	// nodes (fair).
	turns() string
}

// waitsInLine is a kind whose waiter keeps a place in a queue on the nodes
// across the attempts of one Acquire: the fair lock. The acquire loop calls
// these at its steps; the kind's script does the rest.
type waitsInLine interface {
	kind
	// join gives the waiter its place before the first attempt, trying
	// again after retry's delays while ctx lasts (once when retry is nil).
	// (ac.retry nil: once; at most ac.maxAttempts draws when set).
	join(ctx context.Context, c *Client, ac acquireConfig) *quorumError
	// nextWait is the wait before the next attempt, given the retry
	// policy's delay and whether the last release named this waiter first.
	nextWait(delay time.Duration, first bool) time.Duration
	// named tells whom a release message names first in line.
	named(payload string) naming
}

// naming is whom a queue's release message names first in line.
type naming int

const (
	namedNobody  naming = iota // the queue is empty: anyone may try
	namedUs                    // this waiter: it tries at once
	namedAnother               // another waiter: this one keeps waiting
)

// plain is the plain lock: the key holds the token.
type plain struct{ key string }

func (k plain) keys() []string      { return []string{k.key} }
func (k plain) describe() string    { return strconv.Quote(k.key) }
func (k plain) name() string        { return "plain" }
func (k plain) turns() string       { return "plain\x00" + k.key }
func (k plain) quorum(n int) int    { return quorumOf(n) }
func (k plain) fenceKeys() []string { return []string{fenceKey(k.key)} }
func (k plain) channels() []string  { return []string{releaseChannel(k.key)} }
func (k plain) acquire(token string, ttl, fence time.Duration) nodeOp {
	return acquireOn(k.key, token, ttl, fence)
}
func (k plain) extend(token string, ttl time.Duration) nodeOp { return extendOn(k.key, token, ttl) }
func (k plain) release(token string) nodeOp                   { return releaseOn(k.key, token) }
func (k plain) drop(token string) nodeOp                      { return dropOn(k.key, token) }
func (k plain) leave(string) *nodeOp                          { return nil }
func (k plain) handOff(token, from string, ttl, fence time.Duration) nodeOp {
	return handOffOn(k.key, token, from, ttl, fence)
}

// scripted is a kind whose operations are one script, given the operation's
// name; see the kind_*.lua files for the arguments.
type scripted struct {
	script *redis.Script
	lock   []string // the keys the script works on, fencing counters apart
	fences []string // the fencing counters, appended to lock when fenced
	chans  []string
	extra  []any // the kind's own arguments, after the common five
}

// op is the script's operation name; fence is how long its fencing
// counters are kept once the node's clock has passed them, 0 for an
// operation that draws none (ARGV[5] of the kind_*.lua scripts).
func (s scripted) op(name, token string, ttl, fence time.Duration, announce bool) nodeOp {
	keys := s.lock
	keep := int64(0)
	if fence > 0 {
		keys = append(append([]string(nil), s.lock...), s.fences...)
		keep = pxMillis(fence)
	}
	channel := ""
	if announce && len(s.chans) > 0 {
		channel = s.chans[0]
	}
	args := append([]any{name, token, pxMillis(ttl), channel, keep}, s.extra...)
	takes := name == "acquire" || name == "handoff"
	return nodeOp{script: s.script, keys: keys, args: args, holds: takes || name == "extend", takes: takes}
}

// The operations of a scripted kind; the kinds embed scripted and override
// what differs.
func (s scripted) acquire(token string, ttl, fence time.Duration) nodeOp {
	return s.op("acquire", token, ttl, fence, false)
}
func (s scripted) extend(token string, ttl time.Duration) nodeOp {
	return s.op("extend", token, ttl, 0, false)
}
func (s scripted) release(token string) nodeOp {
	return s.op("release", token, time.Millisecond, 0, true)
}
func (s scripted) drop(token string) nodeOp {
	return s.op("drop", token, time.Millisecond, 0, false)
}
func (s scripted) leave(string) *nodeOp { return nil }
func (s scripted) fenceKeys() []string  { return s.fences }
func (s scripted) channels() []string   { return s.chans }
func (s scripted) turns() string        { return "" }

// reentrant is a lock held by an owner, any number of times at once.
type reentrant struct {
	scripted
	key, owner string
}

func newReentrant(key, owner string) reentrant {
	return reentrant{key: key, owner: owner, scripted: scripted{
		script: reentrantScript,
		lock:   []string{key, companion(key, "grants")},
		fences: []string{fenceKey(key)},
		chans:  []string{releaseChannel(key)},
		extra:  []any{owner},
	}}
}

func (k reentrant) keys() []string   { return []string{k.key} }
func (k reentrant) describe() string { return fmt.Sprintf("%q (owner %q)", k.key, k.owner) }
func (k reentrant) name() string     { return "reentrant" }
func (k reentrant) quorum(n int) int { return quorumOf(n) }

// multi is a lock on several keys at once.
type multi struct {
	scripted
	ks []string
}

func newMulti(keys []string) multi {
	fences := make([]string, len(keys))
	chans := make([]string, len(keys))
	extra := []any{len(keys)}
	for i, k := range keys {
		fences[i] = fenceKey(k)
		chans[i] = releaseChannel(k)
		extra = append(extra, chans[i])
	}
	return multi{ks: keys, scripted: scripted{script: multiScript, lock: keys, fences: fences, chans: chans, extra: extra}}
}

func (k multi) keys() []string   { return k.ks }
func (k multi) describe() string { return fmt.Sprintf("%q", k.ks) }
func (k multi) name() string     { return "multi-key" }
func (k multi) quorum(n int) int { return quorumOf(n) }
func (k multi) turns() string {
	return "multi\x00" + strings.Join(slices.Sorted(slices.Values(k.ks)), "\x00")
}

// The multi-key script announces on every key's channel; its ARGV[4] is a
// flag rather than one channel.
func (k multi) release(token string) nodeOp {
	op := k.scripted.release(token)
	op.args[3] = "1"
	return op
}

// handOff takes every key from the holder of from (kind_multi.lua).
func (k multi) handOff(token, from string, ttl, fence time.Duration) nodeOp {
	op := k.scripted.op("handoff", token, ttl, fence, false)
	op.args = append(op.args, from)
	return op
}

// semaphore is one of at most permits holders of a resource.
type semaphore struct {
	scripted
	key     string
	permits int
}

func newSemaphore(key string, permits int) semaphore {
	return semaphore{key: key, permits: permits, scripted: scripted{
		script: semaphoreScript,
		lock:   []string{key, companion(key, "permits")},
		fences: []string{fenceKey(key)},
		chans:  []string{releaseChannel(key)},
		extra:  []any{permits},
	}}
}

func (k semaphore) keys() []string { return []string{k.key} }
func (k semaphore) name() string   { return "semaphore" }
func (k semaphore) describe() string {
	return fmt.Sprintf("semaphore %q (%d permits)", k.key, k.permits)
}

// quorum is semaphoreQuorum: a majority is not enough once K > 1.
func (k semaphore) quorum(n int) int { return semaphoreQuorum(n, k.permits) }

// semaphoreQuorum is how many of n nodes a permit of a K-permit semaphore
// must be held on, so that K+1 holders at once are impossible: each node
// grants at most K permits, so K+1 holders on q nodes each need
// (K+1)·q ≤ K·n, which the smallest q with (K+1)·q > K·n rules out. For
// K = 1 it is the majority; as K grows it approaches n (with n = 3 and
// K = 2, three holders could each hold two of the three nodes under a
// majority quorum).
//
// From K = n on, that is every node: (K+1)·q > K·n holds only for q = n
// (and K·n could overflow for a huge K).
func semaphoreQuorum(n, permits int) int {
	if permits >= n {
		return n
	}
	return permits*n/(permits+1) + 1
}

// readWrite is a reader's or a writer's hold of a read-write lock.
type readWrite struct {
	scripted
	key    string
	writer bool
}

func newReadWrite(key string, writer bool) readWrite {
	role := "r"
	if writer {
		role = "w"
	}
	waiter := rand.Text() // the writer's mark, across its attempts
	return readWrite{key: key, writer: writer, scripted: scripted{
		script: rwScript,
		lock:   []string{key, companion(key, "writer-waiting")},
		fences: []string{fenceKey(key)},
		chans:  []string{releaseChannel(key)},
		extra:  []any{role, waiter},
	}}
}

func (k readWrite) keys() []string { return []string{k.key} }
func (k readWrite) describe() string {
	if k.writer {
		return fmt.Sprintf("write lock %q", k.key)
	}
	return fmt.Sprintf("read lock %q", k.key)
}
func (k readWrite) quorum(n int) int { return quorumOf(n) }
func (k readWrite) turns() string {
	if !k.writer {
		return "" // readers hold together
	}
	return "write\x00" + k.key
}
func (k readWrite) name() string {
	if k.writer {
		return "write"
	}
	return "read"
}
func (k readWrite) leave(token string) *nodeOp {
	if !k.writer {
		return nil
	}
	op := k.op("leave", token, time.Millisecond, 0, true)
	return &op
}

// unmark takes a writer's mark back (kind_rw.lua); a reader leaves none.
func (k readWrite) unmark() *nodeOp {
	if !k.writer {
		return nil
	}
	op := k.op("unmark", "", time.Millisecond, 0, false)
	return &op
}

// drop undoes a reader's failed attempt with an announcement when it leaves
// the key free: the attempt may have been the last reader on a node where
// a writer waits, and the writer, refused there, listens for the key to be
// free (a writer's own failed attempt needs no announcement: it left its
// mark, which keeps the readers refused).
func (k readWrite) drop(token string) nodeOp {
	return k.op("drop", token, time.Millisecond, 0, !k.writer)
}

// handOff takes a write lock from the writer holding from (kind_rw.lua).
// Only writers take local turns, so only a writer is handed over.
func (k readWrite) handOff(token, from string, ttl, fence time.Duration) nodeOp {
	op := k.op("handoff", token, ttl, fence, true)
	op.args = append(op.args, from)
	return op
}

// fairPatience is how long a fair lock's waiter keeps its place in the
// queue on a node without trying again there, unless its node timeout asks
// for longer (see terms.patience); a fair Acquire tries at least every
// quarter of its patience.
const fairPatience = 4 * time.Second

// fairPatienceTimeouts is the patience in node timeouts, when that is
// longer: between two of a waiter's calls to a node there can be an
// attempt, the raise of its fencing token and its cleanup, each waiting up
// to a node timeout, the wait before the next attempt (a quarter of the
// patience), and that attempt's way to the node, up to a node timeout.
const fairPatienceTimeouts = 8

// patience is how long a fair waiter of a lock on these terms keeps its
// place: at most maxPatience. It counts the base node timeout (WithNodeTimeout,
// or the one derived from the ttl), not the one the round trips lengthen:
// a first contact's is two thirds of the validity, and a queue would then
// outlive its waiters by seconds. A waiter on a network slower than that
// may lose its place between two attempts; it takes it back, by its
// ticket, at the next.
func (t terms) patience() time.Duration {
	return min(max(fairPatience, mulSat(fairPatienceTimeouts, t.base)), maxPatience)
}

// maxPatience is the longest patience: the queue's keys live twice that
// (kind_fair.lua), within the longest time to live (maxPX).
const maxPatience = time.Duration(maxPX/2) * time.Millisecond

// fair is a lock granted in the order of its waiters' tickets.
type fair struct {
	scripted
	key    string
	waiter string // the queue entry, across the Acquire's attempts
	ticket int64  // set once the Acquire has drawn it
	// patience is how long the waiter keeps its place on a node without
	// trying again there (terms.patience), set by the Acquire.
	patience time.Duration
}

func newFair(key string) *fair {
	return &fair{key: key, waiter: rand.Text(), scripted: scripted{
		script: fairScript,
		lock:   []string{key, companion(key, "queue"), companion(key, "queue-deadlines"), companion(key, "tickets")},
		fences: []string{fenceKey(key)},
		chans:  []string{releaseChannel(key)},
	}}
}

func (k *fair) withArgs(op nodeOp) nodeOp {
	op.args = append(op.args, k.ticket, cmp.Or(k.patience, fairPatience).Milliseconds(), k.waiter)
	return op
}

func (k *fair) keys() []string   { return []string{k.key} }
func (k *fair) describe() string { return fmt.Sprintf("fair lock %q", k.key) }
func (k *fair) name() string     { return "fair" }
func (k *fair) quorum(n int) int { return quorumOf(n) }

// ticketKeys is the ticket counter, for raiseFenceOn.
func (k *fair) ticketKeys() []string { return []string{companion(k.key, "tickets")} }

// ticketOp draws a ticket, the ticket counter kept for keep once the
// node's clock has passed it (prelude.lua).
func (k *fair) ticketOp(keep time.Duration) nodeOp {
	return k.withArgs(k.op("ticket", "", keep, 0, false))
}
func (k *fair) acquire(token string, ttl, fence time.Duration) nodeOp {
	return k.withArgs(k.scripted.acquire(token, ttl, fence))
}
func (k *fair) extend(token string, ttl time.Duration) nodeOp {
	return k.withArgs(k.scripted.extend(token, ttl))
}
func (k *fair) release(token string) nodeOp { return k.withArgs(k.scripted.release(token)) }
func (k *fair) drop(token string) nodeOp    { return k.withArgs(k.scripted.drop(token)) }
func (k *fair) unmark() *nodeOp {
	op := k.withArgs(k.op("dequeue", "", time.Millisecond, 0, false))
	return &op
}
func (k *fair) leave(token string) *nodeOp {
	op := k.withArgs(k.op("leave", token, time.Millisecond, 0, true))
	return &op
}

// join gives a fair Acquire its place in the queue: its patience, and a
// ticket drawn from a quorum of the nodes (drawTicket). A draw that misses
// its quorum (nodes down or slow) is made again after the retry delay, as a
// failed attempt is tried again, while ctx lasts; with no retry policy,
// once.
func (k *fair) join(ctx context.Context, c *Client, ac acquireConfig) *quorumError {
	k.patience = ac.patience()
	for failed := 1; ; failed++ {
		qe := c.drawTicket(ctx, k, ac.terms.now(c), max(ac.ttl, ac.fenceHorizon))
		if qe == nil || qe.cause != nil || qe.misconfigured || ac.retry == nil || failed == ac.maxAttempts {
			return qe
		}
		select {
		case <-c.cfg.clock.After(ac.retry.Delay(failed)):
		case <-ctx.Done():
			qe.cause = ctx.Err()
			return qe
		}
	}
}

// nextWait keeps the waiter's place: it tries again within a quarter of its
// patience, and at once when the last release named it first in line but
// it was still refused (the release had not reached every node yet, and
// nobody else will announce anything).
func (k *fair) nextWait(delay time.Duration, first bool) time.Duration {
	if first {
		return wakeSpread
	}
	return min(delay, k.patience/4)
}

func (k *fair) named(payload string) naming {
	switch payload {
	case "":
		return namedNobody
	case k.waiter:
		return namedUs
	}
	return namedAnother
}

// marker is a kind whose waiter leaves a mark on the nodes that refuse it
// between attempts: a fair lock's place in the queue, a writer's mark that
// keeps new readers out.
type marker interface {
	kind
	// unmark takes the waiter's mark back from a node where its won lock
	// was not taken, the key left alone; nil when there is none to take.
	unmark() *nodeOp
}

// leaveTheLine is the end of a won attempt of a kind that marks the nodes:
// it takes the mark back from the nodes where the key was not taken, so
// that it does not outlive the wait there (a fair waiter first in line; a
// writer's mark that would keep readers out of that node until its ttl:
// after a hand-off, nothing else removes it); in the background, in order
// before the lock's later calls. For the other kinds it does nothing.
func (c *Client) leaveTheLine(ctx context.Context, a *acquisition, t tally) {
	m, ok := a.kind.(marker)
	if !ok || t.yes == len(c.nodes) {
		return
	}
	op := m.unmark()
	if op == nil {
		return
	}
	skip := make([]bool, len(t.answers))
	for i, ans := range t.answers {
		skip[i] = ans == holds
	}
	now := func(*tally) bool { return true }
	a.fanOut(context.WithoutCancel(ctx), c, now, skip, *op)
}

// drawTicket draws a fair waiter's ticket: the highest of the ticket
// counters of a quorum of nodes, each incremented. Two waiters whose
// quorums share a node get different tickets from it, and the highest of
// each set keeps them apart unless the highest values tie; the queue then
// orders them by token. Every node ranks waiters by the same ticket, so the
// first in line is the same everywhere.
//
// A counter's next value is the node's clock in microseconds, or one more
// than its last when that is more (prelude.lua), so the nodes' answers
// differ by their clocks' offsets. When every answer is its node's clock
// and the highest is at most ticketSpread above the lowest, a waiter that
// draws later than that gets a higher ticket from any node: nothing more
// is done (waiters closer together are as good as simultaneous).
// Otherwise (a node's clock is ahead, or a counter ran ahead of the clock
// and goes up by one a draw) the counters of a quorum are raised to the
// ticket before the waiter queues: a waiter drawing later, from any
// quorum, then meets a raised counter and gets a higher ticket, rather
// than one equal to ours or below it that could be granted first.
func (c *Client) drawTicket(ctx context.Context, f *fair, tm terms, keep time.Duration) *quorumError {
	q := f.quorum(len(c.nodes))
	t, _ := c.fanOut(ctx, tm, wonAt(q), nil, settlement{}, f.ticketOp(keep))
	if t.yes < q {
		return f.ticketRefused(ctx, "a ticket from", t, len(c.nodes), q)
	}
	lo, clocks := int64(math.MaxInt64), true
	for i, a := range t.answers {
		if a == holds {
			t.values[i], clocks = t.values[i]/10, clocks && t.values[i]%10 == 1
			f.ticket = max(f.ticket, t.values[i])
			lo = min(lo, t.values[i])
		}
	}
	if clocks && f.ticket-lo <= ticketSpread {
		return nil
	}
	at := 0
	skip := make([]bool, len(t.answers))
	for i, a := range t.answers {
		if a == holds && t.values[i] == f.ticket {
			at++
			skip[i] = true
		}
	}
	raised := func(r *tally) bool { return at+r.yes >= q }
	r, _ := c.fanOut(ctx, tm, raised, skip, settlement{}, raiseFenceOn(f.ticketKeys(), f.ticket, keep))
	if !raised(&r) {
		f.ticket = 0
		return f.ticketRefused(ctx, "a ticket stored on", r, len(c.nodes), q-at)
	}
	return nil
}

// ticketSpread is how far apart (in the counters' microseconds) the
// clock values of one ticket draw may be without raising the lower
// counters (see drawTicket).
const ticketSpread = 1000

// ticketRefused is the error of a ticket draw, or of its raise, that missed
// its quorum: yes of the n nodes answered, q were needed.
func (k *fair) ticketRefused(ctx context.Context, what string, t tally, n, q int) *quorumError {
	return &quorumError{sentinel: ErrNotAcquired, detail: fmt.Sprintf("%s: %s %d of %d nodes, quorum %d", k.describe(), what, t.yes, n, q),
		cause: ctx.Err(), nodes: t.errs, heldOn: -1, misconfigured: t.outOfReach(q)}
}

// WithOwner makes the lock reentrant, held by owner: while owner holds it,
// another Acquire with the same owner succeeds at once (a new hold, with its
// own Lock, token and validity), and the key is free again only when every
// hold was released or ended. Holds of another owner are refused. Each hold
// lengthens the key's time to live, never shortens it. The owner must not
// be empty; choose one per holder identity (a worker ID, a request ID), not
// per process. Default: not reentrant.
func WithOwner(owner string) AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		if owner == "" {
			return invalid("empty owner")
		}
		c.owner = owner
		c.kinds = append(c.kinds, "WithOwner")
		return nil
	})
}

// ForRead takes the read side of a read-write lock: any number of readers
// may hold the key at once, but no writer. A reader is refused while a
// writer holds the key or waits for it (see ForWrite). Default: a plain
// lock.
func ForRead() AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		c.role = 'r'
		c.kinds = append(c.kinds, "ForRead")
		return nil
	})
}

// ForWrite takes the write side of a read-write lock: one writer, and no
// reader, at a time. A writer that finds readers marks the key as awaited,
// which keeps new readers out until it gets the lock, gives up, or its mark
// expires after its ttl: a stream of readers cannot starve it. Default: a
// plain lock.
func ForWrite() AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		c.role = 'w'
		c.kinds = append(c.kinds, "ForWrite")
		return nil
	})
}

// WithPermits takes one of permits permits of a semaphore named by the key:
// at most permits holders at once. Every holder must give the same number
// for a key; an acquire with another number than the key's holders gave
// fails at once with an error matching ErrMisconfigured. Each permit expires with its own ttl, so a crashed holder does not
// keep one. A permit is held on more than a majority of the nodes once
// permits > 1: on ⌊permits·N/(permits+1)⌋+1 of them, since with a bare
// majority permits+1 holders could each hold a different majority (see
// docs/kinds.md); so the semaphore tolerates fewer node failures than a
// plain lock. permits must be at least 1. Default: a plain lock.
func WithPermits(permits int) AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		if permits < 1 {
			return invalid("%d permits: a semaphore needs at least 1", permits)
		}
		c.permits = permits
		c.kinds = append(c.kinds, "WithPermits")
		return nil
	})
}

// Fair makes the lock first come, first served across processes: an
// Acquire draws a ticket from a quorum of the nodes, queues with it on
// every node, and the lock goes to the waiter with the lowest ticket. A
// waiter that stops trying (its process died) loses its place on a node
// after its patience, 4s or 8 node timeouts (WithNodeTimeout's, or a tenth
// of the ttl: not lengthened by the round trips) if that is longer, from
// its last attempt there, so it holds the queue up for no longer. A fair
// Acquire tries at least every quarter of its patience (every second with
// the default node timeouts), whatever its retry policy, to keep its
// place. An attempt that took the key on some nodes and failed keeps the
// waiter's place there. TryAcquire with Fair draws a ticket and tries once, and
// leaves the queue when it fails. Default: not fair.
func Fair() AcquireOption {
	return acquireOption(func(c *acquireConfig) error {
		c.fair = true
		c.kinds = append(c.kinds, "Fair")
		return nil
	})
}

// AcquireAll acquires a lock on every key at once, all or nothing: on each
// node one script takes every key if none is held by someone else, so two
// holders of overlapping sets exclude each other, and no holder can wait
// for another while holding part of what that one needs (no deadlock). The
// Lock works as any: Extend and Release act on every key; Keys lists them.
// With WithFencing the fencing token is above every key's counter, and each
// key's counter is raised to it. On a Redis Cluster node the keys must
// hash to one slot.
//
// It returns an error matching ErrInvalidArgument, before any node is
// contacted, for an empty set, an empty or repeated key, a bad ttl, or a
// kind option (a multi-key lock is plain); otherwise as Acquire.
func (c *Client) AcquireAll(ctx context.Context, keys []string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	k, ac, err := c.multiConfig(keys, ttl, opts)
	if err != nil {
		return nil, err
	}
	return c.observed(ctx, k, func(ctx context.Context, attempts *int) (*Lock, error) { return c.inTurn(ctx, k, ac, attempts) })
}

// TryAcquireAll is AcquireAll with exactly one attempt; see TryAcquire.
func (c *Client) TryAcquireAll(ctx context.Context, keys []string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	k, ac, err := c.multiConfig(keys, ttl, opts)
	if err != nil {
		return nil, err
	}
	return c.observed(ctx, k, func(ctx context.Context, attempts *int) (*Lock, error) { return c.tryOnce(ctx, k, ac, attempts) })
}

func (c *Client) multiConfig(keys []string, ttl time.Duration, opts []AcquireOption) (kind, acquireConfig, error) {
	if len(keys) == 0 {
		return nil, acquireConfig{}, invalid("no keys")
	}
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		if k == "" {
			return nil, acquireConfig{}, invalid("key %d is empty", i)
		}
		if seen[k] {
			return nil, acquireConfig{}, invalid("key %q appears twice", k)
		}
		seen[k] = true
	}
	ac, err := c.acquireConfig(keys[0], ttl, opts)
	if err != nil {
		return nil, ac, err
	}
	if len(ac.kinds) > 0 {
		return nil, ac, invalid("%s: a lock on several keys is a plain lock", ac.kinds[0])
	}
	return newMulti(slices.Clone(keys)), ac, nil
}

// Keys returns the locked keys: one, or those given to AcquireAll, in their
// order. It returns nil for a nil Lock.
func (l *Lock) Keys() []string {
	if l == nil {
		return nil
	}
	return slices.Clone(l.kind.keys())
}

// Ticket returns a fair lock's ticket, its place in the queue it waited in:
// waiters are granted the lock in the order of their tickets. It is 0 for
// the other kinds and for a nil Lock.
func (l *Lock) Ticket() uint64 {
	if l == nil {
		return 0
	}
	if f, ok := l.kind.(*fair); ok {
		return uint64(f.ticket)
	}
	return 0
}

// kindFor is the kind of lock the options ask for on key.
func (ac acquireConfig) kindFor(key string) kind {
	switch {
	case ac.owner != "":
		return newReentrant(key, ac.owner)
	case ac.role != 0:
		return newReadWrite(key, ac.role == 'w')
	case ac.permits > 0:
		return newSemaphore(key, ac.permits)
	case ac.fair:
		return newFair(key)
	}
	return plain{key}
}

type acquireConfig struct {
	terms       // of the Acquire's ttl, the same for every attempt
	retry       RetryPolicy
	maxAttempts int // 0: no limit
	fenced      bool
	// fenceHorizon: the Client's WithFenceHorizon
	fenceHorizon time.Duration
	autoRenew    bool
	metadata     string // stored after the token: see WithMetadata

	// the kind of lock (see kinds.go); at most one of these is set
	owner   string // reentrant
	role    byte   // 'r' reader, 'w' writer
	permits int    // semaphore
	fair    bool
	kinds   []string // the kind options given, for the error when several are
}

// checkLease checks a lease of ttl on key and returns its terms.
func (c *Client) checkLease(key string, ttl time.Duration) (terms, error) {
	if key == "" {
		return terms{}, invalid("empty key")
	}
	return c.termsFor(ttl)
}

func (c *Client) acquireConfig(key string, ttl time.Duration, opts []AcquireOption) (acquireConfig, error) {
	ac := acquireConfig{retry: c.cfg.retry, maxAttempts: c.cfg.maxAttempts, fenceHorizon: c.cfg.fenceHorizon}
	var err error
	if ac.terms, err = c.checkLease(key, ttl); err != nil {
		return ac, err
	}
	for _, o := range opts {
		if isNil(o) {
			return ac, invalid("acquire option is nil")
		}
		if err := o.applyAcquire(&ac); err != nil {
			return ac, err
		}
	}
	if len(ac.kinds) > 1 {
		return ac, invalid("%s cannot be combined: a lock is of one kind", strings.Join(ac.kinds, " and "))
	}
	return ac, nil
}
