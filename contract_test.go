package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAcquire_misconfiguredMajorityStopsTheWait: errors that retrying
// cannot cure, on enough nodes that no quorum can form, end Acquire at once
// with an error that matches ErrNotAcquired and ErrMisconfigured and names
// each node, rather than retrying until the context ends.
func TestAcquire_misconfiguredMajorityStopsTheWait(t *testing.T) {
	for _, tc := range []struct {
		reply, hint string
		opts        []redlock.AcquireOption
	}{
		{reply: "NOAUTH Authentication required.", hint: "password"},
		// What a server that needs a password answers a long command
		// (every kind's script but the plain lock's) before AUTH.
		{reply: "ERR Protocol error: unauthenticated multibulk length", hint: "password"},
		{reply: "WRONGPASS invalid username-password pair or user is disabled.", hint: "password"},
		{reply: "READONLY You can't write against a read only replica.", hint: "replica"},
		{reply: "MOVED 866 127.0.0.1:7001", hint: "ClusterClient"},
		{reply: "CROSSSLOT Keys in request don't hash to the same slot", hint: "hash tag"},
		{reply: "NOPERM this user has no permissions to run the 'evalsha' command", hint: "ACL"},
		{reply: "ERR unknown command 'evalsha', with args beginning with: ", hint: "Lua"},
		// A plain lock's SET reads WRONGTYPE as a key held by another
		// kind, as acquire.lua does; a kind's script fails on it.
		{reply: "WRONGTYPE Operation against a key holding the wrong kind of value", hint: "another key", opts: []redlock.AcquireOption{redlock.WithOwner("alice")}},
	} {
		t.Run(strings.Fields(tc.reply)[0], func(t *testing.T) {
			c := newCluster(t, 3)
			c.servers[0].SetError(tc.reply)
			c.servers[2].SetError(tc.reply)
			rc := c.client(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			_, err := rc.Acquire(ctx, "k", time.Second, tc.opts...)
			if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, redlock.ErrMisconfigured) {
				t.Fatalf("err = %v, want ErrNotAcquired and ErrMisconfigured", err)
			}
			if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Acquire waited for its context: %v", err)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Fatalf("Acquire took %v with the quorum out of reach", took)
			}
			for _, want := range []string{"node 0 (" + c.addrs[0] + ")", "node 2 (" + c.addrs[2] + ")", tc.reply, tc.hint} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want it to say %q", err, want)
				}
			}
			var ne *redlock.NodeError
			if !errors.As(err, &ne) || !errors.Is(ne, redlock.ErrMisconfigured) {
				t.Errorf("no *NodeError matching ErrMisconfigured in %v", err)
			}
			// A node that answered after the outcome was known gets its
			// delete in the background.
			waitIdle(t, rc)
			if got := c.holdersAny("k"); len(got) != 0 {
				t.Errorf("the key was left on nodes %v", got)
			}
		})
	}
}

// TestAcquire_transientErrorsAreRetried: LOADING, BUSY, TRYAGAIN and the
// like pass; Acquire keeps trying until its context ends, and then it
// acquires once the nodes are back.
func TestAcquire_transientErrorsAreRetried(t *testing.T) {
	for _, reply := range []string{
		"LOADING Redis is loading the dataset in memory",
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
		"TRYAGAIN Multiple keys request during rehashing of slot",
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
		"CLUSTERDOWN The cluster is down",
	} {
		t.Run(strings.Fields(reply)[0], func(t *testing.T) {
			c := newCluster(t, 3)
			c.servers[0].SetError(reply)
			c.servers[1].SetError(reply)
			rc := c.client(t, redlock.WithRetry(redlock.RandomDelay(5*time.Millisecond, 10*time.Millisecond)))
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := rc.Acquire(ctx, "k", time.Second)
			if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redlock.ErrMisconfigured) {
				t.Fatalf("err = %v, want ErrNotAcquired with the context's deadline, not ErrMisconfigured", err)
			}
			c.servers[0].SetError("")
			lock, err := rc.Acquire(context.Background(), "k", time.Second)
			if err != nil {
				t.Fatalf("Acquire after the node came back: %v", err)
			}
			mustRelease(t, lock)
		})
	}
}

