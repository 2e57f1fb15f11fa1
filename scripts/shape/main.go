// Command shape checks the library's shape: no file of its Go source
// (tests aside) longer than -lines, no function with more than -params
// parameters, at most -total lines in all, at most -timing timing
// constants, and at most -realtime calls that read or wait on the real
// clock outside clock.go. (Cyclomatic complexity is gocyclo's, in .ci/run.)
// It prints the counts, then what is over, and exits 1 if anything is,
// or 0. A limit of 0 is not checked.
//
//	go run ./scripts/shape [-lines 700] [-params 6] [-total N] [-timing N] [-realtime N] DIR...
//
// A timing constant is a constant (at any scope), or a package-level
// variable, whose type is time.Duration or whose value is written in a
// unit of time (time.Millisecond, ...). A real-time call is a call of
// time.Now, Since, Until, After, AfterFunc, NewTimer, NewTicker, Tick or
// Sleep. The context constructors that start a timer (WithTimeout,
// WithDeadline and their Cause forms: node deadlines, real by nature) are
// counted and shown apart.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

type limits struct{ lines, params, total, timing, realtime int }

type counts struct {
	lines, timing, realtime, deadlines int
	bad                                int
}

func main() {
	var lim limits
	flag.IntVar(&lim.lines, "lines", 700, "the most lines a source file may have")
	flag.IntVar(&lim.params, "params", 6, "the most parameters a function may have")
	flag.IntVar(&lim.total, "total", 0, "the most lines of source in all (0: not checked)")
	flag.IntVar(&lim.timing, "timing", 0, "the most timing constants in all (0: not checked)")
	flag.IntVar(&lim.realtime, "realtime", 0, "the most real-time calls outside clock.go (0: not checked)")
	flag.Parse()
	var c counts
	for _, dir := range flag.Args() {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				c.check(f, lim)
			}
		}
	}
	fmt.Printf("%d lines, %d timing constants, %d real-time calls outside clock.go, %d context deadlines\n", c.lines, c.timing, c.realtime, c.deadlines)
	over := func(what string, n, limit int) {
		if limit > 0 && n > limit {
			fmt.Printf("%s: %d, more than %d\n", what, n, limit)
			c.bad++
		}
	}
	over("lines in all", c.lines, lim.total)
	over("timing constants", c.timing, lim.timing)
	over("real-time calls", c.realtime, lim.realtime)
	if c.bad > 0 {
		os.Exit(1)
	}
}

func (c *counts) check(file string, lim limits) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	n := fset.File(f.Pos()).LineCount()
	c.lines += n
	if n > lim.lines {
		fmt.Printf("%s: %d lines, more than %d\n", file, n, lim.lines)
		c.bad++
	}
	clockFile := filepath.Base(file) == "clock.go"
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			c.params(fset, n, n.Type, n.Name.Name, lim.params)
		case *ast.FuncLit:
			c.params(fset, n, n.Type, "func literal", lim.params)
		case *ast.GenDecl:
			c.timing += timingConstants(n, f)
		case *ast.CallExpr:
			switch {
			case clockFile:
			case realTime(n):
				c.realtime++
			case contextDeadline(n):
				c.deadlines++
			}
		}
		return true
	})
}

func (c *counts) params(fset *token.FileSet, n ast.Node, typ *ast.FuncType, name string, most int) {
	if count := typ.Params.NumFields(); count > most {
		fmt.Printf("%s: %s has %d parameters, more than %d\n", fset.Position(n.Pos()), name, count, most)
		c.bad++
	}
}

// timingConstants counts the timing constants of one declaration: every
// const, and package-level vars (f's own declarations).
func timingConstants(d *ast.GenDecl, f *ast.File) (n int) {
	pkgLevel := false
	for _, top := range f.Decls {
		pkgLevel = pkgLevel || top == d
	}
	if d.Tok != token.CONST && (d.Tok != token.VAR || !pkgLevel) {
		return 0
	}
	for _, spec := range d.Specs {
		vs := spec.(*ast.ValueSpec)
		typed := isSelector(vs.Type, "time", "Duration")
		for i := range vs.Names {
			if typed || i < len(vs.Values) && inTimeUnits(vs.Values[i]) {
				n++
			}
		}
	}
	return n
}

func inTimeUnits(e ast.Expr) (found bool) {
	ast.Inspect(e, func(n ast.Node) bool {
		for _, unit := range []string{"Nanosecond", "Microsecond", "Millisecond", "Second", "Minute", "Hour"} {
			found = found || isSelector(n, "time", unit)
		}
		return !found
	})
	return found
}

func realTime(call *ast.CallExpr) bool {
	for _, fn := range []string{"Now", "Since", "Until", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick", "Sleep"} {
		if isSelector(call.Fun, "time", fn) {
			return true
		}
	}
	return false
}

// contextDeadline reports whether call makes a context with a deadline,
// which starts a real timer whatever the Clock (a node's socket deadline).
func contextDeadline(call *ast.CallExpr) bool {
	for _, fn := range []string{"WithTimeout", "WithDeadline", "WithTimeoutCause", "WithDeadlineCause"} {
		if isSelector(call.Fun, "context", fn) {
			return true
		}
	}
	return false
}

func isSelector(n ast.Node, pkg, name string) bool {
	sel, ok := n.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}
