package cells

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/xam-project/xam/internal/clock"
)

func TestKnownVectors(t *testing.T) {
	check := []byte("123456789")
	if got := CRC32(check); got != 0xFC891918 {
		t.Errorf("CRC32(123456789) = %#08x, want 0xFC891918", got)
	}
	if got := UpdateCRC32(CRC32(check[:4]), check[4:]); got != 0xFC891918 {
		t.Errorf("UpdateCRC32 split = %#08x, want 0xFC891918", got)
	}
	if got := CRC10(check); got != 0x199 {
		t.Errorf("CRC10(123456789) = %#03x, want 0x199", got)
	}
	for _, v := range []struct {
		hdr [4]byte
		hec uint8
	}{
		{[4]byte{0, 0, 0, 0}, 0x55}, // I.432: the all-zero header
		{[4]byte{0, 0, 0, 1}, 0x52}, // unassigned-cell header with CLP=1
		{[4]byte{0x00, 0x10, 0x02, 0xa2}, 0xba},
	} {
		if got := HEC(v.hdr[:]); got != v.hec {
			t.Errorf("HEC(% x) = %#02x, want %#02x", v.hdr, got, v.hec)
		}
	}
}

// helloCell is "hello xam" on VPI 1, VCI 42, built by hand from I.361 and
// I.363.5 (and read as a correct AAL5 PDU by Wireshark).
const helloCell = "001002a2ba" + // GFC 0, VPI 1, VCI 42, PTI 001, CLP 0, HEC
	"68656c6c6f2078616d" + // "hello xam"
	"00000000000000000000000000000000000000000000000000000000000000" + // 31 bytes of pad
	"00" + "00" + "0009" + "a917da06" // UU, CPI, length 9, CRC-32