// TestAcquire_misconfiguredMinorityIsReported: with a quorum of good nodes
// the lock is taken, and the bad node is logged as a warning and reported
// to the Observer at the first operation, once until it is fixed.
func TestAcquire_misconfiguredMinorityIsReported(t *testing.T) {
	c := newCluster(t, 3)
	c.servers[1].SetError("NOAUTH Authentication required.")
	var log syncBuffer
	var ev recorder
	rc := c.client(t, redlock.WithLogger(slog.New(slog.NewTextHandler(&log, nil))), redlock.WithObserver(&ev))
	ctx := context.Background()
	lock, err := rc.Acquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatalf("Acquire with 2 of 3 nodes good: %v", err)
	}
	// The lock was won on the two good nodes; the bad node's reply may come
	// just after Acquire returned.
	waitFor(t, "the warning about node 1", func() bool {
		s := log.String()
		return strings.Contains(s, "level=WARN") && strings.Contains(s, "misconfigured") && strings.Contains(s, "NOAUTH") && len(ev.seen(redlock.OpMisconfigured)) > 0
	})
	if got := ev.seen(redlock.OpMisconfigured); len(got) != 1 || got[0].Node != 1 || !errors.Is(got[0].Err, redlock.ErrMisconfigured) {
		t.Errorf("OpMisconfigured events %+v, want one for node 1 with an error matching ErrMisconfigured", got)
	}
	if err := lock.Extend(ctx, time.Second); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	mustRelease(t, lock)
	waitIdle(t, rc)
	if n := strings.Count(log.String(), "level=WARN msg=\"redlock: a node is misconfigured"); n != 1 {
		t.Errorf("%d warnings about the node after three operations, want 1 (once until it is fixed):\n%s", n, log.String())
	}
	if got := ev.seen(redlock.OpMisconfigured); len(got) != 1 {
		t.Errorf("%d OpMisconfigured events after three operations, want 1", len(got))
	}
}

// TestWithMaxAttempts: Acquire gives up after n attempts with
// ErrNotAcquired, although its context has time left; given to New it is
// the Client's default, given to Acquire it wins; 0 and below are refused.
func TestWithMaxAttempts(t *testing.T) {
	c := newCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := mustTryAcquire(t, c.client(t), ctx, "k", time.Minute)
	defer mustRelease(t, holder)

	var ev recorder
	rc := c.client(t, redlock.WithObserver(&ev), redlock.WithMaxAttempts(2),
		redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 2*time.Millisecond)))
	for _, tc := range []struct {
		opts []redlock.AcquireOption
		want int
	}{
		{nil, 2},
		{[]redlock.AcquireOption{redlock.WithMaxAttempts(5)}, 5},
		{[]redlock.AcquireOption{redlock.WithMaxAttempts(1)}, 1},
	} {
		_, err := rc.Acquire(ctx, "k", time.Second, tc.opts...)
		if !errors.Is(err, redlock.ErrNotAcquired) || ctx.Err() != nil {
			t.Fatalf("err = %v, want ErrNotAcquired before the context ended", err)
		}
		if !strings.Contains(err.Error(), "WithMaxAttempts") {
			t.Errorf("err = %v, want it to say the attempts ran out", err)
		}
		acq := ev.seen(redlock.OpAcquire)
		if got := acq[len(acq)-1].Attempts; got != tc.want {
			t.Errorf("attempts = %d, want %d", got, tc.want)
		}
	}
	for _, n := range []int{0, -1} {
		if _, err := rc.Acquire(ctx, "k", time.Second, redlock.WithMaxAttempts(n)); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("Acquire with WithMaxAttempts(%d): err = %v, want ErrInvalidArgument", n, err)
		}
		if _, err := redlock.New(c.clients, redlock.WithMaxAttempts(n)); !errors.Is(err, redlock.ErrInvalidArgument) {
			t.Errorf("New with WithMaxAttempts(%d): err = %v, want ErrInvalidArgument", n, err)
		}
	}
}

