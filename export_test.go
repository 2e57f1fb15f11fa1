package redlock

import (
	"fmt"
	"time"

	"github.com/quorumlock/redlock/internal/engine"
)

// SetNodeTimeoutFloor sets the least a derived node timeout is, for the
// tests of a package (see minDerivedNodeTimeout), and returns the former.
func SetNodeTimeoutFloor(d time.Duration) time.Duration {
	old := engine.MinDerivedNodeTimeout
	engine.MinDerivedNodeTimeout = d
	return old
}

// SetGraceFloor sets the least time the nodes yet to answer are waited
// for once an outcome is known (engine.GraceFloor), for the tests of a
// package, and returns the former.
func SetGraceFloor(d time.Duration) time.Duration {
	old := engine.GraceFloor
	engine.GraceFloor = d
	return old
}

// WaitSettled waits until the writes of the lock's last operation (acquire,
// extend or release) that were still under way when it returned have landed
// or timed out, so that tests can look at every node.
func WaitSettled(l *Lock) {
	l.op.Lock()
	settled := l.settled
	l.op.Unlock()
	for i := range settled.Done {
		settled.WaitNode(i)
	}
}

// QueuedKeys returns how many keys have goroutines holding or waiting for
// their local turn in c.
func QueuedKeys(c *Client) int {
	return c.queues.Keys()
}

// QueuedCalls returns how many calls wait in node i's pipe behind the send
// in flight.
func QueuedCalls(c *Client, i int) int {
	n, _ := c.nodes[i].IO.Queued()
	return n
}

// PipesIdle reports whether no node's pipe has a send in flight or a call
// queued.
func PipesIdle(c *Client) bool {
	for _, n := range c.nodes {
		if _, busy := n.IO.Queued(); busy {
			return false
		}
	}
	return true
}

// LocalWaiters returns how many goroutines of c wait in Acquire for the
// local turn of a plain lock on key.
func LocalWaiters(c *Client, key string) int {
	return localWaiters(c, plain{key}.turns())
}

// LocalWriters returns how many goroutines of c wait in Acquire for the
// local turn of a write lock on key.
func LocalWriters(c *Client, key string) int {
	return localWaiters(c, newReadWrite(key, true).turns())
}

// LocalMultiWaiters returns how many goroutines of c wait in AcquireAll
// for the local turn of a multi-key lock on keys.
func LocalMultiWaiters(c *Client, keys ...string) int {
	return localWaiters(c, newMulti(keys).turns())
}

func localWaiters(c *Client, queue string) int { return c.queues.Waiting(queue) }

// ScriptSource returns the text the Client runs for a script file of
// lua/: the prelude's functions it uses, then the file.
func ScriptSource(file string) string { return scriptSource(file) }

// Subscriber reports whether c's subscriber of node i runs, and whether it
// is deaf (its connection stopped receiving).
func Subscriber(c *Client, i int) (running, deaf bool) {
	return c.subscribers[i].Running(), c.subscribers[i].Deaf()
}

// Failing reports whether c takes node i for failing (it did not answer
// an operation that waited for it within the node timeout).
func Failing(c *Client, i int) bool { return c.e.Failing(i) }

// RenewMargin returns how long before the end of its validity the lock is
// declared lost when its renewals fail, as its lease is now.
func RenewMargin(l *Lock) time.Duration {
	tm, _ := l.lease()
	return tm.RenewMargin()
}

// RenewedLeft returns the keys of the locks of c still renewed by its
// scheduler, or watched (Done) with more than a second of their validity
// left or on a Clock a test moves (which may never move again): none is
// left once every lock a test took is released or lost.
func RenewedLeft(c *Client) []string {
	_, queued := c.sched.Snapshot()
	var keys []string
	for _, q := range queued {
		_, real := c.cfg.clock.(systemClock)
		if q.Renewed || q.Watched && (!real || q.Lock.deadlineNow().Sub(c.cfg.clock.Now()) > time.Second) {
			keys = append(keys, q.Lock.key)
		}
	}
	return keys
}

// Scheduled describes c's scheduler: whether its goroutine runs, and each
// lock it has queued (key, renewed or watched, time left to its deadline
// on the Client's Clock).
func Scheduled(c *Client) (running bool, locks []string) {
	running, queued := c.sched.Snapshot()
	for _, q := range queued {
		locks = append(locks, fmt.Sprintf("%q renewed=%v watched=%v left=%v", q.Lock.key, q.Renewed, q.Watched, q.Lock.deadlineNow().Sub(c.cfg.clock.Now())))
	}
	return running, locks
}

// Tick starts a ticker of every d on clock (see ticker): its channel and
// its Stop.
func Tick(clock Clock, d time.Duration) (<-chan time.Time, func()) {
	t := newTicker(clock, d)
	return t.c, t.Stop
}

// deadlineNow is the lock's deadline as its lease is now.
func (l *Lock) deadlineNow() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline(l.terms, l.until)
}
