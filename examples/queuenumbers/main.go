// Command queuenumbers hands out waiting-list numbers, as a dormitory office
// does: many applicants at once, from several processes, and every one gets
// a number of its own, with no gaps. The lock is fair (first come, first
// served across processes), so an applicant who queued for the lock before
// another also gets the lower number.
//
//	go run ./examples/queuenumbers -applicants 200 -processes 4
//
// The number is a counter in Redis, read and written under a fair quorum
// lock (first come, first served across processes) on five embedded nodes.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/redistest"
)

// issue is one number given to an applicant.
type issue struct {
	applicant int
	number    int64
	ticket    uint64 // the applicant's place in the lock's queue
}

func main() {
	redis.SetLogger(quiet{})
	applicants := flag.Int("applicants", 200, "applicants asking at once")
	processes := flag.Int("processes", 4, "processes (lock clients) they ask through")
	flag.Parse()
	if *applicants < 1 || *processes < 1 {
		fmt.Fprintln(os.Stderr, "queuenumbers: -applicants and -processes must be at least 1")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	issued, err := run(ctx, *applicants, *processes)
	if err != nil {
		log.Fatal(err)
	}
	if err := check(issued); err != nil {
		fmt.Println("FAIL:", err)
		os.Exit(1)
	}
	fmt.Printf("OK: %d applicants got the numbers 1 to %d, each once\n", len(issued), len(issued))
}

func run(ctx context.Context, applicants, processes int) ([]issue, error) {
	var lockNodes []*redistest.Node
	for range 5 {
		s, err := redistest.Start()
		if err != nil {
			return nil, err
		}
		defer s.Close()
		lockNodes = append(lockNodes, s)
	}
	storeSrv, err := miniredis.Run()
	if err != nil {
		return nil, err
	}
	defer storeSrv.Close()
	store := redis.NewClient(&redis.Options{Addr: storeSrv.Addr()})
	defer store.Close()

	lockers := make([]*redlock.Client, processes)
	for p := range lockers {
		var nodes []redis.UniversalClient
		for _, s := range lockNodes {
			c := redis.NewClient(&redis.Options{Addr: s.Addr()})
			defer c.Close()
			nodes = append(nodes, c)
		}
		if lockers[p], err = redlock.New(nodes); err != nil {
			return nil, err
		}
	}

	var (
		mu     sync.Mutex
		issued []issue
		wg     sync.WaitGroup
		errs   = make(chan error, applicants)
	)
	for a := range applicants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int64
			var ticket uint64
			err := func() error {
				lock, err := lockers[a%processes].Acquire(ctx, "waitlist:dorm", 5*time.Second, redlock.Fair())
				if err != nil {
					return err
				}
				defer lock.Release(context.WithoutCancel(ctx))
				ticket = lock.Ticket()
				last, err := store.Get(ctx, "waitlist:dorm:last").Int64()
				if err != nil && err != redis.Nil {
					return err
				}
				n = last + 1
				if lock.Validity() == 0 {
					return redlock.ErrLockLost
				}
				return store.Set(ctx, "waitlist:dorm:last", n, 0).Err()
			}()
			if err != nil {
				errs <- fmt.Errorf("applicant %d: %w", a, err)
				return
			}
			mu.Lock()
			issued = append(issued, issue{applicant: a, number: n, ticket: ticket})
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	return issued, nil
}

// check verifies that the numbers are 1..N, each once.
func check(issued []issue) error {
	byNumber := slices.Clone(issued)
	slices.SortFunc(byNumber, func(a, b issue) int { return int(a.number - b.number) })
	for i, is := range byNumber {
		if is.number != int64(i+1) {
			return fmt.Errorf("numbers %v... are not 1..%d each once", numbers(byNumber[:min(i+2, len(byNumber))]), len(issued))
		}
	}
	return nil
}

func numbers(is []issue) []int64 {
	var n []int64
	for _, i := range is {
		n = append(n, i.number)
	}
	return n
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
