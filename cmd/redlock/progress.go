package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"
)

// progress shows a status line: redrawn in place on a terminal, and
// otherwise (a log file, a pipe, CI) written as a plain line every few
// seconds, so that logs hold lines rather than carriage returns.
type progress struct {
	w     io.Writer
	tty   bool
	every time.Duration
	last  time.Time
}

// plainEvery is how often a progress line is written when not on a
// terminal.
const plainEvery = 5 * time.Second

func newProgress(w io.Writer) *progress {
	return &progress{w: w, tty: isTerminal(w), every: plainEvery, last: time.Now()}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// update shows line: at once on a terminal, else if the last line is
// old enough.
func (p *progress) update(line string) {
	switch {
	case p.tty:
		fmt.Fprintf(p.w, "\r%s\033[K", line)
	case time.Since(p.last) >= p.every:
		p.last = time.Now()
		fmt.Fprintln(p.w, line)
	}
}

// done shows the final line, ending it.
func (p *progress) done(line string) {
	if p.tty {
		fmt.Fprintf(p.w, "\r%s\033[K\n", line)
		return
	}
	fmt.Fprintln(p.w, line)
}
