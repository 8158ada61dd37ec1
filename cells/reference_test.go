package cells_test

// A deliberately slow, obvious reference implementation of the ATM layer,
// written from the standards rather than from the package's code, and the
// tests that hold the fast implementation to it:
//
//   - CRC-32 of AAL5 (I.363.5): generator 0x04C11DB7, message bits most
//     significant first, register preset to all ones, result complemented;
//     clocked one bit at a time.
//   - HEC (I.432.1): CRC-8 with generator x^8 + x^2 + x + 1 over the first
//     four header bytes, initial value zero, XORed with the coset 0x55;
//     clocked one bit at a time.
//   - CRC-10 of AAL3/4 (I.363.3), used by SSAM: x^10 + x^9 + x^5 + x^4 + x + 1.
//   - Headers (I.361) written and read one field, and one bit, at a time.
//   - A segmenter that builds the whole CPCS-PDU in one slice and cuts it,
//     and a reassembler that collects payloads per VPI/VCI until the
//     end-of-message cell and then checks length and CRC.
//
// Every helper here is prefixed with ref (or lives in a ref type) so that it
// does not collide with the package's other tests.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/xam-project/xam/cells"
)

// ---------------------------------------------------------------------------
// Reference CRCs.

// refCRC32 is the AAL5 CRC-32, one bit at a time.
func refCRC32(p []byte) uint32 {
	reg := uint32(0xFFFFFFFF)
	for _, b := range p {
		for i := 7; i >= 0; i-- {
			bit := uint32(b>>uint(i)) & 1
			top := reg >> 31
			reg <<= 1
			if top^bit != 0 {
				reg ^= 0x04C11DB7
			}
		}
	}
	return ^reg
}

// refHEC is the I.432 header error control: CRC-8 (x^8 + x^2 + x + 1) of
// the four header bytes, one bit at a time, XORed with the coset 01010101.
func refHEC(hdr []byte) uint8 {
	var reg uint8
	for _, b := range hdr[:4] {
		for i := 7; i >= 0; i-- {
			bit := (b >> uint(i)) & 1
			top := reg >> 7
			reg <<= 1
			if top^bit != 0 {
				reg ^= 0x07
			}
		}
	}
	return reg ^ 0x55
}

// refCRC10 is the AAL3/4 CRC-10 (x^10 + x^9 + x^5 + x^4 + x + 1), initial
// value zero, no reflection, no final XOR, one bit at a time.
func refCRC10(p []byte) uint16 {
	var reg uint16
	for _, b := range p {
		for i := 7; i >= 0; i-- {
			bit := uint16(b>>uint(i)) & 1
			top := (reg >> 9) & 1
			reg = (reg << 1) & 0x3ff
			if top^bit != 0 {
				reg ^= 0x233
			}
		}
	}
	return reg
}

// refSSAMCRC is the CRC-10 of a 48-byte SSAM payload with the ten CRC bits
// (the low ten bits of bytes 6..7) taken as zero.
func refSSAMCRC(p []byte) uint16 {
	q := bytes.Clone(p[:cells.PayloadSize])
	q[6] &^= 0x03
	q[7] = 0
	return refCRC10(q)
}

// ---------------------------------------------------------------------------
// Reference headers, one field and one bit at a time.

// refFields is a header as the reference sees it.
type refFields struct {
	Format cells.Format
	GFC    uint8
	VPI    uint16
	VCI    uint16
	PTI    uint8
	CLP    bool
}

// refBits is a bit writer/reader over a header, bit 0 being the most
// significant bit of byte 0.
type refBits struct {
	b   []byte
	pos int
}

func (w *refBits) put(v uint32, n int) {
	for i := n - 1; i >= 0; i-- {
		if v>>uint(i)&1 != 0 {
			w.b[w.pos/8] |= 0x80 >> uint(w.pos%8)
		} else {
			w.b[w.pos/8] &^= 0x80 >> uint(w.pos%8)
		}
		w.pos++
	}
}

func (w *refBits) get(n int) uint32 {
	var v uint32
	for range n {
		v <<= 1
		if w.b[w.pos/8]&(0x80>>uint(w.pos%8)) != 0 {
			v |= 1
		}
		w.pos++
	}
	return v
}

// refHeader builds the five header bytes, HEC included.
func refHeader(h refFields) []byte {
	hdr := make([]byte, cells.HeaderSize)
	w := refBits{b: hdr}
	if h.Format == cells.NNI {
		w.put(uint32(h.VPI), 12)
	} else {
		w.put(uint32(h.GFC), 4)
		w.put(uint32(h.VPI), 8)
	}
	w.put(uint32(h.VCI), 16)
	w.put(uint32(h.PTI), 3)
	clp := uint32(0)
	if h.CLP {
		clp = 1
	}
	w.put(clp, 1)
	w.put(uint32(refHEC(hdr)), 8)
	if w.pos != 40 {
		panic("reference header is not 40 bits")
	}
	return hdr
}

// refDecode reads the fields of a header.
func refDecode(f cells.Format, hdr []byte) refFields {
	r := refBits{b: hdr}
	h := refFields{Format: f}
	if f == cells.NNI {
		h.VPI = uint16(r.get(12))
	} else {
		h.GFC = uint8(r.get(4))
		h.VPI = uint16(r.get(8))
	}
	h.VCI = uint16(r.get(16))
	h.PTI = uint8(r.get(3))
	h.CLP = r.get(1) == 1
	return h
}

// ---------------------------------------------------------------------------
// Reference segmentation.

// refSAR is what the reference segmenter needs to know.
type refSAR struct {
	Format cells.Format
	GFC    uint8
	VPI    uint16
	VCI    uint16
	CLP    bool
	UU     uint8
	CPI    uint8
}

func (s refSAR) sar() cells.SAR {
	return cells.SAR{Format: s.Format, VPI: s.VPI, VCI: s.VCI, GFC: s.GFC, CLP: s.CLP, UU: s.UU, CPI: s.CPI}
}

func (s refSAR) vc() cells.VC { return cells.VC{VPI: s.VPI, VCI: s.VCI} }

// refPDU builds the CPCS-PDU of sdu: SDU, zero pad, UU, CPI, length, CRC.
func refPDU(uu, cpi uint8, sdu []byte) []byte {
	pdu := append([]byte(nil), sdu...)
	for (len(pdu)+8)%48 != 0 {
		pdu = append(pdu, 0)
	}
	pdu = append(pdu, uu, cpi, byte(len(sdu)>>8), byte(len(sdu)))
	crc := refCRC32(pdu)
	pdu = append(pdu, byte(crc>>24), byte(crc>>16), byte(crc>>8), byte(crc))
	return pdu
}

