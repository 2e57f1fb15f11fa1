// Command redlock runs the library's demonstrations against embedded or real
// Redis nodes.
//
// Usage:
//
//	redlock demo [flags]    flash sale over a quorum of nodes, 2 of which fail
//	redlock exec [flags] -- COMMAND [ARGS...]
//	                        run a command while holding a lock, like flock(1) across hosts
//	redlock status KEY      who holds a lock on each node
//	redlock unlock --token T KEY
//	                        release a lock taken elsewhere
//	redlock chaos [flags]   fault-injection scenarios, with every violation counted
//	redlock lab [flags]     the experiment matrix and measurements, as an HTML report
//	redlock bench [-- ...]  the comparison benchmarks of the bench/ module
//
// Run `redlock <command> --help` for a command's flags. Node addresses come
// from --addrs or, when it is not given, from REDLOCK_ADDRS (comma-separated
// host:port); with neither, embedded nodes are started in this process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock/chaos"
)

const usage = `redlock: distributed locks over a quorum of Redis masters

Usage:
  redlock demo [flags]   flash sale: many buyers, one stock, nodes failing mid-sale
  redlock exec --key K --ttl D [flags] -- COMMAND [ARGS...]
                         run COMMAND while holding lock K (cron jobs on one host only)
  redlock status KEY     who holds lock KEY on each node, and whether a quorum agrees
  redlock unlock --token T KEY
                         release lock KEY held under token T, from any host
  redlock chaos [flags]  kill, freeze, restart, partition nodes mid-run; count violations
  redlock lab [flags]    configurations × faults, latency against N: an HTML report
  redlock bench [-- FLAGS]  this library against redsync, redislock, go-redis (from a checkout)

Run 'redlock <command> --help' for the flags of a command.
Node addresses: --addrs or REDLOCK_ADDRS, each host:port or a redis:// or
rediss:// URL; a password from REDLOCK_PASSWORD or REDISCLI_AUTH; --tls-ca,
--tls-cert, --tls-key, --tls-server-name for TLS (exec, status, unlock).
The demo runs on real servers only when --addrs names them (it never reads
REDLOCK_ADDRS); without addresses, demo, chaos and lab start embedded nodes
in this process.
`

func main() {
	// The chaos suite's embedded nodes are this program, started again.
	chaos.ServeEmbeddedFromEnv()
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "exec":
		return runExec(ctx, args[1:], stdout, stderr)
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
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "redlock: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// newFlags returns the flag set of subcommand name: errors and --help go
// to stderr, the help being usage followed by the flags' defaults.
func newFlags(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs and reports the exit status to return when
// parsing ends the command (help asked for, or bad flags).
func parseFlags(fs *flag.FlagSet, args []string) (exit int, ok bool) {
	if exit, ok := parseArgs(fs, args); !ok {
		return exit, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "redlock %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, false
	}
	return 0, true
}

// parseArgs is parseFlags for a command that takes arguments after its
// flags (after --).
func parseArgs(fs *flag.FlagSet, args []string) (exit int, ok bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0, false
	case err != nil:
		return 2, false
	}
	return 0, true
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

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
