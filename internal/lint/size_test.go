package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The sizes a reader can hold: no hand-written non-test Go file over
// maxFileLines lines (split it by topic, as nicfw/transport is split by
// direction), no function over maxFuncLines (a function that long does
// several things: name them).
const (
	maxFileLines = 800
	maxFuncLines = 120
)

// TestSizes checks maxFileLines and maxFuncLines; generated files and
// tests are exempt.
func TestSizes(t *testing.T) {
	fset := token.NewFileSet()
	for path, rel := range sourceFiles(t) {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if ast.IsGenerated(f) {
			continue
		}
		if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
			t.Errorf("%s has %d lines, the most is %d: split it by topic", rel, n, maxFileLines)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s has %d lines, the most is %d: name its parts", rel, fd.Name.Name, n, maxFuncLines)
			}
		}
	}
}

// sourceFiles yields the hand-written and generated non-test Go files,
// each with its path relative to the repository's root.
func sourceFiles(t *testing.T) iter.Seq2[string, string] {
	r := root(t)
	files := goFiles(t)
	return func(yield func(path, rel string) bool) {
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			rel, _ := filepath.Rel(r, path)
			if !yield(path, filepath.ToSlash(rel)) {
				return
			}
		}
	}
}
