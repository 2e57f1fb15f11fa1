package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLab(t *testing.T) {
	out := filepath.Join(t.TempDir(), "lab.html")
	exit, stdout, stderr := runCmd(t, "lab", "--server", "embedded", "--size", "60", "--seed", "3",
		"--only", "minority-freeze,clock-jump", "--measure", "100ms", "--ns", "1,3", "--out", out)
	if exit != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", exit, stdout, stderr)
	}
	for _, want := range []string{"SIGSTOP a minority", "safe: no violation", "unsafe: violation shown", "N=3: lock+unlock p50"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	html, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<table>", "node clocks that may step", "Violations per experiment", "Throughput, 16 goroutines with a key each, against N", "<rect class=\"unsafe\""} {
		if !bytes.Contains(html, []byte(want)) {
			t.Errorf("report lacks %q", want)
		}
	}

	t.Run("renders in headless Chromium", func(t *testing.T) {
		browser := ""
		for _, name := range []string{"chromium", "chromium-browser"} {
			if p, err := exec.LookPath(name); err == nil {
				browser = p
				break
			}
		}
		if browser == "" {
			if os.Getenv("CI") == "true" {
				t.Fatal("CI=true and no chromium to render the report (apt-get install chromium)")
			}
			t.Skip("no chromium (apt-get install chromium)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		dir := t.TempDir()
		shot := filepath.Join(dir, "lab.png")
		common := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--user-data-dir=" + filepath.Join(dir, "profile"), "--window-size=1000,1600"}
		dom, err := exec.CommandContext(ctx, browser, append(common, "--dump-dom", "file://"+out)...).Output()
		if err != nil {
			t.Fatalf("chromium --dump-dom: %v", err)
		}
		for _, want := range []string{"Configurations × faults", "<svg", "SIGSTOP a minority"} {
			if !strings.Contains(string(dom), want) {
				t.Errorf("the rendered page lacks %q", want)
			}
		}
		if err := exec.CommandContext(ctx, browser, append(common, "--screenshot="+shot, "file://"+out)...).Run(); err != nil {
			t.Fatalf("chromium --screenshot: %v", err)
		}
		if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
			t.Fatalf("screenshot %v, %v: want a page with tables and charts", fi, err)
		}
	})
}
