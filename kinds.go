package redlock

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/wait"
)

// A lock's kind is how it is stored on each node and what it excludes.
// Every kind is acquired, extended and released on a quorum as the plain
// lock is (see attempt and Lock); the kind supplies the per-node scripts
// and, for the semaphore, the quorum. docs/kinds.md describes each kind.

// kind is what a Lock is on the nodes.
type kind interface {
	// keys are the locked keys; the first names the lock in messages.
	keys() []string
	// describe names the lock in messages, e.g. `read lock "k"`.
	describe() string
	// quorum is how many of n nodes must hold the lock.
	quorum(n int) int
	// keep: how long fencing counters are kept (see scripted.op)
	acquire(token string, ttl, keep time.Duration) nodeOp
	extend(token string, ttl time.Duration) nodeOp
	// release gives the lock up and announces it on its release channels;
	// a kind handed over also takes the tokens of the lock's run of
	// hand-offs left behind, when run is not "" (see runOf).
	release(token, run string) nodeOp
	// drop undoes a failed attempt, without announcing it (except a
	// reader's, which may leave the key free for a waiting writer).
	drop(token string) nodeOp
	// leave is sent when an Acquire gives up for good: it drops what the
	// waiter left on the nodes (a writer's mark, a place in a fair queue);
	// nil when there is nothing.
	leave(token string) *nodeOp
	// fenceKeys are the fencing counters of the locked keys.
	fenceKeys() []string
	// channels are where its releases are announced.
	channels() []string
	// name names the kind in Events: plain, reentrant, read, write,
	// semaphore, multi-key or fair.
	name() string
	// turns names the local queue in which the Client's goroutines that
	// want the lock wait for it (see localqueue.go): for the plain lock, a
	// writer and a multi-key lock; "" for the others, whose holds coexist
	// (readers, permits, an owner's holds) or are ordered on the nodes (fair).
	turns() string
}

// waitsInLine is a kind whose waiter keeps a place in a queue on the nodes
// across the attempts of one Acquire (the fair lock).
type waitsInLine interface {
	kind
	// join gives the waiter its place before the first attempt: once when
	// ac.retry is nil, else after its delays while ctx lasts (at most
	// ac.maxAttempts draws when set).
	join(ctx context.Context, c *Client, ac acquireConfig) *quorumError
	// linePatience is how long the waiter keeps its place in the queue
	// without trying again (see wait.Next).
	linePatience() time.Duration
	// named tells whom a release message names first in line.
	named(payload string) wait.Naming
}

// plain is the plain lock: the key holds the token.
type plain struct{ key string }

func (k plain) keys() []string      { return []string{k.key} }
func (k plain) describe() string    { return strconv.Quote(k.key) }
func (k plain) name() string        { return "plain" }
func (k plain) turns() string       { return "plain\x00" + k.key }
func (k plain) quorum(n int) int    { return engine.QuorumOf(n) }
func (k plain) fenceKeys() []string { return []string{fenceKey(k.key)} }
func (k plain) channels() []string  { return []string{releaseChannel(k.key)} }
func (k plain) acquire(token string, ttl, keep time.Duration) nodeOp {
	return acquireOn(k.key, token, ttl, keep)
}
func (k plain) extend(token string, ttl time.Duration) nodeOp { return extendOn(k.key, token, ttl) }
func (k plain) release(token, run string) nodeOp              { return releaseOn(k.key, token, run) }
func (k plain) drop(token string) nodeOp                      { return dropOn(k.key, token) }
func (k plain) leave(string) *nodeOp                          { return nil }
func (k plain) handOff(token, from, run string, ttl, keep time.Duration) nodeOp {
	return handOffOn(k.key, token, from, run, ttl, keep)
}

// scripted is a kind whose operations are one script, given the operation's
// name; see the kind_*.lua files for the arguments.
type scripted struct {
	script *nodeio.Script
	lock   []string // the keys the script works on, fencing counters apart
	fences []string // the fencing counters, appended to lock when fenced
	chans  []string
	extra  []any // the kind's own arguments, after the common five
}

