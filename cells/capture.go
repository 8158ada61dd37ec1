package cells

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Captures. Ethernet frames of an experimental EtherType mean nothing to
// Wireshark, so CaptureWriter records what they carry instead: pcap files
// of link type ERF (Endace Extensible Record Format, LINKTYPE_ERF 197),
// whose record types include raw ATM cells and whole AAL5 PDUs. Wireshark
// shows each cell's GFC/VPI/VCI/PTI/CLP and, for each AAL5 record, the
// trailer and whether its CRC-32 is correct.
//
// An ERF record is a 16-byte header followed, for both ATM types, by the
// first four bytes of the ATM header (no HEC) and then the data:
//
//	 0               8      9      10      12      14      16     20
//	+---------------+------+------+-------+-------+-------+------+-----------------+
//	| timestamp     | type | flags| rlen  | lctr  | wlen  | ATM  | 48-byte payload |
//	| LE, 32.32 fix | 3/4  |      | BE    | BE, 0 | BE    | hdr  | or CPCS-PDU     |
//	+---------------+------+------+-------+-------+-------+------+-----------------+
//
// Type 3 carries one cell's payload, type 4 a whole CPCS-PDU with its pad
// and trailer. Wireshark takes the frame length from wlen, the number of
// bytes after the 16-byte header, so wlen must be exact. Being 16 bits, it
// limits an AAL5 record to a CPCS-PDU of 65472 bytes (an SDU of at most
// 65464); longer PDUs are recorded as their cells only and WritePDU says so
// with ErrCaptureTooLong.
const (
	// LinkTypeERF is the pcap link type of ERF records.
	LinkTypeERF layers.LinkType = 197

	erfHeaderSize = 16
	erfTypeATM    = 3
	erfTypeAAL5   = 4
	erfVarLen     = 0x04 // flags: varying-length record
	erfATMHdrSize = 4
	// MaxCapturePDU is the longest CPCS-PDU an ERF AAL5 record can hold.
	MaxCapturePDU = (0xffff - erfATMHdrSize) / PayloadSize * PayloadSize
)

// ErrCaptureTooLong: a PDU too long for one ERF AAL5 record.
var ErrCaptureTooLong = errors.New("cells: PDU too long for an ERF AAL5 record")

// CaptureWriter writes cells and PDUs to a pcap file in ERF encapsulation.
// It is not safe for concurrent use.
type CaptureWriter struct {
	w      *pcapgo.Writer
	format Format
	iface  uint8
	buf    []byte
}

// NewCaptureWriter writes the pcap file header to w and returns a writer
// for cells in the given header format. NNI cells are recorded with their
// 12-bit VPI in the header word, which Wireshark shows in its UNI layout.
func NewCaptureWriter(w io.Writer, f Format) (*CaptureWriter, error) {
	pw := pcapgo.NewWriter(w)
	if err := pw.WriteFileHeader(0xffff, LinkTypeERF); err != nil {
		return nil, fmt.Errorf("cells: capture: %w", err)
	}
	return &CaptureWriter{w: pw, format: f}, nil
}

// SetInterface sets the ERF interface number (0..3) of the records that
// follow; Wireshark shows it as the port and direction.
func (c *CaptureWriter) SetInterface(i uint8) { c.iface = i & 3 }

// WriteCell records one cell (53 bytes; the HEC is not recorded).
func (c *CaptureWriter) WriteCell(ts time.Time, cell Cell) error {
	if len(cell) < CellSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrShortCell, len(cell), CellSize)
	}
	return c.write(ts, erfTypeATM, binary.BigEndian.Uint32(cell), cell[payloadOffset:CellSize])
}

// WriteCells records every cell of a buffer of whole cells.
func (c *CaptureWriter) WriteCells(ts time.Time, cells []byte) error {
	if len(cells)%CellSize != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of cells", ErrShortCell, len(cells))
	}
	for o := 0; o < len(cells); o += CellSize {
		if err := c.WriteCell(ts, Cell(cells[o:o+CellSize])); err != nil {
			return err
		}
	}
	return nil
}

// WritePDU records a reassembled CPCS-PDU (SDU, pad and trailer, a
// multiple of 48 bytes) received on vc.
func (c *CaptureWriter) WritePDU(ts time.Time, vc VC, cpcs []byte) error {
	switch {
	case len(cpcs) == 0 || len(cpcs)%PayloadSize != 0:
		return fmt.Errorf("cells: capture: a CPCS-PDU of %d bytes is not a whole number of cell payloads", len(cpcs))
	case len(cpcs) > MaxCapturePDU:
		return fmt.Errorf("%w: %d bytes on VC %v, the limit is %d", ErrCaptureTooLong, len(cpcs), vc, MaxCapturePDU)
	}
	h := Fields{VPI: vc.VPI, VCI: vc.VCI}
	return c.write(ts, erfTypeAAL5, h.header(c.format), cpcs)
}

// write appends one ERF record with the given ATM header word and data.
func (c *CaptureWriter) write(ts time.Time, typ uint8, atmHdr uint32, data []byte) error {
	wlen := erfATMHdrSize + len(data)
	n := erfHeaderSize + wlen
	b := c.buf[:0]
	sec, frac := uint64(ts.Unix()), uint64(ts.Nanosecond())<<32/1e9
	b = binary.LittleEndian.AppendUint64(b, sec<<32|frac)
	b = append(b, typ, erfVarLen|c.iface)
	b = binary.BigEndian.AppendUint16(b, uint16(n))
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(wlen))
	b = binary.BigEndian.AppendUint32(b, atmHdr)
	b = append(b, data...)
	c.buf = b
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: n, Length: n}
	if err := c.w.WritePacket(ci, b); err != nil {
		return fmt.Errorf("cells: capture: %w", err)
	}
	return nil
}
