// Command shape checks the library's shape: no file of its Go source
// (tests aside) longer than -lines, and no function with more than
// -params parameters. (Cyclomatic complexity is gocyclo's, in .ci/run.)
// It prints what is over and exits 1, or exits 0.
//
//	go run ./scripts/shape [-lines 700] [-params 6] DIR...
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

func main() {
	lines := flag.Int("lines", 700, "the most lines a source file may have")
	params := flag.Int("params", 6, "the most parameters a function may have")
	flag.Parse()
	bad := 0
	for _, dir := range flag.Args() {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			bad += check(f, *lines, *params)
		}
	}
	if bad > 0 {
		os.Exit(1)
	}
}

func check(file string, maxLines, maxParams int) (bad int) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if n := fset.File(f.Pos()).LineCount(); n > maxLines {
		fmt.Printf("%s: %d lines, more than %d\n", file, n, maxLines)
		bad++
	}
	ast.Inspect(f, func(n ast.Node) bool {
		var typ *ast.FuncType
		var name string
		switch fn := n.(type) {
		case *ast.FuncDecl:
			typ, name = fn.Type, fn.Name.Name
		case *ast.FuncLit:
			typ, name = fn.Type, "func literal"
		default:
			return true
		}
		if count := typ.Params.NumFields(); count > maxParams {
			fmt.Printf("%s: %s has %d parameters, more than %d\n", fset.Position(n.Pos()), name, count, maxParams)
			bad++
		}
		return true
	})
	return bad
}