// refSegment cuts the CPCS-PDU of sdu into cells.
func refSegment(s refSAR, sdu []byte) []byte {
	pdu := refPDU(s.UU, s.CPI, sdu)
	var out []byte
	for off := 0; off < len(pdu); off += 48 {
		pti := uint8(0b000)
		if off+48 == len(pdu) {
			pti = 0b001
		}
		out = append(out, refHeader(refFields{
			Format: s.Format, GFC: s.GFC, VPI: s.VPI, VCI: s.VCI, PTI: pti, CLP: s.CLP,
		})...)
		out = append(out, pdu[off:off+48]...)
	}
	return out
}

// ---------------------------------------------------------------------------
// Reference reassembly.

// refDelivery is a PDU the reference reassembler delivered.
type refDelivery struct {
	VC    cells.VC
	UU    uint8
	CPI   uint8
	CLP   bool
	Cells int
	SDU   []byte
}

type refOpen struct {
	buf []byte
	clp bool
	cut bool // oversize: discard up to the end of message
}

// refReassembler collects the payloads of each circuit until a user data
// cell with the end-of-message indication, then checks the PDU. It drops
// cells whose HEC is wrong (it does not correct) and non-user-data cells.
// Its errors are the package's sentinels, in the order the package
// documents: abort, oversize, lost cells, length, CRC. Like the package, it
// bounds an open PDU: the cell after the most cells a PDU of maxSDU bytes
// needs is reported as ErrOversize, and the circuit's cells are discarded
// up to the next end of message.
type refReassembler struct {
	format cells.Format
	maxSDU int
	open   map[cells.VC]*refOpen
}

func newRefReassembler(f cells.Format, maxSDU int) *refReassembler {
	if maxSDU <= 0 {
		maxSDU = cells.MaxSDU
	}
	return &refReassembler{format: f, maxSDU: maxSDU, open: map[cells.VC]*refOpen{}}
}

func (r *refReassembler) push(c []byte) (d refDelivery, ok bool, err error) {
	if len(c) != 53 {
		return d, false, cells.ErrShortCell
	}
	if refHEC(c[:4]) != c[4] {
		return d, false, cells.ErrHEC
	}
	h := refDecode(r.format, c[:5])
	if h.PTI&0b100 != 0 {
		return d, false, cells.ErrManagement
	}
	vc := cells.VC{VPI: h.VPI, VCI: h.VCI}
	o := r.open[vc]
	if o == nil {
		o = &refOpen{}
		r.open[vc] = o
	}
	eom := h.PTI&0b001 != 0
	if o.cut {
		if eom {
			delete(r.open, vc)
		}
		return d, false, nil
	}
	if len(o.buf)/48 == (r.maxSDU+8+47)/48 {
		delete(r.open, vc)
		if !eom {
			r.open[vc] = &refOpen{cut: true}
		}
		return d, false, cells.ErrOversize
	}
	o.buf = append(o.buf, c[5:53]...)
	o.clp = o.clp || h.CLP
	if !eom {
		return d, false, nil
	}
	delete(r.open, vc)
	pdu := o.buf
	ncells := len(pdu) / 48
	tr := pdu[len(pdu)-8:]
	n := int(tr[2])<<8 | int(tr[3])
	want := (n + 8 + 47) / 48
	crc := uint32(tr[4])<<24 | uint32(tr[5])<<16 | uint32(tr[6])<<8 | uint32(tr[7])
	switch {
	case n == 0:
		return d, false, cells.ErrAborted
	case n > r.maxSDU:
		return d, false, cells.ErrOversize
	case ncells < want:
		return d, false, cells.ErrLostCells
	case ncells > want:
		return d, false, cells.ErrLength
	case refCRC32(pdu[:len(pdu)-4]) != crc:
		return d, false, cells.ErrCRC
	}
	return refDelivery{VC: vc, UU: tr[0], CPI: tr[1], CLP: o.clp, Cells: ncells, SDU: pdu[:n]}, true, nil
}

// pushAll pushes cells and returns the last delivery and the first error.
func (r *refReassembler) pushAll(cs [][]byte) (last refDelivery, ok bool, err error) {
	for _, c := range cs {
		d, dok, derr := r.push(c)
		if derr != nil && err == nil {
			err = derr
		}
		if dok {
			last, ok = d, true
		}
	}
	return last, ok, err
}

// ---------------------------------------------------------------------------
// Helpers.

func refRandSAR(rng *rand.Rand, f cells.Format) refSAR {
	s := refSAR{
		Format: f,
		VCI:    uint16(rng.Uint32()),
		CLP:    rng.IntN(2) == 1,
		UU:     uint8(rng.Uint32()),
	}
	if rng.IntN(4) == 0 { // I.363.5 defines only CPI 0, but it is carried as given
		s.CPI = uint8(rng.Uint32())
	}
	if f == cells.NNI {
		s.VPI = uint16(rng.IntN(cells.MaxVPINNI + 1))
	} else {
		s.VPI = uint16(rng.IntN(cells.MaxVPIUNI + 1))
		s.GFC = uint8(rng.IntN(cells.MaxGFC + 1))
	}
	return s
}

func refRandBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// refSplit cuts a byte stream into 53-byte cells.
func refSplit(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= 53 {
		out = append(out, b[:53:53])
		b = b[53:]
	}
	return out
}

// refFastPush pushes cells (copies, since Push may correct in place) into a
// fast Reassembler and returns the PDUs it delivered (SDUs copied) and the
// errors it reported.
func refFastPush(t testing.TB, r *cells.Reassembler, cs [][]byte) (pdus []cells.PDU, errs []error) {
	t.Helper()
	for _, c := range cs {
		pdu, ok, err := r.Push(cells.Cell(bytes.Clone(c)))
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			pdu.SDU = bytes.Clone(pdu.SDU)
			pdus = append(pdus, pdu)
		}
	}
	return pdus, errs
}

func refFlip(b []byte, pos int) { b[pos/8] ^= 0x80 >> uint(pos%8) }

var refFormats = []cells.Format{cells.UNI, cells.NNI}

// ---------------------------------------------------------------------------
// The reference checks itself against published values.

func TestReferenceKnownValues(t *testing.T) {
	check := []byte("123456789")
	if got := refCRC32(check); got != 0xFC891918 {
		t.Errorf("refCRC32(123456789) = %#08x, want 0xfc891918", got)
	}
	if got := refCRC10(check); got != 0x199 {
		t.Errorf("refCRC10(123456789) = %#03x, want 0x199", got)
	}
	// I.432.1: the unassigned cell 00 00 00 00 has HEC 0x55, the idle
	// cell 00 00 00 01 has HEC 0x52.
	if got := refHEC([]byte{0, 0, 0, 0}); got != 0x55 {
		t.Errorf("refHEC(unassigned) = %#02x, want 0x55", got)
	}
	if got := refHEC([]byte{0, 0, 0, 1}); got != 0x52 {
		t.Errorf("refHEC(idle) = %#02x, want 0x52", got)
	}
	// A CRC's defining property: appending the (uncomplemented) remainder
	// of the raw register makes the remainder zero; for this CRC, the
	// residue of a message followed by its CRC is the constant 0xC704DD7B
	// (complemented: 0x38FB2284).
	msg := append(check, 0xFC, 0x89, 0x19, 0x18)
	if got := refCRC32(msg); got != 0x38FB2284 {
		t.Errorf("refCRC32(message||CRC) = %#08x, want residue 0x38fb2284", got)
	}
	// The reference header writer and reader agree and put the fields
	// where I.361 says.
	hdr := refHeader(refFields{Format: cells.UNI, GFC: 0xA, VPI: 0xBC, VCI: 0xDEF1, PTI: 0b101, CLP: true})
	if want := []byte{0xAB, 0xCD, 0xEF, 0x1B}; !bytes.Equal(hdr[:4], want) {
		t.Errorf("UNI reference header % x, want % x", hdr[:4], want)
	}
	hdr = refHeader(refFields{Format: cells.NNI, VPI: 0xABC, VCI: 0xDEF1, PTI: 0b010, CLP: false})
	if want := []byte{0xAB, 0xCD, 0xEF, 0x14}; !bytes.Equal(hdr[:4], want) {
		t.Errorf("NNI reference header % x, want % x", hdr[:4], want)
	}
}

