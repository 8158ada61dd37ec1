package cells

import (
	"encoding/binary"
	"fmt"
)

// An ATM cell (ITU-T I.361) is 53 bytes: a 5-byte header and 48 bytes of
// payload. The header has two layouts. At the user-network interface (UNI,
// xam's default) the first four bits are Generic Flow Control:
//
//	bit   8   7   6   5   4   3   2   1
//	    +---------------+---------------+
//	0   |      GFC      |   VPI (7..4)  |
//	    +---------------+---------------+
//	1   |   VPI (3..0)  |  VCI (15..12) |
//	    +---------------+---------------+
//	2   |          VCI (11..4)          |
//	    +---------------+---+---+---+---+
//	3   |   VCI (3..0)  |    PTI    |CLP|
//	    +---------------+-----------+---+
//	4   |              HEC              |
//	    +-------------------------------+
//	5.. |        payload (48 bytes)     |
//
// At the network-network interface (NNI) the GFC bits belong to the VPI,
// which grows to 12 bits:
//
//	0   |          VPI (11..4)          |
//	1   |   VPI (3..0)  |  VCI (15..12) |
//
// PTI, the payload type, is three bits: the high bit is 0 for user data
// cells (1 for OAM and resource management), the middle bit is the
// congestion indication (EFCI), and the low bit is the ATM-user-to-ATM-user
// indication, which AAL5 uses to mark the last cell of a PDU. CLP set marks
// a cell the network may drop first. HEC is a CRC-8 over the first four
// header bytes (see HEC).
const (
	CellSize    = 53 // bytes in a cell
	HeaderSize  = 5  // bytes in a cell header, HEC included
	PayloadSize = 48 // bytes of payload in a cell

	hecOffset     = 4
	payloadOffset = HeaderSize
)

// PTI bits.
const (
	PTIEndOfMessage = 0b001 // ATM-user-to-ATM-user indication; AAL5: last cell of a PDU
	PTICongestion   = 0b010 // explicit forward congestion indication
	PTIManagement   = 0b100 // OAM or resource-management cell (not user data)
)

// Limits of the header fields.
const (
	MaxGFC    = 0xf
	MaxVPIUNI = 0xff
	MaxVPINNI = 0xfff
	MaxVCI    = 0xffff
	MaxPTI    = 0x7
)

// Format selects the header layout.
type Format uint8

const (
	UNI Format = iota // user-network interface: 4-bit GFC, 8-bit VPI (the default)
	NNI               // network-network interface: 12-bit VPI, no GFC
)

func (f Format) String() string {
	switch f {
	case UNI:
		return "UNI"
	case NNI:
		return "NNI"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// maxVPI returns the largest VPI the format can carry.
func (f Format) maxVPI() uint16 {
	if f == NNI {
		return MaxVPINNI
	}
	return MaxVPIUNI
}

// Fields holds the header fields of a cell for encoding and decoding. GFC
// is meaningful only in the UNI format.
type Fields struct {
	GFC uint8
	VPI uint16
	VCI uint16
	PTI uint8
	CLP bool
}

// Check reports whether the fields fit the format's header.
func (h *Fields) Check(f Format) error {
	switch {
	case f != UNI && f != NNI:
		return fmt.Errorf("%w: unknown header format %d", ErrField, f)
	case f == UNI && h.GFC > MaxGFC:
		return fmt.Errorf("%w: GFC %d does not fit 4 bits", ErrField, h.GFC)
	case f == NNI && h.GFC != 0:
		return fmt.Errorf("%w: NNI cells have no GFC (got %d)", ErrField, h.GFC)
	case h.VPI > f.maxVPI():
		return fmt.Errorf("%w: VPI %d exceeds %d (%v)", ErrField, h.VPI, f.maxVPI(), f)
	case h.PTI > MaxPTI:
		return fmt.Errorf("%w: PTI %d does not fit 3 bits", ErrField, h.PTI)
	}
	return nil
}

// header packs the first four header bytes (without HEC) as a big-endian
// word. It does not check the fields; callers use Fields.Check.
func (h *Fields) header(f Format) uint32 {
	var w uint32
	if f == NNI {
		w = uint32(h.VPI&MaxVPINNI) << 20
	} else {
		w = uint32(h.GFC&MaxGFC)<<28 | uint32(h.VPI&MaxVPIUNI)<<20
	}
	w |= uint32(h.VCI)<<4 | uint32(h.PTI&MaxPTI)<<1
	if h.CLP {
		w |= 1
	}
	return w
}

// Cell is a view of one 53-byte ATM cell. The accessors do not check the
// length or the HEC: call Valid (or let a HECReceiver check the header)
// before trusting them. Accessors that depend on the layout take the Format.
type Cell []byte

// Valid reports whether c is exactly one cell long and its HEC matches its
// header.
func (c Cell) Valid() bool {
	return len(c) == CellSize && HEC(c[:4]) == c[hecOffset]
}

// Check is Valid with a reason: ErrShortCell or ErrHEC, wrapped.
func (c Cell) Check() error {
	if len(c) != CellSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrShortCell, len(c), CellSize)
	}
	if got, want := c[hecOffset], HEC(c[:4]); got != want {
		return fmt.Errorf("%w: header % x has HEC %#02x, want %#02x", ErrHEC, []byte(c[:4]), got, want)
	}
	return nil
}

