//go:build linux

package afxdp_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain fails the run if the tests leave AF_XDP sockets, eventfds, BPF
// objects, socket mappings (rings) or UMEM mappings behind, as cilium/ebpf's
// tests fail on leaked descriptors.
func TestMain(m *testing.M) {
	// Let the runtime create its poller's descriptors before the snapshot.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before := openFDs()
	code := m.Run()
	if code == 0 {
		var leaks []string
		for fd, target := range openFDs() {
			if before[fd] != target && leakable(target) {
				leaks = append(leaks, fmt.Sprintf("fd %s -> %s", fd, target))
			}
		}
		leaks = append(leaks, socketMappings()...)
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

// leakable reports whether a descriptor target is of a kind the tests
// create: sockets (AF_XDP, netlink, UDP), eventfds, BPF maps, programs and
// links.
func leakable(target string) bool {
	return strings.HasPrefix(target, "socket:") || target == "anon_inode:[eventfd]" ||
		strings.HasPrefix(target, "anon_inode:bpf")
}

// socketMappings lists the mappings of socket files (AF_XDP rings) and of
// UMEMs ("/memfd:xam-AF_XDP-UMEM").
func socketMappings() []string {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.Contains(line, "socket:[") || strings.Contains(line, "XDP") {
			out = append(out, "mapping "+line)
		}
	}
	return out
}

// checkGoroutines fails the test if, after its cleanups, more goroutines run
// than at its start (wireguard-go's goroutineLeakCheck).
func checkGoroutines(t *testing.T) {
	start := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > start {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("%d goroutines at the end, %d at the start:\n%s", runtime.NumGoroutine(), start, buf)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}
