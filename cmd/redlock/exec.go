package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/quorumlock/redlock"
)

// Exit statuses of redlock exec besides the command's own (sysexits.h
// where one fits).
const (
	exitNotAcquired   = 75  // EX_TEMPFAIL: another holder has the lock; try again later
	exitLockLost      = 76  // the lock was lost while the command ran; it was stopped
	exitUnavailable   = 69  // EX_UNAVAILABLE: nodes unreachable, the quorum out of reach
	exitConfig        = 78  // EX_CONFIG: a bad address, a wrong password, a replica, MOVED...
	exitNotExecutable = 126 // the command was found but cannot be run
	exitNotFound      = 127 // the command was not found
)

// graceHelp is --grace's help, exec's and elect's.
const graceHelp = "how long the command's tree has to end, once the lock is lost, a signal was passed to it or the command exited, before SIGKILL; never past the end of the lock's validity (0: SIGKILL at once)"

type execConfig struct {
	nodes   *nodeFlags
	key     string
	ttl     time.Duration
	wait    time.Duration
	grace   time.Duration
	fencing bool
	permits int
	argv    []string
}

const execHelp = `Usage: redlock exec --key KEY --ttl TTL [flags] -- COMMAND [ARGS...]

Runs COMMAND while holding the lock KEY on a quorum of the Redis masters,
like flock(1) across hosts: for a cron job that must run on one host only,
put the same line on every host. The lock is renewed every third of TTL
while the command runs and released once the command and everything it
started have ended. The lock carries this host, the command's pid and its
command line as its metadata: 'redlock status KEY' shows who holds it,
and so does exit 75's message.

The command's tree: the command runs in a process group of its own under
a watchdog, a second redlock process that is the command's parent and, on
Linux, the subreaper of everything the command starts (an orphan becomes
its child, whatever its session or group). The tree is that process group
and, on Linux, every descendant of the watchdog. It is stopped (SIGTERM,
then SIGKILL after --grace, never later than the end of the lock's
validity):
  - when the lock is lost (a majority of the nodes no longer hold it, or
    it could not be renewed in time), before redlock writes a word;
  - after a signal passed on to it (see Signals);
  - when the command exits: what it left running is stopped before the
    lock is released.
The watchdog runs in a process group of its own, so that what is sent
to redlock's group (kill -9 or SIGSTOP of a shell's job, timeout -s KILL)
reaches neither it nor the command (a Ctrl-Z: see Signals). The tree is
killed (SIGKILL) at once when redlock dies (kill -9, a crash), and at
the end of the lock's validity if redlock is frozen (SIGSTOP, a pause):
the watchdog is told the validity's end after every renewal and keeps
its own timer. If the
watchdog is frozen when the lock is lost, redlock kills the command's
group itself at the end of --grace (never past the validity), then the
watchdog if it finds it stopped (Linux). The group is never signalled
once the command is reaped (its pid may be another's by then): on Linux
the watchdog leaves the exited command unreaped until the rest of its
tree has ended. Not caught: processes started outside the tree (through
a service manager or another daemon); outside Linux, a descendant that
leaves the process group (setsid, setpgid), and what the command left
in its group once it exited; if the watchdog itself is killed, all but
the command (which dies with the watchdog on Linux): redlock then
signals nothing and leaves the key to expire rather than release it,
and exits 128+the signal; redlock and the watchdog both frozen; with the
watchdog frozen, a descendant outside the group, and what the command
left running once it exited.

The command finds its lock in its environment: REDLOCK_KEY, REDLOCK_TOKEN
(what 'redlock unlock --token' takes), and with --fencing
REDLOCK_FENCING_TOKEN, a number larger than every earlier holder's, for
the resources it writes to. It does not inherit the nodes' password:
REDLOCK_PASSWORD and REDISCLI_AUTH are removed from its environment, and
REDLOCK_ADDRS too when it holds a URL with a password. With --permits N
it runs while holding one of N permits of a semaphore named KEY (as
many as N commands run at once).

Signals: SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to redlock are passed
to the command's tree, which then has --grace to end; the lock is
renewed until it has ended. The command has the terminal's foreground
when redlock had it: it can read the terminal, and a Ctrl-C typed there
reaches its tree once, directly. A Ctrl-Z typed there stops the
command's group only: redlock and the watchdog run on and renew the
lock, and the shell does not get its prompt back; resume the command
with kill -CONT (from another terminal: 'redlock status KEY' shows its
pid), then Ctrl-C if it is to end. While waiting with --wait, SIGINT or
SIGTERM ends the wait without running the command. The lock's metadata
shows the command line to 'redlock status': keep secrets out of the
arguments.

Exit status:
  the command's own (128+n when a signal n ended it; 128+n too when the
       watchdog was killed by signal n, the key then left to expire)
  75   another holder has the lock (the command did not run)
  76   the lock was lost and the command was stopped
  69   nodes unreachable: no quorum could answer, or none answered in time
       while no one held the lock (the command did not run)
  78   a configuration error: a bad address, a wrong or missing password,
       a replica or a Cluster node given as a node (the command did not run)
  126  the command cannot be run; 127 the command was not found
  130, 143  interrupted (SIGINT, SIGTERM; 129, 131 for SIGHUP, SIGQUIT)
       while waiting with --wait or taking the lock (the command did not run)
  2    bad usage

Flags:
`