// TestObserver_handedOverCountsNoAttempt: an Acquire served by the local
// queue, handed the lock without contacting the nodes for an attempt of its
// own, reports 0 attempts.
func TestObserver_handedOverCountsNoAttempt(t *testing.T) {
	c := newCluster(t, 3)
	var ev recorder
	rc := c.client(t, redlock.WithObserver(&ev))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first, err := rc.Acquire(ctx, "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waiting := queuedAcquire(t, rc, ctx, "k", time.Minute)
	mustRelease(t, first)
	mustRelease(t, mustGet(t, waiting))
	acq := ev.seen(redlock.OpAcquire)
	if len(acq) != 2 || acq[0].Attempts != 1 || acq[1].Attempts != 0 {
		t.Fatalf("OpAcquire events %+v, want attempts 1 then 0 (handed over)", acq)
	}
}

// TestExtend_notConfirmedIsNotLost: one node, one transient failure of an
// Extend: the lock is not lost. The error does not match ErrLockLost, says
// until when the lock is valid, Done stays open, and the next Extend works.
func TestExtend_notConfirmedIsNotLost(t *testing.T) {
	c := newCluster(t, 1)
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t), ctx, "k", time.Hour)
	done := lock.Done()
	until := lock.Until()
	c.servers[0].SetError("LOADING Redis is loading the dataset in memory")
	err := lock.Extend(ctx, time.Hour)
	c.servers[0].SetError("")
	if !errors.Is(err, redlock.ErrNotConfirmed) || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("err = %v, want ErrNotConfirmed, not ErrLockLost", err)
	}
	if !strings.Contains(err.Error(), "still valid until") || !strings.Contains(err.Error(), "LOADING") {
		t.Errorf("err = %v, want it to say until when the lock is valid, and the node's error", err)
	}
	if !lock.Until().Equal(until) || lock.Validity() < 59*time.Minute {
		t.Errorf("Until %v (validity %v) after an unconfirmed Extend, want %v unchanged", lock.Until(), lock.Validity(), until)
	}
	select {
	case <-done:
		t.Fatal("Done closed after an unconfirmed Extend")
	default:
	}
	if err := lock.Extend(ctx, time.Hour); err != nil {
		t.Fatalf("the next Extend: %v", err)
	}
	mustRelease(t, lock)
}

// TestExtend_majorityGoneIsLost: when a majority answers that the key is not
// the lock's, Extend returns ErrLockLost and the lock ends: Done is closed
// and a later Extend fails without contacting the nodes.
func TestExtend_majorityGoneIsLost(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	rc := c.client(t)
	lock := mustTryAcquire(t, rc, ctx, "k", time.Hour)
	waitIdle(t, rc) // the acquire's calls have all landed: none sets the key again
	c.servers[0].Del("k")
	c.servers[1].Del("k")
	err := lock.Extend(ctx, time.Hour)
	if !errors.Is(err, redlock.ErrLockLost) || errors.Is(err, redlock.ErrNotConfirmed) {
		t.Fatalf("err = %v, want ErrLockLost", err)
	}
	select {
	case <-lock.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done still open after the lock was lost")
	}
	if err := lock.Extend(ctx, time.Hour); !errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend after the loss: %v, want ErrLockLost", err)
	}
	_ = lock.Release(ctx)
}

// TestRelease_notConfirmedIsNotLost: a Release that too many nodes fail to
// answer does not say the lock was lost.
func TestRelease_notConfirmedIsNotLost(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	lock := mustTryAcquire(t, c.client(t), ctx, "k", time.Hour)
	c.servers[0].SetError("LOADING Redis is loading the dataset in memory")
	c.servers[1].SetError("LOADING Redis is loading the dataset in memory")
	err := lock.Release(ctx)
	if !errors.Is(err, redlock.ErrNotConfirmed) || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("err = %v, want ErrNotConfirmed, not ErrLockLost", err)
	}
}

// serverError is an error reply of a Redis server, as go-redis gives it.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// readOnlyAcquires makes a node answer the acquire script as a replica
// does (READONLY), while the scripts that find nothing to write (a release
// or an extend of a key it never took) answer without an error.
type readOnlyAcquires struct{}

func (readOnlyAcquires) DialHook(next redis.DialHook) redis.DialHook { return next }

