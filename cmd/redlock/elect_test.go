package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestElect_oneLeaderRunsTheCommand: three candidates with --once; each
// runs the command once, never two at a time, with a term larger than
// the one before.
func TestElect_oneLeaderRunsTheCommand(t *testing.T) {
	_, addrs := execNodes(t)
	dir := t.TempDir()
	busy, log := filepath.Join(dir, "busy"), filepath.Join(dir, "log")
	// mkdir fails when another leader's command is still running.
	script := "mkdir " + busy + " || { echo overlap >> " + log + "; exit 1; }; echo $REDLOCK_TERM $REDLOCK_FENCING_TOKEN $REDLOCK_ELECTION >> " + log + "; sleep 0.2; rmdir " + busy
	var wg sync.WaitGroup
	exits := make([]int, 3)
	errs := make([]string, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			exits[i], _, errs[i] = runCmd(t, "elect", "sched", "--addrs", addrs, "--ttl", "3s", "--once", "--", "sh", "-c", script)
		}()
	}
	wg.Wait()
	for i, e := range exits {
		if e != 0 {
			t.Errorf("candidate %d: exit %d: %s", i, e, errs[i])
		}
	}
	lines := strings.Split(strings.TrimSpace(readFile(t, log)), "\n")
	if len(lines) != 3 {
		t.Fatalf("log %q: want 3 terms", lines)
	}
	var last uint64
	for _, l := range lines {
		var term, fence uint64
		var name string
		if _, err := fmt.Sscan(l, &term, &fence, &name); err != nil || term != fence || name != "sched" || term <= last {
			t.Fatalf("log line %q (after term %d): want a growing term, the same fencing token, the name", l, last)
		}
		last = term
	}
}

// TestElect_observe: an observer prints the leader, then the next one.
func TestElect_observe(t *testing.T) {
	_, addrs := execNodes(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	w := &lockedWriter{w: &out}
	done := make(chan int, 1)
	go func() {
		done <- runElect(ctx, []string{"--observe", "jobs", "--addrs", addrs, "--ttl", "2s"}, w, &errOut)
	}()
	dir := t.TempDir()
	for i := range 2 {
		marker := filepath.Join(dir, fmt.Sprint("ran", i))
		if exit, _, e := runCmd(t, "elect", "jobs", "--addrs", addrs, "--ttl", "2s", "--once", "--value", fmt.Sprint("leader-", i), "--", "sh", "-c", "touch "+marker+"; sleep 0.3"); exit != 0 {
			t.Fatalf("exit %d: %s", exit, e)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(w.String(), "value=leader-1") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if exit := <-done; exit != 0 {
		t.Fatalf("--observe exit %d: %s", exit, errOut.String())
	}
	got := w.String()
	if !strings.Contains(got, "value=leader-0") || !strings.Contains(got, "value=leader-1") || !strings.HasPrefix(got, "term=") {
		t.Fatalf("observed:\n%s", got)
	}
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.(*bytes.Buffer).String()
}

func TestElect_usage(t *testing.T) {
	t.Setenv("REDLOCK_ADDRS", "")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"elect", "--addrs", "a:1", "--", "true"}, "no election name"},
		{[]string{"elect", "x", "--addrs", "a:1"}, "no command"},
		{[]string{"elect", "x", "--", "true"}, "no nodes"},
		{[]string{"elect", "x", "--addrs", "a:1", "--ttl", "-1s", "--", "true"}, "must be positive"},
		{[]string{"elect", "--observe", "x", "--addrs", "a:1", "--", "true"}, "runs no command"},
	} {
		exit, out, errOut := runCmd(t, tt.args...)
		if exit != 2 || !strings.Contains(out+errOut, tt.want) {
			t.Errorf("redlock %v: exit %d, output %q; want 2 mentioning %q", tt.args, exit, out+errOut, tt.want)
		}
	}
	if exit, out, errOut := runCmd(t, "elect", "--help"); exit != 0 || !strings.Contains(out+errOut, "REDLOCK_TERM") {
		t.Errorf("elect --help: exit %d, %q", exit, out+errOut)
	}
}

