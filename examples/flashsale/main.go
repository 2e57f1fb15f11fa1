// Command flashsale is a flash sale served over HTTP: many buyers at once,
// a stock of items in Redis, and a quorum lock around each sale, so that
// no item is sold twice even when two of the five lock nodes die mid-sale.
//
//	go run ./examples/flashsale                  # one stock key, one lock
//	go run ./examples/flashsale -fenced          # the stock refuses stale writes
//	go run ./examples/flashsale -segments 8      # stock split over 8 keys, a lock each
//
// Everything runs in this process on embedded Redis nodes: five lock nodes,
// one store for the stock, an HTTP server, and a load generator of buyers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
	"github.com/quorumlock/redlock/redistest"
)

type config struct {
	stock     int
	buyers    int
	segments  int
	fenced    bool
	killAfter int      // orders after which 2 lock nodes die; 0: never
	addrs     []string // real lock nodes; empty: 5 embedded ones
}

// report is what a sale did.
type report struct {
	Orders    int
	Stock     int
	Left      int
	Oversold  int // orders beyond the stock, or items sold twice
	Elapsed   time.Duration
	Refused   int // fenced: stale writes the store refused
	NodesDied bool
}

func main() {
	redis.SetLogger(quiet{}) // the dead nodes' failed dials are expected
	var cfg config
	flag.IntVar(&cfg.stock, "stock", 500, "items for sale")
	flag.IntVar(&cfg.buyers, "buyers", 32, "concurrent buyers")
	flag.IntVar(&cfg.segments, "segments", 1, "split the stock over this many keys, each with its own lock")
	flag.BoolVar(&cfg.fenced, "fenced", false, "take fenced locks; the stock refuses writes with an older token")
	flag.IntVar(&cfg.killAfter, "kill-after", 100, "orders after which 2 of the 5 lock nodes die (0: never); real nodes are frozen with CLIENT PAUSE for 10s")
	addrs := flag.String("addrs", os.Getenv("REDLOCK_ADDRS"), "comma-separated host:port of 5 Redis masters for the locks (default $REDLOCK_ADDRS; empty: embedded)")
	flag.Parse()
	for _, a := range strings.Split(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.addrs = append(cfg.addrs, a)
		}
	}
	if len(cfg.addrs) != 0 && len(cfg.addrs) != 5 {
		fmt.Fprintln(os.Stderr, "flashsale: -addrs needs 5 nodes")
		os.Exit(2)
	}
	if cfg.stock < 1 || cfg.buyers < 1 || cfg.segments < 1 || cfg.segments > cfg.stock || cfg.killAfter < 0 {
		fmt.Fprintln(os.Stderr, "flashsale: -stock, -buyers and -segments must be at least 1, -segments at most -stock, -kill-after not negative")
		os.Exit(2)
	}
	r, err := run(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("sold %d of %d in %v (%.0f orders/s), %d left, oversold %d, stale writes refused %d, 2 lock nodes died: %v\n",
		r.Orders, r.Stock, r.Elapsed.Round(time.Millisecond), float64(r.Orders)/r.Elapsed.Seconds(), r.Left, r.Oversold, r.Refused, r.NodesDied)
	if r.Oversold > 0 || r.Orders+r.Left != r.Stock {
		fmt.Println("FAIL: items were sold twice")
		os.Exit(1)
	}
	fmt.Println("OK: every item sold exactly once")
}

// shop is the HTTP service: it sells from the stock in store under locks.
type shop struct {
	locker   *redlock.Client
	store    *redis.Client
	segments int
	fenced   bool
	orders   atomic.Int64
	refused  atomic.Int64
	onOrder  func(n int64)
}

func segmentKey(i int) string { return "stock:" + strconv.Itoa(i) }

// buy sells one item: it tries the segments in turn from a random one, each
// under its own lock, and reports whether it sold.
func (s *shop) buy(ctx context.Context, user string) (bool, error) {
	first := rand.IntN(s.segments)
	for i := range s.segments {
		seg := (first + i) % s.segments
		sold, err := s.sellFrom(ctx, seg, user)
		if err != nil || sold {
			return sold, err
		}
	}
	return false, nil
}

