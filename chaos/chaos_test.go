package chaos

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	ServeEmbeddedFromEnv() // the embedded nodes are this test binary, started again
	redis.SetLogger(quiet{})
	slog.SetDefault(slog.New(slog.DiscardHandler)) // the lock Clients of the tests log the failures they cause
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		// toxiproxy can leave a link's reader, and the stub of a toxic added
		// while that link was closing, blocked on a channel send nobody
		// reads once its proxy has stopped; they hold no connection.
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"))
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// serverKind is redis-server when it is installed, and in CI it must be;
// REDLOCK_CHAOS_SERVER=embedded chooses the embedded server anyway.
func serverKind(t *testing.T) ServerKind {
	t.Helper()
	if k := ServerKind(os.Getenv("REDLOCK_CHAOS_SERVER")); k != "" {
		return k
	}
	k := DefaultServerKind()
	if k != Redis && os.Getenv("CI") == "true" {
		t.Fatal("redis-server is not installed; CI runs the chaos suite against it")
	}
	return k
}

// TestSuite runs every scenario in its CI size: safe ones must show no
// violation and progress while faulty, unsafe ones must show a violation.
func TestSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite takes minutes; run without -short")
	}
	kind := serverKind(t)
	// Without the race detector: the CI size, 10,000 sections and more.
	// With it, everything runs several times slower, so a smaller run
	// checks the harness itself.
	size, minTotal := 2000, 10000
	var nodeTimeout time.Duration // derived from each scenario's ttl
	if raceEnabled {
		// and the replies slower than the derived node timeouts allow
		// for, with another suite running beside it
		size, minTotal, nodeTimeout = 300, 1500, 150*time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	results, err := Run(ctx, Config{
		Server: kind, Size: size, NodeTimeout: nodeTimeout,
		OnFinish: func(r Result) { t.Log(formatRow(r)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, r := range results {
		total += r.Sections
		if !r.Pass() {
			t.Errorf("%s: %s", r.Scenario, failure(r))
		}
	}
	t.Logf("%d critical sections in all (seed %d)", total, results[0].Seed)
	if total < minTotal {
		t.Errorf("%d critical sections in all, want at least %d", total, minTotal)
	}
}
