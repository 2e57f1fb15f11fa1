package main

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// runner is what a call is built against: a go-redis Client (the call runs at
// once) or a Pipeliner (the call is queued on the pipeline).
type runner interface {
	redis.Scripter
	Process(ctx context.Context, cmd redis.Cmder) error
}

// call is one command on its way to the node through a pipe.
type call struct {
	build func(ctx context.Context, r runner) redis.Cmder
	cmd   redis.Cmder
	done  chan struct{} // buffered(1)
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// idle policy of a pipe's sender once it finds the queue empty
type idleMode int

const (
	idleExit    idleMode = iota // exit at once (variant 2)
	idleGosched                 // runtime.Gosched() up to spinN times, re-checking the queue (variant 6a)
	idleLinger                  // wait up to linger on a wake-up channel (variant 6b)
)

// pipe is the per-node sender of variant 2 (and its tweaks): callers append to
// a mutex-protected queue and wait on their call's channel; the caller that
// finds no sender running starts one, which sends the whole queue (alone as a
// plain command when it holds one call, else as one rdb.Pipelined) until the
// queue is empty.
type pipe struct {
	rdb    *redis.Client
	mode   idleMode
	spinN  int
	linger time.Duration
	// inline: a caller that finds the pipe idle sends its own call on its own
	// goroutine (no goroutine hop); calls that queued meanwhile are handed to a
	// sender goroutine afterwards. (Extra variant "2i".)
	inline bool

	mu      sync.Mutex
	queue   []*call
	spare   []*call
	busy    bool
	waiting bool          // the sender is lingering: wake it on submit
	qlen    atomic.Int32  // len(queue), for the Gosched spin without the lock
	wake    chan struct{} // cap 1
	timer   *time.Timer   // used only by the current sender
}

func newPipe(rdb *redis.Client, mode idleMode, spinN int, linger time.Duration, inline bool) *pipe {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &pipe{rdb: rdb, mode: mode, spinN: spinN, linger: linger, inline: inline,
		wake: make(chan struct{}, 1), timer: t}
}

// do sends one command through the pipe and returns it once it has its reply.
func (p *pipe) do(ctx context.Context, build func(ctx context.Context, r runner) redis.Cmder) redis.Cmder {
	c := callPool.Get().(*call)
	c.build = build
	p.mu.Lock()
	if p.inline && !p.busy {
		// Idle: send it ourselves, right now.
		p.busy = true
		p.mu.Unlock()
		cmd := build(ctx, p.rdb)
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.busy = false
			p.mu.Unlock()
		} else {
			p.mu.Unlock()
			go p.drain()
		}
		c.build = nil
		callPool.Put(c)
		return cmd
	}
	p.queue = append(p.queue, c)
	p.qlen.Store(int32(len(p.queue)))
	if p.busy {
		if p.waiting {
			select {
			case p.wake <- struct{}{}:
			default:
			}
		}
		p.mu.Unlock()
	} else {
		p.busy = true
		p.mu.Unlock()
		go p.drain()
	}
	<-c.done
	cmd := c.cmd
	c.cmd, c.build = nil, nil
	callPool.Put(c)
	return cmd
}

func (p *pipe) drain() {
	ctx := context.Background()
	for {
		p.mu.Lock()
		if len(p.queue) == 0 {
			if p.mode == idleExit || !p.idleWait() { // idleWait unlocks and relocks
				p.busy = false
				p.mu.Unlock()
				return
			}
		}
		batch := p.queue
		p.queue = p.spare[:0]
		p.spare = nil
		p.qlen.Store(0)
		p.mu.Unlock()

		if len(batch) == 1 {
			c := batch[0]
			c.cmd = c.build(ctx, p.rdb)
		} else {
			_, _ = p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
				for _, c := range batch {
					c.cmd = c.build(ctx, pl)
				}
				return nil
			})
		}
		for i, c := range batch {
			c.done <- struct{}{}
			batch[i] = nil
		}
		p.mu.Lock()
		p.spare = batch
		p.mu.Unlock()
	}
}

// idleWait is called with p.mu held and the queue empty; it waits a little for
// new calls and returns with p.mu held, reporting whether the queue is now
// non-empty.
func (p *pipe) idleWait() bool {
	switch p.mode {
	case idleGosched:
		p.mu.Unlock()
		for i := 0; i < p.spinN && p.qlen.Load() == 0; i++ {
			runtime.Gosched()
		}
		p.mu.Lock()
		return len(p.queue) > 0
	case idleLinger:
		p.waiting = true
		p.mu.Unlock()
		select { // drop a stale wake-up
		case <-p.wake:
		default:
		}
		if p.qlen.Load() == 0 {
			p.timer.Reset(p.linger)
			select {
			case <-p.wake:
			case <-p.timer.C:
			}
			p.timer.Stop()
		}
		p.mu.Lock()
		p.waiting = false
		return len(p.queue) > 0
	}
	return false
}