func TestHandBuiltPDU(t *testing.T) {
	want, _ := hex.DecodeString(helloCell)
	got, err := Segment(SAR{VPI: 1, VCI: 42}, []byte("hello xam"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("segment(hello xam):\n got %x\nwant %x", got, want)
	}
	r := NewReassembler(ReassemblerConfig{})
	pdu, ok, err := r.Push(Cell(want))
	if err != nil || !ok || string(pdu.SDU) != "hello xam" || pdu.VC != (VC{1, 42}) || pdu.Cells != 1 {
		t.Fatalf("reassemble = %+v, %v, %v", pdu, ok, err)
	}
}

func TestCellFields(t *testing.T) {
	c := make(Cell, CellSize)
	for _, tc := range []struct {
		f Format
		h Fields
	}{
		{UNI, Fields{GFC: 0xa, VPI: 0xbc, VCI: 0xdef1, PTI: 5, CLP: true}},
		{NNI, Fields{VPI: 0xabc, VCI: 0x1234, PTI: 1}},
		{UNI, Fields{}},
	} {
		if err := c.Encode(tc.f, tc.h); err != nil {
			t.Fatal(err)
		}
		if got := c.Fields(tc.f); got != tc.h {
			t.Errorf("%v: Fields() = %+v, want %+v", tc.f, got, tc.h)
		}
		if !c.Valid() || c.Check() != nil {
			t.Errorf("%v: encoded cell not valid: %v", tc.f, c.Check())
		}
	}
	// Setters keep the HEC right and touch only their field.
	c.Encode(UNI, Fields{GFC: 1, VPI: 2, VCI: 3, PTI: 0})
	c.SetVPI(UNI, 200)
	c.SetVCI(65535)
	c.SetPTI(PTIEndOfMessage)
	c.SetCLP(true)
	c.SetGFC(15)
	if want := (Fields{GFC: 15, VPI: 200, VCI: 65535, PTI: 1, CLP: true}); c.Fields(UNI) != want || !c.Valid() {
		t.Errorf("after setters: %+v (valid %v), want %+v", c.Fields(UNI), c.Valid(), want)
	}
	if !c.EndOfMessage() {
		t.Error("EndOfMessage false with PTI 001")
	}
	c.SetPTI(PTIManagement | PTIEndOfMessage)
	if c.EndOfMessage() {
		t.Error("an OAM cell (PTI 101) is not an AAL5 end of message")
	}
	c.SetVPI(NNI, 0xfff)
	if c.VPI(NNI) != 0xfff || c.VCI() != 65535 || !c.Valid() {
		t.Errorf("NNI VPI setter: %d", c.VPI(NNI))
	}
	c.SetCLP(false)
	if c.CLP() {
		t.Error("SetCLP(false) left CLP set")
	}
}

func TestFieldErrors(t *testing.T) {
	c := make(Cell, CellSize)
	for _, tc := range []struct {
		f Format
		h Fields
	}{
		{UNI, Fields{VPI: 256}},
		{UNI, Fields{GFC: 16}},
		{NNI, Fields{VPI: 4096}},
		{NNI, Fields{GFC: 1}},
		{UNI, Fields{PTI: 8}},
		{Format(7), Fields{}},
	} {
		if err := c.Encode(tc.f, tc.h); !errors.Is(err, ErrField) {
			t.Errorf("Encode(%v, %+v) = %v, want ErrField", tc.f, tc.h, err)
		}
	}
	if err := Cell(make([]byte, 10)).Check(); !errors.Is(err, ErrShortCell) {
		t.Errorf("Check(short) = %v", err)
	}
	if _, err := NewSegmenter(SAR{VPI: 300}); !errors.Is(err, ErrField) {
		t.Errorf("NewSegmenter(VPI 300) = %v", err)
	}
	if err := Cell(make([]byte, 4)).Encode(UNI, Fields{}); !errors.Is(err, ErrShortCell) {
		t.Errorf("Encode into 4 bytes = %v", err)
	}
}

func TestSegmentLimits(t *testing.T) {
	g, _ := NewSegmenter(SAR{VCI: 5})
	for _, n := range []int{0, MaxSDU + 1} {
		if _, err := g.Append(nil, make([]byte, n)); !errors.Is(err, ErrSDULength) {
			t.Errorf("Append(%d bytes) = %v, want ErrSDULength", n, err)
		}
	}
	out, err := g.Append(nil, make([]byte, MaxSDU))
	if err != nil || len(out) != MaxPDUCells*CellSize {
		t.Fatalf("Append(MaxSDU) = %d bytes, %v; want %d cells", len(out), err, MaxPDUCells)
	}
	if _, err := g.Put(make([]byte, 52), []byte{1}); err == nil {
		t.Error("Put into a short buffer succeeded")
	}
	for n, cells := range map[int]int{1: 1, 40: 1, 41: 2, 88: 2, 89: 3, 65535: 1366} {
		if got := CellCount(n); got != cells {
			t.Errorf("CellCount(%d) = %d, want %d", n, got, cells)
		}
	}
}

// pushAll feeds cells and returns the PDUs delivered and the errors.
func pushAll(r *Reassembler, cs []byte) (sdus [][]byte, errs []error) {
	for o := 0; o+CellSize <= len(cs); o += CellSize {
		pdu, ok, err := r.Push(Cell(cs[o : o+CellSize]))
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			sdus = append(sdus, bytes.Clone(pdu.SDU))
		}
	}
	return sdus, errs
}