func (readOnlyAcquires) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if scriptOf(cmd) == acquireSHA {
			cmd.SetErr(serverError("READONLY You can't write against a read only replica."))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (readOnlyAcquires) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAcquire_misconfiguredReplicaWarnedOnce: a replica in the minority is
// warned about once over many locks, although its answers to releases (which
// find nothing to delete) carry no error.
func TestAcquire_misconfiguredReplicaWarnedOnce(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	addHook(t, c.clients[2], readOnlyAcquires{})
	var ev recorder
	rc := c.client(t, redlock.WithObserver(&ev), redlock.WithBatching(false))
	ctx := context.Background()
	for range 5 {
		lock, err := rc.Acquire(ctx, "k", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		mustRelease(t, lock)
	}
	waitIdle(t, rc)
	if got := ev.seen(redlock.OpMisconfigured); len(got) != 1 || got[0].Node != 2 {
		t.Fatalf("%d OpMisconfigured events over 5 locks, want 1 for node 2: %+v", len(got), got)
	}
}

// TestWithMaxAttempts_bounded: a bounded Acquire returns before its
// context ends also when a fair lock's ticket cannot be drawn (two nodes
// down) and when the holder is another goroutine of the same Client.
func TestWithMaxAttempts_bounded(t *testing.T) {
	t.Run("fair ticket", func(t *testing.T) {
		c := newCluster(t, 3)
		rc := c.client(t, redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 2*time.Millisecond)))
		c.servers[0].Close()
		c.servers[1].Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := rc.Acquire(ctx, "k", time.Second, redlock.Fair(), redlock.WithMaxAttempts(2))
		if !errors.Is(err, redlock.ErrNotAcquired) || ctx.Err() != nil {
			t.Fatalf("err = %v, want ErrNotAcquired before the context ended", err)
		}
	})
	t.Run("local holder", func(t *testing.T) {
		c := newCluster(t, 3)
		rc := c.client(t, redlock.WithRetry(redlock.RandomDelay(time.Millisecond, 2*time.Millisecond)))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		holder, err := rc.Acquire(ctx, "k", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer mustRelease(t, holder)
		_, err = rc.Acquire(ctx, "k", time.Second, redlock.WithMaxAttempts(1))
		if !errors.Is(err, redlock.ErrNotAcquired) || ctx.Err() != nil {
			t.Fatalf("err = %v, want ErrNotAcquired before the context ended", err)
		}
	})
}

// TestExtend_lostObserverMayRelease: an Observer that releases the lock
// when told it was lost (OpLost) does not deadlock the renewal: Done closes.
func TestExtend_lostObserverMayRelease(t *testing.T) {
	c := newCluster(t, 3)
	var lock atomic.Pointer[redlock.Lock]
	released := make(chan error, 1)
	obs := redlock.ObserverFunc(func(ctx context.Context, e redlock.Event) {
		if e.Op == redlock.OpLost {
			released <- lock.Load().Release(ctx)
		}
	})
	rc := c.client(t, redlock.WithObserver(obs))
	ctx := context.Background()
	l, err := rc.Acquire(ctx, "k", 300*time.Millisecond, redlock.WithAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	lock.Store(l)
	waitIdle(t, rc) // the acquire's calls have all landed: none sets the key again
	c.servers[0].Del("k")
	c.servers[1].Del("k")
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("Done never closed: the renewal is stuck")
	}
	select {
	case <-released:
	case <-time.After(30 * time.Second):
		t.Fatal("the Observer's Release never returned")
	}
}

// serverIDHook makes a node answer INFO as a redis-server with the given
// run_id does (the embedded server tells none).
type serverIDHook string

func (serverIDHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h serverIDHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c, ok := cmd.(*redis.Cmd); ok && cmd.Name() == "info" {
			c.SetVal("# Server\r\nredis_version:7.0.15\r\nrun_id:" + string(h) + "\r\n# Cluster\r\ncluster_enabled:0\r\n")
			return nil
		}
		return next(ctx, cmd)
	}
}

func (serverIDHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestNew_sameServerTwiceIsRefused: two nodes whose servers tell the same
// run_id (one server reached by two addresses) are found on first contact;
// the first Acquire is refused with ErrMisconfigured naming both nodes, no
// key is left behind, and later acquires are refused at once.
func TestNew_sameServerTwiceIsRefused(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	for _, batching := range []bool{true, false} {
		t.Run(map[bool]string{true: "batched", false: "unbatched"}[batching], func(t *testing.T) {
			c := newCluster(t, 3)
			addHook(t, c.clients[0], serverIDHook("aaaa"))
			addHook(t, c.clients[1], serverIDHook("bbbb"))
			addHook(t, c.clients[2], serverIDHook("aaaa"))
			rc := c.client(t, redlock.WithBatching(batching))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for i := range 2 {
				start := time.Now()
				_, err := rc.Acquire(ctx, "k", time.Minute)
				if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, redlock.ErrMisconfigured) {
					t.Fatalf("acquire %d: err = %v, want ErrNotAcquired and ErrMisconfigured", i, err)
				}
				if msg := err.Error(); !strings.Contains(msg, "node 2") || !strings.Contains(msg, "node 0") || !strings.Contains(msg, "same server") {
					t.Fatalf("acquire %d: %q does not name both nodes", i, msg)
				}
				if took := time.Since(start); took > 20*time.Second {
					t.Fatalf("acquire %d took %v: it retried", i, took)
				}
			}
			waitIdle(t, rc)
			if got := c.holdersAny("k"); len(got) != 0 {
				t.Fatalf("the refused acquire left its key on nodes %v", got)
			}
		})
	}
}