// TestElect_exitCodes: elect tells a command that cannot be run (126)
// from one not found (127), and nodes out of reach (69) at once. It used
// to say 127 for both, and to campaign without a word for ever while no
// node answered.
func TestElect_exitCodes(t *testing.T) {
	_, addrs := execNodes(t)
	notExec := notExecutable(t)
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"not found", []string{"--addrs", addrs, "--", "no-such-command-here"}, exitNotFound},
		{"not executable", []string{"--addrs", addrs, "--", notExec}, exitNotExecutable},
		{"unreachable", []string{"--addrs", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "--", "true"}, exitUnavailable},
	} {
		start := time.Now()
		exit, _, errOut := runCmd(t, append([]string{"elect", "job", "--ttl", "2s", "--once"}, tc.args...)...)
		if exit != tc.want {
			t.Errorf("%s: exit %d, want %d (%s)", tc.name, exit, tc.want, errOut)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("%s: took %v", tc.name, took)
		}
	}
}

// TestElect_campaignsAgainAfterLosingTheNodes: a leader whose nodes go
// away loses its leadership (its command is stopped) and campaigns again,
// however long the nodes take to come back, and leads again once they do.
// It used to exit 69 at its next campaign, so that a partition that
// healed left nobody leading.
func TestElect_campaignsAgainAfterLosingTheNodes(t *testing.T) {
	servers, addrs := execNodes(t)
	log := filepath.Join(t.TempDir(), "log")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errOut bytes.Buffer
	lw := &lockedWriter{w: &errOut}
	said := func() string {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		return errOut.String()
	}
	done := make(chan int, 1)
	go func() {
		done <- runElect(ctx, []string{"sched", "--addrs", addrs, "--ttl", "2s", "--grace", "0", "--", "sh", "-c", "echo run >> " + log + "; [ $(grep -c run " + log + ") -gt 1 ] || exec sleep 60"},
			io.Discard, lw)
	}()
	running := func() {
		select {
		case exit := <-done:
			t.Fatalf("elect exited %d: %s", exit, errOut.String())
		default:
		}
	}
	runs := func() int { return strings.Count(readFileIfAny(log), "run") }
	waitFor(t, 20*time.Second, "the first leadership", func() bool { running(); return runs() == 1 })
	for _, s := range servers[:2] {
		s.Close()
	}
	waitFor(t, 20*time.Second, "the leadership's loss", func() bool { running(); return strings.Contains(said(), "lost") })
	// The next campaign starts at once, with the nodes still gone: it
	// used to give up within the ttl.
	time.Sleep(3 * time.Second)
	running()
	for _, s := range servers[:2] {
		if err := s.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range servers { // the embedded nodes' keys expire only when told
		s.FastForward(3 * time.Second)
	}
	waitFor(t, 20*time.Second, "the second leadership", func() bool { running(); return runs() >= 2 })
	cancel()
	<-done
}

func readFileIfAny(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// TestBinary_electSignalsAndCampaignsAgain: without --once, a command that
// exits 0 is followed by a new campaign, and the leader runs it again; a
// SIGTERM to a candidate that waits in its campaign ends it with 143, its
// command never run; a SIGTERM to the leader is passed to its command, and
// the command's own status (7, from its trap) is elect's.
func TestBinary_electSignalsAndCampaignsAgain(t *testing.T) {
	addrs, nodes := treeNodes(t)
	log := filepath.Join(t.TempDir(), "log")
	script := "echo run >> " + log + "; [ $(grep -c run " + log + ") -ge 2 ] || exit 0; " +
		"trap 'exit 7' TERM; echo ready >> " + log + "; while :; do sleep 0.1; done"
	args := []string{"elect", "sig-e", "--addrs", nodes, "--ttl", "10s", "--", "sh", "-c", script}
	leader := startBin(t, nil, args...)
	waitFor(t, 30*time.Second, "the command's second run", func() bool { return strings.Contains(readFileIfAny(log), "ready") })
	waitFor(t, 30*time.Second, "no campaign waiting", func() bool { return !subscribed(t, addrs) })
	waiting := startBin(t, nil, args...)
	waitFor(t, 30*time.Second, "the second candidate's campaign", func() bool { return subscribed(t, addrs) })
	if err := waiting.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if exit := waiting.wait(t, time.Minute); exit != 143 || strings.Contains(waiting.errOut.String(), "leading") {
		t.Errorf("a campaign interrupted by SIGTERM: exit %d, want 143 without leading\n%s", exit, waiting.errOut.String())
	}
	if err := leader.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if exit := leader.wait(t, time.Minute); exit != 7 {
		t.Errorf("the leader's command ended by a SIGTERM passed on: exit %d, want its own 7\n%s", exit, leader.errOut.String())
	}
	if runs := strings.Count(readFileIfAny(log), "run"); runs != 2 {
		t.Errorf("the command ran %d times, want 2 (once more after it exited 0)", runs)
	}
}
