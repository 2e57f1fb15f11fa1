package transport_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/quorumlock/redlock/transport"
)

// TestIsReply: an adapter's error reply is the server's answer, also
// wrapped; no error, and an error of the connection, are not.
func TestIsReply(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("connection reset"), false},
		{transport.ErrorReply("NOSCRIPT No matching script"), true},
		{fmt.Errorf("node 2: %w", transport.ErrorReply("READONLY")), true},
	} {
		if got := transport.IsReply(tc.err); got != tc.want {
			t.Errorf("IsReply(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
