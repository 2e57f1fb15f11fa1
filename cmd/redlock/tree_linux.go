package main

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// becomeSubreaper makes the watchdog the subreaper of the command's tree:
// a process whose parent ends (a daemon that forked and let its parent
// exit, a worker whose shell was killed) becomes the watchdog's child
// rather than init's, so that no descendant escapes it, whatever its
// session or process group. It reports whether it is one.
func becomeSubreaper() bool {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == nil
}

// dieWithParent has the kernel kill the command (SIGKILL) should its
// watchdog die, killed itself.
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }

// procStat is a process as /proc tells it.
type procStat struct {
	pid, ppid, pgrp int
	ended           bool // a zombie, not yet reaped
}

// procs reads every process from /proc.
func procs() []procStat {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procStat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // ended meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgrp, _ := strconv.Atoi(f[2])
		out = append(out, procStat{pid: pid, ppid: ppid, pgrp: pgrp, ended: f[0] == "Z" || f[0] == "X"})
	}
	return out
}

// descendants returns the live descendants of root outside the process
// group pgid, read from /proc.
func descendants(root, pgid int) []int {
	children := map[int][]procStat{}
	for _, p := range procs() {
		if !p.ended {
			children[p.ppid] = append(children[p.ppid], p)
		}
	}
	var out []int
	seen := map[int]bool{root: true} // a pid reused during the scan cannot loop
	for next := children[root]; len(next) > 0; {
		p := next[0]
		next = next[1:]
		if seen[p.pid] {
			continue
		}
		seen[p.pid] = true
		next = append(next, children[p.pid]...)
		if p.pgrp != pgid {
			out = append(out, p.pid)
		}
	}
	return out
}

// reapOthers reaps the watchdog's children but main, which has exited and
// stays unreaped, and returns once main is the only one left: as the
// subreaper, the watchdog then has no other descendant. It waits for
// SIGCHLD between looks at /proc.
func reapOthers(exits chan<- exited, main int) {
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	defer signal.Stop(chld)
	self := os.Getpid()
	for {
		left, reaped := 0, false
		for _, p := range procs() {
			if p.ppid != self || p.pid == main {
				continue
			}
			left++
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(p.pid, &ws, syscall.WNOHANG, nil); err == nil && pid == p.pid {
				reaped = true
				exits <- exited{pid: pid, ws: ws, reaped: true}
			}
		}
		if left == 0 {
			return
		}
		if !reaped {
			<-chld
		}
	}
}

// isStopped reports whether the process pid is stopped (SIGSTOP, a
// debugger).
func isStopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	return i >= 0 && len(f) > 0 && (f[0] == "T" || f[0] == "t")
}

// exitedChild waits until a child of this process has exited and returns
// its pid, leaving it unreaped (WNOWAIT): its pid cannot be reused yet.
func exitedChild() (int, error) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			// si_pid follows si_signo, si_errno and si_code, aligned as
			// a pointer (unix.Siginfo does not name it).
			word := unsafe.Sizeof(uintptr(0))
			return int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), (12+word-1)&^(word-1)))), err
		}
	}
}

// defaultSignal sets s to its default action (SIG_DFL), whatever the Go
// runtime left, so that a command this process execs does not inherit it
// ignored. A zeroed kernel struct sigaction is SIG_DFL with no flags on
// every architecture; 32 bytes cover it.
func defaultSignal(s syscall.Signal) {
	var act [4]uint64
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(s), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
}
