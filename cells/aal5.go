package cells

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/xam-project/xam/cells/internal/crc32aal5"
)

// AAL5 (ITU-T I.363.5). The common part convergence sublayer turns an SDU
// of 1..65535 bytes into a CPCS-PDU whose length is a multiple of 48:
//
//	+---------------------+---------+-------+-------+-----------+-----------+
//	|  SDU (0..65535)     | PAD     |CPCS-UU|  CPI  |  Length   |  CRC-32   |
//	|                     | (0..47) |  (1)  |  (1)  |   (2)     |   (4)     |
//	+---------------------+---------+-------+-------+-----------+-----------+
//	                                 \______________ trailer (8) __________/
//
// The pad is zero, Length is the SDU length, and the CRC-32 covers the whole
// PDU up to the CRC field. The SAR sublayer cuts the PDU into 48-byte cell
// payloads and marks the last cell with the PTI end-of-message bit.
const (
	TrailerSize = 8
	MaxSDU      = 65535
	// MaxPDUCells is the number of cells of the longest PDU.
	MaxPDUCells = (MaxSDU + TrailerSize + PayloadSize - 1) / PayloadSize
)

// CRC32 returns the AAL5 CRC-32 of p: generator 0x04C11DB7, most
// significant bit first, initial value all ones, result complemented. The
// CRC of "123456789" is 0xFC891918.
func CRC32(p []byte) uint32 { return crc32aal5.Checksum(p) }

// UpdateCRC32 returns the CRC-32 of the data that had CRC crc followed by
// p; UpdateCRC32(0, p) == CRC32(p).
func UpdateCRC32(crc uint32, p []byte) uint32 { return crc32aal5.Update(crc, p) }

// PDULen returns the length of the CPCS-PDU that carries an SDU of n bytes.
func PDULen(n int) int {
	return (n + TrailerSize + PayloadSize - 1) / PayloadSize * PayloadSize
}

// CellCount returns the number of cells that carry an SDU of n bytes.
func CellCount(n int) int { return PDULen(n) / PayloadSize }

// Trailer is a view of the 8-byte CPCS-PDU trailer.
type Trailer []byte

func (t Trailer) UU() uint8       { return t[0] }
func (t Trailer) CPI() uint8      { return t[1] }
func (t Trailer) Length() int     { return int(binary.BigEndian.Uint16(t[2:])) }
func (t Trailer) CRC() uint32     { return binary.BigEndian.Uint32(t[4:]) }
func (t Trailer) setCRC(c uint32) { binary.BigEndian.PutUint32(t[4:], c) }

// SAR describes the circuit and header of the cells a Segmenter makes.
type SAR struct {
	Format Format
	VPI    uint16
	VCI    uint16
	GFC    uint8 // UNI only
	CLP    bool  // set on every cell
	UU     uint8 // CPCS user-to-user byte
	CPI    uint8 // common part indicator; I.363.5 defines only 0
}

// Segmenter turns SDUs into cells on one circuit. Build it with
// NewSegmenter, which checks the header fields once, so that segmenting
// costs no checks and no allocations. A Segmenter is immutable and safe for
// concurrent use.
type Segmenter struct {
	sar       SAR
	word      uint32 // header of every cell but the last (PTI 000)
	hec       uint8
	lastWord  uint32 // header of the last cell (PTI 001)
	lastHEC   uint8
	trailerHi [2]byte // UU, CPI
}

// NewSegmenter checks the header fields and returns a Segmenter for them.
func NewSegmenter(s SAR) (*Segmenter, error) {
	h := Fields{GFC: s.GFC, VPI: s.VPI, VCI: s.VCI, CLP: s.CLP}
	if err := h.Check(s.Format); err != nil {
		return nil, err
	}
	g := &Segmenter{sar: s, trailerHi: [2]byte{s.UU, s.CPI}}
	g.word = h.header(s.Format)
	h.PTI = PTIEndOfMessage
	g.lastWord = h.header(s.Format)
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], g.word)
	g.hec = HEC(b[:])
	binary.BigEndian.PutUint32(b[:], g.lastWord)
	g.lastHEC = HEC(b[:])
	return g, nil
}

