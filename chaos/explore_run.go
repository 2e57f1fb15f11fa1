package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// maxExploreNodes is the largest N a schedule draws, and maxExploreClients
// the most lock clients; a lane starts that many nodes, and a link from
// each client to each node, once, and gives each schedule the first ones.
const (
	maxExploreNodes   = 5
	maxExploreClients = 4
)

// lane is a set of nodes, with a link from each client to each, on which
// schedules run one after another; the nodes are reset between them. A
// network fault strikes every client's link to a node (the node's network)
// or some clients' (theirs).
type lane struct {
	server  ServerKind
	persist bool // the nodes run with appendfsync always
	toxi    *toxiproxy.ApiServer
	nodes   []*Node
	links   [][]*netLink // by client, then node
	// store is the resource the locks protect: registers written with
	// redlock.FencedSet, on a Redis of its own (in this process).
	store    *miniredis.Miniredis
	storeRdb *redis.Client
	stalls   *stallWatch // the process's, shared by the lanes; may be nil
}

func newLane(server ServerKind, dir string, index int) (*lane, error) {
	l := &lane{server: server, persist: server == Redis, toxi: newToxiServer()}
	dir = filepath.Join(dir, "lane-"+strconv.Itoa(index))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	for range maxExploreNodes {
		n, err := startNode(dir, nodeSpec{kind: server, persist: l.persist})
		if err != nil {
			l.close()
			return nil, err
		}
		l.nodes = append(l.nodes, n)
	}
	for c := range maxExploreClients {
		var row []*netLink
		for i, n := range l.nodes {
			link, err := newLink(l.toxi, fmt.Sprintf("lane-%d-client-%d-node-%d", index, c, i), n.Addr())
			if err != nil {
				l.close()
				return nil, err
			}
			row = append(row, link)
		}
		l.links = append(l.links, row)
	}
	if err := l.warmUp(context.Background()); err != nil {
		l.close()
		return nil, err
	}
	store, err := miniredis.Run()
	if err != nil {
		l.close()
		return nil, err
	}
	l.store = store
	l.storeRdb = redis.NewClient(&redis.Options{Addr: store.Addr()})
	return l, nil
}

func (l *lane) close() {
	for _, row := range l.links {
		for _, link := range row {
			link.close()
		}
	}
	for _, n := range l.nodes {
		n.stop()
	}
	if l.storeRdb != nil {
		_ = l.storeRdb.Close()
		l.store.Close()
	}
}

