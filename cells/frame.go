package cells

import (
	"encoding/binary"
	"fmt"
	"net"
)

// xam carries whole cells in Ethernet II frames (docs/wire.md):
//
//	 0                   6                  12      14   15   16        18
//	+-------------------+-------------------+-------+----+----+---------+------------+
//	| destination MAC   | source MAC        | type  |ver |flg | cells   | cells ...  |
//	|                   |                   |0x88B5 | 1  | 0  | (BE 16) | 53 bytes   |
//	+-------------------+-------------------+-------+----+----+---------+------------+
//
// The frame header after the EtherType is four bytes: version (1), flags,
// and the number of cells that follow, big-endian. One flag is defined,
// FlagStart; the other bits are reserved, sent as zero and ignored on
// receipt. A frame carries at least one cell and as many as
// its MTU allows: (MTU-4)/53, which is 28 cells for the standard 1500.
const (
	// EtherType is the default EtherType of xam frames, from the IEEE
	// range for local experiments.
	EtherType uint16 = 0x88B5

	EthernetHeaderSize = 14
	FrameHeaderSize    = 4
	FrameVersion       = 1

	// DefaultMTU is the Ethernet MTU assumed when none is given.
	DefaultMTU = 1500
	// MaxFrameCells is the most cells a frame header can announce.
	MaxFrameCells = 0xffff

	// FlagStart in a frame header's flags says that the frame's first cell
	// is the first cell of an AAL5 PDU. A sender that spreads PDUs over
	// several frames sets it, so that a receiver can drop what it holds of
	// a PDU whose last frame was lost (Reassembler.Discard) instead of
	// running it into the next one. Senders whose frames each hold whole
	// PDUs may leave it clear.
	FlagStart uint8 = 0x01
)

// CellsPerFrame returns how many cells fit in one frame on a link with the
// given MTU (the Ethernet payload size, as `ip link` reports it).
func CellsPerFrame(mtu int) int {
	if mtu < FrameHeaderSize+CellSize {
		return 0
	}
	return min((mtu-FrameHeaderSize)/CellSize, MaxFrameCells)
}

// FrameLen returns the length of a frame, Ethernet header included, that
// carries n cells.
func FrameLen(n int) int { return EthernetHeaderSize + FrameHeaderSize + n*CellSize }

// FrameHeader is a view of the 4-byte xam frame header.
type FrameHeader []byte

func (h FrameHeader) Version() uint8 { return h[0] }
func (h FrameHeader) Flags() uint8   { return h[1] }
func (h FrameHeader) Cells() int     { return int(binary.BigEndian.Uint16(h[2:])) }

// Framer packs cells into frames for one link. Its fields are set once;
// it is then safe for concurrent use.
type Framer struct {
	Dst, Src  net.HardwareAddr // 6 bytes each
	EtherType uint16           // 0 means EtherType (0x88B5)
	MTU       int              // 0 means DefaultMTU
}

func (f *Framer) etherType() uint16 {
	if f.EtherType == 0 {
		return EtherType
	}
	return f.EtherType
}

func (f *Framer) mtu() int {
	if f.MTU == 0 {
		return DefaultMTU
	}
	return f.MTU
}

// CellsPerFrame returns how many cells fit in one of f's frames.
func (f *Framer) CellsPerFrame() int { return CellsPerFrame(f.mtu()) }

// Append appends one frame carrying cells (a whole number of 53-byte cells,
// at least one, no more than CellsPerFrame) to dst.
func (f *Framer) Append(dst, cells []byte) ([]byte, error) {
	n := len(cells) / CellSize
	switch {
	case len(cells)%CellSize != 0:
		return dst, fmt.Errorf("%w: %d bytes is not a whole number of cells", ErrShortCell, len(cells))
	case n == 0:
		return dst, fmt.Errorf("%w: a frame carries at least one cell", ErrFrameCount)
	case n > f.CellsPerFrame():
		return dst, fmt.Errorf("%w: %d cells, MTU %d holds %d", ErrFrameTooBig, n, f.mtu(), f.CellsPerFrame())
	case len(f.Dst) != 6 || len(f.Src) != 6:
		return dst, fmt.Errorf("cells: framer needs 6-byte MACs (dst %v, src %v)", f.Dst, f.Src)
	}
	dst = append(dst, f.Dst...)
	dst = append(dst, f.Src...)
	dst = binary.BigEndian.AppendUint16(dst, f.etherType())
	dst = append(dst, FrameVersion, 0)
	dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	return append(dst, cells...), nil
}