// ---------------------------------------------------------------------------
// CRCs and HEC against the reference.

func TestCRC32MatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := refRandBytes(rng, 70000)
	lengths := make([]int, 0, 600)
	for n := range 300 {
		lengths = append(lengths, n)
	}
	for range 100 {
		lengths = append(lengths, rng.IntN(70000))
	}
	if testing.Short() {
		lengths = lengths[:320]
	}
	for _, n := range lengths {
		off := rng.IntN(16) // vary the alignment of the input
		if off+n > len(buf) {
			off = 0
		}
		p := buf[off : off+n]
		want := refCRC32(p)
		if got := cells.CRC32(p); got != want {
			t.Fatalf("CRC32 of %d bytes at offset %d = %#08x, reference %#08x", n, off, got, want)
		}
		// Any split point through UpdateCRC32 gives the same result.
		k := 0
		if n > 0 {
			k = rng.IntN(n + 1)
		}
		if got := cells.UpdateCRC32(cells.UpdateCRC32(0, p[:k]), p[k:]); got != want {
			t.Fatalf("UpdateCRC32 of %d bytes split at %d = %#08x, reference %#08x", n, k, got, want)
		}
	}
}

func TestHECMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var hdr [4]byte
	// Every header with at most one nonzero byte...
	for i := range 4 {
		for v := range 256 {
			hdr = [4]byte{}
			hdr[i] = byte(v)
			if got, want := cells.HEC(hdr[:]), refHEC(hdr[:]); got != want {
				t.Fatalf("HEC(% x) = %#02x, reference %#02x", hdr, got, want)
			}
		}
	}
	// ...and many random ones.
	for range 100000 {
		binary.BigEndian.PutUint32(hdr[:], rng.Uint32())
		if got, want := cells.HEC(hdr[:]), refHEC(hdr[:]); got != want {
			t.Fatalf("HEC(% x) = %#02x, reference %#02x", hdr, got, want)
		}
	}
}

func TestCRC10MatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for n := range 200 {
		p := refRandBytes(rng, n)
		if got, want := cells.CRC10(p), refCRC10(p); got != want {
			t.Fatalf("CRC10 of %d bytes = %#03x, reference %#03x", n, got, want)
		}
	}
}

// TestSSAMMatchesReference checks EncodeSSAM's layout and CRC field
// against the reference.
func TestSSAMMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for n := 0; n <= cells.SSAMDataSize; n++ {
		for range 20 {
			flow, handler := uint16(rng.Uint32()), rng.Uint32()
			data := refRandBytes(rng, n)
			p := refRandBytes(rng, cells.PayloadSize) // garbage the encoder must overwrite
			if err := cells.EncodeSSAM(p, flow, handler, data); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, cells.PayloadSize)
			binary.BigEndian.PutUint16(want[0:], flow)
			binary.BigEndian.PutUint32(want[2:], handler)
			binary.BigEndian.PutUint16(want[6:], uint16(n)<<10)
			copy(want[8:], data)
			binary.BigEndian.PutUint16(want[6:], uint16(n)<<10|refSSAMCRC(want))
			if !bytes.Equal(p, want) {
				t.Fatalf("EncodeSSAM(flow %#x, handler %#x, %d bytes):\n got % x\nwant % x", flow, handler, n, p, want)
			}
			s := cells.SSAMCell(p)
			if err := s.Check(); err != nil {
				t.Fatalf("Check of a fresh SSAM cell: %v", err)
			}
			if s.FlowControl() != flow || s.Handler() != handler || s.Len() != n || !bytes.Equal(s.Data(), data) {
				t.Fatalf("SSAM accessors disagree with the encoded fields")
			}
		}
	}
	if err := cells.EncodeSSAM(make([]byte, 48), 0, 0, make([]byte, 41)); !errors.Is(err, cells.ErrSSAM) {
		t.Errorf("EncodeSSAM with 41 data bytes: %v, want ErrSSAM", err)
	}
	if err := cells.EncodeSSAM(make([]byte, 47), 0, 0, nil); !errors.Is(err, cells.ErrShortCell) {
		t.Errorf("EncodeSSAM into 47 bytes: %v, want ErrShortCell", err)
	}
}

// ---------------------------------------------------------------------------
// Headers.

func TestHeaderRoundTripMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, f := range refFormats {
		t.Run(f.String(), func(t *testing.T) {
			for range 20000 {
				h := refFields{
					Format: f,
					VCI:    uint16(rng.Uint32()),
					PTI:    uint8(rng.IntN(8)),
					CLP:    rng.IntN(2) == 1,
				}
				if f == cells.NNI {
					h.VPI = uint16(rng.IntN(cells.MaxVPINNI + 1))
				} else {
					h.VPI = uint16(rng.IntN(cells.MaxVPIUNI + 1))
					h.GFC = uint8(rng.IntN(cells.MaxGFC + 1))
				}
				fields := cells.Fields{GFC: h.GFC, VPI: h.VPI, VCI: h.VCI, PTI: h.PTI, CLP: h.CLP}
				want := refHeader(h)

				c := cells.Cell(refRandBytes(rng, cells.CellSize))
				payload := bytes.Clone(c.Payload())
				if err := c.Encode(f, fields); err != nil {
					t.Fatalf("Encode(%v, %+v): %v", f, fields, err)
				}
				if !bytes.Equal(c.Header(), want) {
					t.Fatalf("Encode(%v, %+v) = % x, reference % x", f, fields, c.Header(), want)
				}
				if !bytes.Equal(c.Payload(), payload) {
					t.Fatalf("Encode changed the payload")
				}
				if !c.Valid() || c.Check() != nil {
					t.Fatalf("encoded cell % x is not valid: %v", c.Header(), c.Check())
				}
				if got := c.Fields(f); got != fields {
					t.Fatalf("Fields(%v) of % x = %+v, want %+v", f, c.Header(), got, fields)
				}
				if got := refDecode(f, c.Header()); got != h {
					t.Fatalf("reference decode of % x = %+v, want %+v", c.Header(), got, h)
				}
				if c.VPI(f) != h.VPI || c.VCI() != h.VCI || c.PTI() != h.PTI || c.CLP() != h.CLP || c.HEC() != want[4] {
					t.Fatalf("accessors of % x disagree with %+v", c.Header(), h)
				}
				if f == cells.UNI && c.GFC() != h.GFC {
					t.Fatalf("GFC of % x = %d, want %d", c.Header(), c.GFC(), h.GFC)
				}
				if got := c.VC(f); got != (cells.VC{VPI: h.VPI, VCI: h.VCI}) {
					t.Fatalf("VC(%v) = %v, want %d/%d", f, got, h.VPI, h.VCI)
				}
				if eom := h.PTI&0b101 == 0b001; c.EndOfMessage() != eom {
					t.Fatalf("EndOfMessage of PTI %03b = %v, want %v", h.PTI, c.EndOfMessage(), eom)
				}

				// The setters, starting from another header, reach the same
				// bytes.
				d := cells.Cell(refRandBytes(rng, cells.CellSize))
				if f == cells.UNI {
					d.SetGFC(h.GFC)
				} else {
					d[0] &^= 0xF0 // the GFC nibble is the VPI's top in NNI
				}
				d.SetVPI(f, h.VPI)
				d.SetVCI(h.VCI)
				d.SetPTI(h.PTI)
				d.SetCLP(h.CLP)
				if !bytes.Equal(d.Header(), want) {
					t.Fatalf("setters built % x, reference % x (%+v)", d.Header(), want, h)
				}
			}
		})
	}
}

