package netdev

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// System describes what the kernel and this process offer xam.
type System struct {
	Kernel     string          `json:"kernel"`
	XDPSockets bool            `json:"xdp_sockets"`
	BPFJIT     string          `json:"bpf_jit_enable"`
	BTF        bool            `json:"btf"`
	Caps       map[string]bool `json:"capabilities"`
	Memlock    string          `json:"memlock"`
	BusyPoll   string          `json:"busy_poll,omitempty"`
	BusyRead   string          `json:"busy_read,omitempty"`
	// MultiBuffer: the kernel has AF_XDP multi-buffer (XDP_USE_SG), so
	// frames may exceed one UMEM chunk (MultiBufferKernel).
	MultiBuffer bool     `json:"multi_buffer"`
	Problems    []string `json:"problems,omitempty"` // reasons xam cannot run   []string        `json:"problems,omitempty"` // reasons xam cannot run
}

var capNames = map[string]uint{
	"CAP_NET_ADMIN": unix.CAP_NET_ADMIN,
	"CAP_NET_RAW":   unix.CAP_NET_RAW,
	"CAP_BPF":       unix.CAP_BPF,
	"CAP_PERFMON":   unix.CAP_PERFMON,
	"CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN,
}

// Uname is the kernel's identity, as uname(2) gives it.
type Uname struct {
	Sysname string `json:"sysname"` // "Linux"
	Release string `json:"release"` // e.g. "6.1.0-18-amd64"
	Version string `json:"version"` // the build: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)"
	Machine string `json:"machine"` // e.g. "x86_64"
}

// Kernel returns the running kernel's identity.
func Kernel() (Uname, error) {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return Uname{}, err
	}
	return Uname{
		Sysname: unix.ByteSliceToString(uts.Sysname[:]),
		Release: unix.ByteSliceToString(uts.Release[:]),
		Version: unix.ByteSliceToString(uts.Version[:]),
		Machine: unix.ByteSliceToString(uts.Machine[:]),
	}, nil
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Probe reads the system's state.
func Probe() *System {
	s := &System{Caps: map[string]bool{}}
	if k, err := Kernel(); err == nil {
		s.Kernel = k.Release
		s.MultiBuffer = KernelAtLeast(k.Release, MultiBufferKernel[0], MultiBufferKernel[1])
	}
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	switch {
	case err == nil:
		unix.Close(fd)
		s.XDPSockets = true
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		s.XDPSockets = true // the family exists; the process lacks CAP_NET_RAW
	}
	s.BPFJIT = readTrim("/proc/sys/net/core/bpf_jit_enable")
	_, err = os.Stat("/sys/kernel/btf/vmlinux")
	s.BTF = err == nil
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	capsOK := unix.Capget(&hdr, &data[0]) == nil
	for name, c := range capNames {
		s.Caps[name] = capsOK && data[c/32].Effective&(1<<(c%32)) != 0
	}
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &rl) == nil {
		if rl.Cur == unix.RLIM_INFINITY {
			s.Memlock = "unlimited"
		} else {
			s.Memlock = formatBytes(rl.Cur)
		}
	}
	s.BusyPoll = readTrim("/proc/sys/net/core/busy_poll")
	s.BusyRead = readTrim("/proc/sys/net/core/busy_read")

	if !s.XDPSockets {
		s.Problems = append(s.Problems, "the kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS)")
	}
	if s.BPFJIT == "0" {
		s.Problems = append(s.Problems, "the BPF JIT is off (sysctl net.core.bpf_jit_enable=1)")
	}
	if !s.Caps["CAP_NET_ADMIN"] {
		s.Problems = append(s.Problems, "missing CAP_NET_ADMIN (attach XDP, build labs): run as root")
	}
	if !s.Caps["CAP_NET_RAW"] {
		s.Problems = append(s.Problems, "missing CAP_NET_RAW (AF_XDP sockets): run as root")
	}
	if m := MissingBPF(s.Caps); len(m) > 0 {
		s.Problems = append(s.Problems, fmt.Sprintf("missing %s (load the XDP program; or CAP_SYS_ADMIN): run as root", strings.Join(m, " and ")))
	}
	return s
}

func formatBytes(n uint64) string {
	for _, u := range []struct {
		size uint64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size {
			return strconv.FormatFloat(float64(n)/float64(u.size), 'f', -1, 64) + " " + u.name
		}
	}
	return strconv.FormatUint(n, 10) + " B"
}
