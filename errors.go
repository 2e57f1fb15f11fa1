package redlock

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/internal/reply"
)

var (
	// ErrNotAcquired is returned when a lock could not be acquired: fewer than a
	// quorum of nodes took it, its validity was spent before a quorum answered,
	// or the context ended first. In the last case the error also matches the
	// context's error with errors.Is.
	ErrNotAcquired = errors.New("redlock: not acquired")

	// ErrTaken matches, beside ErrNotAcquired, the error of an acquire
	// whose last attempt a quorum of the nodes refused because another
	// holder has the key there: nobody can win it until that holder, or
	// those holders, let go. The message says on how many nodes, and names
	// the holder when one holder has it on a quorum (by its token's first
	// characters, as `redis-cli GET key` shows them). It does not match when
	// nodes failed instead, nor when neither the refusals nor the failures
	// make a quorum (some nodes held elsewhere, others down): each failed
	// node is then a *NodeError in the error.
	ErrTaken = errors.New("redlock: taken")

	// ErrLockLost is returned by Extend when a majority of the nodes
	// answered that they no longer hold the lock's token, or its validity
	// is over, and by Release when the lock did not hold until the release:
	// another holder may have taken it, so the work done under it may not
	// have been protected. A failure that shows neither (nodes that fail or
	// do not answer) gives ErrNotConfirmed instead. Do, Resume,
	// Election.Campaign and Leadership.Proclaim return it too (see each).
	ErrLockLost = errors.New("redlock: lock lost")

	// ErrInvalidArgument is returned for input that can never work, such
	// as no nodes, a nil or repeated node, an empty key, a ttl that is not
	// positive or not larger than the drift allowance, an option with a
	// value out of range, a nil fn, a value longer than MaxMetadata, or a
	// fencing token 0. New, Acquire, TryAcquire, AcquireAll, TryAcquireAll,
	// Extend, Do, Resume, Inspect, Election, Election.Campaign,
	// Leadership.Proclaim, FencedSet and FencedGet return it, before any
	// node is contacted; Resume also returns it after reading the nodes when
	// the key holds the token in another kind of lock (nothing is written).
	// The message names the problem. Every function and method that takes
	// a context returns it for a nil one, before doing anything (Release,
	// Resign, Leader, Drain and Election.Run too); Election.Observe, which
	// returns no error, panics on the caller's goroutine instead.
	ErrInvalidArgument = engine.ErrInvalidArgument

	// ErrMisconfigured matches an error in which a node failed for a reason
	// that retrying cannot cure, so that the setup must be fixed: a node
	// that needs a password or another user (NOAUTH, WRONGPASS, NOPERM), a
	// replica given as a node (READONLY), a Redis Cluster master given as a
	// plain client (MOVED, ASK), keys that hash to different slots
	// (CROSSSLOT), a key that holds a value of another type (WRONGTYPE), a
	// semaphore asked for with another permit count than its holders gave
	// (WRONGPERMITS), a server that does not run the scripts (NOSCRIPT
	// after a reload, an unknown command), or two nodes that reach one
	// server (see New). Each such node's *NodeError says what to change.
	//
	// When such nodes leave the quorum out of reach, Acquire returns at once
	// with an error matching both ErrNotAcquired and ErrMisconfigured. When
	// the others still make a quorum, the lock is taken, and each
	// misconfigured node is logged as a warning and reported as an
	// OpMisconfigured event, once until it takes a lock again.
	ErrMisconfigured = engine.ErrMisconfigured

	// ErrNotConfirmed is returned by Extend and Release when too few nodes
	// answered to confirm the operation on a quorum, and too few to show
	// the lock lost: nodes failed or did not answer in time; Resume,
	// Election.Campaign and Leadership.Proclaim return it likewise (see
	// each). After Extend the lock stays valid until its Until (no node
	// ever shortens a key), Done stays open (for a lock acquired
	// WithAutoRenew, until the renewal margin before Until), and Extend may
	// be tried again. After Release, the keys the failed nodes may still
	// hold expire with the ttl. The error joins each failed node's
	// *NodeError.
	ErrNotConfirmed = errors.New("redlock: not confirmed")
)

