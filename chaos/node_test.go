package chaos

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func startTestNode(t *testing.T, spec nodeSpec) *Node {
	t.Helper()
	n, err := startNode(t.TempDir(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

func client(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func quickCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

// isTimeout tells whether err is a deadline that passed, from the context or
// from the socket.
func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

func TestNode_faults(t *testing.T) {
	kind := serverKind(t)
	n := startTestNode(t, nodeSpec{kind: kind})
	rdb := client(t, n.Addr())
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	if err := n.freeze(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(quickCtx(t)).Err(); !isTimeout(err) {
		t.Fatalf("PING to a frozen node: err = %v, want a timeout", err)
	}
	if err := n.thaw(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after thaw: %v", err)
	}

	if err := n.restart(false); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after a restart without data: err = %v, want redis.Nil", err)
	}

	if err := n.kill(); err != nil {
		t.Fatal(err)
	}
	if n.pid() != 0 {
		t.Fatal("killed node still has a PID")
	}
	if err := rdb.Ping(quickCtx(t)).Err(); err == nil {
		t.Fatal("PING to a killed node succeeded")
	}
}

func TestNode_JumpClock(t *testing.T) {
	n := startTestNode(t, nodeSpec{kind: serverKind(t)})
	rdb := client(t, n.Addr())
	ctx := context.Background()
	_ = rdb.Set(ctx, "short", "v", time.Second).Err()
	_ = rdb.Set(ctx, "long", "v", time.Hour).Err()
	_ = rdb.Set(ctx, "forever", "v", 0).Err()
	if err := n.jumpClock(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if rdb.Exists(ctx, "short").Val() != 0 {
		t.Error("a key with less time left than the jump survived it")
	}
	if ttl := rdb.PTTL(ctx, "long").Val(); ttl > 59*time.Minute || ttl < 58*time.Minute {
		t.Errorf("TTL after a 1m jump = %v, want about 59m", ttl)
	}
	if rdb.Exists(ctx, "forever").Val() != 1 {
		t.Error("a key without TTL did not survive the jump")
	}
}

func TestNode_restartKeepsAOF(t *testing.T) {
	if serverKind(t) != Redis {
		t.Skip("persistence needs redis-server")
	}
	n := startTestNode(t, nodeSpec{kind: Redis, persist: true})
	rdb := client(t, n.Addr())
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := n.restart(true); err != nil { // kill -9: only what was fsynced survives
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET after kill -9 and restart with appendfsync always = %q, %v", v, err)
	}
}

func TestLink_faults(t *testing.T) {
	n := startTestNode(t, nodeSpec{kind: serverKind(t)})
	l, err := newLink(newToxiServer(), "test", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	rdb := client(t, l.Addr())
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Blackhole(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(quickCtx(t)).Err(); !isTimeout(err) {
		t.Fatalf("PING through a blackhole: err = %v, want a timeout", err)
	}
	l.Heal(ctx)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after heal: %v", err)
	}
	if err := l.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err == nil || isTimeout(err) {
		t.Fatalf("PING through a resetting link: err = %v, want a connection reset", err)
	}
	l.Heal(ctx)
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after heal: %v", err)
	}
	if err := l.Latency(100*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("PING with 100ms latency took %v", d)
	}
	l.Heal(ctx)

	other := startTestNode(t, nodeSpec{kind: serverKind(t)})
	_ = client(t, other.Addr()).Set(ctx, "where", "other", 0).Err()
	if err := l.Retarget(other.Addr()); err != nil {
		t.Fatal(err)
	}
	if v, _ := client(t, l.Addr()).Get(ctx, "where").Result(); v != "other" {
		t.Fatalf("after Retarget the link reaches %q, want the other node", v)
	}
}

// A node's port lies below the ephemeral range, so that no outgoing
// connection (a client redialling the node while it is down) can take it
// and keep the node from starting again.
func TestFreePort_outsideTheEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	if lo <= 2*fixedPortsFrom {
		t.Skipf("ephemeral range starts at %d: nothing below it to pick", lo)
	}
	for range 20 {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if port < fixedPortsFrom || port >= lo {
			t.Fatalf("port %d is not in [%d, %d)", port, fixedPortsFrom, lo)
		}
	}
}
