package chaos

import (
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/rueidisredlock"
)

// Transport names the node clients that the suite's and the explorer's
// lock Clients run over: "go-redis" (the default), or "rueidis" (the
// rueidisredlock adapter) when REDLOCK_CHAOS_TRANSPORT says so or
// `redlock chaos --transport rueidis` sets it.
var Transport = transportFromEnv()

func transportFromEnv() string {
	if t := os.Getenv("REDLOCK_CHAOS_TRANSPORT"); t != "" {
		return t
	}
	return "go-redis"
}

// newLocker is redlock.New over nodes, or over rueidis clients of the same
// addresses when Transport is "rueidis"; close closes what it made.
func newLocker(nodes []redis.UniversalClient, opts ...redlock.Option) (rc *redlock.Client, close func(), err error) {
	return newLockerOn(Transport, nodes, opts...)
}

// newLockerOn is newLocker over the transport named.
func newLockerOn(transport string, nodes []redis.UniversalClient, opts ...redlock.Option) (rc *redlock.Client, close func(), err error) {
	if transport != "rueidis" {
		rc, err = redlock.New(nodes, opts...)
		return rc, func() {}, err
	}
	var clients []rueidis.Client
	close = func() {
		for _, c := range clients {
			c.Close()
		}
	}
	for _, n := range nodes {
		o := n.(*redis.Client).Options()
		opt := rueidis.ClientOption{
			InitAddress:       []string{o.Addr},
			DisableCache:      true,
			DisableRetry:      o.MaxRetries < 0,
			ForceSingleClient: true,
			ConnWriteTimeout:  max(o.ReadTimeout, o.WriteTimeout),
		}
		// A rueidis client dials at once, and a node may be down or
		// restarting (a fault): tried again for a while, as go-redis would
		// dial again at the node's first call.
		c, err := rueidis.NewClient(opt)
		for deadline := time.Now().Add(30 * time.Second); err != nil && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			c, err = rueidis.NewClient(opt)
		}
		if err != nil {
			close()
			return nil, nil, err
		}
		clients = append(clients, c)
	}
	rc, err = rueidisredlock.New(clients, opts...)
	if err != nil {
		close()
		return nil, nil, err
	}
	return rc, close, nil
}
