package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Semantics checks of go-redis v9.23's AutoPipeline against the source
// reading: per-command contexts, NOSCRIPT with Script.Run, and hooks.

// busyLua keeps the server busy for ARGV[1] µs, so that commands sent
// meanwhile wait in the server's input buffers.
const busyLua = `local t0 = redis.call('TIME')
local s = tonumber(t0[1]) * 1000000 + tonumber(t0[2])
while true do
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000000 + tonumber(t[2]) - s > tonumber(ARGV[1]) then break end
end
return 1`

type ctxKey struct{}

type countHook struct {
	proc, pipe, pipeCmds, withVal, withoutVal atomic.Int64
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.proc.Add(1)
		h.seen(ctx)
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipe.Add(1)
		h.pipeCmds.Add(int64(len(cmds)))
		h.seen(ctx)
		return next(ctx, cmds)
	}
}
func (h *countHook) seen(ctx context.Context) {
	if ctx.Value(ctxKey{}) != nil {
		h.withVal.Add(1)
	} else {
		h.withoutVal.Add(1)
	}
}

type target struct {
	name string
	c    redis.Cmdable
	proc func(ctx context.Context, cmd redis.Cmder) error
	done func()
}

func targets(addr string) []target {
	var out []target
	mk := func(name string, cte bool, ap *redis.AutoPipelineOptions, useAP bool) {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: cte})
		if !useAP {
			out = append(out, target{name, rdb, rdb.Process, func() { rdb.Close() }})
			return
		}
		var p *redis.AutoPipeliner
		var err error
		if ap == nil {
			p, err = rdb.AutoPipeline()
		} else {
			p, err = rdb.AutoPipelineWithOptions(ap)
		}
		if err != nil {
			panic(err)
		}
		out = append(out, target{name, p, p.Process, func() { p.Close(); rdb.Close() }})
	}
	mk("plain client", false, nil, false)
	mk("plain client, ContextTimeoutEnabled", true, nil, false)
	mk("AutoPipeline default", false, nil, true)
	mk("AutoPipeline default, ContextTimeoutEnabled", true, nil, true)
	mk("AutoPipeline FullDuplex", false, &redis.AutoPipelineOptions{FullDuplex: true}, true)
	return out
}

