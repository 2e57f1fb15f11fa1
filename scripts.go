package redlock

import (
	"embed"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
)

// The per-node operations. Each runs one Lua script, so that comparing the
// token and acting on it is atomic on the node; a plain lock's acquire
// that is not fenced is one SET NX GET where it suffices (nodeio's SetNX).

var (
	acquireScript    = loadScript("acquire.lua")
	raiseFenceScript = loadScript("raise_fence.lua")
	extendScript     = loadScript("extend.lua")
	handOffScript    = loadScript("handoff.lua")
	releaseScript    = loadScript("release.lua")
	lineScript       = loadScript("line.lua")
	renewBatchScript = loadScript("renew_batch.lua")
	inspectScript    = loadScript("inspect.lua")
	// The resource's scripts run on the user's own go-redis client.
	fencedSetScript = redis.NewScript(scriptSource("fenced_set.lua"))
	fencedGetScript = redis.NewScript(scriptSource("fenced_get.lua"))
	reentrantScript = loadScript("kind_reentrant.lua")
	multiScript     = loadScript("kind_multi.lua")
	semaphoreScript = loadScript("kind_semaphore.lua")
	rwScript        = loadScript("kind_rw.lua")
	fairScript      = loadScript("kind_fair.lua")
)

// The scripts are the files of lua/, each run after the functions of
// lua/prelude.lua it uses, which the scripts share.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// loadScript is lua/file after the prelude.
func loadScript(file string) *nodeio.Script { return nodeio.NewScript(scriptSource(file)) }

// scriptSource is the text run for lua/file: the prelude's functions that
// the file uses (directly or through one another), then the file. Only
// those: a script runs its whole text on every call, so unused functions
// would slow every call.
func scriptSource(file string) string {
	body, err := luaFiles.ReadFile("lua/" + file)
	if err != nil {
		panic(err) // a name below that is not a file of lua/: caught by every test
	}
	funcs := preludeFuncs()
	used := make([]bool, len(funcs))
	for text, grown := string(body), true; grown; {
		grown = false
		for i, f := range funcs {
			if !used[i] && strings.Contains(text, f.name+"(") {
				used[i], grown, text = true, true, text+f.text
			}
		}
	}
	var b strings.Builder
	for i, f := range funcs {
		if used[i] {
			b.WriteString(f.text)
		}
	}
	b.Write(body)
	return b.String()
}

// luaFunc is a function of lua/prelude.lua: from its "local function" line
// to the next one's (its comment goes with the function before it).
type luaFunc struct{ name, text string }

var localFunction = regexp.MustCompile(`(?m)^local function (\w+)`)

func preludeFuncs() []luaFunc {
	prelude, err := luaFiles.ReadFile("lua/prelude.lua")
	if err != nil {
		panic(err)
	}
	at := localFunction.FindAllSubmatchIndex(prelude, -1)
	funcs := make([]luaFunc, len(at))
	for i, m := range at {
		end := len(prelude)
		if i+1 < len(at) {
			end = at[i+1][0]
		}
		funcs[i] = luaFunc{name: string(prelude[m[2]:m[3]]), text: string(prelude[m[0]:end])}
	}
	return funcs
}

// companion names a key or channel that belongs to the lock key key (its
// fencing counter, a kind's own keys, its release channel) in key's Redis
// Cluster hash slot, so that one script may use both on a cluster node. A
// key with a hash tag keeps it ("{order}:1" gives "{order}:1::fence");
// any other key becomes the tag ("order:1" gives "{order:1}:fence"). The
// two forms never collide: one suffix follows "::", the other "}:". A key
// without a hash tag that contains "}" cannot share a slot with any
// other key; on a Redis Cluster, give such a key a tag.
func companion(key, suffix string) string {
	if hasHashTag(key) {
		return key + "::" + suffix
	}
	return "{" + key + "}:" + suffix
}

