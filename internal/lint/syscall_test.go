package lint

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// osPackages are the packages whose job is the operating system's
// interfaces, and which alone (tests aside) make system calls through
// golang.org/x/sys/unix: sockets and rings, BPF, namespaces and devices,
// the daemon's socket and the endpoints' shared memory, the guard pages of
// tests (internal/pins only pins the module's version). The layers above
// ask them.
var osPackages = []string{"afxdp", "loader", "lab", "internal/netdev", "internal/netnstest", "internal/testenv", "internal/guardtest",
	"internal/pins", "driver", "nicfw/daemon", "nicfw/endpoint"}

// TestSyscallBoundary: no other package imports golang.org/x/sys/unix.
func TestSyscallBoundary(t *testing.T) {
	fset := token.NewFileSet()
	for path, rel := range sourceFiles(t) {
		if slices.Contains(osPackages, filepath.Dir(rel)) {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "golang.org/x/sys/unix" {
				t.Errorf("%s imports golang.org/x/sys/unix: system calls belong in %v", rel, osPackages)
			}
		}
	}
}
