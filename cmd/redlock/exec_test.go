package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/redlock"
)

// execNodes starts 3 embedded nodes and returns them and their addresses
// as --addrs takes them.
func execNodes(t *testing.T) ([]*miniredis.Miniredis, string) {
	t.Helper()
	var (
		servers []*miniredis.Miniredis
		addrs   []string
	)
	for range 3 {
		s := miniredis.RunT(t)
		servers = append(servers, s)
		addrs = append(addrs, s.Addr())
	}
	return servers, strings.Join(addrs, ",")
}

func TestExec_runsTheCommandAndPassesItsStatus(t *testing.T) {
	servers, addrs := execNodes(t)
	marker := filepath.Join(t.TempDir(), "ran")
	exit, out, errOut := runCmd(t, "exec", "--addrs", addrs, "--key", "nightly", "--ttl", "5s", "--",
		"sh", "-c", "touch "+marker+"; echo hello; exit 3")
	if exit != 3 {
		t.Fatalf("exit %d, want the command's 3\nstdout: %s\nstderr: %s", exit, out, errOut)
	}
	if !strings.Contains(out, "hello") {
		t.Errorf("the command's output was not passed through: %q", out)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the command did not run")
	}
	// Release waits for every node, so nothing is left once exec returns.
	for i, s := range servers {
		if s.Exists("nightly") {
			t.Fatalf("node %d keeps the lock after the command exited", i)
		}
	}
}

func TestExec_notAcquired(t *testing.T) {
	_, addrs := execNodes(t)
	clients := []redis.UniversalClient{}
	for _, a := range strings.Split(addrs, ",") {
		c := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	other, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	held, err := other.TryAcquire(context.Background(), "nightly", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(context.Background())

	marker := filepath.Join(t.TempDir(), "ran")
	exit, _, errOut := runCmd(t, "exec", "--addrs", addrs, "--key", "nightly", "--ttl", "5s", "--wait", "100ms", "--",
		"touch", marker)
	if exit != exitNotAcquired || !strings.Contains(errOut, "not acquired") {
		t.Fatalf("exit %d (%s), want %d", exit, errOut, exitNotAcquired)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran without the lock")
	}
}

// TestExec_lockLostStopsTheCommand: the renewal finds the lock taken over
// and the command is stopped. The ttl (3 s, a node timeout of 300 ms)
// leaves room for a loaded machine's slow replies.
func TestExec_lockLostStopsTheCommand(t *testing.T) {
	servers, addrs := execNodes(t)
	go func() {
		// Another process's lock takes the key on every node once the
		// command runs, as after the nodes lost it.
		for !servers[0].Exists("nightly") {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		for _, s := range servers {
			s.Set("nightly", "someone else")
		}
	}()
	start := time.Now()
	exit, _, errOut := runCmd(t, "exec", "--addrs", addrs, "--key", "nightly", "--ttl", "3s", "--grace", "1s", "--",
		"sleep", "30")
	if exit != exitLockLost || !strings.Contains(errOut, "lost") {
		t.Fatalf("exit %d (%s), want %d", exit, errOut, exitLockLost)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the command was stopped after %v", took)
	}
}

func TestExec_usage(t *testing.T) {
	t.Setenv("REDLOCK_ADDRS", "")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "--ttl", "1s", "--addrs", "a:1", "--", "true"}, "--key is required"},
		{[]string{"exec", "--key", "k", "--addrs", "a:1", "--", "true"}, "--ttl is required"},
		{[]string{"exec", "--key", "k", "--ttl", "1s", "--", "true"}, "no nodes"},
		{[]string{"exec", "--key", "k", "--ttl", "1s", "--addrs", "a:1"}, "no command"},
		{[]string{"exec", "--key", "k", "--ttl", "1s", "--addrs", "a:1", "--grace", "-1s", "--", "true"}, "cannot be negative"},
	} {
		exit, out, errOut := runCmd(t, tt.args...)
		if exit != 2 || !strings.Contains(out+errOut, tt.want) {
			t.Errorf("redlock %v: exit %d, output %q; want 2 mentioning %q", tt.args, exit, out+errOut, tt.want)
		}
	}
	if exit, out, errOut := runCmd(t, "exec", "--help"); exit != 0 || !strings.Contains(out+errOut, "flock(1)") {
		t.Errorf("exec --help: exit %d, %q", exit, out+errOut)
	}
}

