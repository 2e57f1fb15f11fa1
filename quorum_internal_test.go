package redlock

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/engine"
	"github.com/quorumlock/redlock/internal/nodeio"
)

func TestExponentialBackoff(t *testing.T) {
	p := ExponentialBackoff(10*time.Millisecond, 320*time.Millisecond)
	for _, tt := range []struct {
		failed   int
		min, max time.Duration
	}{
		{0, 5 * time.Millisecond, 10 * time.Millisecond},
		{1, 5 * time.Millisecond, 10 * time.Millisecond},
		{2, 10 * time.Millisecond, 20 * time.Millisecond},
		{6, 160 * time.Millisecond, 320 * time.Millisecond},
		{7, 160 * time.Millisecond, 320 * time.Millisecond},
		{100, 160 * time.Millisecond, 320 * time.Millisecond},
	} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := p.Delay(tt.failed)
			if d < tt.min || d > tt.max {
				t.Fatalf("Delay(%d) = %v, want in [%v, %v]", tt.failed, d, tt.min, tt.max)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("Delay(%d) took only %d distinct values in 200 draws: no jitter", tt.failed, len(seen))
		}
	}
}

func TestRandomDelay(t *testing.T) {
	p := RandomDelay(time.Millisecond, 3*time.Millisecond)
	seen := map[time.Duration]bool{}
	for i := range 200 {
		d := p.Delay(i)
		if d < time.Millisecond || d > 3*time.Millisecond {
			t.Fatalf("Delay = %v, want in [1ms, 3ms]", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Errorf("only %d distinct delays in 200 draws: no jitter", len(seen))
	}
}

// hashed is the part of a key that a Redis Cluster node hashes to choose
// its slot, as the cluster specification says: the part between the first
// "{" and the first "}" after it, when that is not empty; else the key.
func hashed(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

func TestCompanion(t *testing.T) {
	// A key with no tag that contains "}" (such as "{}") cannot share a
	// slot with any other key: companion documents it.
	keys := []string{"order:1", "{order}:1", "{order}", "x", "{x}", "a{b", "user:{42}:cart", "{a}{b}", "{{order}:1}"}
	suffixes := []string{"fence", "released", "grants", "permits", "writer-waiting", "queue", "queue-deadlines", "tickets", "fenced-by"}
	seen := map[string]string{}
	for _, key := range keys {
		for _, suffix := range suffixes {
			c := companion(key, suffix)
			if hashed(c) != hashed(key) {
				t.Errorf("companion(%q, %q) = %q hashes %q, the key hashes %q: another slot", key, suffix, c, hashed(c), hashed(key))
			}
			if other, ok := seen[c]; ok {
				t.Errorf("companion(%q, %q) = %q, as for %s", key, suffix, c, other)
			}
			seen[c] = fmt.Sprintf("(%q, %q)", key, suffix)
			if _, isKey := seen[key]; isKey {
				t.Errorf("lock key %q is another key's companion", key)
			}
		}
	}
	if got := companion("order:1", "fence"); got != "{order:1}:fence" {
		t.Errorf("a key without a tag: %q, want the name it has always had, {order:1}:fence", got)
	}
}

// TestDesignated: of a split vote's holders, the one with the most nodes
// goes on, and among as many, the lowest name; a refusal that names no
// holder (another kind of lock) designates nobody, nor does a round that
// no node refused.
func TestDesignated(t *testing.T) {
	me := "MMMMMMMMtoken"
	lower, higher := engine.HolderName("AAAAAAAAother"), engine.HolderName("ZZZZZZZZother")
	if !(lower < engine.HolderName(me) && engine.HolderName(me) < higher) {
		t.Fatalf("names: lower %d, mine %d, higher %d", lower, engine.HolderName(me), higher)
	}
	tallyOf := func(answers []engine.Answer, names []int64) engine.Tally {
		tl := engine.Tally{Answers: answers, Replies: make([]nodeio.Reply, len(names))}
		for i, name := range names {
			if answers[i] == engine.Holds {
				tl.Replies[i] = nodeio.Reply{Held: true, Counter: 1}
			} else if name < 0 {
				tl.Replies[i].Holder.OtherKind = true // a lock of another kind
			} else {
				tl.Replies[i].Holder.Name = name
			}
		}
		for _, a := range answers {
			if a == engine.Holds {
				tl.Yes++
			}
		}
		return tl
	}
	for _, tc := range []struct {
		name    string
		answers []engine.Answer
		names   []int64 // for a node that refused: the holder's name, 0 for none, -1 for a lock of another kind
		want    bool
	}{
		{"most nodes", []engine.Answer{engine.Holds, engine.Holds, engine.HoldsNot}, []int64{1, 1, lower}, true},
		{"fewer nodes", []engine.Answer{engine.Holds, engine.HoldsNot, engine.HoldsNot}, []int64{1, higher, higher}, false},
		{"tie, lowest name", []engine.Answer{engine.Holds, engine.HoldsNot, engine.HoldsNot}, []int64{1, higher, higher + 5}, true},
		{"tie, higher name", []engine.Answer{engine.Holds, engine.HoldsNot, engine.Failed}, []int64{1, lower, 0}, false},
		{"tie, failed node", []engine.Answer{engine.Holds, engine.HoldsNot, engine.Failed}, []int64{1, higher, 0}, true},
		{"holds nothing", []engine.Answer{engine.HoldsNot, engine.HoldsNot, engine.HoldsNot}, []int64{lower, higher, higher}, false},
		{"another kind", []engine.Answer{engine.Holds, engine.HoldsNot, engine.HoldsNot}, []int64{1, 0, higher}, false},
		{"another kind's -1", []engine.Answer{engine.Holds, engine.Holds, engine.HoldsNot, engine.HoldsNot, engine.Failed}, []int64{1, 1, -1, higher, 0}, false},
		// No split: the rest failed, and another round asks only the
		// nodes that refused.
		{"no refusal", []engine.Answer{engine.Holds, engine.Failed, engine.Failed}, []int64{1, 0, 0}, false},
	} {
		tl := tallyOf(tc.answers, tc.names)
		if got := engine.Designated(&tl, me); got != tc.want {
			t.Errorf("%s: designated = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSend_skippedNodeKeepsItsLastCall: a node that a fan-out skips keeps,
// in the settlement the fan-out returns, the call of the operation before:
// the next call there must still follow it. It used to be settled at once,
// so that a failed attempt's delete, after a split round that skipped a
// node whose SET was still out, could land before that SET (unbatched) and
// leave the key until its ttl.
func TestSend_skippedNodeKeepsItsLastCall(t *testing.T) {
	s := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := New([]*redis.Client{rdb}, WithBatching(false))
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan struct{}) // the call before, still out
	before := engine.Settlement{Done: []chan struct{}{out}, Deadlines: []time.Time{time.Now().Add(time.Minute)}}
	_, settled := c.e.FanOut(context.Background(), engine.Terms{Timeout: time.Second, Base: time.Second}, nil, []bool{true}, before, releaseOn("k", "token", ""))
	if !settled.Out(0) {
		t.Fatal("the skipped node is settled while the call before it is still out")
	}
	close(out)
	if settled.Out(0) {
		t.Fatal("the skipped node is not settled once the call before it returned")
	}
}
