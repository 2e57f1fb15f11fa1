package turns

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

type fakeLock struct {
	name  string
	ended bool
	next  *Turn[*fakeLock, string]
}

type instantTimer struct{ c chan time.Time }

func (t instantTimer) Chan() <-chan time.Time { return t.c }
func (instantTimer) Stop() bool               { return true }

func newQueues(t *testing.T) (*Queues[*fakeLock, string], *[]time.Duration) {
	var mu sync.Mutex
	var pauses []time.Duration
	qs := New(Hooks[*fakeLock, string]{
		Now: time.Now,
		NewTimer: func(d time.Duration) Timer {
			mu.Lock()
			pauses = append(pauses, d)
			mu.Unlock()
			c := make(chan time.Time, 1)
			c <- time.Now()
			return instantTimer{c}
		},
		Attach: func(l *fakeLock, tn Turn[*fakeLock, string]) bool {
			if !l.ended {
				l.next = &tn
			}
			return l.ended
		},
		Watch:    func(*fakeLock) {},
		GiveBack: func(context.Context, *fakeLock) { t.Error("a lock given back") },
	})
	return qs, &pauses
}

// waitAsync queues a Wait for key and returns where its grant arrives.
func waitAsync(qs *Queues[*fakeLock, string], ctx context.Context, key, want string) <-chan Grant[*fakeLock] {
	got := make(chan Grant[*fakeLock], 1)
	before := qs.Waiting(key)
	go func() {
		_, g, err := qs.Wait(ctx, key, want)
		if err != nil {
			g.Yield = true // marks an error for the tests below
			g.Lock = &fakeLock{name: err.Error()}
		}
		got <- g
	}()
	for qs.Waiting(key) == before {
		time.Sleep(time.Millisecond)
	}
	return got
}

func grant(t *testing.T, ch <-chan Grant[*fakeLock]) Grant[*fakeLock] {
	t.Helper()
	select {
	case g := <-ch:
		return g
	case <-time.After(10 * time.Second):
		t.Fatal("no grant")
		panic("unreachable")
	}
}

// TestQueues_firstComeFirstServed: the first goroutine has the turn at
// once, the others in the order they came; the last pass frees the key.
func TestQueues_firstComeFirstServed(t *testing.T) {
	qs, _ := newQueues(t)
	ctx := context.Background()
	q, g, err := qs.Wait(ctx, "k", "a")
	if err != nil || g.Lock != nil || g.Yield {
		t.Fatalf("first: %+v, %v", g, err)
	}
	b := waitAsync(qs, ctx, "k", "b")
	c := waitAsync(qs, ctx, "k", "c")
	qs.Pass(q)
	if g := grant(t, b); g.Lock != nil {
		t.Fatalf("b: %+v", g)
	}
	select {
	case <-c:
		t.Fatal("c before b passed")
	default:
	}
	qs.Pass(q)
	grant(t, c)
	qs.Pass(q)
	if n := qs.Keys(); n != 0 {
		t.Fatalf("%d keys after the last pass", n)
	}
}

// TestTurn_handOffsAreCutAtTheLimit: a holder is handed to the next
// waiter while the run is within its limit of contended hand-offs; at
// the limit the holder is released instead, and the next turn yields.
func TestTurn_handOffsAreCutAtTheLimit(t *testing.T) {
	qs, pauses := newQueues(t)
	ctx := context.Background()
	q, _, _ := qs.Wait(ctx, "k", "a")
	holder := &fakeLock{name: "l0"}
	qs.Hold(q, holder)
	for i := 1; i <= 2; i++ {
		ch := waitAsync(qs, ctx, "k", "w")
		w := holder.next.NextForHandOff(holder, 2)
		if w == nil || w.Want != "w" {
			t.Fatalf("hand-off %d: no waiter", i)
		}
		next := &fakeLock{name: "l"}
		holder.next.HandOver(w, next, true)
		if g := grant(t, ch); g.Lock != next {
			t.Fatalf("hand-off %d: granted %+v", i, g)
		}
		holder = next
	}
	ch := waitAsync(qs, ctx, "k", "w")
	if w := holder.next.NextForHandOff(holder, 2); w != nil {
		t.Fatal("handed over past the limit")
	}
	holder.ended = true
	holder.next.Ended(holder)
	g := grant(t, ch)
	if g.Lock != nil || !g.Yield {
		t.Fatalf("after a cut run: %+v, want the turn and a yield", g)
	}
	qs.YieldPause(ctx, q)
	if len(*pauses) != 1 || (*pauses)[0] < time.Millisecond {
		t.Fatalf("yield pauses %v", *pauses)
	}
	qs.Pass(q)
}

// TestQueues_waitEndsWithItsContext: a waiter whose ctx ends leaves the
// queue with ctx's error.
func TestQueues_waitEndsWithItsContext(t *testing.T) {
	qs, _ := newQueues(t)
	q, _, _ := qs.Wait(context.Background(), "k", "a")
	ctx, cancel := context.WithCancel(context.Background())
	ch := waitAsync(qs, ctx, "k", "b")
	cancel()
	if g := grant(t, ch); !g.Yield || g.Lock.name != context.Canceled.Error() {
		t.Fatalf("%+v, want the context's error", g)
	}
	if n := qs.Waiting("k"); n != 0 {
		t.Fatalf("%d waiting", n)
	}
	qs.Pass(q)
	if qs.Keys() != 0 {
		t.Fatal("the key was not freed")
	}
}