func checks(addr string) int {
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	fmt.Println("\n== semantics checks (go-redis v9.23 AutoPipeline) ==")

	// (a) order on the server of calls issued one after another (1 ms apart,
	// each by its own goroutine, which stays blocked in its call) while the
	// server is busy, so that they queue together.
	fmt.Println("\n-- a: 16 RPUSH L i, i = 0..15, issued 1 ms apart by 16 goroutines while the server is busy 60 ms; LRANGE L afterwards")
	orderCheck(ctx, admin, addr)

	// (c1) a context cancelled before the call.
	fmt.Println("\n-- c1: SET with a context cancelled before the call: error returned / key written?")
	for i, t := range targets(addr) {
		key := fmt.Sprintf("chk:c1:%d", i)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := t.c.Set(cctx, key, "x", time.Minute).Err()
		n, _ := admin.Exists(ctx, key).Result()
		fmt.Printf("   %-46s err=%v  written=%v\n", t.name, err, n == 1)
		t.done()
	}

	// (c2) deadline expiring while the command waits behind a 300 ms busy script;
	// a second command without a deadline is issued at the same moment (so on
	// the autopipeline both ride one batch).
	fmt.Println("\n-- c2: server busy 300 ms; SET A with a 50 ms deadline and SET B without one, issued together")
	busy := redis.NewScript(busyLua)
	for i, t := range targets(addr) {
		ka, kb := fmt.Sprintf("chk:c2a:%d", i), fmt.Sprintf("chk:c2b:%d", i)
		started := make(chan struct{})
		var bwg sync.WaitGroup
		bwg.Add(1)
		go func() {
			defer bwg.Done()
			close(started)
			_ = busy.Run(ctx, admin, nil, 300000).Err()
		}()
		<-started
		time.Sleep(30 * time.Millisecond)
		var wg sync.WaitGroup
		var ea, eb error
		var da, db time.Duration
		wg.Add(2)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			t0 := time.Now()
			ea = t.c.Set(actx, ka, "x", time.Minute).Err()
			da = time.Since(t0)
		}()
		go func() {
			defer wg.Done()
			t0 := time.Now()
			eb = t.c.Set(ctx, kb, "x", time.Minute).Err()
			db = time.Since(t0)
		}()
		wg.Wait()
		bwg.Wait()
		time.Sleep(20 * time.Millisecond)
		na, _ := admin.Exists(ctx, ka).Result()
		nb, _ := admin.Exists(ctx, kb).Result()
		fmt.Printf("   %-46s A: err=%v after %v written=%v | B: err=%v after %v written=%v\n",
			t.name, short(ea), da.Round(time.Millisecond), na == 1, short(eb), db.Round(time.Millisecond), nb == 1)
		t.done()
	}

	// (d) NOSCRIPT: EvalSha after SCRIPT FLUSH, and Script.Run (EVALSHA, then EVAL on NOSCRIPT).
	fmt.Println("\n-- d: after SCRIPT FLUSH: EvalSha / Script.Run through the AutoPipeline (16 concurrent callers)")
	for _, t := range targets(addr)[2:] {
		s := redis.NewScript(`return 7`)
		_ = admin.ScriptFlush(ctx).Err()
		errSha := s.EvalSha(ctx, t.c.(redis.Scripter), nil).Err()
		_ = admin.ScriptFlush(ctx).Err()
		var ok, bad atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if v, err := s.Run(ctx, t.c.(redis.Scripter), nil).Int64(); err == nil && v == 7 {
					ok.Add(1)
				} else {
					bad.Add(1)
				}
			}()
		}
		wg.Wait()
		fmt.Printf("   %-46s EvalSha err=%v | Script.Run: %d ok, %d failed\n", t.name, short(errSha), ok.Load(), bad.Load())
		t.done()
	}

	// (e) hooks added with AddHook on the client: which hook runs, and does it
	// see the caller's context (a value on it, as a tracing span would be)?
	fmt.Println("\n-- e: hooks via AddHook: 1 lone call, then 16 goroutines x 100 calls, ctx carries a value")
	for _, opts := range []*redis.AutoPipelineOptions{nil, {FullDuplex: true}} {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		h := &countHook{}
		rdb.AddHook(h)
		var ap *redis.AutoPipeliner
		var err error
		name := "AutoPipeline default"
		if opts == nil {
			ap, err = rdb.AutoPipeline()
		} else {
			ap, err = rdb.AutoPipelineWithOptions(opts)
			name = "AutoPipeline FullDuplex"
		}
		if err != nil {
			panic(err)
		}
		vctx := context.WithValue(ctx, ctxKey{}, "span")
		_ = ap.Set(ctx, "chk:e:warm", "x", time.Minute).Err() // dial + connection init first
		time.Sleep(10 * time.Millisecond)
		*h = countHook{}
		_ = ap.Set(vctx, "chk:e:lone", "x", time.Minute).Err()
		lone := fmt.Sprintf("lone call: process hooks %d, pipeline hooks %d, ctx value seen %d/%d",
			h.proc.Load(), h.pipe.Load(), h.withVal.Load(), h.withVal.Load()+h.withoutVal.Load())
		*h = countHook{}
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for j := 0; j < 100; j++ {
					_ = ap.Set(vctx, fmt.Sprintf("chk:e:%d:%d", g, j), "x", time.Minute).Err()
				}
			}(g)
		}
		wg.Wait()
		fmt.Printf("   %-24s %s\n   %-24s 1600 calls: process hooks %d, pipeline hooks %d (%d cmds), ctx value seen %d/%d\n",
			name, lone, "", h.proc.Load(), h.pipe.Load(), h.pipeCmds.Load(), h.withVal.Load(), h.withVal.Load()+h.withoutVal.Load())
		ap.Close()
		rdb.Close()
	}
	_ = admin.FlushDB(ctx).Err()
	// the benchmark's scripts are needed again if the caller reruns
	_ = acqScript.Load(ctx, admin).Err()
	_ = relScript.Load(ctx, admin).Err()
	return 0
}

