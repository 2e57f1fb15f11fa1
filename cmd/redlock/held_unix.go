//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
)

// heldEnv marks a copy of this program started by holdCommand: it waits
// for its go-ahead on file descriptor 3, then becomes the command.
const heldEnv = "REDLOCK_HELD_COMMAND"

// heldCommand is a command started but held back until its lock is taken:
// a copy of this program that waits on a pipe, then execs the command in
// its place, keeping its process ID, so that the lock's metadata can name
// the command's own pid before the command runs.
type heldCommand struct {
	cmd  *exec.Cmd
	gate *os.File // the pipe's write end
}

// holdCommand starts path (found on PATH) with argv and env, held back.
func holdCommand(path string, argv, env []string, stdout, stderr io.Writer) (*heldCommand, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(self, append([]string{path}, argv...)...)
	cmd.Env = append(env, heldEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{r}
	dieWithRedlock(cmd)
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	return &heldCommand{cmd: cmd, gate: w}, nil
}

// pid is the command's process ID, once it runs.
func (h *heldCommand) pid() int { return h.cmd.Process.Pid }

// run lets the command run, with extra in its environment.
func (h *heldCommand) run(extra []string) error {
	_, err := fmt.Fprintf(h.gate, "run\n%s\n", strings.Join(extra, "\n"))
	return errors.Join(err, h.gate.Close())
}

// drop ends the held copy without running the command, and waits for it.
func (h *heldCommand) drop() {
	h.gate.Close()
	_ = h.cmd.Wait()
}

// runHeldCommand is the held copy: when this process is one, it waits for
// its go-ahead, then execs the command (or exits without running it when
// the pipe closes without one). It returns only in any other process.
func runHeldCommand() {
	if os.Getenv(heldEnv) == "" {
		return
	}
	gate := os.NewFile(3, "gate")
	sc := bufio.NewScanner(gate)
	if !sc.Scan() || sc.Text() != "run" {
		os.Exit(0) // the lock was not taken
	}
	env := os.Environ()
	for sc.Scan() {
		if line := sc.Text(); line != "" {
			env = append(env, line)
		}
	}
	gate.Close()
	env = withoutVar(env, heldEnv)
	err := syscall.Exec(os.Args[1], os.Args[2:], env)
	fmt.Fprintf(os.Stderr, "redlock exec: %s: %v\n", os.Args[2], err)
	os.Exit(exitNotExecutable)
}