// warmUp runs every operation of every kind of lock on every node once,
// so that the nodes have every script cached, as nodes in service have:
// only then does a call that times out still run when it lands (an
// EVALSHA of a script the node does not know is answered NOSCRIPT, and the
// script's text is not sent after the deadline).
func (l *lane) warmUp(ctx context.Context) error {
	var nodes []redis.UniversalClient
	for _, n := range l.nodes {
		rdb := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	// Long node timeouts: the warm-up only needs every call to land, also
	// on a loaded machine.
	const ttl = 10 * time.Second
	rc, err := redlock.New(nodes, redlock.WithNodeTimeout(2*time.Second), quietLog)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	use := func(lock *redlock.Lock, err error) error {
		if err != nil {
			return err
		}
		return errors.Join(lock.Extend(ctx, ttl), lock.Release(ctx))
	}
	for _, kind := range []string{stepPlain, stepReentrant, stepRead, stepWrite, stepSemaphore, stepFair, stepMulti} {
		for _, fenced := range []bool{false, true} {
			st := planStep{Kind: kind, Owner: "o", Fenced: fenced}
			var err error
			if kind == stepMulti {
				err = use(rc.TryAcquireAll(ctx, []string{"warm:a", "warm:b"}, ttl, kindOptions(st)...))
			} else {
				err = use(rc.TryAcquire(ctx, "warm:"+kind, ttl, kindOptions(st)...))
			}
			if err != nil {
				return fmt.Errorf("chaos: warming the nodes up (%s): %w", kind, err)
			}
		}
	}
	// a hand-off, and the acquire of a failed attempt's cleanup
	held, err := rc.TryAcquire(ctx, "warm:hand-off", ttl)
	if err != nil {
		return err
	}
	next := make(chan error, 1)
	go func() { next <- use(rc.Acquire(ctx, "warm:hand-off", ttl)) }()
	time.Sleep(50 * time.Millisecond) // the other Acquire waits for its local turn: the release hands it over
	if err := errors.Join(held.Release(ctx), <-next); err != nil {
		return fmt.Errorf("chaos: warming the nodes up (hand-off): %w", err)
	}
	for _, n := range l.nodes {
		if _, err := doOn(ctx, n.Addr(), "FLUSHALL"); err != nil {
			return err
		}
	}
	return nil
}

// reset undoes every fault and empties every node of its keys.
func (l *lane) reset(ctx context.Context) error {
	for _, row := range l.links {
		for _, link := range row {
			link.Heal(ctx)
		}
	}
	for i, n := range l.nodes {
		if n.pid() == 0 {
			if err := n.start(); err != nil {
				return err
			}
		} else if err := n.thaw(); err != nil {
			return err
		}
		// The scripts stay cached, as on a node in service: a call that
		// lands late then runs (an EVALSHA the node did not know would fail
		// instead). The script-flush fault tries the other case.
		if _, err := doOn(ctx, n.Addr(), "FLUSHALL"); err != nil {
			return fmt.Errorf("chaos: resetting node %d: %w", i, err)
		}
	}
	l.store.FlushAll()
	return nil
}

// hold is what one step did (one run of it, for a step that repeats), as
// its actor saw it.
type hold struct {
	client, actor, step int
	run                 int // the run of a repeated step (see planStep.Repeat)
	st                  planStep

	called   time.Time // the acquire was called
	returned time.Time // it returned (for Do: fn began, or Do returned without the lock)
	acquired time.Time // it returned a lock; zero if it did not
	failure  string    // the acquire's error, when it returned no lock
	refused  bool      // the acquire was refused with ErrInvalidArgument (an extreme value)
	refusals int       // values refused with ErrInvalidArgument: the acquire's, an extend's, a resume's, the Client's options
	token    uint64
	released time.Time // Release was called (or Do's fn returned); zero if kept
	freed    time.Time // Release returned nil (or Do did, fn having run, its release confirmed): the key is free on the nodes
	finished time.Time // the step was over: its lock released or left, or its acquire failed
	until    time.Time // Until when it was released, lost or left
	lost     time.Time // Done closed before the release; zero if not
	lostTill time.Time // Until when Done closed
	writes   []write
	// unsignalled: times the holder found its lock valid by its own signal
	// (Done open, fn's context alive, Validity) at or after its Until
	unsignalled []time.Time
	ops         int
	watch       chan struct{} // closed once lost and lostTill are set (renewed locks)
}

// end is when the holder stopped being entitled to the lock.
func (h *hold) end() time.Time {
	end := h.until
	if !h.released.IsZero() && h.released.Before(end) {
		end = h.released
	}
	if !h.lost.IsZero() && h.lost.Before(end) {
		end = h.lost
	}
	return end
}

// write is one write of a key's register.
type write struct {
	key      string
	at       time.Time
	accepted bool
	stale    bool // made after the writer's validity, on purpose (pause)
}

// run runs s on the lane and returns what every step did, and what was
// left on the nodes.
func (l *lane) run(ctx context.Context, s Schedule) (*history, error) {
	if s.Nodes > len(l.nodes) || len(s.Clients) > len(l.links) {
		return nil, fmt.Errorf("chaos: a schedule of %d nodes and %d clients on a lane of %d and %d", s.Nodes, len(s.Clients), len(l.nodes), len(l.links))
	}
	if err := l.reset(ctx); err != nil {
		return nil, err
	}
	r := &runner{lane: l, s: s, maxTTL: s.maxTTL(), actorsDone: make(chan struct{})}
	var (
		clients []*redis.Client
		holds   []*[]*hold // each actor's, in the order of its steps and runs
	)
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	for ci, plan := range s.Clients {
		nodes := make([]redis.UniversalClient, s.Nodes)
		for i := range s.Nodes {
			c := redis.NewClient(&redis.Options{
				Addr: l.links[ci][i].Addr(), MaxRetries: -1, DialerRetries: 1,
				ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, ContextTimeoutEnabled: plan.ContextTimeout,
			})
			clients = append(clients, c)
			nodes[i] = c
		}
		rc, closeLocker, err := newLocker(nodes, clientOptions(plan)...)
		if err == nil {
			defer closeLocker()
		}
		if err != nil {
			if !errors.Is(err, redlock.ErrInvalidArgument) || !plan.extreme() {
				return nil, err
			}
			// An extreme option refused: a refusal, not a failure. Its
			// steps are noted as refused and not run.
			now := time.Now()
			for ai, steps := range plan.Actors {
				hs := make([]*hold, len(steps))
				for si := range steps {
					hs[si] = &hold{client: ci, actor: ai, step: si, st: steps[si], called: now, returned: now, finished: now,
						refused: true, refusals: 1, failure: err.Error()}
				}
				holds = append(holds, &hs)
			}
			continue
		}
		for ai, steps := range plan.Actors {
			hs := new([]*hold)
			holds = append(holds, hs)
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A panic in the library reaches the caller: it is the
				// schedule's failure, not the explorer's end.
				defer func() {
					if p := recover(); p != nil {
						r.fail(fmt.Errorf("actor %d.%d: panic: %v\n%s", ci, ai, p, debug.Stack()))
					}
				}()
				for si, st := range steps {
					first := start.Add(time.Duration(st.At))
					if err := sleepUntil(ctx, first); err != nil {
						return
					}
					for run := 0; ; run++ {
						h := &hold{client: ci, actor: ai, step: si, run: run, st: st}
						*hs = append(*hs, h)
						r.step(ctx, rc, h)
						if time.Since(first) >= time.Duration(st.Repeat) || sleep(ctx, time.Duration(st.Gap)) != nil {
							break
						}
					}
				}
			}()
		}
	}
	go func() {
		wg.Wait()
		close(r.actorsDone)
	}()
	faultErr := r.faults(ctx, start)
	<-r.actorsDone
	r.anchored.Wait()
	// the keys that late calls may still set land once every node is back
	if err := errors.Join(faultErr, l.settle(ctx, s.Nodes)); err != nil {
		return nil, err
	}
	h := &history{schedule: s, start: start, maxTTL: r.maxTTL, errs: r.errs, losses: r.losses, stalls: l.stalls, spans: r.spans}
	for _, hs := range holds {
		h.holds = append(h.holds, *hs...)
	}
	var err error
	h.left, err = l.scan(ctx, s.Nodes)
	return h, err
}

