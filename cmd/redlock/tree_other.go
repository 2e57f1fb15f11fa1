//go:build unix && !linux

package main

import "syscall"

// becomeSubreaper does nothing where a process cannot adopt its orphaned
// descendants: the command's tree is its process group.
func becomeSubreaper() bool { return false }

// dieWithParent does nothing where the kernel cannot kill a child with its
// parent: redlock kills the command's group if the watchdog dies.
func dieWithParent(*syscall.SysProcAttr) {}

// descendants finds none: only the process group is signalled.
func descendants(root, pgid int) []int { return nil }

// defaultSignal does nothing here: a command that takes the terminal may
// inherit SIGTTOU ignored.
func defaultSignal(syscall.Signal) {}
