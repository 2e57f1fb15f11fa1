package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

const benchHelp = `Usage: redlock bench [--dir DIR] [-- BENCH FLAGS...]

Runs the comparison benchmarks: this library against go-redsync/redsync,
bsm/redislock and plain go-redis, on redis-server processes the benchmark
starts on loopback, in interleaved rounds, with a progress line. They live
in the repository's bench/ module, so that the other libraries never enter
this module's dependency graph; run it from a checkout (it needs Go and
redis-server). Flags after -- go to the benchmark, e.g.

  redlock bench -- -rounds 3 -slice 1s -json results.json -svg chart.svg
  redlock bench -- -workloads C -cases 'N=5'

Flags:
`

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("bench", benchHelp, stdout, stderr)
	dir := fs.String("dir", "", "the bench module's directory (default: bench/ in this directory or the nearest one above that has it)")
	if exit, ok := fs.parse(args, argsAfter); !ok {
		return exit
	}
	if *dir == "" {
		found, err := findBenchDir()
		if err != nil {
			fmt.Fprintf(stderr, "redlock bench: %v\n", err)
			return 2
		}
		*dir = found
	}
	if _, err := os.Stat(filepath.Join(*dir, "go.mod")); err != nil {
		fmt.Fprintf(stderr, "redlock bench: %s is not the bench module (no go.mod): give --dir\n", *dir)
		return 2
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintln(stderr, "redlock bench: needs the go command to build the benchmark")
		return 2
	}
	cmd := exec.CommandContext(ctx, goTool, append([]string{"run", "."}, fs.Args()...)...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = *dir, stdout, stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		fmt.Fprintf(stderr, "redlock bench: %v\n", err)
		return 1
	}
	return 0
}

// findBenchDir looks for bench/go.mod here and in the directories above.
func findBenchDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "bench", "go.mod")); err == nil {
			return filepath.Join(d, "bench"), nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("no bench/ module here or above: run from a checkout of github.com/quorumlock/redlock, or give --dir")
		}
	}
}
