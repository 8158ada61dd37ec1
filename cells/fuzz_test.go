package cells_test

// Fuzz targets for everything in the package that parses bytes from the
// wire. Each target holds the package to the reference implementation in
// reference_test.go where there is one. The seed corpus is checked in under
// testdata/fuzz/<FuzzName>/ (valid cells, PDUs, frames and SSAM cells, and
// edge cases); the f.Add calls below add more of the same, built at run
// time.
//
// Run one target with, for example,
//
//	go test -run=NONE -fuzz='^FuzzReassemble$' -fuzztime=30s ./cells

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/clock"
)

// fuzzSegment segments sdu and fails the fuzz set-up on error.
func fuzzSegment(f testing.TB, s cells.SAR, sdu []byte) []byte {
	f.Helper()
	out, err := cells.Segment(s, sdu)
	if err != nil {
		f.Fatal(err)
	}
	return out
}

func fuzzBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

// hammingHeader is the number of bits in which two 5-byte headers differ.
func hammingHeader(a, b []byte) int {
	n := 0
	for i := range cells.HeaderSize {
		x := a[i] ^ b[i]
		for x != 0 {
			n += int(x & 1)
			x >>= 1
		}
	}
	return n
}

// ---------------------------------------------------------------------------

// FuzzCell: Cell's accessors, Check, Fields and Encode on any bytes. Check
// and Valid agree with the reference HEC; Encode(Fields()) reproduces the
// four header bytes in both layouts, and the whole header when the HEC was
// valid; a HECReceiver corrects exactly the headers one bit away from a
// valid one and leaves the others alone.
func FuzzCell(f *testing.F) {
	for _, s := range []cells.SAR{
		{VPI: 0, VCI: 5},
		{VPI: 1, VCI: 32, GFC: 3, CLP: true},
		{Format: cells.NNI, VPI: 0xABC, VCI: 0xFFFF},
	} {
		f.Add(fuzzSegment(f, s, []byte("one cell")))
	}
	idle := append([]byte{0, 0, 0, 1, 0x52}, bytes.Repeat([]byte{0x6A}, 48)...)
	f.Add(idle)
	oneBit := bytes.Clone(idle)
	oneBit[1] ^= 0x10
	f.Add(oneBit)
	twoBits := bytes.Clone(idle)
	twoBits[0] ^= 0x81
	f.Add(twoBits)
	f.Add([]byte{})
	f.Add(make([]byte, 52))
	f.Add(make([]byte, 54))

	f.Fuzz(func(t *testing.T, data []byte) {
		err := cells.Cell(data).Check()
		valid := cells.Cell(data).Valid()
		if valid != (err == nil) {
			t.Fatalf("Valid() = %v but Check() = %v", valid, err)
		}
		if len(data) != cells.CellSize {
			if !errors.Is(err, cells.ErrShortCell) {
				t.Fatalf("Check of %d bytes = %v, want ErrShortCell", len(data), err)
			}
			if len(data) < cells.HeaderSize {
				if err := cells.Cell(bytes.Clone(data)).Encode(cells.UNI, cells.Fields{}); !errors.Is(err, cells.ErrShortCell) {
					t.Fatalf("Encode into %d bytes = %v, want ErrShortCell", len(data), err)
				}
				return
			}
			if len(data) < cells.CellSize {
				return
			}
			data = data[:cells.CellSize] // the rest is about any 53 bytes
			err = cells.Cell(data).Check()
		}
		orig := bytes.Clone(data)
		c := cells.Cell(bytes.Clone(data))
		refValid := refHEC(orig[:4]) == orig[4]
		if (err == nil) != refValid {
			t.Fatalf("Check(% x) = %v, reference HEC %#02x", orig[:5], err, refHEC(orig[:4]))
		}
		if err != nil && !errors.Is(err, cells.ErrHEC) {
			t.Fatalf("Check(% x) = %v, want ErrHEC", orig[:5], err)
		}
		if !bytes.Equal(c.Payload(), orig[5:]) || !bytes.Equal(c.Header(), orig[:5]) || c.HEC() != orig[4] {
			t.Fatal("Payload/Header/HEC do not view the cell")
		}
		if eom := orig[3]&0b1010 == 0b0010; c.EndOfMessage() != eom {
			t.Fatalf("EndOfMessage(% x) = %v", orig[:4], c.EndOfMessage())
		}

		for _, form := range refFormats {
			fields := c.Fields(form)
			ref := refDecode(form, orig[:5])
			if fields.GFC != ref.GFC || fields.VPI != ref.VPI || fields.VCI != ref.VCI || fields.PTI != ref.PTI || fields.CLP != ref.CLP {
				t.Fatalf("%v: Fields(% x) = %+v, reference %+v", form, orig[:5], fields, ref)
			}
			if c.VPI(form) != ref.VPI || c.VCI() != ref.VCI || c.PTI() != ref.PTI || c.CLP() != ref.CLP ||
				c.VC(form) != (cells.VC{VPI: ref.VPI, VCI: ref.VCI}) || (form == cells.UNI && c.GFC() != ref.GFC) {
				t.Fatalf("%v: accessors of % x disagree with the reference %+v", form, orig[:5], ref)
			}
			if err := fields.Check(form); err != nil {
				t.Fatalf("%v: decoded fields %+v fail Check: %v", form, fields, err)
			}
			d := cells.Cell(bytes.Clone(orig))
			if err := d.Encode(form, fields); err != nil {
				t.Fatalf("%v: Encode(Fields(% x)): %v", form, orig[:5], err)
			}
			if !bytes.Equal(d[:4], orig[:4]) || d[4] != refHEC(orig[:4]) || !bytes.Equal(d[5:], orig[5:]) {
				t.Fatalf("%v: Encode(Fields(% x)) = % x", form, orig[:5], []byte(d[:5]))
			}
			if refValid && !bytes.Equal(d, orig) {
				t.Fatalf("%v: Encode(Fields(% x)) changed a valid header to % x", form, orig[:5], []byte(d[:5]))
			}
			if !d.Valid() {
				t.Fatalf("%v: encoded header % x is not valid", form, []byte(d[:5]))
			}
			// The setters keep the HEC right.
			d.SetVPI(form, fields.VPI^0x5)
			d.SetVCI(fields.VCI ^ 0x100)
			d.SetPTI(fields.PTI ^ 1)
			d.SetCLP(!fields.CLP)
			if form == cells.UNI {
				d.SetGFC(fields.GFC ^ 0x8)
			}
			if !d.Valid() || d[4] != refHEC(d[:4]) {
				t.Fatalf("%v: setters left an invalid header % x", form, []byte(d[:5]))
			}
			got := d.Fields(form)
			want := cells.Fields{VPI: (fields.VPI ^ 0x5), VCI: fields.VCI ^ 0x100, PTI: fields.PTI ^ 1, CLP: !fields.CLP}
			if form == cells.UNI {
				want.GFC = fields.GFC ^ 0x8
			}
			if got != want {
				t.Fatalf("%v: after the setters Fields = %+v, want %+v", form, got, want)
			}
		}

		// The receiver: good iff valid; otherwise it corrects exactly when
		// a single-bit neighbour of the header is valid (the code's minimum
		// distance of 4 makes that neighbour unique).
		var neighbour []byte
		if !refValid {
			for pos := range 40 {
				n := bytes.Clone(orig)
				refFlip(n, pos)
				if refHEC(n[:4]) == n[4] {
					if neighbour != nil {
						t.Fatalf("header % x has two valid neighbours at distance 1", orig[:5])
					}
					neighbour = n
				}
			}
		}
		var r cells.HECReceiver
		res := r.Check(c)
		switch {
		case refValid:
			if res != cells.HECGood || !bytes.Equal(c, orig) || r.Mode() != cells.HECCorrection {
				t.Fatalf("valid header % x: %v, mode %v", orig[:5], res, r.Mode())
			}
		case neighbour != nil:
			if res != cells.HECCorrected || !bytes.Equal(c, neighbour) || r.Mode() != cells.HECDetection {
				t.Fatalf("header % x, one bit from % x: %v to % x, mode %v", orig[:5], neighbour[:5], res, []byte(c[:5]), r.Mode())
			}
		default:
			if res != cells.HECDiscarded || !bytes.Equal(c, orig) || r.Mode() != cells.HECDetection {
				t.Fatalf("header % x, no valid neighbour: %v to % x, mode %v", orig[:5], res, []byte(c[:5]), r.Mode())
			}
			if hammingHeader(c, orig) != 0 {
				t.Fatal("discarded header was modified")
			}
		}
	})
}

