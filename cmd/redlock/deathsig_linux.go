package main

import (
	"os/exec"
	"syscall"
)

// dieWithRedlock has the kernel kill cmd (SIGKILL) when redlock dies, so
// that a command whose lock is no longer renewed does not run on beside
// the next holder's after a kill -9 of redlock. It holds across the held
// command's exec.
func dieWithRedlock(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