// TestNew_distinctServersAreAccepted: nodes with distinct run_ids, and
// nodes that tell none (named by their addresses), take locks as before.
func TestNew_distinctServersAreAccepted(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	addHook(t, c.clients[0], serverIDHook("aaaa"))
	addHook(t, c.clients[1], serverIDHook("bbbb"))
	rc := c.client(t)
	lock := mustTryAcquire(t, rc, context.Background(), "k", time.Minute)
	if got := c.holders("k", lock.Token()); len(got) != 3 {
		t.Fatalf("key on nodes %v, want all 3", got)
	}
	mustRelease(t, lock)
}

// identityHook answers INFO as a redis-server with run_id *id would; an
// empty id answers LOADING (the node cannot tell yet). oneSection answers
// INFO with more than one argument with a syntax error, as Redis before 7
// does.
type identityHook struct {
	id         *atomic.Pointer[string]
	oneSection bool
}

func newIdentityHook(id string, oneSection bool) identityHook {
	h := identityHook{id: &atomic.Pointer[string]{}, oneSection: oneSection}
	h.id.Store(&id)
	return h
}

func (identityHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h identityHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sc, ok := cmd.(*redis.Cmd)
		if !ok || cmd.Name() != "info" {
			return next(ctx, cmd)
		}
		id := *h.id.Load()
		switch {
		case h.oneSection && len(cmd.Args()) > 2:
			sc.SetErr(serverError("ERR syntax error"))
		case id == "":
			sc.SetErr(serverError("LOADING Redis is loading the dataset in memory"))
		default:
			sc.SetVal("# Server\r\nredis_version:6.2.14\r\nrun_id:" + id + "\r\n# Cluster\r\ncluster_enabled:0\r\n")
		}
		return sc.Err()
	}
}

