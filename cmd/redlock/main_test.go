package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/chaos"
)

func TestMain(m *testing.M) {
	runWatchdog()                // the watchdog of exec's and elect's command is this test binary
	runHeldCommand()             // so is the held copy of the command
	runTestChild()               // a command for redlock exec is this test binary
	chaos.ServeEmbeddedFromEnv() // so are embedded chaos nodes
	redis.SetLogger(quietLogger{})
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left behind: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func runCmd(t *testing.T, args ...string) (exit int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	exit = run(args, &out, &errOut)
	return exit, out.String(), errOut.String()
}

func TestDemo_noOversellThroughNodeFailures(t *testing.T) {
	t.Setenv("REDLOCK_ADDRS", "")
	exit, out, errOut := runCmd(t, "demo", "--stock", "40", "--buyers", "8", "--fail-after", "15")
	if exit != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", exit, out, errOut)
	}
	if !strings.Contains(errOut, "sold 40/40  nodes down 2/5") {
		t.Errorf("no progress line on stderr:\n%s", errOut)
	}
	for _, want := range []string{"quorum lock on 5 embedded nodes (quorum 3)", "nodes [3 4] failed after 15 sales",
		"sold                     40", "oversold                  0", "OK: every item sold exactly once"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestDemo_withoutLockOversells shows that the demo's check can fail: the
// same sale without the lock sells items twice.
func TestDemo_withoutLockOversells(t *testing.T) {
	t.Setenv("REDLOCK_ADDRS", "")
	exit, out, _ := runCmd(t, "demo", "--stock", "40", "--buyers", "8", "--no-lock")
	if exit != 1 || !strings.Contains(out, "FAIL:") || strings.Contains(out, "oversold                  0") {
		t.Fatalf("exit %d, want 1 with items oversold:\n%s", exit, out)
	}
}

// TestRun_usage: help and the version on stdout with exit 0; a bad flag,
// a stray argument or a value of zero or below where a positive one is
// needed gives one line on stderr naming it, and exit 2.
func TestRun_usage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		exit int
		want string // on stdout when exit is 0, else on stderr
	}{
		{[]string{"--help"}, 0, "redlock exec --key K"},
		{[]string{"help"}, 0, "redlock exec --key K"},
		{[]string{"help", "exec"}, 0, "flock(1)"},
		{[]string{"--version"}, 0, "redlock "},
		{[]string{"version"}, 0, "redlock "},
		{[]string{"demo", "--help"}, 0, "A flash sale"},
		{[]string{"chaos", "--help"}, 0, "minority-freeze, "},
		{[]string{"lab", "--help"}, 0, "Wilson"},
		{[]string{"bench", "--help"}, 0, "comparison benchmarks"},
		{[]string{"exec", "--help"}, 0, "130, 143"},
		{[]string{"status", "-h"}, 0, "whether a quorum of the nodes agrees"},
		{[]string{"unlock", "--help"}, 0, "TOKEN"},

		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"demo", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"exec", "--key"}, 2, "flag needs an argument: -key"},
		{[]string{"exec", "--ttl", "soon"}, 2, `invalid value "soon" for flag -ttl`},
		{[]string{"demo", "stray"}, 2, `unexpected argument "stray"`},
		{[]string{"lab", "stray"}, 2, `unexpected argument "stray"`},
		{[]string{"demo", "--fail", "6"}, 2, "--fail 6"},
		{[]string{"demo", "--fail", "-1"}, 2, "--fail -1: cannot be negative"},
		{[]string{"demo", "--stock", "0"}, 2, "--stock 0: must be above zero"},
		{[]string{"demo", "--nodes", "0"}, 2, "--nodes 0: must be above zero"},
		{[]string{"demo", "--buyers", "-3"}, 2, "--buyers -3: must be above zero"},
		{[]string{"demo", "--ttl", "0s"}, 2, "--ttl 0s: must be above zero"},
		{[]string{"demo", "--timeout", "-1s"}, 2, "--timeout -1s: must be above zero"},
		{[]string{"demo", "--fail-for", "0s"}, 2, "--fail-for 0s: must be above zero"},
		{[]string{"chaos", "--server", "bogus"}, 2, `unknown server kind "bogus"`},
		{[]string{"chaos", "--only", "nope"}, 2, "no scenario named nope"},
		{[]string{"chaos", "--size", "3"}, 2, "size 3"},
		{[]string{"chaos", "--size", "0"}, 2, "--size 0: must be above zero"},
		{[]string{"chaos", "--nodes", "-1"}, 2, "--nodes -1: must be above zero"},
		{[]string{"chaos", "--timeout", "0s"}, 2, "--timeout 0s: must be above zero"},
		{[]string{"chaos", "--explore", "--lanes", "0"}, 2, "--lanes 0: must be above zero"},
		{[]string{"chaos", "--explore", "--schedules", "0"}, 2, "--schedules 0: must be above zero"},
		{[]string{"chaos", "--explore", "--shape", "sunny"}, 2, `--shape: no shape named "sunny"`},
		{[]string{"chaos", "--shape", "mix"}, 2, "--shape go with --explore"},
		{[]string{"chaos", "--explore", "--duration", "0s"}, 2, "--duration 0s: must be above zero"},
		{[]string{"lab", "--only", "nope"}, 2, `no experiment "nope" (client-pause, `},
		{[]string{"lab", "--trials", "-1"}, 2, "--trials -1: cannot be negative"},
		{[]string{"lab", "--timeout", "0s"}, 2, "--timeout 0s: must be above zero"},
		{[]string{"exec", "--addrs", "127.0.0.1:1", "--key", "k", "--ttl", "0s", "--", "true"}, 2, "--ttl is required and must be positive"},
		{[]string{"exec", "--addrs", "127.0.0.1:1", "--key", "k", "--ttl", "1s", "--wait", "-1s", "--", "true"}, 2, "cannot be negative"},
		{[]string{"status", "--addrs", "127.0.0.1:1", "--timeout", "0s", "k"}, 2, "--timeout must be positive"},
		{[]string{"unlock", "--addrs", "127.0.0.1:1", "k"}, 2, "--token is required"},
		{[]string{"status", "--addrs", "127.0.0.1:1"}, 2, "give one KEY"},
	} {
		exit, out, errOut := runCmd(t, tt.args...)
		got, other := out, errOut
		if tt.exit != 0 {
			got, other = errOut, out
		}
		if exit != tt.exit || !strings.Contains(got, tt.want) || other != "" {
			t.Errorf("redlock %v: exit %d, stdout %q, stderr %q; want exit %d with %q on the %s alone",
				tt.args, exit, out, errOut, tt.exit, tt.want, map[bool]string{true: "stdout", false: "stderr"}[tt.exit == 0])
		}
		if tt.exit == 2 && strings.Count(errOut, "\n") != 1 {
			t.Errorf("redlock %v: %d lines on stderr, want one:\n%s", tt.args, strings.Count(errOut, "\n"), errOut)
		}
	}
	// No arguments at all: the usage, on stderr.
	if exit, _, errOut := runCmd(t); exit != 2 || !strings.Contains(errOut, "Usage:") {
		t.Errorf("redlock: exit %d, stderr %q", exit, errOut)
	}
}