func parseExec(args []string, stdout, stderr io.Writer) (execConfig, int, bool) {
	var cfg execConfig
	fs := newFlags("exec", execHelp, stdout, stderr)
	cfg.nodes = registerNodeFlags(fs.FlagSet, "required")
	fs.StringVar(&cfg.key, "key", "", "the lock key (required)")
	fs.DurationVar(&cfg.ttl, "ttl", 0, "the lock's time to live, renewed every third of it (required)")
	fs.DurationVar(&cfg.wait, "wait", 0, "how long to wait for the lock when another host holds it (0: do not wait)")
	fs.DurationVar(&cfg.grace, "grace", 10*time.Second, graceHelp)
	fs.BoolVar(&cfg.fencing, "fencing", false, "also take a fencing token, passed as REDLOCK_FENCING_TOKEN")
	fs.IntVar(&cfg.permits, "permits", 0, "hold one of N permits of a semaphore rather than the lock (0: the lock)")
	if exit, ok := fs.parse(args, argsAfter); !ok {
		return cfg, exit, false
	}
	cfg.argv = fs.Args()
	switch {
	case cfg.key == "":
		fmt.Fprintln(stderr, "redlock exec: --key is required")
	case cfg.ttl <= 0:
		fmt.Fprintln(stderr, "redlock exec: --ttl is required and must be positive, e.g. --ttl 30s")
	case cfg.wait < 0:
		fmt.Fprintf(stderr, "redlock exec: --wait %v: cannot be negative (0: do not wait)\n", cfg.wait)
	case cfg.grace < 0:
		fmt.Fprintf(stderr, "redlock exec: --grace %v: cannot be negative (0: SIGKILL at once)\n", cfg.grace)
	case cfg.permits < 0:
		fmt.Fprintf(stderr, "redlock exec: --permits %d: cannot be negative (0: the lock)\n", cfg.permits)
	case len(cfg.nodes.addrList()) == 0:
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
	cfg, exit, ok := parseExec(args, stdout, stderr)
	if !ok {
		return exit
	}
	failures, renewed := &nodeFailures{}, make(renewals, 1)
	locker, nodes, closeNodes, ok := newLocker("exec", cfg.nodes, cfg.ttl, stderr, redlock.WithObserver(failures), redlock.WithObserver(renewed))
	if !ok {
		return exitConfig
	}
	defer closeNodes()

	// The command is started first, held back until the lock is taken, so
	// that the lock's metadata names its own pid (see heldCommand).
	path, status := lookCommand("exec", cfg.argv[0], stderr)
	if status != 0 {
		return status
	}
	held, err := holdCommand(holdSpec{path: path, argv: cfg.argv, env: commandEnv(os.Environ()), grace: cfg.grace, foreground: true}, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "redlock exec: %s\n", explain(err))
		return exitNotExecutable
	}

	// A SIGINT or SIGTERM while waiting ends the wait (run's context);
	// once the command runs, signals are the command's (see below).
	lock, err := acquireForExec(ctx, locker, cfg, held.pid())
	if err == nil {
		if s, ok := interruptedBy(ctx); ok {
			// The signal came while the lock was being taken: the command
			// was not started, so it is not run.
			held.drop()
			_ = lock.Release(context.Background())
			drain(locker, cfg.ttl)
			fmt.Fprintf(stderr, "redlock exec: interrupted (%v) while taking %q; %s not run\n", s, cfg.key, cfg.argv[0])
			return 128 + int(s)
		}
	}
	if err != nil {
		held.drop()
		// The failed attempts' deletes must land before this process
		// exits, or a node keeps a key until its ttl.
		drain(locker, cfg.ttl)
		if s, ok := interruptedBy(ctx); ok {
			fmt.Fprintf(stderr, "redlock exec: interrupted (%v) while waiting for %q; %s not run\n", s, cfg.key, cfg.argv[0])
			return 128 + int(s)
		}
		if errors.Is(err, redlock.ErrInvalidArgument) {
			fmt.Fprintf(stderr, "redlock exec: %s\n", explain(err))
			return 2
		}
		exit, holder := notAcquiredStatus(locker, cfg.key, err)
		if holder != "" {
			fmt.Fprintf(stderr, "redlock exec: lock %q is held by %s; %s not run\n", cfg.key, holder, cfg.argv[0])
			return exit
		}
		fmt.Fprintf(stderr, "redlock exec: lock %q not acquired, %s not run: %s\n", cfg.key, cfg.argv[0], explain(err))
		return exit
	}
	defer func() {
		if held.abandoned {
			// The watchdog was killed: what the command left (a daemon
			// outside its group) may run on, so the lock is left to
			// expire at the end of its validity rather than released.
			fmt.Fprintf(stderr, "redlock exec: the watchdog was killed; lock %q left to expire\n", cfg.key)
			return
		}
		if err := lock.Release(context.Background()); err != nil && !errors.Is(err, redlock.ErrLockLost) {
			fmt.Fprintf(stderr, "redlock exec: releasing %q: %v\n", cfg.key, err)
		}
		drain(locker, cfg.ttl) // the deletes on slower nodes, before exiting
	}()
	if failed := failures.take(); len(failed) > 0 {
		fmt.Fprintf(stderr, "redlock exec: warning: lock %q taken without %d of %d nodes: %s\n",
			cfg.key, len(failed), nodes, strings.Join(failed, "; "))
	}

	if err := held.run(lockEnv(cfg, lock), lock.Until()); err != nil {
		held.drop()
		fmt.Fprintf(stderr, "redlock exec: %s\n", explain(err))
		return exitNotExecutable
	}
	return supervise(held, lock, renewed, func() {
		fmt.Fprintf(stderr, "redlock exec: lock %q lost; stopping %s\n", cfg.key, cfg.argv[0])
	})
}