func (c Cell) word() uint32 { return binary.BigEndian.Uint32(c) }

// GFC returns the generic flow control bits of a UNI cell.
func (c Cell) GFC() uint8 { return c[0] >> 4 }

// VPI returns the virtual path identifier in format f.
func (c Cell) VPI(f Format) uint16 {
	if f == NNI {
		return uint16(c.word() >> 20)
	}
	return uint16(c.word()>>20) & MaxVPIUNI
}

// VCI returns the virtual channel identifier.
func (c Cell) VCI() uint16 { return uint16(c.word() >> 4) }

// PTI returns the 3-bit payload type.
func (c Cell) PTI() uint8 { return (c[3] >> 1) & MaxPTI }

// CLP reports whether the cell loss priority bit is set.
func (c Cell) CLP() bool { return c[3]&1 != 0 }

// EndOfMessage reports whether c is a user data cell with the AAL5
// end-of-message indication set.
func (c Cell) EndOfMessage() bool { return c[3]&0b1010 == 0b0010 }

// HEC returns the header error control byte as received.
func (c Cell) HEC() uint8 { return c[hecOffset] }

// Header returns the five header bytes.
func (c Cell) Header() []byte { return c[:HeaderSize] }

// Payload returns the 48 payload bytes.
func (c Cell) Payload() []byte { return c[payloadOffset:CellSize] }

// Fields decodes the header in format f.
func (c Cell) Fields(f Format) Fields {
	h := Fields{VPI: c.VPI(f), VCI: c.VCI(), PTI: c.PTI(), CLP: c.CLP()}
	if f == UNI {
		h.GFC = c.GFC()
	}
	return h
}

// Encode writes the header fields and a matching HEC. It returns an error,
// and writes nothing, when a field does not fit the format.
func (c Cell) Encode(f Format, h Fields) error {
	if err := h.Check(f); err != nil {
		return err
	}
	if len(c) < HeaderSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrShortCell, len(c), CellSize)
	}
	c.setWord(h.header(f))
	return nil
}

// setWord writes the four header bytes and their HEC.
func (c Cell) setWord(w uint32) {
	binary.BigEndian.PutUint32(c, w)
	c[hecOffset] = HEC(c[:4])
}

// SetVPI sets the VPI (masked to the format's width) and updates the HEC.
func (c Cell) SetVPI(f Format, vpi uint16) {
	w := c.word()
	if f == NNI {
		w = w&^(MaxVPINNI<<20) | uint32(vpi&MaxVPINNI)<<20
	} else {
		w = w&^(MaxVPIUNI<<20) | uint32(vpi&MaxVPIUNI)<<20
	}
	c.setWord(w)
}

// SetGFC sets the generic flow control bits of a UNI cell and updates the
// HEC.
func (c Cell) SetGFC(gfc uint8) {
	c.setWord(c.word()&^(MaxGFC<<28) | uint32(gfc&MaxGFC)<<28)
}

// SetVCI sets the VCI and updates the HEC.
func (c Cell) SetVCI(vci uint16) { c.setWord(c.word()&^(0xffff<<4) | uint32(vci)<<4) }

// SetPTI sets the payload type (masked to 3 bits) and updates the HEC.
func (c Cell) SetPTI(pti uint8) { c.setWord(c.word()&^(MaxPTI<<1) | uint32(pti&MaxPTI)<<1) }

// SetCLP sets or clears the cell loss priority bit and updates the HEC.
func (c Cell) SetCLP(clp bool) {
	w := c.word() &^ 1
	if clp {
		w |= 1
	}
	c.setWord(w)
}

// VC names a virtual circuit: a VPI and a VCI.
type VC struct {
	VPI uint16
	VCI uint16
}

func (v VC) String() string { return fmt.Sprintf("%d/%d", v.VPI, v.VCI) }

// key packs the circuit into one word for table lookups.
func (v VC) key() uint32 { return uint32(v.VPI)<<16 | uint32(v.VCI) }

// VC returns the cell's circuit in format f.
func (c Cell) VC(f Format) VC { return VC{VPI: c.VPI(f), VCI: c.VCI()} }
