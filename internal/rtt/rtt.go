// Package rtt estimates how long a node takes to answer, from the replies
// its calls get, in the way TCP estimates a connection's round trip for its
// retransmission timeout (RFC 6298): a smoothed round trip and a smoothed
// variation, and a wait that doubles after every call that got no reply in
// time until a reply comes again.
//
// A lock client waits for each node only so long (its node timeout). A
// fixed timeout is a cliff: with nodes farther away than it, every call
// times out and no lock is ever taken, whatever the ttl allows. An
// Estimate lets the wait follow the round trips a client actually sees,
// within bounds the caller sets (a floor that a healthy node on a loaded
// machine meets, and a ceiling that keeps the lock's validity).
package rtt

import (
	"math"
	"sync"
	"time"
)

// Estimate is what one node's replies tell of its round trip. The zero
// value knows nothing: its Timeout is the floor. It is safe for concurrent
// use.
type Estimate struct {
	mu     sync.Mutex
	srtt   time.Duration // smoothed round trip; 0 before the first sample
	rttvar time.Duration // smoothed variation of the round trip
	// backoff: after a call that got no reply within a wait of w, the next
	// wait is at least 2w, until a reply comes (RFC 6298 5.5)
	backoff time.Duration
}

// Sample records a reply that came d after its call was made. Replies that
// come after the caller stopped waiting count too: they are how a client
// learns that a node is farther away than it waited.
func (e *Estimate) Sample(d time.Duration) {
	d = max(d, 0)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.backoff = 0
	if e.srtt == 0 {
		e.srtt, e.rttvar = max(d, 1), d/2
		return
	}
	diff := e.srtt - d
	if diff < 0 {
		diff = -diff
	}
	e.rttvar = e.rttvar - e.rttvar/4 + diff/4
	e.srtt = max(e.srtt-e.srtt/8+d/8, 1)
}

// TimedOut records a call that got no reply within waited: the next wait is
// at least twice as long, until a reply comes.
func (e *Estimate) TimedOut(waited time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.backoff = max(e.backoff, double(waited))
}

// Wait returns how long the node's next reply may take: the smoothed round
// trip plus four times its variation (and at least half the round trip
// again: a reply half again as slow as usual is jitter, not a failed node),
// or twice the last wait that timed out, whichever is longer. known is
// false while the node has neither answered nor timed out: nothing is
// known of it yet.
func (e *Estimate) Wait() (d time.Duration, known bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.backoff
	if e.srtt > 0 {
		w = max(w, add(e.srtt, max(mul(4, e.rttvar), e.srtt/2)))
	}
	return w, w > 0
}

// Usual returns how long the node's reply usually takes, as Wait does
// from its round trips (the smoothed round trip plus four times its
// variation, at least half the round trip again), but 0 while nothing is
// known of it or its last call timed out: then nothing is usual.
func (e *Estimate) Usual() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.srtt == 0 || e.backoff > 0 {
		return 0
	}
	return add(e.srtt, max(mul(4, e.rttvar), e.srtt/2))
}

// Timeout returns how long to wait for the q-th fastest of nodes, at least
// floor and at most ceiling (when ceiling is below floor, floor): the
// q-th smallest of their Waits, a node of which nothing is known yet
// counting as unknown. A call to a node slower than that counts as failed,
// as any node that does not answer in time; so a minority that hangs or is
// far away does not hold every operation up, while a majority that is far
// away lengthens the wait to what it needs.
func Timeout(nodes []Estimate, q int, floor, ceiling, unknown time.Duration) time.Duration {
	var buf [16]time.Duration
	waits := buf[:0]
	if len(nodes) > len(buf) {
		waits = make([]time.Duration, 0, len(nodes))
	}
	for i := range nodes {
		w, known := nodes[i].Wait()
		if !known {
			w = unknown
		}
		waits = append(waits, w)
	}
	if len(waits) == 0 {
		return floor
	}
	q = min(max(q, 1), len(waits))
	// Selection by insertion: a handful of nodes.
	for i := 1; i < len(waits); i++ {
		for j := i; j > 0 && waits[j] < waits[j-1]; j-- {
			waits[j], waits[j-1] = waits[j-1], waits[j]
		}
	}
	return max(min(waits[q-1], ceiling), floor)
}

func double(d time.Duration) time.Duration { return add(d, d) }

// add returns a+b for non-negative a and b, saturating.
func add(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func mul(n int64, d time.Duration) time.Duration {
	if d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return time.Duration(n) * d
}
