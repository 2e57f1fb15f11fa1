package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/quorumlock/redlock"
)

const electHelp = `Usage: redlock elect NAME --ttl TTL [flags] -- COMMAND [ARGS...]
       redlock elect --observe NAME [flags]

Runs COMMAND while this process leads the election NAME over a quorum of
the Redis masters: start the same line on several hosts, and one of them
runs the command at a time (a scheduler, a consumer, a singleton worker).
The leadership is renewed every third of TTL; when the leader's host dies,
another takes over within TTL and a second or so. When the command exits,
this process resigns (the next candidate takes over at once) and
campaigns again, unless --once. The command's tree is run and stopped as
redlock exec's (see 'redlock exec --help'): in a process group of its
own under a watchdog; SIGTERM, then SIGKILL after --grace and never later
than the end of the leadership's validity, when the leadership is lost
(before redlock writes a word), after a signal passed on, and for what
the command left running when it exits (the resignation waits for it);
SIGKILL at once if redlock dies, and at the end of the validity if
redlock is frozen (the watchdog is in a process group of its own: a
Ctrl-Z or a kill -9 of redlock's job does not reach it), so that the tree
never runs beside the next leader's; see exec's help for what is not
caught.

The command finds its leadership in its environment: REDLOCK_ELECTION
(NAME), REDLOCK_TERM, a number larger than every earlier leader's, to give
the resources it writes to as a fencing token (REDLOCK_FENCING_TOKEN holds
the same), and REDLOCK_VALUE. It does not inherit the nodes' password.

With --observe, it prints the leader each time it changes, one line each
(term, since, value), until interrupted; a time without a leader is not
printed.

Signals: as redlock exec, SIGTERM, SIGINT, SIGHUP and SIGQUIT are passed
to the command's tree while it runs; its end after one ends redlock. The
command does not get the terminal: a Ctrl-C is redlock's, passed on, and
a command that reads the terminal is stopped by it (SIGTTIN).
While campaigning, SIGINT or SIGTERM ends the campaign.

Exit status:
  the command's own with --once (128+n when a signal n ended it), or when
       a signal passed to it ended it
  76   the leadership was lost (--once) and the command was stopped
  69   nodes unreachable at the start (later campaigns wait for them)
  78   a configuration error: a bad address, a wrong or missing password
  126  the command cannot be run; 127 the command was not found
  0    --observe interrupted; 130, 143 a campaign interrupted (SIGINT, SIGTERM)
  2    bad usage

Flags:
`

type electConfig struct {
	nodes   *nodeFlags
	name    string
	ttl     time.Duration
	value   string
	grace   time.Duration
	once    bool
	observe bool
	argv    []string
	renewed renewals // told of each renewal of the leadership
}

func parseElect(args []string, stdout, stderr io.Writer) (electConfig, int, bool) {
	var cfg electConfig
	fs := newFlags("elect", electHelp, stdout, stderr)
	cfg.nodes = registerNodeFlags(fs.FlagSet, "required")
	fs.DurationVar(&cfg.ttl, "ttl", 10*time.Second, "the leadership's time to live, renewed every third of it")
	fs.StringVar(&cfg.value, "value", "", "what this candidate proclaims as leader (default: host=HOST pid=PID)")
	fs.DurationVar(&cfg.grace, "grace", 10*time.Second, graceHelp)
	fs.BoolVar(&cfg.once, "once", false, "run the command once as leader, then exit with its status")
	fs.BoolVar(&cfg.observe, "observe", false, "print each change of leader instead of campaigning")
	// The name and the flags in any order, the command after "--".
	before, after := args, []string(nil)
	if i := slices.Index(args, "--"); i >= 0 {
		before, after = args[:i], args[i+1:]
	}
	if exit, ok := fs.parse(before, interspersed); !ok {
		return cfg, exit, false
	}
	names := fs.Args()
	if len(names) > 1 {
		fmt.Fprintf(stderr, "redlock elect: unexpected argument %q: put the command after --\n", names[1])
		return cfg, 2, false
	}
	if len(names) == 1 {
		cfg.name = names[0]
	}
	cfg.argv = after
	if cfg.value == "" {
		host, _ := os.Hostname()
		cfg.value = fmt.Sprintf("host=%s pid=%d", host, os.Getpid())
	}
	switch {
	case cfg.name == "":
		fmt.Fprintln(stderr, "redlock elect: no election name, e.g. redlock elect scheduler --ttl 10s -- ./scheduler")
	case cfg.ttl <= 0:
		fmt.Fprintf(stderr, "redlock elect: --ttl %v: must be positive\n", cfg.ttl)
	case cfg.grace < 0:
		fmt.Fprintf(stderr, "redlock elect: --grace %v: cannot be negative (0: SIGKILL at once)\n", cfg.grace)
	case len(cfg.nodes.addrList()) == 0:
		fmt.Fprintln(stderr, "redlock elect: no nodes: give --addrs or set REDLOCK_ADDRS")
	case !cfg.observe && len(cfg.argv) == 0:
		fmt.Fprintln(stderr, "redlock elect: no command: put it after --, or give --observe")
	case cfg.observe && len(cfg.argv) > 0:
		fmt.Fprintln(stderr, "redlock elect: --observe runs no command")
	default:
		return cfg, 0, true
	}
	return cfg, 2, false
}

