package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"time"
)

// The commands' flags follow the conventions of a good command: --help
// prints the help on stdout and exits 0; a bad flag prints one line naming
// it and exits 2; a value that must be positive is refused when it is not,
// rather than silently meaning a default.

// flagSet is a subcommand's flags and its help.
type flagSet struct {
	*flag.FlagSet
	help           string
	stdout, stderr io.Writer
}

// newFlags returns the flag set of subcommand name, whose --help prints
// help followed by the flags' defaults on stdout.
func newFlags(name, help string, stdout, stderr io.Writer) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// The flag package prints its error and the whole help on a bad flag;
	// parse prints one line instead.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &flagSet{FlagSet: fs, help: help, stdout: stdout, stderr: stderr}
}

// How a command takes arguments besides its flags.
type argMode int

const (
	noArgs       argMode = iota // flags only
	argsAfter                   // arguments after the flags: the first one ends them (a command line after --)
	interspersed                // arguments and flags in any order (KEY --token T)
)

// parse parses args into f and reports the exit status to return when
// parsing ends the command: 0 after --help, 2 after a bad flag.
func (f *flagSet) parse(args []string, mode argMode) (exit int, ok bool) {
	var rest []string
	err := f.Parse(args)
	for mode == interspersed && err == nil && f.NArg() > 0 {
		// Parse stops at the first argument, or after "--" (then
		// everything left is arguments).
		left := f.Args()
		if consumed := len(args) - len(left); consumed > 0 && args[consumed-1] == "--" {
			rest = append(rest, left...)
			break
		}
		rest = append(rest, left[0])
		args = left[1:]
		err = f.Parse(args)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		f.printHelp()
		return 0, false
	case err != nil:
		fmt.Fprintf(f.stderr, "redlock %s: %v (see 'redlock %s --help')\n", f.Name(), err, f.Name())
		return 2, false
	}
	if mode == interspersed {
		// Leave the arguments where Args finds them.
		_ = f.Parse(append([]string{"--"}, rest...))
	}
	if mode == noArgs && f.NArg() > 0 {
		fmt.Fprintf(f.stderr, "redlock %s: unexpected argument %q (see 'redlock %s --help')\n", f.Name(), f.Arg(0), f.Name())
		return 2, false
	}
	return 0, true
}

func (f *flagSet) printHelp() {
	fmt.Fprint(f.stdout, f.help)
	f.SetOutput(f.stdout)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
}

// positive returns an error naming the first of the flags whose value is
// zero or below.
func (f *flagSet) positive(names ...string) error {
	for _, name := range names {
		fl := f.Lookup(name)
		if fl == nil {
			panic("redlock: no flag " + name)
		}
		var ok bool
		switch v := fl.Value.(flag.Getter).Get().(type) {
		case int:
			ok = v > 0
		case int64:
			ok = v > 0
		case uint:
			ok = v > 0
		case uint64:
			ok = v > 0
		case float64:
			ok = v > 0
		case time.Duration:
			ok = v > 0
		default:
			panic(fmt.Sprintf("redlock: flag %s is not a number", name))
		}
		if !ok {
			return fmt.Errorf("--%s %s: must be above zero", name, fl.Value)
		}
	}
	return nil
}

// notNegative is positive for flags where zero has a documented meaning.
func (f *flagSet) notNegative(names ...string) error {
	for _, name := range names {
		fl := f.Lookup(name)
		var neg bool
		switch v := fl.Value.(flag.Getter).Get().(type) {
		case int:
			neg = v < 0
		case time.Duration:
			neg = v < 0
		default:
			panic(fmt.Sprintf("redlock: flag %s is not a signed number", name))
		}
		if neg {
			return fmt.Errorf("--%s %s: cannot be negative", name, fl.Value)
		}
	}
	return nil
}

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise it comes from the module the binary was built from.
var version string

// versionLine is what --version prints: this command's version, the
// library's, and the Go toolchain.
func versionLine() string {
	v, lib := version, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, d := range bi.Deps {
			if d.Path == "github.com/quorumlock/redlock" {
				lib = d.Version
				if d.Replace != nil {
					lib = d.Replace.Version
				}
			}
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " " + s.Value[:12]
			}
		}
	}
	if v == "" {
		v = "(devel)"
	}
	line := "redlock " + v
	if lib != "" && lib != v {
		line += ", library " + lib
	}
	return fmt.Sprintf("%s (%s %s/%s)", line, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// isSet reports whether flag name was given on the command line.
func (f *flagSet) isSet(name string) bool {
	set := false
	f.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}