func TestHeaderFieldLimits(t *testing.T) {
	bad := []struct {
		f cells.Format
		h cells.Fields
	}{
		{cells.UNI, cells.Fields{GFC: 16}},
		{cells.UNI, cells.Fields{VPI: 256}},
		{cells.UNI, cells.Fields{PTI: 8}},
		{cells.NNI, cells.Fields{GFC: 1}},
		{cells.NNI, cells.Fields{VPI: 4096}},
		{cells.NNI, cells.Fields{PTI: 8}},
		{cells.Format(2), cells.Fields{}},
	}
	for _, b := range bad {
		c := cells.Cell(bytes.Repeat([]byte{0xEE}, cells.CellSize))
		err := c.Encode(b.f, b.h)
		if !errors.Is(err, cells.ErrField) {
			t.Errorf("Encode(%v, %+v) = %v, want ErrField", b.f, b.h, err)
		}
		if !bytes.Equal(c, bytes.Repeat([]byte{0xEE}, cells.CellSize)) {
			t.Errorf("Encode(%v, %+v) wrote to the cell despite the error", b.f, b.h)
		}
		if _, err := cells.NewSegmenter(cells.SAR{Format: b.f, GFC: b.h.GFC, VPI: b.h.VPI}); b.h.PTI == 0 && !errors.Is(err, cells.ErrField) {
			t.Errorf("NewSegmenter(%v, %+v) = %v, want ErrField", b.f, b.h, err)
		}
	}
	// The largest values fit.
	for _, g := range []struct {
		f cells.Format
		h cells.Fields
	}{
		{cells.UNI, cells.Fields{GFC: 15, VPI: 255, VCI: 65535, PTI: 7, CLP: true}},
		{cells.NNI, cells.Fields{VPI: 4095, VCI: 65535, PTI: 7, CLP: true}},
	} {
		c := make(cells.Cell, cells.CellSize)
		if err := c.Encode(g.f, g.h); err != nil {
			t.Errorf("Encode(%v, %+v): %v", g.f, g.h, err)
		}
		if !bytes.Equal(c[:4], []byte{0xff, 0xff, 0xff, 0xff}) || c.Fields(g.f) != g.h {
			t.Errorf("Encode(%v, %+v) = % x", g.f, g.h, c.Header())
		}
	}
}

