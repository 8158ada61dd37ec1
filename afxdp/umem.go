//go:build linux

package afxdp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// umem is the packet memory shared with the kernel: an anonymous,
// page-aligned mapping cut into equal chunks of frameSize bytes, one frame
// per chunk (the kernel's aligned mode). The first rxChunks chunks belong to
// the RX side (they circulate fill ring -> RX ring -> lent to the caller ->
// fill ring), the next txChunks to the TX side (free list -> TX ring ->
// completion ring -> free list). Neither side ever touches the other's
// chunks, so the two need no common lock.
type umem struct {
	mem       []byte
	frameSize uint64
	rxChunks  uint32
	txChunks  uint32
}

// newUMEM maps a UMEM of rx+tx chunks of frameSize bytes.
func newUMEM(frameSize, rx, tx int) (*umem, error) {
	size := frameSize * (rx + tx)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes of UMEM: %w", size, err)
	}
	return &umem{mem: mem, frameSize: uint64(frameSize), rxChunks: uint32(rx), txChunks: uint32(tx)}, nil
}

// register registers the UMEM with socket fd (XDP_UMEM_REG).
func (u *umem) register(fd, headroom int) error {
	reg := unix.XDPUmemReg{
		Addr:     uint64(uintptr(unsafe.Pointer(&u.mem[0]))),
		Len:      uint64(len(u.mem)),
		Size:     uint32(u.frameSize),
		Headroom: uint32(headroom),
	}
	return setsockopt(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg))
}

// rxAddr and txAddr return the UMEM address of the i-th RX or TX chunk.
func (u *umem) rxAddr(i uint32) uint64 { return uint64(i) * u.frameSize }
func (u *umem) txAddr(i uint32) uint64 { return uint64(u.rxChunks+i) * u.frameSize }

// chunk returns the address of the chunk that holds addr.
func (u *umem) chunk(addr uint64) uint64 { return addr &^ (u.frameSize - 1) }

// frame returns the bytes of a frame the kernel described, capped so that
// appending to it cannot reach the next chunk, and whether the descriptor
// lies within one chunk of the UMEM (the kernel's always do).
func (u *umem) frame(addr uint64, n uint32) ([]byte, bool) {
	end := addr + uint64(n)
	if end > uint64(len(u.mem)) || end < addr || u.chunk(addr) != u.chunk(end-1) {
		return nil, false
	}
	return u.mem[addr:end:end], true
}

// unmap releases the mapping. The kernel keeps its own pins on the pages
// while a socket still holds the UMEM.
func (u *umem) unmap() error {
	if u.mem == nil {
		return nil
	}
	err := unix.Munmap(u.mem)
	u.mem = nil
	return err
}
