package main

import (
	"os"
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

// descendants returns the live descendants of root outside the process
// group pgid, read from /proc.
func descendants(root, pgid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	type proc struct{ pid, pgrp int }
	children := map[int][]proc{}
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
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue // ended, not yet reaped
		}
		ppid, _ := strconv.Atoi(f[1])
		pgrp, _ := strconv.Atoi(f[2])
		children[ppid] = append(children[ppid], proc{pid, pgrp})
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