// settle waits until every node answers, and a little longer, so that the
// calls held up by a fault have landed.
func (l *lane) settle(ctx context.Context, n int) error {
	for i := range n {
		if err := waitPing(l.nodes[i].Addr(), nil, 10*time.Second); err != nil {
			return fmt.Errorf("chaos: node %d after the schedule: %w", i, err)
		}
	}
	return sleep(ctx, 50*time.Millisecond)
}

// keyLeft is a key found on a node after a schedule, with its time to live
// (-1: none).
type keyLeft struct {
	node int
	key  string
	pttl time.Duration
}

// scan lists every key on the first n nodes.
func (l *lane) scan(ctx context.Context, n int) ([]keyLeft, error) {
	var left []keyLeft
	for i := range n {
		rdb := redis.NewClient(&redis.Options{Addr: l.nodes[i].Addr(), MaxRetries: -1})
		keys, err := rdb.Keys(ctx, "*").Result()
		for _, k := range keys {
			if err != nil {
				break
			}
			var pttl time.Duration
			pttl, err = rdb.PTTL(ctx, k).Result()
			if pttl != -2*time.Nanosecond && pttl != -2*time.Millisecond { // gone meanwhile
				left = append(left, keyLeft{node: i, key: k, pttl: pttl})
			}
		}
		_ = rdb.Close()
		if err != nil {
			return nil, fmt.Errorf("chaos: listing the keys of node %d: %w", i, err)
		}
	}
	return left, nil
}