// holdSpec is a command to hold (see holdCommand): path (found on PATH),
// its argv and env, how long its tree has to end once told to stop before
// SIGKILL, and whether it takes the terminal's foreground when redlock has
// it (exec's command may read the terminal; elect's does not, and a
// Ctrl-C there is redlock's to pass on and to end the campaigns with).
type holdSpec struct {
	path       string
	argv, env  []string
	grace      time.Duration
	foreground bool
}

// supervise waits for the command's tree to end, passing it the signals
// redlock gets, tells the watchdog each new end of the lock's validity
// (renewed: a renewal succeeded), and stops the tree if its lock is lost
// (it then returns 76): SIGTERM, and SIGKILL after the grace, or at the end
// of the lock's validity if that comes first, so that the command does
// not run on beside the next holder's. The stop is sent before told is
// called, so that a stderr that does not drain cannot hold it back. It
// returns the command's exit status otherwise.
func supervise(h *heldCommand, lock *redlock.Lock, renewed <-chan struct{}, told func()) int {
	// Signals to redlock go to the command's tree, which decides what
	// they mean, within the grace; redlock keeps renewing the lock until
	// the tree has ended. (A Ctrl-C typed in the terminal reaches exec's
	// command directly: it has the terminal's foreground, redlock not.)
	sigs := make(chan os.Signal, 16) // a burst of signals is passed on whole
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)

	end := lock.Done()
	for {
		select {
		case err := <-h.wait():
			h.done(err)
			if lock.Validity() == 0 {
				// The watchdog ended the tree at the end of the validity
				// (redlock was frozen), or the loss came as it ended.
				told()
				return exitLockLost
			}
			return exitStatus(err)
		case s := <-sigs:
			h.signal(s.(syscall.Signal))
		case <-renewed:
			h.renew(lock.Until())
		case <-end:
			end = nil
			if lock.Validity() > 0 {
				continue // released: cannot happen before the command exits
			}
			h.stop()
			told()
			h.done(h.stopped())
			return exitLockLost
		}
	}
}

