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
func kick(fd int) error {
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// wakeRx wakes the driver's receive side (need_wakeup on the fill ring) or
// runs one round of busy polling.
func wakeRx(fd int) error {
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
