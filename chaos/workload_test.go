package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/redlock/redistest"
)

// The fair check decides on what the waiters saw: each fair section knows
// when it was in the queue on a quorum and when its winning attempt began.
func TestWorkload_fairSectionsAreTraced(t *testing.T) {
	wl := &workload{workers: 4, perClient: 1, kind: kindFair, keys: 1, ttl: time.Second,
		work: time.Millisecond, target: 40, seed: 1}
	for range 3 {
		n, err := redistest.Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(n.Close)
		wl.addrs = append(wl.addrs, n.Addr())
	}
	wl.init()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := wl.run(ctx); err != nil {
		t.Fatal(err)
	}
	sections, _ := wl.history()
	if len(sections) < 40 {
		t.Fatalf("%d sections, want 40", len(sections))
	}
	for _, s := range sections {
		if s.Ticket == 0 || s.Queued.IsZero() || s.Won.IsZero() {
			t.Fatalf("section not traced: ticket %d, queued %v, won %v", s.Ticket, s.Queued, s.Won)
		}
		if s.Queued.Before(s.Started) || s.Won.Before(s.Started) || s.Acquired.Before(s.Queued) || s.Acquired.Before(s.Won) {
			t.Fatalf("trace out of the section's span: started %v, queued %v, won %v, acquired %v",
				s.Started, s.Queued, s.Won, s.Acquired)
		}
	}
}
