//go:build unix

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// inTerminalForeground reports whether this process is in the foreground
// process group of its controlling terminal. Then a SIGINT, SIGQUIT or
// SIGHUP it gets came, almost surely, from the terminal (Ctrl-C, Ctrl-\,
// hang-up), which signalled the whole group: a command started by exec is
// in the group and got the signal too.
func inTerminalForeground() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false // no controlling terminal
	}
	defer tty.Close()
	pgrp, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}
