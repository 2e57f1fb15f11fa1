package rueidisredlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/rueidisredlock"
)

// nodes starts n embedded nodes and a rueidis client of each.
func nodes(t *testing.T, n int) ([]*miniredis.Miniredis, []rueidis.Client) {
	t.Helper()
	var servers []*miniredis.Miniredis
	var clients []rueidis.Client
	for range n {
		s := miniredis.RunT(t)
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		servers = append(servers, s)
		clients = append(clients, c)
	}
	return servers, clients
}

func TestNew_acquireExtendRelease(t *testing.T) {
	servers, clients := nodes(t, 3)
	rc, err := rueidisredlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := rc.TryAcquire(ctx, "k", time.Minute, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		if v, _ := s.Get("k"); v != l.Token() {
			t.Fatalf("node %d holds %q, want the lock's token", i, v)
		}
	}
	if _, err := rc.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: %v, want ErrNotAcquired", err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		if s.Exists("k") {
			t.Fatalf("node %d keeps the key", i)
		}
	}
}
