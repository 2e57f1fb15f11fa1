package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// Exit statuses of redlock exec besides the command's own.
const (
	exitNotAcquired = 75 // EX_TEMPFAIL: another host holds the lock; try again later
	exitLockLost    = 76 // the lock was lost while the command ran; it was stopped
)

type execConfig struct {
	addrs string
	key   string
	ttl   time.Duration
	wait  time.Duration
	grace time.Duration
	argv  []string
}

const execHelp = `Usage: redlock exec --key KEY --ttl TTL [flags] -- COMMAND [ARGS...]

Runs COMMAND while holding the lock KEY on a quorum of the Redis masters,
like flock(1) across hosts: for a cron job that must run on one host only,
put the same line on every host. The lock is renewed every third of TTL
while the command runs and released when it exits. If the lock is lost
(a majority of the nodes no longer hold it, or it could not be renewed in
time), the command gets SIGTERM, and SIGKILL after --grace.

Exit status: the command's own (128+n when a signal n ended it);
75 when the lock was not acquired (the command did not run);
76 when the lock was lost and the command was stopped;
2 for bad usage; 1 when the command could not be started.

Flags:
`

func parseExec(args []string, stderr io.Writer) (execConfig, int, bool) {
	var cfg execConfig
	fs := newFlags("exec", execHelp, stderr)
	fs.StringVar(&cfg.addrs, "addrs", os.Getenv("REDLOCK_ADDRS"),
		"comma-separated host:port of independent Redis masters (default $REDLOCK_ADDRS; required)")
	fs.StringVar(&cfg.key, "key", "", "the lock key (required)")
	fs.DurationVar(&cfg.ttl, "ttl", 0, "the lock's time to live, renewed every third of it (required)")
	fs.DurationVar(&cfg.wait, "wait", 0, "how long to wait for the lock when another host holds it (0: do not wait)")
	fs.DurationVar(&cfg.grace, "grace", 10*time.Second, "after SIGTERM, how long the command has before SIGKILL")
	if exit, ok := parseArgs(fs, args); !ok {
		return cfg, exit, false
	}
	cfg.argv = fs.Args()
	switch {
	case cfg.key == "":
		fmt.Fprintln(stderr, "redlock exec: --key is required")
	case cfg.ttl <= 0:
		fmt.Fprintln(stderr, "redlock exec: --ttl is required and must be positive, e.g. --ttl 30s")
	case cfg.wait < 0 || cfg.grace < 0:
		fmt.Fprintln(stderr, "redlock exec: --wait and --grace cannot be negative")
	case len(splitAddrs(cfg.addrs)) == 0:
		fmt.Fprintln(stderr, "redlock exec: no nodes: give --addrs or set REDLOCK_ADDRS (a lock shared across hosts needs shared nodes)")
	case len(cfg.argv) == 0:
		fmt.Fprintln(stderr, "redlock exec: no command: put it after --, e.g. redlock exec --key nightly --ttl 1m -- ./report.sh")
	default:
		return cfg, 0, true
	}
	return cfg, 2, false
}

func runExec(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// The command writes straight to our stdout and stderr when they are
	// files (a terminal stays a terminal); otherwise exec's goroutines copy
	// its output, and our messages go to the same writer.
	stdout, stderr = lockedUnlessFile(stdout), lockedUnlessFile(stderr)
	cfg, exit, ok := parseExec(args, stderr)
	if !ok {
		return exit
	}
	addrs := splitAddrs(cfg.addrs)
	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DialerRetries: 1,
			ReadTimeout: cfg.ttl, WriteTimeout: cfg.ttl})
	}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	locker, err := redlock.New(clients)
	if err != nil {
		fmt.Fprintf(stderr, "redlock exec: %v\n", err)
		return 2
	}

	lock, err := acquireForExec(ctx, locker, cfg)
	if err != nil {
		if errors.Is(err, redlock.ErrInvalidArgument) {
			fmt.Fprintf(stderr, "redlock exec: %v\n", err)
			return 2
		}
		fmt.Fprintf(stderr, "redlock exec: lock %q not acquired, %s not run: %v\n", cfg.key, cfg.argv[0], err)
		return exitNotAcquired
	}
	defer func() {
		if err := lock.Release(context.Background()); err != nil && !errors.Is(err, redlock.ErrLockLost) {
			fmt.Fprintf(stderr, "redlock exec: releasing %q: %v\n", cfg.key, err)
		}
	}()

	cmd := exec.Command(cfg.argv[0], cfg.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "redlock exec: %v\n", err)
		return 1
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// Signals to redlock go to the command, which decides what they mean.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	for {
		select {
		case err := <-exited:
			return exitStatus(err)
		case s := <-sigs:
			_ = cmd.Process.Signal(s)
		case <-lock.Done():
			if lock.Validity() > 0 {
				continue // released: cannot happen before the command exits
			}
			fmt.Fprintf(stderr, "redlock exec: lock %q lost; stopping %s\n", cfg.key, cfg.argv[0])
			stopCommand(cmd, exited, cfg.grace)
			return exitLockLost
		}
	}
}

func acquireForExec(ctx context.Context, locker *redlock.Client, cfg execConfig) (*redlock.Lock, error) {
	if cfg.wait == 0 {
		return locker.TryAcquire(ctx, cfg.key, cfg.ttl, redlock.WithAutoRenew())
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.wait)
	defer cancel()
	return locker.Acquire(ctx, cfg.key, cfg.ttl, redlock.WithAutoRenew())
}

// stopCommand sends SIGTERM, and SIGKILL if the command has not exited
// after grace; it returns once the command has exited.
func stopCommand(cmd *exec.Cmd, exited <-chan error, grace time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		_ = cmd.Process.Kill()
		<-exited
	}
}

// exitStatus is the command's exit status as a shell reports it.
func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}

func lockedUnlessFile(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
