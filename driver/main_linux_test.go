//go:build linux

package driver_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMain fails the run if the tests leave sockets, eventfds or BPF objects
// open, or memory locked, behind.
func TestMain(m *testing.M) {
	// Let the runtime create its poller's descriptors before the snapshot.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before, lockedBefore := openFDs(), lockedKB()
	code := m.Run()
	if code == 0 {
		var leaks []string
		for fd, target := range openFDs() {
			if before[fd] != target && (strings.HasPrefix(target, "socket:") ||
				target == "anon_inode:[eventfd]" || strings.HasPrefix(target, "anon_inode:bpf")) {
				leaks = append(leaks, fmt.Sprintf("fd %s -> %s", fd, target))
			}
		}
		if kb := lockedKB(); kb != lockedBefore {
			leaks = append(leaks, fmt.Sprintf("locked memory: %d kB, %d kB at the start", kb, lockedBefore))
		}
		if len(leaks) > 0 {
			slices.Sort(leaks)
			fmt.Fprintln(os.Stderr, "FAIL: left behind:\n\t"+strings.Join(leaks, "\n\t"))
			code = 1
		}
	}
	os.Exit(code)
}

// openFDs maps the process's open descriptors to what they refer to.
func openFDs() map[string]string {
	fds := map[string]string{}
	entries, _ := os.ReadDir("/proc/self/fd")
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil {
			fds[e.Name()] = target
		}
	}
	return fds
}

// lockedKB returns the process's locked memory (VmLck), in kB.
func lockedKB() int {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmLck:"); ok {
			var kb int
			fmt.Sscan(rest, &kb)
			return kb
		}
	}
	return -1
}
