//go:build !unix

package main

import (
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// heldCommand is the command, started once its lock is taken; where a
// process cannot exec another in its place, the lock's metadata names
// redlock's pid. There is no watchdog and no process group here: a stopped
// command is killed at once, and only the command's own process is.
type heldCommand struct {
	cmd       *exec.Cmd
	exited    chan error
	abandoned bool
}

func holdCommand(spec holdSpec, stdout, stderr io.Writer) (*heldCommand, error) {
	cmd := exec.Command(spec.path, spec.argv[1:]...)
	cmd.Args[0] = spec.argv[0]
	cmd.Env = spec.env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	return &heldCommand{cmd: cmd, exited: make(chan error, 1)}, nil
}

func (h *heldCommand) pid() int { return os.Getpid() }

func (h *heldCommand) run(extra []string, _ time.Time) error {
	h.cmd.Env = append(h.cmd.Env, extra...)
	if err := h.cmd.Start(); err != nil {
		return err
	}
	go func() { h.exited <- h.cmd.Wait() }()
	return nil
}

func (h *heldCommand) renew(time.Time)         {}
func (h *heldCommand) signal(s syscall.Signal) { _ = h.cmd.Process.Signal(s) }
func (h *heldCommand) stop()                   { _ = h.cmd.Process.Kill() }
func (h *heldCommand) wait() <-chan error      { return h.exited }
func (h *heldCommand) stopped() error          { return <-h.exited }
func (h *heldCommand) done()                   {}
func (h *heldCommand) drop()                   {}

func runHeldCommand() {}
func runWatchdog()    {}
