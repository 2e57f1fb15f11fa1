//go:build unix

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// watchdogEnv marks a copy of this program started by holdCommand as the
// watchdog of a command; its value is the grace, in nanoseconds, and with
// a "fg:" prefix the command takes the terminal's foreground.
const watchdogEnv = "REDLOCK_WATCHDOG"

// runWatchdog is the watchdog: when this process is one, it runs the held
// command (see heldCommand) and exits with the command's exit status once
// the command's whole tree has ended. It returns only in any other
// process.
//
// It reads lines from redlock on file descriptor 3:
//
//	until N   the lock is valid until CLOCK_MONOTONIC reads N (ns)
//	signal N  pass signal N to the tree: it has the grace to end
//	stop      the lock is lost: SIGTERM to the tree, which has the grace to end
//
// and kills the tree (SIGKILL) at the end of the grace, at the end of the
// validity, and at once when the pipe closes (redlock exited or died). A
// frozen redlock does not freeze it: its own timer ends the command at the
// end of the validity it was last told of.
func runWatchdog() {
	v, ok := os.LookupEnv(watchdogEnv)
	if !ok {
		return
	}
	fg := strings.HasPrefix(v, "fg:")
	grace, err := strconv.ParseInt(strings.TrimPrefix(v, "fg:"), 10, 64)
	if err != nil {
		os.Exit(exitNotExecutable)
	}
	os.Exit(watchdog(time.Duration(grace), fg))
}

func watchdog(grace time.Duration, fg bool) int {
	// Signals are redlock's to pass on; the watchdog ends only as its pipe
	// says. They are caught, not ignored: an ignored signal would stay
	// ignored in the command.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	go func() {
		for range sigs {
		}
	}()
	ctl, gate, report := os.NewFile(3, "ctl"), os.NewFile(4, "gate"), os.NewFile(5, "report")
	for fd := 3; fd <= 5; fd++ {
		syscall.CloseOnExec(fd) // the command's tree must not hold redlock's pipes open
	}
	becomeSubreaper()
	attr := &syscall.SysProcAttr{Setpgid: true}
	held := "1"
	// redlock's process group, read while redlock waits for the report:
	// the terminal goes back to it once the tree has ended.
	home, _ := unix.Getpgid(os.Getppid())
	if fg {
		held = "fg" // the command takes the terminal when it runs
	}
	dieWithParent(attr)
	self, err := os.Executable()
	if err != nil {
		return cannotStart(err)
	}
	env := append(withoutVar(os.Environ(), watchdogEnv), heldEnv+"="+held)
	p, err := os.StartProcess(self, os.Args, &os.ProcAttr{Env: env, Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, gate}, Sys: attr})
	gate.Close()
	if err != nil {
		return cannotStart(fmt.Errorf("%s: %w", os.Args[2], err))
	}
	fmt.Fprintln(report, p.Pid)
	t := &tree{pgid: p.Pid, grace: grace}
	status := t.watch(ctl, report, p.Pid)
	if fg {
		// The tree has ended: the terminal goes back to redlock's group.
		takeTerminal(home)
	}
	return status
}

// cannotStart says err on stderr and returns 126. The watchdog's process
// group is not the terminal's foreground: SIGTTOU is ignored so that the
// write is not stopped (stty tostop); no command inherits it, none runs.
func cannotStart(err error) int {
	signal.Ignore(syscall.SIGTTOU)
	fmt.Fprintf(os.Stderr, "redlock: %v\n", err)
	return exitNotExecutable
}

// tree is the command's tree: its process group, and on Linux every
// descendant of the watchdog, which is their subreaper (see descendants).
type tree struct {
	pgid   int
	grace  time.Duration
	termed bool // SIGTERM was sent
	told   bool // a signal was sent: a passed one, or SIGTERM
	reaped bool // the command (the group's leader) was reaped: its pid may be another's
}

// exited is a child of the watchdog that ended, or with pid -1, the last.
// On Linux the command (main) is told twice: when it has exited, left
// unreaped, and when it is reaped (reaped, with its status).
type exited struct {
	pid    int
	ws     syscall.WaitStatus
	reaped bool
}

