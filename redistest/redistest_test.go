package redistest

import (
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNode_expiresKeys: a key set with a TTL is gone once the TTL has
// passed on the wall clock, with nobody calling FastForward.
func TestNode_expiresKeys(t *testing.T) {
	n, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.Set("k", "v"); err != nil {
		t.Fatal(err)
	}
	n.SetTTL("k", 50*time.Millisecond)
	// Wide: the key goes 50–52 ms after it was set on an idle machine.
	for deadline := time.Now().Add(5 * time.Second); n.Exists("k"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a key with a 50 ms TTL is still there after 5 s")
		}
	}
}

// TestNode_closeTwice: Close stops the node and its clock, and may be
// called again (the demo closes a node to fail it, then again on exit).
func TestNode_closeTwice(t *testing.T) {
	n, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	addr := n.Addr()
	n.Close()
	n.Close()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("a closed node still accepts connections")
	}
}
