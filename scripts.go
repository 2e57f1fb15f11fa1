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

	//go:embed extend.lua
	extendLua    string
	extendScript = redis.NewScript(extendLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)
)

// runScript runs s on one node and reports whether it returned 1.
func runScript(ctx context.Context, rdb redis.UniversalClient, s *redis.Script, key string, args ...any) (bool, error) {
	n, err := s.Run(ctx, rdb, []string{key}, args...).Int64()
	return n == 1, err
}

func acquireOn(key, token string, ttl time.Duration) nodeOp {
	px := pxMillis(ttl)
	return func(ctx context.Context, rdb redis.UniversalClient) (bool, error) {
		return runScript(ctx, rdb, acquireScript, key, token, px)
	}
}

func extendOn(key, token string, ttl time.Duration) nodeOp {
	px := pxMillis(ttl)
	return func(ctx context.Context, rdb redis.UniversalClient) (bool, error) {
		return runScript(ctx, rdb, extendScript, key, token, px)
	}
}

func releaseOn(key, token string) nodeOp {
	return func(ctx context.Context, rdb redis.UniversalClient) (bool, error) {
		return runScript(ctx, rdb, releaseScript, key, token)
	}
}
