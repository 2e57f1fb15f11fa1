package redlock

import (
	"context"
	"crypto/rand"
	"errors"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// An Acquire that has to wait does not only sleep its retry delay: it
// listens on one node for the lock's release, which release.lua announces
// with PUBLISH, and tries again at once when it hears it. One node is
// enough for a hint, and it is one that another holder's key was on, so its
// release is announced there. A missed announcement (the node is down, or
// the release came before the subscription) costs nothing but the retry
// delay, which still runs. The subscription lives as long as the Acquire.
//
// The waiters of a Client share one pub/sub connection per node (a
// subscriber): each waiter adds its channels to the node's subscriptions
// and is handed the announcements on them, so that a thousand waiters cost
// one connection per node, not a thousand on the first node that refused,
// and no goroutine of their own. Waiters on different keys are spread over
// the nodes that refused them (see listenNode).

// releaseWatch is one Acquire's subscription to a key's release channels
// on one node. A nil *releaseWatch watches nothing.
type releaseWatch struct {
	node     int
	channels []string
	own      string // the waiter's own channel, where a release names it among the first two in line; "" when none
	sub      *subscriber
	ch       chan *redis.Message // announcements, once subscribed
	ready    chan struct{}       // closed once every channel is subscribed
	heard    []bool              // by channel: its subscription is confirmed (under sub.mu)
	unheard  int                 // channels not yet confirmed (under sub.mu)
	stop     func()
}

// watchRelease subscribes to a lock's release channels on node, and waits
// up to timeout for the subscriptions to be confirmed, so that a release
// announced after it returns is heard. A subscription that takes longer
// (a loaded or frozen node) is not given up: it goes on in the background,
// and announcements count from when it is confirmed; until then the retry
// delay runs as always.
func (c *Client) watchRelease(ctx context.Context, channels []string, ln *waitLine, node int, timeout time.Duration) *releaseWatch {
	if own := ln.channel(); own != "" {
		channels = append(slices.Clip(channels), own)
	}
	w := &releaseWatch{
		node:     node,
		own:      ln.channel(),
		channels: channels,
		sub:      c.subscribers[node],
		ch:       make(chan *redis.Message, 1),
		ready:    make(chan struct{}),
		heard:    make([]bool, len(channels)),
	}
	w.stop = sync.OnceFunc(func() { w.sub.remove(w) })
	w.sub.add(w)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-w.ready:
	case <-t.C:
	case <-ctx.Done():
	}
	return w
}

// released returns a channel that receives when a release is announced; nil
// (never ready) for a nil watch.
func (w *releaseWatch) released() <-chan *redis.Message {
	if w == nil {
		return nil
	}
	return w.ch
}

// subscribed reports whether every channel's subscription is confirmed
// and the connection still receives: a release is then heard as it is
// announced.
func (w *releaseWatch) subscribed() bool {
	if w == nil || w.sub.deaf.Load() {
		return false
	}
	select {
	case <-w.ready:
		return true
	default:
		return false
	}
}

// deaf reports whether the watch's connection has stopped receiving (see
// subscriber.deaf): its node's releases are not heard.
func (w *releaseWatch) deaf() bool {
	return w != nil && w.sub.deaf.Load()
}

// waitLine is a plain lock's waiter's place in the key's line on the node it
// listens on (line.lua): a release there wakes the first two in line that
// still listen, each on its own channel, rather than every waiter (two:
// should the first have just given up or hung, the second goes on). The line
// is only a hint about whom to wake: every attempt is an acquire like any
// other, and a waiter missing from the line (it expired, the node
// restarted) is woken by its retry timer, or by a release that finds the
// line empty and tells everyone.
type waitLine struct {
	key  string
	name string        // the waiter's, random
	ttl  time.Duration // how long the line lasts after a join
	node int           // where it joined; -1 when it has not
}

// newLine is a place in key's line that lasts ttl after each join. (A
// lock's ttl shorter than a subscribed waiter's wait between attempts lets
// the line expire between them; its next release then wakes everyone, as a
// line would not. Keeping lines 3 s at least moved no figure: 20 waiters
// on a 500 ms lock held 5 s made 149-157 attempts either way.)
func newLine(key string, ttl time.Duration) *waitLine {
	return &waitLine{key: key, name: rand.Text(), ttl: ttl, node: -1}
}

// channel is the waiter's own channel for key.
func (ln *waitLine) channel() string {
	if ln == nil {
		return ""
	}
	return releaseChannel(ln.key) + ":" + ln.name
}

