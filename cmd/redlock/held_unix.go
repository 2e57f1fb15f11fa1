//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// heldEnv marks a copy of this program started by the watchdog: it waits
// for its go-ahead on file descriptor 3, then becomes the command.
const heldEnv = "REDLOCK_HELD_COMMAND"

// heldCommand is a command started but held back until its lock is taken,
// under a watchdog:
//
//	redlock ─ watchdog (this program, see runWatchdog) ─ command (process group of its own)
//
// The command is a copy of this program that waits on a pipe (the gate),
// then execs the command in its place, keeping its process ID, so that the
// lock's metadata can name the command's own pid before the command runs.
// The watchdog is the command's parent; redlock tells it each new end of
// the lock's validity, and what to signal, through a pipe (ctl). It stops
// the command's whole tree when told, at the end of the validity, and at
// once when the pipe closes: when redlock exits or dies. The watchdog runs
// in a process group of its own, in redlock's session: a signal to
// redlock's group (kill -9 or SIGSTOP of a job, a Ctrl-Z) reaches neither
// the watchdog nor the command, and the watchdog sees redlock's death as
// its pipe closing, redlock's freeze as the validity's end passing.
type heldCommand struct {
	cmd    *exec.Cmd // the watchdog
	gate   *os.File  // the gate's write end
	ctl    *os.File  // the watchdog's pipe, write end
	report *os.File  // the watchdog's report, read end: "exited" once the command has exited
	cmdPid int       // the command's pid, and its process group's
	exited chan error
	grace  time.Duration
	until  time.Time // the end of the validity last told
	killAt time.Time // once stopped, when the tree gets SIGKILL
	// abandoned: the watchdog was killed by a signal, so the tree's end
	// is not known (see done).
	abandoned bool
}

// holdCommand starts the command of spec, held back, under its watchdog.
func holdCommand(spec holdSpec, stdout, stderr io.Writer) (_ *heldCommand, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var pipes [3][2]*os.File // gate, ctl, and the watchdog's report of the command's pid
	defer func() {
		for i, p := range pipes {
			if p[0] != nil && (err != nil || i != 2) {
				p[0].Close()
			}
			if err != nil && p[1] != nil {
				p[1].Close()
			}
		}
	}()
	for i := range pipes {
		if pipes[i][0], pipes[i][1], err = os.Pipe(); err != nil {
			return nil, err
		}
	}
	gate, ctl, report := pipes[0], pipes[1], pipes[2]
	cmd := exec.Command(self, append([]string{spec.path}, spec.argv...)...)
	mode := strconv.FormatInt(int64(spec.grace), 10)
	if spec.foreground && inTerminalForeground() {
		mode = "fg:" + mode
	}
	cmd.Env = append(spec.env, watchdogEnv+"="+mode)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{ctl[0], gate[0], report[1]} // 3, 4, 5
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err = cmd.Start(); err != nil {
		return nil, err
	}
	report[1].Close()
	pipes[2][1] = nil
	h := &heldCommand{cmd: cmd, gate: gate[1], ctl: ctl[1], report: report[0], exited: make(chan error, 1), grace: spec.grace}
	// The pid's line is read a byte at a time: "exited" comes after it
	// and is read only when the tree is killed (see kill).
	var line []byte
	b := make([]byte, 1)
	var rerr error
	for len(line) < 20 && (len(line) == 0 || line[len(line)-1] != '\n') && rerr == nil {
		var n int
		n, rerr = report[0].Read(b)
		line = append(line, b[:n]...)
	}
	h.cmdPid, err = strconv.Atoi(strings.TrimSpace(string(line)))
	if err != nil {
		// The watchdog could not start the command: it said why on stderr.
		h.ctl.Close()
		werr := cmd.Wait()
		return nil, fmt.Errorf("starting the command: %w", errors.Join(rerr, werr))
	}
	go func() { h.exited <- cmd.Wait() }()
	return h, nil
}

// pid is the command's process ID, once it runs.
func (h *heldCommand) pid() int { return h.cmdPid }

// run lets the command run, with extra in its environment, until the end
// of the lock's validity at the latest.
func (h *heldCommand) run(extra []string, until time.Time) error {
	h.renew(until)
	_, err := fmt.Fprintf(h.gate, "run\n%s\n", strings.Join(extra, "\n"))
	return errors.Join(err, h.gate.Close())
}

// renew tells the watchdog the new end of the lock's validity, as a
// reading of CLOCK_MONOTONIC, which the watchdog reads too: the clock is
// the system's, not the process's, so the deadline does not move with the
// pipe's delay or with a change of the wall clock. The clock is read
// before the time left: a pause between the two makes the deadline
// earlier, never later.
func (h *heldCommand) renew(until time.Time) {
	h.until = until
	mono := monotonicNow()
	left := int64(max(0, time.Until(until)))
	h.tell(fmt.Sprintf("until %d", mono+min(left, math.MaxInt64-mono))) // a ttl of centuries saturates
}

