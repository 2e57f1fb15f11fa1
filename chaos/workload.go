package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// workload is W workers contending on a few keys. Workers come in groups
// of perClient that share one lock Client, with connections of its own (as
// separate processes would have, each with a few goroutines), so that the
// Client's local queue and hand-offs are under test as well. In
// each critical section a worker reads the key's counter from the Register,
// works, checks that its lock is still valid, and writes the counter back
// one higher.
type workload struct {
	workers   int
	perClient int    // workers sharing one Client; 1 when zero
	kind      string // the kind of lock; see kindPlain and the others
	permits   int    // for kindSemaphore
	keys      int
	ttl       time.Duration
	work      time.Duration                  // time spent between read and write
	pause     func(worker int) time.Duration // a stop-the-world pause after the validity check; may be nil
	target    int                            // stop once this many sections are done
	fenced    bool                           // acquire WithFencing; the register checks the tokens
	addrs     []string                       // where the clients connect: the links
	seed      uint64
	register  *register
	// nodeTimeout, when set, is the Clients' WithNodeTimeout (at most half
	// the ttl); else it is derived from the ttl
	nodeTimeout time.Duration

	mu       sync.Mutex
	sections []section
	done     atomic.Int64
	// started receives, without blocking, each time a section starts.
	started chan struct{}
	// progress is closed and replaced as sections complete; see waitDone.
	progressMu sync.Mutex
	progress   chan struct{}
}

func (w *workload) init() {
	w.register = newRegister()
	w.started = make(chan struct{}, 1)
	w.progress = make(chan struct{})
}