func mustSegment(t *testing.T, s SAR, sdu []byte) []byte {
	t.Helper()
	out, err := Segment(s, sdu)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReassemblyErrors(t *testing.T) {
	sdu := bytes.Repeat([]byte("xam!"), 50) // 200 bytes: 5 cells
	vc := SAR{VPI: 3, VCI: 77}
	cellAt := func(cs []byte, i int) []byte { return cs[i*CellSize : (i+1)*CellSize] }
	tests := []struct {
		name   string
		cells  func() []byte
		cfg    ReassemblerConfig
		want   error
		detail string
	}{
		{"crc", func() []byte {
			cs := mustSegment(t, vc, sdu)
			cs[2*CellSize+20] ^= 1
			return cs
		}, ReassemblerConfig{}, ErrCRC, "CRC mismatch (5 cells, length 200)"},
		{"lost middle cell", func() []byte {
			cs := mustSegment(t, vc, sdu)
			return append(bytes.Clone(cs[:2*CellSize]), cs[3*CellSize:]...)
		}, ReassemblerConfig{}, ErrLostCells, "4 cells received, length 200 needs 5"},
		{"lost end of message", func() []byte {
			cs := mustSegment(t, vc, sdu)
			two := mustSegment(t, vc, []byte("short"))
			return append(bytes.Clone(cs[:4*CellSize]), two...)
		}, ReassemblerConfig{}, ErrLength, "5 cells received, length 5 needs 1"},
		{"aborted", func() []byte {
			cs := mustSegment(t, vc, sdu)
			last := Cell(cellAt(cs, 4))
			copy(last[CellSize-6:], []byte{0, 0}) // length field 0
			return cs
		}, ReassemblerConfig{}, ErrAborted, "aborted"},
		{"length above MaxSDU", func() []byte {
			cs := mustSegment(t, vc, sdu[:100]) // 3 cells
			last := Cell(cellAt(cs, 2))
			copy(last[CellSize-6:], []byte{0, 140}) // length 140: still 3 cells
			return cs
		}, ReassemblerConfig{MaxSDU: 130}, ErrOversize, "length 140 exceeds the limit of 130 bytes"},
		{"oversize without end of message", func() []byte {
			cs := mustSegment(t, vc, sdu)
			var run []byte
			for range 4 {
				run = append(run, cellAt(cs, 0)...)
			}
			return run
		}, ReassemblerConfig{MaxSDU: 100}, ErrOversize, "more than 3 cells without an end of message"},
		{"management cell", func() []byte {
			c := Cell(make([]byte, CellSize))
			c.Encode(UNI, Fields{VCI: 3, PTI: PTIManagement})
			return c
		}, ReassemblerConfig{}, ErrManagement, "not a user data cell"},
		{"uncorrectable header", func() []byte {
			cs := mustSegment(t, vc, []byte("x"))
			cs[0] ^= 0x81
			return cs
		}, ReassemblerConfig{}, ErrHEC, "HEC error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReassembler(tc.cfg)
			sdus, errs := pushAll(r, tc.cells())
			if len(sdus) != 0 {
				t.Errorf("delivered %q", sdus)
			}
			if len(errs) != 1 {
				t.Fatalf("errors %v, want one %v", errs, tc.want)
			}
			var re *ReassemblyError
			if !errors.Is(errs[0], tc.want) || !errors.As(errs[0], &re) {
				t.Fatalf("error %v, want a *ReassemblyError wrapping %v", errs[0], tc.want)
			}
			if !strings.Contains(errs[0].Error(), tc.detail) {
				t.Errorf("error %q does not say %q", errs[0], tc.detail)
			}
			// The circuit recovers: the next PDU gets through. A PDU cut
			// off for size is discarded up to an end of message, which
			// costs the next PDU.
			next := mustSegment(t, vc, []byte("next"))
			if tc.name == "oversize without end of message" {
				if sdus, errs = pushAll(r, next); len(sdus)+len(errs) != 0 {
					t.Errorf("PDU after a cut: %q %v, want it discarded", sdus, errs)
				}
			}
			sdus, errs = pushAll(r, next)
			if len(errs) != 0 || len(sdus) != 1 || string(sdus[0]) != "next" {
				t.Errorf("after the error: %q, %v", sdus, errs)
			}
		})
	}
}

func TestReassemblyOversizeDiscardsToEndOfMessage(t *testing.T) {
	r := NewReassembler(ReassemblerConfig{MaxSDU: 100})
	big := mustSegment(t, SAR{VCI: 9}, make([]byte, 1000)) // 21 cells
	sdus, errs := pushAll(r, big)
	if len(sdus) != 0 || len(errs) != 1 || !errors.Is(errs[0], ErrOversize) {
		t.Fatalf("got %d sdus, errors %v; want one ErrOversize", len(sdus), errs)
	}
	s := r.Stats()
	if s.Oversize != 1 || s.Discarded != 21 {
		t.Errorf("stats %+v", s)
	}
	if s.Cells > 3 {
		t.Errorf("%d cells held for a circuit limited to 3", s.Cells)
	}
	sdus, errs = pushAll(r, mustSegment(t, SAR{VCI: 9}, []byte("ok")))
	if len(errs) != 0 || len(sdus) != 1 {
		t.Errorf("after oversize: %q %v", sdus, errs)
	}
}

