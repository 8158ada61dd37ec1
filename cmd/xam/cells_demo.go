package main

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"text/tabwriter"
	"time"

	"github.com/xam-project/xam/cells"
)

// runCellsDemo exercises the cell and AAL5 layer end to end in memory: a
// message is segmented, framed, unframed and reassembled; header and
// payload damage, cell loss and a merged PDU are each caught by the
// mechanism meant to catch them; and the layer's throughput is measured
// next to a memory copy and hash/crc32.
func runCellsDemo(e *env, args []string) error {
	fs := newFlags(e, "cells demo", "cells demo [--duration D]")
	dur := fs.Duration("duration", 200*time.Millisecond, "time spent on each throughput measurement")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	w := e.stdout
	fmt.Fprintln(w, "xam demo: the ATM cell / AAL5 layer, end to end in memory")
	fmt.Fprintln(w)

	vc := cells.VC{VPI: 1, VCI: 42}
	seg, err := cells.NewSegmenter(cells.SAR{VPI: vc.VPI, VCI: vc.VCI})
	if err != nil {
		return err
	}
	msg := []byte("Active Messages: each message names the handler that runs when it arrives. " +
		"SSAM sent them as single ATM cells; xam carries the cells in Ethernet frames.")
	cs, err := seg.Append(nil, msg)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "1. Segmentation: a %d-byte SDU on VC %v becomes a %d-byte CPCS-PDU in %d cells.\n",
		len(msg), vc, cells.PDULen(len(msg)), len(cs)/cells.CellSize)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "   cell\tVPI\tVCI\tPTI\tCLP\tHEC\tfirst payload bytes")
	for i := 0; i < len(cs); i += cells.CellSize {
		c := cells.Cell(cs[i : i+cells.CellSize])
		fmt.Fprintf(tw, "   %d\t%d\t%d\t%03b\t%v\t%#02x\t% x\n", i/cells.CellSize, c.VPI(cells.UNI), c.VCI(),
			c.PTI(), c.CLP(), c.HEC(), c.Payload()[:8])
	}
	tw.Flush()

	fr := cells.Framer{Dst: []byte{2, 0, 0, 0, 0, 2}, Src: []byte{2, 0, 0, 0, 0, 1}}
	var frames [][]byte
	if err := fr.Pack(nil, cs, func(f []byte) error {
		frames = append(frames, bytes.Clone(f))
		return nil
	}); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n2. Framing: %d cells fit a 1500-byte MTU; the cells travel in %d frame(s) of EtherType %#04x.\n",
		fr.CellsPerFrame(), len(frames), cells.EtherType)

	r := cells.NewReassembler(cells.ReassemblerConfig{})
	var got []byte
	for _, f := range frames {
		body, _, err := cells.Unpack(f, 0)
		if err != nil {
			return err
		}
		for o := 0; o < len(body); o += cells.CellSize {
			pdu, ok, err := r.Push(cells.Cell(body[o : o+cells.CellSize]))
			if err != nil {
				return err
			}
			if ok {
				got = bytes.Clone(pdu.SDU)
			}
		}
	}
	if !bytes.Equal(got, msg) {
		return errors.New("reassembly did not return the message")
	}
	fmt.Fprintf(w, "3. Reassembly: unpacked, checked (HEC, length, CRC-32) and returned the %d bytes intact.\n\n", len(got))

	fmt.Fprintln(w, "4. Damage, and what catches it:")
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "   damage\toutcome")
	for _, d := range damages {
		fmt.Fprintf(tw, "   %s\t%s\n", d.name, tryDamage(seg, msg, d.mutate))
	}
	tw.Flush()

	fmt.Fprintf(w, "\n5. Throughput on this machine (%d-byte SDUs, %v each, one core):\n", cells.MaxSDU, *dur)
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "   operation\tGB/s\tratio to memmove\t")
	rates, err := measureRates(*dur)
	if err != nil {
		return err
	}
	for _, m := range rates {
		fmt.Fprintf(tw, "   %s\t%.2f\t%.2f\t\n", m.name, m.gbps, m.gbps/rates[0].gbps)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nNext: `xam cells segment|reassemble` work on your own data; `xam demo` runs the network.")
	return nil
}

