package testenv

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// requirement is one privilege a privileged test needs, held when any of the
// capabilities in anyOf is in the effective set.
type requirement struct {
	name  string
	anyOf []uint
}

// requirements are what privileged tests need: network namespaces and links
// (CAP_NET_ADMIN, CAP_SYS_ADMIN for setns and the bind mounts of named
// namespaces), AF_XDP and packet sockets (CAP_NET_RAW) and BPF programs and
// maps (CAP_BPF; like the kernel's bpf_capable, CAP_SYS_ADMIN also counts, as
// it does on kernels older than 5.8, which lack CAP_BPF).
var requirements = []requirement{
	{"CAP_NET_ADMIN", []uint{unix.CAP_NET_ADMIN}},
	{"CAP_SYS_ADMIN", []uint{unix.CAP_SYS_ADMIN}},
	{"CAP_NET_RAW", []uint{unix.CAP_NET_RAW}},
	{"CAP_BPF", []uint{unix.CAP_BPF, unix.CAP_SYS_ADMIN}},
}

// probe reads the effective uid and capability set of the calling thread; a
// variable so that tests can pretend to be unprivileged.
var probe = func() (euid int, effective uint64, err error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // version 3: two 32-bit words
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return os.Geteuid(), 0, fmt.Errorf("capget: %w", err)
	}
	return os.Geteuid(), uint64(data[0].Effective) | uint64(data[1].Effective)<<32, nil
}

// missing returns the names of the requirements the effective set lacks.
func missing(effective uint64) []string {
	var out []string
	for _, r := range requirements {
		held := false
		for _, c := range r.anyOf {
			held = held || effective&(1<<c) != 0
		}
		if !held {
			out = append(out, r.name)
		}
	}
	return out
}

// RequirePrivileged stops the test unless the process holds what privileged
// tests need: CAP_NET_ADMIN, CAP_SYS_ADMIN, CAP_NET_RAW and CAP_BPF in its
// effective capability set (root has them all, unless a container took them
// away; uid 0 without them does not pass). It skips with the reason, or under
// CI fails, since a privileged test cannot skip in CI.
func RequirePrivileged(tb testing.TB) {
	tb.Helper()
	const ciNote = "a privileged test cannot skip in CI"
	euid, effective, err := probe()
	if err != nil {
		skipOrFail(tb, ciNote, fmt.Sprintf("privileged test: cannot read capabilities: %v", err))
		return
	}
	if m := missing(effective); len(m) > 0 {
		skipOrFail(tb, ciNote, fmt.Sprintf("privileged test: euid %d lacks %s (run as root)",
			euid, strings.Join(m, ", ")))
	}
}
