// Package pubsub shares one pub/sub connection to a node among many
// watches: each watch asks for some channels and is handed the messages
// published on them, so that a thousand waiters cost one connection and
// one goroutine per node. It knows nothing of locks.
package pubsub

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/redlock/internal/realclock"
	"github.com/quorumlock/redlock/transport"
)

// Watch is one waiter's subscription to some channels on a node.
type Watch struct {
	channels []string
	sub      *Subscriber
	ch       chan transport.Message // messages, once subscribed
	ready    chan struct{}          // closed once every channel is subscribed
	heard    []bool                 // by channel: its subscription is confirmed (under sub.mu)
	unheard  int                    // channels not yet confirmed (under sub.mu)
	stop     func()
}

// Watch subscribes to channels and returns at once; Ready tells when the
// server has confirmed every subscription. Stop ends the watch.
func (s *Subscriber) Watch(channels []string) *Watch {
	w := &Watch{
		channels: channels,
		sub:      s,
		ch:       make(chan transport.Message, 1),
		ready:    make(chan struct{}),
		heard:    make([]bool, len(channels)),
	}
	w.stop = sync.OnceFunc(func() { s.remove(w) })
	s.add(w)
	return w
}

// Messages receives the messages published on the watch's channels once
// they are subscribed; one pending message is kept, later ones dropped.
func (w *Watch) Messages() <-chan transport.Message { return w.ch }

// Ready is closed once every channel of the watch is subscribed.
func (w *Watch) Ready() <-chan struct{} { return w.ready }

// Stop ends the watch; its channels are unsubscribed unless still wanted.
func (w *Watch) Stop() { w.stop() }

// Deaf reports whether the connection's last receive failed and none has
// worked since: confirmed subscriptions hear nothing meanwhile.
func (s *Subscriber) Deaf() bool { return s.deaf.Load() }

// Running reports whether the subscriber's goroutine runs (for tests).
func (s *Subscriber) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// Linger is how long a subscriber keeps its connection for the next
// waiter once none is left.
const Linger = 250 * time.Millisecond

// Subscriber multiplexes the watches of one Client on one node over one
// pub/sub connection. A goroutine runs it while it has watches (and Linger
// after the last): it sends the SUBSCRIBE and UNSUBSCRIBE commands the
// watches call for, batched, and hands each announcement to the watches
// of its channel. The commands run in that goroutine because a go-redis
// client without ContextTimeoutEnabled ignores context deadlines while it
// dials and greets a new connection: a frozen node would otherwise hold an
// Acquire for the client's ReadTimeout.
type Subscriber struct {
	node transport.Node

	mu       sync.Mutex
	watches  map[string]map[*Watch]struct{} // by channel
	channels map[string]*subscription       // every channel asked for and not yet given up
	running  bool                           // the goroutine runs
	kick     chan struct{}                  // buffered: the watches changed

	// deaf: see Deaf. The transport makes the connection again with its
	// channels; while it cannot (the node refuses new clients), nothing
	// is heard.
	deaf atomic.Bool
}

// subscription is the state of one channel on the connection.
type subscription struct {
	wanted bool // the last command sent was SUBSCRIBE
	sent   int  // commands sent for it
	acked  int  // confirmations received for it
	live   bool // the last confirmation was of a SUBSCRIBE
}

// confirmed reports whether every command sent for the channel has been
// confirmed (a resubscription confirms more) and the last was a SUBSCRIBE.
func (s *subscription) confirmed() bool { return s.wanted && s.live && s.acked >= s.sent }

// New returns a Subscriber for node; it connects at its first Watch.
func New(node transport.Node) *Subscriber {
	return &Subscriber{
		node:     node,
		watches:  make(map[string]map[*Watch]struct{}),
		channels: make(map[string]*subscription),
		kick:     make(chan struct{}, 1),
	}
}

func (s *Subscriber) add(w *Watch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for i, ch := range w.channels {
		set := s.watches[ch]
		if set == nil {
			set = make(map[*Watch]struct{})
			s.watches[ch] = set
		}
		set[w] = struct{}{}
		if sub := s.channels[ch]; sub != nil && sub.confirmed() {
			w.heard[i] = true
		} else {
			w.unheard++
			changed = changed || sub == nil || !sub.wanted
		}
	}
	if w.unheard == 0 {
		close(w.ready)
	}
	if changed {
		s.wake()
	}
}

func (s *Subscriber) remove(w *Watch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for _, ch := range w.channels {
		set := s.watches[ch]
		delete(set, w)
		if len(set) == 0 {
			delete(s.watches, ch)
			changed = true
		}
	}
	if changed {
		s.wake()
	}
}

