package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// embeddedNodes starts n embedded Redis nodes standing in for independent
// masters, and returns clients for them with a function that stops it all.
func embeddedNodes(n int) ([]redis.UniversalClient, []*miniredis.Miniredis, func()) {
	var (
		clients []redis.UniversalClient
		servers []*miniredis.Miniredis
	)
	for range n {
		s, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		servers = append(servers, s)
		clients = append(clients, redis.NewClient(&redis.Options{Addr: s.Addr()}))
	}
	return clients, servers, func() {
		for i := range clients {
			_ = clients[i].Close()
			servers[i].Close()
		}
	}
}

func Example() {
	nodes, _, stop := embeddedNodes(5)
	defer stop()

	locker, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	lock, err := locker.Acquire(ctx, "orders:42", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	fmt.Printf("%s held on at least %d of 5 nodes, valid for up to 10s\n", lock.Key(), locker.Quorum())
	// Output: orders:42 held on at least 3 of 5 nodes, valid for up to 10s
}

func ExampleClient_TryAcquire() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, _ := redlock.New(nodes)
	ctx := context.Background()

	first, err := locker.TryAcquire(ctx, "report:daily", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer first.Release(ctx)

	_, err = locker.TryAcquire(ctx, "report:daily", time.Minute)
	fmt.Println(errors.Is(err, redlock.ErrNotAcquired))
	// Output: true
}

func ExampleClient_Acquire_timeout() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, _ := redlock.New(nodes)

	holder, _ := locker.TryAcquire(context.Background(), "invoice:7", time.Minute)
	defer holder.Release(context.Background())

	// Acquire retries until its context ends; the error then matches both
	// ErrNotAcquired and the context's error.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := locker.Acquire(ctx, "invoice:7", time.Second)
	fmt.Println(errors.Is(err, redlock.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))
	// Output: true true
}

func ExampleLock_Extend() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, _ := redlock.New(nodes)
	ctx := context.Background()

	lock, err := locker.TryAcquire(ctx, "import:batch-9", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	// Work that needs longer than planned: ask for another 30 seconds,
	// counted from now.
	if err := lock.Extend(ctx, 30*time.Second); err != nil {
		log.Fatal(err) // ErrLockLost: stop the work, it is no longer protected
	}
	fmt.Println(lock.Validity() > 25*time.Second)
	// Output: true
}

func ExampleLock_Release() {
	nodes, servers, stop := embeddedNodes(1)
	defer stop()
	locker, _ := redlock.New(nodes)
	ctx := context.Background()

	lock, err := locker.TryAcquire(ctx, "cron:cleanup", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// The work overran: the key expired on every node.
	for _, s := range servers {
		s.FastForward(2 * time.Second)
	}
	err = lock.Release(ctx)
	fmt.Println(errors.Is(err, redlock.ErrLockLost))
	// Output: true
}

func ExampleClient_Do() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, _ := redlock.New(nodes)

	// A cron job that must run on one host only: the lock is renewed while
	// the job runs and released when it returns. ctx is cancelled if the
	// lock is lost, while it is still valid, so the job can stop in time.
	err := locker.Do(context.Background(), "cron:nightly-report", 10*time.Second, func(ctx context.Context) error {
		fmt.Println("building the report on this host only")
		return ctx.Err()
	})
	fmt.Println(err)
	// Output:
	// building the report on this host only
	// <nil>
}

func ExampleLockFrom() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, _ := redlock.New(nodes)
	store, _, stopStore := embeddedNodes(1)
	defer stopStore()

	// Inside Do, the job finds its lock in its context: here for the
	// fencing token that the resource checks.
	err := locker.Do(context.Background(), "stock", 10*time.Second, func(ctx context.Context) error {
		token := redlock.LockFrom(ctx).FencingToken()
		return redlock.FencedSet(ctx, store[0], "stock:count", "99", token)
	}, redlock.WithFencing())
	fmt.Println(err)
	// Output:
	// <nil>
}

func ExampleLock_Done() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, _ := redlock.New(nodes)
	ctx := context.Background()

	lock, err := locker.TryAcquire(ctx, "import:batch", time.Minute, redlock.WithAutoRenew())
	if err != nil {
		log.Fatal(err)
	}
	for i := range 3 {
		select {
		case <-lock.Done():
			fmt.Println("lock lost: stop before writing")
			return
		default:
			fmt.Println("imported part", i)
		}
	}
	_ = lock.Release(ctx)
	<-lock.Done() // closed by the release too
	fmt.Println("released")
	// Output:
	// imported part 0
	// imported part 1
	// imported part 2
	// released
}

