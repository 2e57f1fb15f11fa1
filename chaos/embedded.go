package chaos

import (
	"context"
	"fmt"
	"os"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/redistest"
)

// embeddedEnv names the variable that turns a process into an embedded node:
// its value is the address to serve on.
const embeddedEnv = "REDLOCK_CHAOS_NODE"

// ServeEmbeddedFromEnv serves as an embedded Redis node, and never returns,
// when the process was started as one by this package; otherwise it returns
// at once. Call it first thing in main (or TestMain) of any program that
// runs the suite with the Embedded server kind, since the nodes are that
// same executable started again.
//
// The node is miniredis behind a TCP port. miniredis moves TTLs only when
// told to, so the node moves them by the elapsed wall-clock time every two
// milliseconds, as Redis would expire keys (never early, up to 2 ms late);
// a node stopped with SIGSTOP catches up when it resumes, as Redis does.
func ServeEmbeddedFromEnv() {
	addr := os.Getenv(embeddedEnv)
	if addr == "" {
		return
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(addr); err != nil {
		fmt.Fprintf(os.Stderr, "embedded node: %v\n", err)
		os.Exit(1)
	}
	redistest.Expire(m)
	select {} // until the process is killed
}

// evalOn runs a Lua script on the node at addr over a connection of its own.
func evalOn(ctx context.Context, addr, script string, args ...any) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	return rdb.Eval(ctx, script, nil, args...).Err()
}

// doOn runs one command on the node at addr over a connection of its own.
func doOn(ctx context.Context, addr string, args ...any) (any, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	return rdb.Do(ctx, args...).Result()
}
