package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// acquireLua: GET, then SET PX when the key is free (returns 1); our own
// token keeps it (returns 1); another holder's token gives a negative number
// derived from it. (What the library's acquire.lua does without fencing,
// answered as one integer where the library's script answers an array.)
const acquireLua = `local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then
  return -1
elseif v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif v == ARGV[1] then
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
else
  local n = 0
  for i = 1, math.min(8, #v) do
    n = n * 64 + string.byte(v, i) % 64
  end
  return -(n + 1)
end
return 1`

// releaseLua: compare-and-DEL.
const releaseLua = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

const ttlMs = 10000

var (
	acqScript = redis.NewScript(acquireLua)
	relScript = redis.NewScript(releaseLua)
	acqLua    = rueidis.NewLuaScript(acquireLua)
	relLua    = rueidis.NewLuaScript(releaseLua)
)

// variant is one I/O path: lock then unlock, each returning an error when the
// node did not answer as expected (acquired / released).
type variant struct {
	name   string
	lock   func(ctx context.Context, key, tok string) error
	unlock func(ctx context.Context, key, tok string) error
	close  func()
	// conns reports the client connections of this variant open on the
	// server (by client name), or -1.
	clientName string
}

// checkScript checks that a script answered 1 (acquired, or released);
// what names the script in the error.
func checkScript(cmd *redis.Cmd, what string) error {
	v, err := cmd.Int64()
	if err != nil {
		return err
	}
	if v != 1 {
		return fmt.Errorf("%s returned %d", what, v)
	}
	return nil
}

func checkSetGet(cmd *redis.StatusCmd) error {
	err := cmd.Err()
	if errors.Is(err, redis.Nil) {
		return nil // nil reply: the key was free and is now ours
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("held by %q", cmd.Val())
}

func newSetGet(ctx context.Context, key, tok string) *redis.StatusCmd {
	return redis.NewStatusCmd(ctx, "set", key, tok, "nx", "px", ttlMs, "get")
}

// goredis options shared by every go-redis variant.
func goredisClient(addr, name string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ClientName: name})
}

// --- variant 1: pooled client -------------------------------------------------

func newPool(addr string, setget bool) *variant {
	rdb := goredisClient(addr, "v1"+sfx(setget))
	v := &variant{name: "1 pool" + sfx(setget), clientName: "v1" + sfx(setget), close: func() { rdb.Close() }}
	if setget {
		v.lock = func(ctx context.Context, key, tok string) error {
			cmd := newSetGet(ctx, key, tok)
			_ = rdb.Process(ctx, cmd)
			return checkSetGet(cmd)
		}
	} else {
		v.lock = func(ctx context.Context, key, tok string) error {
			return checkScript(acqScript.EvalSha(ctx, rdb, []string{key}, tok, ttlMs), "acquire")
		}
	}
	v.unlock = func(ctx context.Context, key, tok string) error {
		return checkScript(relScript.EvalSha(ctx, rdb, []string{key}, tok), "release")
	}
	return v
}

func sfx(setget bool) string {
	if setget {
		return "g"
	}
	return "s"
}

// --- variant 2 / 6 / 2i: the pipe ----------------------------------------------

func newPipeVariant(addr string, setget bool, label, cname string, mode idleMode, spinN int, linger time.Duration, inline bool) *variant {
	rdb := goredisClient(addr, cname+sfx(setget))
	p := newPipe(rdb, mode, spinN, linger, inline)
	v := &variant{name: label + sfx(setget), clientName: cname + sfx(setget), close: func() { rdb.Close() }}
	if setget {
		v.lock = func(ctx context.Context, key, tok string) error {
			cmd := p.do(ctx, func(ctx context.Context, r runner) redis.Cmder {
				c := newSetGet(ctx, key, tok)
				_ = r.Process(ctx, c)
				return c
			})
			return checkSetGet(cmd.(*redis.StatusCmd))
		}
	} else {
		v.lock = func(ctx context.Context, key, tok string) error {
			cmd := p.do(ctx, func(ctx context.Context, r runner) redis.Cmder {
				return acqScript.EvalSha(ctx, r, []string{key}, tok, ttlMs)
			})
			return checkScript(cmd.(*redis.Cmd), "acquire")
		}
	}
	v.unlock = func(ctx context.Context, key, tok string) error {
		cmd := p.do(ctx, func(ctx context.Context, r runner) redis.Cmder {
			return relScript.EvalSha(ctx, r, []string{key}, tok)
		})
		return checkScript(cmd.(*redis.Cmd), "release")
	}
	return v
}

// --- variant 3: go-redis AutoPipeline -----------------------------------------------

func newAutoPipe(addr string, setget bool, label, cname string, opts *redis.AutoPipelineOptions) (*variant, error) {
	rdb := goredisClient(addr, cname+sfx(setget))
	var ap *redis.AutoPipeliner
	var err error
	if opts == nil {
		ap, err = rdb.AutoPipeline() // blocking face, DefaultBlockingAutoPipelineOptions
	} else {
		ap, err = rdb.AutoPipelineWithOptions(opts)
	}
	if err != nil {
		rdb.Close()
		return nil, err
	}
	v := &variant{name: label + sfx(setget), clientName: cname + sfx(setget), close: func() { ap.Close(); rdb.Close() }}
	if setget {
		v.lock = func(ctx context.Context, key, tok string) error {
			cmd := newSetGet(ctx, key, tok)
			_ = ap.Process(ctx, cmd) // blocking face: returns once executed
			return checkSetGet(cmd)
		}
	} else {
		v.lock = func(ctx context.Context, key, tok string) error {
			return checkScript(acqScript.EvalSha(ctx, ap, []string{key}, tok, ttlMs), "acquire")
		}
	}
	v.unlock = func(ctx context.Context, key, tok string) error {
		return checkScript(relScript.EvalSha(ctx, ap, []string{key}, tok), "release")
	}
	return v, nil
}

// --- variant 4: rueidis ----------------------------------------------------------

func newRueidis(addr string, setget bool) (*variant, error) {
	cname := "v4" + sfx(setget)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ClientName: cname})
	if err != nil {
		return nil, err
	}
	v := &variant{name: "4 rueidis" + sfx(setget), clientName: cname, close: rc.Close}
	ttl := fmt.Sprint(ttlMs)
	if setget {
		v.lock = func(ctx context.Context, key, tok string) error {
			r := rc.Do(ctx, rc.B().Set().Key(key).Value(tok).Nx().Get().PxMilliseconds(ttlMs).Build())
			err := r.Error()
			if rueidis.IsRedisNil(err) {
				return nil
			}
			if err != nil {
				return err
			}
			s, _ := r.ToString()
			return fmt.Errorf("held by %q", s)
		}
	} else {
		v.lock = func(ctx context.Context, key, tok string) error {
			n, err := acqLua.Exec(ctx, rc, []string{key}, []string{tok, ttl}).AsInt64()
			if err != nil {
				return err
			}
			if n != 1 {
				return fmt.Errorf("acquire returned %d", n)
			}
			return nil
		}
	}
	v.unlock = func(ctx context.Context, key, tok string) error {
		n, err := relLua.Exec(ctx, rc, []string{key}, []string{tok}).AsInt64()
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("release returned %d", n)
		}
		return nil
	}
	return v, nil
}
