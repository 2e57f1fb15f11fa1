package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// TestNode_expiresKeys: a key set with a TTL is gone once the TTL has
// passed on the wall clock, with nobody calling FastForward.
func TestNode_expiresKeys(t *testing.T) {
	n, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	rdb := redis.NewClient(&redis.Options{Addr: n.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 50*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	// Wide: the key goes 50–52 ms after it was set on an idle machine.
	for deadline := time.Now().Add(5 * time.Second); n.Exists("k"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a key with a 50 ms TTL is still there after 5 s")
		}
	}
	if err := rdb.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("GET after expiry: %v, want redis.Nil", err)
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
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err == nil {
		t.Fatal("a closed node still answers")
	}
}
