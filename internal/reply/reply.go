// Package reply reads what a node's call ended with: its value (Int, Ints,
// Slice, Text), or its error, classified: the server's own error reply or
// no reply, a timeout, a passing state, NOSCRIPT, or an error that
// retrying cannot cure (with what to do about it). It knows nothing of
// locks.
package reply

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"

	"github.com/quorumlock/redlock/transport"
)

// IsReply reports whether err is the server's own answer (an error reply).
func IsReply(err error) bool { return transport.IsReply(err) }

// Message returns the message of err's error reply, and whether it has
// one. nil is checked first: nearly every reply is nil, and errors.As
// allocates.
func Message(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	var re interface {
		error
		RedisError()
	}
	if !errors.As(err, &re) {
		return "", false
	}
	return re.Error(), true
}

// NoScript reports whether err is a NOSCRIPT answer: the node does not
// hold the script (yet).
func NoScript(err error) bool {
	msg, ok := Message(err)
	return ok && strings.HasPrefix(strings.TrimPrefix(msg, "ERR "), "NOSCRIPT")
}

// Int is r as an integer.
func Int(r transport.Reply) (int64, error) {
	if r.Err != nil {
		return 0, r.Err
	}
	return toInt(r.Val)
}

// Ints is r as an array of integers.
func Ints(r transport.Reply) ([]int64, error) {
	vals, err := Slice(r)
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

// Slice is r as an array.
func Slice(r transport.Reply) ([]any, error) {
	if r.Err != nil {
		return nil, r.Err
	}
	vals, ok := r.Val.([]any)
	if !ok {
		return nil, fmt.Errorf("transport: reply %v (%T) is not an array", r.Val, r.Val)
	}
	return vals, nil
}

// Text is r as a string.
func Text(r transport.Reply) (string, error) {
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

// TimedOut reports whether err is a call that got no reply in time: a
// context deadline, or a socket timeout (a client's own ReadTimeout).
func TimedOut(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Transient reports whether err is a server's error reply that tells of a
// passing state (LOADING, BUSY, TRYAGAIN, MASTERDOWN, CLUSTERDOWN).
func Transient(err error) bool {
	msg, ok := Message(err)
	if !ok {
		return false
	}
	prefix, _, _ := strings.Cut(msg, " ")
	switch prefix {
	case "LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN":
		return true
	}
	return false
}

// Hint returns what to do about err when it is a server's error reply that
// retrying cannot cure (a configuration error), and "" otherwise: no
// reply, a timeout, a passing state, or an error a retry may cure.
func Hint(err error) string {
	msg, ok := Message(err)
	if !ok {
		return ""
	}
	prefix, _, _ := strings.Cut(msg, " ")
	if prefix == "ERR" {
		return errHint(msg)
	}
	return hints[prefix]
}

// hints is what to do about a server's error reply, by its prefix, when
// retrying cannot cure it.
var hints = map[string]string{
	"NOAUTH":       "a configuration error: set the node's password (and user) in its client's options",
	"WRONGPASS":    "a configuration error: set the node's password (and user) in its client's options",
	"NOPERM":       "a configuration error: the node's ACL user lacks a permission redlock needs (EVALSHA, EVAL, SCRIPT, PUBLISH, SUBSCRIBE and the lock's keys)",
	"READONLY":     "a configuration error: the node is a replica; give redlock masters only",
	"MOVED":        "a configuration error: the node is a Redis Cluster master; reach it with a redis.ClusterClient",
	"ASK":          "a configuration error: the node is a Redis Cluster master; reach it with a redis.ClusterClient",
	"CROSSSLOT":    "a configuration error: the keys hash to different Cluster slots; give them one hash tag, as in {order}:a and {order}:b",
	"WRONGTYPE":    "a configuration error: the key holds a value that is not a lock; choose another key",
	"WRONGPERMITS": "a configuration error: every holder of a semaphore must give the same WithPermits for its key",
	"NOSCRIPT":     "a configuration error: the node does not keep the lock's scripts; it must allow SCRIPT LOAD and EVAL",
}

// errHint is Hint for a generic ERR reply msg: the few that retrying
// cannot cure are told by their text.
func errHint(msg string) string {
	switch {
	case strings.HasPrefix(msg, "ERR Protocol error: unauthenticated"):
		// A client that has not logged in may not send long commands:
		// the server answers this rather than NOAUTH.
		return "a configuration error: the node requires a password; set it (and the user) in the node's client options"
	case strings.HasPrefix(msg, "ERR unknown command"), strings.HasPrefix(msg, "ERR unknown subcommand"):
		return "a configuration error: the node does not know a command redlock needs (EVALSHA, EVAL); it must be a Redis server that runs Lua scripts"
	}
	return ""
}

// luaNoise is what Redis adds to an error raised inside a script: the
// script's SHA1 and the line, which say nothing to a lock's user.
var luaNoise = regexp.MustCompile(`\s*script: [0-9a-f]{40}, on @user_script:\d+\.?|Error running script \(call to f_[0-9a-f]{40}\): @user_script:\d+: |@user_script:\d+: `)

// Tidy removes a script's noise from a node's error message.
func Tidy(msg string) string { return luaNoise.ReplaceAllString(msg, "") }
