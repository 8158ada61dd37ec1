//go:build linux

package afxdp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// txQueue is the TX ring: we produce descriptors of frames to transmit, the
// kernel consumes them (in copy mode, only inside a system call: sendto or
// poll) and puts their addresses on the completion ring. Owned by the TX
// side.
type txQueue struct{ ring }

// free returns the number of free descriptor slots, at most want.
func (q *txQueue) free(want uint32) uint32 { return q.prodFree(want) }

// set writes the i-th descriptor after the producer index; submit publishes
// the first n of them.
func (q *txQueue) set(i uint32, d unix.XDPDesc) {
	*(*unix.XDPDesc)(unsafe.Add(q.descs, uintptr((q.cachedProd+i)&q.mask)*unsafe.Sizeof(unix.XDPDesc{}))) = d
}

// submit publishes the n descriptors written with set.
func (q *txQueue) submit(n uint32) { q.prodSubmit(n) }
