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

// exitedChild does not wait where a child cannot be waited for without
// reaping it: -1 asks reap to wait for any child, and reap tells that
// the command has exited only once it was reaped.
func exitedChild() (int, error) { return -1, nil }

// reapOthers is never called: exitedChild never tells a child unreaped.
func reapOthers(chan<- exited, int) {}

// isStopped cannot tell here: a stopped watchdog is waited for.
func isStopped(int) bool { return false }

// defaultSignal does nothing here: a command that takes the terminal may
// inherit SIGTTOU ignored.
func defaultSignal(syscall.Signal) {}
