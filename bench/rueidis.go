package main

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/quorumlock/redlock/rueidisredlock"
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

// newRedlockRueidis is this library over rueidis clients of the nodes
// (rueidisredlock), each on rueidis's defaults but client-side caching,
// which the library does not use.
func newRedlockRueidis(e *benchEnv, n int) (locker, func()) {
	var cs []rueidis.Client
	stop := func() {
		for _, c := range cs {
			c.Close()
		}
	}
	for i := range n {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{e.addrs[i]}, DisableCache: true})
		if err != nil {
			panic(err) // the node was started by this program: a bad address is a bug
		}
		cs = append(cs, c)
	}
	c, err := rueidisredlock.New(cs)
	if err != nil {
		panic(err)
	}
	return &redlockLocker{c: c}, stop
}

// rueidisFloor is the least a lock on one node can cost through rueidis:
// the pipelined floor's take and compare-and-delete scripts, each a Do of
// the calling goroutine, which rueidis pipelines with the others' on its
// connections, and nothing else. It is the ceiling of any lock on rueidis
// on workload K.
type rueidisFloor struct {
	c          rueidis.Client
	take, drop *rueidis.Lua
}

func newRueidisFloor(e *benchEnv, n int) (locker, func()) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{e.addrs[0]}, DisableCache: true})
	if err != nil {
		panic(err)
	}
	return &rueidisFloor{c: c,
		take: rueidis.NewLuaScript(`if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0`),
		drop: rueidis.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`),
	}, c.Close
}

func (f *rueidisFloor) lock(ctx context.Context, key string) (int, func() error, error) {
	if err := f.take.Exec(ctx, f.c, []string{key}, []string{"t", fmt.Sprint(ttl.Milliseconds())}).Error(); err != nil {
		return 1, nil, err
	}
	return 1, func() error { return f.drop.Exec(context.Background(), f.c, []string{key}, []string{"t"}).Error() }, nil
}

func (r rueidisLocker) lock(ctx context.Context, key string) (int, func() error, error) {
	_, cancel, err := r.l.WithContext(ctx, key)
	if err != nil {
		return 0, nil, err
	}
	return 0, func() error { cancel(); return nil }, nil
}
