package redlock

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/nodeio"
	"github.com/quorumlock/redlock/transport"
)

// realRedis starts a redis-server on a unix socket for the test, or skips
// where none is installed (CI needs one).
func realRedis(t *testing.T) redis.UniversalClient {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed; CI runs this test against it")
		}
		t.Skip("needs redis-server")
	}
	sock := filepath.Join(t.TempDir(), "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	t.Cleanup(func() { _ = rdb.Close() })
	for deadline := time.Now().Add(10 * time.Second); rdb.Ping(context.Background()).Err() != nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not answer within 10 s")
		}
	}
	return rdb
}

// TestAcquire_setNX: a plain lock's acquire, sent as SET NX PX GET, takes
// a free key; where the key holds our own token (a resend) its ttl is
// lengthened to the ttl, never shortened, as acquire.lua does; a key of
// another kind is refused as such; another holder is named as the script
// names it, so that split votes and ErrTaken tell holders apart as
// before. On redis-server and on miniredis.
func TestAcquire_setNX(t *testing.T) {
	mr := miniredis.RunT(t)
	embedded := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = embedded.Close() })
	for name, rdb := range map[string]redis.UniversalClient{"redis-server": realRedis(t), "miniredis": embedded} {
		ctx := context.Background()
		node := nodeio.New(transport.GoRedis(rdb), nodeio.Ack{}, false)
		acquire := func(key, token string, ttl time.Duration) nodeio.Result {
			op := acquireOn(key, token, ttl, 0)
			if !op.SetNX {
				t.Fatal("a plain lock's acquire is not sent as SET NX")
			}
			return node.Run(ctx, op, time.Second)
		}
		pttl := func(key string) time.Duration { return rdb.PTTL(ctx, key).Val() }

		if r := acquire("free", "tok-a", 10*time.Second); r.Err != nil || !r.Held || r.Counter != 1 {
			t.Errorf("%s: a free key: %+v", name, r)
		}
		if v := rdb.Get(ctx, "free").Val(); v != "tok-a" || pttl("free") <= 9*time.Second {
			t.Errorf("%s: a free key holds %q for %v, want tok-a for 10 s", name, v, pttl("free"))
		}

		rdb.Set(ctx, "ours", "tok-a", 100*time.Millisecond)
		if r := acquire("ours", "tok-a", 10*time.Second); r.Err != nil || !r.Held || r.Counter != 1 {
			t.Errorf("%s: our own token: %+v", name, r)
		}
		if d := pttl("ours"); d <= 9*time.Second {
			t.Errorf("%s: a resend left the key's ttl at %v, want it lengthened to 10 s", name, d)
		}
		rdb.Set(ctx, "ours-long", "tok-a", time.Minute)
		if r := acquire("ours-long", "tok-a", 10*time.Second); r.Err != nil || !r.Held {
			t.Errorf("%s: our own token, a longer ttl: %+v", name, r)
		}
		if d := pttl("ours-long"); d <= 50*time.Second {
			t.Errorf("%s: a resend shortened the key's ttl to %v", name, d)
		}

		rdb.HSet(ctx, "kind", "f", "v")
		if r := acquire("kind", "tok-a", 10*time.Second); r.Err != nil || r.Held || !r.Holder.OtherKind {
			t.Errorf("%s: a key of another kind: %+v, want refused as another kind", name, r)
		}

		rdb.Set(ctx, "theirs", "Zq8-their-token", time.Minute)
		byScript := acquireOn("theirs", "tok-a", 10*time.Second, 0)
		byScript.SetNX = false
		want := node.Run(ctx, byScript, time.Second)
		r := acquire("theirs", "tok-a", 10*time.Second)
		if r.Err != nil || r.Held || r.Holder.Name == 0 || r.Holder != want.Holder {
			t.Errorf("%s: another holder: %+v, the script says %+v", name, r, want)
		}
		if v := rdb.Get(ctx, "theirs").Val(); v != "Zq8-their-token" {
			t.Errorf("%s: another holder's key now holds %q", name, v)
		}
	}
}

// TestAcquire_setNX_writesRefused: a node that refuses writes (full
// memory under noeviction) refuses the SET outright, but the script only
// at its write: the acquire still says who holds the key, and keeps our
// own token there (a resend). The SET's refusal used to be the node's
// answer: a contender saw a failed node, not ErrTaken.
func TestAcquire_setNX_writesRefused(t *testing.T) {
	rdb := realRedis(t)
	ctx := context.Background()
	node := nodeio.New(transport.GoRedis(rdb), nodeio.Ack{}, false)
	rdb.Set(ctx, "theirs", "Zq8-their-token", time.Minute)
	rdb.Set(ctx, "ours", "tok-a", time.Second)
	warm := acquireOn("warm", "tok-a", time.Second, 0) // the node learns the script
	warm.SetNX = false
	if r := node.Run(ctx, warm, time.Second); r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.ConfigSet(ctx, "maxmemory", "0") })
	if r := node.Run(ctx, acquireOn("theirs", "tok-a", 10*time.Second, 0), time.Second); r.Err != nil || r.Held || r.Holder.Name == 0 {
		t.Errorf("another holder, writes refused: %+v, want refused with its holder named", r)
	}
	if r := node.Run(ctx, acquireOn("ours", "tok-a", 10*time.Second, 0), time.Second); r.Err != nil || !r.Held {
		t.Errorf("our own token, writes refused: %+v, want held", r)
	}
	if d := rdb.PTTL(ctx, "ours").Val(); d <= 9*time.Second {
		t.Errorf("our own token's ttl %v, want lengthened to 10 s", d)
	}
}