// TestNNIFieldsRoundTrip decodes arbitrary valid headers as NNI and
// encodes them back: NNI has no unused bits, so every 32-bit header word
// survives Fields/Encode unchanged (and the same holds for UNI).
func TestNNIFieldsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, f := range refFormats {
		for range 20000 {
			c := cells.Cell(refRandBytes(rng, cells.CellSize))
			c[4] = refHEC(c[:4])
			orig := cells.Cell(bytes.Clone(c))
			fields := c.Fields(f)
			if err := fields.Check(f); err != nil {
				t.Fatalf("%v: Fields of % x do not pass Check: %v", f, c.Header(), err)
			}
			d := make(cells.Cell, cells.CellSize)
			if err := d.Encode(f, fields); err != nil {
				t.Fatalf("%v: Encode(Fields(% x)): %v", f, c.Header(), err)
			}
			if !bytes.Equal(d.Header(), orig.Header()) {
				t.Fatalf("%v: Encode(Fields(% x)) = % x", f, orig.Header(), d.Header())
			}
			if got := refDecode(f, c.Header()); got.VPI != fields.VPI || got.VCI != fields.VCI ||
				got.PTI != fields.PTI || got.CLP != fields.CLP || got.GFC != fields.GFC {
				t.Fatalf("%v: Fields(% x) = %+v, reference %+v", f, c.Header(), fields, got)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Segmentation and reassembly against the reference.

// refCheckDelivery compares a fast PDU with what was segmented.
func refCheckDelivery(t testing.TB, what string, got cells.PDU, s refSAR, sdu []byte) {
	t.Helper()
	if !bytes.Equal(got.SDU, sdu) {
		t.Fatalf("%s: SDU of %d bytes differs from the %d bytes sent", what, len(got.SDU), len(sdu))
	}
	if got.VC != s.vc() || got.UU != s.UU || got.CPI != s.CPI || got.CLP != s.CLP || got.Cells != cells.CellCount(len(sdu)) {
		t.Fatalf("%s: PDU {VC %v UU %d CPI %d CLP %v Cells %d}, want {VC %v UU %d CPI %d CLP %v Cells %d}",
			what, got.VC, got.UU, got.CPI, got.CLP, got.Cells, s.vc(), s.UU, s.CPI, s.CLP, cells.CellCount(len(sdu)))
	}
}

func refCheckRefDelivery(t testing.TB, what string, got refDelivery, s refSAR, sdu []byte) {
	t.Helper()
	if !bytes.Equal(got.SDU, sdu) {
		t.Fatalf("%s: reference reassembled %d bytes, want the %d bytes sent", what, len(got.SDU), len(sdu))
	}
	if got.VC != s.vc() || got.UU != s.UU || got.CPI != s.CPI || got.CLP != s.CLP || got.Cells != cells.CellCount(len(sdu)) {
		t.Fatalf("%s: reference PDU %+v does not match %+v", what, got, s)
	}
}

// refSegmentAndCompare segments sdu with the fast and the reference
// segmenters, compares the cells byte for byte, and reassembles each one's
// cells with the other's reassembler.
func refSegmentAndCompare(t testing.TB, rng *rand.Rand, s refSAR, sdu []byte) {
	t.Helper()
	what := fmt.Sprintf("%v VC %v GFC %d CLP %v UU %d, SDU of %d bytes", s.Format, s.vc(), s.GFC, s.CLP, s.UU, len(sdu))
	want := refSegment(s, sdu)
	if len(want) != cells.CellCount(len(sdu))*cells.CellSize {
		t.Fatalf("%s: reference made %d bytes, CellCount says %d cells", what, len(want), cells.CellCount(len(sdu)))
	}
	if cells.PDULen(len(sdu)) != len(want)/53*48 {
		t.Fatalf("%s: PDULen = %d, reference %d", what, cells.PDULen(len(sdu)), len(want)/53*48)
	}

	g, err := cells.NewSegmenter(s.sar())
	if err != nil {
		t.Fatalf("%s: NewSegmenter: %v", what, err)
	}
	if g.SAR() != s.sar() {
		t.Fatalf("%s: SAR() = %+v", what, g.SAR())
	}
	// Append after a prefix that must survive.
	prefix := refRandBytes(rng, rng.IntN(60))
	got, err := g.Append(bytes.Clone(prefix), sdu)
	if err != nil {
		t.Fatalf("%s: Append: %v", what, err)
	}
	if !bytes.Equal(got[:len(prefix)], prefix) {
		t.Fatalf("%s: Append clobbered dst", what)
	}
	got = got[len(prefix):]
	if !bytes.Equal(got, want) {
		for i := 0; i < len(want); i += 53 {
			if j := min(i+53, len(got)); !bytes.Equal(got[i:j], want[i:i+53]) {
				t.Fatalf("%s: cell %d of %d differs:\nfast      % x\nreference % x", what, i/53, len(want)/53, got[i:j], want[i:i+53])
			}
		}
		t.Fatalf("%s: Append made %d bytes, reference %d", what, len(got), len(want))
	}
	// Put into a dirty buffer with room to spare.
	buf := refRandBytes(rng, len(want)+rng.IntN(100))
	tail := bytes.Clone(buf[len(want):])
	n, err := g.Put(buf, sdu)
	if err != nil || n != len(want) || !bytes.Equal(buf[:n], want) || !bytes.Equal(buf[len(want):], tail) {
		t.Fatalf("%s: Put = %d, %v; matches reference %v, tail kept %v", what, n, err, bytes.Equal(buf[:n], want), bytes.Equal(buf[len(want):], tail))
	}
	if n, err := g.Put(buf[:len(want)-1], sdu); err == nil || n != 0 {
		t.Fatalf("%s: Put into a buffer one byte short = %d, %v", what, n, err)
	}
	if seg, err := cells.Segment(s.sar(), sdu); err != nil || !bytes.Equal(seg, want) {
		t.Fatalf("%s: Segment differs from the reference (%v)", what, err)
	}

	// The fast reassembler on the reference's cells.
	r := cells.NewReassembler(cells.ReassemblerConfig{Format: s.Format})
	pdus, errs := refFastPush(t, r, refSplit(want))
	if len(errs) != 0 || len(pdus) != 1 {
		t.Fatalf("%s: Reassembler on reference cells: %d PDUs, errors %v", what, len(pdus), errs)
	}
	refCheckDelivery(t, what+" (fast reassembler)", pdus[0], s, sdu)
	if p := r.Pending(); len(p) != 0 {
		t.Fatalf("%s: Pending after a complete PDU: %v", what, p)
	}

	// The reference reassembler on the fast segmenter's cells.
	rr := newRefReassembler(s.Format, 0)
	var delivered []refDelivery
	for _, c := range refSplit(got) {
		d, ok, err := rr.push(c)
		if err != nil {
			t.Fatalf("%s: reference reassembler on fast cells: %v", what, err)
		}
		if ok {
			delivered = append(delivered, d)
		}
	}
	if len(delivered) != 1 {
		t.Fatalf("%s: reference reassembler delivered %d PDUs", what, len(delivered))
	}
	refCheckRefDelivery(t, what, delivered[0], s, sdu)
}

func TestSegmenterMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, f := range refFormats {
		t.Run(f.String(), func(t *testing.T) {
			// Every length from 1 to 200, each with a new header.
			for n := 1; n <= 200; n++ {
				refSegmentAndCompare(t, rng, refRandSAR(rng, f), refRandBytes(rng, n))
			}
			// The edges around cell boundaries and the maximum.
			edges := []int{1, 39, 40, 41, 47, 48, 49, 87, 88, 89, 95, 96, 97,
				1000, 4096, 9180, 65527, 65528, 65529, 65534, 65535}
			// And random lengths up to the maximum.
			count := 120
			if testing.Short() {
				count = 10
			}
			for range count {
				edges = append(edges, 1+rng.IntN(cells.MaxSDU))
			}
			for _, n := range edges {
				refSegmentAndCompare(t, rng, refRandSAR(rng, f), refRandBytes(rng, n))
			}
		})
	}
}

func TestSegmenterSDULimits(t *testing.T) {
	g, err := cells.NewSegmenter(cells.SAR{VPI: 1, VCI: 32})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, cells.MaxSDU + 1} {
		dst := []byte{1, 2, 3}
		out, err := g.Append(dst, make([]byte, n))
		if !errors.Is(err, cells.ErrSDULength) || !bytes.Equal(out, dst) {
			t.Errorf("Append of %d bytes = %d bytes, %v; want dst unchanged and ErrSDULength", n, len(out), err)
		}
		if k, err := g.Put(make([]byte, 4000*53), make([]byte, n)); !errors.Is(err, cells.ErrSDULength) || k != 0 {
			t.Errorf("Put of %d bytes = %d, %v; want ErrSDULength", n, k, err)
		}
	}
	if cells.MaxPDUCells != cells.CellCount(cells.MaxSDU) || cells.MaxPDUCells != 1366 {
		t.Errorf("MaxPDUCells = %d, CellCount(MaxSDU) = %d, want 1366", cells.MaxPDUCells, cells.CellCount(cells.MaxSDU))
	}
}

// TestReassembleInterleaved interleaves the cells of several PDUs on
// several circuits (keeping each circuit's order) and checks that both
// reassemblers deliver every SDU, in order, on the right circuit.
func TestReassembleInterleaved(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, f := range refFormats {
		t.Run(f.String(), func(t *testing.T) {
			for round := range 40 {
				nvc := 2 + rng.IntN(7)
				sars := make([]refSAR, 0, nvc)
				seen := map[cells.VC]bool{}
				for len(sars) < nvc {
					s := refRandSAR(rng, f)
					switch rng.IntN(3) { // circuits that differ in one field only
					case 0:
						if len(sars) > 0 {
							s.VPI = sars[0].VPI
						}
					case 1:
						if len(sars) > 0 {
							s.VCI = sars[0].VCI
						}
					}
					if seen[s.vc()] {
						continue
					}
					seen[s.vc()] = true
					sars = append(sars, s)
				}
				type queued struct {
					cells [][]byte
					sdus  [][]byte
				}
				queues := make([]queued, nvc)
				total := 0
				for i, s := range sars {
					for range 1 + rng.IntN(4) {
						n := 1 + rng.IntN(400)
						if rng.IntN(10) == 0 {
							n = 1 + rng.IntN(5000)
						}
						s.UU = uint8(rng.Uint32())
						sdu := refRandBytes(rng, n)
						cs := refSplit(refSegment(s, sdu))
						queues[i].cells = append(queues[i].cells, cs...)
						queues[i].sdus = append(queues[i].sdus, sdu)
						total += len(cs)
					}
				}
				// Random merge.
				var stream [][]byte
				pos := make([]int, nvc)
				for len(stream) < total {
					i := rng.IntN(nvc)
					if pos[i] < len(queues[i].cells) {
						stream = append(stream, queues[i].cells[pos[i]])
						pos[i]++
					}
				}

				want := map[cells.VC][][]byte{}
				for i, s := range sars {
					want[s.vc()] = queues[i].sdus
				}

				r := cells.NewReassembler(cells.ReassemblerConfig{Format: f, MaxVCs: nvc})
				pdus, errs := refFastPush(t, r, stream)
				if len(errs) != 0 {
					t.Fatalf("round %d: errors from Reassembler: %v", round, errs)
				}
				got := map[cells.VC][][]byte{}
				for _, p := range pdus {
					got[p.VC] = append(got[p.VC], p.SDU)
				}
				rr := newRefReassembler(f, 0)
				refGot := map[cells.VC][][]byte{}
				for _, c := range stream {
					d, ok, err := rr.push(c)
					if err != nil {
						t.Fatalf("round %d: reference reassembler: %v", round, err)
					}
					if ok {
						refGot[d.VC] = append(refGot[d.VC], d.SDU)
					}
				}
				for vc, sdus := range want {
					for name, m := range map[string]map[cells.VC][][]byte{"Reassembler": got, "reference": refGot} {
						if len(m[vc]) != len(sdus) {
							t.Fatalf("round %d: %s delivered %d PDUs on %v, want %d", round, name, len(m[vc]), vc, len(sdus))
						}
						for k := range sdus {
							if !bytes.Equal(m[vc][k], sdus[k]) {
								t.Fatalf("round %d: %s: PDU %d on %v differs", round, name, k, vc)
							}
						}
					}
				}
				if len(got) != len(want) {
					t.Fatalf("round %d: PDUs delivered on %d circuits, want %d", round, len(got), len(want))
				}
				st := r.Stats()
				if st.PDUs != uint64(len(pdus)) || st.Cells != uint64(total) || st.HEC.Good != uint64(total) {
					t.Fatalf("round %d: stats %+v, want %d PDUs, %d cells", round, st, len(pdus), total)
				}
			}
		})
	}
}

// TestReassemblyErrorsMatchReference damages PDUs in the ways the
// reassembler distinguishes and checks that the fast reassembler reports
// the same sentinel as the reference, wrapped in a *ReassemblyError.
func TestReassemblyErrorsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	const maxSDU = 3000
	kinds := []string{"drop", "payload bit", "trailer bit", "lose EOM", "abort", "oversize", "extra cell", "none"}
	for _, f := range refFormats {
		for range 400 {
			kind := kinds[rng.IntN(len(kinds))]
			s := refRandSAR(rng, f)
			sdu := refRandBytes(rng, 1+rng.IntN(maxSDU))
			stream := refSplit(refSegment(s, sdu))
			last := len(stream) - 1
			mutate := func(i int, fn func(c []byte)) {
				c := bytes.Clone(stream[i])
				fn(c)
				stream[i] = c
			}
			switch kind {
			case "drop":
				i := rng.IntN(len(stream))
				if i == last {
					i = max(0, last-1)
				}
				if len(stream) > 1 {
					stream = append(stream[:i:i], stream[i+1:]...)
				}
			case "payload bit":
				mutate(rng.IntN(len(stream)), func(c []byte) { refFlip(c, 40+rng.IntN(48*8)) })
			case "trailer bit": // in the CRC or UU/CPI: a CRC error
				mutate(last, func(c []byte) {
					bits := []int{0, 1, 4, 5, 6, 7} // UU, CPI, CRC bytes of the trailer
					b := bits[rng.IntN(len(bits))]
					refFlip(c, (53-8+b)*8+rng.IntN(8))
				})
			case "lose EOM": // two PDUs run together
				next := refSplit(refSegment(s, refRandBytes(rng, 1+rng.IntN(maxSDU))))
				stream = append(stream[:last:last], next...)
			case "abort":
				mutate(last, func(c []byte) { c[53-6], c[53-5] = 0, 0 })
			case "oversize":
				mutate(last, func(c []byte) { binary.BigEndian.PutUint16(c[53-6:], uint16(maxSDU+1+rng.IntN(cells.MaxSDU-maxSDU))) })
			case "extra cell": // one spare cell before the EOM
				extra := bytes.Clone(stream[0])
				stream = append(stream[:last:last], extra, stream[last])
			}

			r := cells.NewReassembler(cells.ReassemblerConfig{Format: f, MaxSDU: maxSDU})
			rr := newRefReassembler(f, maxSDU)
			for i, c := range stream {
				pdu, ok, err := r.Push(cells.Cell(bytes.Clone(c)))
				d, refOK, refErr := rr.push(c)
				if ok != refOK || (err == nil) != (refErr == nil) || (refErr != nil && !errors.Is(err, refErr)) {
					t.Fatalf("%v %s: cell %d of %d: Reassembler (%v, %v), reference (%v, %v)", f, kind, i, len(stream), ok, err, refOK, refErr)
				}
				if err != nil {
					var re *cells.ReassemblyError
					if !errors.As(err, &re) {
						t.Fatalf("%v %s: error %v (%T) is not a *ReassemblyError", f, kind, err, err)
					}
					if re.VC != s.vc() || re.Error() == "" {
						t.Fatalf("%v %s: error %v names VC %v, want %v", f, kind, err, re.VC, s.vc())
					}
				}
				if ok && !bytes.Equal(pdu.SDU, d.SDU) {
					t.Fatalf("%v %s: delivered SDUs differ", f, kind)
				}
			}
		}
	}
}

