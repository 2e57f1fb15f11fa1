// Command redlock runs the library's demonstrations against embedded or real
// Redis nodes.
//
// Usage:
//
//	redlock demo [flags]    flash sale over a quorum of nodes, a minority of which fail
//	redlock exec [flags] -- COMMAND [ARGS...]
//	                        run a command while holding a lock, like flock(1) across hosts
//	redlock elect NAME -- COMMAND
//	                        run a command while this host leads an election
//	redlock elect --observe NAME
//	                        print each change of leader
//	redlock status KEY      who holds a lock on each node
//	redlock unlock --token T KEY
//	                        release a lock taken elsewhere
//	redlock chaos [flags]   fault-injection scenarios, with every violation counted
//	redlock lab [flags]     violation rates with confidence intervals against each fault's size
//	redlock bench [-- ...]  the comparison benchmarks of the bench/ module
//
// Run `redlock <command> --help` for a command's flags, `redlock --version`
// for the version. exec, status and unlock take node addresses from --addrs
// or, when it is not given, from REDLOCK_ADDRS: comma-separated host:port or
// redis:// and rediss:// URLs, the password from REDLOCK_PASSWORD or
// REDISCLI_AUTH. The demo uses real servers only when --addrs names them;
// without addresses, demo and chaos start embedded nodes in this process.
// lab starts redis-server processes of its own.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/chaos"
)

const usage = `redlock: distributed locks over a quorum of Redis masters

Usage:
  redlock demo [flags]   flash sale: many buyers, one stock, nodes failing mid-sale
  redlock exec --key K --ttl D [flags] -- COMMAND [ARGS...]
                         run COMMAND while holding lock K (cron jobs on one host only)
  redlock elect NAME --ttl D -- COMMAND [ARGS...]
                         run COMMAND while this host leads election NAME (one of many)
  redlock elect --observe NAME
                         print each change of leader of election NAME
  redlock status KEY     who holds lock KEY on each node, and whether a quorum agrees
  redlock unlock --token T KEY
                         release lock KEY held under token T, from any host
  redlock chaos [flags]  kill, freeze, restart, partition nodes mid-run; count violations
  redlock lab [flags]    violation rates (95 % intervals) against each fault's size: HTML, CSV, JSON
  redlock bench [-- FLAGS]  this library against redsync, redislock, go-redis (from a checkout)
  redlock version        this command's version (also --version)

Run 'redlock <command> --help' for the flags of a command.
Node addresses: --addrs or REDLOCK_ADDRS, each host:port or a redis:// or
rediss:// URL; a password from REDLOCK_PASSWORD or REDISCLI_AUTH; --tls-ca,
--tls-cert, --tls-key, --tls-server-name for TLS (exec, elect, status, unlock).
The demo runs on real servers only when --addrs names them (it never reads
REDLOCK_ADDRS); without addresses, demo and chaos start embedded nodes in
this process; lab starts redis-server processes of its own.
`

func main() {
	// The chaos suite's embedded nodes are this program, started again, and
	// so are the watchdog of the command of redlock exec and elect, and the
	// command until its lock is taken.
	chaos.ServeEmbeddedFromEnv()
	runWatchdog()
	runHeldCommand()
	// go-redis logs every failed dial; the commands fail nodes on purpose
	// and report what matters themselves.
	redis.SetLogger(quietLogger{})
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command and returns the process exit status: 0 on
// success, 1 when the command ran and found a failure, 2 for bad usage.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signalContext()
	defer stop()

	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "exec":
		return runExec(ctx, args[1:], stdout, stderr)
	case "elect":
		return runElect(ctx, args[1:], stdout, stderr)
	case "status":
		return runStatus(ctx, args[1:], stdout, stderr)
	case "unlock":
		return runUnlock(ctx, args[1:], stdout, stderr)
	case "chaos":
		return runChaos(ctx, args[1:], stdout, stderr)
	case "lab":
		return runLab(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		if len(args) > 1 && args[0] == "help" && args[1] != "help" {
			return run([]string{args[1], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	default:
		fmt.Fprintf(stderr, "redlock: unknown command %q (see 'redlock --help')\n", args[0])
		return 2
	}
}

func splitAddrs(s string) []string {
	var addrs []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// signalContext returns a context canceled by SIGINT, SIGTERM, SIGHUP (a
// closed terminal or SSH session) or SIGQUIT, whose cause tells which (see
// interruptedBy). Until stop is called, further
// signals are absorbed: a second Ctrl-C does not kill redlock before it
// has cleaned up (released its lock, unpaused the demo's nodes).
func signalContext() (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			cancel(interrupted{s.(syscall.Signal)})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

// interrupted is the cause of a context canceled by a signal.
type interrupted struct{ sig syscall.Signal }

func (i interrupted) Error() string { return "interrupted by " + i.sig.String() }

// interruptedBy reports the signal that canceled ctx, if one did.
func interruptedBy(ctx context.Context) (syscall.Signal, bool) {
	var i interrupted
	if errors.As(context.Cause(ctx), &i) {
		return i.sig, true
	}
	return 0, false
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
