package cells

import (
	"encoding/binary"
	"fmt"
)

// SSAM's single-cell message fills the 48-byte payload of one cell with an
// 8-byte header and 40 bytes of data (von Eicken et al., section 3):
//
//	byte  0       1       2       3       4       5       6       7
//	    +---------------+-------------------------------+---------------+
//	    | flow control  |            handler            |len(6)|CRC-10  |
//	    +---------------+-------------------------------+---------------+
//	8.. |                 data (40 bytes, len of them used)             |
//
// Flow control is 16 bits the Active Messages layer owns (sequence and
// acknowledgement numbers). Handler names the handler to run, as an index
// into the receiver's table. The last 16-bit field holds the number of data
// bytes in use (0..40) in its top six bits and, in its low ten bits, the
// AAL3/4 CRC-10 of the whole 48-byte payload computed with those ten bits
// set to zero. The unused data bytes are zero.
const (
	SSAMHeaderSize = 8
	SSAMDataSize   = PayloadSize - SSAMHeaderSize // 40

	ssamFlowOffset    = 0
	ssamHandlerOffset = 2
	ssamCheckOffset   = 6
	ssamCRCMask       = 0x3ff
	ssamLenShift      = 10
)

// SSAMCell is a view of the 48-byte payload of an SSAM single-cell message.
type SSAMCell []byte

// FlowControl returns the 16 flow-control bits.
func (s SSAMCell) FlowControl() uint16 { return binary.BigEndian.Uint16(s[ssamFlowOffset:]) }

// Handler returns the handler index.
func (s SSAMCell) Handler() uint32 { return binary.BigEndian.Uint32(s[ssamHandlerOffset:]) }

// Len returns the number of data bytes in use, as carried (not checked).
func (s SSAMCell) Len() int { return int(binary.BigEndian.Uint16(s[ssamCheckOffset:]) >> ssamLenShift) }

// CRC returns the CRC-10 field as carried.
func (s SSAMCell) CRC() uint16 { return binary.BigEndian.Uint16(s[ssamCheckOffset:]) & ssamCRCMask }

// Data returns the data bytes in use. Call Check first: with a length
// field above 40 it returns all 40.
func (s SSAMCell) Data() []byte {
	return s[SSAMHeaderSize : SSAMHeaderSize+min(s.Len(), SSAMDataSize)]
}

// ssamCRC computes the CRC-10 of payload p with the CRC bits taken as zero.
func ssamCRC(p []byte) uint16 {
	var b [PayloadSize]byte
	copy(b[:], p[:PayloadSize])
	b[ssamCheckOffset] &^= 0b11
	b[ssamCheckOffset+1] = 0
	return CRC10(b[:])
}

// EncodeSSAM writes an SSAM single-cell message into the 48-byte payload p:
// the header, data (at most 40 bytes), zero fill and the CRC-10.
func EncodeSSAM(p []byte, flow uint16, handler uint32, data []byte) error {
	if len(p) < PayloadSize {
		return fmt.Errorf("%w: SSAM payload buffer of %d bytes, want %d", ErrShortCell, len(p), PayloadSize)
	}
	if len(data) > SSAMDataSize {
		return fmt.Errorf("%w: %d data bytes, an SSAM cell holds %d", ErrSSAM, len(data), SSAMDataSize)
	}
	binary.BigEndian.PutUint16(p[ssamFlowOffset:], flow)
	binary.BigEndian.PutUint32(p[ssamHandlerOffset:], handler)
	binary.BigEndian.PutUint16(p[ssamCheckOffset:], uint16(len(data))<<ssamLenShift)
	n := copy(p[SSAMHeaderSize:PayloadSize], data)
	clear(p[SSAMHeaderSize+n : PayloadSize])
	binary.BigEndian.PutUint16(p[ssamCheckOffset:], uint16(len(data))<<ssamLenShift|ssamCRC(p))
	return nil
}

// Check verifies an SSAM payload: its size, its CRC-10 and its length
// field. Errors wrap ErrShortCell or ErrSSAM.
func (s SSAMCell) Check() error {
	if len(s) != PayloadSize {
		return fmt.Errorf("%w: SSAM payload of %d bytes, want %d", ErrShortCell, len(s), PayloadSize)
	}
	if got, want := s.CRC(), ssamCRC(s); got != want {
		return fmt.Errorf("%w: CRC-10 %#03x, computed %#03x", ErrSSAM, got, want)
	}
	if n := s.Len(); n > SSAMDataSize {
		return fmt.Errorf("%w: length field %d exceeds %d", ErrSSAM, n, SSAMDataSize)
	}
	return nil
}
