package leaktest

import (
	"strings"
	"testing"
	"time"
)

func parked(stop <-chan struct{}) { <-stop }

func TestLeftover(t *testing.T) {
	stop := make(chan struct{})
	go parked(stop)
	left := Leftover(50 * time.Millisecond)
	if len(left) != 1 || !strings.Contains(left[0], "leaktest.parked") {
		t.Fatalf("left %q, want the parked goroutine", left)
	}
	if left := Leftover(50*time.Millisecond, "leaktest.parked"); len(left) != 0 {
		t.Fatalf("left %q though ignored", left)
	}
	close(stop)
	if left := Leftover(5 * time.Second); len(left) != 0 {
		t.Fatalf("left %q after it ended", left)
	}
}