// SAR returns the segmenter's settings.
func (g *Segmenter) SAR() SAR { return g.sar }

// Append appends the cells of sdu's CPCS-PDU to dst and returns the
// extended slice. It allocates only when dst lacks capacity for
// CellCount(len(sdu))*CellSize more bytes.
func (g *Segmenter) Append(dst, sdu []byte) ([]byte, error) {
	if err := checkSDU(len(sdu)); err != nil {
		return dst, err
	}
	n := CellCount(len(sdu)) * CellSize
	dst = slices.Grow(dst, n)
	g.put(dst[len(dst):len(dst)+n], sdu)
	return dst[:len(dst)+n], nil
}

// Put writes the cells of sdu's CPCS-PDU at the start of dst and returns the
// number of bytes written. dst must hold CellCount(len(sdu))*CellSize bytes.
func (g *Segmenter) Put(dst, sdu []byte) (int, error) {
	if err := checkSDU(len(sdu)); err != nil {
		return 0, err
	}
	n := CellCount(len(sdu)) * CellSize
	if len(dst) < n {
		return 0, fmt.Errorf("cells: buffer of %d bytes is too small for %d cells", len(dst), n/CellSize)
	}
	g.put(dst[:n], sdu)
	return n, nil
}

func checkSDU(n int) error {
	if n < 1 || n > MaxSDU {
		return fmt.Errorf("%w: %d bytes, AAL5 carries 1..%d", ErrSDULength, n, MaxSDU)
	}
	return nil
}

// put segments sdu into out, which is exactly the right size.
func (g *Segmenter) put(out, sdu []byte) {
	// Whole cells of SDU data; none of them is the last cell, because the
	// trailer always needs one more. The CRC runs over them, then over
	// the tail (the rest of the SDU, the pad and the trailer up to the
	// CRC) in one piece: a piece of 16 bytes or more each, which the
	// PCLMULQDQ code takes, where the pad and trailer alone took the
	// byte tables.
	full := len(sdu) / PayloadSize
	crc := crc32aal5.Update(0, sdu[:full*PayloadSize])
	o := 0
	for i := range full {
		c := out[o : o+CellSize : o+CellSize]
		binary.BigEndian.PutUint32(c, g.word)
		c[hecOffset] = g.hec
		copy(c[payloadOffset:], sdu[i*PayloadSize:(i+1)*PayloadSize])
		o += CellSize
	}

	// The tail: the rest of the SDU, the pad and the trailer, in one or two
	// cells, built in a scratch buffer.
	var tail [2 * PayloadSize]byte
	rest := copy(tail[:], sdu[full*PayloadSize:])
	tlen := PDULen(rest)
	tr := Trailer(tail[tlen-TrailerSize : tlen])
	tr[0], tr[1] = g.trailerHi[0], g.trailerHi[1]
	binary.BigEndian.PutUint16(tr[2:], uint16(len(sdu)))
	crc = crc32aal5.Update(crc, tail[:tlen-4])
	tr.setCRC(crc)
	for p := 0; p < tlen; p += PayloadSize {
		c := out[o : o+CellSize : o+CellSize]
		if p+PayloadSize == tlen {
			binary.BigEndian.PutUint32(c, g.lastWord)
			c[hecOffset] = g.lastHEC
		} else {
			binary.BigEndian.PutUint32(c, g.word)
			c[hecOffset] = g.hec
		}
		copy(c[payloadOffset:], tail[p:p+PayloadSize])
		o += CellSize
	}
}

// Segment is a convenience for one-off use: it builds a Segmenter for s and
// returns the cells of sdu in a new buffer.
func Segment(s SAR, sdu []byte) ([]byte, error) {
	g, err := NewSegmenter(s)
	if err != nil {
		return nil, err
	}
	return g.Append(nil, sdu)
}