func (s *shop) sellFrom(ctx context.Context, seg int, user string) (bool, error) {
	var opts []redlock.AcquireOption
	if s.fenced {
		opts = append(opts, redlock.WithFencing())
	}
	key := segmentKey(seg)
	lock, err := s.locker.Acquire(ctx, "lock:"+key, 2*time.Second, opts...)
	if err != nil {
		return false, err
	}
	defer lock.Release(context.WithoutCancel(ctx))

	// Fenced, the read records this holder's token on the store: from then
	// on the store refuses the write of any older holder, which may have
	// read the same stock before it paused (FencedSet alone would take
	// that write, and the item would be sold twice).
	var stock string
	if s.fenced {
		stock, err = redlock.FencedGet(ctx, s.store, key, lock.FencingToken())
		if errors.Is(err, redlock.ErrStaleToken) {
			s.refused.Add(1)
			return false, nil
		}
	} else {
		stock, err = s.store.Get(ctx, key).Result()
	}
	if err != nil {
		return false, err
	}
	left, err := strconv.Atoi(stock)
	if err != nil || left == 0 {
		return false, err
	}
	if lock.Validity() == 0 {
		return false, redlock.ErrLockLost // too slow: the lock may be someone else's now
	}
	if s.fenced {
		// The store itself refuses a write whose token is older than the
		// last one it saw (read or written): a holder that paused past its
		// validity cannot sell an item again.
		err := redlock.FencedSet(ctx, s.store, key, strconv.Itoa(left-1), lock.FencingToken())
		if errors.Is(err, redlock.ErrStaleToken) {
			s.refused.Add(1)
			return false, nil
		}
		if err != nil {
			return false, err
		}
	} else if err := s.store.Set(ctx, key, left-1, 0).Err(); err != nil {
		return false, err
	}
	// An item is its segment and its place there: selling it twice records
	// it twice.
	if err := s.store.SAdd(ctx, "sold", fmt.Sprintf("%d/%d", seg, left)).Err(); err != nil {
		return false, err
	}
	if s.onOrder != nil {
		s.onOrder(s.orders.Add(1))
	}
	_ = user
	return true, nil
}

func (s *shop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST /buy?user=NAME", http.StatusMethodNotAllowed)
		return
	}
	sold, err := s.buy(r.Context(), r.URL.Query().Get("user"))
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case sold:
		fmt.Fprintln(w, "bought")
	default:
		http.Error(w, "sold out", http.StatusGone)
	}
}

// run holds one sale and checks it; a sale that has not sold out after two
// minutes is stopped.
func run(ctx context.Context, cfg config) (report, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var clients []redis.UniversalClient
	var die []func() // make lock node i stop answering
	for i := range 5 {
		addr := ""
		if len(cfg.addrs) > 0 {
			addr = cfg.addrs[i]
			die = append(die, func() {
				admin := redis.NewClient(&redis.Options{Addr: addr})
				defer admin.Close()
				_ = admin.Do(ctx, "CLIENT", "PAUSE", 10000, "ALL").Err()
			})
		} else {
			s, err := redistest.Start()
			if err != nil {
				return report{}, err
			}
			defer s.Close()
			addr = s.Addr()
			die = append(die, s.Close)
		}
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, ReadTimeout: 2 * time.Second})
		defer c.Close()
		clients = append(clients, c)
	}
	storeSrv, err := miniredis.Run()
	if err != nil {
		return report{}, err
	}
	defer storeSrv.Close()
	store := redis.NewClient(&redis.Options{Addr: storeSrv.Addr()})
	defer store.Close()
	for i := range cfg.segments { // split the stock as evenly as it goes
		n := cfg.stock / cfg.segments
		if i < cfg.stock%cfg.segments {
			n++
		}
		if err := store.Set(ctx, segmentKey(i), n, 0).Err(); err != nil {
			return report{}, err
		}
	}

	locker, err := redlock.New(clients, redlock.WithRetry(redlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)))
	if err != nil {
		return report{}, err
	}
	var kill sync.Once
	r := report{Stock: cfg.stock}
	sh := &shop{locker: locker, store: store, segments: cfg.segments, fenced: cfg.fenced,
		onOrder: func(n int64) {
			if cfg.killAfter > 0 && n == int64(cfg.killAfter) {
				kill.Do(func() { die[3](); die[4](); r.NodesDied = true })
			}
		}}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return report{}, err
	}
	srv := &http.Server{Handler: http.NewServeMux(), ReadHeaderTimeout: 5 * time.Second}
	srv.Handler.(*http.ServeMux).Handle("/buy", sh)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	start := time.Now()
	if err := buyers(ctx, "http://"+ln.Addr().String()+"/buy", cfg.buyers); err != nil {
		return report{}, err
	}
	r.Elapsed = time.Since(start)
	r.Orders = int(sh.orders.Load())
	r.Refused = int(sh.refused.Load())
	for i := range cfg.segments {
		n, err := store.Get(ctx, segmentKey(i)).Int()
		if err != nil {
			return report{}, err
		}
		r.Left += n
	}
	distinct, err := store.SCard(ctx, "sold").Result()
	if err != nil {
		return report{}, err
	}
	r.Oversold = max(r.Orders-cfg.stock, 0) + r.Orders - int(distinct)
	return r, nil
}

// buyers sends purchases from n concurrent buyers until the shop answers
// sold out to every one of them.
func buyers(ctx context.Context, url string, n int) error {
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for b := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s?user=buyer-%d", url, b), nil)
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK, http.StatusServiceUnavailable: // bought, or try again
				case http.StatusGone:
					return
				default:
					errs <- fmt.Errorf("buyer %d: %s", b, resp.Status)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