// runner runs one schedule's steps and faults.
type runner struct {
	lane   *lane
	s      Schedule
	maxTTL time.Duration

	mu       sync.Mutex
	errs     []error // the harness's own failures, and errors no step should see
	losses   []dataLoss
	spans    []faultSpan    // the faults as they were in force
	anchored sync.WaitGroup // the faults struck by actors, until undone
	// actorsDone is closed once every actor is done (the end of the faults
	// that last the whole run)
	actorsDone chan struct{}
}

// faultSpan is when the schedule's fault number fault was in force: from
// the moment its injection began to the moment it was undone.
type faultSpan struct {
	fault    int
	from, to time.Time
	ran      []cpuMark // a starved CPU's: the process's processor time through it
}

// clientOptions are the options of a Client of the plan: the explorer's
// retry policy (short delays: schedules are short) unless the plan gives
// one, and what else the plan gives.
func clientOptions(plan clientPlan) []redlock.Option {
	retry := redlock.ExponentialBackoff(2*time.Millisecond, exploreRetryMax)
	if r := plan.Retry; r != nil {
		switch r.Policy {
		case "random":
			retry = redlock.RandomDelay(time.Duration(r.Min), time.Duration(r.Max))
		case "default":
			retry = nil
		default:
			retry = redlock.ExponentialBackoff(time.Duration(r.Min), time.Duration(r.Max))
		}
	}
	opts := []redlock.Option{redlock.WithBatching(plan.Batching)}
	if retry != nil {
		opts = append(opts, redlock.WithRetry(retry))
	}
	if !plan.HandOff {
		opts = append(opts, redlock.WithHandOff(0))
	}
	if plan.NodeTimeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(time.Duration(plan.NodeTimeout)))
	}
	if plan.FenceHorizon > 0 {
		opts = append(opts, redlock.WithFenceHorizon(time.Duration(plan.FenceHorizon)))
	}
	if plan.MaxAttempts > 0 {
		opts = append(opts, redlock.WithMaxAttempts(plan.MaxAttempts))
	}
	return append(opts, quietLog, redlock.WithObserver(releaseNotes))
}

// releaseNote is where a Do step's release tells its outcome: Do returns
// its job's result, and tells an unconfirmed release only to the logger
// and the Observer (releaseNotes).
type releaseNote struct {
	mu   sync.Mutex
	told bool
	err  error
}

type releaseNoteKey struct{}

// confirmed tells whether the release was told, and confirmed.
func (n *releaseNote) confirmed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.told && n.err == nil
}

// releaseNotes hands each release's outcome to the releaseNote of its
// context, if any (a Release keeps the values of its context).
var releaseNotes = redlock.ObserverFunc(func(ctx context.Context, e redlock.Event) {
	if n, ok := ctx.Value(releaseNoteKey{}).(*releaseNote); ok && e.Op == redlock.OpRelease {
		n.mu.Lock()
		n.told, n.err = true, e.Err
		n.mu.Unlock()
	}
})

// quietLog keeps the lock Clients of the harness from logging the failures
// it causes on purpose (they log to slog.Default() otherwise).
var quietLog = redlock.WithLogger(slog.New(slog.DiscardHandler))

