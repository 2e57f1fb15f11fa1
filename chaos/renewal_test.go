package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// Renewal over a network that gets slower, on real redis-server nodes
// behind delaying links: a lock acquired WithAutoRenew is kept while the
// round trip is steady, jumps, ramps or swings, up to a quarter of the
// ttl, on both transports; a majority that stops answering still has the
// lock declared lost before its Until.

const (
	renewTTL  = 2 * time.Second
	renewSlow = renewTTL / 4 // the slowest round trip a renewed lock rides out
	renewFast = 2 * time.Millisecond
	renewHold = 6 * time.Second // how long each shape holds the lock
)

var renewTransports = []string{"go-redis", "rueidis"}

// slowNet is redis-server nodes, each behind a link whose replies are
// delayed by the same latency.
type slowNet struct {
	nodes   []*Node
	links   []*netLink
	clients []redis.UniversalClient // through the links
	latency time.Duration           // the links' latency now; 0 before any is set
}

// startNodes starts n redis-server nodes.
func startNodes(t *testing.T, n int) []*Node {
	t.Helper()
	needRedis(t)
	var nodes []*Node
	for range n {
		nodes = append(nodes, startTestNode(t, nodeSpec{kind: Redis}))
	}
	return nodes
}

// newSlowNet puts a link in front of each of nodes, and a client behind
// each link; they are closed when t ends.
func newSlowNet(t *testing.T, nodes []*Node) *slowNet {
	t.Helper()
	s := &slowNet{nodes: nodes}
	toxi := newToxiServer()
	for i, nd := range nodes {
		l, err := newLink(toxi, fmt.Sprintf("node-%d", i), nd.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.close)
		// ContextTimeoutEnabled stays off, as in the workload: the lock
		// enforces its own waits.
		rdb := redis.NewClient(&redis.Options{
			Addr: l.Addr(), MaxRetries: -1, DialerRetries: 1,
			ReadTimeout: 2 * renewTTL, WriteTimeout: 2 * renewTTL,
		})
		t.Cleanup(func() { _ = rdb.Close() })
		s.links, s.clients = append(s.links, l), append(s.clients, rdb)
	}
	return s
}

// locker is a lock Client over the links on transport; when the test
// ends, the links are healed first (a client closes at once on a healed
// link), then it is closed.
func (s *slowNet) locker(t *testing.T, transport string, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	rc, closeRC, err := newLockerOn(transport, s.clients, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, l := range s.links {
			l.Heal(context.Background())
		}
		closeRC()
	})
	return rc
}

// setLatency delays every reply through every link by d from now on.
func (s *slowNet) setLatency(t *testing.T, d time.Duration) {
	t.Helper()
	if d == s.latency {
		return
	}
	for _, l := range s.links {
		// Removed and added again, not updated in place: toxiproxy's
		// update writes the toxic's attributes while its links read them
		// (the race detector says so).
		if s.latency != 0 {
			if err := l.proxy.Toxics.RemoveToxic(context.Background(), "latency"); err != nil {
				t.Fatalf("latency %v: %v", d, err)
			}
		}
		if err := l.Latency(d, 0); err != nil {
			t.Fatalf("latency %v: %v", d, err)
		}
	}
	s.latency = d
}

// holders counts the nodes whose key holds token, asked directly (not
// through the links).
func (s *slowNet) holders(t *testing.T, key, token string) int {
	t.Helper()
	n := 0
	for _, nd := range s.nodes {
		v, err := doOn(context.Background(), nd.Addr(), "GET", key)
		if got, _ := v.(string); err == nil && got == token {
			n++
		}
	}
	return n
}

// renewShapes are the round trips, by time since the acquire, that a
// renewed lock of renewTTL must ride out.
var renewShapes = []struct {
	name string
	rtt  func(since time.Duration) time.Duration
}{
	{"steady", func(time.Duration) time.Duration { return renewSlow }},
	{"jump", func(since time.Duration) time.Duration {
		if since < renewTTL/4 {
			return renewFast
		}
		return renewSlow
	}},
	{"ramp", func(since time.Duration) time.Duration {
		// From fast to slow over 3 s, in 50 ms steps, from the first renewal on.
		from, over := renewTTL/4, 3*time.Second
		switch {
		case since < from:
			return renewFast
		case since >= from+over:
			return renewSlow
		}
		d := renewFast + time.Duration(float64(renewSlow-renewFast)*float64(since-from)/float64(over))
		return max(d.Truncate(50*time.Millisecond), renewFast)
	}},
	{"oscillate", func(since time.Duration) time.Duration {
		if int(since/time.Second)%2 == 0 {
			return renewFast
		}
		return renewSlow
	}},
}

// TestRenewal_slowerNetwork: a renewed lock of a 2 s ttl is held for 6 s
// while the round trip to every node is steady at 500 ms (a quarter of the
// ttl), jumps there from 2 ms, ramps there, or swings between the two
// every second; it is never lost: Done stays open, Validity stays
// positive, and a quorum of the nodes holds its token throughout.
func TestRenewal_slowerNetwork(t *testing.T) {
	nodes := startNodes(t, 3)
	for _, tr := range renewTransports {
		for _, shape := range renewShapes {
			t.Run(tr+"/"+shape.name, func(t *testing.T) {
				holdThrough(t, newSlowNet(t, nodes), tr, shape.rtt)
			})
		}
	}
}

