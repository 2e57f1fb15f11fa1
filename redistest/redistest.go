// Package redistest runs Redis nodes inside the process, for tests, demos
// and examples of the redlock library (github.com/quorumlock/redlock):
// miniredis (github.com/alicebob/miniredis), with keys that expire in real
// time as Redis's do.
//
//	n, err := redistest.Start()
//	if err != nil { ... }
//	defer n.Close()
//	rdb := redis.NewClient(&redis.Options{Addr: n.Addr()})
//
// miniredis moves TTLs only when told to (FastForward). A lock node whose
// keys never expire breaks an assumption the algorithm rests on: a key left
// behind by a failed attempt or an interrupted release, which Redis would
// drop after its TTL, would block that node for good.
//
// It is a module of its own, so that the library's module does not require
// miniredis: a program that imports the library does not get it.
package redistest

import (
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// tick is how often a node's TTLs catch up with the wall clock: a key
// expires up to this much after its TTL, never before.
const tick = 2 * time.Millisecond

// Node is an embedded Redis node whose TTLs run on the wall clock. Its
// miniredis methods reach into the node's data (Addr, Set, Exists, ...).
type Node struct {
	*miniredis.Miniredis
	stopClock func()
}

// Start starts a node on a free loopback port, or returns why it could
// not. Close stops it.
func Start() (*Node, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, err
	}
	return &Node{Miniredis: m, stopClock: Expire(m)}, nil
}

// Close stops the node, as a crash would: its clients get connection
// errors from then on. Calling it again does nothing.
func (n *Node) Close() {
	n.stopClock()
	n.Miniredis.Close()
}

// Expire moves m's TTLs by the elapsed wall-clock time every 2 ms until
// the returned stop is called (stop may be called more than once). A
// process stopped with SIGSTOP catches up when it resumes, as Redis does.
func Expire(m *miniredis.Miniredis) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(tick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-quit:
				return
			case now := <-t.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(quit)
		<-done
	})
}
