package chaos

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// netLink is a TCP proxy between the lock clients (or a replica) and one node,
// through which network faults are injected.
type netLink struct {
	proxy *toxiproxy.Proxy
}

// newToxiServer returns the toxiproxy server that owns the links. Its HTTP
// API is never started: the links are driven directly.
func newToxiServer() *toxiproxy.ApiServer {
	return toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
}

func newLink(srv *toxiproxy.ApiServer, name, upstream string) (*netLink, error) {
	p := toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("chaos: proxy to %s: %w", upstream, err)
	}
	return &netLink{proxy: p}, nil
}

// Addr returns the address clients connect to.
func (l *netLink) Addr() string { return l.proxy.Listen }

func (l *netLink) addToxic(name, typ, stream string, attrs string) error {
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	_, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(body))
	return err
}

// Latency delays every reply from the node by latency ± jitter.
func (l *netLink) Latency(latency, jitter time.Duration) error {
	return l.addToxic("latency", "latency", "downstream",
		fmt.Sprintf(`{"latency":%d,"jitter":%d}`, latency.Milliseconds(), jitter.Milliseconds()))
}

// Blackhole drops everything in both directions without closing the
// connections, as a network partition does, until Heal.
func (l *netLink) Blackhole() error {
	if err := l.addToxic("blackhole-up", "timeout", "upstream", `{"timeout":0}`); err != nil {
		return err
	}
	return l.addToxic("blackhole-down", "timeout", "downstream", `{"timeout":0}`)
}

// Reset closes every connection through the link with a TCP reset as soon
// as data arrives on it, until Heal: a node that crashes and comes straight
// back, as the clients see it.
func (l *netLink) Reset() error {
	return l.addToxic("reset", "reset_peer", "upstream", `{"timeout":0}`)
}

// Heal removes every fault from the link.
func (l *netLink) Heal(ctx context.Context) { l.proxy.Toxics.ResetToxics(ctx) }

// Retarget points the link at another upstream, as a failover that moves a
// service address to a new server does; existing connections are closed.
func (l *netLink) Retarget(upstream string) error {
	return l.proxy.Update(&toxiproxy.Proxy{Listen: l.proxy.Listen, Upstream: upstream, Enabled: true})
}

func (l *netLink) close() { l.proxy.Stop() }

// slow delays the traffic through the link by latency ± jitter in each
// direction, until unslow with the same name: requests land late on the
// node, and replies reach the client late.
func (l *netLink) slow(name string, latency, jitter time.Duration) error {
	attrs := fmt.Sprintf(`{"latency":%d,"jitter":%d}`, latency.Milliseconds(), jitter.Milliseconds())
	if err := l.addToxic(name+"-up", "latency", "upstream", attrs); err != nil {
		return err
	}
	return l.addToxic(name+"-down", "latency", "downstream", attrs)
}

// cut drops everything through the link in both directions, as a
// partition does, until uncut with the same name.
func (l *netLink) cut(name string) error {
	if err := l.addToxic(name+"-up", "timeout", "upstream", `{"timeout":0}`); err != nil {
		return err
	}
	return l.addToxic(name+"-down", "timeout", "downstream", `{"timeout":0}`)
}

// undo removes the toxics that slow or cut added under name.
func (l *netLink) undo(ctx context.Context, name string) error {
	return errors.Join(l.proxy.Toxics.RemoveToxic(ctx, name+"-up"), l.proxy.Toxics.RemoveToxic(ctx, name+"-down"))
}
