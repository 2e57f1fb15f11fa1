package main

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// startInTerminal starts the built command as a terminal's foreground job:
// in a session of its own whose controlling terminal is a new pty. It
// returns the process and the pty's master side, where typing goes.
func startInTerminal(t *testing.T, args ...string) (*exec.Cmd, chan int, io.Writer) {
	t.Helper()
	cmd := exec.Command(redlockBinary(t), args...)
	cmd.Env = cleanEnv()
	tty, err := pty.Start(cmd) // setsid, and the pty as controlling terminal
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, tty) }()
	exited := make(chan int, 1)
	go func() { exited <- exitStatus(cmd.Wait()); _ = tty.Close() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
	})
	return cmd, exited, tty
}

func waitExit(t *testing.T, exited chan int) int {
	t.Helper()
	select {
	case code := <-exited:
		exited <- code
		return code
	case <-time.After(time.Minute):
		t.Fatal("redlock did not exit within a minute")
		return 0
	}
}

// TestBinary_ctrlCReachesTheCommandOnce: a Ctrl-C typed in the terminal
// where redlock exec runs reaches the command once (the terminal signals
// the whole foreground job; redlock does not pass it on a second time),
// and a Ctrl-C while waiting with --wait ends the wait with 130.
func TestBinary_ctrlCReachesTheCommandOnce(t *testing.T) {
	var addrs []string
	for range 3 {
		addrs = append(addrs, plainServer(t))
	}
	nodes := strings.Join(addrs, ",")
	c := newChild(t, "signals")
	_, exited, term := startInTerminal(t, append([]string{"exec", "--addrs", nodes, "--key", "tty", "--ttl", "1s", "--"}, c.argv...)...)
	c.waitReady(t)
	if _, err := term.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	if exit := waitExit(t, exited); exit != 0 {
		t.Fatalf("exit %d, want the command's 0", exit)
	}
	if got := strings.Join(c.signals(t), " "); got != "INT" {
		t.Fatalf("one Ctrl-C: the command got %q, want INT once", got)
	}

	// Waiting for a lock another holds: Ctrl-C ends the wait, 130.
	holder, hc := holdWith(t, nil, "tty", "--addrs", nodes)
	_, exited, term = startInTerminal(t, "exec", "--addrs", nodes, "--key", "tty", "--ttl", "1s", "--wait", "1m", "--", "true")
	waitFor(t, 30*time.Second, "the waiter to subscribe to the lock's release", func() bool { return subscribed(t, addrs) })
	if _, err := term.Write([]byte{3}); err != nil {
		t.Fatal(err)
	}
	if exit := waitExit(t, exited); exit != 130 {
		t.Fatalf("Ctrl-C while waiting: exit %d, want 130", exit)
	}
	hc.release(t)
	holder.wait(t, time.Minute)
}

// TestBinary_progressRedrawnOnlyOnATerminal: the demo's status line is
// redrawn in place (carriage returns) on a terminal, and written as plain
// lines when stderr is a pipe.
func TestBinary_progressRedrawnOnlyOnATerminal(t *testing.T) {
	args := []string{"demo", "--stock", "30", "--buyers", "4", "--fail-after", "10"}
	exit, _, errOut := runBin(t, nil, args...)
	if exit != 0 || strings.Contains(errOut, "\r") || !strings.Contains(errOut, "sold 30/30") {
		t.Fatalf("demo with stderr a pipe: exit %d, want plain lines:\n%q", exit, errOut)
	}

	cmd := exec.Command(redlockBinary(t), args...)
	cmd.Env = cleanEnv()
	tty, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var seen bytes.Buffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&seen, tty); close(copied) }()
	if exit := exitStatus(cmd.Wait()); exit != 0 {
		t.Fatalf("demo on a terminal: exit %d", exit)
	}
	select {
	case <-copied:
	case <-time.After(30 * time.Second):
		t.Fatal("the terminal's output did not end")
	}
	if !bytes.Contains(seen.Bytes(), []byte("\r  sold ")) {
		t.Fatalf("demo on a terminal: the status line was not redrawn:\n%q", seen.String())
	}
}
