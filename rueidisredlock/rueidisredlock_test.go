package rueidisredlock_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/rueidisredlock"
	"github.com/quorumlock/redlock/transport"
)

// nodes starts n embedded nodes and a rueidis client of each.
func nodes(t *testing.T, n int) ([]*miniredis.Miniredis, []rueidis.Client) {
	t.Helper()
	var servers []*miniredis.Miniredis
	var clients []rueidis.Client
	for range n {
		s := miniredis.RunT(t)
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true, ForceSingleClient: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		servers = append(servers, s)
		clients = append(clients, c)
	}
	return servers, clients
}

func TestNew_acquireExtendRelease(t *testing.T) {
	servers, clients := nodes(t, 3)
	rc, err := rueidisredlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := rc.TryAcquire(ctx, "k", time.Minute, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		if v, _ := s.Get("k"); v != l.Token() {
			t.Fatalf("node %d holds %q, want the lock's token", i, v)
		}
	}
	if _, err := rc.TryAcquire(ctx, "k", time.Minute); !errors.Is(err, redlock.ErrNotAcquired) {
		t.Fatalf("second TryAcquire: %v, want ErrNotAcquired", err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range servers {
		if s.Exists("k") {
			t.Fatalf("node %d keeps the key", i)
		}
	}
}

// deadAfterUse proxies to upstream until killed, and then accepts each
// connection and closes it, as a proxy whose node died does.
type deadAfterUse struct {
	ln       net.Listener
	upstream string
	dead     atomic.Bool
	accepted atomic.Int64 // connections accepted once dead
	mu       sync.Mutex
	conns    []net.Conn
}

func newDeadAfterUse(t *testing.T, upstream string) *deadAfterUse {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &deadAfterUse{ln: ln, upstream: upstream}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.dead.Load() {
				p.accepted.Add(1)
				_ = c.Close()
				continue
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c) }()
			go func() { _, _ = io.Copy(c, up) }()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		p.kill()
	})
	return p
}

func (p *deadAfterUse) kill() {
	p.dead.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// TestTransport_deadNodeFailsFast: once a node's connection broke, its
// calls fail at once for a while rather than each dialling again, which
// with rueidis costs about a millisecond a call and held every operation
// up behind the dead node's calls (see downFor).
func TestTransport_deadNodeFailsFast(t *testing.T) {
	s := miniredis.RunT(t)
	p := newDeadAfterUse(t, s.Addr())
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.ln.Addr().String()}, DisableCache: true, ForceSingleClient: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	tr := rueidisredlock.Transport(c)
	replies := make([]transport.Reply, 1)
	tr.Do(context.Background(), []transport.Cmd{{"ping"}}, replies)
	if replies[0].Err != nil {
		t.Fatal(replies[0].Err)
	}
	p.kill()
	start := time.Now()
	failed := 0
	for range 20 {
		tr.Do(context.Background(), []transport.Cmd{{"ping"}}, replies)
		if replies[0].Err != nil {
			failed++
		}
	}
	// The first failure tries each stale connection (staleResends).
	if took := time.Since(start); took < 40*time.Millisecond && p.accepted.Load() > 6 {
		t.Fatalf("20 calls to a dead node in %v dialled it %d times, want at most 6", took, p.accepted.Load())
	}
	if failed != 20 {
		t.Fatalf("%d of 20 calls to a dead node failed", failed)
	}
}

// TestTransport_restartedNodeAnswersAtOnce: after a node restarted, every
// call goes through (each stale connection is sent the call again), and
// none fails for the time a dead node's would. The first broken
// connection used to mark the node down for 50 ms though the resend had
// worked, and a fair lock stalled a poll longer.
func TestTransport_restartedNodeAnswersAtOnce(t *testing.T) {
	s := miniredis.RunT(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true, ForceSingleClient: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	tr := rueidisredlock.Transport(c)
	ping := func() error {
		r := make([]transport.Reply, 1)
		tr.Do(context.Background(), []transport.Cmd{{"evalsha", "0123456789012345678901234567890123456789", 1, "k"}}, r)
		if transport.IsReply(r[0].Err) {
			return nil // answered
		}
		return r[0].Err
	}
	// Open the client's pipelined connections: keyed calls spread over them.
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = ping() }()
	}
	wg.Wait()
	s.Close()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := ping(); err != nil {
			t.Fatalf("call %d after the node restarted: %v", i, err)
		}
	}
}
