// Package transport is what the library needs of a Redis node's client:
// commands sent on one connection, in order, as one pipeline; a pub/sub
// connection; and a few facts about the client. go-redis is the first
// implementation (GoRedis); an adapter in a module of its own implements
// Node for another client. It knows nothing of locks.
package transport

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Node is one Redis node's client. It must be safe for concurrent use.
type Node interface {
	// Do sends cmds on one connection, in order, as one pipeline (a lone
	// command alone), and sets replies[i] to cmds[i]'s reply. It returns
	// once every reply is in or the client gave up on them: at ctx's
	// deadline when Info().CutsAtDeadline, at the client's own read
	// timeout otherwise. A call that failed sets Err of every reply it
	// did not get.
	Do(ctx context.Context, cmds []Cmd, replies []Reply)
	// PubSub returns a new pub/sub connection, made at its first
	// Subscribe.
	PubSub() PubSub
	// Info tells what the client is.
	Info() Info
}

// Cmd is one command: its name and arguments, each a string, a []byte or
// an integer. For EVAL and EVALSHA the keys are arguments 3 to 2+numkeys,
// as Redis reads them (a Cluster client routes by them).
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
// RedisError method, see IsReply) or why the command got none.
type Reply struct {
	Val any
	Err error
}

// ErrorReply is an error reply of the server, as an adapter reports it: its
// RedisError method is what IsReply looks for (go-redis's error replies
// have it too).
type ErrorReply string

func (e ErrorReply) Error() string { return string(e) }

// RedisError marks e as the server's own answer.
func (ErrorReply) RedisError() {}

// redisError is an error reply, as go-redis and ErrorReply mark one.
type redisError interface {
	error
	RedisError()
}

// IsReply reports whether err is the server's own answer (an error reply).
func IsReply(err error) bool {
	_, ok := ReplyText(err)
	return ok
}

// ReplyText returns the message of err's error reply, and whether it has
// one. nil is checked first: nearly every reply is nil, and errors.As
// allocates.
func ReplyText(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	return replyText(err)
}

func replyText(err error) (string, bool) {
	var re redisError
	if !errors.As(err, &re) {
		return "", false
	}
	return re.Error(), true
}

// Int is the reply as an integer.
func (r Reply) Int() (int64, error) {
	if r.Err != nil {
		return 0, r.Err
	}
	return toInt(r.Val)
}

// Ints is the reply as an array of integers.
func (r Reply) Ints() ([]int64, error) {
	vals, err := r.Slice()
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(vals))
	for i, v := range vals {
		if out[i], err = toInt(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Slice is the reply as an array.
func (r Reply) Slice() ([]any, error) {
	if r.Err != nil {
		return nil, r.Err
	}
	vals, ok := r.Val.([]any)
	if !ok {
		return nil, fmt.Errorf("transport: reply %v (%T) is not an array", r.Val, r.Val)
	}
	return vals, nil
}

// Text is the reply as a string.
func (r Reply) Text() (string, error) {
	if r.Err != nil {
		return "", r.Err
	}
	s, ok := r.Val.(string)
	if !ok {
		return "", fmt.Errorf("transport: reply %v (%T) is not a string", r.Val, r.Val)
	}
	return s, nil
}

func toInt(v any) (int64, error) {
	if v, ok := v.(int64); ok {
		return v, nil
	}
	return 0, fmt.Errorf("transport: reply %v (%T) is not an integer", v, v)
}

// Script is a Lua script and its SHA1, by which EVALSHA names it.
type Script struct {
	Src string
	SHA string
	// src and sha are Src and SHA as arguments, boxed once rather than
	// at every call
	src, sha any
}

// NewScript returns src as a Script.
func NewScript(src string) *Script {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	return &Script{Src: src, SHA: sha, src: src, sha: sha}
}

// Eval is the command that runs s on keys with args: EVALSHA, or EVAL with
// the script's text when text is true.
func (s *Script) Eval(text bool, keys []string, args []any) Cmd {
	cmd := make(Cmd, 0, 3+len(keys)+len(args))
	if text {
		cmd = append(cmd, "eval", s.src, len(keys))
	} else {
		cmd = append(cmd, "evalsha", s.sha, len(keys))
	}
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	return append(cmd, args...)
}

// NoScript reports whether err is a NOSCRIPT answer: the node does not
// hold the script (yet). nil is checked first: nearly every reply is nil.
func NoScript(err error) bool {
	msg, ok := ReplyText(err)
	return ok && strings.HasPrefix(strings.TrimPrefix(msg, "ERR "), "NOSCRIPT")
}

// PubSub is one pub/sub connection. Its methods other than Close are
// called from one goroutine at a time.
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
