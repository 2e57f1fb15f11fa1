package chaos

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// The tests of a promise on real redis-server nodes run over each
// transport of newLocker: go-redis, and rueidis (rueidisredlock).

// eachTransport runs f once over each transport of newLocker.
func eachTransport(t *testing.T, f func(t *testing.T)) {
	for _, tr := range []string{"go-redis", "rueidis"} {
		t.Run(tr, func(t *testing.T) {
			old := Transport
			Transport = tr
			defer func() { Transport = old }()
			f(t)
		})
	}
}

// locker is newLocker for a test.
func locker(t *testing.T, nodes []redis.UniversalClient, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	rc, closeClients, err := newLocker(nodes, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeClients)
	return rc
}