func TestReassemblyTimeout(t *testing.T) {
	clk := clock.NewManual(time.Unix(1000, 0))
	r := NewReassembler(ReassemblerConfig{Timeout: time.Second, Clock: clk})
	cs := mustSegment(t, SAR{VCI: 1}, make([]byte, 100)) // 3 cells

	// Completed too late: the PDU is abandoned at its end of message.
	pushAll(r, cs[:2*CellSize])
	clk.Advance(1500 * time.Millisecond)
	sdus, errs := pushAll(r, cs[2*CellSize:])
	if len(sdus) != 0 || len(errs) != 1 || !errors.Is(errs[0], ErrTimeout) {
		t.Fatalf("late PDU: %q %v, want ErrTimeout", sdus, errs)
	}

	// Never completed: Expire abandons it.
	pushAll(r, cs[:CellSize])
	if errs := r.Expire(); len(errs) != 0 {
		t.Fatalf("Expire before the timeout: %v", errs)
	}
	if got := r.Pending(); len(got) != 1 || got[0] != (VC{0, 1}) {
		t.Fatalf("Pending = %v", got)
	}
	clk.Advance(2 * time.Second)
	errs = r.Expire()
	if len(errs) != 1 || !errors.Is(errs[0], ErrTimeout) || !strings.Contains(errs[0].Error(), "1 cells abandoned") {
		t.Fatalf("Expire = %v", errs)
	}
	if len(r.Pending()) != 0 {
		t.Error("PDU still pending after Expire")
	}

	// In time: delivered.
	sdus, errs = pushAll(r, cs)
	if len(sdus) != 1 || len(errs) != 0 {
		t.Fatalf("timely PDU: %d sdus, %v", len(sdus), errs)
	}
	if got := r.Stats().Timeout; got != 2 {
		t.Errorf("Stats().Timeout = %d, want 2", got)
	}
}

func TestReassemblyInterleavedAndBoundedVCs(t *testing.T) {
	r := NewReassembler(ReassemblerConfig{MaxVCs: 2})
	a := mustSegment(t, SAR{VCI: 1}, bytes.Repeat([]byte{'a'}, 100))
	b := mustSegment(t, SAR{VCI: 2}, bytes.Repeat([]byte{'b'}, 100))
	var mixed []byte
	for i := 0; i < 3; i++ {
		mixed = append(mixed, a[i*CellSize:(i+1)*CellSize]...)
		mixed = append(mixed, b[i*CellSize:(i+1)*CellSize]...)
	}
	sdus, errs := pushAll(r, mixed)
	if len(sdus) != 2 || sdus[0][0] != 'a' || sdus[1][0] != 'b' || len(errs) != 0 {
		t.Errorf("interleaved: %q %v", sdus, errs)
	}
	// A third circuit while both are mid-PDU is never refused: it takes
	// the slot of the PDU that began first (a's), which is dropped and
	// counted; the rest of a then arrives as a PDU missing its start.
	r = NewReassembler(ReassemblerConfig{MaxVCs: 2})
	third := mustSegment(t, SAR{VCI: 3}, []byte("c"))
	mixed = append(mixed[:2*CellSize:2*CellSize], append(third, mixed[2*CellSize:]...)...)
	sdus, errs = pushAll(r, mixed)
	if len(sdus) != 2 || sdus[0][0] != 'c' || sdus[1][0] != 'b' {
		t.Errorf("a third circuit: %q", sdus)
	}
	if len(errs) != 1 || !errors.Is(errs[0], ErrLostCells) || r.Stats().Evicted != 1 {
		t.Errorf("errors %v, evicted %d; want one ErrLostCells and 1", errs, r.Stats().Evicted)
	}
	// Once idle, a circuit's slot is reused without evicting anything.
	sdus, errs = pushAll(r, third)
	if len(sdus) != 1 || len(errs) != 0 || r.Stats().Evicted != 1 {
		t.Errorf("third circuit after the others finished: %q %v", sdus, errs)
	}
}

// Cells that open PDUs on made-up circuits and never end them (a hostile
// or broken sender) cannot shut a real circuit out: each new circuit
// evicts the oldest open PDU, and the real circuit's next PDU is
// delivered. Before, a full reassembler refused every new circuit forever.
func TestReassemblyNeverShutOut(t *testing.T) {
	r := NewReassembler(ReassemblerConfig{MaxVCs: 4})
	var junk []byte
	for vci := uint16(100); vci < 104; vci++ {
		junk = append(junk, mustSegment(t, SAR{VCI: vci}, make([]byte, 200))[:CellSize]...)
	}
	if sdus, errs := pushAll(r, junk); len(sdus) != 0 || len(errs) != 0 {
		t.Fatalf("junk: %q %v", sdus, errs)
	}
	real := mustSegment(t, SAR{VCI: 32}, []byte("the real message"))
	for round := range 3 {
		sdus, errs := pushAll(r, real)
		if len(sdus) != 1 || string(sdus[0]) != "the real message" || len(errs) != 0 {
			t.Fatalf("round %d: %q %v", round, sdus, errs)
		}
	}
	if s := r.Stats(); s.Evicted != 1 {
		t.Errorf("evicted %d open PDUs, want 1", s.Evicted)
	}
}