// wake tells the goroutine that the watches changed, starting it if it
// does not run. Called with s.mu held.
func (s *Subscriber) wake() {
	if !s.running {
		s.running = true
		go s.run()
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run is the subscriber's goroutine.
func (s *Subscriber) run() {
	ctx := context.Background()
	ps := s.node.PubSub()
	defer func() { _ = ps.Close() }()
	quit := make(chan struct{})
	defer close(quit) // before the Close above: the receiver stops handing on
	s.deaf.Store(false)
	var msgs <-chan transport.Message
	linger := realclock.NewTimer(Linger)
	defer linger.Stop()
	for {
		select {
		case <-s.kick:
			subscribe, unsubscribe, idle := s.changes()
			if idle {
				linger.Reset(Linger)
			}
			if len(subscribe) > 0 {
				_ = ps.Subscribe(ctx, subscribe...) // a failure is retried by the reconnection
			}
			if len(unsubscribe) > 0 {
				_ = ps.Unsubscribe(ctx, unsubscribe...)
			}
			if msgs == nil && len(subscribe) > 0 {
				msgs = s.receive(ps, quit)
			}
		case m, ok := <-msgs:
			if !ok {
				return
			}
			s.deliver(m)
		case <-linger.C:
			if s.done() {
				return
			}
		}
	}
}

// receive hands on what ps receives, from a goroutine of its own, until
// quit or ps is closed, and keeps s.deaf. After a failure the transport
// reconnects and resubscribes at the next receive; while it cannot, the
// receives are retried at a growing pace (up to once a second).
func (s *Subscriber) receive(ps transport.PubSub, quit <-chan struct{}) <-chan transport.Message {
	out := make(chan transport.Message)
	go func() {
		failures := 0
		for {
			m, err := ps.Receive(context.Background())
			if err != nil {
				select {
				case <-quit:
					return // the subscriber closed the connection: it went idle
				default:
				}
				if errors.Is(err, transport.ErrClosed) {
					return
				}
				s.deaf.Store(true)
				failures++
				select {
				case <-realclock.After(min(time.Duration(failures)*50*time.Millisecond, time.Second)):
				case <-quit:
					return
				}
				continue
			}
			failures = 0
			s.deaf.Store(false)
			select {
			case out <- m:
			case <-quit:
				return
			}
		}
	}()
	return out
}

// changes works out the channels to subscribe and to unsubscribe to bring
// the connection's to the watches', marks them sent, and reports idle
// when no watch is left.
func (s *Subscriber) changes() (subscribe, unsubscribe []string, idle bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.watches {
		sub := s.channels[ch]
		if sub == nil {
			sub = &subscription{}
			s.channels[ch] = sub
		}
		if !sub.wanted {
			sub.wanted = true
			sub.sent++
			subscribe = append(subscribe, ch)
		}
	}
	for ch, sub := range s.channels {
		if _, ok := s.watches[ch]; !ok && sub.wanted {
			sub.wanted = false
			sub.sent++
			unsubscribe = append(unsubscribe, ch)
		}
	}
	return subscribe, unsubscribe, len(s.watches) == 0
}

// deliver handles what the connection received: a confirmation, which may
// make watches ready, or an announcement, handed to its channel's watches.
func (s *Subscriber) deliver(m transport.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch m.Kind {
	case "subscribe", "unsubscribe":
		sub := s.channels[m.Channel]
		if sub == nil {
			return
		}
		sub.acked++
		sub.live = m.Kind == "subscribe"
		if !sub.wanted && sub.acked >= sub.sent {
			delete(s.channels, m.Channel) // given up, and the server agrees
			return
		}
		if !sub.confirmed() {
			return
		}
		for w := range s.watches[m.Channel] {
			i := slices.Index(w.channels, m.Channel)
			if !w.heard[i] {
				w.heard[i] = true
				if w.unheard--; w.unheard == 0 {
					close(w.ready)
				}
			}
		}
	case "message":
		for w := range s.watches[m.Channel] {
			select {
			case w.ch <- m:
			default: // one pending announcement is enough to wake up
			}
		}
	}
}

// done ends the goroutine if no watch is left, reporting whether it did.
// A watch added later starts a new one, on a new connection.
func (s *Subscriber) done() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.watches) > 0 {
		return false
	}
	s.running = false
	s.deaf.Store(false) // no connection now: the next watch makes a new one
	clear(s.channels)
	// A kick left for this goroutine is for none: drop it.
	select {
	case <-s.kick:
	default:
	}
	return true
}
