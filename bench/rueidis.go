package main

import (
	"context"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// rueidisLocker is rueidis' rueidislock, set up as its README advises: on
// one Redis (its N keys all on the first node), KeyMajority = (N+1)/2, and
// NoLoopTracking (redis-server 7.0.5 and later). Its wait for a release
// rides on client-side caching; it does not count attempts.
type rueidisLocker struct {
	l rueidislock.Locker
}

func newRueidislock(e *benchEnv, n int) (locker, func()) {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{e.addrs[0]}, DisableRetry: true},
		KeyMajority:    int32((n + 1) / 2),
		KeyValidity:    ttl,
		NoLoopTracking: true,
	})
	if err != nil {
		panic(err) // the node was started by this program: a bad address is a bug
	}
	return rueidisLocker{l: l}, l.Close
}

func (r rueidisLocker) lock(ctx context.Context, key string) (int, func() error, error) {
	_, cancel, err := r.l.WithContext(ctx, key)
	if err != nil {
		return 0, nil, err
	}
	return 0, func() error { cancel(); return nil }, nil
}