// Pack splits cells into as few frames as the MTU allows and calls emit
// with each; a frame passed to emit is reused for the next one. It stops at
// emit's first error.
func (f *Framer) Pack(buf, cells []byte, emit func(frame []byte) error) error {
	if len(cells)%CellSize != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of cells", ErrShortCell, len(cells))
	}
	per := f.CellsPerFrame() * CellSize
	if per == 0 {
		return fmt.Errorf("%w: MTU %d holds no cell", ErrFrameTooBig, f.mtu())
	}
	for len(cells) > 0 {
		k := min(per, len(cells))
		frame, err := f.Append(buf[:0], cells[:k])
		if err != nil {
			return err
		}
		if err := emit(frame); err != nil {
			return err
		}
		buf = frame
		cells = cells[k:]
	}
	return nil
}

// Unpack checks a received Ethernet frame and returns its cells (aliasing
// frame) and its header. etherType 0 means EtherType. It checks the
// EtherType, the version, and that exactly the announced number of cells
// follows the header.
func Unpack(frame []byte, etherType uint16) (cells []byte, hdr FrameHeader, err error) {
	if etherType == 0 {
		etherType = EtherType
	}
	if len(frame) < EthernetHeaderSize+FrameHeaderSize {
		return nil, nil, fmt.Errorf("%w: %d bytes, shorter than the headers", ErrFrameTruncated, len(frame))
	}
	if t := binary.BigEndian.Uint16(frame[12:]); t != etherType {
		return nil, nil, fmt.Errorf("%w: EtherType %#04x, want %#04x", ErrFrameType, t, etherType)
	}
	return UnpackPayload(frame[EthernetHeaderSize:])
}

// UnpackCell is Unpack for a frame of exactly one cell, a receive path's
// short way for the frames of single-cell messages: ok false where the
// frame is longer or shorter, or Unpack refuses it (without Unpack's
// error), else the cell and the frame header.
func UnpackCell(frame []byte, etherType uint16) (c Cell, hdr FrameHeader, ok bool) {
	if etherType == 0 {
		etherType = EtherType
	}
	const n = EthernetHeaderSize + FrameHeaderSize + CellSize
	if len(frame) != n {
		return nil, nil, false
	}
	x := (*[n]byte)(frame) // checked once
	if binary.BigEndian.Uint16(x[12:]) != etherType || x[EthernetHeaderSize] != FrameVersion ||
		binary.BigEndian.Uint16(x[EthernetHeaderSize+2:]) != 1 {
		return nil, nil, false
	}
	return Cell(x[EthernetHeaderSize+FrameHeaderSize:]), FrameHeader(x[EthernetHeaderSize : EthernetHeaderSize+FrameHeaderSize]), true
}

// UnpackPair is UnpackCell for a frame of exactly two cells.
func UnpackPair(frame []byte, etherType uint16) (c, next Cell, hdr FrameHeader, ok bool) {
	if etherType == 0 {
		etherType = EtherType
	}
	const n = EthernetHeaderSize + FrameHeaderSize + 2*CellSize
	if len(frame) != n {
		return nil, nil, nil, false
	}
	x := (*[n]byte)(frame) // checked once
	if binary.BigEndian.Uint16(x[12:]) != etherType || x[EthernetHeaderSize] != FrameVersion ||
		binary.BigEndian.Uint16(x[EthernetHeaderSize+2:]) != 2 {
		return nil, nil, nil, false
	}
	const at = EthernetHeaderSize + FrameHeaderSize
	return Cell(x[at : at+CellSize]), Cell(x[at+CellSize:]), FrameHeader(x[EthernetHeaderSize:at]), true
}

// UnpackPayload is Unpack for the bytes after the Ethernet header.
func UnpackPayload(p []byte) (cells []byte, hdr FrameHeader, err error) {
	if len(p) < FrameHeaderSize {
		return nil, nil, fmt.Errorf("%w: %d bytes, shorter than the frame header", ErrFrameTruncated, len(p))
	}
	hdr = FrameHeader(p[:FrameHeaderSize])
	if v := hdr.Version(); v != FrameVersion {
		return nil, nil, fmt.Errorf("%w: version %d, want %d", ErrFrameVersion, v, FrameVersion)
	}
	n := hdr.Cells()
	body := p[FrameHeaderSize:]
	switch {
	case n == 0:
		return nil, nil, fmt.Errorf("%w: header announces no cells", ErrFrameCount)
	case len(body) < n*CellSize:
		return nil, nil, fmt.Errorf("%w: header announces %d cells (%d bytes), %d bytes follow",
			ErrFrameTruncated, n, n*CellSize, len(body))
	case len(body) > n*CellSize:
		return nil, nil, fmt.Errorf("%w: header announces %d cells (%d bytes), %d bytes follow",
			ErrFrameCount, n, n*CellSize, len(body))
	}
	return body, hdr, nil
}
