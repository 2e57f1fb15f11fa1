package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/internal/engine"
)

// ErrStaleToken is returned by FencedSet and FencedGet when a higher
// fencing token has already been seen for the key (written, or read with
// FencedGet): the caller's lock has since passed to a newer holder.
var ErrStaleToken = errors.New("redlock: stale fencing token")

// FencedSet sets key to value on rdb (the resource the lock protects, not a
// lock node) only if token is not lower than the highest token it has seen
// for key (written, or read with FencedGet), and records token as the
// highest, in one Lua script, so no write with a lower token lands after a
// higher one. The highest token is kept under "{key}:fenced-by" (a key
// with a Cluster hash tag uses "key::fenced-by", in the key's slot).
//
// On its own it orders writes: a value computed from an earlier read can
// still be stale (two holders that read the same value both write). For a
// read-modify-write, read with FencedGet under the same token first.
//
// It returns an error matching ErrStaleToken, naming both tokens, when the
// write was refused; rdb's error when the script could not run; and an
// error matching ErrInvalidArgument for an empty key or token 0, before
// rdb is called. Pass lock.FencingToken() of a lock acquired WithFencing.
func FencedSet(ctx context.Context, rdb redis.Scripter, key, value string, token uint64) error {
	if err := nilContext(ctx, "FencedSet"); err != nil {
		return err
	}
	if key == "" {
		return engine.Invalid("empty key")
	}
	if token == 0 {
		return engine.Invalid("fencing token 0: acquire the lock WithFencing")
	}
	res, err := fencedSetScript.Run(ctx, rdb, []string{key, companion(key, "fenced-by")}, value, strconv.FormatUint(token, 10)).Slice()
	if err != nil {
		return fmt.Errorf("redlock: fenced set %q: %w", key, err)
	}
	if ok, _ := res[0].(int64); ok == 0 {
		return fmt.Errorf("%w: token %d for %q is below %v, already applied", ErrStaleToken, token, key, res[1])
	}
	return nil
}

// FencedGet reads key on rdb (the resource the lock protects, not a lock
// node) for the holder of fencing token token, and records token as the
// highest seen for key, unless a higher one was seen already; from then on
// FencedSet and FencedGet refuse every lower token. So a read-modify-write
// made of FencedGet, then FencedSet of the new value, under one token, is
// never interleaved with another holder's: once a newer holder has read
// the key, an older holder's write is refused, so of two holders that
// overlap (the first paused past its validity) and read the same value,
// the older one's write fails with ErrStaleToken and must be dropped. The
// check, the record and the read are one Lua script.
//
// It returns the value; an error matching redis.Nil when key does not
// exist (the token is recorded all the same); an error matching
// ErrStaleToken, naming both tokens, when a higher token was seen; rdb's
// error when the script could not run; and an error matching
// ErrInvalidArgument for an empty key or token 0, before rdb is called.
// Pass lock.FencingToken() of a lock acquired WithFencing.
func FencedGet(ctx context.Context, rdb redis.Scripter, key string, token uint64) (string, error) {
	if err := nilContext(ctx, "FencedGet"); err != nil {
		return "", err
	}
	if key == "" {
		return "", engine.Invalid("empty key")
	}
	if token == 0 {
		return "", engine.Invalid("fencing token 0: acquire the lock WithFencing")
	}
	res, err := fencedGetScript.Run(ctx, rdb, []string{key, companion(key, "fenced-by")}, strconv.FormatUint(token, 10)).Slice()
	if err != nil {
		return "", fmt.Errorf("redlock: fenced get %q: %w", key, err)
	}
	if ok, _ := res[0].(int64); ok == 0 {
		return "", fmt.Errorf("%w: token %d for %q is below %v, already seen", ErrStaleToken, token, key, res[1])
	}
	value, found := res[1].(string)
	if !found {
		return "", fmt.Errorf("redlock: fenced get %q: %w", key, redis.Nil)
	}
	return value, nil
}

// settleFence picks the fencing token of a fenced acquire that won its
// quorum: the highest counter the nodes that took the lock answered. It
// then makes sure that a quorum of those nodes store at least that value,
// raising those that answered less (a node restarted empty, or that missed
// an earlier acquire) and, in the background, those that did not take
// part. Only a node that holds the lock counts: the next holder's quorum
// shares one with ours and takes the key there only after our hold, hence
// after the raise; where we lost, a competitor may already have drawn a
// lower token, and win once our lock has ended. The raises are answered
// before the validity is reckoned, so each landed while the node held our
// key. Usually every node answered the same value and nothing is sent.
func (c *Client) settleFence(ctx context.Context, a *acquisition, t engine.Tally) (uint64, bool) {
	q := a.kind.quorum(len(c.nodes))
	fence, atFence := highestFence(t)
	if atFence == len(t.Answers) {
		return fence, true
	}
	skip := make([]bool, len(t.Answers))
	for i, ans := range t.Answers {
		skip[i] = ans == engine.Holds && t.Replies[i].Counter == fence
	}
	stored := func(r *engine.Tally) bool {
		n := atFence
		for i, ans := range r.Answers {
			if ans == engine.Holds && t.Answers[i] == engine.Holds {
				n++
			}
		}
		return n >= q
	}
	r := a.fanOut(ctx, c, stored, skip, raiseFenceOn(a.kind.fenceKeys(), fence, a.cfg.counterKeep()))
	if stored(&r) {
		return fence, true
	}
	return fence, atFence+c.confirmRaised(ctx, a, t, r) >= q
}

// highestFence is the fencing token of a won acquire (t): the highest
// counter the nodes that took it answered, and how many answered it.
func highestFence(t engine.Tally) (fence uint64, at int) {
	for i, ans := range t.Answers {
		if ans == engine.Holds {
			fence = max(fence, t.Replies[i].Counter)
		}
	}
	for i, ans := range t.Answers {
		if ans == engine.Holds && t.Replies[i].Counter == fence {
			at++
		}
	}
	return fence, at
}

// unansweredRaised marks the nodes, of those raised (r), whose acquire
// (t) went unanswered: others is true for every other node, ask whether
// there is one.
func unansweredRaised(t, r engine.Tally) (others []bool, ask bool) {
	others = make([]bool, len(t.Answers))
	for i, ans := range t.Answers {
		others[i] = ans == engine.Holds || ans == engine.HoldsNot || r.Answers[i] != engine.Holds
		ask = ask || !others[i]
	}
	return others, ask
}

// confirmRaised counts the nodes, among those raised (r) but not answering
// the fence already, that hold the lock: those that took the acquire (t),
// and those whose acquire went unanswered but whose extend, sent after the
// raise, shows the key was there when the raise landed. Such a node makes
// up for a holder that failed before its raise (frozen between the calls).
func (c *Client) confirmRaised(ctx context.Context, a *acquisition, t, r engine.Tally) int {
	others, ask := unansweredRaised(t, r)
	var e engine.Tally
	if ask {
		e = a.fanOut(ctx, c, nil, others, a.kind.extend(a.token, a.cfg.TTL))
	}
	n := 0
	for i, ans := range t.Answers {
		if r.Answers[i] == engine.Holds && (ans == engine.Holds || ask && e.Answers[i] == engine.Holds) {
			n++
		}
	}
	return n
}
