package main

import (
	"strings"
	"testing"
)

// TestRedact: no form of address prints its password.
func TestRedact(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"127.0.0.1:6379", "127.0.0.1:6379"},
		{"redis://:pw-1@127.0.0.1:6379/0", "redis://xxxxx@127.0.0.1:6379/0"},
		{"rediss://user:pw-1@h:6380", "rediss://xxxxx@h:6380"},
		{"redis://default:12/34pw-1@127.0.0.1:6379/0", "redis://xxxxx@127.0.0.1:6379/0"},
		{"redis://user:p%40w-1@h:1", "redis://xxxxx@h:1"},
		{"redis://h:1/0?password=pw-1&dial_timeout=1s", "redis://h:1/0?password=xxxxx&dial_timeout=1s"},
		{"default:pw-1@127.0.0.1:6379", "xxxxx@127.0.0.1:6379"},
		{"redis://u:a@b@h:1", "redis://xxxxx@h:1"},
	} {
		got := redact(tt.in)
		if got != tt.want || strings.Contains(got, "pw-1") {
			t.Errorf("redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestNodeFlags_passwordNeverPrinted: --help does not show REDLOCK_ADDRS's
// value, and an address that is not a URL but holds a password is refused
// without repeating it.
func TestNodeFlags_passwordNeverPrinted(t *testing.T) {
	t.Setenv("REDLOCK_ADDRS", "redis://:pw-1@127.0.0.1:1")
	for _, cmd := range []string{"exec", "status", "unlock"} {
		if exit, out, errOut := runCmd(t, cmd, "--help"); exit != 0 || strings.Contains(out+errOut, "pw-1") {
			t.Errorf("%s --help: exit %d, prints the password:\n%s%s", cmd, exit, out, errOut)
		}
	}
	exit, out, errOut := runCmd(t, "status", "--addrs", "default:pw-1@127.0.0.1:1", "k")
	if exit != exitConfig || strings.Contains(out+errOut, "pw-1") || !strings.Contains(errOut, "REDLOCK_PASSWORD") {
		t.Errorf("an address with a password and no scheme: exit %d, want %d without the password:\n%s%s", exit, exitConfig, out, errOut)
	}
}
