// Command singleton keeps one instance of a periodic job running among
// three replicas: each replica campaigns in the election "singleton"; the
// leader runs the job every 50 ms, a read-modify-write of a counter in a
// store, fenced by its term. The example kills the leader's process
// (SIGKILL: it neither resigns nor releases), shows another replica take
// over once the leadership's ttl has run out, then has that one resign and
// shows the next take over at once. It checks its own outcome: two
// replicas leading at once, or a job whose write was lost or counted
// twice, make it exit 1.
//
//	go run ./examples/singleton
//
// The lock nodes (five) and the store are embedded in the first process;
// the replicas are this program started again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/redistest"
)

const (
	election = "singleton"
	ttl      = time.Second
	counter  = "jobs-done"
	ticks    = "ticks" // a list of every job run: "term replica start end" (µs)
)

func main() {
	redis.SetLogger(quiet{}) // replicas are killed on purpose
	replicaMain()
	res, err := run(context.Background(), os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
	if !res.ok() {
		fmt.Println("FAILED:", res.problem)
		os.Exit(1)
	}
	fmt.Println("OK: one leader at a time, every write kept exactly once")
}

// replicaMain runs this process as a replica, and exits, when the example
// started it as one.
func replicaMain() {
	if os.Getenv(replicaEnv) == "" {
		return
	}
	fs := flag.NewFlagSet("replica", flag.ExitOnError)
	replica := fs.Int("replica", 0, "the replica's number")
	nodes := fs.String("nodes", "", "the lock nodes")
	store := fs.String("store", "", "the store")
	_ = fs.Parse(os.Args[1:])
	if err := runReplica(*replica, strings.Split(*nodes, ","), *store); err != nil {
		log.Fatalf("replica %d: %v", *replica, err)
	}
	os.Exit(0)
}

// runReplica campaigns until it is signalled; while leading, it runs the
// job every 50 ms under its term.
func runReplica(id int, addrs []string, storeAddr string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var clients []redis.UniversalClient
	for _, a := range addrs {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: a}))
	}
	locker, err := redlock.New(clients)
	if err != nil {
		return err
	}
	store := redis.NewClient(&redis.Options{Addr: storeAddr})
	e, err := locker.Election(election, ttl)
	if err != nil {
		return err
	}
	for ctx.Err() == nil {
		l, err := e.Campaign(ctx, fmt.Sprintf("replica-%d pid=%d", id, os.Getpid()))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		lead(ctx, l, id, store)
		_ = l.Resign(context.Background())
	}
	return nil
}

// lead runs the job while l leads, until ctx ends.
func lead(ctx context.Context, l *redlock.Leadership, id int, store *redis.Client) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		if !l.Leading() {
			return
		}
		// The job: a read-modify-write under the term, which a newer
		// leader's read makes fail.
		v, err := redlock.FencedGet(ctx, store, counter, l.Term())
		if err != nil && !errors.Is(err, redis.Nil) {
			continue // ErrStaleToken: deposed; Done closes soon
		}
		n, _ := strconv.Atoi(v)
		if err := redlock.FencedSet(ctx, store, counter, strconv.Itoa(n+1), l.Term()); err != nil {
			continue
		}
		store.RPush(context.Background(), ticks, // recorded even if told to stop meanwhile
			fmt.Sprintf("%d %d %d %d", l.Term(), id, start.UnixMicro(), time.Now().UnixMicro()))
	}
}

// result is what the run saw.
type result struct {
	terms   []uint64 // the leaders' terms, in order
	runs    int      // job runs recorded
	counter int      // the store's counter at the end
	problem string
}

func (r result) ok() bool { return r.problem == "" }

