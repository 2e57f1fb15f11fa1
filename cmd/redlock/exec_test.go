package main

import (
	"context"
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
	exit, _, errOut := runCmd(t, "exec", "--addrs", addrs, "--key", "nightly", "--ttl", "600ms", "--grace", "1s", "--",
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
