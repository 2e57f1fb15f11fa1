// Package leaktest fails a test binary that leaves goroutines behind: its
// TestMain runs the tests, then waits for every goroutine but its own to
// end. It does for the library's module what go.uber.org/goleak does for
// the others, with the standard library only, so that the library's
// go.mod (which every user's module graph includes) stays short.
package leaktest

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// wait is how long the goroutines have to end after the tests.
const wait = 5 * time.Second

// Explain, when set, is asked what it knows of the goroutines left (say,
// which test made them), and its answer is printed after their stacks.
var Explain func() string

// Main runs m and exits with its code, or with 1 when goroutines are left
// whose stacks contain none of ignore (function names, as in a stack
// trace) once the tests are done.
func Main(m *testing.M, ignore ...string) {
	code := m.Run()
	if code == 0 {
		if left := Leftover(wait, ignore...); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "leaktest: %d goroutines left after the tests:\n\n%s\n", len(left), strings.Join(left, "\n\n"))
			if Explain != nil {
				fmt.Fprintf(os.Stderr, "\nleaktest: what the tests say of them:\n%s\n", Explain())
			}
			code = 1
		}
	}
	os.Exit(code)
}

// Leftover returns the stacks of the goroutines other than the caller's
// that are still running after up to d, and contain none of ignore.
func Leftover(d time.Duration, ignore ...string) []string {
	deadline := time.Now().Add(d)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		left := others(ignore)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(pause)
	}
}

// runtimeOwn are goroutines of the runtime and the testing package that
// outlive the tests by design, or run them (when called from a test).
var runtimeOwn = []string{
	"testing.(*M).Run",
	"testing.tRunner(",
	"os/signal.signal_recv",
	"os/signal.loop",
	"runtime.ensureSigM",
	"testing.(*M).startAlarm",
	"testing.runFuzzing",
	"runtime/trace.Start",
}

// Stacks returns the stack of every goroutine of the process, the
// caller's first.
func Stacks() []string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return strings.Split(string(buf), "\n\n")
}

func others(ignore []string) []string {
	stacks := Stacks()
	var left []string
	for _, s := range stacks[1:] { // the first is the caller's
		if !slices.ContainsFunc(append(ignore, runtimeOwn...), func(f string) bool { return strings.Contains(s, f) }) {
			left = append(left, s)
		}
	}
	return left
}
