package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/quorumlock/redlock"
)

// redlock status and redlock unlock: a lock seen and released from another
// host than the one that holds it.

const statusHelp = `Usage: redlock status [flags] KEY

Shows who holds the lock KEY on each node: its token, the metadata stored
with it ('redlock exec' stores host, pid and command), and the time to live
left, and whether a quorum of the nodes agrees on one holder.

Exit status: 0 when the nodes answered (held or free); 69 when too few
nodes answered to tell; 78 for a configuration error; 2 for bad usage.

Flags:
`

const unlockHelp = `Usage: redlock unlock --token TOKEN [flags] KEY

Releases the lock KEY held under TOKEN ('redlock status KEY' shows the
token), for a holder that cannot release it itself. Without the token it
refuses: a lock is released only by whoever knows its token.

Exit status: 0 when released; 1 when KEY does not hold TOKEN (already
released, expired, or another holder's); 69 when too few nodes answered;
78 for a configuration error; 2 for bad usage.

Flags:
`

// handleCommand parses the flags of status or unlock, and connects.
func handleCommand(name, help string, args []string, stdout, stderr io.Writer, token *string) (*redlock.Client, string, func(), int) {
	fs := newFlags(name, help, stdout, stderr)
	nodes := registerNodeFlags(fs.FlagSet, "required")
	timeout := fs.Duration("timeout", 2*time.Second, "how long each node is waited for")
	if token != nil {
		fs.StringVar(token, "token", "", "the token of the lock to release (required)")
	}
	if exit, ok := fs.parse(args, interspersed); !ok {
		return nil, "", nil, exit
	}
	switch {
	case fs.NArg() != 1:
		fmt.Fprintf(stderr, "redlock %s: give one KEY\n", name)
		return nil, "", nil, 2
	case len(nodes.addrList()) == 0:
		fmt.Fprintf(stderr, "redlock %s: no nodes: give --addrs or set REDLOCK_ADDRS\n", name)
		return nil, "", nil, 2
	case *timeout <= 0:
		fmt.Fprintf(stderr, "redlock %s: --timeout must be positive\n", name)
		return nil, "", nil, 2
	case token != nil && *token == "":
		fmt.Fprintf(stderr, "redlock %s: --token is required: a lock is released only with its token (redlock status %s shows it)\n", name, fs.Arg(0))
		return nil, "", nil, 2
	}
	clients, err := nodes.clients(*timeout)
	if err != nil {
		fmt.Fprintf(stderr, "redlock %s: %s\n", name, explain(err))
		return nil, "", nil, exitConfig
	}
	locker, err := redlock.New(clients, redlock.WithNodeTimeout(*timeout))
	if err != nil {
		closeAll(clients)
		fmt.Fprintf(stderr, "redlock %s: %s\n", name, explain(err))
		return nil, "", nil, exitConfig
	}
	return locker, fs.Arg(0), func() { closeAll(clients) }, 0
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	locker, key, done, exit := handleCommand("status", statusHelp, args, stdout, stderr, nil)
	if locker == nil {
		return exit
	}
	defer done()
	in, err := locker.Inspect(ctx, key)
	if err != nil {
		fmt.Fprintf(stderr, "redlock status: %s\n", explain(err))
		return 2
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDR\tHELD\tKIND\tTOKEN\tTTL\tMETADATA")
	answered, misconfigured := 0, 0
	for _, nd := range in.Nodes {
		if nd.Err != nil {
			fmt.Fprintf(tw, "%d\t%s\t?\t\t\t\t%v\n", nd.Node, nd.Addr, nd.Err)
			if configError(nd.Err) {
				misconfigured++
			}
			continue
		}
		answered++
		held := "no"
		if nd.Held {
			held = "yes"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%v\t%s\n", nd.Node, nd.Addr, held, nd.Kind, nd.Token, nd.TTL.Round(time.Millisecond), nd.Metadata)
	}
	_ = tw.Flush()
	switch {
	case in.Held():
		for _, h := range in.Holders {
			fmt.Fprintf(stdout, "held by %s on %d of %d nodes (quorum %d) for %v more", h.Token, h.Nodes, len(in.Nodes), in.Quorum, h.TTL.Round(time.Millisecond))
			if h.Metadata != "" {
				fmt.Fprintf(stdout, ": %s", h.Metadata)
			}
			fmt.Fprintln(stdout)
		}
	case answered < in.Quorum:
		fmt.Fprintf(stdout, "unknown: %d of %d nodes answered, quorum %d\n", answered, len(in.Nodes), in.Quorum)
		if misconfigured > 0 {
			return exitConfig
		}
		return exitUnavailable
	default:
		fmt.Fprintf(stdout, "not held by a quorum (%d of %d nodes answered, quorum %d)\n", answered, len(in.Nodes), in.Quorum)
	}
	return 0
}

func runUnlock(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var token string
	locker, key, done, exit := handleCommand("unlock", unlockHelp, args, stdout, stderr, &token)
	if locker == nil {
		return exit
	}
	defer done()
	lock, err := locker.Resume(ctx, key, token, 10*time.Second)
	if err == nil {
		err = lock.Release(ctx)
	}
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "released %q (token %s)\n", key, token)
		return 0
	case configError(err):
		fmt.Fprintf(stderr, "redlock unlock: %s\n", explain(err))
		return exitConfig
	case errors.Is(err, redlock.ErrInvalidArgument):
		fmt.Fprintf(stderr, "redlock unlock: %s\n", explain(err))
		return 2
	case errors.Is(err, redlock.ErrLockLost):
		fmt.Fprintf(stderr, "redlock unlock: %q is not held by token %s: %v\n", key, token, err)
		return 1
	default:
		fmt.Fprintf(stderr, "redlock unlock: %s\n", explain(err))
		return exitUnavailable
	}
}
