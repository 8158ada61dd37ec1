//go:build linux

package afxdp

import "unsafe"

// UMEMRange returns the address range of s's UMEM mapping, for tests that
// check it is unmapped.
func UMEMRange(s *Socket) (start, end uintptr) {
	start = uintptr(unsafe.Pointer(&s.umem.mem[0]))
	return start, start + uintptr(len(s.umem.mem))
}