// join takes or keeps the waiter's place in the line on node, leaving the
// line of the node it was in before, if another.
func (ln *waitLine) join(c *Client, node int, timeout time.Duration) {
	if ln == nil || node < 0 {
		return
	}
	if ln.node >= 0 && ln.node != node {
		c.sendOne(ln.node, lineOn(ln.key, ln.name, false, ln.ttl), timeout)
	}
	ln.node = node
	c.sendOne(node, lineOn(ln.key, ln.name, true, ln.ttl), timeout)
}

// leave leaves the line, when the waiter won the lock or gave up.
func (ln *waitLine) leave(c *Client, timeout time.Duration) {
	if ln == nil || ln.node < 0 {
		return
	}
	c.sendOne(ln.node, lineOn(ln.key, ln.name, false, ln.ttl), timeout)
	ln.node = -1
}

// sendOne sends op to node i without waiting for its reply: through the
// node's pipe, in order with the node's other calls (a leave lands before
// the holder's release), or, without batching, from a goroutine. Drain
// waits for it as for any call.
func (c *Client) sendOne(i int, op nodeOp, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	c.calls.add()
	reply := func(int64, []int64, error) {
		cancel()
		c.calls.done()
	}
	if p := c.nodes[i].pipe; p != nil {
		p.submit(call{ctx: ctx, io: ctx, timeout: timeout, op: op, reply: reply})
		return
	}
	go func() { reply(op.run(ctx, c.nodes[i].rdb, c.nodes[i].scripts, c.cfg.replicaAck, timeout)) }()
}

// drain drops the announcements received so far.
func (w *releaseWatch) drain() {
	if w == nil {
		return
	}
	for {
		select {
		case <-w.ch:
		default:
			return
		}
	}
}

func (w *releaseWatch) close() {
	if w != nil {
		w.stop()
	}
}

// subscriberLinger is how long a subscriber keeps its connection once no
// waiter is left, for the next one.
const subscriberLinger = 250 * time.Millisecond

// subscriber multiplexes the release watches of one Client on one node
// over one pub/sub connection. A goroutine runs it while it has watches
// (and subscriberLinger after the last): it sends the SUBSCRIBE and
// UNSUBSCRIBE commands the watches call for, batched, and hands each
// announcement to the watches of its channel.
//
// The commands run in that goroutine because a go-redis client without
// ContextTimeoutEnabled ignores context deadlines while it dials and
// greets a new connection (HELLO): a frozen node would otherwise hold an
// Acquire for the client's ReadTimeout.
type subscriber struct {
	rdb redis.UniversalClient

	mu       sync.Mutex
	watches  map[string]map[*releaseWatch]struct{} // by channel
	channels map[string]*subscription              // every channel asked for and not yet given up
	running  bool                                  // the goroutine runs
	kick     chan struct{}                         // buffered: the watches changed

	// deaf: the connection's last receive failed, and none has worked
	// since. go-redis makes a new connection and subscribes it to every
	// channel again by itself, but while it can not (the node refuses new
	// clients), the subscriptions hear nothing though they were confirmed.
	deaf atomic.Bool
}

// subscription is the state of one channel on the connection.
type subscription struct {
	wanted bool // the last command sent was SUBSCRIBE
	sent   int  // commands sent for it
	acked  int  // confirmations received for it
	live   bool // the last confirmation was of a SUBSCRIBE
}

// confirmed reports whether the server is subscribed to the channel as
// wanted: every command sent has been confirmed (a reconnection's
// resubscription confirms more), and the last was a SUBSCRIBE.
func (s *subscription) confirmed() bool { return s.wanted && s.live && s.acked >= s.sent }

func newSubscriber(rdb redis.UniversalClient) *subscriber {
	return &subscriber{
		rdb:      rdb,
		watches:  make(map[string]map[*releaseWatch]struct{}),
		channels: make(map[string]*subscription),
		kick:     make(chan struct{}, 1),
	}
}