// hasHashTag reports whether a Redis Cluster node hashes only part of key:
// a "{" followed, after at least one character, by a "}".
func hasHashTag(key string) bool {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return false
	}
	return strings.IndexByte(key[open+1:], '}') > 0
}

// fenceKey is where a node keeps the fencing counter of a lock key.
func fenceKey(key string) string { return companion(key, "fence") }

// acquireOn takes key for token; keep is how long its fencing counter is
// kept once the node's clock has passed it, 0 for a lock not fenced, whose
// acquire is a SET NX where the node takes it (nodeio's SetNX).
func acquireOn(key, token string, ttl, keep time.Duration) nodeOp {
	px := engine.PXMillis(ttl)
	if keep > 0 {
		return nodeOp{Script: acquireScript, Keys: []string{key, fenceKey(key)}, Args: []any{token, px, engine.PXMillis(keep)}, Shape: nodeio.Grant, Holds: true, Takes: true}
	}
	return nodeOp{Script: acquireScript, Keys: []string{key}, Args: []any{token, px}, Shape: nodeio.Grant, Holds: true, Takes: true, SetNX: true}
}

// handOffOn takes key for token where it holds from's token, one of
// from's run (runOf), or is free; see handoff.lua for its result. keep
// is as acquireOn's.
func handOffOn(key, token, from, run string, ttl, keep time.Duration) nodeOp {
	keys := []string{key}
	if keep > 0 {
		keys = append(keys, fenceKey(key))
	}
	args := []any{token, engine.PXMillis(ttl), from, releaseChannel(key), engine.PXMillis(keep), run}
	return nodeOp{Script: handOffScript, Keys: keys, Args: args, Shape: nodeio.HandOff, Holds: true, Takes: true}
}

// raiseFenceOn sets the node's fencing (or ticket) counters to at least
// token, kept for keep once the node's clock has passed it (prelude.lua).
func raiseFenceOn(counters []string, token uint64, keep time.Duration) nodeOp {
	return nodeOp{Script: raiseFenceScript, Keys: counters, Args: []any{token, engine.PXMillis(keep)}, Holds: true}
}

// extendOn lengthens key where it holds token and takes it where it is
// free (extend.lua): it may take a key, as an acquire does.
func extendOn(key, token string, ttl time.Duration) nodeOp {
	return nodeOp{Script: extendScript, Keys: []string{key}, Args: []any{token, engine.PXMillis(ttl)}, Holds: true, Takes: true}
}

// releaseOn deletes key if it holds token or, when run is not "", one of
// the tokens of its run (runOf), and announces it on the key's release
// channel, so that waiters try again at once.
func releaseOn(key, token, run string) nodeOp {
	return nodeOp{Script: releaseScript, Keys: []string{key, lineKey(key), wokenKey(key)}, Args: []any{token, releaseChannel(key), run}}
}

// lineKey is the line of a plain lock's waiters on a node (line.lua).
func lineKey(key string) string { return companion(key, "line") }

// wokenKey holds the names of the waiters in the line that a release woke
// and that have not joined it again since (release.lua).
func wokenKey(key string) string { return companion(key, "line-woken") }

// lineOn joins (join true) or leaves the line of key's waiters on a node
// under the waiter's name; a line lasts ttl after the last join.
func lineOn(key, name string, join bool, ttl time.Duration) nodeOp {
	op := "leave"
	if join {
		op = "join"
	}
	return nodeOp{Script: lineScript, Keys: []string{lineKey(key), wokenKey(key)}, Args: []any{op, name, engine.PXMillis(ttl)}}
}

// dropOn deletes key if it holds token, without announcing it: the cleanup
// of a failed attempt. Nobody held that lock, and waking every waiter
// after each failed attempt would set them colliding again and again.
func dropOn(key, token string) nodeOp {
	return nodeOp{Script: releaseScript, Keys: []string{key}, Args: []any{token, ""}}
}

// releaseChannel is where the nodes announce that key was released.
func releaseChannel(key string) string { return companion(key, "released") }
