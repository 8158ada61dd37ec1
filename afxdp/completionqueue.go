//go:build linux

package afxdp

import "unsafe"

// completionQueue is the completion ring: the kernel produces the UMEM
// addresses of transmitted frames (the kernel is done with them: sent or
// dropped, not necessarily delivered), we consume them and reuse the chunks.
// Owned by the TX side.
type completionQueue struct{ ring }

// reap moves up to len(dst) completed addresses into dst and returns how
// many it moved.
func (q *completionQueue) reap(dst []uint64) int {
	n := q.consAvail(uint32(len(dst)))
	idx := q.cachedCons
	for i := uint32(0); i < n; i++ {
		dst[i] = *(*uint64)(unsafe.Add(q.descs, uintptr((idx+i)&q.mask)*8))
	}
	q.consRelease(n)
	return int(n)
}