func short(err error) string {
	if err == nil {
		return "nil"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "i/o timeout"
	}
	s := err.Error()
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}

func orderCheck(ctx context.Context, admin *redis.Client, addr string) {
	busy := redis.NewScript(busyLua)
	type pusher struct {
		name string
		push func(ctx context.Context, key string, i int) error
		done func()
	}
	var ps []pusher
	{
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		ps = append(ps, pusher{"plain pooled client", func(ctx context.Context, key string, i int) error {
			return rdb.RPush(ctx, key, i).Err()
		}, func() { rdb.Close() }})
	}
	{
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		p := newPipe(rdb, idleExit, 0, 0, false)
		ps = append(ps, pusher{"pipe (variant 2)", func(ctx context.Context, key string, i int) error {
			return p.do(ctx, func(ctx context.Context, r runner) redis.Cmder {
				c := redis.NewIntCmd(ctx, "rpush", key, i)
				_ = r.Process(ctx, c)
				return c
			}).Err()
		}, func() { rdb.Close() }})
	}
	for _, o := range []struct {
		name string
		opts *redis.AutoPipelineOptions
	}{
		{"AutoPipeline default (blocking face)", nil},
		{"AutoPipeline FullDuplex", &redis.AutoPipelineOptions{FullDuplex: true}},
		{"AutoPipeline Unordered, 4 batches", &redis.AutoPipelineOptions{Unordered: true, MaxConcurrentBatches: 4}},
	} {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		var ap *redis.AutoPipeliner
		var err error
		if o.opts == nil {
			ap, err = rdb.AutoPipeline()
		} else {
			ap, err = rdb.AutoPipelineWithOptions(o.opts)
		}
		if err != nil {
			panic(err)
		}
		ps = append(ps, pusher{o.name, func(ctx context.Context, key string, i int) error {
			return ap.RPush(ctx, key, i).Err()
		}, func() { ap.Close(); rdb.Close() }})
	}
	for pi, p := range ps {
		inOrder := 0
		const trials = 5
		var sample []string
		for t := 0; t < trials; t++ {
			key := fmt.Sprintf("chk:a:%d:%d", pi, t)
			_ = p.push(ctx, "chk:a:warm", 0) // connections up
			var bwg sync.WaitGroup
			bwg.Add(1)
			go func() { defer bwg.Done(); _ = busy.Run(ctx, admin, nil, 60000).Err() }()
			time.Sleep(5 * time.Millisecond)
			var wg sync.WaitGroup
			for i := 0; i < 16; i++ {
				wg.Add(1)
				go func(i int) { defer wg.Done(); _ = p.push(ctx, key, i) }(i)
				time.Sleep(time.Millisecond)
			}
			wg.Wait()
			bwg.Wait()
			got, _ := admin.LRange(ctx, key, 0, -1).Result()
			ok := len(got) == 16
			for i := 1; ok && i < len(got); i++ {
				if fmt.Sprint(i) != got[i] || got[0] != "0" {
					ok = false
				}
			}
			if ok {
				inOrder++
			} else if sample == nil {
				sample = got
			}
		}
		fmt.Printf("   %-38s in issue order in %d/%d trials", p.name, inOrder, trials)
		if sample != nil {
			fmt.Printf("; e.g. %v", sample)
		}
		fmt.Println()
		p.done()
	}
}