// run runs the workers until target sections are done or ctx ends. It
// returns an error only for something other than ctx ending.
func (w *workload) run(ctx context.Context) (ret error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		errs = make(chan error, w.workers)
	)
	per := max(w.perClient, 1)
	for first := 0; first < w.workers; first += per {
		clients := make([]redis.UniversalClient, len(w.addrs))
		for j, a := range w.addrs {
			// ContextTimeoutEnabled stays off: the lock enforces its own
			// per-node timeout, and a late reply is then read by the call
			// that sent it, keeping the connection. With it on, each timeout
			// closes a connection and the next call dials again; on a loaded
			// machine the dials queue up behind the slow ones and it feeds
			// on itself.
			clients[j] = redis.NewClient(&redis.Options{
				Addr: a, MaxRetries: -1, DialerRetries: 1,
				ReadTimeout: 2 * w.ttl, WriteTimeout: 2 * w.ttl,
			})
		}
		opts := []redlock.Option{
			redlock.WithRetry(redlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)),
			redlock.WithObserver(redlock.ObserverFunc(traceAcquire)),
			quietLog,
		}
		if w.nodeTimeout > 0 {
			opts = append(opts, redlock.WithNodeTimeout(min(w.nodeTimeout, w.ttl/2)))
		}
		locker, closeLocker, err := newLocker(clients, opts...)
		if err != nil {
			return err
		}
		if w.kind == kindElection && first == 0 {
			// Until the workers are done (observe ends with them).
			octx, stop := context.WithCancel(ctx)
			observed := make(chan error, 1)
			go func() { observed <- observeTerms(octx, locker, w.ttl) }()
			defer func() {
				stop()
				if err := <-observed; err != nil && ret == nil {
					ret = err
				}
			}()
		}
		var group sync.WaitGroup
		for i := first; i < min(first+per, w.workers); i++ {
			group.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer group.Done()
				rng := rand.New(rand.NewPCG(w.seed, uint64(i)))
				for ctx.Err() == nil && int(w.done.Load()) < w.target {
					if err := w.section(ctx, locker, i, rng); err != nil {
						if ctx.Err() == nil {
							errs <- fmt.Errorf("worker %d: %w", i, err)
							cancel()
						}
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			group.Wait()
			closeLocker()
			for _, c := range clients {
				_ = c.Close()
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// Lock kinds the workload can use; see redlock's kinds.
const (
	kindPlain     = ""
	kindReentrant = "reentrant"
	kindReadWrite = "read-write"
	kindSemaphore = "semaphore"
	kindMultiKey  = "multi-key"
	kindFair      = "fair"
	kindElection  = "election" // a section is a leadership: Campaign to Resign
)

// lockFor picks the keys and options of one section.
func (w *workload) lockFor(worker int, rng *rand.Rand) (keys []string, opts []redlock.AcquireOption, shared bool) {
	keys = []string{fmt.Sprintf("chaos:%d", rng.IntN(w.keys))}
	if w.fenced {
		opts = append(opts, redlock.WithFencing())
	}
	switch w.kind {
	case kindReentrant:
		opts = append(opts, redlock.WithOwner(fmt.Sprint("worker-", worker)))
	case kindReadWrite:
		if rng.IntN(4) == 0 {
			opts = append(opts, redlock.ForWrite())
		} else {
			opts, shared = append(opts, redlock.ForRead()), true
		}
	case kindSemaphore:
		opts, shared = append(opts, redlock.WithPermits(w.permits)), true
	case kindFair:
		opts = append(opts, redlock.Fair())
	case kindMultiKey:
		pick := rng.Perm(w.keys)[:2]
		keys = []string{fmt.Sprintf("chaos:%d", pick[0]), fmt.Sprintf("chaos:%d", pick[1])}
	}
	return keys, opts, shared
}

func (w *workload) section(ctx context.Context, locker *redlock.Client, worker int, rng *rand.Rand) error {
	keys, opts, shared := w.lockFor(worker, rng)
	started := time.Now()
	tr := &acquireTrace{answered: map[int]time.Time{}}
	ctx = context.WithValue(ctx, acquireTraceKey{}, tr)
	var (
		lock, inner *redlock.Lock
		err         error
	)
	switch w.kind {
	case kindMultiKey:
		lock, err = locker.AcquireAll(ctx, keys, w.ttl, opts...)
	case kindElection:
		lock, err = campaign(ctx, locker, keys[0], w.ttl, worker)
	default:
		lock, err = locker.Acquire(ctx, keys[0], w.ttl, opts...)
	}
	if err == nil && w.kind == kindReentrant {
		// The owner takes the lock again inside its own hold.
		if inner, err = locker.Acquire(ctx, keys[0], w.ttl, opts...); err != nil {
			_ = lock.Release(context.Background())
		}
	}
	if err != nil {
		if errors.Is(err, redlock.ErrNotAcquired) && ctx.Err() != nil {
			return nil
		}
		return err
	}
	until := lock.Until()
	if inner != nil && inner.Until().Before(until) {
		until = inner.Until()
	}
	s := section{Worker: worker, Acquired: time.Now(), Until: until, Token: lock.FencingToken(),
		Shared: shared, Ticket: lock.Ticket(), Started: started}
	s.Queued, s.Won = tr.result(len(w.addrs)/2 + 1)
	select {
	case w.started <- struct{}{}:
	default:
	}
	s.ReadAt = time.Now()
	reads := make([]int64, len(keys))
	for i, k := range keys {
		reads[i] = w.register.read(k)
	}
	if w.work > 0 {
		time.Sleep(w.work)
	}
	wrote := make([]bool, len(keys))
	if lock.Validity() > 0 && (inner == nil || inner.Validity() > 0) {
		if w.pause != nil {
			if d := w.pause(worker); d > 0 {
				time.Sleep(d) // the holder stops, as in a GC pause, after its last check
			}
		}
		for i, k := range keys {
			switch {
			case shared: // readers and permit holders only read
			case w.fenced:
				wrote[i] = w.register.writeFenced(k, reads[i]+1, s.Token)
				s.Refused = s.Refused || !wrote[i]
			default:
				w.register.write(k, reads[i]+1)
				wrote[i] = true
			}
		}
		s.WroteAt = time.Now()
	}
	s.Released = time.Now()
	// A lost lock shows in the history, not here.
	if inner != nil {
		_ = inner.Release(context.Background())
	}
	_ = lock.Release(context.Background())
	for i, k := range keys { // a section on several keys is one per key to the checkers
		ks := s
		ks.Key, ks.Read, ks.Wrote = k, reads[i], wrote[i]
		w.record(ks)
	}
	return nil
}

// campaign is an election's section: this worker's leadership of key.
func campaign(ctx context.Context, locker *redlock.Client, key string, ttl time.Duration, worker int) (*redlock.Lock, error) {
	e, err := locker.Election(key, ttl)
	if err != nil {
		return nil, err
	}
	l, err := e.Campaign(ctx, fmt.Sprint("worker-", worker))
	if err != nil {
		return nil, err
	}
	return l.Lock(), nil // the section's Release resigns
}

// observeTerms watches the election of the workload's key until ctx ends:
// an observer must never see a leadership older than one it saw.
func observeTerms(ctx context.Context, locker *redlock.Client, ttl time.Duration) error {
	e, err := locker.Election("chaos:0", ttl)
	if err != nil {
		return err
	}
	var last redlock.Leader
	for l := range e.Observe(ctx) {
		if l.Term < last.Term || l.Term == last.Term && l.Revision <= last.Revision {
			return fmt.Errorf("observer saw term %d (revision %d) after term %d (revision %d)", l.Term, l.Revision, last.Term, last.Revision)
		}
		last = l
	}
	return nil
}

func (w *workload) record(s section) {
	w.mu.Lock()
	w.sections = append(w.sections, s)
	w.mu.Unlock()
	w.done.Add(1)
	w.progressMu.Lock()
	close(w.progress)
	w.progress = make(chan struct{})
	w.progressMu.Unlock()
}

// waitDone waits until n sections are done, or ctx ends.
func (w *workload) waitDone(ctx context.Context, n int) error {
	for {
		w.progressMu.Lock()
		ch := w.progress
		w.progressMu.Unlock()
		if int(w.done.Load()) >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitHolder waits until a section starts after the call, or ctx ends.
func (w *workload) waitHolder(ctx context.Context) error {
	select {
	case <-w.started: // drop a start from before the call
	default:
	}
	select {
	case <-w.started:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *workload) history() ([]section, map[string]int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	final := map[string]int64{}
	w.register.mu.Lock()
	for k, v := range w.register.v {
		final[k] = v
	}
	w.register.mu.Unlock()
	return append([]section(nil), w.sections...), final
}

// sectionsBetween counts the sections acquired in [from, to).
func (w *workload) sectionsBetween(from, to time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.sections {
		if !s.Acquired.Before(from) && s.Acquired.Before(to) {
			n++
		}
	}
	return n
}

// acquireTrace gathers what the nodes answered to one section's acquire
// attempts, from the Client's Observer (see Section.Queued and Won).
type acquireTrace struct {
	mu       sync.Mutex
	answered map[int]time.Time // node -> when its first answer came back
	won      time.Time         // the start of the earliest call that granted
}

type acquireTraceKey struct{}

// traceAcquire is the workload Clients' Observer.
func traceAcquire(ctx context.Context, e redlock.Event) {
	tr, ok := ctx.Value(acquireTraceKey{}).(*acquireTrace)
	if !ok || e.Op != redlock.OpNode || e.NodeOp != redlock.OpAcquire || e.Err != nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if at, seen := tr.answered[e.Node]; !seen || e.Start.Add(e.Duration).Before(at) {
		tr.answered[e.Node] = e.Start.Add(e.Duration)
	}
	if e.Granted && (tr.won.IsZero() || e.Start.Before(tr.won)) {
		tr.won = e.Start
	}
}

// result returns when a quorum of nodes had answered (zero if fewer did)
// and the start of the earliest granting call.
func (tr *acquireTrace) result(quorum int) (queued, won time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	times := slices.SortedFunc(maps.Values(tr.answered), time.Time.Compare)
	if len(times) >= quorum {
		queued = times[quorum-1]
	}
	return queued, tr.won
}
