package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// clusterNodes starts n redis-server processes in cluster mode, each a
// cluster of its own that owns every slot (n independent masters), and
// returns a go-redis ClusterClient for each.
func clusterNodes(t *testing.T, n int) []redis.UniversalClient {
	t.Helper()
	if serverKind(t) != Redis {
		t.Skip("cluster mode needs redis-server")
	}
	ctx := context.Background()
	dir := t.TempDir()
	var clients []redis.UniversalClient
	for range n {
		nd, err := startNode(dir, nodeSpec{kind: Redis, cluster: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nd.stop)
		if _, err := doOn(ctx, nd.Addr(), "CLUSTER", "ADDSLOTSRANGE", 0, 16383); err != nil {
			t.Fatalf("assigning the slots: %v", err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			info, err := doOn(ctx, nd.Addr(), "CLUSTER", "INFO")
			if s, ok := info.(string); err == nil && ok && strings.Contains(s, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ready: %v %v", nd.Addr(), info, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nd.Addr()}, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		clients = append(clients, rdb)
	}
	return clients
}

// TestCluster_everyKind: every kind of lock, fenced and not, on keys with
// and without a hash tag, works on Redis Cluster nodes: a lock's own keys
// (its fencing counter, a kind's keys) follow the hash-tag rule, so that
// they share the lock key's slot.
func TestCluster_everyKind(t *testing.T) {
	clients := clusterNodes(t, 3)
	rc, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type acquire func(key string, opts ...redlock.AcquireOption) (*redlock.Lock, error)
	one := func(kind ...redlock.AcquireOption) acquire {
		return func(key string, opts ...redlock.AcquireOption) (*redlock.Lock, error) {
			return rc.TryAcquire(ctx, key, 10*time.Second, append(opts, kind...)...)
		}
	}
	kinds := map[string]acquire{
		"plain":     one(),
		"reentrant": one(redlock.WithOwner("me")),
		"reader":    one(redlock.ForRead()),
		"writer":    one(redlock.ForWrite()),
		"semaphore": one(redlock.WithPermits(2)),
		"fair":      one(redlock.Fair()),
		"renewed":   one(redlock.WithAutoRenew()),
		"multi-key": func(key string, opts ...redlock.AcquireOption) (*redlock.Lock, error) {
			keys := []string{key}
			if strings.HasPrefix(key, "{") { // tagged keys share a slot
				keys = append(keys, strings.Replace(key, ":1", ":2", 1))
			}
			return rc.TryAcquireAll(ctx, keys, 10*time.Second, opts...)
		},
	}
	for name, acquire := range kinds {
		for _, key := range []string{"order:1", "{order}:1"} {
			for _, fenced := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s %s fenced %v", name, key, fenced), func(t *testing.T) {
					var opts []redlock.AcquireOption
					if fenced {
						opts = append(opts, redlock.WithFencing())
					}
					first, err := acquire(key, opts...)
					if err != nil {
						t.Fatalf("acquire: %v", err)
					}
					if err := first.Extend(ctx, 20*time.Second); err != nil {
						t.Fatalf("extend: %v", err)
					}
					if err := first.Release(ctx); err != nil {
						t.Fatalf("release: %v", err)
					}
					second, err := acquire(key, opts...)
					if err != nil {
						t.Fatalf("acquire again: %v", err)
					}
					if fenced && second.FencingToken() <= first.FencingToken() {
						t.Errorf("fencing token %d after %d", second.FencingToken(), first.FencingToken())
					}
					if err := second.Release(ctx); err != nil {
						t.Fatalf("release: %v", err)
					}
				})
			}
		}
	}

	t.Run("FencedSet", func(t *testing.T) {
		for _, key := range []string{"stock", "{shop}:stock"} {
			if err := redlock.FencedSet(ctx, clients[0], key, "v", 2); err != nil {
				t.Fatalf("FencedSet(%q): %v", key, err)
			}
			if err := redlock.FencedSet(ctx, clients[0], key, "v", 1); !errors.Is(err, redlock.ErrStaleToken) {
				t.Fatalf("FencedSet(%q) with a lower token: err = %v, want ErrStaleToken", key, err)
			}
		}
	})

	t.Run("waiter woken by a release", func(t *testing.T) {
		held, err := rc.TryAcquire(ctx, "{order}:9", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		other, err := redlock.New(clients, redlock.WithRetry(redlock.RandomDelay(time.Minute, time.Minute)))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l, err := other.Acquire(ctx, "{order}:9", 10*time.Second)
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(200 * time.Millisecond) // the waiter has failed once and listens
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("the waiter, woken by the release announced on the cluster: %v", err)
		}
	})
}