// TestReassemblyPerCellHeaderBits: the bits of a cell header that do not
// name the circuit may differ from cell to cell of one PDU. At the UNI, GFC
// is link-local flow control; the network may set the congestion bit
// (EFCI, PTI 01x) and CLP on any cell. The PDU is still one PDU, and it is
// marked CLP when any of its cells was.
func TestReassemblyPerCellHeaderBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	for _, f := range refFormats {
		for round := range 200 {
			s := refRandSAR(rng, f)
			s.CLP = false
			sdu := refRandBytes(rng, 1+rng.IntN(500))
			stream := refSplit(refSegment(s, sdu))
			anyCLP := false
			for _, c := range stream {
				cell := cells.Cell(c)
				if f == cells.UNI {
					cell.SetGFC(uint8(rng.IntN(16)))
				}
				if rng.IntN(3) == 0 {
					cell.SetPTI(cell.PTI() | cells.PTICongestion)
				}
				clp := rng.IntN(len(stream)+1) == 0
				cell.SetCLP(clp)
				anyCLP = anyCLP || clp
			}
			r := cells.NewReassembler(cells.ReassemblerConfig{Format: f})
			pdus, errs := refFastPush(t, r, stream)
			if len(errs) != 0 || len(pdus) != 1 || !bytes.Equal(pdus[0].SDU, sdu) {
				t.Fatalf("%v round %d: %d PDUs, errors %v", f, round, len(pdus), errs)
			}
			if pdus[0].CLP != anyCLP {
				t.Fatalf("%v round %d: PDU CLP %v, want %v (CLP set on some cell)", f, round, pdus[0].CLP, anyCLP)
			}
			d, ok, err := newRefReassembler(f, 0).pushAll(stream)
			if err != nil || !ok || !bytes.Equal(d.SDU, sdu) || d.CLP != anyCLP {
				t.Fatalf("%v round %d: reference: %v, %v", f, round, ok, err)
			}
		}
	}
}

