package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestBench(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and no redis-server")
		}
		t.Skip("no redis-server")
	}
	exit, out, errOut := runCmd(t, "bench", "--", "-rounds", "1", "-slice", "100ms", "-cases", "^U (redlock|redislock) N=1$")
	if exit != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", exit, out, errOut)
	}
	for _, want := range []string{"U redlock N=1", "U redislock N=1", "ops/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "round 1/1") {
		t.Errorf("no progress on stderr:\n%s", errOut)
	}
}

func TestBench_noModule(t *testing.T) {
	exit, _, errOut := runCmd(t, "bench", "--dir", t.TempDir())
	if exit != 2 || !strings.Contains(errOut, "not the bench module") {
		t.Fatalf("exit %d, %q", exit, errOut)
	}
}
