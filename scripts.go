package redlock

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

// The per-node operations. Each runs one Lua script, so that comparing the
// token and acting on it is atomic on the node. Script.Run sends EVALSHA and
// falls back to EVAL when the node does not know the script yet.

var (
	//go:embed acquire.lua
	acquireLua    string
	acquireScript = redis.NewScript(acquireLua)

	//go:embed acquire_fenced.lua
	acquireFencedLua    string
	acquireFencedScript = redis.NewScript(acquireFencedLua)

	//go:embed raise_fence.lua
	raiseFenceLua    string
	raiseFenceScript = redis.NewScript(raiseFenceLua)

	//go:embed extend.lua
	extendLua    string
	extendScript = redis.NewScript(extendLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)
)

// runScript runs s on one node and returns its integer result.
func runScript(ctx context.Context, rdb redis.UniversalClient, s *redis.Script, keys []string, args ...any) (int64, error) {
	return s.Run(ctx, rdb, keys, args...).Int64()
}

// fenceKey is where a node keeps the fencing counter of a lock key. The
// braces make it a hash tag, so that a Redis Cluster node keeps it in the
// same slot as the lock key.
func fenceKey(key string) string { return "{" + key + "}:fence" }

func acquireOn(key, token string, ttl time.Duration, fenced bool) nodeOp {
	px := pxMillis(ttl)
	if fenced {
		keys := []string{key, fenceKey(key)}
		return func(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
			return runScript(ctx, rdb, acquireFencedScript, keys, token, px)
		}
	}
	keys := []string{key}
	return func(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
		return runScript(ctx, rdb, acquireScript, keys, token, px)
	}
}

// raiseFenceOn sets the node's fencing counter of key to at least token.
func raiseFenceOn(key string, token int64) nodeOp {
	keys := []string{fenceKey(key)}
	return func(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
		return runScript(ctx, rdb, raiseFenceScript, keys, token)
	}
}

func extendOn(key, token string, ttl time.Duration) nodeOp {
	px := pxMillis(ttl)
	keys := []string{key}
	return func(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
		return runScript(ctx, rdb, extendScript, keys, token, px)
	}
}

// releaseOn deletes key if it holds token. A release by the holder (announce)
// publishes on the key's release channel; the cleanup of a failed attempt
// does not, since nobody held that lock and waking the waiters for it
// would only set them colliding again.
func releaseOn(key, token string, announce bool) nodeOp {
	keys := []string{key}
	channel := ""
	if announce {
		channel = releaseChannel(key)
	}
	return func(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
		return runScript(ctx, rdb, releaseScript, keys, token, channel)
	}
}

// releaseChannel is where the nodes announce that key was released.
func releaseChannel(key string) string { return "{" + key + "}:released" }