func (s *subscriber) add(w *releaseWatch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for i, ch := range w.channels {
		set := s.watches[ch]
		if set == nil {
			set = make(map[*releaseWatch]struct{})
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

func (s *subscriber) remove(w *releaseWatch) {
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
func (s *subscriber) wake() {
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
func (s *subscriber) run() {
	ctx := context.Background()
	ps := s.rdb.Subscribe(ctx) // no channels yet: no connection yet
	defer func() { _ = ps.Close() }()
	quit := make(chan struct{})
	defer close(quit) // before the Close above: the receiver stops handing on
	s.deaf.Store(false)
	var msgs <-chan any
	linger := time.NewTimer(subscriberLinger)
	defer linger.Stop()
	for {
		select {
		case <-s.kick:
			subscribe, unsubscribe, idle := s.changes()
			if idle {
				linger.Reset(subscriberLinger)
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
// quit is closed or ps is, and keeps s.deaf: set when a receive fails,
// cleared when one works. After a failure go-redis makes a new connection,
// subscribed to every channel again, at the next receive; while it can
// not, the receives are tried again at a growing pace (up to once a
// second).
func (s *subscriber) receive(ps *redis.PubSub, quit <-chan struct{}) <-chan any {
	out := make(chan any)
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
				if errors.Is(err, redis.ErrClosed) {
					return
				}
				s.deaf.Store(true)
				failures++
				select {
				case <-time.After(min(time.Duration(failures)*50*time.Millisecond, time.Second)):
				case <-quit:
					return
				}
				continue
			}
			failures = 0
			s.deaf.Store(false)
			switch m.(type) {
			case *redis.Subscription, *redis.Message:
			default:
				continue // a pong
			}
			select {
			case out <- m:
			case <-quit:
				return
			}
		}
	}()
	return out
}

// changes works out the commands that bring the connection's channels to
// the watches': the channels to subscribe and those to unsubscribe, and
// marks them sent. idle reports that no watch is left.
func (s *subscriber) changes() (subscribe, unsubscribe []string, idle bool) {
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
func (s *subscriber) deliver(m any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch m := m.(type) {
	case *redis.Subscription:
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
	case *redis.Message:
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
func (s *subscriber) done() bool {
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

// deaf reports whether the Client's subscriptions' connection to node i
// has stopped receiving (see subscriber.deaf).
func (c *Client) deaf(i int) bool { return c.subscribers[i].deaf.Load() }

// wakeSpread is the scale of the waits right after a wake-up: a woken
// waiter still refused tries again within 0.5-2.5 ms (see waiting.delay),
// a fair waiter named first in line within 0.5 ms, and a local waiter
// yielding to other processes' waiters starts after 1 ms (yieldFirst).
const wakeSpread = 500 * time.Microsecond

// waitRetry waits before the next attempt: the retry delay, or until a
// release is announced. It returns false when ctx ends first, whether a
// fair lock's announcement named this waiter first in line, and whether a
// release announcement ended the wait.
func (c *Client) waitRetry(ctx context.Context, k kind, watch *releaseWatch, delay time.Duration) (ok, first, woken bool) {
	line, inLine := k.(waitsInLine)
	timer := c.cfg.clock.After(delay)
	for {
		select {
		case <-timer:
			return true, false, false
		case m := <-watch.released():
			if watch.own != "" && m.Channel == watch.own {
				// Among the first two in line: only they were woken, and
				// this one tries at once.
				return true, false, true
			}
			if inLine {
				// A queue's release names the first in line: only that
				// waiter tries, and at once.
				switch line.named(m.Payload) {
				case namedUs:
					return true, true, false
				case namedAnother:
					continue
				}
			}
			// Everyone subscribed heard it and tries at once; a split vote
			// among them is resolved by the designated one (split.go).
			// (Spreading them over 0.5 ms, those that failed most first,
			// moved no figure: attempts per section 1.22 either way with 4
			// processes contending, and a lone waiter's wake-up took 0.3
			// ms longer.)
			return true, false, !inLine
		case <-ctx.Done():
			return false, false, false
		}
	}
}

// listenNode picks the node an Acquire refused with answers listens on for
// the release: one of the nodes where another holder had the key, chosen
// by the lock's first channel, so that waiters on different keys spread
// over the nodes while those on one key meet on one. Nodes for which deaf
// (which may be nil) is true are passed over while another named a
// holder. It returns -1 when no node named another holder.
func listenNode(channels []string, answers []answer, deaf func(node int) bool) int {
	if len(channels) == 0 {
		return -1
	}
	var held, heard []int // the nodes that named a holder; those of them whose releases are heard
	for i, a := range answers {
		if a == holdsNot {
			held = append(held, i)
			if deaf == nil || !deaf(i) {
				heard = append(heard, i)
			}
		}
	}
	if len(heard) > 0 {
		held = heard // only the nodes whose releases are heard, if any is
	}
	if len(held) == 0 {
		return -1
	}
	h := fnv.New32a()
	h.Write([]byte(channels[0]))
	return held[h.Sum32()%uint32(len(held))]
}