var damages = []struct {
	name   string
	mutate func(cs []byte) []byte
}{
	{"one header bit flipped", func(cs []byte) []byte { cs[1] ^= 0x08; return cs }},
	{"two header bits flipped", func(cs []byte) []byte { cs[1] ^= 0x08; cs[2] ^= 0x01; return cs }},
	{"one payload bit flipped", func(cs []byte) []byte { cs[20] ^= 0x10; return cs }},
	{"a middle cell lost", func(cs []byte) []byte { return append(cs[:cells.CellSize], cs[2*cells.CellSize:]...) }},
	{"the last cell lost, next PDU runs on", func(cs []byte) []byte {
		return append(cs[:len(cs)-cells.CellSize:len(cs)-cells.CellSize], cs...)
	}},
}

// tryDamage segments msg, damages the cells, reassembles, and describes the
// outcome.
func tryDamage(seg *cells.Segmenter, msg []byte, mutate func([]byte) []byte) string {
	cs, _ := seg.Append(nil, msg)
	cs = mutate(cs)
	r := cells.NewReassembler(cells.ReassemblerConfig{})
	var outcomes []string
	delivered := 0
	for o := 0; o+cells.CellSize <= len(cs); o += cells.CellSize {
		pdu, ok, err := r.Push(cells.Cell(cs[o : o+cells.CellSize]))
		if err != nil {
			var re *cells.ReassemblyError
			if errors.As(err, &re) {
				outcomes = append(outcomes, "dropped: "+re.Err.Error())
			} else {
				outcomes = append(outcomes, "dropped: "+err.Error())
			}
		}
		if ok {
			delivered++
			if !bytes.Equal(pdu.SDU, msg) {
				outcomes = append(outcomes, "DELIVERED WRONG DATA")
			}
		}
	}
	s := r.Stats()
	if s.HEC.Corrected > 0 {
		outcomes = append([]string{fmt.Sprintf("HEC corrected %d header", s.HEC.Corrected)}, outcomes...)
	}
	if delivered > 0 {
		outcomes = append(outcomes, fmt.Sprintf("%d PDU delivered intact", delivered))
	}
	out := ""
	for i, o := range outcomes {
		if i > 0 {
			out += "; "
		}
		out += o
	}
	return out
}

type rate struct {
	name string
	gbps float64
}

// measureRates times each operation on the largest SDU for about d.
func measureRates(d time.Duration) ([]rate, error) {
	sdu := make([]byte, cells.MaxSDU)
	for i := range sdu {
		sdu[i] = byte(i * 7)
	}
	seg, err := cells.NewSegmenter(cells.SAR{VPI: 1, VCI: 42})
	if err != nil {
		return nil, err
	}
	cs, err := seg.Append(nil, sdu)
	if err != nil {
		return nil, err
	}
	dst := make([]byte, len(sdu))
	var opErr error
	check := func(err error) {
		if err != nil && opErr == nil {
			opErr = err
		}
	}
	r := cells.NewReassembler(cells.ReassemblerConfig{})
	ops := []struct {
		name string
		fn   func()
	}{
		{"memmove (copy)", func() { copy(dst, sdu) }},
		{"hash/crc32 IEEE", func() { crc32.ChecksumIEEE(sdu) }},
		{"AAL5 CRC-32", func() { cells.CRC32(sdu) }},
		{"segment", func() {
			_, err := seg.Put(cs, sdu)
			check(err)
		}},
		{"reassemble", func() {
			for o := 0; o < len(cs); o += cells.CellSize {
				_, _, err := r.Push(cells.Cell(cs[o : o+cells.CellSize]))
				check(err)
			}
		}},
	}
	var out []rate
	for _, op := range ops {
		n := 0
		start := time.Now()
		for time.Since(start) < d {
			for range 16 {
				op.fn()
			}
			n += 16
		}
		out = append(out, rate{op.name, float64(n*len(sdu)) / time.Since(start).Seconds() / 1e9})
	}
	return out, opErr
}