// renewals is an Observer that wakes its reader after each successful
// renewal.
type renewals chan struct{}

func (r renewals) Observe(_ context.Context, e redlock.Event) {
	if e.Op == redlock.OpRenew && e.Err == nil {
		select {
		case r <- struct{}{}:
		default: // one wake-up is pending: it reads the latest validity
		}
	}
}

// withoutLossWarning is slog's default handler without the library's
// "lock lost" warning: exec and elect say it themselves, once the
// command's tree has been told to stop, so that no write to stderr comes
// before the stop.
type withoutLossWarning struct{ slog.Handler }

func (h withoutLossWarning) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "redlock: lock lost" {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h withoutLossWarning) WithAttrs(as []slog.Attr) slog.Handler {
	return withoutLossWarning{h.Handler.WithAttrs(as)}
}

func (h withoutLossWarning) WithGroup(name string) slog.Handler {
	return withoutLossWarning{h.Handler.WithGroup(name)}
}

// newLocker is the Client of a command (exec, elect) over the nodes given,
// each call bounded by ttl, and how many nodes it has; a bad address or
// option is said on stderr (ok false: exit 78).
func newLocker(cmd string, nf *nodeFlags, ttl time.Duration, stderr io.Writer, opts ...redlock.Option) (_ *redlock.Client, nodes int, closeNodes func(), ok bool) {
	clients, err := nf.clients(ttl)
	if err != nil {
		fmt.Fprintf(stderr, "redlock %s: %s\n", cmd, explain(err))
		return nil, 0, nil, false
	}
	opts = append(opts, redlock.WithLogger(slog.New(withoutLossWarning{slog.Default().Handler()})))
	locker, err := redlock.New(clients, opts...)
	if err != nil {
		closeAll(clients)
		fmt.Fprintf(stderr, "redlock %s: %s\n", cmd, explain(err))
		return nil, 0, nil, false
	}
	return locker, len(clients), func() { closeAll(clients) }, true
}

func acquireForExec(ctx context.Context, locker *redlock.Client, cfg execConfig, pid int) (*redlock.Lock, error) {
	opts := []redlock.AcquireOption{redlock.WithAutoRenew(), redlock.WithMetadata(execMetadata(cfg.argv, pid))}
	if cfg.fencing {
		opts = append(opts, redlock.WithFencing())
	}
	if cfg.permits > 0 {
		opts = append(opts, redlock.WithPermits(cfg.permits))
	}
	if cfg.wait == 0 {
		return locker.TryAcquire(ctx, cfg.key, cfg.ttl, opts...)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.wait)
	defer cancel()
	return locker.Acquire(ctx, cfg.key, cfg.ttl, opts...)
}

// execMetadata tells who holds an exec's lock: host, the command's pid and
// its command line, cut to fit the library's limit.
func execMetadata(argv []string, pid int) string {
	host, _ := os.Hostname()
	m := fmt.Sprintf("host=%s pid=%d cmd=%s", host, pid, strings.Join(argv, " "))
	if len(m) > redlock.MaxMetadata {
		m = m[:redlock.MaxMetadata]
	}
	return m
}