// ---------------------------------------------------------------------------
// Header error control: correction, detection, and the I.432 state machine.

// refRandCell returns a cell with a random, valid header (any 32 bits) and
// a random payload.
func refRandCell(rng *rand.Rand) []byte {
	c := refRandBytes(rng, cells.CellSize)
	c[4] = refHEC(c[:4])
	return c
}

// TestHECCorrectsEverySingleBitError flips each of the 40 header bits of
// many random headers: a fresh HECReceiver must restore the exact header
// and move to detection mode.
func TestHECCorrectsEverySingleBitError(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	headers := 500
	if testing.Short() {
		headers = 50
	}
	for range headers {
		good := refRandCell(rng)
		for pos := range 40 {
			c := bytes.Clone(good)
			refFlip(c, pos)
			if cells.Cell(c).Valid() {
				t.Fatalf("header % x with bit %d flipped still passes Valid", good[:5], pos)
			}
			if err := cells.Cell(c).Check(); !errors.Is(err, cells.ErrHEC) {
				t.Fatalf("Check of header % x with bit %d flipped = %v, want ErrHEC", good[:5], pos, err)
			}
			var r cells.HECReceiver
			if got := r.Check(cells.Cell(c)); got != cells.HECCorrected {
				t.Fatalf("header % x, bit %d flipped: %v, want corrected", good[:5], pos, got)
			}
			if !bytes.Equal(c, good) {
				t.Fatalf("header % x, bit %d flipped: corrected to % x", good[:5], pos, c[:5])
			}
			if r.Mode() != cells.HECDetection {
				t.Fatalf("after a correction the receiver is in %v mode, want detection", r.Mode())
			}
			if st := r.Stats(); st != (cells.HECStats{Corrected: 1}) {
				t.Fatalf("stats after one correction: %+v", st)
			}
		}
	}
}

// TestReassemblerCorrectsEverySingleBitError: a PDU one of whose cells has
// a single-bit header error, anywhere in the 40 bits, is still delivered
// intact by a fresh Reassembler.
func TestReassemblerCorrectsEverySingleBitError(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	pdus := 60
	if testing.Short() {
		pdus = 10
	}
	for _, f := range refFormats {
		for range pdus {
			s := refRandSAR(rng, f)
			sdu := refRandBytes(rng, 1+rng.IntN(150))
			stream := refSplit(refSegment(s, sdu))
			for i := range stream {
				for pos := range 40 {
					damaged := make([][]byte, len(stream))
					copy(damaged, stream)
					damaged[i] = bytes.Clone(stream[i])
					refFlip(damaged[i], pos)
					r := cells.NewReassembler(cells.ReassemblerConfig{Format: f})
					got, errs := refFastPush(t, r, damaged)
					what := fmt.Sprintf("%v, %d-cell PDU, cell %d bit %d flipped", f, len(stream), i, pos)
					if len(errs) != 0 || len(got) != 1 {
						t.Fatalf("%s: %d PDUs, errors %v", what, len(got), errs)
					}
					refCheckDelivery(t, what, got[0], s, sdu)
					if st := r.Stats().HEC; st.Corrected != 1 || st.Discarded != 0 {
						t.Fatalf("%s: HEC stats %+v", what, st)
					}
					// The last cell was good, so the receiver is back in
					// correction mode unless the error was in the last cell.
					wantMode := cells.HECCorrection
					if i == len(stream)-1 {
						wantMode = cells.HECDetection
					}
					if r.HECMode() != wantMode {
						t.Fatalf("%s: mode %v, want %v", what, r.HECMode(), wantMode)
					}
				}
			}
		}
	}
}

// TestHECNeverAcceptsDoubleBitErrors flips every pair of the 40 header bits
// (780 pairs) of many random headers: no double error may pass as good or
// be "corrected"; a receiver in correction mode must discard the cell and
// leave it as it was.
func TestHECNeverAcceptsDoubleBitErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	headers := 300
	if testing.Short() {
		headers = 30
	}
	pairs := 0
	for h := range headers {
		good := refRandCell(rng)
		pairs = 0
		for a := range 40 {
			for b := a + 1; b < 40; b++ {
				pairs++
				c := bytes.Clone(good)
				refFlip(c, a)
				refFlip(c, b)
				bad := bytes.Clone(c)
				what := fmt.Sprintf("header % x with bits %d and %d flipped", good[:5], a, b)
				if cells.Cell(c).Valid() || refHEC(c[:4]) == c[4] {
					t.Fatalf("%s passes the HEC check", what)
				}
				// A fresh receiver in correction mode.
				var r cells.HECReceiver
				if got := r.Check(cells.Cell(c)); got != cells.HECDiscarded {
					t.Fatalf("%s: fresh receiver says %v (now % x), want discarded", what, got, c[:5])
				}
				if !bytes.Equal(c, bad) {
					t.Fatalf("%s: the receiver changed the discarded cell to % x", what, c[:5])
				}
				if r.Mode() != cells.HECDetection || r.Stats() != (cells.HECStats{Discarded: 1}) {
					t.Fatalf("%s: mode %v, stats %+v after a discard", what, r.Mode(), r.Stats())
				}
				// Again in detection mode.
				if got := r.Check(cells.Cell(c)); got != cells.HECDiscarded || !bytes.Equal(c, bad) {
					t.Fatalf("%s: detection-mode receiver says %v", what, got)
				}
				// A receiver that has just seen the good header (and so may
				// remember it) and is in correction mode.
				var w cells.HECReceiver
				if got := w.Check(cells.Cell(bytes.Clone(good))); got != cells.HECGood {
					t.Fatalf("good header % x: %v", good[:5], got)
				}
				if got := w.Check(cells.Cell(c)); got != cells.HECDiscarded || !bytes.Equal(c, bad) {
					t.Fatalf("%s after the good header: %v", what, got)
				}
			}
		}
		if h == 0 && pairs != 780 {
			t.Fatalf("tested %d pairs, want 780", pairs)
		}
	}
}