func ExampleFencedSet() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, _ := redlock.New(nodes)
	ctx := context.Background()

	// The protected resource: a Redis that is not one of the lock nodes.
	store, _, stopStore := embeddedNodes(1)
	defer stopStore()
	resource := store[0]

	first, _ := locker.TryAcquire(ctx, "stock", time.Second, redlock.WithFencing())
	stale := first.FencingToken()
	_ = first.Release(ctx) // as if its lock had expired during a long pause

	second, _ := locker.TryAcquire(ctx, "stock", time.Second, redlock.WithFencing())
	defer second.Release(ctx)
	fmt.Println(second.FencingToken() > stale)
	fmt.Println(redlock.FencedSet(ctx, resource, "stock:count", "99", second.FencingToken()))

	// The first holder wakes up and writes: the resource refuses it.
	err := redlock.FencedSet(ctx, resource, "stock:count", "100", stale)
	fmt.Println(errors.Is(err, redlock.ErrStaleToken))
	// Output:
	// true
	// <nil>
	// true
}

// WithMaxAttempts bounds an Acquire by attempts rather than by time.
func ExampleWithMaxAttempts() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	holder, err := locker.TryAcquire(ctx, "report", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer holder.Release(ctx)

	_, err = locker.Acquire(ctx, "report", time.Minute, redlock.WithMaxAttempts(3))
	fmt.Println(errors.Is(err, redlock.ErrNotAcquired))
	// Output: true
}

// A node that refuses for a reason retrying cannot cure (here, it needs a
// password the client was not given) ends the wait at once when it leaves
// the quorum out of reach; the error says what to change.
func ExampleErrMisconfigured() {
	nodes, servers, stop := embeddedNodes(1)
	defer stop()
	servers[0].RequireAuth("secret")
	locker, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err = locker.Acquire(ctx, "report", time.Minute)
	fmt.Println(errors.Is(err, redlock.ErrNotAcquired), errors.Is(err, redlock.ErrMisconfigured), ctx.Err())
	// Output: true true <nil>
}

// An Extend that the nodes did not confirm, although nothing shows the lock
// lost, leaves the lock valid until its Until.
func ExampleErrNotConfirmed() {
	nodes, servers, stop := embeddedNodes(1)
	defer stop()
	locker, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lock, err := locker.TryAcquire(ctx, "report", time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	servers[0].SetError("LOADING Redis is loading the dataset in memory")
	err = lock.Extend(ctx, time.Hour)
	servers[0].SetError("")
	fmt.Println(errors.Is(err, redlock.ErrNotConfirmed), errors.Is(err, redlock.ErrLockLost), lock.Validity() > 59*time.Minute)
	// Output: true false true
}

// A lock taken in one process is seen from another with Inspect, holder
// and metadata, and rebuilt there with Resume, to be extended and released.
func ExampleClient_Resume() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	ctx := context.Background()
	build, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	lock, err := build.TryAcquire(ctx, "deploy", time.Minute, redlock.WithMetadata("step=build"))
	if err != nil {
		log.Fatal(err)
	}
	key, token := lock.Key(), lock.Token() // handed to the next step

	// The next step, in another process with its own Client.
	release, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	in, err := release.Inspect(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(in.Held(), in.Holders[0].Token == token, in.Holders[0].Metadata, in.Holders[0].Nodes)

	resumed, err := release.Resume(ctx, key, token, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resumed.Release(ctx))
	// Output:
	// true true step=build 3
	// <nil>
}

// The metadata stored with a lock tells anyone who holds it.
func ExampleWithMetadata() {
	nodes, servers, stop := embeddedNodes(3)
	defer stop()
	locker, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lock, err := locker.TryAcquire(ctx, "nightly-report", time.Minute, redlock.WithMetadata("host=web-1 pid=4242"))
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)

	stored, _ := servers[0].Get("nightly-report") // what redis-cli GET shows
	fmt.Println(stored == lock.Token()+" host=web-1 pid=4242", lock.Metadata())
	// Output: true host=web-1 pid=4242
}

