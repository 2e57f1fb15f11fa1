package pubsub

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/leaktest"
	"github.com/quorumlock/redlock/transport"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// TestWatch_sharesOneConnection: two watches on one subscriber are both
// handed a message of a channel they share, over one connection, and the
// subscriber's goroutine ends Linger after the last watch stops.
func TestWatch_sharesOneConnection(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	s := New(transport.GoRedis(rdb))
	a, b := s.Watch([]string{"ch", "a-only"}), s.Watch([]string{"ch"})
	for _, w := range []*Watch{a, b} {
		select {
		case <-w.Ready():
		case <-time.After(10 * time.Second):
			t.Fatal("a subscription was not confirmed")
		}
	}
	if n := m.PubSubNumSub("ch")["ch"]; n != 1 {
		t.Fatalf("%d subscribers of ch on the server, want 1 connection", n)
	}
	m.Publish("ch", "x")
	for _, w := range []*Watch{a, b} {
		select {
		case msg := <-w.Messages():
			if msg.Channel != "ch" || msg.Payload != "x" {
				t.Fatalf("got %+v", msg)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a watch was not handed the message")
		}
	}
	a.Stop()
	b.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for s.Running() {
		if time.Now().After(deadline) {
			t.Fatal("the subscriber still runs with no watch left")
		}
		time.Sleep(Linger / 5)
	}
	if s.Deaf() {
		t.Fatal("an idle subscriber is deaf")
	}
}
