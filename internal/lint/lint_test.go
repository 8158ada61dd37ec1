package lint

import (
	"bytes"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/xam-project/xam"

// root returns the repository root (two levels above this package).
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(r, "go.mod")); err != nil {
		t.Fatalf("repository root not found: %v", err)
	}
	return r
}

// goFiles returns the repository's Go files, skipping testdata and hidden
// directories.
func goFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root(t), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if name == "testdata" || (strings.HasPrefix(name, ".") && path != root(t)) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Go files found")
	}
	return files
}

func TestGofmt(t *testing.T) {
	r := root(t)
	for _, path := range goFiles(t) {
		rel, _ := filepath.Rel(r, path)
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		out, err := format.Source(src)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if !bytes.Equal(src, out) {
			t.Errorf("%s is not gofmt-formatted (run gofmt -w)", rel)
		}
	}
}

// layer ranks xam's top-level packages: a package may import only packages
// of a strictly lower rank (internal helpers and lab, the test networks,
// have rank 0, usable by all, and import only rank 0).
var layer = map[string]int{
	"internal": 0, "lab": 0,
	"loader": 1, "afxdp": 1, "cells": 1, "cluster": 1,
	"datapath": 2,
	"driver":   3, "nicfw": 3,
	"am":    4,
	"bench": 5,
	"cmd":   6, "examples": 6,
}

// TestBenchImporters: the benchmarks are not a library. Outside bench
// only cmd/xam (its bench and ping commands, and the hook that runs the
// hostile suite's other user) imports it; the daemon, the examples and
// the tests' hubs open devices with package datapath.
func TestBenchImporters(t *testing.T) {
	fset := token.NewFileSet()
	r := root(t)
	for _, path := range goFiles(t) {
		rel, _ := filepath.Rel(r, path)
		dir := filepath.ToSlash(filepath.Dir(rel))
		if dir == "bench" || strings.HasPrefix(dir, "bench/") || dir == "cmd/xam" {
			continue
		}
		deps, err := moduleImports(fset, path)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if slices.Contains(deps, "bench") {
			t.Errorf("%s imports bench: open devices with datapath, and leave measuring to cmd/xam", rel)
		}
	}
}

func TestImportsPointDown(t *testing.T) {
	fset := token.NewFileSet()
	r := root(t)
	for _, path := range goFiles(t) {
		rel, _ := filepath.Rel(r, path)
		top := strings.Split(filepath.ToSlash(rel), "/")[0]
		from, ok := layer[top]
		if !ok {
			if !strings.Contains(rel, "/") {
				continue // files at the root
			}
			t.Errorf("%s: top-level folder %q has no layer in internal/lint", rel, top)
			continue
		}
		deps, err := moduleImports(fset, path)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		for _, p := range deps {
			dep := strings.Split(p, "/")[0]
			if dep == top {
				continue
			}
			to, ok := layer[dep]
			if !ok {
				t.Errorf("%s imports %s, whose folder has no layer", rel, p)
				continue
			}
			if from != 0 && to >= from {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must point downward", rel, from, p, to)
			}
			if from == 0 && to != 0 {
				t.Errorf("%s: internal helpers may not import layer %s", rel, p)
			}
		}
	}
}

// sublayer ranks the packages inside a layer's folder, one mechanism per
// package: a package may import a package of the same folder only if its
// rank is strictly lower. In nicfw the endpoint memory, the transport and
// the test data path know nothing of each other or of the engine; the
// engine (nicfw) joins them; its modules (the mapper, sender coordination)
// plug into it; the
// daemon runs it all. In am, each paper's API stands alone on the layers
// below.
var sublayer = map[string]map[string]int{
	"nicfw": {
		"nicfw/xdptest":  -1, // the test data path, for every package's tests
		"nicfw/internal": -1, // what every firmware package shares
		"nicfw/endpoint": 0, "nicfw/transport": 0,
		"nicfw":        1,
		"nicfw/mapper": 2, "nicfw/coord": 2,
		"nicfw/daemon":            3,
		"nicfw/daemon/daemontest": 4, // running daemons, for tests
		"nicfw/daemon/metrics":    4, // a daemon's counters for Prometheus
	},
	"datapath": {
		"datapath/encap": 0, // xam's UDP form, a link over the socket
		"datapath":       1,
	},
	"am": {
		"am/ssam": 0, "am/amii": 0, "am/grim": 0,
		"am": 1, "am/grim/storage": 1,
		"am/job": 2, // the three opened from a job (cluster)
	},
}

func TestPackagesByMechanism(t *testing.T) {
	fset := token.NewFileSet()
	r := root(t)
	for _, path := range goFiles(t) {
		rel, _ := filepath.Rel(r, path)
		dir := filepath.ToSlash(filepath.Dir(rel))
		top := strings.Split(dir, "/")[0]
		ranks, ok := sublayer[top]
		if !ok {
			continue
		}
		from, ok := rankOf(ranks, dir)
		if !ok {
			t.Errorf("%s: package %s has no rank in internal/lint's sublayer", rel, dir)
			continue
		}
		deps, err := moduleImports(fset, path)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		for _, dep := range deps {
			p := module + "/" + dep
			if strings.Split(dep, "/")[0] != top || dep == dir {
				continue
			}
			to, ok := rankOf(ranks, dep)
			if !ok {
				t.Errorf("%s imports %s, which has no rank in internal/lint's sublayer", rel, p)
				continue
			}
			if to >= from {
				t.Errorf("%s (%s, rank %d) imports %s (rank %d): packages of one folder import only lower ranks", rel, dir, from, dep, to)
			}
		}
	}
}

// rankOf returns the rank of package dir: its own, or that of the
// nearest ranked folder above it (internal helpers and testdata).
func rankOf(ranks map[string]int, dir string) (int, bool) {
	for d := dir; d != "."; d = filepath.ToSlash(filepath.Dir(d)) {
		if r, ok := ranks[d]; ok {
			return r, true
		}
	}
	return 0, false
}

// moduleImports returns the packages of this module that the Go file at
// path imports, relative to the module's root.
func moduleImports(fset *token.FileSet, path string) ([]string, error) {
	f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
	if err != nil {
		return nil, err
	}
	var deps []string
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if dep, ok := strings.CutPrefix(p, module+"/"); ok {
			deps = append(deps, dep)
		}
	}
	return deps, nil
}