// Inspect tells, per node, who holds a key and for how long, and whether a
// quorum agrees.
func ExampleClient_Inspect() {
	nodes, servers, stop := embeddedNodes(3)
	defer stop()
	locker, err := redlock.New(nodes)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lock, err := locker.TryAcquire(ctx, "orders:42", time.Minute, redlock.WithMetadata("job=7"))
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)
	servers[2].Del("orders:42") // as if node 2 had lost it

	in, err := locker.Inspect(ctx, "orders:42")
	if err != nil {
		log.Fatal(err)
	}
	for _, nd := range in.Nodes {
		fmt.Println(nd.Node, nd.Held, nd.Metadata, nd.TTL > 59*time.Second)
	}
	fmt.Println(in.Held(), in.Holders[0].Metadata, in.Holders[0].Nodes, "of", len(in.Nodes), "quorum", in.Quorum)
	// Output:
	// 0 true job=7 true
	// 1 true job=7 true
	// 2 false  false
	// true job=7 2 of 3 quorum 2
}

// A Client whose fencing counters outlast a node's clock being set back by
// up to a day: each node keeps a key's counter for 24 hours once its clock
// has passed it, rather than for the lock's ttl.
func ExampleWithFenceHorizon() {
	nodes, servers, stop := embeddedNodes(3)
	defer stop()

	locker, err := redlock.New(nodes, redlock.WithFenceHorizon(24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lock, err := locker.TryAcquire(ctx, "invoice:7", 10*time.Second, redlock.WithFencing())
	if err != nil {
		log.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	var kept time.Duration
	for _, s := range servers {
		kept = max(kept, s.TTL("{invoice:7}:fence"))
	}
	fmt.Println("counter kept for about a day:", kept > 23*time.Hour && kept <= 24*time.Hour+time.Second)
	// Output: counter kept for about a day: true
}

// A lock held without a node that failed says so: Confirmed counts the
// nodes that hold it, and the Observer hears OpDegraded once per failing
// node.
func ExampleLock_Confirmed() {
	nodes, servers, stop := embeddedNodes(3)
	defer stop()
	servers[2].Close() // one node down
	degraded := redlock.ObserverFunc(func(_ context.Context, e redlock.Event) {
		if e.Op == redlock.OpDegraded {
			fmt.Println("held without node", e.Node)
		}
	})
	locker, err := redlock.New(nodes, redlock.WithObserver(degraded), redlock.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lock, err := locker.TryAcquire(ctx, "orders:42", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release(ctx)
	fmt.Println(lock.Confirmed(), "of", len(nodes))
	// Output:
	// held without node 2
	// 2 of 3
}

func ExampleElection_Run() {
	nodes, _, stop := embeddedNodes(3)
	defer stop()
	locker, _ := redlock.New(nodes)
	store, _, stopStore := embeddedNodes(1)
	defer stopStore()
	e, _ := locker.Election("scheduler", 10*time.Second)

	// A service passes a ctx that ends on SIGTERM (signal.NotifyContext)
	// and no RunOnce: Run then campaigns again after each leadership, and
	// resigns and returns when ctx ends. RunOnce keeps this example short.
	err := e.Run(context.Background(), "host-a", func(ctx context.Context, lead *redlock.Leadership) error {
		for _, job := range []string{"job:1", "job:2"} {
			// Right before each side effect: is this still the leader?
			// ctx.Err() reads the clock, so it is right even just after a
			// pause; the term, as a fencing token, also makes the store
			// refuse a deposed leader's late write.
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := redlock.FencedSet(ctx, store[0], job, "scheduled", lead.Term()); err != nil {
				return err
			}
			fmt.Println("scheduled", job)
		}
		return nil // done while leading: resign (and, without RunOnce, campaign again)
	},
		redlock.RunOnce(),
		redlock.OnStartedLeading(func(lead *redlock.Leadership) { fmt.Println("leading:", lead.Term() > 0) }),
		redlock.OnStoppedLeading(func(_ *redlock.Leadership, err error) { fmt.Println("stopped leading:", err) }),
	)
	fmt.Println("Run:", err)
	// Output:
	// leading: true
	// scheduled job:1
	// scheduled job:2
	// stopped leading: <nil>
	// Run: <nil>
}
