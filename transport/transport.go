// Package transport is the seam between the redlock library and a Redis
// client: what the library needs of one node's client. go-redis is the
// first implementation (GoRedis, which redlock.New uses); an adapter in a
// module of its own implements Node for another client and hands its
// Nodes to redlock.NewOver (github.com/quorumlock/redlock/rueidisredlock
// does so for rueidis). The package knows nothing of locks: it carries
// commands and replies. Its names follow semantic versioning with the
// library's module.
//
// # What an adapter guarantees
//
// Concurrency: a Node is safe for concurrent use; the library calls Do
// from many goroutines at once. Info's answer does not change.
//
// Ordering: the commands of one Do reach the server in their order, on
// one connection (a Cluster client: on one per server their keys route
// to), as one pipeline (a lone command alone), so that the
// server runs them in that order and, when Info().OneConnection, a WAIT
// among them confirms the writes before it. The library orders a node's
// calls across Do itself: a call that must follow another is made once
// the other's Do returned. So Do returns only once each of its commands
// was answered or given up on, and a command is never sent (or sent
// again) after its Do returned. Within Do, an adapter may send a call
// again on another connection when the first broke before any reply (the
// library's scripts are idempotent for their token).
//
// Deadlines: the library calls Do under a context whose deadline is the
// node timeout. A client that cuts calls at that deadline says so
// (Info().CutsAtDeadline); one that does not returns at its own read
// timeout. Either way Do returns in bounded time: a Do that never returns
// holds up every later call to its node that must follow it.
//
// Errors: every Reply that Do did not get carries why in Err. The
// server's own error reply is an error whose RedisError method marks it
// (ErrorReply, or go-redis's own error replies), so that IsReply reports
// true; a timeout is context.DeadlineExceeded or a net.Error whose Timeout
// is true; a nil reply (a missing key) is the zero Reply, not an error.
package transport

import (
	"context"
	"errors"
)

// Node is one Redis node's client. See the package doc for what an
// implementation guarantees.
type Node interface {
	// Do sends cmds on one connection, in order, as one pipeline (a lone
	// command alone), and sets replies[i] to cmds[i]'s reply (len(replies)
	// is len(cmds)). It returns once every reply is in or the client gave
	// up on them: at ctx's deadline when Info().CutsAtDeadline, at the
	// client's own read timeout otherwise. A call that failed sets Err of
	// every reply it did not get. The commands are the call's own: Do (or
	// a hook of the client's) may change them.
	Do(ctx context.Context, cmds []Cmd, replies []Reply)
	// PubSub returns a new pub/sub connection, made at its first
	// Subscribe.
	PubSub() PubSub
	// Info tells what the client is.
	Info() Info
}

// Cmd is one command: its name and arguments, each a string, a []byte or
// an integer. For EVAL and EVALSHA the keys are
// arguments 3 to 2+numkeys, as Redis reads them (a Cluster client routes
// by them).
type Cmd []any

// Info is what a Node's client is.
type Info struct {
	// Addr is what the client connects to, for messages and to find two
	// nodes given twice; "" when it does not say.
	Addr string
	// CutsAtDeadline: Do ends at its context's deadline, whatever the
	// node does (go-redis's ContextTimeoutEnabled).
	CutsAtDeadline bool
	// Cluster: a Redis Cluster client, which routes each command by its
	// keys (a pipeline's keys may span slots, and so servers); the server
	// is named by its cluster's node IDs.
	Cluster bool
	// OneConnection: Do sends its commands on one connection, so that a
	// WAIT confirms the writes before it (a Cluster or Ring client routes
	// a keyless WAIT to a server of its choosing).
	OneConnection bool
	// ID is comparable and the same for two Nodes of one client; nil
	// when the client is not comparable.
	ID any
}

// Reply is a command's reply: Val is an int64, a string, a []any of
// these, or nil; Err is the server's error reply (an error with a
// RedisError method, see IsReply) or why the command got none. A nil
// reply is the zero Reply.
type Reply struct {
	Val any
	Err error
}

// ErrorReply is an error reply of the server, as an adapter reports it: its
// RedisError method is what IsReply looks for (go-redis's error replies
// have it too).
type ErrorReply string

// Error returns the server's message, as it sent it.
func (e ErrorReply) Error() string { return string(e) }

// RedisError marks e as the server's own answer.
func (ErrorReply) RedisError() {}

// IsReply reports whether err is, or wraps, the server's own answer (an
// error reply): an error with a RedisError method.
func IsReply(err error) bool {
	if err == nil { // nearly every reply: errors.As allocates
		return false
	}
	var re interface {
		error
		RedisError()
	}
	return errors.As(err, &re)
}

// PubSub is one pub/sub connection. Subscribe and Unsubscribe are called
// from one goroutine, Receive from another, at the same time; Close may
// be called while Receive waits, and makes it return.
type PubSub interface {
	// Subscribe and Unsubscribe send the commands; their confirmations
	// come through Receive.
	Subscribe(ctx context.Context, channels ...string) error
	Unsubscribe(ctx context.Context, channels ...string) error
	// Receive returns the next message or confirmation. After a failure
	// the connection is made again, with its channels, at the next
	// Receive; once Close was called it returns ErrClosed.
	Receive(ctx context.Context) (Message, error)
	Close() error
}

// Message is what a pub/sub connection received.
type Message struct {
	// Kind is "message", or "subscribe" or "unsubscribe" for a
	// confirmation.
	Kind    string
	Channel string
	Payload string
}

// ErrClosed is what Receive returns once its connection was closed.
var ErrClosed = errors.New("transport: pub/sub connection closed")
