//go:build rueidis

package redlock_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/rueidisredlock"
)

// With the build tag rueidis, the suite's Clients run over rueidis clients
// of the same nodes (rueidisredlock): the test matrix's second transport.
// A test that steers its nodes through go-redis hooks is skipped (addHook),
// and so is one that makes a Client over a node that is down: a rueidis
// client dials at once.
func init() {
	testTransport = "rueidis"
	newTestClient = func(t testing.TB, nodes []redis.UniversalClient, opts ...redlock.Option) (*redlock.Client, error) {
		t.Helper()
		clients := make([]rueidis.Client, len(nodes))
		for i, n := range nodes {
			rc, ok := n.(*redis.Client)
			if !ok {
				t.Skipf("node %d is a %T: the rueidis transport takes one address per node", i, n)
			}
			c, err := rueidis.NewClient(rueidis.ClientOption{
				InitAddress:       []string{rc.Options().Addr},
				Password:          rc.Options().Password,
				DisableCache:      true,
				ForceSingleClient: true, // the embedded server answers CLUSTER, but is none
				DisableRetry:      rc.Options().MaxRetries < 0,
				// One connection per node, made here: the tests that count
				// a node's commands count none of a later connection's
				// greeting.
				PipelineMultiplex: -1,
			})
			if err != nil {
				t.Skipf("a rueidis client of node %d: %v (it dials at once; go-redis waits for the first call)", i, err)
			}
			t.Cleanup(c.Close)
			_ = c.Do(context.Background(), c.B().Ping().Build()).Error()
			clients[i] = c
		}
		return rueidisredlock.New(clients, opts...)
	}
}
