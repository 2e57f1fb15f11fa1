package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/redlock"
)

// TestNilContext: every entry point that takes a context refuses a nil one
// with an error matching ErrInvalidArgument, on the caller's goroutine and
// changing nothing; Observe, which returns no error, panics there.
func TestNilContext(t *testing.T) {
	c := newCluster(t, 3)
	rc := c.client(t)
	bg := context.Background()
	var nilCtx context.Context // a variable, not the literal nil that vet and staticcheck refuse
	lock := mustTryAcquire(t, rc, bg, "held", 3*time.Second)
	defer mustRelease(t, lock)
	e := mustElection(t, rc, "elect", 3*time.Second)
	lead, err := e.Campaign(bg, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lead.Resign(bg) }()
	rdb := c.connect(t)[0]
	until, leadUntil := lock.Until(), lead.Lock().Until()
	ran := false
	job := func(context.Context) error { ran = true; return nil }

	for name, call := range map[string]func() error{
		"Client.Acquire":       func() error { _, err := rc.Acquire(nilCtx, "k", time.Second); return err },
		"Client.TryAcquire":    func() error { _, err := rc.TryAcquire(nilCtx, "k", time.Second); return err },
		"Client.AcquireAll":    func() error { _, err := rc.AcquireAll(nilCtx, []string{"k", "j"}, time.Second); return err },
		"Client.TryAcquireAll": func() error { _, err := rc.TryAcquireAll(nilCtx, []string{"k", "j"}, time.Second); return err },
		"semaphore":            func() error { _, err := rc.Acquire(nilCtx, "k", time.Second, redlock.WithPermits(2)); return err },
		"Client.Resume":        func() error { _, err := rc.Resume(nilCtx, "held", lock.Token(), time.Second); return err },
		"Client.Inspect":       func() error { _, err := rc.Inspect(nilCtx, "held"); return err },
		"Client.Do":            func() error { return rc.Do(nilCtx, "k", time.Second, job) },
		"Client.Drain":         func() error { return rc.Drain(nilCtx) },
		"Lock.Extend":          func() error { return lock.Extend(nilCtx, 3*time.Second) },
		"Lock.Release":         func() error { return lock.Release(nilCtx) },
		"Election.Campaign":    func() error { _, err := e.Campaign(nilCtx, "b"); return err },
		"Election.Leader":      func() error { _, err := e.Leader(nilCtx); return err },
		"Election.Run": func() error {
			return e.Run(nilCtx, "b", func(context.Context, *redlock.Leadership) error { ran = true; return nil })
		},
		"Leadership.Proclaim": func() error { return lead.Proclaim(nilCtx, "c") },
		"Leadership.Resign":   func() error { return lead.Resign(nilCtx) },
		"FencedSet":           func() error { return redlock.FencedSet(nilCtx, rdb, "f", "v", 1) },
		"FencedGet":           func() error { _, err := redlock.FencedGet(nilCtx, rdb, "f", 1); return err },
	} {
		t.Run(name, func(t *testing.T) {
			err := func() (err error) {
				defer func() {
					if p := recover(); p != nil {
						err = fmt.Errorf("panicked: %v", p)
					}
				}()
				return call()
			}()
			if !errors.Is(err, redlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "nil context") {
				t.Fatalf("err = %v, want ErrInvalidArgument saying nil context", err)
			}
		})
	}
	if ran {
		t.Error("a job ran under a nil context")
	}
	if got := c.holdersAny("k"); len(got) != 0 {
		t.Errorf("key k taken on nodes %v by a call with a nil context", got)
	}
	if !lock.Until().Equal(until) || lock.Validity() == 0 || !lead.Leading() || !lead.Lock().Until().Equal(leadUntil) {
		t.Error("a call with a nil context changed a lock or the leadership")
	}
	if l, err := e.Leader(bg); err != nil || l.Value != "a" {
		t.Errorf("leader after the calls: %+v, %v", l, err)
	}
	if redlock.LockFrom(nilCtx) != nil {
		t.Error("LockFrom(nil) is not nil")
	}

}

// TestElection_Observe_nilContext: Observe, which returns no error, panics
// on the caller's goroutine for a nil context, rather than in one of its
// own, where nothing of the caller's can recover it.
func TestElection_Observe_nilContext(t *testing.T) {
	c := newCluster(t, 3)
	e := mustElection(t, c.client(t), "elect", 3*time.Second)
	var nilCtx context.Context

	msg := func() (msg string) {
		defer func() { msg = fmt.Sprint(recover()) }()
		e.Observe(nilCtx)
		return ""
	}()
	if !strings.Contains(msg, "Election.Observe: nil context") {
		t.Fatalf("Observe(nil) panicked with %q on the caller's goroutine, want a nil context message", msg)
	}
}
