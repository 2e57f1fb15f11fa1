//go:build !unix

package main

import (
	"io"
	"os"
	"os/exec"
)

// heldCommand is the command, started once its lock is taken; where a
// process cannot exec another in its place, the lock's metadata names
// redlock's pid.
type heldCommand struct{ cmd *exec.Cmd }

func holdCommand(path string, argv, env []string, stdout, stderr io.Writer) (*heldCommand, error) {
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	dieWithRedlock(cmd)
	return &heldCommand{cmd: cmd}, nil
}

func (h *heldCommand) pid() int { return os.Getpid() }

func (h *heldCommand) run(extra []string) error {
	h.cmd.Env = append(h.cmd.Env, extra...)
	return h.cmd.Start()
}

func (h *heldCommand) drop() {}

func runHeldCommand() {}