func TestChaos_embeddedRun(t *testing.T) {
	// A generous timeout: the embedded nodes are this test binary, under
	// the race detector, and the suite may run twice at once.
	exit, out, errOut := runCmd(t, "chaos", "--server", "embedded", "--size", "100", "--seed", "7",
		"--only", "minority-freeze,clock-jump,replica-promotion", "--json", "-", "--timeout", "10m")
	if exit != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", exit, out, errOut)
	}
	for _, want := range []string{"minority-freeze", "ok: no violation", "clock-jump", "ok: violation shown",
		"skipped: needs redis-server", `"scenario": "clock-jump"`, "seed 7"} {
		if !strings.Contains(out+errOut, want) {
			t.Errorf("output lacks %q:\n%s\n%s", want, out, errOut)
		}
	}
}

// TestDemo_ignoresREDLOCK_ADDRS: the variable that names a cron job's real
// nodes does not send the demo there: it runs on embedded nodes and leaves
// the live server untouched.
func TestDemo_ignoresREDLOCK_ADDRS(t *testing.T) {
	live := miniredis.RunT(t)
	t.Setenv("REDLOCK_ADDRS", live.Addr())
	exit, out, errOut := runCmd(t, "demo", "--stock", "20", "--buyers", "4", "--fail-after", "5")
	if exit != 0 || !strings.Contains(out, "embedded nodes") {
		t.Fatalf("exit %d\n%s%s", exit, out, errOut)
	}
	if keys := live.Keys(); len(keys) != 0 {
		t.Fatalf("the demo wrote %v to the server named by REDLOCK_ADDRS", keys)
	}
}

// TestDemo_failsAMinorityByDefault: with 3 nodes the demo fails 1, not 2,
// and the sale completes.
func TestDemo_failsAMinorityByDefault(t *testing.T) {
	exit, out, errOut := runCmd(t, "demo", "--nodes", "3", "--stock", "20", "--buyers", "4", "--fail-after", "5")
	if exit != 0 || !strings.Contains(out, "nodes [2] failed") {
		t.Fatalf("exit %d\n%s%s", exit, out, errOut)
	}
}
