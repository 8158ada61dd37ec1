//go:build linux

package afxdp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// umem is the packet memory shared with the kernel: an anonymous,
// page-aligned mapping cut into equal chunks of frameSize bytes, one frame
// per chunk (the kernel's aligned mode). It is reference-counted: every
// socket using it holds a reference (and a UMEM handle one more), and the
// last put unmaps it, so the mapping outlives every socket that uses it.
type umem struct {
	mem       []byte
	frameSize uint64
	refs      atomic.Int32
}

// umemName names the memory file behind a UMEM, so that its mapping shows
// in /proc/PID/maps as "/memfd:xam-AF_XDP-UMEM (deleted)".
const umemName = "xam-AF_XDP-UMEM"

// newUMEM maps a UMEM of chunks chunks of frameSize bytes, with one
// reference. The memory is a memfd named umemName, mapped shared, so that
// the mapping can be told from others (tests check that it goes); if
// memfd_create is refused, it is anonymous memory.
func newUMEM(frameSize, chunks int) (*umem, error) {
	size := frameSize * chunks
	mem, err := mapMemfd(size)
	if err != nil {
		mem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	}
	if err != nil {
		return nil, fmt.Errorf("mapping %d bytes of UMEM: %w", size, err)
	}
	u := &umem{mem: mem, frameSize: uint64(frameSize)}
	u.refs.Store(1)
	return u, nil
}

// mapMemfd maps size bytes of a new memfd named umemName; the mapping keeps
// the file alive, the descriptor is closed.
func mapMemfd(size int) ([]byte, error) {
	fd, err := unix.MemfdCreate(umemName, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return nil, err
	}
	return unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
}

// register registers the UMEM with socket fd (XDP_UMEM_REG), with txMeta
// bytes of TX metadata in front of each transmit frame (0: none). Kernels
// from 6.8 to 6.10 take the length without XDP_UMEM_TX_METADATA_LEN, which
// later ones require: the flag is tried first.
func (u *umem) register(fd, headroom, txMeta int) error {
	reg := unix.XDPUmemReg{
		Addr:     uint64(uintptr(unsafe.Pointer(&u.mem[0]))),
		Len:      uint64(len(u.mem)),
		Size:     uint32(u.frameSize),
		Headroom: uint32(headroom),
	}
	if txMeta > 0 {
		reg.Tx_metadata_len, reg.Flags = uint32(txMeta), unix.XDP_UMEM_TX_METADATA_LEN
		err := setsockopt(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg))
		if err != unix.EINVAL {
			return err
		}
		reg.Flags = 0
	}
	return setsockopt(fd, unix.SOL_XDP, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg))
}

// get takes a reference.
func (u *umem) get() { u.refs.Add(1) }

// put drops a reference; the last one unmaps the memory. The kernel keeps
// its own pins on the pages while a socket still holds the UMEM.
func (u *umem) put() error {
	if u.refs.Add(-1) != 0 {
		return nil
	}
	err := unix.Munmap(u.mem)
	u.mem = nil
	return err
}

// share is the part of a UMEM that one socket owns, and the socket's view
// of the mapping: rxChunks chunks from rxBase for receiving (they circulate
// fill ring -> RX ring -> lent to the caller -> fill ring) and txChunks
// from txBase for transmitting (free list -> TX ring -> completion ring ->
// free list). The RX side touches only the first, the TX side only the
// second, so the two sides need no common lock; and no other socket of a
// shared UMEM touches either.
type share struct {
	mem       []byte // the whole UMEM mapping
	frameSize uint64
	rxBase    uint64 // UMEM address of the first receive chunk
	txBase    uint64 // UMEM address of the first transmit chunk
	rxChunks  uint32
	txChunks  uint32
}

// newShare returns the share of rx+tx chunks of u from the chunk at
// address base.
func newShare(u *umem, base uint64, rx, tx int) share {
	return share{
		mem: u.mem, frameSize: u.frameSize,
		rxBase: base, rxChunks: uint32(rx),
		txBase: base + uint64(rx)*u.frameSize, txChunks: uint32(tx),
	}
}

// rxAddr and txAddr return the UMEM address of the i-th RX or TX chunk.
func (p *share) rxAddr(i uint32) uint64 { return p.rxBase + uint64(i)*p.frameSize }
func (p *share) txAddr(i uint32) uint64 { return p.txBase + uint64(i)*p.frameSize }

// isRx and isTx report whether addr lies in one of the share's RX or TX
// chunks.
func (p *share) isRx(addr uint64) bool {
	return addr >= p.rxBase && addr-p.rxBase < uint64(p.rxChunks)*p.frameSize
}
func (p *share) isTx(addr uint64) bool {
	return addr >= p.txBase && addr-p.txBase < uint64(p.txChunks)*p.frameSize
}

// chunk returns the address of the chunk that holds addr.
func (p *share) chunk(addr uint64) uint64 { return addr &^ (p.frameSize - 1) }

// frame returns the bytes of a received frame the kernel described, capped
// so that appending to it cannot reach the next chunk, and whether the
// descriptor lies within one of the share's RX chunks (the kernel's always
// do).
func (p *share) frame(addr uint64, n uint32) ([]byte, bool) {
	end := addr + uint64(n)
	if !p.isRx(addr) || end < addr || p.chunk(addr) != p.chunk(end-1) || end > uint64(len(p.mem)) {
		return nil, false
	}
	return p.mem[addr:end:end], true
}

// metadata returns the n bytes in front of frame, a frame that Recv lent
// from one of the share's RX chunks, within its chunk; nil for a frame
// that is not one (a gathered multi-buffer frame, a copy).
func (p *share) metadata(frame []byte, n int) []byte {
	if len(frame) == 0 || len(p.mem) == 0 || n < 0 {
		return nil
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(p.mem)))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(frame)))
	if at < base || at-base >= uintptr(len(p.mem)) {
		return nil
	}
	addr := uint64(at - base)
	if !p.isRx(addr) || addr < uint64(n) || p.chunk(addr-uint64(n)) != p.chunk(addr) {
		return nil
	}
	return p.mem[addr-uint64(n) : addr : addr]
}
