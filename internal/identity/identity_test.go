package identity

import (
	"context"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/leaktest"
	"github.com/quorumlock/redlock/transport"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

func TestReadInfo(t *testing.T) {
	info := "# Server\r\nrun_id:abc123\r\n# Cluster\r\ncluster_enabled:0\r\n# Replication\r\nrole:slave\r\nmaster_host:10.0.0.1\r\nmaster_port:6379\r\n# Memory\r\nmaxmemory:1048576\r\nmaxmemory_policy:allkeys-lru\r\n# Persistence\r\naof_enabled:1\r\n"
	runID, clusterOn, f := readInfo(info)
	if runID != "abc123" || clusterOn != "0" {
		t.Fatalf("run_id %q, cluster_enabled %q", runID, clusterOn)
	}
	want := Facts{Role: "slave", Master: "10.0.0.1:6379", Maxmemory: 1 << 20, Policy: "allkeys-lru", AOF: "1"}
	if f != want {
		t.Fatalf("facts %+v, want %+v", f, want)
	}
	if !f.Evicts() {
		t.Fatal("a memory limit with allkeys-lru does not evict")
	}
	for _, f := range []Facts{{}, {Maxmemory: 1, Policy: "noeviction"}, {Policy: "allkeys-lru"}} {
		if f.Evicts() {
			t.Fatalf("%+v evicts", f)
		}
	}
}

// TestServerIDs_twoAddressesOfOneServer: two clients of one server are
// named alike; a server that gives no run_id (miniredis) is named by its
// address.
func TestServerIDs_twoAddressesOfOneServer(t *testing.T) {
	m := miniredis.RunT(t)
	a := redis.NewClient(&redis.Options{Addr: m.Addr()})
	b := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	idsA, howA, _, err := ServerIDs(context.Background(), transport.GoRedis(a))
	if err != nil {
		t.Fatal(err)
	}
	idsB, _, _, err := ServerIDs(context.Background(), transport.GoRedis(b))
	if err != nil {
		t.Fatal(err)
	}
	if !Overlap(idsA, idsB) {
		t.Fatalf("%v and %v (%s) do not name one server", idsA, idsB, howA)
	}
	if Overlap(idsA, []string{"addr:127.0.0.1:1"}) {
		t.Fatal("another address names the same server")
	}
}
