//go:build linux

package afxdp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is what the four rings share: an area mmapped from the socket that
// holds the producer and consumer indices, the flags word and the
// descriptors. The indices are free-running uint32 counters; an entry's slot
// is index&mask.
//
// One side produces and the other consumes. The shared indices are only
// ever accessed through sync/atomic (Go's atomics are sequentially
// consistent, stronger than the acquire/release the kernel's side pairs
// with); each side keeps a cached copy of the other side's index and reads
// the shared one only when the cached value says the ring is full (producer)
// or empty (consumer), as libxdp and gVisor do.
//
// A ring is not safe for concurrent use: its owner (the Socket's RX or TX
// side) serialises access.
type ring struct {
	mem      []byte         // the mmapped area; nil when unmapped
	producer *atomic.Uint32 // in mem
	consumer *atomic.Uint32 // in mem
	flags    *atomic.Uint32 // in mem (XDP_RING_NEED_WAKEUP)
	descs    unsafe.Pointer // first descriptor, in mem
	mask     uint32         // size-1
	size     uint32

	// cachedProd and cachedCons are the local copies of the indices. For a
	// ring we produce, cachedProd is ours and cachedCons the kernel's as last
	// read; for a ring we consume, the other way round.
	cachedProd uint32
	cachedCons uint32
}

// mapRing mmaps the ring at page offset pgoff of socket fd, with size
// descriptors of descSize bytes laid out as off describes.
func mapRing(fd int, pgoff int64, off unix.XDPRingOffset, size uint32, descSize uintptr) (ring, error) {
	length := int(off.Desc) + int(size)*int(descSize)
	for _, o := range []uint64{off.Producer, off.Consumer, off.Flags} {
		if o+4 > off.Desc || o%4 != 0 {
			return ring{}, fmt.Errorf("kernel reports ring offsets %+v: index at %d out of place", off, o)
		}
	}
	mem, err := unix.Mmap(fd, pgoff, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return ring{}, err
	}
	r := ring{
		mem:      mem,
		producer: (*atomic.Uint32)(unsafe.Pointer(&mem[off.Producer])),
		consumer: (*atomic.Uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags:    (*atomic.Uint32)(unsafe.Pointer(&mem[off.Flags])),
		descs:    unsafe.Pointer(&mem[off.Desc]),
		mask:     size - 1,
		size:     size,
	}
	r.cachedProd = r.producer.Load()
	r.cachedCons = r.consumer.Load()
	return r, nil
}

// unmap releases the mapping; the ring must not be used afterwards.
func (r *ring) unmap() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	*r = ring{}
	return err
}

// needWakeup reports whether the kernel asks to be woken up (a system call)
// to process this ring.
func (r *ring) needWakeup() bool {
	return r.flags.Load()&unix.XDP_RING_NEED_WAKEUP != 0
}

// prodFree returns how many entries the producer can write (at most want),
// reading the kernel's consumer index only if the cached one leaves fewer
// than want free.
func (r *ring) prodFree(want uint32) uint32 {
	free := r.size - (r.cachedProd - r.cachedCons)
	if free < want {
		r.cachedCons = r.consumer.Load()
		free = r.size - (r.cachedProd - r.cachedCons)
	}
	return min(free, want)
}

// prodSubmit publishes n entries written after the producer index.
func (r *ring) prodSubmit(n uint32) {
	r.cachedProd += n
	r.producer.Store(r.cachedProd)
}

// consAvail returns how many entries the consumer can read (at most want),
// reading the kernel's producer index only if the cached one shows none.
func (r *ring) consAvail(want uint32) uint32 {
	avail := r.cachedProd - r.cachedCons
	if avail == 0 {
		r.cachedProd = r.producer.Load()
		avail = r.cachedProd - r.cachedCons
	}
	return min(avail, want)
}

// consRelease gives n read entries back to the kernel.
func (r *ring) consRelease(n uint32) {
	r.cachedCons += n
	r.consumer.Store(r.cachedCons)
}

// pending returns how many produced entries the kernel has not consumed yet.
func (r *ring) pending() uint32 {
	r.cachedCons = r.consumer.Load()
	return r.cachedProd - r.cachedCons
}

// peekReady reports whether the kernel produced entries we have not read,
// with one atomic load and no change to the cached indices; for spinning.
func (r *ring) peekReady() bool {
	return r.producer.Load() != r.cachedCons
}
