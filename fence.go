package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ErrStaleToken is returned by FencedSet when a write with a higher fencing
// token has already been applied: the writer's lock has since passed to a
// newer holder.
var ErrStaleToken = errors.New("redlock: stale fencing token")

var (
	//go:embed fenced_set.lua
	fencedSetLua    string
	fencedSetScript = redis.NewScript(fencedSetLua)
)

// FencedSet sets key to value on rdb (the resource the lock protects, not a
// lock node) only if token is not lower than the highest token it has
// applied to key, and records token as the highest. The check and the write
// are one Lua script, so no write with a lower token can land after a
// higher one. The highest token is kept under "{key}:fenced-by" (for a key
// with a Redis Cluster hash tag, "key::fenced-by", in the key's slot).
//
// It returns an error matching ErrStaleToken, naming both tokens, when the
// write was refused, and rdb's error when the script could not run. Pass
// lock.FencingToken() of a lock acquired WithFencing.
func FencedSet(ctx context.Context, rdb redis.Scripter, key, value string, token uint64) error {
	if key == "" {
		return invalid("empty key")
	}
	if token == 0 {
		return invalid("fencing token 0: acquire the lock WithFencing")
	}
	res, err := fencedSetScript.Run(ctx, rdb, []string{key, companion(key, "fenced-by")}, value, token).Int64Slice()
	if err != nil {
		return fmt.Errorf("redlock: fenced set %q: %w", key, err)
	}
	if res[0] == 0 {
		return fmt.Errorf("%w: token %d for %q is below %d, already applied", ErrStaleToken, token, key, res[1])
	}
	return nil
}
