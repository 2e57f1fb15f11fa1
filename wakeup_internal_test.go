package redlock

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/nodeio"
)

// TestWatchRelease_frozenNode: subscribing on a node that accepts the
// connection but never answers (SIGSTOP) gives up after the timeout, even
// in a client that ignores context deadlines while it greets a new
// connection; a waiter first in line of a fair lock was held up for the
// client's ReadTimeout by it.
func TestWatchRelease_frozenNode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn) // never read, never answered
			mu.Unlock()
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ReadTimeout: time.Minute, MaxRetries: -1})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		_ = rdb.Close()
	})
	c, err := New([]*redis.Client{rdb})
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 100 * time.Millisecond
	start := time.Now()
	w := c.watchRelease(context.Background(), []string{"redlock:released:k"}, nil, 0, timeout)
	took := time.Since(start)
	defer w.Close()
	// Wide: without the goroutine it takes the client's minute.
	if took > 10*time.Second {
		t.Fatalf("watchRelease took %v with a %v timeout", took, timeout)
	}
	select {
	case <-w.Ready():
		t.Fatal("a subscription to a node that never answers was confirmed")
	case <-w.Released():
		t.Fatal("an announcement from a node that never answers")
	default:
	}
}

// TestWatchRelease_lateSubscription: a subscription confirmed after the
// timeout still delivers the announcements that come after it.
func TestWatchRelease_lateSubscription(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New([]*redis.Client{rdb})
	if err != nil {
		t.Fatal(err)
	}
	w := c.watchRelease(context.Background(), []string{"redlock:released:k"}, nil, 0, 0) // no wait at all
	defer w.Close()
	select {
	case <-w.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription was not confirmed in the background")
	}
	m.Publish("redlock:released:k", "")
	select {
	case <-w.Released():
	case <-time.After(10 * time.Second):
		t.Fatal("the announcement did not arrive")
	}
}

// TestWaiting_releaseHeardBeforeTheAttemptIsAWakeUp: an announcement that
// arrives after a wait ended on its timer, and before the next attempt,
// still makes that attempt's refusal by the same holder (the release not
// yet landed on a quorum) a reason to try again soon. It used to be
// dropped unheard, and the waiter slept its policy's delay.
func TestWaiting_releaseHeardBeforeTheAttemptIsAWakeUp(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New([]*redis.Client{rdb})
	if err != nil {
		t.Fatal(err)
	}
	channel := releaseChannel("k")
	w := waiting{kind: plain{key: "k"}, clock: c.cfg.clock, lastHolder: nodeio.Holder{Name: 7}}
	w.watch = c.watchRelease(context.Background(), []string{channel}, nil, 0, 10*time.Second)
	defer w.watch.Close()
	if !w.watch.Subscribed() {
		t.Fatal("the subscription was not confirmed")
	}
	m.Publish(channel, "")
	deadline := time.Now().Add(10 * time.Second)
	for len(w.watch.Released()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the announcement did not arrive")
		}
		time.Sleep(time.Millisecond)
	}
	w.attempting()
	ac := acquireConfig{retry: RetryFunc(func(int) time.Duration { return time.Minute })}
	refused := &quorumError{taken: true, holder: nodeio.Holder{Name: 7}, heldOn: 0}
	if d, _ := w.delay(ac, refused, 2, time.Second, false); d > 10*time.Millisecond {
		t.Fatalf("refused by the holder whose release was just heard, the waiter waits %v", d)
	}
}