// TestExec_exitCodes: a cron wrapper can tell another holder (75) from
// nodes out of reach (69), a configuration error (78), and a command that
// is missing (127) or not executable (126).
// notExecutable returns the path of a script without the execute bit.
func notExecutable(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestExec_exitCodes(t *testing.T) {
	servers, addrs := execNodes(t)
	notExec := notExecutable(t)
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"not found", []string{"--addrs", addrs, "--", "no-such-command-here"}, exitNotFound},
		{"not executable", []string{"--addrs", addrs, "--", notExec}, exitNotExecutable},
		{"bad URL", []string{"--addrs", "redis://user:s3cret@host:notaport/x", "--", "true"}, exitConfig},
		{"unreachable", []string{"--addrs", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "--", "true"}, exitUnavailable},
	} {
		exit, _, errOut := runCmd(t, append([]string{"exec", "--key", "k", "--ttl", "2s"}, tc.args...)...)
		if exit != tc.want {
			t.Errorf("%s: exit %d, want %d (%s)", tc.name, exit, tc.want, errOut)
		}
		if strings.Contains(errOut, "s3cret") {
			t.Errorf("%s: the password was printed: %s", tc.name, errOut)
		}
	}
	for _, s := range servers[:2] {
		s.RequireAuth("pw")
	}
	exit, _, errOut := runCmd(t, "exec", "--addrs", addrs, "--key", "k", "--ttl", "2s", "--", "true")
	if exit != exitConfig || !strings.Contains(errOut, "REDLOCK_PASSWORD") || strings.Contains(errOut, "client's options") {
		t.Errorf("missing password: exit %d, want %d, and a hint in the command's terms (REDLOCK_PASSWORD): %s", exit, exitConfig, errOut)
	}
	t.Setenv("REDLOCK_PASSWORD", "pw")
	servers[2].RequireAuth("pw")
	if exit, _, errOut := runCmd(t, "exec", "--addrs", addrs, "--key", "k", "--ttl", "2s", "--", "true"); exit != 0 {
		t.Errorf("password from REDLOCK_PASSWORD: exit %d (%s)", exit, errOut)
	}
}

