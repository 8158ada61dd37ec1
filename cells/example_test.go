package cells_test

import (
	"fmt"

	"github.com/xam-project/xam/cells"
)

// Segment a message on a circuit and reassemble it.
func Example() {
	seg, err := cells.NewSegmenter(cells.SAR{VPI: 1, VCI: 42})
	if err != nil {
		panic(err)
	}
	cs, err := seg.Append(nil, []byte("hello, Active Messages"))
	if err != nil {
		panic(err)
	}
	r := cells.NewReassembler(cells.ReassemblerConfig{})
	for o := 0; o < len(cs); o += cells.CellSize {
		pdu, ok, err := r.Push(cells.Cell(cs[o : o+cells.CellSize]))
		if err != nil {
			fmt.Println("dropped:", err)
		}
		if ok {
			fmt.Printf("VC %v: %q in %d cell(s)\n", pdu.VC, pdu.SDU, pdu.Cells)
		}
	}
	// Output: VC 1/42: "hello, Active Messages" in 1 cell(s)
}

// A receiver corrects a single-bit header error and then, in detection
// mode, discards the next errored header.
func ExampleHECReceiver() {
	c := cells.Cell(make([]byte, cells.CellSize))
	c.Encode(cells.UNI, cells.Fields{VPI: 1, VCI: 42})
	var rx cells.HECReceiver
	c[2] ^= 0x04 // one bit
	fmt.Println(rx.Check(c), rx.Mode(), c.VCI())
	c[2] ^= 0x04
	fmt.Println(rx.Check(c), rx.Mode())
	// Output:
	// corrected detection 42
	// discarded detection
}

// Pack cells into Ethernet frames and take them out again.
func ExampleFramer() {
	cs, _ := cells.Segment(cells.SAR{VCI: 7}, make([]byte, 2000)) // 42 cells
	f := cells.Framer{Dst: []byte{2, 0, 0, 0, 0, 2}, Src: []byte{2, 0, 0, 0, 0, 1}}
	f.Pack(nil, cs, func(frame []byte) error {
		body, hdr, err := cells.Unpack(frame, 0)
		fmt.Println(len(frame), hdr.Cells(), len(body), err)
		return nil
	})
	// Output:
	// 1502 28 1484 <nil>
	// 760 14 742 <nil>
}

// An SSAM single-cell message: 8 header bytes and up to 40 data bytes.
func ExampleEncodeSSAM() {
	p := make([]byte, cells.PayloadSize)
	cells.EncodeSSAM(p, 0x0102, 7, []byte("remote store"))
	s := cells.SSAMCell(p)
	fmt.Println(s.Check(), s.Handler(), string(s.Data()))
	// Output: <nil> 7 remote store
}