// run starts the nodes, the store and three replicas; kills the first
// leader, has the second resign, stops them all and checks what happened.
func run(ctx context.Context, out *os.File) (result, error) {
	var res result
	var addrs []string
	for range 5 {
		n, err := redistest.Start()
		if err != nil {
			return res, err
		}
		defer n.Close()
		addrs = append(addrs, n.Addr())
	}
	storeSrv := miniredis.NewMiniRedis()
	if err := storeSrv.Start(); err != nil {
		return res, err
	}
	defer storeSrv.Close()

	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	procs := map[string]*exec.Cmd{} // by the value a replica proclaims
	for i := range 3 {
		cmd := exec.Command(self, "-replica", strconv.Itoa(i), "-nodes", strings.Join(addrs, ","), "-store", storeSrv.Addr())
		cmd.Env = append(os.Environ(), replicaEnv+"=1")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			return res, err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		procs[fmt.Sprintf("replica-%d pid=%d", i, cmd.Process.Pid)] = cmd
	}

	var clients []redis.UniversalClient
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		defer c.Close()
		clients = append(clients, c)
	}
	observer, err := redlock.New(clients)
	if err != nil {
		return res, err
	}
	e, err := observer.Election(election, ttl)
	if err != nil {
		return res, err
	}
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	leaders := e.Observe(octx)
	next := func() (redlock.Leader, error) {
		for l := range leaders {
			if len(res.terms) == 0 || l.Term > res.terms[len(res.terms)-1] {
				res.terms = append(res.terms, l.Term)
				fmt.Fprintf(out, "leader: %s, term %d\n", l.Value, l.Term)
				return l, nil
			}
		}
		return redlock.Leader{}, errors.New("no new leader within a minute")
	}
	first, err := next()
	if err != nil {
		return res, err
	}
	time.Sleep(300 * time.Millisecond) // a few runs of the job
	killed := time.Now()
	fmt.Fprintf(out, "killing the leader (%s) with SIGKILL\n", first.Value)
	_ = procs[first.Value].Process.Kill()
	second, err := next()
	if err != nil {
		return res, err
	}
	fmt.Fprintf(out, "taken over %v after the kill (ttl %v)\n", time.Since(killed).Round(time.Millisecond), ttl)
	time.Sleep(300 * time.Millisecond)
	resigned := time.Now()
	fmt.Fprintf(out, "the leader (%s) resigns (SIGTERM)\n", second.Value)
	_ = procs[second.Value].Process.Signal(syscall.SIGTERM)
	if _, err := next(); err != nil {
		return res, err
	}
	fmt.Fprintf(out, "taken over %v after the resignation\n", time.Since(resigned).Round(time.Millisecond))
	time.Sleep(300 * time.Millisecond)
	for _, cmd := range procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range procs {
		_ = cmd.Wait()
	}
	return check(ctx, res, storeSrv.Addr(), out)
}

// check reads what the replicas recorded: the jobs of different terms must
// not overlap in time, and the counter must equal the job runs.
func check(ctx context.Context, res result, storeAddr string, out *os.File) (result, error) {
	store := redis.NewClient(&redis.Options{Addr: storeAddr})
	defer store.Close()
	list, err := store.LRange(ctx, ticks, 0, -1).Result()
	if err != nil {
		return res, err
	}
	type run struct {
		term       uint64
		start, end int64
	}
	var runs []run
	for _, s := range list {
		var r run
		var id int
		if _, err := fmt.Sscan(s, &r.term, &id, &r.start, &r.end); err != nil {
			return res, err
		}
		runs = append(runs, r)
	}
	res.runs = len(runs)
	v, err := store.Get(ctx, counter).Result()
	if err != nil {
		return res, err
	}
	res.counter, _ = strconv.Atoi(v)
	slices.SortFunc(runs, func(a, b run) int { return int(a.start - b.start) })
	for i := 1; i < len(runs); i++ {
		if a, b := runs[i-1], runs[i]; a.term != b.term && b.start < a.end {
			res.problem = fmt.Sprintf("terms %d and %d ran the job at the same time", a.term, b.term)
		}
	}
	// Every recorded run added one to the counter: less is a lost update
	// (two leaders read the same value). One more is the killed leader's
	// last run, killed between its write and its record; more than that
	// are writes nobody recorded.
	if res.counter < res.runs || res.counter > res.runs+1 {
		res.problem = fmt.Sprintf("the counter is %d after %d job runs", res.counter, res.runs)
	}
	fmt.Fprintf(out, "%d leaders (terms %v), %d job runs, counter %d\n", len(res.terms), res.terms, res.runs, res.counter)
	return res, nil
}

// replicaEnv marks a replica's process (for the example's test).
const replicaEnv = "SINGLETON_REPLICA"

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