func TestReassemblyCorrectsHeader(t *testing.T) {
	r := NewReassembler(ReassemblerConfig{})
	cs := mustSegment(t, SAR{VPI: 5, VCI: 500}, []byte("fix me"))
	cs[2] ^= 0x40
	sdus, errs := pushAll(r, cs)
	if len(errs) != 0 || len(sdus) != 1 || string(sdus[0]) != "fix me" {
		t.Fatalf("%q %v", sdus, errs)
	}
	if s := r.Stats().HEC; s.Corrected != 1 || r.HECMode() != HECDetection {
		t.Errorf("HEC stats %+v, mode %v", s, r.HECMode())
	}
}

func TestSSAM(t *testing.T) {
	p := make([]byte, PayloadSize)
	for n := 0; n <= SSAMDataSize; n++ {
		data := bytes.Repeat([]byte{byte(n)}, n)
		if err := EncodeSSAM(p, 0xbeef, 0xdeadbeef, data); err != nil {
			t.Fatal(err)
		}
		s := SSAMCell(p)
		if err := s.Check(); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if s.FlowControl() != 0xbeef || s.Handler() != 0xdeadbeef || !bytes.Equal(s.Data(), data) {
			t.Fatalf("%d bytes: decoded %x %x %x", n, s.FlowControl(), s.Handler(), s.Data())
		}
	}
	// A known cell: every field and the CRC-10 over the payload with the
	// CRC bits zero.
	EncodeSSAM(p, 1, 2, []byte("abc"))
	want := append([]byte{0, 1, 0, 0, 0, 2, 3 << 2, 0}, "abc"...)
	want = append(want, make([]byte, 37)...)
	crc := CRC10(want)
	want[6] |= byte(crc >> 8)
	want[7] = byte(crc)
	if !bytes.Equal(p, want) {
		t.Fatalf("SSAM cell\n got % x\nwant % x", p, want)
	}
	p[10] ^= 0x20
	if err := SSAMCell(p).Check(); !errors.Is(err, ErrSSAM) {
		t.Errorf("corrupted SSAM cell: %v", err)
	}
	if err := EncodeSSAM(p, 0, 0, make([]byte, 41)); !errors.Is(err, ErrSSAM) {
		t.Errorf("41 data bytes: %v", err)
	}
	if err := EncodeSSAM(p[:47], 0, 0, nil); !errors.Is(err, ErrShortCell) {
		t.Errorf("short buffer: %v", err)
	}
	if err := SSAMCell(p[:47]).Check(); !errors.Is(err, ErrShortCell) {
		t.Errorf("short cell: %v", err)
	}
	// A length field above 40 with a matching CRC is still refused.
	EncodeSSAM(p, 0, 0, nil)
	p[6] = 41 << 2
	crc = ssamCRC(p)
	p[6] |= byte(crc >> 8)
	p[7] = byte(crc)
	if err := SSAMCell(p).Check(); !errors.Is(err, ErrSSAM) || !strings.Contains(err.Error(), "length") {
		t.Errorf("length 41: %v", err)
	}
}

var (
	macA = []byte{2, 0, 0, 0, 0, 1}
	macB = []byte{2, 0, 0, 0, 0, 2}
)

