package main

import (
	"context"
	"testing"
	"time"
)

func TestEachJobRunsOnce(t *testing.T) {
	const jobs, copies = 15, 8
	// Every submission waits until it gets the lock: on a loaded machine
	// the submissions of one job may take seconds to get through.
	res, err := run(context.Background(), jobs, copies, 3, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.runs) != jobs {
		t.Fatalf("%d of %d jobs ran", len(res.runs), jobs)
	}
	for id, n := range res.runs {
		if n != 1 {
			t.Errorf("job %s ran %d times", id, n)
		}
	}
	if got := res.outcomes[ran] + res.outcomes[done] + res.outcomes[inProgress]; got != jobs*copies || res.outcomes[ran] != jobs {
		t.Fatalf("outcomes %v, want %d runs among %d submissions", res.outcomes, jobs, jobs*copies)
	}
}
