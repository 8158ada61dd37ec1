package cells

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// FrameWriter writes whole Ethernet frames to a pcapng file: the form of a
// capture that keeps everything a frame carries (MACs, the frame header,
// which cells shared the frame) and, per frame, its direction on the
// captured device. Wireshark decodes xam's frames in it with the dissector
// in tools/wireshark/xam.lua. Close records how many frames the capture
// missed as the interface's drop count (isb_ifdrop).
//
// pcapng (draft-ietf-opsawg-pcapng): a Section Header Block, one Interface
// Description Block (LINKTYPE_ETHERNET, nanosecond time stamps), an
// Enhanced Packet Block per frame with the epb_flags option for the
// direction, and at Close an Interface Statistics Block. Blocks are in
// this machine's byte order, as the format allows (its byte-order magic
// says which). Not safe for concurrent use.
type FrameWriter struct {
	w     io.Writer
	buf   []byte
	count uint64
	err   error
}

// Direction is a frame's direction on the captured device.
type Direction uint8

// The directions of epb_flags.
const (
	DirectionUnknown  Direction = 0
	DirectionInbound  Direction = 1 // the device received it
	DirectionOutbound Direction = 2 // the device sent it
)

const (
	pcapngSHB         = 0x0A0D0D0A
	pcapngIDB         = 1
	pcapngEPB         = 6
	pcapngISB         = 5
	pcapngByteOrder   = 0x1A2B3C4D
	pcapngOptEnd      = 0
	pcapngOptName     = 2 // if_name
	pcapngOptTSResol  = 9 // if_tsresol
	pcapngOptFlags    = 2 // epb_flags
	pcapngOptIfDrop   = 5 // isb_ifdrop
	pcapngOptRecv     = 4 // isb_ifrecv
	linkTypeEthernet  = 1
	maxCapturedLength = 262144 // Wireshark's largest; an Ethernet frame of MTU 65535 is 65549 bytes
)

var ne = binary.NativeEndian

// NewFrameWriter writes the file's header for a capture on device dev.
func NewFrameWriter(w io.Writer, dev string) (*FrameWriter, error) {
	f := &FrameWriter{w: w}
	// Section Header Block: no options, section length unknown (-1).
	shb := make([]byte, 28)
	ne.PutUint32(shb[0:], pcapngSHB)
	ne.PutUint32(shb[4:], 28)
	ne.PutUint32(shb[8:], pcapngByteOrder)
	ne.PutUint16(shb[12:], 1) // version 1.0
	ne.PutUint16(shb[14:], 0)
	ne.PutUint64(shb[16:], ^uint64(0))
	ne.PutUint32(shb[24:], 28)
	// Interface Description Block: Ethernet, the device's name, ns stamps.
	var opts []byte
	opts = appendOption(opts, pcapngOptName, []byte(dev))
	opts = appendOption(opts, pcapngOptTSResol, []byte{9})
	opts = appendOption(opts, pcapngOptEnd, nil)
	idb := make([]byte, 16, 20+len(opts))
	ne.PutUint16(idb[8:], linkTypeEthernet)
	ne.PutUint32(idb[12:], maxCapturedLength)
	idb = append(idb, opts...)
	idb = closeBlock(idb, pcapngIDB)
	if _, err := w.Write(append(shb, idb...)); err != nil {
		return nil, fmt.Errorf("cells: pcapng header: %w", err)
	}
	return f, nil
}

// appendOption appends a pcapng option, padded to 32 bits.
func appendOption(b []byte, code uint16, v []byte) []byte {
	var h [4]byte
	ne.PutUint16(h[0:], code)
	ne.PutUint16(h[2:], uint16(len(v)))
	b = append(b, h[:]...)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// closeBlock fills in block b's type and both length fields (b holds the
// type and length words first, then the body), appending the trailing one.
func closeBlock(b []byte, typ uint32) []byte {
	n := uint32(len(b) + 4)
	ne.PutUint32(b[0:], typ)
	ne.PutUint32(b[4:], n)
	return ne.AppendUint32(b, n)
}

// WriteFrame records one Ethernet frame received or sent at ts.
func (f *FrameWriter) WriteFrame(ts time.Time, frame []byte, dir Direction) error {
	if f.err != nil {
		return f.err
	}
	if len(frame) > maxCapturedLength {
		return fmt.Errorf("cells: a frame of %d bytes is longer than a capture keeps", len(frame))
	}
	b := f.buf[:0]
	b = append(b, make([]byte, 28)...)
	stamp := uint64(ts.UnixNano())
	ne.PutUint32(b[8:], 0) // interface 0
	ne.PutUint32(b[12:], uint32(stamp>>32))
	ne.PutUint32(b[16:], uint32(stamp))
	ne.PutUint32(b[20:], uint32(len(frame)))
	ne.PutUint32(b[24:], uint32(len(frame)))
	b = append(b, frame...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	if dir != DirectionUnknown {
		var flags [4]byte
		ne.PutUint32(flags[:], uint32(dir))
		b = appendOption(b, pcapngOptFlags, flags[:])
		b = appendOption(b, pcapngOptEnd, nil)
	}
	b = closeBlock(b, pcapngEPB)
	f.buf = b
	if _, err := f.w.Write(b); err != nil {
		f.err = fmt.Errorf("cells: pcapng frame: %w", err)
		return f.err
	}
	f.count++
	return nil
}

// Close records the interface's statistics at ts: frames recorded and
// frames the capture missed. It does not close the underlying writer.
func (f *FrameWriter) Close(ts time.Time, missed uint64) error {
	if f.err != nil {
		return f.err
	}
	b := make([]byte, 20)
	stamp := uint64(ts.UnixNano())
	ne.PutUint32(b[8:], 0)
	ne.PutUint32(b[12:], uint32(stamp>>32))
	ne.PutUint32(b[16:], uint32(stamp))
	var v [8]byte
	ne.PutUint64(v[:], f.count+missed)
	b = appendOption(b, pcapngOptRecv, v[:])
	ne.PutUint64(v[:], missed)
	b = appendOption(b, pcapngOptIfDrop, v[:])
	b = appendOption(b, pcapngOptEnd, nil)
	b = closeBlock(b, pcapngISB)
	if _, err := f.w.Write(b); err != nil {
		return fmt.Errorf("cells: pcapng statistics: %w", err)
	}
	f.err = errors.New("cells: frame writer closed")
	return nil
}
