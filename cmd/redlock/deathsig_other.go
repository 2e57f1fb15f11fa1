//go:build !linux

package main

import "os/exec"

// dieWithRedlock does nothing where the kernel cannot kill a child with
// its parent: a command outlives a redlock killed with SIGKILL.
func dieWithRedlock(*exec.Cmd) {}
