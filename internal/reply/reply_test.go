package reply

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// serverError is a server's error reply, as go-redis returns one.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

var _ redis.Error = serverError("")

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err                        error
		isReply, timedOut, passing bool
		hint                       string // a word the hint must hold; "" for none
	}{
		{err: serverError("NOAUTH Authentication required."), isReply: true, hint: "password"},
		{err: serverError("WRONGPASS invalid username-password pair"), isReply: true, hint: "password"},
		{err: serverError("NOPERM this user has no permissions"), isReply: true, hint: "ACL"},
		{err: serverError("READONLY You can't write against a read only replica."), isReply: true, hint: "replica"},
		{err: serverError("MOVED 3999 127.0.0.1:6381"), isReply: true, hint: "Cluster"},
		{err: serverError("CROSSSLOT Keys in request don't hash to the same slot"), isReply: true, hint: "hash tag"},
		{err: serverError("WRONGTYPE Operation against a key holding the wrong kind of value"), isReply: true, hint: "not a lock"},
		{err: serverError("ERR unknown command 'EVALSHA'"), isReply: true, hint: "Lua"},
		{err: serverError("ERR Protocol error: unauthenticated multibulk length"), isReply: true, hint: "password"},
		{err: serverError("LOADING Redis is loading the dataset in memory"), isReply: true, passing: true},
		{err: serverError("BUSY Redis is busy running a script"), isReply: true, passing: true},
		{err: serverError("ERR something else"), isReply: true},
		{err: fmt.Errorf("wrapped: %w", serverError("NOSCRIPT No matching script")), isReply: true, hint: "SCRIPT LOAD"},
		{err: context.DeadlineExceeded, timedOut: true},
		{err: fmt.Errorf("read: %w", os.ErrDeadlineExceeded), timedOut: true},
		{err: errors.New("connection refused")},
		{err: nil},
	} {
		if got := IsReply(tc.err); got != tc.isReply {
			t.Errorf("IsReply(%v) = %v", tc.err, got)
		}
		if got := TimedOut(tc.err); got != tc.timedOut {
			t.Errorf("TimedOut(%v) = %v", tc.err, got)
		}
		if got := Transient(tc.err); got != tc.passing {
			t.Errorf("Transient(%v) = %v", tc.err, got)
		}
		hint := Hint(tc.err)
		if (hint == "") != (tc.hint == "") || !strings.Contains(hint, tc.hint) {
			t.Errorf("Hint(%v) = %q, want one that says %q", tc.err, hint, tc.hint)
		}
	}
}

func TestTidy(t *testing.T) {
	msg := "ERR user_script:1: WRONGPERMITS script: 0123456789abcdef0123456789abcdef01234567, on @user_script:12."
	if got := Tidy(msg); strings.Contains(got, "0123456789abcdef") || strings.Contains(got, "@user_script") {
		t.Fatalf("Tidy left the script's noise: %q", got)
	}
}