func (r *runner) fail(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

// kindOptions are the acquire options of a step.
func kindOptions(st planStep) []redlock.AcquireOption {
	var opts []redlock.AcquireOption
	switch st.Kind {
	case stepReentrant:
		opts = append(opts, redlock.WithOwner(st.Owner))
	case stepRead:
		opts = append(opts, redlock.ForRead())
	case stepWrite:
		opts = append(opts, redlock.ForWrite())
	case stepSemaphore:
		opts = append(opts, redlock.WithPermits(st.permits()))
	case stepFair:
		opts = append(opts, redlock.Fair())
	}
	if st.Fenced {
		opts = append(opts, redlock.WithFencing())
	}
	if st.Renew && st.Call != "do" {
		opts = append(opts, redlock.WithAutoRenew())
	}
	return opts
}

// step runs one step of an actor (one run of it).
func (r *runner) step(ctx context.Context, rc *redlock.Client, h *hold) {
	defer func() { h.finished = time.Now() }()
	st := h.st
	ttl := time.Duration(st.TTL)
	opts := kindOptions(st)
	wait := time.Duration(st.Wait)
	if st.Call == "try" && wait == 0 {
		wait = time.Second // one attempt without a deadline; the bound only catches a hang
	}
	r.strike(ctx, h, -1)
	h.called = time.Now()
	h.ops++
	if st.Call == "do" {
		// Do's fn runs under a context derived from the one given to Do;
		// it is cancelled only if the acquire takes longer than Wait.
		note := &releaseNote{}
		doCtx, cancel := context.WithCancel(context.WithValue(ctx, releaseNoteKey{}, note))
		defer cancel()
		var (
			mu      sync.Mutex
			running bool
			lock    *redlock.Lock
		)
		timer := time.AfterFunc(wait, func() {
			mu.Lock()
			defer mu.Unlock()
			if !running {
				cancel()
			}
		})
		defer timer.Stop()
		err := rc.Do(doCtx, st.Keys[0], ttl, func(fnCtx context.Context) error {
			mu.Lock()
			running = true
			mu.Unlock()
			h.returned = time.Now()
			lock = redlock.LockFrom(fnCtx)
			r.held(fnCtx, rc, lock, h, func(*redlock.Lock) bool { return fnCtx.Err() == nil })
			return nil
		}, opts...)
		switch {
		case lock == nil:
			h.returned = time.Now()
			r.failed(h, err)
		case err == nil && note.confirmed():
			h.freed = time.Now()
		}
		r.expect(h, err)
		if lock != nil {
			r.ended(h, lock)
		}
		return
	}

	acqCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var (
		lock *redlock.Lock
		err  error
	)
	switch {
	case st.Kind == stepMulti && st.Call == "try":
		lock, err = rc.TryAcquireAll(acqCtx, st.Keys, ttl, opts...)
	case st.Kind == stepMulti:
		lock, err = rc.AcquireAll(acqCtx, st.Keys, ttl, opts...)
	case st.Call == "try":
		lock, err = rc.TryAcquire(acqCtx, st.Keys[0], ttl, opts...)
	case st.Call == "campaign": // a fenced, renewed lock; its release resigns
		lock, err = campaign(acqCtx, rc, st.Keys[0], ttl, h.client)
	default:
		lock, err = rc.Acquire(acqCtx, st.Keys[0], ttl, opts...)
	}
	h.returned = time.Now()
	if err != nil {
		r.failed(h, err)
		r.expect(h, err)
		return
	}
	believe := func(l *redlock.Lock) bool { return l.Validity() > 0 }
	if st.Renew {
		believe = func(l *redlock.Lock) bool { return isOpenChan(l.Done()) }
	}
	first := lock
	lock = r.held(ctx, rc, lock, h, believe)
	if !st.Keep {
		err := lock.Release(context.WithoutCancel(ctx))
		if err == nil {
			h.freed = time.Now()
		}
		r.expect(h, err)
	}
	r.ended(h, first)
}

// failed notes why h's acquire returned no lock.
func (r *runner) failed(h *hold, err error) {
	if err == nil {
		return
	}
	h.failure = err.Error()
	h.refused = errors.Is(err, redlock.ErrInvalidArgument)
}

// expect records an error that no step should see: anything but a lock
// not acquired, lost or not confirmed, a node's failure, a call made with a
// context that had ended (an Extend in Do's fn after a loss), or an
// extreme value refused (ErrInvalidArgument, for a step or Client that
// carries one: a refusal, counted as such).
func (r *runner) expect(h *hold, err error) {
	var ne *redlock.NodeError
	if errors.Is(err, redlock.ErrInvalidArgument) && (h.st.extreme() || r.s.Clients[h.client].extreme()) {
		h.refusals++
		return
	}
	if err == nil || errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, redlock.ErrLockLost) || errors.Is(err, redlock.ErrNotConfirmed) || errors.As(err, &ne) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	r.fail(fmt.Errorf("actor %d.%d step %d: unexpected error: %w", h.client, h.actor, h.step, err))
}