// ---------------------------------------------------------------------------

// fuzzReassemblySentinels are the errors a Reassembler may report.
var fuzzReassemblySentinels = []error{
	cells.ErrShortCell, cells.ErrHEC, cells.ErrCRC, cells.ErrLength, cells.ErrOversize,
	cells.ErrTimeout, cells.ErrLostCells, cells.ErrAborted, cells.ErrManagement,
}

func fuzzCheckReassemblyError(t *testing.T, err error) *cells.ReassemblyError {
	t.Helper()
	var re *cells.ReassemblyError
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T) is not a *ReassemblyError", err, err)
	}
	known := false
	for _, s := range fuzzReassemblySentinels {
		if re.Err == s && errors.Is(err, s) {
			known = true
		}
	}
	if !known {
		t.Fatalf("*ReassemblyError wraps %v, not a known sentinel", re.Err)
	}
	if re.Error() == "" {
		t.Fatal("empty error message")
	}
	return re
}

// fuzzReassembleMode bits.
const (
	fuzzNNI     = 1 << 0 // cells in the NNI layout
	fuzzFixHEC  = 1 << 1 // rewrite every header's HEC, so headers explore the circuit logic
	fuzzFixCRC  = 1 << 2 // rewrite the CRC of each end-of-message cell as a naive sender would
	fuzzTimeout = 1 << 3 // run with a reassembly timeout on a manual clock
)

