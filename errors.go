package redlock

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNotAcquired is returned when a lock could not be acquired: fewer than a
	// quorum of nodes took it, its validity was spent before a quorum answered,
	// or the context ended first. In the last case the error also matches the
	// context's error with errors.Is.
	ErrNotAcquired = errors.New("redlock: not acquired")

	// ErrLockLost is returned by Extend when fewer than a quorum of nodes
	// still held the lock's token, and by Release when the lock did not hold
	// until the release (see Release): the lock may have expired and another
	// holder may have taken it, so the work done under it may not have been
	// protected.
	ErrLockLost = errors.New("redlock: lock lost")

	// ErrInvalidArgument is returned, before any node is contacted, for input
	// that can never work: no nodes, a nil or repeated node, an empty key, a
	// ttl that is not positive or not larger than the drift allowance, or an
	// option with a value out of range. The message names the problem.
	ErrInvalidArgument = errors.New("redlock: invalid argument")

	// errReleaseIncomplete heads a release that too many nodes failed to
	// judge; the *NodeError values it joins are what a caller acts on.
	errReleaseIncomplete = errors.New("redlock: release incomplete")
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
func (e *NodeError) Error() string {
	if e.Addr == "" {
		return fmt.Sprintf("redlock: node %d: %v", e.Node, e.Err)
	}
	return fmt.Sprintf("redlock: node %d (%s): %v", e.Node, e.Addr, e.Err)
}

// Unwrap returns the node's error, so that errors.Is sees through it.
func (e *NodeError) Unwrap() error { return e.Err }

// quorumError reports an operation that did not reach its quorum on one line,
// and unwraps to its sentinel, the context's error if the context ended, and
// every node's error.
type quorumError struct {
	sentinel error // ErrNotAcquired, ErrLockLost or errReleaseIncomplete
	detail   string
	cause    error // the context's error, or nil
	nodes    []error
	heldOn   int // a node where another holder had the key, or -1
	// taken: the nodes that answered show one other holder on a quorum:
	// someone else won, and will announce its release
	taken bool
}

func (e *quorumError) Error() string {
	var b strings.Builder
	b.WriteString(e.sentinel.Error())
	b.WriteString(": ")
	b.WriteString(e.detail)
	if e.cause != nil {
		b.WriteString(": ")
		b.WriteString(e.cause.Error())
	}
	for _, n := range e.nodes {
		b.WriteString("; ")
		b.WriteString(n.Error())
	}
	return b.String()
}

func (e *quorumError) Unwrap() []error {
	errs := make([]error, 0, 2+len(e.nodes))
	errs = append(errs, e.sentinel)
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return append(errs, e.nodes...)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}