// TestReassemblerNeverDeliversDoubleBitErrors: a single-cell PDU with a
// double-bit header error is discarded with ErrHEC, and a multi-cell PDU
// one of whose cells has one is never delivered.
func TestReassemblerNeverDeliversDoubleBitErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	headers := 20
	if testing.Short() {
		headers = 3
	}
	for _, f := range refFormats {
		for range headers {
			s := refRandSAR(rng, f)
			sdu := refRandBytes(rng, 1+rng.IntN(100))
			stream := refSplit(refSegment(s, sdu))
			for a := range 40 {
				for b := a + 1; b < 40; b++ {
					i := rng.IntN(len(stream))
					damaged := make([][]byte, len(stream))
					copy(damaged, stream)
					damaged[i] = bytes.Clone(stream[i])
					refFlip(damaged[i], a)
					refFlip(damaged[i], b)
					r := cells.NewReassembler(cells.ReassemblerConfig{Format: f})
					var hecErrs int
					for k, c := range damaged {
						pdu, ok, err := r.Push(cells.Cell(bytes.Clone(c)))
						if ok {
							t.Fatalf("%v: cell %d of %d has bits %d,%d flipped, yet PDU of %d bytes delivered on %v",
								f, i, len(stream), a, b, len(pdu.SDU), pdu.VC)
						}
						if k == i {
							var re *cells.ReassemblyError
							if !errors.As(err, &re) || !errors.Is(err, cells.ErrHEC) {
								t.Fatalf("%v: cell with bits %d,%d flipped: %v, want a *ReassemblyError wrapping ErrHEC", f, a, b, err)
							}
							hecErrs++
						}
					}
					if hecErrs != 1 || r.Stats().HEC.Discarded != 1 || r.Stats().HEC.Corrected != 0 || r.Stats().PDUs != 0 {
						t.Fatalf("%v: bits %d,%d: stats %+v", f, a, b, r.Stats())
					}
				}
			}
		}
	}
}

// TestHECModeTransitions walks the I.432.1 receiver state machine.
func TestHECModeTransitions(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	good := refRandCell(rng)
	other := refRandCell(rng)
	single := func(src []byte) cells.Cell {
		c := bytes.Clone(src)
		refFlip(c, rng.IntN(40))
		return c
	}
	double := func(src []byte) cells.Cell {
		c := bytes.Clone(src)
		a := rng.IntN(40)
		b := (a + 1 + rng.IntN(39)) % 40
		refFlip(c, a)
		refFlip(c, b)
		return c
	}

	var r cells.HECReceiver
	step := func(name string, c cells.Cell, want cells.HECResult, wantMode cells.HECMode, wantCell []byte) {
		t.Helper()
		got := r.Check(c)
		if got != want || r.Mode() != wantMode {
			t.Fatalf("%s: %v in %v mode, want %v in %v mode", name, got, r.Mode(), want, wantMode)
		}
		if wantCell != nil && !bytes.Equal(c, wantCell) {
			t.Fatalf("%s: cell is % x afterwards, want % x", name, []byte(c[:5]), wantCell[:5])
		}
	}

	if r.Mode() != cells.HECCorrection {
		t.Fatalf("zero HECReceiver in %v mode", r.Mode())
	}
	step("good cell in correction mode", bytes.Clone(good), cells.HECGood, cells.HECCorrection, good)
	// correction -> detection on a corrected cell
	step("single-bit error in correction mode", single(good), cells.HECCorrected, cells.HECDetection, good)
	// detection discards a single-bit error and leaves it alone
	sb := single(good)
	step("single-bit error in detection mode", sb, cells.HECDiscarded, cells.HECDetection, bytes.Clone(sb))
	db := double(good)
	step("double-bit error in detection mode", db, cells.HECDiscarded, cells.HECDetection, bytes.Clone(db))
	// a good cell returns to correction (the header seen before)
	step("good cell in detection mode", bytes.Clone(good), cells.HECGood, cells.HECCorrection, good)
	step("single-bit error, corrected again", single(good), cells.HECCorrected, cells.HECDetection, good)
	// a good cell with a header not seen before also returns to correction
	step("new good header in detection mode", bytes.Clone(other), cells.HECGood, cells.HECCorrection, other)
	// correction -> detection on a discarded multi-bit error
	db = double(other)
	step("double-bit error in correction mode", db, cells.HECDiscarded, cells.HECDetection, bytes.Clone(db))
	sb = single(other)
	step("single-bit error after a discard", sb, cells.HECDiscarded, cells.HECDetection, bytes.Clone(sb))
	step("good cell after discards", bytes.Clone(other), cells.HECGood, cells.HECCorrection, other)
	step("single-bit error in a header not seen before", single(good), cells.HECCorrected, cells.HECDetection, good)
	if st := r.Stats(); st != (cells.HECStats{Good: 4, Corrected: 3, Discarded: 4}) {
		t.Fatalf("stats %+v, want 4 good, 3 corrected, 4 discarded", st)
	}
	if cells.HECCorrection.String() != "correction" || cells.HECDetection.String() != "detection" {
		t.Errorf("HECMode strings: %q, %q", cells.HECCorrection, cells.HECDetection)
	}

	// The same machine inside a Reassembler: of two consecutive cells with
	// single-bit errors the first is corrected and the second discarded,
	// so the PDU loses a cell.
	s := refRandSAR(rng, cells.UNI)
	sdu := refRandBytes(rng, 130) // three cells
	stream := refSplit(refSegment(s, sdu))
	if len(stream) != 3 {
		t.Fatalf("expected 3 cells, got %d", len(stream))
	}
	ra := cells.NewReassembler(cells.ReassemblerConfig{})
	if _, ok, err := ra.Push(single(stream[0])); ok || err != nil || ra.HECMode() != cells.HECDetection {
		t.Fatalf("first cell, single-bit error: %v, %v, mode %v", ok, err, ra.HECMode())
	}
	if _, ok, err := ra.Push(single(stream[1])); ok || !errors.Is(err, cells.ErrHEC) || ra.HECMode() != cells.HECDetection {
		t.Fatalf("second cell, single-bit error in detection mode: %v, %v, mode %v", ok, err, ra.HECMode())
	}
	if _, ok, err := ra.Push(bytes.Clone(stream[2])); ok || !errors.Is(err, cells.ErrLostCells) || ra.HECMode() != cells.HECCorrection {
		t.Fatalf("last cell: %v, %v, mode %v; want ErrLostCells in correction mode", ok, err, ra.HECMode())
	}
	if st := ra.Stats(); st.HEC != (cells.HECStats{Good: 1, Corrected: 1, Discarded: 1}) || st.Lost != 1 {
		t.Fatalf("reassembler stats %+v", st)
	}
}
