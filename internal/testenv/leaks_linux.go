package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// MainWithLeakCheck runs the tests and exits, failing the run when they
// pass but leave behind what xam's data-path tests create: sockets
// (AF_XDP, netlink, packet, UDP), eventfds, BPF maps, programs and links,
// xam's memfds (UMEMs, endpoint memory) or their mappings, mappings of
// sockets (AF_XDP rings), or locked memory. It is
// what cilium/ebpf's tests do for descriptors; call it from TestMain.
func MainWithLeakCheck(m *testing.M) {
	// Let the runtime create its poller's descriptors before the snapshot.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before, lockedBefore := openFDs(), LockedKB()
	code := m.Run()
	if code == 0 {
		var leaks []string
		for fd, target := range openFDs() {
			if before[fd] != target && leakable(target) {
				leaks = append(leaks, fmt.Sprintf("fd %s -> %s", fd, target))
			}
		}
		leaks = append(leaks, socketMappings()...)
		if kb := LockedKB(); kb != lockedBefore {
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

// leakable reports whether a descriptor target is of a kind the tests
// create: sockets, eventfds, BPF objects, and xam's memfds (UMEMs,
// endpoint memory).
func leakable(target string) bool {
	return strings.HasPrefix(target, "socket:") || target == "anon_inode:[eventfd]" ||
		strings.HasPrefix(target, "anon_inode:bpf") || strings.HasPrefix(target, "/memfd:xam-")
}

// socketMappings lists the mappings of socket files (AF_XDP rings) and of
// xam's memfds (UMEMs, endpoint memory).
func socketMappings() []string {
	lines, err := mappings(func(line string) bool {
		return strings.Contains(line, "socket:[") || strings.Contains(line, "/memfd:xam-")
	})
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, line := range lines {
		out = append(out, "mapping "+line)
	}
	return out
}

// mappings returns the lines of /proc/self/maps that match.
func mappings(match func(line string) bool) ([]string, error) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(maps), "\n") {
		if match(line) {
			out = append(out, line)
		}
	}
	return out, nil
}

// LockedKB returns the process's locked memory (VmLck), in kB, or -1.
func LockedKB() int {
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

// NoMemfdLeaks fails t, when it ends, if a memfd whose name contains name
// is still open or mapped in this process (an endpoint's memory, say).
func NoMemfdLeaks(t *testing.T, name string) {
	t.Helper()
	t.Cleanup(func() {
		for fd, target := range openFDs() {
			if strings.Contains(target, name) {
				t.Errorf("left open: fd %s -> %s", fd, target)
			}
		}
		lines, err := mappings(func(line string) bool { return strings.Contains(line, name) })
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range lines {
			t.Errorf("left mapped: %s", line)
		}
	})
}