// acquireInOneRoundTrip acquires the renewed lock the test holds, again
// (up to 5 times) while an acquire took more than one and a half round
// trips of rtt: the rest was the machine's (a loaded machine ran the
// replies late), and it would leave the lock less validity than the
// network does, which is what the test is about.
func acquireInOneRoundTrip(ctx context.Context, t *testing.T, rc *redlock.Client, rtt time.Duration) (*redlock.Lock, time.Time) {
	t.Helper()
	for try := 1; ; try++ {
		begun := time.Now()
		lock, err := rc.Acquire(ctx, t.Name(), renewTTL, redlock.WithAutoRenew())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		took := start.Sub(begun)
		t.Logf("acquired in %v, %v left", took.Round(time.Millisecond), lock.Validity().Round(time.Millisecond))
		if took <= rtt+rtt/2+10*time.Millisecond || try == 5 {
			return lock, start
		}
		if err := lock.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// holdThrough holds a renewed lock through net for renewHold while the
// links' latency follows rtt, and fails t if it is lost meanwhile.
func holdThrough(t *testing.T, net *slowNet, transport string, rtt func(time.Duration) time.Duration) {
	net.setLatency(t, rtt(0))
	var seen events
	rc := net.locker(t, transport, redlock.WithObserver(&seen))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The Client's first contact with the nodes (dials, identification)
	// is made first: over a slow network it takes more round trips than
	// an acquire (on rueidis, whose connections are dialed as first used,
	// two), and leaves the lock less than its usual validity.
	warm, err := rc.Acquire(ctx, t.Name()+"/first-contact", renewTTL)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lock, start := acquireInOneRoundTrip(ctx, t, rc, rtt(0))
	defer func() { _ = lock.Release(ctx) }()
	lost := func(what string) {
		t.Helper()
		var why []string
		for _, ev := range append(seen.of(redlock.OpRenew), seen.of(redlock.OpLost)...) {
			if ev.Err != nil {
				why = append(why, fmt.Sprintf("%v at +%v: %v", ev.Op, ev.Start.Sub(start).Round(time.Millisecond), ev.Err))
			}
		}
		// Each node's part in each extend (a renewal's): when it began
		// and how long the node took, which tells a slow network from a
		// machine that ran the replies late.
		var parts []string
		for _, ev := range seen.of(redlock.OpNode) {
			if ev.NodeOp == redlock.OpExtend {
				parts = append(parts, fmt.Sprintf("node %d +%v %v %v", ev.Node, ev.Start.Sub(start).Round(time.Millisecond), ev.Duration.Round(time.Millisecond), ev.Err))
			}
		}
		t.Fatalf("%s at +%v (round trip %v): %s\nextends by node: %s", what, time.Since(start).Round(time.Millisecond), net.latency, strings.Join(why, "; "), strings.Join(parts, "; "))
	}
	for polls := 0; ; polls++ {
		since := time.Since(start)
		if since >= renewHold {
			break
		}
		net.setLatency(t, rtt(since))
		select {
		case <-lock.Done():
			lost("lost")
		default:
		}
		if lock.Validity() <= 0 {
			lost("no validity left")
		}
		if polls%10 == 0 {
			if n := net.holders(t, lock.Key(), lock.Token()); n < rc.Quorum() {
				lost(fmt.Sprintf("token on %d nodes", n))
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("held %v; %d renewals", time.Since(start).Round(time.Millisecond), len(seen.of(redlock.OpRenew)))
}

// TestRenewal_blackholedMajority: when two of three nodes stop answering
// (a partition that drops everything), the renewed lock is declared lost
// (Done closes) before its Until, on both transports.
func TestRenewal_blackholedMajority(t *testing.T) {
	nodes := startNodes(t, 3)
	for _, tr := range renewTransports {
		t.Run(tr, func(t *testing.T) {
			net := newSlowNet(t, nodes)
			rc := net.locker(t, tr)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lock, err := rc.Acquire(ctx, t.Name(), renewTTL, redlock.WithAutoRenew())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lock.Release(ctx) }()
			for _, l := range net.links[:2] {
				if err := l.Blackhole(); err != nil {
					t.Fatal(err)
				}
			}
			// A renewal out when the links were cut may still land: the
			// latest Until seen is the one the loss must come before.
			until := lock.Until()
			for deadline := time.Now().Add(4 * renewTTL); ; {
				select {
				case <-lock.Done():
					at := time.Now()
					if !at.Before(until) {
						t.Fatalf("declared lost %v after its Until", at.Sub(until))
					}
					t.Logf("declared lost %v before its Until", until.Sub(at).Round(time.Millisecond))
					return
				default:
				}
				if u := lock.Until(); u.After(until) {
					until = u
				}
				if time.Now().After(deadline) {
					t.Fatalf("not declared lost within %v of the partition", 4*renewTTL)
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
}