func runElect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	stdout, stderr = lockedUnlessFile(stdout), lockedUnlessFile(stderr)
	cfg, exit, ok := parseElect(args, stdout, stderr)
	if !ok {
		return exit
	}
	cfg.renewed = make(renewals, 1)
	locker, _, closeNodes, ok := newLocker("elect", cfg.nodes, cfg.ttl, stderr, redlock.WithObserver(cfg.renewed))
	if !ok {
		return exitConfig
	}
	defer closeNodes()
	defer drain(locker, cfg.ttl)
	e, err := locker.Election(cfg.name, cfg.ttl)
	if err != nil {
		fmt.Fprintf(stderr, "redlock elect: %s\n", explain(err))
		return 2
	}
	if cfg.observe {
		for l := range e.Observe(ctx) {
			fmt.Fprintf(stdout, "term=%d since=%s value=%s\n", l.Term, l.Since.UTC().Format(time.RFC3339Nano), l.Value)
		}
		return 0
	}
	path, status := lookCommand("elect", cfg.argv[0], stderr)
	if status != 0 {
		return status
	}
	return campaignLoop(ctx, e, path, cfg, stdout, stderr)
}

// campaignLoop runs the command on Election.Run each time this process
// leads (once, with --once) and returns elect's exit status.
func campaignLoop(ctx context.Context, e *redlock.Election, path string, cfg electConfig, stdout, stderr io.Writer) int {
	if status, ok := reachable(ctx, e, cfg, stderr); !ok {
		return status
	}
	var opts []redlock.RunOption
	if cfg.once {
		opts = append(opts, redlock.RunOnce())
	}
	// The function's context is not watched: supervise stops the tree on
	// the loss (and the watchdog at the validity's end), while a signal,
	// which ends ctx, is passed on to the tree rather than stopping it.
	exit := -1 // elect's status, set by the term after which Run returns
	err := e.Run(ctx, cfg.value, func(_ context.Context, l *redlock.Leadership) error {
		status, err := leadCommand(path, cfg, l, stdout, stderr)
		if _, signalled := interruptedBy(ctx); cfg.once || signalled || err != nil {
			exit = status // a signal ended ctx: Run returns; err: Run returns it
		}
		return err
	}, opts...)
	switch s, ok := interruptedBy(ctx); {
	case exit >= 0:
		return exit
	case ok:
		return 128 + int(s)
	}
	fmt.Fprintf(stderr, "redlock elect: campaign for %q: %s\n", cfg.name, explain(err))
	if errors.Is(err, redlock.ErrMisconfigured) {
		return exitConfig
	}
	return exitUnavailable
}

// reachable reads the election's leader before the first campaign, so
// that nodes out of reach at the start end elect (69, or 78 for a
// configuration error) rather than a campaign that waits for them without
// a word. Later campaigns (after a resignation or a loss) wait for the
// nodes as long as it takes: a leader cut off from them campaigns again
// once they answer.
func reachable(ctx context.Context, e *redlock.Election, cfg electConfig, stderr io.Writer) (status int, ok bool) {
	rctx, cancel := context.WithTimeout(ctx, cfg.ttl)
	defer cancel()
	_, err := e.Leader(rctx)
	switch {
	case err == nil, errors.Is(err, redlock.ErrNoLeader):
		return 0, true
	case ctx.Err() != nil:
		if s, ok := interruptedBy(ctx); ok {
			return 128 + int(s), false
		}
		return 0, true // the campaign says what ended it
	}
	fmt.Fprintf(stderr, "redlock elect: %q: %s\n", cfg.name, explain(err))
	if errors.Is(err, redlock.ErrMisconfigured) {
		return exitConfig, false
	}
	return exitUnavailable, false
}

// leadCommand runs the command while l leads and returns its exit status:
// the command's own, 76 when the leadership was lost and the command was
// stopped, 126 with why when the command could not start (said on stderr).
func leadCommand(path string, cfg electConfig, l *redlock.Leadership, stdout, stderr io.Writer) (int, error) {
	fmt.Fprintf(stderr, "redlock elect: leading %q, term %d\n", cfg.name, l.Term())
	term := fmt.Sprint(l.Term())
	held, err := holdCommand(holdSpec{path: path, argv: cfg.argv, env: commandEnv(os.Environ()), grace: cfg.grace}, stdout, stderr)
	if err == nil {
		if err = held.run([]string{"REDLOCK_ELECTION=" + cfg.name, "REDLOCK_TERM=" + term,
			"REDLOCK_FENCING_TOKEN=" + term, "REDLOCK_VALUE=" + cfg.value}, l.Lock().Until()); err != nil {
			held.drop()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock elect: %s\n", explain(err))
		return exitNotExecutable, err
	}
	return supervise(held, l.Lock(), cfg.renewed, func() {
		fmt.Fprintf(stderr, "redlock elect: leadership of %q lost; stopping %s\n", cfg.name, cfg.argv[0])
	}), nil
}
