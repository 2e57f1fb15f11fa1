package main

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// passwordServer starts a redis-server that requires password pw on a free
// loopback port and returns its address; it is stopped by PID when the test
// ends. Without redis-server the test is skipped, except in CI.
func passwordServer(t *testing.T, pw string) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed; CI runs these tests against it")
		}
		t.Skip("needs redis-server")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "",
		"--appendonly", "no", "--requirepass", pw, "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not start", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExec_realServerWithPassword: exec and status reach redis-server
// nodes with requirepass through redis:// URLs and through
// REDLOCK_PASSWORD; without the password the exit status is 78, and the
// password is never printed.
func TestExec_realServerWithPassword(t *testing.T) {
	var plain, urls []string
	for range 3 {
		a := passwordServer(t, "s3cret")
		plain = append(plain, a)
		urls = append(urls, "redis://:s3cret@"+a+"/0")
	}
	t.Setenv("REDLOCK_PASSWORD", "")
	t.Setenv("REDISCLI_AUTH", "")
	exit, out, errOut := runCmd(t, "exec", "--addrs", strings.Join(urls, ","), "--key", "k", "--ttl", "5s", "--", "echo", "ran")
	if exit != 0 || !strings.Contains(out, "ran") {
		t.Fatalf("through URLs: exit %d (%s%s)", exit, out, errOut)
	}
	exit, _, errOut = runCmd(t, "exec", "--addrs", strings.Join(plain, ","), "--key", "k", "--ttl", "5s", "--", "true")
	if exit != exitConfig {
		t.Fatalf("without the password: exit %d, want %d (%s)", exit, exitConfig, errOut)
	}
	wrong := strings.ReplaceAll(strings.Join(urls, ","), "s3cret", "wr0ng-pass")
	exit, out, errOut = runCmd(t, "exec", "--addrs", wrong, "--key", "k", "--ttl", "5s", "--", "true")
	if exit != exitConfig || strings.Contains(out+errOut, "wr0ng-pass") {
		t.Fatalf("a wrong password: exit %d, want %d, and no password printed (%s%s)", exit, exitConfig, out, errOut)
	}
	t.Setenv("REDLOCK_PASSWORD", "s3cret")
	exit, out, errOut = runCmd(t, "exec", "--addrs", strings.Join(plain, ","), "--key", "k", "--ttl", "5s", "--", "echo", "ran")
	if exit != 0 || !strings.Contains(out, "ran") {
		t.Fatalf("through REDLOCK_PASSWORD: exit %d (%s%s)", exit, out, errOut)
	}
	if exit, out, errOut := runCmd(t, "status", "--addrs", strings.Join(plain, ","), "k"); exit != 0 || strings.Contains(out+errOut, "s3cret") {
		t.Fatalf("status: exit %d (%s%s)", exit, out, errOut)
	}
}
