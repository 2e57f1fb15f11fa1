package chaos

import (
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"
)

// stallTick is how often the stall watcher asks to wake, and stallMin the
// lateness from which a wake-up counts as a stall.
const (
	stallTick = 2 * time.Millisecond
	stallMin  = 5 * time.Millisecond
)

// stallWatch records when this process did not run: goroutines sleep a
// tick at a time and note every wake-up that came stallMin or more later
// than asked. On a loaded machine the process stops for tens of
// milliseconds at a time, and a lock's timer then fires late for reasons
// no lock can help: the holder was paused, which the safety assumptions
// rule out (docs/safety.md, assumption 4). The signal check uses the
// record to tell such a pause from a late signal.
type stallWatch struct {
	mu    sync.Mutex
	spans [][2]time.Time // from when the wake-up was due to when it came
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	armed sync.WaitGroup // done once every watcher waits for its first tick
}

// stallKeep is how long a stall is kept: longer than any schedule.
const stallKeep = 2 * time.Minute

// stallWatchers is how many goroutines watch, per P: a timer lives on the
// P its goroutine last ran on, and when the operating system stops that
// P's thread while another runs, only the goroutines whose timers are on
// it wake late. Several watchers spread over the Ps see such a stall too.
const stallWatchers = 2

func watchStalls() *stallWatch {
	w := &stallWatch{stop: make(chan struct{}), done: make(chan struct{})}
	var wg sync.WaitGroup
	n := stallWatchers * runtime.GOMAXPROCS(0)
	w.armed.Add(n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(stallTick)
			defer t.Stop()
			arm := sync.OnceFunc(w.armed.Done)
			for {
				due := time.Now().Add(stallTick)
				t.Reset(stallTick)
				arm()
				select {
				case <-w.stop:
					return
				case <-t.C:
				}
				if now := time.Now(); now.Sub(due) >= stallMin {
					w.note(due, now)
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(w.done)
	}()
	return w
}

func (w *stallWatch) note(from, to time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := 0
	for i < len(w.spans) && to.Sub(w.spans[i][1]) > stallKeep {
		i++
	}
	w.spans = append(w.spans[i:], [2]time.Time{from, to})
}

// close stops the watcher; calling it again does nothing, nor does a nil
// watcher.
func (w *stallWatch) close() {
	if w == nil {
		return
	}
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

// within returns how long the process (or one of its threads) stalled
// between from and to: the length of the union of the stalls the watchers
// saw. A nil watcher saw nothing.
func (w *stallWatch) within(from, to time.Time) time.Duration {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	spans := slices.Clone(w.spans)
	w.mu.Unlock()
	slices.SortFunc(spans, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	var (
		d   time.Duration
		end time.Time // of what is counted so far
	)
	for _, s := range spans {
		lo, hi := later(later(s[0], from), end), earlier(s[1], to)
		if hi.After(lo) {
			d += hi.Sub(lo)
			end = hi
		}
	}
	return d
}

// stallLead is how long before a lock's Until a stall can hold up the
// signal of its loss: the renewal and the Done watcher act a renewal margin
// (at most a node timeout plus the drift) before Until.
const stallLead = 100 * time.Millisecond

// explains tells whether stalls explain a signal that came at t, not before
// until: the process stopped, from shortly before until on, for at least
// as long as the signal was late.
func (w *stallWatch) explains(until, t time.Time) bool {
	d := w.within(until.Add(-stallLead), t)
	return d > 0 && d >= t.Sub(until)
}

// A starved CPU (the starve fault: one processor, goroutines spinning on
// it) stalls every wake-up, so the stall watcher cannot tell there what
// the machine took from what the explorer did. The process's processor
// always has work then, and every moment it does not run is the machine's:
// the fault marks the processor time the process has used every cpuTick,
// and the wall time between two marks that the process did not run is
// what the machine took (see lost).
type cpuMark struct {
	at  time.Time
	cpu time.Duration // the process's processor time (user and system) by at
}

const cpuTick = 20 * time.Millisecond

func markCPU() cpuMark {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return cpuMark{time.Now(), time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
}

// markCPUs marks the processor time every cpuTick, from first until quit
// is closed, and once more then.
func markCPUs(first cpuMark, quit <-chan struct{}) []cpuMark {
	t := time.NewTicker(cpuTick)
	defer t.Stop()
	marks := []cpuMark{first}
	for {
		select {
		case <-quit:
			return append(marks, markCPU())
		case <-t.C:
			marks = append(marks, markCPU())
		}
	}
}

// lost is how long, over [from, to], a process that had one processor's
// work all along did not run, by the marks: between two marks, the wall
// time less the processor time used, spread evenly over them.
func lost(marks []cpuMark, from, to time.Time) time.Duration {
	var d time.Duration
	for i := 1; i < len(marks); i++ {
		a, b := marks[i-1], marks[i]
		wall := b.at.Sub(a.at)
		gap := wall - (b.cpu - a.cpu)
		lo, hi := later(a.at, from), earlier(b.at, to)
		if gap > 0 && hi.After(lo) {
			d += time.Duration(float64(gap) * float64(hi.Sub(lo)) / float64(wall))
		}
	}
	return d
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
