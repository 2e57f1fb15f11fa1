package rueidisredlock

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/redis/rueidis"

	"github.com/quorumlock/redlock/transport"
)

func (n *node) PubSub() transport.PubSub {
	c := n.c
	if n.info.Cluster {
		// A dedicated connection of a Cluster client is bound by its first
		// command's key; SUBSCRIBE has none, and a cluster's messages
		// reach every node: one node's client serves.
		nodes := c.Nodes()
		c = nodes[slices.Sorted(maps.Keys(nodes))[0]]
	}
	return &pubSub{c: c, wanted: map[string]bool{}, in: make(chan transport.Message, 256), done: make(chan struct{})}
}

// pubSub is one pub/sub connection on a dedicated rueidis connection,
// made at the first Subscribe and again, with the channels wanted, at the
// Receive after it failed.
type pubSub struct {
	c rueidis.Client

	mu     sync.Mutex
	dc     rueidis.DedicatedClient // nil until made, and after a failure
	free   func()                  // gives dc back
	broken <-chan error            // receives when dc stops receiving
	wanted map[string]bool         // the channels subscribed to, or to be
	closed bool

	in   chan transport.Message // what the hooks received
	done chan struct{}          // closed by Close: the hooks hand on nothing more
}

// hand gives the receiver what a hook received, unless closed.
func (p *pubSub) hand(m transport.Message) {
	select {
	case p.in <- m:
	case <-p.done:
	}
}

// conn returns the connection, made (with the channels wanted) if needed.
func (p *pubSub) conn(ctx context.Context) (rueidis.DedicatedClient, <-chan error, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, transport.ErrClosed
	}
	if p.dc != nil {
		return p.dc, p.broken, nil
	}
	dc, free := p.c.Dedicate()
	broken := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: func(m rueidis.PubSubMessage) {
			p.hand(transport.Message{Kind: "message", Channel: m.Channel, Payload: m.Message})
		},
		OnSubscription: func(s rueidis.PubSubSubscription) {
			p.hand(transport.Message{Kind: s.Kind, Channel: s.Channel})
		},
	})
	if chs := slices.Sorted(maps.Keys(p.wanted)); len(chs) > 0 {
		if err := dc.Do(ctx, dc.B().Subscribe().Channel(chs...).Build()).Error(); err != nil {
			free()
			return nil, nil, err
		}
	}
	p.dc, p.free, p.broken = dc, free, broken
	return dc, broken, nil
}

// drop gives the broken connection back; the next Receive makes another.
func (p *pubSub) drop(dc rueidis.DedicatedClient) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dc == dc && dc != nil {
		p.free()
		p.dc, p.free, p.broken = nil, nil, nil
	}
}

func (p *pubSub) Subscribe(ctx context.Context, channels ...string) error {
	p.mu.Lock()
	for _, ch := range channels {
		p.wanted[ch] = true
	}
	p.mu.Unlock()
	dc, _, err := p.conn(ctx)
	if err != nil {
		return err
	}
	return dc.Do(ctx, dc.B().Subscribe().Channel(channels...).Build()).Error()
}

func (p *pubSub) Unsubscribe(ctx context.Context, channels ...string) error {
	p.mu.Lock()
	for _, ch := range channels {
		delete(p.wanted, ch)
	}
	dc := p.dc
	p.mu.Unlock()
	if dc == nil {
		return nil // not connected: nothing to give up
	}
	return dc.Do(ctx, dc.B().Unsubscribe().Channel(channels...).Build()).Error()
}

func (p *pubSub) Receive(ctx context.Context) (transport.Message, error) {
	dc, broken, err := p.conn(ctx)
	if err != nil {
		return transport.Message{}, err
	}
	select {
	case m := <-p.in:
		return m, nil
	case err := <-broken:
		p.drop(dc)
		p.mu.Lock()
		closed := p.closed
		p.mu.Unlock()
		if closed || err == nil {
			return transport.Message{}, transport.ErrClosed
		}
		return transport.Message{}, err
	case <-ctx.Done():
		return transport.Message{}, ctx.Err()
	}
}

func (p *pubSub) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	if p.dc != nil {
		p.dc.Close()
		p.free()
		p.dc, p.free = nil, nil
	}
	return nil
}