// op is the script's operation name; keep is how long its fencing
// counters are kept once the node's clock has passed them
// (acquireConfig.counterKeep; ARGV[5]), 0 for an operation that draws none.
func (s scripted) op(name, token string, ttl, keep time.Duration, announce bool) nodeOp {
	keys := s.lock
	if keep > 0 {
		keys = append(append([]string(nil), s.lock...), s.fences...)
	}
	channel := ""
	if announce && len(s.chans) > 0 {
		channel = s.chans[0]
	}
	args := append([]any{name, token, engine.PXMillis(ttl), channel, engine.PXMillis(keep)}, s.extra...)
	op := nodeOp{Script: s.script, Keys: keys, Args: args, Holds: name == "extend"}
	switch name {
	case "acquire":
		op.Shape, op.Holds, op.Takes = nodeio.Grant, true, true
	case "handoff":
		op.Shape, op.Holds, op.Takes = nodeio.HandOff, true, true
	}
	return op
}

// The operations of a scripted kind; the kinds embed scripted and override
// what differs.
func (s scripted) acquire(token string, ttl, keep time.Duration) nodeOp {
	return s.op("acquire", token, ttl, keep, false)
}
func (s scripted) extend(token string, ttl time.Duration) nodeOp {
	return s.op("extend", token, ttl, 0, false)
}
func (s scripted) release(token, _ string) nodeOp {
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
func (k reentrant) quorum(n int) int { return engine.QuorumOf(n) }

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
func (k multi) quorum(n int) int { return engine.QuorumOf(n) }
func (k multi) turns() string {
	return "multi\x00" + strings.Join(slices.Sorted(slices.Values(k.ks)), "\x00")
}

// The multi-key script announces on every key's channel; its ARGV[4] is a
// flag rather than one channel.
func (k multi) release(token, run string) nodeOp {
	op := k.scripted.release(token, "")
	op.Args[3] = "1"
	op.Args = append(op.Args, "", run)
	return op
}

// handOff takes every key from the holder of from, or from the run's
// tokens left behind (kind_multi.lua).
func (k multi) handOff(token, from, run string, ttl, keep time.Duration) nodeOp {
	op := k.scripted.op("handoff", token, ttl, keep, false)
	op.Args = append(op.Args, from, run)
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
// (K+1)·q ≤ K·n, which the smallest q with (K+1)·q > K·n rules out (with
// n = 3 and K = 2, three holders could each hold two nodes under a
// majority). From K = n on, that is every node (and K·n could overflow).
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
func (k readWrite) quorum(n int) int { return engine.QuorumOf(n) }
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

// drop undoes a reader's failed attempt with an announcement when it
// leaves the key free: a writer refused on that node may be waiting for
// it. A writer's failed attempt needs none: its mark keeps readers out.
func (k readWrite) drop(token string) nodeOp {
	return k.op("drop", token, time.Millisecond, 0, !k.writer)
}

// handOff takes a write lock from the writer holding from, or from the
// run's tokens left behind (kind_rw.lua). Only writers take local turns,
// so only a writer is handed over.
func (k readWrite) handOff(token, from, run string, ttl, keep time.Duration) nodeOp {
	op := k.op("handoff", token, ttl, keep, true)
	op.Args = append(op.Args, from, run)
	return op
}

// release also deletes a writer's run's tokens left behind (kind_rw.lua).
func (k readWrite) release(token, run string) nodeOp {
	op := k.scripted.release(token, "")
	if k.writer {
		op.Args = append(op.Args, "", run)
	}
	return op
}

// marker is a kind whose waiter leaves a mark on the nodes that refuse it
// (a fair lock's place in the queue, a writer's mark keeping readers out).
type marker interface {
	kind
	// unmark takes the waiter's mark back from a node where its won lock
	// was not taken, the key left alone; nil when there is none to take.
	unmark() *nodeOp
}

// leaveTheLine ends a won attempt of a kind that marks the nodes: it takes
// the mark back, in the background and in order before the lock's later
// calls, from the nodes where the key was not taken, so that it does not
// outlive the wait there (a fair waiter first in line; a writer's mark,
// which after a hand-off nothing else removes). Other kinds: nothing.
func (c *Client) leaveTheLine(ctx context.Context, a *acquisition, t engine.Tally) {
	m, ok := a.kind.(marker)
	if !ok || t.Yes == len(c.nodes) {
		return
	}
	op := m.unmark()
	if op == nil {
		return
	}
	skip := make([]bool, len(t.Answers))
	for i, ans := range t.Answers {
		skip[i] = ans == engine.Holds
	}
	now := func(*engine.Tally) bool { return true }
	a.fanOut(context.WithoutCancel(ctx), c, now, skip, *op)
}
