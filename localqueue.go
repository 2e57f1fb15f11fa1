package redlock

import (
	"context"
	"fmt"
	"sync"
)

// Goroutines of one Client that Acquire the same key queue here, first come
// first served, so that only one of them at a time contends for it on the
// nodes. The others would only collide with it (and with each other),
// splitting the votes and backing off; queued, the next one starts its
// attempt the moment the lock is released, instead of after a random delay.
//
// This is safe because the queue only decides which local goroutine may
// try; every lock is still won on a quorum of the nodes, exactly as
// without it. A holder that never releases holds up its local waiters only
// until its lock ends: the waiters make sure its validity is watched, and
// the end of the validity frees the queue like a release does.

// localQueue is the queue of one key.
type localQueue struct {
	turn   chan struct{} // holding a place in it is the right to contend
	mu     sync.Mutex
	users  int   // goroutines holding or waiting for the turn
	holder *Lock // the lock won by the goroutine whose turn it is, if any
}

type localQueues struct {
	mu    sync.Mutex
	byKey map[string]*localQueue
}

// join registers a goroutine that wants key's turn and returns its queue.
func (qs *localQueues) join(key string) *localQueue {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.byKey == nil {
		qs.byKey = map[string]*localQueue{}
	}
	q := qs.byKey[key]
	if q == nil {
		q = &localQueue{turn: make(chan struct{}, 1)}
		qs.byKey[key] = q
	}
	q.mu.Lock()
	q.users++
	if q.holder != nil {
		q.holder.Done() // watch the holder's validity, so its end frees the turn
	}
	q.mu.Unlock()
	return q
}

// leave unregisters a goroutine that no longer holds or waits for the turn.
func (qs *localQueues) leave(key string, q *localQueue) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	q.mu.Lock()
	q.users--
	empty := q.users == 0
	q.mu.Unlock()
	if empty {
		delete(qs.byKey, key)
	}
}

// wait blocks until it is the caller's turn, or ctx ends.
func (q *localQueue) wait(ctx context.Context) error {
	select {
	case q.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hold records the lock won in the current turn; its end passes the turn on.
func (qs *localQueues) hold(key string, q *localQueue, l *Lock) {
	end := func() {
		q.mu.Lock()
		q.holder = nil
		q.mu.Unlock()
		qs.pass(key, q)
	}
	l.mu.Lock()
	if l.released || l.lost { // it ended already
		l.mu.Unlock()
		end()
		return
	}
	l.onEnd = end
	l.mu.Unlock()

	q.mu.Lock()
	q.holder = l
	waiting := q.users > 1
	q.mu.Unlock()
	if waiting {
		l.Done()
	}
}

// pass gives the turn up without a lock.
func (qs *localQueues) pass(key string, q *localQueue) {
	<-q.turn
	qs.leave(key, q)
}

// acquireQueued is Acquire's attempt loop run in the key's local turn.
func (c *Client) acquireQueued(ctx context.Context, key string, attempt func() (*Lock, error)) (*Lock, error) {
	q := c.queues.join(key)
	if err := q.wait(ctx); err != nil {
		c.queues.leave(key, q)
		return nil, &quorumError{kind: ErrNotAcquired, detail: fmt.Sprintf("%q: gave up waiting behind this client's other acquires", key), cause: err}
	}
	lock, err := attempt()
	if err != nil {
		c.queues.pass(key, q)
		return nil, err
	}
	c.queues.hold(key, q, lock)
	return lock, nil
}
