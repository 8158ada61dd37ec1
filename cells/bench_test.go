package cells

import (
	"fmt"
	"hash/crc32"
	"testing"
)

// The 64 KiB benchmarks use the largest SDU AAL5 carries, 65535 bytes (64
// KiB less one), whose 1366 cells sit contiguously as they do in frames.
// hash/crc32's IEEE CRC (hardware-assisted) and a plain copy run on the
// same input for comparison.

func benchInput(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*131 + i>>8)
	}
	return b
}

func BenchmarkCRC32AAL5(b *testing.B) {
	p := benchInput(64 << 10)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		CRC32(p)
	}
}

func BenchmarkCRC32IEEE(b *testing.B) {
	p := benchInput(64 << 10)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		crc32.ChecksumIEEE(p)
	}
}

func BenchmarkCopy64K(b *testing.B) {
	p := benchInput(MaxSDU)
	dst := make([]byte, len(p))
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		copy(dst, p)
	}
}

func BenchmarkSegment64K(b *testing.B) {
	sdu := benchInput(MaxSDU)
	g, err := NewSegmenter(SAR{VPI: 1, VCI: 42})
	if err != nil {
		b.Fatal(err)
	}
	out := make([]byte, CellCount(len(sdu))*CellSize)
	b.SetBytes(int64(len(sdu)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := g.Put(out, sdu); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*MaxPDUCells), "ns/cell")
}

func BenchmarkReassemble64K(b *testing.B) {
	sdu := benchInput(MaxSDU)
	cs, err := Segment(SAR{VPI: 1, VCI: 42}, sdu)
	if err != nil {
		b.Fatal(err)
	}
	r := NewReassembler(ReassemblerConfig{})
	b.SetBytes(int64(len(sdu)))
	b.ReportAllocs()
	for b.Loop() {
		for o := 0; o < len(cs); o += CellSize {
			_, ok, err := r.Push(Cell(cs[o : o+CellSize]))
			if err != nil {
				b.Fatal(err)
			}
			if ok != (o == len(cs)-CellSize) {
				b.Fatal("PDU not completed at its last cell")
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*MaxPDUCells), "ns/cell")
}

// BenchmarkReassemble64KBatch feeds the cells a frame at a time (28 cells,
// as at MTU 1500) through PushCells.
func BenchmarkReassemble64KBatch(b *testing.B) {
	sdu := benchInput(MaxSDU)
	cs, err := Segment(SAR{VPI: 1, VCI: 42}, sdu)
	if err != nil {
		b.Fatal(err)
	}
	r := NewReassembler(ReassemblerConfig{})
	per := CellsPerFrame(DefaultMTU) * CellSize
	pdus := 0
	deliver := func(p PDU, err error) {
		if err != nil {
			b.Fatal(err)
		}
		pdus++
	}
	b.SetBytes(int64(len(sdu)))
	b.ReportAllocs()
	for b.Loop() {
		for o := 0; o < len(cs); o += per {
			r.PushCells(cs[o:min(o+per, len(cs))], deliver)
		}
	}
	if pdus != b.N {
		b.Fatalf("%d PDUs delivered in %d rounds", pdus, b.N)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*MaxPDUCells), "ns/cell")
}

// BenchmarkSingleCell is one SSAM-sized message through segmentation and
// reassembly: the per-message overhead that matters for latency.
func BenchmarkSingleCell(b *testing.B) {
	g, _ := NewSegmenter(SAR{VPI: 1, VCI: 42})
	r := NewReassembler(ReassemblerConfig{})
	sdu := benchInput(SSAMDataSize)
	cell := make([]byte, CellSize)
	b.ReportAllocs()
	for b.Loop() {
		g.Put(cell, sdu)
		if _, ok, err := r.Push(Cell(cell)); !ok || err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSSAMEncodeCheck(b *testing.B) {
	p := make([]byte, PayloadSize)
	data := benchInput(SSAMDataSize)
	b.ReportAllocs()
	for b.Loop() {
		EncodeSSAM(p, 1, 2, data)
		if err := SSAMCell(p).Check(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkUnpack(b *testing.B) {
	cs, _ := Segment(SAR{VCI: 1}, benchInput(1300))
	frame, err := (&Framer{Dst: macB, Src: macA}).Append(nil, cs)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Unpack(frame, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCRC10 is the CRC-10 of a compact cell's 46 bytes (the
// transport's) and of an SSAM cell's 48, as CRC10 computes it (by
// carry-less multiplication where the processor has it) and by the tables
// alone, side by side. In a loop of CRCs alone the tables stay in the
// first-level cache, which in the message path they mostly are not.
func BenchmarkCRC10(b *testing.B) {
	for _, n := range []int{46, 48} {
		for _, tables := range []bool{false, true} {
			name := fmt.Sprint(n)
			if tables {
				name += ",tables"
			}
			b.Run(name, func(b *testing.B) {
				if !tables && !useCRC10CLMUL {
					b.Skip("no carry-less multiplication on this processor")
				}
				defer func(was bool) { useCRC10CLMUL = was }(useCRC10CLMUL)
				useCRC10CLMUL = !tables
				p := make([]byte, n)
				for i := range p {
					p[i] = byte(i * 37)
				}
				b.SetBytes(int64(n))
				var sink uint16
				for b.Loop() {
					sink ^= CRC10(p)
				}
				_ = sink
			})
		}
	}
}