// FuzzReassemble feeds arbitrary bytes, 53 at a time, to a Reassembler with
// a small MaxSDU and MaxVCs. It must never panic; every delivered SDU must
// be exactly what the trailer of the cells that made it says, with a CRC
// that verifies against the reference; every error must be a
// *ReassemblyError wrapping a known sentinel.
func FuzzReassemble(f *testing.F) {
	uni := cells.SAR{VPI: 1, VCI: 100, UU: 7}
	nni := cells.SAR{Format: cells.NNI, VPI: 0x123, VCI: 200}
	one := fuzzSegment(f, uni, []byte("hello"))
	three := fuzzSegment(f, uni, fuzzBytes(120, 1))
	other := fuzzSegment(f, cells.SAR{VPI: 2, VCI: 100, CLP: true}, fuzzBytes(50, 9))
	var interleaved []byte
	for i := range 3 {
		interleaved = append(interleaved, three[i*53:(i+1)*53]...)
		if i < 2 {
			interleaved = append(interleaved, other[i*53:(i+1)*53]...)
		}
	}
	f.Add(uint8(0), uint16(200), uint8(2), one)
	f.Add(uint8(0), uint16(200), uint8(2), three)
	f.Add(uint8(0), uint16(200), uint8(2), interleaved)
	f.Add(uint8(0), uint16(100), uint8(1), interleaved) // too many circuits
	f.Add(uint8(0), uint16(60), uint8(4), three)        // oversize
	f.Add(uint8(fuzzNNI), uint16(300), uint8(3), fuzzSegment(f, nni, fuzzBytes(200, 3)))
	f.Add(uint8(fuzzFixHEC|fuzzFixCRC), uint16(500), uint8(3), append(bytes.Clone(three), one[:30]...))
	f.Add(uint8(fuzzTimeout), uint16(500), uint8(3), append(bytes.Clone(three), three...))
	lost := append(bytes.Clone(three[:53]), three[106:]...)
	f.Add(uint8(0), uint16(500), uint8(0), lost)
	// A PDU of a multi-buffer frame (64 KB less room for the transport's
	// header), whole and without its last 4 KB buffer's cells.
	big := fuzzSegment(f, uni, fuzzBytes(65000, 11))
	f.Add(uint8(0), uint16(65535), uint8(2), big)
	f.Add(uint8(0), uint16(65535), uint8(2), append(bytes.Clone(big[:len(big)-77*cells.CellSize]), one...))

	f.Fuzz(func(t *testing.T, mode uint8, maxSDU uint16, maxVCs uint8, stream []byte) {
		form := cells.UNI
		if mode&fuzzNNI != 0 {
			form = cells.NNI
		}
		cfg := cells.ReassemblerConfig{Format: form, MaxSDU: int(maxSDU % 1024), MaxVCs: int(maxVCs % 5)}
		limit := cfg.MaxSDU
		if limit == 0 {
			limit = cells.MaxSDU
		}
		var clk *clock.Manual
		if mode&fuzzTimeout != 0 {
			clk = clock.NewManual(time.Unix(1000, 0))
			cfg.Timeout, cfg.Clock = 5*time.Millisecond, clk
		}
		r := cells.NewReassembler(cfg)

		// Cut the stream into cells; a short tail is pushed too.
		var in []cells.Cell
		for len(stream) > 0 {
			n := min(len(stream), cells.CellSize)
			in = append(in, cells.Cell(bytes.Clone(stream[:n])))
			stream = stream[n:]
		}
		// Optionally make the headers and CRCs right, as a naive sender
		// would: per circuit, the CRC of everything since its last end of
		// message.
		if mode&(fuzzFixHEC|fuzzFixCRC) != 0 {
			sofar := map[cells.VC][]byte{}
			for _, c := range in {
				if len(c) != cells.CellSize {
					continue
				}
				if mode&fuzzFixHEC != 0 {
					c[4] = refHEC(c[:4])
				}
				if mode&fuzzFixCRC == 0 || refHEC(c[:4]) != c[4] || c.PTI()&cells.PTIManagement != 0 {
					continue
				}
				vc := c.VC(form)
				if c.PTI()&cells.PTIEndOfMessage == 0 {
					sofar[vc] = append(sofar[vc], c.Payload()...)
					continue
				}
				pdu := append(sofar[vc], c.Payload()[:cells.PayloadSize-4]...)
				binary.BigEndian.PutUint32(c[cells.CellSize-4:], refCRC32(pdu))
				delete(sofar, vc)
			}
		}

		// recent keeps, per circuit, the cells Push accepted without an
		// error, newest last: a delivered PDU is made of the last PDU.Cells
		// of them.
		maxCells := cells.CellCount(limit)
		recent := map[cells.VC][]cells.Cell{}
		delivered := 0
		for i, c := range in {
			if clk != nil {
				clk.Advance(time.Duration(i%3) * time.Millisecond)
				if i%4 == 3 {
					for _, err := range r.Expire() {
						if re := fuzzCheckReassemblyError(t, err); re.Err != cells.ErrTimeout {
							t.Fatalf("Expire returned %v", err)
						}
					}
				}
			}
			pdu, ok, err := r.Push(c) // may correct c's header in place
			if err != nil {
				if ok {
					t.Fatalf("Push returned both a PDU and %v", err)
				}
				re := fuzzCheckReassemblyError(t, err)
				if len(c) < cells.CellSize && re.Err != cells.ErrShortCell {
					t.Fatalf("short cell of %d bytes: %v", len(c), err)
				}
				if re.Err == cells.ErrTimeout && clk == nil {
					t.Fatalf("timeout without a timer: %v", err)
				}
				continue
			}
			if len(c) < cells.CellSize {
				t.Fatalf("short cell of %d bytes accepted", len(c))
			}
			if !c.Valid() {
				t.Fatalf("cell with a bad header % x accepted", []byte(c[:5]))
			}
			if c.PTI()&cells.PTIManagement != 0 {
				t.Fatalf("management cell % x accepted", []byte(c[:5]))
			}
			vc := c.VC(form)
			rc := append(recent[vc], c)
			if len(rc) > maxCells+1 {
				rc = rc[len(rc)-maxCells-1:]
			}
			recent[vc] = rc
			if !ok {
				continue
			}

			delivered++
			if pdu.VC != vc {
				t.Fatalf("PDU on %v delivered for a cell on %v", pdu.VC, vc)
			}
			if pdu.Cells < 1 || pdu.Cells > len(rc) || pdu.Cells > maxCells {
				t.Fatalf("PDU of %d cells; %d accepted on %v, at most %d allowed", pdu.Cells, len(rc), vc, maxCells)
			}
			var whole []byte
			clp := false
			for k, pc := range rc[len(rc)-pdu.Cells:] {
				if pc.EndOfMessage() != (k == pdu.Cells-1) {
					t.Fatalf("cell %d of a %d-cell PDU has end of message %v", k, pdu.Cells, pc.EndOfMessage())
				}
				whole = append(whole, pc.Payload()...)
				clp = clp || pc.CLP()
			}
			tr := cells.Trailer(whole[len(whole)-cells.TrailerSize:])
			n := tr.Length()
			if len(pdu.SDU) != n || n < 1 || n > limit {
				t.Fatalf("SDU of %d bytes, trailer length %d, limit %d", len(pdu.SDU), n, limit)
			}
			if !bytes.Equal(pdu.SDU, whole[:n]) {
				t.Fatal("SDU is not the start of the PDU's payloads")
			}
			if got, want := refCRC32(whole[:len(whole)-4]), tr.CRC(); got != want {
				t.Fatalf("delivered PDU has CRC %#08x, trailer says %#08x", got, want)
			}
			if pdu.Cells != cells.CellCount(n) {
				t.Fatalf("PDU of %d cells for length %d", pdu.Cells, n)
			}
			if pdu.UU != tr.UU() || pdu.CPI != tr.CPI() || pdu.CLP != clp {
				t.Fatalf("PDU UU %d CPI %d CLP %v, trailer UU %d CPI %d, CLP %v", pdu.UU, pdu.CPI, pdu.CLP, tr.UU(), tr.CPI(), clp)
			}
			// The reference reassembler agrees with the PDU's cells.
			rr := newRefReassembler(form, limit)
			for k, pc := range rc[len(rc)-pdu.Cells:] {
				d, refOK, refErr := rr.push(pc)
				if refErr != nil || refOK != (k == pdu.Cells-1) || (refOK && !bytes.Equal(d.SDU, pdu.SDU)) {
					t.Fatalf("reference reassembler on the delivered PDU's cells: %v, %v", refOK, refErr)
				}
			}
		}
		st := r.Stats()
		if st.PDUs != uint64(delivered) {
			t.Fatalf("Stats().PDUs = %d, delivered %d", st.PDUs, delivered)
		}
		if vcs := len(r.Pending()); cfg.MaxVCs > 0 && vcs > cfg.MaxVCs {
			t.Fatalf("%d circuits pending, MaxVCs %d", vcs, cfg.MaxVCs)
		}
	})
}

