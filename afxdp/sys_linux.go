package afxdp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// setsockopt and getsockopt pass a struct to and from the kernel;
// golang.org/x/sys/unix has no typed helpers for the SOL_XDP structs.
func setsockopt(fd, level, name int, val unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(name),
		uintptr(val), size, 0)
	if e != 0 {
		return e
	}
	return nil
}

// getsockopt returns the length the kernel wrote.
func getsockopt(fd, level, name int, val unsafe.Pointer, size uintptr) (uintptr, error) {
	n := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(name),
		uintptr(val), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 {
		return 0, e
	}
	return uintptr(n), nil
}

// kick starts transmission of the TX ring (copy mode: the kernel transmits
// inside this call, up to its TX budget) or wakes the driver (zero-copy).
//
// raw makes it a raw system call, which the Go scheduler does not see: the
// goroutine keeps its P for the duration. A sendto that the scheduler sees
// and that lasts more than sysmon's 20µs tick has its P taken and handed to
// another thread, which wakes up, finds nothing to do and sleeps again, and
// the sender then has to get a P back: about 9 context switches per
// 256-frame sendto on veth (BenchmarkFrameRatePath, syscall vs
// xsk-generic). The sendto never blocks (MSG_DONTWAIT), so Send uses the
// raw call when it is short: see Socket.setup.
func kick(fd int, raw bool) error {
	var e unix.Errno
	if raw {
		_, _, e = unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	} else {
		_, _, e = unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	}
	if e != 0 {
		return e
	}
	return nil
}

// rawKickBudget is the largest copy-mode TX budget for which Send makes
// raw sendto calls: 256 frames take about 0.4ms on veth (1.5µs a frame at
// 64 bytes, receive path included), a pause the Go scheduler and garbage
// collector can bear; larger budgets use the scheduler-aware call. A
// variable for the benchmarks that compare the two.
var rawKickBudget = 256

// wakeRx wakes the driver's receive side (need_wakeup on the fill ring) or
// runs one round of busy polling.
func wakeRx(fd int) error {
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
