// Command idempotentjob runs each job once, however many times it is
// submitted: clients retry, load balancers resend, users double-click. A job
// is keyed by its request ID; each submission takes the quorum lock on that
// ID, runs the job only if no earlier submission finished it, and records it
// as done before releasing. A submission that finds the lock taken waits
// for it (a while), then finds the job done; one that waits too long
// reports the job as in progress. Never does a job run twice.
//
//	go run ./examples/idempotentjob -jobs 20 -copies 10 -processes 4
//
// Everything runs on five embedded lock nodes and an embedded store.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/redistest"
)

// outcome of one submission.
type outcome int

const (
	ran        outcome = iota // this submission ran the job
	done                      // an earlier submission had finished it
	inProgress                // another submission holds it right now
)

// worker submits jobs through its own lock client, as a separate process
// would.
type worker struct {
	locker *redlock.Client
	store  *redis.Client
	wait   time.Duration // how long a submission waits for the lock
}

// submit runs job id unless it ran already or is running.
func (w *worker) submit(ctx context.Context, id string, job func(ctx context.Context) error) (outcome, error) {
	// Submissions at the same moment may split the nodes' votes: wait a
	// little for the lock rather than give up on the first try.
	wctx, cancel := context.WithTimeout(ctx, w.wait)
	defer cancel()
	lock, err := w.locker.Acquire(wctx, "job:"+id, 10*time.Second, redlock.WithAutoRenew())
	if errors.Is(err, redlock.ErrNotAcquired) && wctx.Err() != nil && ctx.Err() == nil {
		return inProgress, nil
	}
	if err != nil {
		return 0, err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	finished, err := w.store.Exists(ctx, "done:"+id).Result()
	if err != nil || finished == 1 {
		return done, err
	}
	if err := job(ctx); err != nil {
		return 0, err
	}
	if lock.Validity() == 0 {
		return 0, fmt.Errorf("job %s: %w while it ran", id, redlock.ErrLockLost)
	}
	// Kept for a day: a resend within it finds the job done.
	return ran, w.store.Set(ctx, "done:"+id, "1", 24*time.Hour).Err()
}

// result counts, per job, how often it ran and how the submissions ended.
type result struct {
	runs     map[string]int
	outcomes map[outcome]int
}

func run(ctx context.Context, jobs, copies, processes int, wait time.Duration) (result, error) {
	var lockNodes []*redistest.Node
	for range 5 {
		s, err := redistest.Start()
		if err != nil {
			return result{}, err
		}
		defer s.Close()
		lockNodes = append(lockNodes, s)
	}
	storeSrv, err := miniredis.Run()
	if err != nil {
		return result{}, err
	}
	defer storeSrv.Close()
	store := redis.NewClient(&redis.Options{Addr: storeSrv.Addr()})
	defer store.Close()

	workers := make([]*worker, processes)
	for p := range workers {
		var nodes []redis.UniversalClient
		for _, s := range lockNodes {
			c := redis.NewClient(&redis.Options{Addr: s.Addr()})
			defer c.Close()
			nodes = append(nodes, c)
		}
		locker, err := redlock.New(nodes)
		if err != nil {
			return result{}, err
		}
		workers[p] = &worker{locker: locker, store: store, wait: wait}
	}

	res := result{runs: map[string]int{}, outcomes: map[outcome]int{}}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = make(chan error, jobs*copies)
	)
	for j := range jobs {
		id := fmt.Sprintf("req-%04d", j)
		job := func(context.Context) error {
			time.Sleep(5 * time.Millisecond) // the work: send an email, charge a card
			mu.Lock()
			res.runs[id]++
			mu.Unlock()
			return nil
		}
		for c := range copies { // the same request, submitted copies times at once
			wg.Add(1)
			go func() {
				defer wg.Done()
				o, err := workers[(j+c)%processes].submit(ctx, id, job)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				res.outcomes[o]++
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	close(errs)
	return res, <-errs
}

func main() {
	jobs := flag.Int("jobs", 20, "distinct jobs (request IDs)")
	copies := flag.Int("copies", 10, "times each is submitted at once")
	processes := flag.Int("processes", 4, "processes (lock clients) submitting")
	wait := flag.Duration("wait", 5*time.Second, "how long a submission waits for the lock before it reports the job in progress")
	flag.Parse()
	if *jobs < 1 || *copies < 1 || *processes < 1 {
		fmt.Fprintln(os.Stderr, "idempotentjob: -jobs, -copies and -processes must be at least 1")
		os.Exit(2)
	}
	res, err := run(context.Background(), *jobs, *copies, *processes, *wait)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d submissions: %d ran the job, %d found it done, %d found it in progress\n",
		*jobs**copies, res.outcomes[ran], res.outcomes[done], res.outcomes[inProgress])
	for id, n := range res.runs {
		if n != 1 {
			fmt.Printf("FAIL: job %s ran %d times\n", id, n)
			os.Exit(1)
		}
	}
	if len(res.runs) != *jobs {
		fmt.Printf("FAIL: %d of %d jobs ran\n", len(res.runs), *jobs)
		os.Exit(1)
	}
	fmt.Printf("OK: each of the %d jobs ran exactly once\n", *jobs)
}
