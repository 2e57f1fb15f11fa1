//go:build linux

package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startDaemonTree starts redlock with args, then "--" and a command (sh)
// that writes its pid to a file, starts the recording grandchild in a
// session of its own (setsid, as a daemon does) and exits once it runs.
// It returns the command's pid and the grandchild's.
func startDaemonTree(t *testing.T, args ...string) (p *proc, command, gcPid int) {
	t.Helper()
	gc := newChild(t, "signals")
	words := append([]string{"setsid", gc.argv[0], childLingerEnv + "=1h"}, gc.argv[1:]...)
	for i, w := range words {
		words[i] = "'" + w + "'"
	}
	pidFile := filepath.Join(t.TempDir(), "command.pid")
	script := "echo $$ > '" + pidFile + "'; sh -c \"" + strings.Join(words, " ") + " &\"; while [ ! -e '" + gc.file + ".ready' ]; do sleep 0.05; done"
	p = startBin(t, nil, append(append(args, "--"), "sh", "-c", script)...)
	gc.waitReady(t)
	gcPid, _ = strconv.Atoi(gc.pid(t))
	t.Cleanup(func() { _ = syscall.Kill(gcPid, syscall.SIGKILL) })
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	if command, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		t.Fatal(err)
	}
	return p, command, gcPid
}

// TestBinary_commandPidHeldWhileItsTreeRuns: once the command has exited,
// leaving a daemon outside its process group, its pid (the group's ID,
// which the watchdog signals until the tree has ended) stays taken, a
// zombie, until the daemon has ended at the end of --grace: no other
// process can have it when the group is killed. The watchdog used to reap
// the command at once: a process that got its pid meanwhile, as a group
// leader, was killed at the end of the grace.
func TestBinary_commandPidHeldWhileItsTreeRuns(t *testing.T) {
	_, nodes := treeNodes(t)
	p, command, gc := startDaemonTree(t, "exec", "--addrs", nodes, "--key", "tree-pid", "--ttl", "30s", "--grace", "3s")
	for n := 0; alive(gc); n++ {
		if syscall.Kill(command, 0) != nil {
			t.Fatalf("the command's pid %d was given up while its tree runs (look %d)", command, n)
		}
		if n > 3000 { // 60 s
			t.Fatal("the daemon outlived the grace")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if exit := p.wait(t, time.Minute); exit != 0 {
		t.Errorf("exit %d, want the command's 0\n%s", exit, p.errOut.String())
	}
}

// TestBinary_stoppedWatchdogDoesNotHangRedlock: with the watchdog stopped
// (SIGSTOP) and left stopped, redlock kills the lost lock's tree itself at
// the end of the validity, then the watchdog, and exits 76. It used to
// wait for the stopped watchdog's exit for ever.
func TestBinary_stoppedWatchdogDoesNotHangRedlock(t *testing.T) {
	addrs, nodes := treeNodes(t)
	const ttl = 3 * time.Second
	p, _, pid := startTree(t, "exec", "--addrs", nodes, "--key", "tree-wdhang", "--ttl", ttl.String(), "--grace", "1m")
	watchdog := parent(t, parent(t, pid))
	t.Cleanup(func() { _ = syscall.Kill(watchdog, syscall.SIGKILL) })
	if err := syscall.Kill(watchdog, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deleteKey(t, addrs, "tree-wdhang")
	if exit := p.wait(t, ttl+30*time.Second); exit != exitLockLost {
		t.Errorf("exit %d, want %d\n%s", exit, exitLockLost, p.errOut.String())
	}
}

// TestBinary_killedWatchdogLeavesTheKeyToExpire: after kill -9 of the
// watchdog the tree's end is not known (a daemon outside the command's
// group runs on): redlock exits with the watchdog's status and leaves the
// key on the nodes to expire rather than release it. It used to delete
// the key at once.
func TestBinary_killedWatchdogLeavesTheKeyToExpire(t *testing.T) {
	addrs, nodes := treeNodes(t)
	p, _, pid := startTree(t, "exec", "--addrs", nodes, "--key", "tree-wdkill", "--ttl", "30s", "--grace", "1s")
	watchdog := parent(t, parent(t, pid))
	if err := syscall.Kill(watchdog, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if exit := p.wait(t, time.Minute); exit != 128+int(syscall.SIGKILL) {
		t.Errorf("exit %d, want %d\n%s", exit, 128+int(syscall.SIGKILL), p.errOut.String())
	}
	for _, a := range addrs {
		if n, err := admin(t, a, "").Exists(context.Background(), "tree-wdkill").Result(); err != nil || n != 1 {
			t.Errorf("%s: the key is gone (%d, %v) after the watchdog was killed", a, n, err)
		}
	}
	if !strings.Contains(p.errOut.String(), "left to expire") {
		t.Errorf("stderr does not say the key is left to expire:\n%s", p.errOut.String())
	}
}