// secretVars are the nodes' credentials, which the command does not
// inherit.
var secretVars = []string{"REDLOCK_PASSWORD", "REDISCLI_AUTH"}

// commandEnv is the command's environment: env without the nodes'
// credentials (and REDLOCK_ADDRS when a URL in it holds a password) and
// without variables that would name another lock.
func commandEnv(env []string) []string {
	drop := append(slices.Clone(secretVars), "REDLOCK_KEY", "REDLOCK_TOKEN", "REDLOCK_FENCING_TOKEN")
	if strings.Contains(os.Getenv("REDLOCK_ADDRS"), "@") {
		drop = append(drop, "REDLOCK_ADDRS")
	}
	for _, v := range drop {
		env = withoutVar(env, v)
	}
	return env
}

// withoutVar returns env without the variable name.
func withoutVar(env []string, name string) []string {
	return slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") })
}

// lockEnv is what the command is told of its lock.
func lockEnv(cfg execConfig, lock *redlock.Lock) []string {
	env := []string{"REDLOCK_KEY=" + cfg.key, "REDLOCK_TOKEN=" + lock.Token()}
	if cfg.fencing {
		env = append(env, fmt.Sprintf("REDLOCK_FENCING_TOKEN=%d", lock.FencingToken()))
	}
	return env
}

// drain waits, at most the node timeout (ttl) and a little, for the calls
// the Client left running in the background.
func drain(locker *redlock.Client, ttl time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), ttl+time.Second)
	defer cancel()
	_ = locker.Drain(ctx)
}

// notAcquiredStatus is exec's exit status when the lock was not acquired
// with err: a configuration error (78), nodes that do not answer (69), or
// another holder (75), with who that is when its metadata says.
func notAcquiredStatus(locker *redlock.Client, key string, err error) (status int, holder string) {
	if errors.Is(err, redlock.ErrMisconfigured) {
		return exitConfig, ""
	}
	// Ask the nodes: another holder, or nodes out of reach?
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	in, ierr := locker.Inspect(ctx, key)
	if ierr != nil {
		return exitUnavailable, ""
	}
	answered, misconfigured, held := 0, 0, 0
	for _, nd := range in.Nodes {
		switch {
		case nd.Err == nil:
			answered++
			if nd.Held {
				held++
			}
		case configError(nd.Err):
			misconfigured++
		}
	}
	switch {
	case answered >= in.Quorum && held > 0:
		// The nodes answer: the lock is another's.
		for _, h := range in.Holders {
			if h.Metadata != "" {
				return exitNotAcquired, h.Metadata
			}
		}
		return exitNotAcquired, ""
	case misconfigured > 0 || configError(err):
		return exitConfig, "" // out of reach because of how nodes are reached
	default:
		// Too few nodes answered, or they answer but hold nothing: the
		// attempts did not get their answers in time.
		return exitUnavailable, ""
	}
}

// nodeFailures collects, as an Observer, the nodes whose last call of an
// acquire failed.
type nodeFailures struct {
	mu     sync.Mutex
	failed map[int]string
}

func (f *nodeFailures) Observe(_ context.Context, e redlock.Event) {
	if e.Op != redlock.OpNode || e.NodeOp != redlock.OpAcquire {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed == nil {
		f.failed = map[int]string{}
	}
	if e.Err != nil {
		f.failed[e.Node] = e.Err.Error()
	} else {
		delete(f.failed, e.Node)
	}
}

// take returns the nodes failing so far, in node order.
func (f *nodeFailures) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, i := range slices.Sorted(maps.Keys(f.failed)) {
		out = append(out, f.failed[i])
	}
	return out
}

// lookCommand finds the command to run, or says why not and returns
// exec's or elect's exit status: 127 when it is not found, 126 when it
// cannot be run.
func lookCommand(cmd, name string, stderr io.Writer) (path string, status int) {
	path, err := exec.LookPath(name)
	if err == nil {
		return path, 0
	}
	fmt.Fprintf(stderr, "redlock %s: %s\n", cmd, explain(err))
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return "", exitNotFound
	}
	return "", exitNotExecutable
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