// ---------------------------------------------------------------------------

var fuzzFrameSentinels = []error{cells.ErrFrameTruncated, cells.ErrFrameCount, cells.ErrFrameVersion, cells.ErrFrameType}

func fuzzCheckFrameError(t *testing.T, what string, err error) {
	t.Helper()
	for _, s := range fuzzFrameSentinels {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("%s: error %v wraps none of the frame sentinels", what, err)
}

// FuzzUnpack: Unpack, UnpackPayload, UnpackCell and UnpackPair on arbitrary bytes
// never panic,
// return exactly the announced cells on success and a frame sentinel on
// failure; a frame Unpack accepts is what a Framer would send; and gopacket
// decodes any bytes as Ethernet without panicking, agreeing with Unpack
// about xam frames.
func FuzzUnpack(f *testing.F) {
	mac1 := net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	mac2 := net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
	cs := fuzzSegment(f, cells.SAR{VPI: 3, VCI: 33}, fuzzBytes(100, 5)) // 3 cells
	fr := &cells.Framer{Dst: mac1, Src: mac2}
	frame, err := fr.Append(nil, cs)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(frame, uint16(0))
	f.Add(frame, cells.EtherType)
	one, _ := fr.Append(nil, cs[:53])
	f.Add(one, uint16(0))
	two, _ := fr.Append(nil, cs[:2*53]) // UnpackPair's
	f.Add(two, uint16(0))
	custom, _ := (&cells.Framer{Dst: mac1, Src: mac2, EtherType: 0x88B6}).Append(nil, cs)
	f.Add(custom, uint16(0x88B6))
	f.Add(custom, uint16(0))
	bad := bytes.Clone(frame)
	bad[14] = 2 // version
	f.Add(bad, uint16(0))
	bad = bytes.Clone(frame)
	bad[17] = 4 // count
	f.Add(bad, uint16(0))
	bad = bytes.Clone(frame)
	bad[16], bad[17] = 0, 0
	f.Add(bad, uint16(0))
	f.Add(frame[:len(frame)-1], uint16(0))
	f.Add(frame[:18], uint16(0))
	f.Add(frame[:12], uint16(0))
	f.Add(append(bytes.Clone(frame), 0), uint16(0))
	// A multi-buffer frame (1236 cells, MTU 65535) whole, and ending
	// without its last 4 KB buffer.
	big, err := (&cells.Framer{Dst: mac1, Src: mac2, MTU: 65535}).Append(nil, fuzzSegment(f, cells.SAR{VPI: 3, VCI: 33}, fuzzBytes(1235*cells.PayloadSize-cells.TrailerSize, 13)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(big, uint16(0))
	f.Add(big[:len(big)-4096], uint16(0))

	f.Fuzz(func(t *testing.T, frame []byte, etherType uint16) {
		frame = bytes.Clone(frame) // the fuzzer's bytes must not be kept
		orig := bytes.Clone(frame)
		want := etherType
		if want == 0 {
			want = cells.EtherType
		}

		got, hdr, err := cells.Unpack(frame, etherType)
		// UnpackCell takes exactly the frames of one cell that Unpack
		// takes, and returns the same.
		if c, ch, ok := cells.UnpackCell(frame, etherType); ok != (err == nil && len(got) == cells.CellSize) ||
			ok && (!bytes.Equal(c, got) || !bytes.Equal(ch, hdr)) {
			t.Fatalf("UnpackCell %v (%x, %x), Unpack %v (%d bytes)", ok, c, ch, err, len(got))
		}
		// UnpackPair likewise for the frames of two.
		if c, next, ph, ok := cells.UnpackPair(frame, etherType); ok != (err == nil && len(got) == 2*cells.CellSize) ||
			ok && (!bytes.Equal(append(bytes.Clone(c), next...), got) || !bytes.Equal(ph, hdr)) {
			t.Fatalf("UnpackPair %v (%x, %x, %x), Unpack %v (%d bytes)", ok, c, next, ph, err, len(got))
		}
		if err != nil {
			fuzzCheckFrameError(t, "Unpack", err)
			if got != nil || hdr != nil {
				t.Fatal("Unpack returned cells or a header with an error")
			}
		} else {
			n := hdr.Cells()
			if len(hdr) != cells.FrameHeaderSize || hdr.Version() != cells.FrameVersion || n < 1 {
				t.Fatalf("Unpack accepted header % x", []byte(hdr))
			}
			if len(got) != n*cells.CellSize || len(frame) != cells.FrameLen(n) {
				t.Fatalf("Unpack: %d bytes of cells for %d announced, frame of %d bytes", len(got), n, len(frame))
			}
			if binary.BigEndian.Uint16(frame[12:]) != want {
				t.Fatalf("Unpack accepted EtherType %#04x, want %#04x", binary.BigEndian.Uint16(frame[12:]), want)
			}
			if &got[0] != &frame[cells.EthernetHeaderSize+cells.FrameHeaderSize] || !bytes.Equal(got, orig[18:]) {
				t.Fatal("Unpack's cells are not the frame's tail")
			}
			// A Framer sends the same frame (with the reserved flags zero).
			fr := &cells.Framer{Dst: orig[0:6], Src: orig[6:12], EtherType: etherType, MTU: cells.FrameHeaderSize + n*cells.CellSize}
			again, err := fr.Append(nil, got)
			if err != nil {
				t.Fatalf("Framer.Append of %d unpacked cells: %v", n, err)
			}
			wantFrame := bytes.Clone(orig)
			wantFrame[15] = 0
			if !bytes.Equal(again, wantFrame) {
				t.Fatalf("Framer.Append built\n% x\nfrom the cells of\n% x", again, orig)
			}
		}

		if len(frame) >= cells.EthernetHeaderSize {
			pgot, phdr, perr := cells.UnpackPayload(frame[cells.EthernetHeaderSize:])
			if perr != nil {
				fuzzCheckFrameError(t, "UnpackPayload", perr)
				if err == nil {
					t.Fatalf("Unpack accepted what UnpackPayload refuses: %v", perr)
				}
			} else {
				if len(pgot) != phdr.Cells()*cells.CellSize {
					t.Fatalf("UnpackPayload: %d bytes of cells for %d announced", len(pgot), phdr.Cells())
				}
				if err != nil && !errors.Is(err, cells.ErrFrameType) {
					t.Fatalf("UnpackPayload accepted what Unpack refuses for another reason than the type: %v", err)
				}
			}
		}
		// UnpackPayload on the whole of the bytes, as if they followed an
		// Ethernet header.
		if pgot, phdr, perr := cells.UnpackPayload(frame); perr != nil {
			fuzzCheckFrameError(t, "UnpackPayload", perr)
		} else if len(pgot) != phdr.Cells()*cells.CellSize || len(frame) != cells.FrameHeaderSize+len(pgot) {
			t.Fatalf("UnpackPayload: %d bytes of cells for %d announced", len(pgot), phdr.Cells())
		}

		// gopacket, eagerly and lazily, from Ethernet and from the frame
		// header.
		pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
		_ = pkt.String()
		_, _, defErr := cells.Unpack(frame, 0)
		if len(frame) >= cells.EthernetHeaderSize && binary.BigEndian.Uint16(frame[12:]) == cells.EtherType {
			fl, _ := pkt.Layer(cells.LayerTypeFrame).(*cells.FrameLayer)
			if defErr != nil {
				// gopacket calls no further decoder for an empty payload,
				// so a bare Ethernet header decodes without an error.
				if fl != nil || (pkt.ErrorLayer() == nil && len(frame) > cells.EthernetHeaderSize) {
					t.Fatalf("gopacket decoded a frame Unpack refuses (%v) without an error", defErr)
				}
			} else {
				if fl == nil || pkt.ErrorLayer() != nil {
					t.Fatalf("gopacket did not decode a frame Unpack accepts: %v", pkt.ErrorLayer())
				}
				var cl []*cells.CellLayer
				for _, l := range pkt.Layers() {
					if c, ok := l.(*cells.CellLayer); ok {
						cl = append(cl, c)
					}
				}
				if fl.Count != len(cl) || fl.Version != cells.FrameVersion || fl.Flags != frame[15] {
					t.Fatalf("frame layer %+v with %d cell layers", fl, len(cl))
				}
				for i, c := range cl {
					raw := cells.Cell(frame[18+i*53 : 18+(i+1)*53])
					if !bytes.Equal(c.Contents, raw) || c.Fields != raw.Fields(cells.UNI) || c.HECValid != raw.Valid() ||
						c.HEC != raw.HEC() || !bytes.Equal(c.Data, raw.Payload()) {
						t.Fatalf("cell layer %d does not match the cell % x", i, []byte(raw[:5]))
					}
				}
			}
		}
		lazy := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.DecodeOptions{Lazy: true, NoCopy: true})
		for range lazy.Layers() {
		}
		_ = lazy.ErrorLayer()
		for _, lt := range []gopacket.LayerType{cells.LayerTypeFrame, cells.LayerTypeCell} {
			p := gopacket.NewPacket(frame, lt, gopacket.Default)
			for _, l := range p.Layers() {
				_ = l.LayerContents()
				_ = l.LayerPayload()
			}
		}
		var (
			eth layers.Ethernet
			fl  cells.FrameLayer
			cl  cells.CellLayer
		)
		parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &fl, &cl)
		parser.IgnoreUnsupported = true
		var decoded []gopacket.LayerType
		_ = parser.DecodeLayers(frame, &decoded)

		if !bytes.Equal(frame, orig) {
			t.Fatal("decoding modified the frame")
		}
	})
}

// ---------------------------------------------------------------------------

// FuzzSSAM: Check on arbitrary payloads never panics and agrees with the
// reference CRC-10; EncodeSSAM of any flow, handler and data (up to 40
// bytes) makes a cell that passes Check and gives back the same fields and
// data; and every single flipped bit of such a cell is detected.
func FuzzSSAM(f *testing.F) {
	good := make([]byte, cells.PayloadSize)
	for _, n := range []int{0, 1, 10, 39, 40} {
		if err := cells.EncodeSSAM(good, uint16(n*257), uint32(n)*0x01020304, fuzzBytes(n, byte(n))); err != nil {
			f.Fatal(err)
		}
		f.Add(bytes.Clone(good), uint16(n), uint32(n), fuzzBytes(n, 3))
	}
	badCRC := bytes.Clone(good)
	badCRC[7] ^= 1
	f.Add(badCRC, uint16(0xFFFF), uint32(0xFFFFFFFF), []byte{})
	// A length field of 41 with a correct CRC.
	long := make([]byte, cells.PayloadSize)
	binary.BigEndian.PutUint16(long[6:], 41<<10)
	binary.BigEndian.PutUint16(long[6:], 41<<10|refSSAMCRC(long))
	f.Add(long, uint16(1), uint32(1), fuzzBytes(41, 0))
	f.Add(good[:47], uint16(2), uint32(2), []byte("x"))
	f.Add([]byte{}, uint16(0), uint32(0), []byte(nil))

	f.Fuzz(func(t *testing.T, payload []byte, flow uint16, handler uint32, data []byte) {
		s := cells.SSAMCell(payload)
		err := s.Check()
		if len(payload) != cells.PayloadSize {
			if !errors.Is(err, cells.ErrShortCell) {
				t.Fatalf("Check of %d bytes = %v, want ErrShortCell", len(payload), err)
			}
		} else {
			_, _, _ = s.FlowControl(), s.Handler(), s.CRC()
			if len(s.Data()) != min(s.Len(), cells.SSAMDataSize) {
				t.Fatalf("Data() has %d bytes for length field %d", len(s.Data()), s.Len())
			}
			refOK := s.CRC() == refSSAMCRC(payload) && s.Len() <= cells.SSAMDataSize
			if (err == nil) != refOK {
				t.Fatalf("Check(% x) = %v; reference CRC %#03x, carried %#03x, length %d", payload, err, refSSAMCRC(payload), s.CRC(), s.Len())
			}
			if err != nil && !errors.Is(err, cells.ErrSSAM) {
				t.Fatalf("Check = %v, want ErrSSAM", err)
			}
		}

		// Encode into a buffer full of the fuzzer's garbage.
		p := make([]byte, cells.PayloadSize)
		copy(p, payload)
		err = cells.EncodeSSAM(p, flow, handler, data)
		if len(data) > cells.SSAMDataSize {
			if !errors.Is(err, cells.ErrSSAM) {
				t.Fatalf("EncodeSSAM of %d data bytes = %v, want ErrSSAM", len(data), err)
			}
			return
		}
		if err != nil {
			t.Fatalf("EncodeSSAM(%#x, %#x, %d bytes): %v", flow, handler, len(data), err)
		}
		enc := cells.SSAMCell(p)
		if err := enc.Check(); err != nil {
			t.Fatalf("fresh SSAM cell fails Check: %v", err)
		}
		if enc.FlowControl() != flow || enc.Handler() != handler || enc.Len() != len(data) || !bytes.Equal(enc.Data(), data) {
			t.Fatalf("SSAM cell gives back flow %#x handler %#x data % x, want %#x %#x % x",
				enc.FlowControl(), enc.Handler(), enc.Data(), flow, handler, data)
		}
		if enc.CRC() != refSSAMCRC(p) {
			t.Fatalf("SSAM CRC %#03x, reference %#03x", enc.CRC(), refSSAMCRC(p))
		}
		if !bytes.Equal(p[cells.SSAMHeaderSize+len(data):], make([]byte, cells.SSAMDataSize-len(data))) {
			t.Fatal("unused SSAM data bytes are not zero")
		}
		for pos := range cells.PayloadSize * 8 {
			q := bytes.Clone(p)
			refFlip(q, pos)
			if err := cells.SSAMCell(q).Check(); !errors.Is(err, cells.ErrSSAM) {
				t.Fatalf("bit %d flipped in an SSAM cell: Check = %v, want ErrSSAM", pos, err)
			}
		}
	})
}