// watch runs until the tree has ended and returns the command's (main's)
// exit status. It writes "exited" to report before main is reaped (see
// reap).
func (t *tree) watch(ctl, report *os.File, main int) int {
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	exits := make(chan exited)
	go reap(exits, main, report)

	status := 0
	var (
		deadline time.Time // the validity's end; none while the command is held
		killAt   time.Time // the grace's end
		killing  bool
	)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// While killing, the tree is looked for again every pass: a process
	// forked as its parent was killed is caught at the next pass.
	passes := time.NewTicker(time.Hour)
	passes.Stop()
	kill := func() {
		if !killing {
			killing = true
			passes.Reset(20 * time.Millisecond)
		}
		t.signal(syscall.SIGKILL)
	}
	graceFrom := func(now time.Time) {
		if end := now.Add(t.grace); killAt.IsZero() || end.Before(killAt) {
			killAt = end
		}
	}
	for {
		next := killAt
		if next.IsZero() || (!deadline.IsZero() && deadline.Before(next)) {
			next = deadline
		}
		timer.Stop()
		if !next.IsZero() && !killing {
			timer.Reset(time.Until(next))
		}
		select {
		case line, ok := <-lines:
			if !ok {
				lines = nil
				kill() // redlock has exited or died: nobody renews the lock
				continue
			}
			verb, arg, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseInt(arg, 10, 64)
			switch verb {
			case "until":
				now := time.Now() // read before CLOCK_MONOTONIC: the deadline errs early
				deadline = now.Add(time.Duration(n - monotonicNow()))
			case "signal":
				t.termed = t.termed || syscall.Signal(n) == syscall.SIGTERM
				t.told = true
				t.signal(syscall.Signal(n))
				graceFrom(time.Now())
			case "stop":
				if !t.termed {
					t.termed, t.told = true, true
					t.signal(syscall.SIGTERM)
				}
				graceFrom(time.Now())
			}
		case <-timer.C:
			kill()
		case <-passes.C:
			t.signal(syscall.SIGKILL)
		case e := <-exits:
			switch {
			case e.pid < 0:
				// No child left: with a subreaper, no descendant left.
				// Without, the group's orphans are init's, and the
				// group's ID may be another's by now: it is not signalled.
				return status
			case e.pid == main:
				if e.reaped {
					status = waitStatus(e.ws)
					t.reaped = true
				}
				if !t.told {
					// What the command left running gets SIGTERM, and
					// SIGKILL after the grace: the lock is released only
					// once the tree has ended.
					t.termed, t.told = true, true
					t.signal(syscall.SIGTERM)
					graceFrom(time.Now())
				}
			}
			if killing {
				t.signal(syscall.SIGKILL)
			}
		}
		if !killing && !killAt.IsZero() && !time.Now().Before(killAt) {
			kill()
		}
	}
}

// signal sends s to the tree: its process group, and the descendants that
// left it. The group is signalled only while the command, its leader, is
// unreaped: a zombie keeps its pid, so that no other process can have
// taken it or the group's ID. (On Linux the command is reaped only once
// the rest of its tree has ended; elsewhere at once, and what it left in
// its group is then not signalled.)
func (t *tree) signal(s syscall.Signal) {
	others := descendants(os.Getpid(), t.pgid)
	if !t.reaped {
		_ = unix.Kill(-t.pgid, s)
	}
	for _, pid := range others {
		_ = unix.Kill(pid, s)
	}
}

// reap waits for the watchdog's children, and ends with a pid of -1 when
// none is left. On Linux, once main has exited it is left unreaped, a
// zombie, while the rest of the tree runs (see reapOthers): its pid, the
// group's ID, cannot be another's until then. "exited" is written to
// report before main is reaped (elsewhere just after): until then redlock
// may kill main's process group itself (see heldCommand.kill).
func reap(exits chan<- exited, main int, report *os.File) {
	defer report.Close()
	reported := false
	tell := func() {
		if !reported {
			reported = true
			fmt.Fprintln(report, "exited")
		}
	}
	for {
		pid, err := exitedChild() // on Linux, the child that exited, not yet reaped
		if err == nil && pid == main {
			exits <- exited{pid: main}
			reapOthers(exits, main)
			tell()
		}
		var ws syscall.WaitStatus
		if err == nil {
			pid, err = syscall.Wait4(pid, &ws, 0, nil)
		}
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			exits <- exited{pid: -1}
			return
		}
		if pid == main {
			tell()
		}
		exits <- exited{pid: pid, ws: ws, reaped: true}
	}
}

// waitStatus is an exit status as a shell reports it.
func waitStatus(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// takeTerminal makes the process group pgrp the foreground of this
// process's controlling terminal. From a background group that is allowed
// with SIGTTOU ignored; it is ignored for the call only, so that a command
// this process becomes does not inherit it ignored.
func takeTerminal(pgrp int) {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return
	}
	defer tty.Close()
	signal.Ignore(syscall.SIGTTOU)
	defer defaultSignal(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(int(tty.Fd()), unix.TIOCSPGRP, pgrp)
}