func TestFrames(t *testing.T) {
	if got := CellsPerFrame(1500); got != 28 {
		t.Errorf("CellsPerFrame(1500) = %d, want 28", got)
	}
	if got := CellsPerFrame(9000); got != 169 {
		t.Errorf("CellsPerFrame(9000) = %d, want 169", got)
	}
	if CellsPerFrame(56) != 0 {
		t.Error("an MTU of 56 holds no cell")
	}
	cs := mustSegment(t, SAR{VCI: 7}, make([]byte, 3000)) // 63 cells
	f := &Framer{Dst: macB, Src: macA, EtherType: 0x88b6}
	var got []byte
	frames := 0
	err := f.Pack(nil, cs, func(fr []byte) error {
		if len(fr) > EthernetHeaderSize+1500 {
			t.Errorf("frame of %d bytes exceeds the MTU", len(fr))
		}
		body, hdr, err := Unpack(fr, 0x88b6)
		if err != nil {
			return err
		}
		if hdr.Version() != FrameVersion || hdr.Cells()*CellSize != len(body) {
			t.Errorf("header %x, body %d", []byte(hdr), len(body))
		}
		got = append(got, body...)
		frames++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if frames != 3 || !bytes.Equal(got, cs) {
		t.Errorf("%d frames, cells equal %v; want 3 frames (28+28+7)", frames, bytes.Equal(got, cs))
	}

	good, err := f.Append(nil, cs[:2*CellSize])
	if err != nil {
		t.Fatal(err)
	}
	if FrameLen(2) != len(good) {
		t.Errorf("FrameLen(2) = %d, frame is %d", FrameLen(2), len(good))
	}
	mutate := func(fn func(b []byte) []byte) []byte { return fn(bytes.Clone(good)) }
	for _, tc := range []struct {
		name  string
		frame []byte
		want  error
	}{
		{"short", good[:16], ErrFrameTruncated},
		{"truncated cells", good[:len(good)-1], ErrFrameTruncated},
		{"extra bytes", append(bytes.Clone(good), 0), ErrFrameCount},
		{"zero count", mutate(func(b []byte) []byte { b[16], b[17] = 0, 0; return b }), ErrFrameCount},
		{"count too high", mutate(func(b []byte) []byte { b[17] = 3; return b }), ErrFrameTruncated},
		{"version", mutate(func(b []byte) []byte { b[14] = 2; return b }), ErrFrameVersion},
		{"ethertype", good, ErrFrameType}, // unpacked below with the default type
	} {
		et := uint16(0x88b6)
		if tc.name == "ethertype" {
			et = 0
		}
		if _, _, err := Unpack(tc.frame, et); !errors.Is(err, tc.want) {
			t.Errorf("%s: Unpack = %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name  string
		f     Framer
		cells []byte
		want  error
	}{
		{"partial cell", *f, cs[:CellSize+1], ErrShortCell},
		{"no cells", *f, nil, ErrFrameCount},
		{"too many", Framer{Dst: macB, Src: macA, MTU: 200}, cs[:4*CellSize], ErrFrameTooBig},
	} {
		if _, err := tc.f.Append(nil, tc.cells); !errors.Is(err, tc.want) {
			t.Errorf("Append %s = %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := (&Framer{Dst: macB[:3], Src: macA}).Append(nil, cs[:CellSize]); err == nil {
		t.Error("Append with a 3-byte MAC succeeded")
	}
	if err := (&Framer{Dst: macB, Src: macA, MTU: 50}).Pack(nil, cs, func([]byte) error { return nil }); !errors.Is(err, ErrFrameTooBig) {
		t.Errorf("Pack with MTU 50 = %v", err)
	}
}

func TestGopacketLayers(t *testing.T) {
	cs := mustSegment(t, SAR{VPI: 9, VCI: 99, GFC: 3}, make([]byte, 60)) // 2 cells
	frame, err := (&Framer{Dst: macB, Src: macA}).Append(nil, cs)
	if err != nil {
		t.Fatal(err)
	}
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if el := pkt.ErrorLayer(); el != nil {
		t.Fatalf("decode error: %v", el.Error())
	}
	fl, ok := pkt.Layer(LayerTypeFrame).(*FrameLayer)
	if !ok || fl.Count != 2 || fl.Version != 1 {
		t.Fatalf("frame layer %+v", fl)
	}
	var got []*CellLayer
	for _, l := range pkt.Layers() {
		if c, ok := l.(*CellLayer); ok {
			got = append(got, c)
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d cell layers, want 2", len(got))
	}
	for i, c := range got {
		want := Fields{GFC: 3, VPI: 9, VCI: 99, PTI: uint8(i)}
		if c.Fields != want || !c.HECValid || len(c.Data) != PayloadSize {
			t.Errorf("cell %d: %+v valid %v", i, c.Fields, c.HECValid)
		}
	}
	// A damaged frame decodes to an error layer, not a panic.
	bad := bytes.Clone(frame)
	bad[17] = 5
	if pkt := gopacket.NewPacket(bad, layers.LayerTypeEthernet, gopacket.Default); pkt.ErrorLayer() == nil {
		t.Error("frame announcing 5 cells with 2 present decoded without error")
	}
	// The fast parser path.
	var (
		eth layers.Ethernet
		fr  FrameLayer
		cl  CellLayer
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &fr, &cl)
	var decoded []gopacket.LayerType
	if err := parser.DecodeLayers(frame, &decoded); err != nil {
		t.Fatalf("DecodingLayerParser: %v (decoded %v)", err, decoded)
	}
	if len(decoded) != 4 || decoded[1] != LayerTypeFrame || decoded[3] != LayerTypeCell {
		t.Errorf("decoded %v", decoded)
	}
}

// TestPushCellsMatchesPush feeds the same streams, with interleaved
// circuits, damage, loss and oversize PDUs, cell by cell through Push and a
// frame at a time through PushCells: the outcomes must be identical.
func TestPushCellsMatchesPush(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 200 {
		var stream []byte
		for range 1 + rng.IntN(6) {
			s := SAR{VPI: uint16(rng.IntN(3)), VCI: uint16(rng.IntN(3))}
			cs := mustSegment(t, s, make([]byte, 1+rng.IntN(400)))
			switch rng.IntN(6) {
			case 0: // payload damage
				cs[rng.IntN(len(cs))] ^= 0x01
			case 1: // lose a cell
				k := rng.IntN(len(cs) / CellSize)
				cs = append(cs[:k*CellSize:k*CellSize], cs[(k+1)*CellSize:]...)
			case 2: // header damage, one or two bits
				cs[rng.IntN(len(cs)/CellSize)*CellSize+rng.IntN(5)] ^= 1 << rng.IntN(8)
				if rng.IntN(2) == 0 {
					cs[rng.IntN(len(cs)/CellSize)*CellSize+rng.IntN(5)] ^= 1 << rng.IntN(8)
				}
			}
			// Interleave with what is there at cell granularity.
			at := rng.IntN(len(stream)/CellSize+1) * CellSize
			stream = append(stream[:at:at], append(cs, stream[at:]...)...)
		}
		cfg := ReassemblerConfig{MaxSDU: 300}
		one, batch := NewReassembler(cfg), NewReassembler(cfg)
		var want, got []string
		for o := 0; o < len(stream); o += CellSize {
			c := bytes.Clone(stream[o : o+CellSize])
			pdu, ok, err := one.Push(Cell(c))
			if err != nil {
				want = append(want, err.Error())
			} else if ok {
				want = append(want, fmt.Sprintf("%v %x", pdu.VC, pdu.SDU))
			}
		}
		frame := CellsPerFrame(1 + rng.IntN(1500))
		if frame == 0 {
			frame = 1
		}
		buf := bytes.Clone(stream)
		for o := 0; o < len(buf); o += frame * CellSize {
			err := batch.PushCells(buf[o:min(o+frame*CellSize, len(buf))], func(pdu PDU, err error) {
				if err != nil {
					got = append(got, err.Error())
				} else {
					got = append(got, fmt.Sprintf("%v %x", pdu.VC, pdu.SDU))
				}
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("round %d: PushCells gave\n%s\nPush gave\n%s", round, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if one.Stats() != batch.Stats() {
			t.Fatalf("round %d: stats differ:\nPushCells %+v\nPush      %+v", round, batch.Stats(), one.Stats())
		}
	}
	if err := NewReassembler(ReassemblerConfig{}).PushCells(make([]byte, 54), nil); !errors.Is(err, ErrShortCell) {
		t.Errorf("PushCells(54 bytes) = %v", err)
	}
}

// A circuit cut off for size, whose end of message never comes, gives its
// slot back when the reassembly timer runs out.
func TestReassemblyCutCircuitExpires(t *testing.T) {
	clk := clock.NewManual(time.Unix(0, 0))
	r := NewReassembler(ReassemblerConfig{MaxSDU: 40, MaxVCs: 1, Timeout: time.Second, Clock: clk})
	big := mustSegment(t, SAR{VPI: 1, VCI: 1}, make([]byte, 200))
	_, errs := pushAll(r, big[:3*CellSize])
	if len(errs) != 1 || !errors.Is(errs[0], ErrOversize) {
		t.Fatalf("errors %v, want one ErrOversize", errs)
	}
	clk.Advance(time.Hour)
	if errs := r.Expire(); len(errs) != 0 {
		t.Errorf("Expire reported %v for a circuit whose error was already reported", errs)
	}
	other := mustSegment(t, SAR{VPI: 2, VCI: 2}, []byte("x"))
	if sdus, errs := pushAll(r, other); len(errs) != 0 || len(sdus) != 1 || r.Stats().Evicted != 0 {
		t.Fatalf("after expiry: %q %v, evicted %d", sdus, errs, r.Stats().Evicted)
	}
	// Cut again, the circuit is evicted by another one instead of
	// refusing it.
	pushAll(r, big[:3*CellSize])
	if sdus, errs := pushAll(r, other); len(errs) != 0 || len(sdus) != 1 || r.Stats().Evicted != 1 {
		t.Fatalf("while cut: %q %v, evicted %d", sdus, errs, r.Stats().Evicted)
	}
}

// A PDU whose end was lost is dropped by Discard, and the next PDU on the
// circuit is then delivered instead of running into it.
func TestReassemblyDiscard(t *testing.T) {
	for _, f := range []Format{UNI, NNI} {
		r := NewReassembler(ReassemblerConfig{Format: f})
		vc := VC{VPI: 5, VCI: 77}
		cs := mustSegment(t, SAR{Format: f, VPI: vc.VPI, VCI: vc.VCI}, make([]byte, 200)) // 5 cells
		if r.Discard(vc) {
			t.Fatal("Discard with nothing open reported a PDU")
		}
		pushAll(r, cs[:3*CellSize]) // the last two cells are lost
		if r.Discard(VC{VPI: vc.VPI, VCI: vc.VCI + 1}) {
			t.Fatal("Discard of another circuit dropped something")
		}
		if !r.Discard(vc) {
			t.Fatalf("%v: Discard found no open PDU", f)
		}
		sdus, errs := pushAll(r, cs)
		if len(sdus) != 1 || len(errs) != 0 || len(sdus[0]) != 200 {
			t.Fatalf("%v: after Discard: %d SDUs, errors %v", f, len(sdus), errs)
		}
		if s := r.Stats(); s.Abandoned != 1 || s.PDUs != 1 {
			t.Fatalf("%v: stats %+v", f, s)
		}
	}
}

// TestCRC10Trailer: the trailer's CRC is the CRC-10 of the bytes followed
// by the length indicator's byte, and catches a changed indicator.
// Both ways of computing the CRC (the tables, and carry-less
// multiplication where the processor has it) and a message shorter than
// the multiplication takes are checked, against the tables' CRC10 of the
// bytes with the indicator's byte appended.
func TestCRC10Trailer(t *testing.T) {
	defer func(was bool) { useCRC10CLMUL = was }(useCRC10CLMUL)
	clmuls := []bool{false, useCRC10CLMUL}
	for _, p := range [][]byte{[]byte("a compact cell's forty-six bytes, more or less"), []byte("short")} {
		for li := range uint8(64) {
			useCRC10CLMUL = false
			want := CRC10(append(append([]byte(nil), p...), li<<2))
			for _, clmul := range clmuls {
				useCRC10CLMUL = clmul
				if got := CRC10Trailer(p, li); got != want {
					t.Fatalf("multiplication %v, %d bytes: CRC10Trailer(li=%d) = %#03x, want %#03x", clmul, len(p), li, got, want)
				}
				if li > 0 && CRC10Trailer(p, li) == CRC10Trailer(p, li-1) {
					t.Fatalf("li %d and %d share a CRC", li, li-1)
				}
			}
		}
	}
}

// TestReassemblyTimeoutBackToBack: PDUs of several cells on one circuit,
// each arriving at once but the second long after the first. The second's
// first cell repeats the header of the first's continuation cells, the
// header Push and PushCells take without the general path: its PDU's
// reassembly timer must start then, not when the first PDU began.
func TestReassemblyTimeoutBackToBack(t *testing.T) {
	for _, name := range []string{"Push", "PushCells"} {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewManual(time.Unix(1000, 0))
			r := NewReassembler(ReassemblerConfig{Timeout: time.Second, Clock: clk})
			cs := mustSegment(t, SAR{VCI: 1}, make([]byte, 100)) // 3 cells
			push := func() ([][]byte, []error) {
				if name == "Push" {
					return pushAll(r, cs)
				}
				var sdus [][]byte
				var errs []error
				r.PushCells(cs, func(p PDU, err error) {
					if err != nil {
						errs = append(errs, err)
						return
					}
					sdus = append(sdus, append([]byte(nil), p.SDU...))
				})
				return sdus, errs
			}
			for i := range 3 {
				if sdus, errs := push(); len(sdus) != 1 || len(errs) != 0 {
					t.Fatalf("PDU %d, %v after the first: %d delivered, errors %v", i, time.Duration(i)*2*time.Second, len(sdus), errs)
				}
				clk.Advance(2 * time.Second)
			}
			if s := r.Stats(); s.Timeout != 0 || s.PDUs != 3 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}
