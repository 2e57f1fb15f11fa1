package chaos

import "syscall"

// childAttr makes a node process die with the process that started it, so
// that an interrupted run leaves no server behind.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