func (identityHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestNew_sameServerTwiceOnRedis6: a server that takes one INFO section at
// a time (Redis before 7) is still identified by its run_id.
func TestNew_sameServerTwiceOnRedis6(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	addHook(t, c.clients[0], newIdentityHook("aaaa", true))
	addHook(t, c.clients[1], newIdentityHook("bbbb", true))
	addHook(t, c.clients[2], newIdentityHook("aaaa", true))
	_, err := c.client(t).TryAcquire(context.Background(), "k", time.Minute)
	if !errors.Is(err, redlock.ErrMisconfigured) {
		t.Fatalf("err = %v, want ErrMisconfigured", err)
	}
}

// TestNew_duplicateFoundLaterRefusesEverything: a node that could not be
// identified at first contact, and turns out later to be another node's
// server, stops every way of holding a lock on that Client once it is
// found: a waiting goroutine is not handed the lock, Extend is not
// confirmed (the lock, granted on distinct servers, stays valid until its
// Until), and Resume is refused. (An Extend that a quorum of identified,
// distinct servers kept before the finding is confirmed: its lock is
// held on every server. So the test waits for the finding first.)
func TestNew_duplicateFoundLaterRefusesEverything(t *testing.T) {
	goRedisOnly(t, "it steers its nodes through go-redis hooks")
	c := newCluster(t, 3)
	addHook(t, c.clients[0], newIdentityHook("aaaa", false))
	addHook(t, c.clients[1], newIdentityHook("bbbb", false))
	late := newIdentityHook("", false) // node 2 cannot tell yet
	addHook(t, c.clients[2], late)
	logs := &syncBuffer{}
	rc := c.client(t, redlock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	ctx := context.Background()
	lock, err := rc.Acquire(ctx, "h", time.Minute) // holds the local turn: its release may hand over
	if err != nil {
		t.Fatal(err)
	}

	waiter := make(chan error, 1)
	go func() {
		l, err := rc.Acquire(ctx, "h", time.Minute)
		if err == nil {
			_ = l.Release(ctx)
			err = errors.New("the waiter got the lock")
		}
		waiter <- err
	}()
	waitFor(t, "the waiter to queue", func() bool { return redlock.LocalWaiters(rc, "h") == 1 })

	aaaa := "aaaa"
	late.id.Store(&aaaa) // node 2 is node 0's server
	waitFor(t, "node 2 found to be node 0's server", func() bool {
		_, _ = rc.Inspect(ctx, "h") // a first contact still: it identifies node 2
		return strings.Contains(logs.String(), "two nodes reach the same server")
	})
	err = lock.Extend(ctx, time.Minute)
	if !errors.Is(err, redlock.ErrNotConfirmed) || !errors.Is(err, redlock.ErrMisconfigured) || errors.Is(err, redlock.ErrLockLost) {
		t.Fatalf("Extend: err = %v, want ErrNotConfirmed and ErrMisconfigured", err)
	}
	if lock.Validity() <= 0 {
		t.Fatal("the lock, granted on distinct servers, was ended")
	}
	if _, err := rc.Resume(ctx, "h", lock.Token(), time.Minute); !errors.Is(err, redlock.ErrMisconfigured) {
		t.Fatalf("Resume: err = %v, want ErrMisconfigured", err)
	}
	mustRelease(t, lock)
	if err := <-waiter; !errors.Is(err, redlock.ErrMisconfigured) {
		t.Fatalf("waiter: err = %v, want ErrMisconfigured (no hand-off)", err)
	}
}

// TestAcquire_errorReadsWell: the error of an acquire that misconfigured
// nodes refused lists the nodes in the order given to New, whatever order
// they answered in, and gives each hint once, naming its nodes. It listed
// them in reply order (1, 0, 2) and repeated the hint for every node.
func TestAcquire_errorReadsWell(t *testing.T) {
	c := newCluster(t, 3)
	for _, s := range c.servers {
		s.RequireAuth("secret")
	}
	_, err := c.client(t).TryAcquire(context.Background(), "k", time.Second)
	if !errors.Is(err, redlock.ErrMisconfigured) {
		t.Fatalf("err = %v, want ErrMisconfigured", err)
	}
	msg := err.Error()
	// The outcome is known once two nodes refused: the third is listed
	// only if it answered by then (on a loaded machine, not always).
	var listed []string
	for _, m := range regexp.MustCompile(`node (\d) \(`).FindAllStringSubmatch(msg, -1) {
		listed = append(listed, m[1])
	}
	if len(listed) < 2 || !slices.IsSorted(listed) || len(slices.Compact(slices.Clone(listed))) != len(listed) {
		t.Errorf("nodes %v out of order (or missing) in %q", listed, msg)
	}
	if n := strings.Count(msg, "set the node's password"); n != 1 {
		t.Errorf("the hint appears %d times in %q, want once", n, msg)
	}
	if want := "nodes " + strings.Join(listed, ", ") + ")"; !strings.Contains(msg, want) {
		t.Errorf("the hint does not name its nodes (%s) in %q", want, msg)
	}
}

// TestNodeError_noScriptNoise: an error raised inside a script reads
// without the script's SHA1 and line, which Redis adds.
func TestNodeError_noScriptNoise(t *testing.T) {
	for _, raw := range []string{
		"WRONGTYPE Operation against a key holding the wrong kind of value script: e9785560d6c2b4d2f8f51ea9a9f4f2c7d83bd6f9, on @user_script:69.",
		"ERR Error running script (call to f_e9785560d6c2b4d2f8f51ea9a9f4f2c7d83bd6f9): @user_script:69: WRONGTYPE Operation against a key holding the wrong kind of value",
	} {
		err := &redlock.NodeError{Node: 1, Addr: "a:6379", Err: errors.New(raw)}
		if msg := err.Error(); strings.Contains(msg, "script") || strings.Contains(msg, "e9785560") || !strings.Contains(msg, "WRONGTYPE Operation against a key") {
			t.Errorf("%q reads %q", raw, msg)
		}
	}
}
