//go:build linux

package afxdp

import "unsafe"

// UMEMRange returns the address range of s's UMEM mapping (shared or its
// own), for tests that check it is unmapped. It stays valid after Close.
func UMEMRange(s *Socket) (start, end uintptr) {
	start = uintptr(unsafe.Pointer(&s.part.mem[0]))
	return start, start + uintptr(len(s.part.mem))
}

// SharedErr is sharedErr, for testing how refusals are reported.
var SharedErr = sharedErr

// UMEMMapName is what /proc/self/maps shows for a UMEM mapping.
const UMEMMapName = umemName

// SetRawKickBudget sets the largest TX budget for which sockets opened
// afterwards make raw sendto calls (0: none in copy mode), and returns the
// previous value.
func SetRawKickBudget(n int) int {
	old := rawKickBudget
	rawKickBudget = n
	return old
}

// RawKick reports whether s makes raw sendto calls.
func RawKick(s *Socket) bool { return s.tx.rawKick }
