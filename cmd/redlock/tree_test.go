//go:build linux

package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The command's whole tree, not only the command, ends with its lock: each
// test runs the built binary on real redis-server nodes with a command
// (sh) whose child, the grandchild, is this test binary recording the
// signals it gets and living on for an hour after each (see
// runTestChild), and checks that the grandchild is gone after the event,
// well before the lock's validity plus a wide margin is over.

// treeCommand is sh running the recording grandchild in the background
// and waiting for it.
func treeCommand(t *testing.T) (gc child, argv []string) {
	t.Helper()
	gc = newChild(t, "signals")
	words := append([]string{gc.argv[0], childLingerEnv + "=1h"}, gc.argv[1:]...)
	for i, w := range words {
		words[i] = "'" + w + "'"
	}
	return gc, []string{"sh", "-c", strings.Join(words, " ") + " & wait"}
}

// startTree starts redlock with args, then "--" and the tree's command,
// and returns once the grandchild runs, with its pid.
func startTree(t *testing.T, args ...string) (*proc, child, int) {
	t.Helper()
	return startTreeWith(t, nil, args...)
}

// startTreeWith is startTree with setup applied to redlock's command
// before it starts.
func startTreeWith(t *testing.T, setup func(*exec.Cmd), args ...string) (*proc, child, int) {
	t.Helper()
	gc, argv := treeCommand(t)
	p := startBinWith(t, setup, nil, append(append(args, "--"), argv...)...)
	gc.waitReady(t)
	pid, err := strconv.Atoi(gc.pid(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // left behind by a failing test
	return p, gc, pid
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || !strings.HasPrefix(string(b[i+1:]), " Z")
}

// goneWithin fails the test unless pid has ended within limit of since.
func goneWithin(t *testing.T, pid int, since time.Time, limit time.Duration, what string) {
	t.Helper()
	for alive(pid) {
		if time.Since(since) > limit {
			t.Fatalf("%s: pid %d still runs %v after it", what, pid, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deleteKey deletes key on every node, as after the nodes lost it.
func deleteKey(t *testing.T, addrs []string, key string) time.Time {
	t.Helper()
	for _, a := range addrs {
		if err := admin(t, a, "").Del(context.Background(), key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return time.Now()
}

// TestBinary_lostLockStopsTheTree: when the lock (exec) or the leadership
// (elect) is lost, the grandchild gets SIGTERM too and, living on, is
// killed by the end of the validity (under the ttl after the loss)
// although --grace is a minute. It used to run on, re-parented, without a
// bound.
func TestBinary_lostLockStopsTheTree(t *testing.T) {
	addrs, nodes := treeNodes(t)
	const ttl = 3 * time.Second
	for _, args := range [][]string{
		{"exec", "--addrs", nodes, "--key", "tree-lost", "--ttl", ttl.String(), "--grace", "1m"},
		{"elect", "tree-lost-e", "--addrs", nodes, "--ttl", ttl.String(), "--grace", "1m", "--once"},
	} {
		p, gc, pid := startTree(t, args...)
		for _, a := range addrs { // the nodes lose every key
			if err := admin(t, a, "").FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		lost := time.Now()
		goneWithin(t, pid, lost, ttl+5*time.Second, args[0]+": lock lost")
		if exit := p.wait(t, time.Minute); exit != exitLockLost {
			t.Errorf("%s: exit %d, want %d\n%s", args[0], exit, exitLockLost, p.errOut.String())
		}
		if got := strings.Join(gc.signals(t), " "); got != "TERM" {
			t.Errorf("%s: the grandchild got %q, want TERM once", args[0], got)
		}
	}
}

// TestBinary_execCommandReadsTheTerminal: exec's command, in a process
// group of its own, has the terminal's foreground: it reads what is typed
// (a background group would be stopped by SIGTTIN).
func TestBinary_execCommandReadsTheTerminal(t *testing.T) {
	_, nodes := treeNodes(t)
	out := filepath.Join(t.TempDir(), "typed")
	_, exited, term := startInTerminal(t, "exec", "--addrs", nodes, "--key", "tree-tty", "--ttl", "10s", "--",
		"sh", "-c", "read line; echo \"$line\" > '"+out+"'")
	waitFor(t, 30*time.Second, "the command to read the terminal", func() bool {
		_, _ = term.Write([]byte("typed\n")) // until the command has read a line
		return readFileIfAny(out) != ""
	})
	if exit := waitExit(t, exited); exit != 0 {
		t.Fatalf("exit %d", exit)
	}
	if got := strings.TrimSpace(readFileIfAny(out)); got != "typed" {
		t.Fatalf("the command read %q, want typed", got)
	}
}

// TestBinary_treeKilledAtTheEndOfGrace: a grandchild that lives on after
// SIGTERM is killed --grace after the loss, long before the end of the
// lock's validity (ttl 30 s).
func TestBinary_treeKilledAtTheEndOfGrace(t *testing.T) {
	addrs, nodes := treeNodes(t)
	const grace = time.Second
	p, _, pid := startTree(t, "exec", "--addrs", nodes, "--key", "tree-grace", "--ttl", "30s", "--grace", grace.String())
	deleteKey(t, addrs, "tree-grace")
	// The renewal (every 10 s) finds the lock lost; its validity then has
	// 20 s left.
	waitFor(t, 30*time.Second, "the loss to be told", func() bool { return strings.Contains(p.errOut.String(), "lost") })
	goneWithin(t, pid, time.Now(), grace+5*time.Second, "end of grace")
	if exit := p.wait(t, time.Minute); exit != exitLockLost {
		t.Errorf("exit %d, want %d\n%s", exit, exitLockLost, p.errOut.String())
	}
}

// TestBinary_forwardedSignalsReachTheTree: SIGTERM and SIGINT sent to
// redlock reach the grandchild, once, and a grandchild that lives on is
// killed --grace later, its lock held meanwhile. They used to reach the
// command only: the grandchild ran on after redlock had released the lock.
func TestBinary_forwardedSignalsReachTheTree(t *testing.T) {
	_, nodes := treeNodes(t)
	const grace = time.Second
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		p, gc, pid := startTree(t, "exec", "--addrs", nodes, "--key", "tree-sig", "--ttl", "30s", "--grace", grace.String())
		sent := time.Now()
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		goneWithin(t, pid, sent, grace+5*time.Second, sig.String()+" forwarded")
		p.wait(t, time.Minute)
		if got, want := strings.Join(gc.signals(t), " "), unixSignalName(sig); got != want {
			t.Errorf("%v sent to redlock: the grandchild got %q, want %q once", sig, got, want)
		}
	}
}

// TestBinary_treeDiesWithRedlock: redlock killed with SIGKILL, by exec or
// elect, takes the command's whole tree with it. The grandchild used to
// be re-parented and run on beside the next holder's command.
func TestBinary_treeDiesWithRedlock(t *testing.T) {
	_, nodes := treeNodes(t)
	for _, args := range [][]string{
		{"exec", "--addrs", nodes, "--key", "tree-kill", "--ttl", "30s"},
		{"elect", "tree-kill-e", "--addrs", nodes, "--ttl", "30s"},
	} {
		p, _, pid := startTree(t, args...)
		killed := time.Now()
		_ = p.cmd.Process.Kill()
		goneWithin(t, pid, killed, 10*time.Second, args[0]+" killed")
		p.wait(t, time.Minute)
	}
}

// TestBinary_frozenRedlockCannotKeepTheTree: redlock frozen (SIGSTOP) for
// longer than the ttl cannot keep the command's tree running past the
// lock's validity (under the ttl after the freeze): the watchdog kills it.
// The command and its grandchild used to work on for the whole freeze.
func TestBinary_frozenRedlockCannotKeepTheTree(t *testing.T) {
	_, nodes := treeNodes(t)
	const ttl = 2 * time.Second
	for _, args := range [][]string{
		{"exec", "--addrs", nodes, "--key", "tree-frozen", "--ttl", ttl.String(), "--grace", "1m"},
		{"elect", "tree-frozen-e", "--addrs", nodes, "--ttl", ttl.String(), "--grace", "1m", "--once"},
	} {
		p, _, pid := startTree(t, args...)
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		frozen := time.Now()
		goneWithin(t, pid, frozen, ttl+4*time.Second, args[0]+" frozen")
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		if exit := p.wait(t, time.Minute); exit != exitLockLost {
			t.Errorf("%s frozen beyond its ttl: exit %d, want %d\n%s", args[0], exit, exitLockLost, p.errOut.String())
		}
	}
}

// inGroupOfItsOwn starts redlock in a new process group, as a shell's job.
func inGroupOfItsOwn(c *exec.Cmd) { c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} }

// TestBinary_treeDiesWithRedlocksGroup: redlock's whole process group
// killed with SIGKILL (timeout -s KILL, kill -9 -PGID, a shell's kill -9
// %job) takes the command's whole tree with it. The watchdog used to be in
// redlock's group and die with it: the grandchild ran on under init.
func TestBinary_treeDiesWithRedlocksGroup(t *testing.T) {
	_, nodes := treeNodes(t)
	for _, args := range [][]string{
		{"exec", "--addrs", nodes, "--key", "tree-pgkill", "--ttl", "30s"},
		{"elect", "tree-pgkill-e", "--addrs", nodes, "--ttl", "30s"},
	} {
		p, _, pid := startTreeWith(t, inGroupOfItsOwn, args...)
		killed := time.Now()
		if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		goneWithin(t, pid, killed, 10*time.Second, args[0]+"'s group killed")
		p.wait(t, time.Minute)
	}
}

// TestBinary_frozenGroupCannotKeepTheTree: redlock's whole process group
// stopped (SIGSTOP; a Ctrl-Z on elect, whose command does not take the
// terminal) for longer than the ttl cannot keep the command's tree running
// past the lock's validity. The watchdog used to be stopped with redlock:
// nothing killed the tree.
func TestBinary_frozenGroupCannotKeepTheTree(t *testing.T) {
	_, nodes := treeNodes(t)
	const ttl = 2 * time.Second
	for _, args := range [][]string{
		{"exec", "--addrs", nodes, "--key", "tree-pgstop", "--ttl", ttl.String(), "--grace", "1m"},
		{"elect", "tree-pgstop-e", "--addrs", nodes, "--ttl", ttl.String(), "--grace", "1m", "--once"},
	} {
		p, _, pid := startTreeWith(t, inGroupOfItsOwn, args...)
		group := -p.cmd.Process.Pid
		t.Cleanup(func() { _ = syscall.Kill(group, syscall.SIGCONT) })
		if err := syscall.Kill(group, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		frozen := time.Now()
		goneWithin(t, pid, frozen, ttl+4*time.Second, args[0]+"'s group frozen")
		_ = syscall.Kill(group, syscall.SIGCONT)
		if exit := p.wait(t, time.Minute); exit != exitLockLost {
			t.Errorf("%s's group frozen beyond its ttl: exit %d, want %d\n%s", args[0], exit, exitLockLost, p.errOut.String())
		}
	}
}

// TestBinary_stoppedWatchdogCannotKeepTheTree: with the watchdog alone
// stopped (SIGSTOP), a lost lock's tree is still killed by the end of the
// validity: redlock kills the command's group itself. redlock used to
// tell the stopped watchdog and wait: the tree ran on beside the next
// holder's.
func TestBinary_stoppedWatchdogCannotKeepTheTree(t *testing.T) {
	addrs, nodes := treeNodes(t)
	const ttl = 3 * time.Second
	for _, args := range [][]string{
		{"exec", "--addrs", nodes, "--key", "tree-wdstop", "--ttl", ttl.String(), "--grace", "1m"},
		{"elect", "tree-wdstop-e", "--addrs", nodes, "--ttl", ttl.String(), "--grace", "1m", "--once"},
	} {
		p, _, pid := startTree(t, args...)
		watchdog := parent(t, parent(t, pid)) // the grandchild's parent is the command (sh)
		t.Cleanup(func() { _ = syscall.Kill(watchdog, syscall.SIGCONT) })
		if err := syscall.Kill(watchdog, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs { // the nodes lose every key
			if err := admin(t, a, "").FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		lost := time.Now()
		goneWithin(t, pid, lost, ttl+5*time.Second, args[0]+": lock lost with the watchdog stopped")
		_ = syscall.Kill(watchdog, syscall.SIGCONT)
		if exit := p.wait(t, time.Minute); exit != exitLockLost {
			t.Errorf("%s: exit %d, want %d\n%s", args[0], exit, exitLockLost, p.errOut.String())
		}
	}
}

// TestBinary_undrainedStderrDoesNotDelayTheStop: with a stderr that does
// not drain (a full pipe), the lost lock's tree is still stopped, and
// killed at the end of the grace: the loss is written after the stop. The
// write used to come first, and block: nothing was stopped.
func TestBinary_undrainedStderrDoesNotDelayTheStop(t *testing.T) {
	addrs, nodes := treeNodes(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	gc, argv := treeCommand(t)
	const ttl = 3 * time.Second
	cmd := exec.Command(redlockBinary(t), append([]string{"exec", "--addrs", nodes, "--key", "tree-stderr", "--ttl", ttl.String(), "--grace", "1s", "--"}, argv...)...)
	cmd.Env = cleanEnv()
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); r.Close(); <-done })
	gc.waitReady(t)
	pid, _ := strconv.Atoi(gc.pid(t))
	sh := parent(t, pid) // the command
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL); _ = syscall.Kill(sh, syscall.SIGKILL) })

	// Fill the pipe through a file description of its own, non-blocking,
	// so that redlock's next write to stderr blocks.
	fd, err := syscall.Open(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "fd", "2"), syscall.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for range 1 << 12 { // at most 16 MiB: a pipe holds 64 KiB by default
		if _, err := syscall.Write(fd, chunk); err != nil {
			if !errors.Is(err, syscall.EAGAIN) {
				t.Fatal(err)
			}
			break
		}
	}
	syscall.Close(fd)

	lost := deleteKey(t, addrs, "tree-stderr")
	goneWithin(t, sh, lost, ttl+5*time.Second, "lock lost with stderr full (the command)")
	goneWithin(t, pid, lost, ttl+5*time.Second, "lock lost with stderr full (the grandchild)")
}

// parent is pid's parent's pid.
func parent(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

// TestBinary_daemonisedGrandchildIsCaught: a grandchild that left the
// command's session and process group (setsid) and whose parent exited,
// as a daemon does, is still the watchdog's (its subreaper): it is
// stopped when the command exits, before the lock is released, and killed
// when redlock is. It used to run on, re-parented to init.
func TestBinary_daemonisedGrandchildIsCaught(t *testing.T) {
	_, nodes := treeNodes(t)
	for _, kill := range []bool{false, true} {
		gc := newChild(t, "signals")
		words := append([]string{"setsid", gc.argv[0], childLingerEnv + "=1h"}, gc.argv[1:]...)
		for i, w := range words {
			words[i] = "'" + w + "'"
		}
		// The command's child (sh) starts the grandchild in a session of
		// its own and exits; the command exits once the grandchild runs,
		// or runs on.
		script := "sh -c \"" + strings.Join(words, " ") + " &\"; while [ ! -e '" + gc.file + ".ready' ]; do sleep 0.05; done"
		if kill {
			script += "; exec sleep 300"
		}
		p := startBin(t, nil, "exec", "--addrs", nodes, "--key", "tree-daemon", "--ttl", "30s", "--grace", "1s", "--", "sh", "-c", script)
		gc.waitReady(t)
		pid, _ := strconv.Atoi(gc.pid(t))
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
		if pgid, _ := syscall.Getpgid(pid); pgid != pid {
			t.Fatalf("the grandchild is in process group %d, want one of its own", pgid)
		}
		since := time.Now()
		if kill {
			_ = p.cmd.Process.Kill()
		}
		goneWithin(t, pid, since, 10*time.Second, map[bool]string{false: "the command exited", true: "redlock killed"}[kill])
		p.wait(t, time.Minute)
	}
}

// TestBinary_electCtrlCReachesTheTreeOnce: a Ctrl-C typed in the terminal
// where redlock elect runs reaches the command's tree once: the terminal
// signals redlock's group, which holds neither the watchdog nor the
// command, and redlock passes it on.
func TestBinary_electCtrlCReachesTheTreeOnce(t *testing.T) {
	_, nodes := treeNodes(t)
	gc, argv := treeCommand(t)
	_, exited, term := startInTerminal(t, append([]string{"elect", "tree-tty-e", "--addrs", nodes, "--ttl", "10s", "--grace", "1s", "--"}, argv...)...)
	gc.waitReady(t)
	if _, err := term.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	waitExit(t, exited)
	if got := strings.Join(gc.signals(t), " "); got != "INT" {
		t.Fatalf("one Ctrl-C: the grandchild got %q, want INT once", got)
	}
}