// TestStatusAndUnlock: status shows the holder's token and the metadata
// exec stores; unlock refuses without the token, and releases with it.
func TestStatusAndUnlock(t *testing.T) {
	_, addrs := execNodes(t)
	started := make(chan struct{})
	done := make(chan int, 1)
	marker := filepath.Join(t.TempDir(), "started")
	go func() {
		exit, _, _ := runCmd(t, "exec", "--addrs", addrs, "--key", "job", "--ttl", "5s", "--", "sh", "-c", "touch "+marker+"; exec sleep 30")
		done <- exit
	}()
	go func() {
		for {
			if _, err := os.Stat(marker); err == nil {
				close(started)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	<-started
	exit, out, errOut := runCmd(t, "status", "--addrs", addrs, "job")
	if exit != 0 || !strings.Contains(out, "held by ") || !strings.Contains(out, "cmd=sh -c touch") || !strings.Contains(out, "on 3 of 3 nodes") {
		t.Fatalf("status: exit %d\n%s%s", exit, out, errOut)
	}
	token := strings.Fields(out[strings.Index(out, "held by ")+len("held by "):])[0]

	if exit, _, errOut := runCmd(t, "unlock", "--addrs", addrs, "job"); exit != 2 || !strings.Contains(errOut, "--token is required") {
		t.Fatalf("unlock without a token: exit %d (%s)", exit, errOut)
	}
	if exit, _, errOut := runCmd(t, "unlock", "--addrs", addrs, "--token", "NOTTHETOKEN", "job"); exit != 1 {
		t.Fatalf("unlock with another token: exit %d (%s)", exit, errOut)
	}
	if exit, out, errOut := runCmd(t, "unlock", "--addrs", addrs, "--token", token, "job"); exit != 0 || !strings.Contains(out, "released") {
		t.Fatalf("unlock: exit %d (%s%s)", exit, out, errOut)
	}
	// exec finds its lock gone at its next renewal and stops the command.
	select {
	case exit := <-done:
		if exit != exitLockLost {
			t.Fatalf("exec: exit %d, want %d", exit, exitLockLost)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("exec did not stop after its lock was released elsewhere")
	}
	if exit, out, _ := runCmd(t, "status", "--addrs", addrs, "job"); exit != 0 || !strings.Contains(out, "not held") {
		t.Fatalf("status after unlock: exit %d\n%s", exit, out)
	}
}

// TestExec_commandKnowsItsLock: the command finds its lock's key, token
// and fencing token in its environment, not the nodes' password; the
// lock's metadata names the command's own pid, and exit 75 says who holds
// the lock.
func TestExec_commandKnowsItsLock(t *testing.T) {
	_, addrs := execNodes(t)
	t.Setenv("REDLOCK_PASSWORD", "")
	t.Setenv("REDISCLI_AUTH", "")
	dir := t.TempDir()
	envFile, pidFile, goFile := filepath.Join(dir, "env"), filepath.Join(dir, "pid"), filepath.Join(dir, "go")
	// The command records its environment and pid, then waits (at most
	// 20 s) for the test to look at the lock.
	script := "env > " + envFile + "; echo $$ > " + pidFile + "; i=0; while [ ! -e " + goFile + " ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done"
	type result struct {
		exit        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		exit, out, errOut := runCmd(t, "exec", "--addrs", addrs, "--key", "job", "--ttl", "5s", "--fencing", "--", "sh", "-c", script)
		done <- result{exit, out, errOut}
	}()
	waitForFile(t, pidFile)
	pid := strings.TrimSpace(readFile(t, pidFile))
	env := readFile(t, envFile)

	clients := dialAll(t, addrs)
	other, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	in, err := other.Inspect(context.Background(), "job")
	if err != nil || !in.Held() {
		t.Fatalf("Inspect: %+v, %v", in, err)
	}
	h := in.Holders[0]
	if !strings.Contains(h.Metadata, "pid="+pid+" ") {
		t.Errorf("metadata %q does not name the command's pid %s", h.Metadata, pid)
	}
	for _, want := range []string{"REDLOCK_KEY=job\n", "REDLOCK_TOKEN=" + h.Token + "\n", "REDLOCK_FENCING_TOKEN="} {
		if !strings.Contains(env, want) {
			t.Errorf("the command's environment lacks %q", want)
		}
	}
	// Another exec on the key is told who holds it.
	exit, _, errOut := runCmd(t, "exec", "--addrs", addrs, "--key", "job", "--ttl", "5s", "--", "true")
	if exit != exitNotAcquired || !strings.Contains(errOut, "held by host=") || !strings.Contains(errOut, "pid="+pid) || !strings.Contains(errOut, "cmd=sh -c") {
		t.Errorf("second exec: exit %d, %q; want %d naming the holder's host, pid and command", exit, errOut, exitNotAcquired)
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.exit != 0 {
		t.Fatalf("exit %d: %s", r.exit, r.errOut)
	}
}

// TestExec_passwordIsNotInherited: the nodes' password reaches redlock but
// not the command.
func TestExec_passwordIsNotInherited(t *testing.T) {
	servers, addrs := execNodes(t)
	for _, s := range servers {
		s.RequireAuth("s3cret")
	}
	envFile := filepath.Join(t.TempDir(), "env")
	for _, v := range []string{"REDLOCK_PASSWORD", "REDISCLI_AUTH"} {
		t.Run(v, func(t *testing.T) {
			t.Setenv("REDLOCK_PASSWORD", "")
			t.Setenv("REDISCLI_AUTH", "")
			t.Setenv(v, "s3cret")
			t.Setenv("OTHER_VAR", "kept")
			exit, _, errOut := runCmd(t, "exec", "--addrs", addrs, "--key", "pw", "--ttl", "5s", "--", "sh", "-c", "env > "+envFile)
			if exit != 0 {
				t.Fatalf("exit %d: %s", exit, errOut)
			}
			env := readFile(t, envFile)
			if strings.Contains(env, "s3cret") {
				t.Errorf("the command inherited the password:\n%s", env)
			}
			if !strings.Contains(env, "OTHER_VAR=kept") {
				t.Errorf("the command lost the rest of the environment")
			}
		})
	}
}

// TestExec_permits: with --permits 2, two commands run at once, a third
// is refused.
func TestExec_permits(t *testing.T) {
	_, addrs := execNodes(t)
	dir := t.TempDir()
	goFile := filepath.Join(dir, "go")
	var started []string
	done := make(chan int, 2)
	for i := range 2 {
		f := filepath.Join(dir, fmt.Sprint("started", i))
		started = append(started, f)
		go func() {
			exit, _, _ := runCmd(t, "exec", "--addrs", addrs, "--key", "pool", "--ttl", "5s", "--permits", "2", "--",
				"sh", "-c", "touch "+f+"; i=0; while [ ! -e "+goFile+" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done")
			done <- exit
		}()
	}
	for _, f := range started {
		waitForFile(t, f)
	}
	if exit, _, errOut := runCmd(t, "exec", "--addrs", addrs, "--key", "pool", "--ttl", "5s", "--permits", "2", "--", "true"); exit != exitNotAcquired {
		t.Errorf("a third holder of 2 permits: exit %d (%s), want %d", exit, errOut, exitNotAcquired)
	}
	if err := os.WriteFile(goFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if exit := <-done; exit != 0 {
			t.Errorf("a permit holder exited %d", exit)
		}
	}
	if exit, _, _ := runCmd(t, "exec", "--addrs", addrs, "--key", "pool", "--ttl", "5s", "--permits", "-1", "--", "true"); exit != 2 {
		t.Errorf("--permits -1: exit %d, want 2", exit)
	}
}

func waitForFile(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(name); err == nil {
			if b, _ := os.ReadFile(name); len(b) > 0 || strings.Contains(name, "started") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func dialAll(t *testing.T, addrs string) []redis.UniversalClient {
	t.Helper()
	var clients []redis.UniversalClient
	for _, a := range strings.Split(addrs, ",") {
		c := redis.NewClient(&redis.Options{Addr: a})
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	return clients
}

// TestExec_lostLockKillsAtTheEndOfItsValidity: a command that ignores
// SIGTERM after its lock is lost is killed when the lock's validity ends,
// not after --grace, so that it does not run beside the next holder's
// command. It used to run on for the whole grace (10 s by default).
func TestExec_lostLockKillsAtTheEndOfItsValidity(t *testing.T) {
	servers, addrs := execNodes(t)
	go func() {
		for !servers[0].Exists("nightly") {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond)
		for _, s := range servers[:2] { // a majority fails every call: the renewals fail
			s.SetError("ERR the node is down")
		}
	}()
	start := time.Now()
	exit, _, errOut := runCmd(t, "exec", "--addrs", addrs, "--key", "nightly", "--ttl", "3s", "--grace", "1m", "--",
		"sh", "-c", "trap '' TERM; exec sleep 120")
	if exit != exitLockLost {
		t.Fatalf("exit %d (%s), want %d", exit, errOut, exitLockLost)
	}
	// The lock's validity is under 3 s; the grace a minute.
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the command was killed after %v, past the lock's validity", took)
	}
}
