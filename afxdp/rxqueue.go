//go:build linux

package afxdp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// rxQueue is the RX ring: the kernel produces descriptors of received
// frames (UMEM address and length), we consume them. Owned by the RX side.
type rxQueue struct{ ring }

// peek returns how many descriptors are ready (at most want) and the index
// of the first; get reads them, release gives their slots back.
func (q *rxQueue) peek(want uint32) (n, idx uint32) {
	return q.consAvail(want), q.cachedCons
}

// get returns the descriptor at index idx.
func (q *rxQueue) get(idx uint32) unix.XDPDesc {
	return *(*unix.XDPDesc)(unsafe.Add(q.descs, uintptr(idx&q.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// release gives n peeked descriptor slots back to the kernel.
func (q *rxQueue) release(n uint32) { q.consRelease(n) }
