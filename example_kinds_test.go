package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/quorumlock/redlock"
)

// A reentrant lock: code that holds a document's lock can call code that
// takes it again for the same owner.
func ExampleWithOwner() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	owner := redlock.WithOwner("request-7f3a")

	outer, err := locker.Acquire(ctx, "doc:42", 10*time.Second, owner)
	if err != nil {
		log.Fatal(err)
	}
	inner, err := locker.Acquire(ctx, "doc:42", 10*time.Second, owner) // at once: same owner
	if err != nil {
		log.Fatal(err)
	}
	_, err = locker.TryAcquire(ctx, "doc:42", 10*time.Second, redlock.WithOwner("request-b21c"))
	fmt.Println("another owner:", errors.Is(err, redlock.ErrNotAcquired))

	_ = inner.Release(ctx)
	_ = outer.Release(ctx) // the last hold frees the key
	other, err := locker.TryAcquire(ctx, "doc:42", 10*time.Second, redlock.WithOwner("request-b21c"))
	fmt.Println("after both releases:", err == nil)
	_ = other.Release(ctx)
	// Output:
	// another owner: true
	// after both releases: true
}

// A read-write lock: readers share the key, a writer has it alone.
func ExampleForWrite() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	r1, _ := locker.TryAcquire(ctx, "config", 10*time.Second, redlock.ForRead())
	r2, _ := locker.TryAcquire(ctx, "config", 10*time.Second, redlock.ForRead())
	_, err = locker.TryAcquire(ctx, "config", 10*time.Second, redlock.ForWrite())
	fmt.Println("writer while two readers hold:", errors.Is(err, redlock.ErrNotAcquired))

	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	w, err := locker.TryAcquire(ctx, "config", 10*time.Second, redlock.ForWrite())
	fmt.Println("writer once they left:", err == nil)
	_ = w.Release(ctx)
	// Output:
	// writer while two readers hold: true
	// writer once they left: true
}

// A semaphore: at most 2 exports run at once, whichever hosts they run on.
func ExampleWithPermits() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	two := redlock.WithPermits(2)

	a, _ := locker.TryAcquire(ctx, "exports", time.Minute, two)
	b, _ := locker.TryAcquire(ctx, "exports", time.Minute, two)
	_, err = locker.TryAcquire(ctx, "exports", time.Minute, two)
	fmt.Println("third export:", errors.Is(err, redlock.ErrNotAcquired))
	_ = a.Release(ctx)
	c, err := locker.TryAcquire(ctx, "exports", time.Minute, two)
	fmt.Println("after one finished:", err == nil)
	_ = b.Release(ctx)
	_ = c.Release(ctx)
	// Output:
	// third export: true
	// after one finished: true
}

// Several keys at once: a transfer locks both accounts, all or nothing, in
// any order without deadlock.
func ExampleClient_AcquireAll() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	lock, err := locker.AcquireAll(ctx, []string{"account:alice", "account:bob"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	_, err = locker.TryAcquireAll(ctx, []string{"account:bob", "account:carol"}, 10*time.Second)
	fmt.Println("a transfer touching bob:", errors.Is(err, redlock.ErrNotAcquired))
	fmt.Println("held:", lock.Keys())
	_ = lock.Release(ctx)
	// Output:
	// a transfer touching bob: true
	// held: [account:alice account:bob]
}

// A fair lock: waiters get it first come, first served, across processes.
func ExampleFair() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	holder, err := locker.Acquire(ctx, "printer", 10*time.Second, redlock.Fair())
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan uint64, 1)
	go func() {
		lock, err := locker.Acquire(ctx, "printer", 10*time.Second, redlock.Fair())
		if err != nil {
			log.Fatal(err)
		}
		served <- lock.Ticket()
		_ = lock.Release(ctx)
	}()
	time.Sleep(100 * time.Millisecond) // the waiter queues
	_ = holder.Release(ctx)
	fmt.Println("the waiter's ticket comes after the holder's:", <-served > holder.Ticket())
	// Output: the waiter's ticket comes after the holder's: true
}