// signal passes s to the command's tree, which then has the grace to exit
// before SIGKILL.
func (h *heldCommand) signal(s syscall.Signal) { h.tell(fmt.Sprintf("signal %d", s)) }

// stop sends SIGTERM to the command's tree, and SIGKILL after the grace or
// at the end of the validity, whichever is first.
func (h *heldCommand) stop() {
	h.killAt = time.Now().Add(h.grace)
	if h.until.Before(h.killAt) {
		h.killAt = h.until
	}
	h.tell("stop")
}

// stopped waits for the watchdog's exit after stop. The watchdog kills
// the tree at killAt; should it not have ended by then (the watchdog
// stopped, SIGSTOP), redlock kills it itself, and then a watchdog found
// stopped (on Linux) is killed too, so that redlock does not wait for it
// for ever.
func (h *heldCommand) stopped() error {
	t := time.NewTimer(time.Until(h.killAt))
	defer t.Stop()
	select {
	case err := <-h.exited:
		return err
	case <-t.C:
	}
	h.kill()
	look := time.NewTicker(100 * time.Millisecond)
	defer look.Stop()
	for {
		select {
		case err := <-h.exited:
			return err
		case <-look.C:
			if isStopped(h.cmd.Process.Pid) {
				_ = h.cmd.Process.Kill()
			}
		}
	}
}

// kill sends SIGKILL to the command's process group and to the watchdog's
// descendants outside it, unless the watchdog has reported that the
// command exited or has itself exited.
//
// The rule: redlock signals the group (its ID is the command's pid) only
// while the watchdog is alive (its report pipe is open) and has not
// reported "exited". The watchdog writes "exited" before it reaps the
// command (on Linux, once the rest of the tree has ended too; elsewhere
// just after), so that until then the command is the watchdog's unreaped
// child, alive or a zombie, and its pid cannot have been given to another
// process. Once the watchdog has died, the command is init's, reaped at
// any time: redlock signals nothing (see done).
func (h *heldCommand) kill() {
	rc, err := h.report.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		_ = unix.SetNonblock(int(fd), true)
		_, err = unix.Read(int(fd), make([]byte, 16))
		return true // do not wait
	})
	if err != unix.EAGAIN {
		return // reported, or the watchdog exited (the pipe closed)
	}
	others := descendants(h.cmd.Process.Pid, h.cmdPid)
	_ = unix.Kill(-h.cmdPid, unix.SIGKILL)
	for _, pid := range others {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

// tell writes one line to the watchdog. A line is a few bytes and the
// watchdog reads all the time: the write does not wait. After the watchdog
// has exited the write fails, and there is nothing to tell.
func (h *heldCommand) tell(line string) {
	_, _ = io.WriteString(h.ctl, line+"\n")
}

// wait returns the channel that gets the watchdog's exit: the command's
// exit status once its whole tree has ended.
func (h *heldCommand) wait() <-chan error { return h.exited }

// done is told the watchdog's exit. After a watchdog killed itself (by a
// signal) the end of the tree is not known, nor whether the command's pid
// is still its own: nothing is signalled, and abandoned says that the
// lock is to be left to expire rather than released (see exec).
func (h *heldCommand) done(err error) {
	h.ctl.Close()
	h.report.Close()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			h.abandoned = true
		}
	}
}

// drop ends the held copy without running the command, and waits for it.
func (h *heldCommand) drop() {
	h.gate.Close()
	h.ctl.Close()
	h.report.Close()
	<-h.exited
}

// runHeldCommand is the held copy: when this process is one, it waits for
// its go-ahead, then execs the command (or exits without running it when
// the pipe closes without one). It returns only in any other process.
func runHeldCommand() {
	if os.Getenv(heldEnv) == "" {
		return
	}
	gate := os.NewFile(3, "gate")
	sc := bufio.NewScanner(gate)
	if !sc.Scan() || sc.Text() != "run" {
		os.Exit(0) // the lock was not taken
	}
	env := os.Environ()
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			env = append(env, line)
		}
	}
	gate.Close()
	if os.Getenv(heldEnv) == "fg" {
		// The command's group takes the terminal, so that it can read it
		// and a Ctrl-C reaches the command's tree, once.
		takeTerminal(unix.Getpgrp())
	}
	env = withoutVar(env, heldEnv)
	err := syscall.Exec(os.Args[1], os.Args[2:], env)
	fmt.Fprintf(os.Stderr, "redlock: %s: %v\n", os.Args[2], err)
	os.Exit(exitNotExecutable)
}

// monotonicNow reads CLOCK_MONOTONIC, in nanoseconds.
func monotonicNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(fmt.Sprintf("redlock: CLOCK_MONOTONIC: %v", err)) // cannot fail on a supported system
	}
	return ts.Nano()
}