// NodeError is one node's failure during an operation. The errors that
// Acquire, TryAcquire, Extend and Release return join one NodeError for every
// node that failed or did not answer in time; find them with errors.As.
type NodeError struct {
	Node int    // index of the node in the slice given to New
	Addr string // the node's address, when its client reveals one
	Err  error  // what went wrong
}

// Error names the node, by index and address, and what went wrong.
func (e *NodeError) Error() string { return e.describe(reply.Tidy(e.Err.Error())) }

func (e *NodeError) describe(what string) string {
	if e.Addr == "" {
		return fmt.Sprintf("redlock: node %d: %s", e.Node, what)
	}
	return fmt.Sprintf("redlock: node %d (%s): %s", e.Node, e.Addr, what)
}

// Unwrap returns the node's error, so that errors.Is sees through it.
func (e *NodeError) Unwrap() error { return e.Err }

// quorumError reports an operation that did not reach its quorum on one line,
// and unwraps to its sentinel, the context's error if the context ended, and
// every node's error.
type quorumError struct {
	sentinel error // ErrNotAcquired, ErrLockLost or ErrNotConfirmed
	detail   string
	cause    error // the context's error, or nil
	nodes    []error
	heldOn   int // a node where another holder had the key, or -1
	// taken: one other holder (holder, as the scripts name it) shows on a
	// quorum: it won, and will announce its release
	taken  bool
	holder nodeio.Holder
	// elsewhere: a quorum answered that other holders have the key (ErrTaken)
	elsewhere bool
	// misconfigured: errors that retrying cannot cure put the quorum out
	// of reach
	misconfigured bool
	// silent: no node answered within the node timeout
	silent bool
	// unreachable: so many nodes failed (not refused) that no quorum forms
	unreachable bool
}

// final reports whether an attempt that failed with e cannot be bettered
// by another: the context ended, or the Client is misconfigured.
func (e *quorumError) final() bool { return e.cause != nil || e.misconfigured }

// Error says what the operation found, then each failed node in the
// order of the nodes given to New, and each hint once, naming the nodes it
// applies to.
func (e *quorumError) Error() string {
	var b strings.Builder
	b.WriteString(e.sentinel.Error())
	b.WriteString(": ")
	b.WriteString(e.detail)
	if e.cause != nil {
		b.WriteString(": ")
		b.WriteString(e.cause.Error())
	}
	nodes := slices.Clone(e.nodes)
	slices.SortStableFunc(nodes, func(x, y error) int { return cmp.Compare(nodeIndex(x), nodeIndex(y)) })
	var hints []string             // in the order first met
	whose := map[string][]string{} // by hint: the nodes it applies to
	for _, n := range nodes {
		b.WriteString("; ")
		var ne *NodeError
		var mc *engine.Misconfiguration
		if !errors.As(n, &ne) || !errors.As(ne.Err, &mc) {
			b.WriteString(n.Error())
			continue
		}
		b.WriteString(ne.describe(reply.Tidy(mc.Err.Error())))
		if _, seen := whose[mc.Hint]; !seen {
			hints = append(hints, mc.Hint)
		}
		whose[mc.Hint] = append(whose[mc.Hint], strconv.Itoa(ne.Node))
	}
	for _, h := range hints {
		fmt.Fprintf(&b, " (%s, node%s %s)", h, plural(len(whose[h])), strings.Join(whose[h], ", "))
	}
	return b.String()
}

// nodeIndex is the node an error of a quorumError is about (its
// *NodeError), or -1.
func nodeIndex(err error) int {
	var ne *NodeError
	if errors.As(err, &ne) {
		return ne.Node
	}
	return -1
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func (e *quorumError) Unwrap() []error {
	errs := make([]error, 0, 3+len(e.nodes))
	errs = append(errs, e.sentinel)
	if e.elsewhere {
		errs = append(errs, ErrTaken)
	}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return append(errs, e.nodes...)
}