func isOpenChan(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// held does the step's actions with lock, up to its release (which the
// caller makes), and returns the lock then held (a resume gives another).
// believe tells whether the holder may still count on a lock, by the
// lock's own signal.
func (r *runner) held(ctx context.Context, rc *redlock.Client, lock *redlock.Lock, h *hold, believe func(*redlock.Lock) bool) *redlock.Lock {
	st := h.st
	h.acquired = time.Now()
	h.token = lock.FencingToken()
	if st.Renew {
		h.watch = make(chan struct{})
		go func() {
			defer close(h.watch)
			<-lock.Done()
			h.lost, h.lostTill = time.Now(), lock.Until()
		}()
	}
	// check tells whether the holder may count on its lock now, and notes a
	// violation when its signal says so at or past Until.
	check := func() bool {
		now := time.Now()
		ok := believe(lock)
		if ok && !now.Before(lock.Until()) {
			h.unsignalled = append(h.unsignalled, now)
		}
		return ok
	}
	for i, a := range st.Actions {
		r.strike(ctx, h, i)
		h.ops++
		switch a.Op {
		case "work":
			time.Sleep(time.Duration(a.D))
			check()
		case "extend":
			if err := lock.Extend(ctx, time.Duration(a.D)); err != nil {
				r.expect(h, err)
			}
			check()
		case "write":
			if check() {
				r.write(ctx, h, lock, false)
			}
		case "pause":
			time.Sleep(time.Until(lock.Until()) + 30*time.Millisecond)
			r.write(ctx, h, lock, true)
		case "resume":
			// the holder takes its own lock over by its token, as another
			// process would, and goes on with the lock Resume returns
			if next, err := rc.Resume(ctx, st.Keys[0], lock.Token(), time.Duration(a.D)); err != nil {
				r.expect(h, err)
			} else {
				lock = next
			}
			check()
		}
	}
	check()
	h.until = lock.Until()
	if !st.Keep {
		h.released = time.Now()
		h.ops++
	}
	return lock
}

// ended settles what a step's lock did once it was released (or left):
// whether Done closed before the release, a loss.
func (r *runner) ended(h *hold, lock *redlock.Lock) {
	if h.watch == nil {
		return
	}
	if h.st.Keep {
		return // a kept lock is never renewed
	}
	<-h.watch
	if !h.lost.Before(h.released) {
		h.lost, h.lostTill = time.Time{}, time.Time{} // closed by the release
	}
}

// write increments the register of each of the lock's keys: it reads the
// value and writes it one higher, through redlock.FencedSet when the lock
// is fenced.
func (r *runner) write(ctx context.Context, h *hold, lock *redlock.Lock, stale bool) {
	store := r.lane.storeRdb
	ctx = context.WithoutCancel(ctx) // the resource is not the lock: Do's loss does not stop a write under way
	for _, key := range h.st.Keys {
		reg := "register:" + key
		v, err := store.Get(ctx, reg).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			r.fail(err)
			return
		}
		w := write{key: key, stale: stale}
		next := strconv.FormatInt(v+1, 10)
		if h.st.Fenced {
			err = redlock.FencedSet(ctx, store, reg, next, lock.FencingToken())
			w.accepted = err == nil
			if errors.Is(err, redlock.ErrStaleToken) {
				err = nil
			}
		} else {
			err = store.Set(ctx, reg, next, 0).Err()
			w.accepted = err == nil
		}
		w.at = time.Now()
		if err != nil {
			r.fail(err)
			return
		}
		h.writes = append(h.writes, w)
	}
}

