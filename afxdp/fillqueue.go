//go:build linux

package afxdp

import "unsafe"

// fillQueue is the fill ring: we produce the UMEM addresses of free chunks,
// the kernel consumes them and receives frames into them. Owned by the RX
// side.
type fillQueue struct{ ring }

// fill hands the chunks at addrs to the kernel; the caller has checked with
// free that there is room for all of them.
func (q *fillQueue) fill(addrs []uint64) {
	idx := q.cachedProd
	for i, a := range addrs {
		*(*uint64)(unsafe.Add(q.descs, uintptr((idx+uint32(i))&q.mask)*8)) = a
	}
	q.prodSubmit(uint32(len(addrs)))
}

// free returns the number of free entries, at most want.
func (q *fillQueue) free(want uint32) uint32 { return q.prodFree(want) }
