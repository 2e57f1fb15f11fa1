package main

import (
	"context"
	"testing"
	"time"
)

func TestNumbers(t *testing.T) {
	// Until every applicant has its number: on a loaded machine (the race
	// detector, two suites at once) the 60 turns take over a minute.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	issued, err := run(ctx, 60, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(issued) != 60 {
		t.Fatalf("%d numbers issued, want 60", len(issued))
	}
	if err := check(issued); err != nil {
		t.Fatal(err)
	}
}

// TestCheck_catchesRepeats: the check fails on a repeated number and on a
// gap.
func TestCheck_catchesRepeats(t *testing.T) {
	if check([]issue{{0, 1, 1}, {1, 1, 2}}) == nil {
		t.Fatal("a repeated number passed")
	}
	if check([]issue{{0, 1, 1}, {1, 3, 2}}) == nil {
		t.Fatal("a gap passed")
	}
}