func sleepUntil(ctx context.Context, t time.Time) error { return sleep(ctx, time.Until(t)) }

// faults injects the schedule's faults, each at its time, and undoes each
// after its span; it returns once all are undone.
func (r *runner) faults(ctx context.Context, start time.Time) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i, f := range r.s.Faults {
		if f.Anchor != nil {
			continue // struck by its actor: see strike
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = sleepUntil(ctx, start.Add(time.Duration(f.At)))
			if err := r.inject(ctx, i, f, nil); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("chaos: fault %s: %w", f, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// strike injects the faults anchored before action of h's step (-1: before
// its acquire), and returns once they are in place; each is undone after
// its span, in the background.
func (r *runner) strike(ctx context.Context, h *hold, action int) {
	for i, f := range r.s.Faults {
		a := f.Anchor
		if a == nil || a.Client != h.client || a.Actor != h.actor || a.Step != h.step || a.Action != action || h.run > 0 {
			continue
		}
		applied := make(chan struct{})
		r.anchored.Add(1)
		go func() {
			defer r.anchored.Done()
			if err := r.inject(ctx, i, f, applied); err != nil {
				r.fail(fmt.Errorf("chaos: fault %s: %w", f, err))
			}
		}()
		select {
		case <-applied:
		case <-time.After(5 * time.Second):
			r.fail(fmt.Errorf("chaos: fault %s was not in place within 5s", f))
		}
	}
}

// inject applies f, the schedule's fault number i, closes applied (when
// not nil) once the fault is in place, waits its span, and undoes it.
func (r *runner) inject(ctx context.Context, i int, f planFault, applied chan<- struct{}) error {
	l := r.lane
	ctx = context.WithoutCancel(ctx) // a fault is always undone
	from := time.Now()
	var ran []cpuMark
	defer func() {
		r.mu.Lock()
		r.spans = append(r.spans, faultSpan{fault: i, from: from, to: time.Now(), ran: ran})
		r.mu.Unlock()
	}()
	inPlace := func() {
		if applied != nil {
			close(applied)
			applied = nil
		}
	}
	defer inPlace() // also when it could not be applied
	each := func(do func(n int) error) error {
		var errs []error
		for _, n := range f.Nodes {
			errs = append(errs, do(n))
		}
		return errors.Join(errs...)
	}
	name := fmt.Sprintf("fault-%d", i)
	span := func() {
		inPlace()
		if f.Whole {
			<-r.actorsDone
			return
		}
		_ = sleep(ctx, time.Duration(f.For))
	}
	clients := f.Clients
	if len(clients) == 0 { // the nodes' own network: every client's link
		for c := range r.s.Clients {
			clients = append(clients, c)
		}
	}
	links := func(do func(*netLink) error) error {
		return each(func(n int) error {
			var errs []error
			for _, c := range clients {
				errs = append(errs, do(l.links[c][n]))
			}
			return errors.Join(errs...)
		})
	}
	switch f.Kind {
	case "slow":
		if err := links(func(link *netLink) error { return link.slow(name, time.Duration(f.Latency), time.Duration(f.Jitter)) }); err != nil {
			return err
		}
		span()
		return links(func(link *netLink) error { return link.undo(ctx, name) })
	case "partition":
		if err := links(func(link *netLink) error { return link.cut(name) }); err != nil {
			return err
		}
		span()
		return links(func(link *netLink) error { return link.undo(ctx, name) })
	case "freeze":
		// A node that another fault has killed meanwhile is left alone:
		// it is down, which a freeze would only make it look like.
		var frozen sync.Map
		down := func(n int, err error) error {
			if err != nil && l.nodes[n].pid() == 0 {
				return nil // killed meanwhile
			}
			return err
		}
		if err := each(func(n int) error {
			if l.nodes[n].pid() == 0 {
				return nil
			}
			frozen.Store(n, true)
			return down(n, l.nodes[n].freeze())
		}); err != nil {
			return err
		}
		span()
		return each(func(n int) error {
			if _, ok := frozen.Load(n); !ok {
				return nil
			}
			return down(n, l.nodes[n].thaw())
		})
	case "kill":
		if err := each(func(n int) error { return l.nodes[n].kill() }); err != nil {
			return err
		}
		if !r.s.Persist {
			// It comes back empty, after every key it held has expired. Its
			// fencing counters are lost: note what the live nodes keep.
			if err := each(func(n int) error { return l.nodes[n].wipe() }); err != nil {
				return err
			}
			r.noteLoss(ctx, f.Nodes)
		}
		span()
		return each(func(n int) error { return l.nodes[n].start() })
	case "starve":
		// The process, every lane's locks and links with it, runs on one
		// processor while goroutines spin: the schedule runs alone (see
		// Schedule.exclusive), so the starved locks are its own.
		prev := runtime.GOMAXPROCS(1)
		var (
			stop atomic.Bool
			wg   sync.WaitGroup
		)
		for range f.Busy {
			wg.Add(1)
			go func() {
				defer wg.Done()
				spin(&stop)
			}()
		}
		first, quit, marks := markCPU(), make(chan struct{}), make(chan []cpuMark)
		go func() { marks <- markCPUs(first, quit) }()
		span()
		close(quit)
		ran = <-marks
		stop.Store(true)
		wg.Wait()
		runtime.GOMAXPROCS(prev)
		return nil
	case "script-flush":
		// A node that is down or frozen meanwhile (another fault) is left
		// alone; a frozen one flushes when it resumes.
		each(func(n int) error {
			if l.nodes[n].pid() != 0 {
				fctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				_, _ = doOn(fctx, l.nodes[n].Addr(), "SCRIPT", "FLUSH")
			}
			return nil
		})
		return nil
	}
	return fmt.Errorf("unknown fault %q", f.Kind)
}

// spin keeps a processor busy until stop is set; the Go scheduler
// preempts it every 10 ms, as it would a busy goroutine of an application.
func spin(stop *atomic.Bool) {
	for !stop.Load() {
	}
}

// fenceName is the name of a key's fencing counter on the nodes, as
// docs/kinds.md gives it.
func fenceName(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 && strings.IndexByte(key[open+1:], '}') > 0 {
		return key + "::fence"
	}
	return "{" + key + "}:fence"
}

// dataLoss is a moment when nodes lost their data (a kill without
// persistence), with the fencing counters the other nodes then had.
type dataLoss struct {
	at       time.Time
	counters map[string][]int64 // by key: the live nodes' counters (0: none, or not read)
}

// noteLoss records the fencing counters of every node but the lost ones.
func (r *runner) noteLoss(ctx context.Context, lost []int) {
	d := dataLoss{at: time.Now(), counters: map[string][]int64{}}
	for n := range r.s.Nodes {
		if slices.Contains(lost, n) {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: r.lane.nodes[n].Addr(), MaxRetries: -1,
			ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
		for _, key := range exploreKeys {
			v, _ := rdb.Get(ctx, fenceName(key)).Int64() // a frozen node counts as having none
			d.counters[key] = append(d.counters[key], v)
		}
		_ = rdb.Close()
	}
	r.mu.Lock()
	r.losses = append(r.losses, d)
	r.mu.Unlock()
}
