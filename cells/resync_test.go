package cells

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// TestReassemblyResync: with Resync, a PDU preceded on its circuit by cells
// that are not its own (the first cells of a PDU that never ended, random
// cells, a whole PDU's worth of them and more) is still delivered, intact;
// without, it is lost with ErrLength or ErrOversize, as I.363.5 says. A
// tail that is not a good PDU still fails.
func TestReassemblyResync(t *testing.T) {
	vc := SAR{VCI: 33}
	real := bytes.Repeat([]byte("real PDU "), 30) // 270 bytes: 6 cells
	cs := mustSegment(t, vc, real)
	rng := rand.New(rand.NewPCG(1, 2))
	junk := func(n int) []byte { // n cells on the circuit, none ending a PDU
		var out []byte
		for range n {
			c := Cell(make([]byte, CellSize))
			for i := range c {
				c[i] = byte(rng.Uint32())
			}
			c.Encode(UNI, Fields{VCI: vc.VCI})
			out = append(out, c...)
		}
		return out
	}
	partial := mustSegment(t, vc, make([]byte, 500))[:3*CellSize]
	maxSDU := 400 // 9 cells at most
	tests := []struct {
		name    string
		before  []byte
		without error
	}{
		{"the first cells of a PDU that never ended", partial, ErrLength},
		{"random cells", junk(2), ErrLength},
		{"more cells than a PDU may have", junk(25), ErrOversize},
		{"exactly as many as a PDU may have", junk(9), ErrOversize},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := append(bytes.Clone(tc.before), cs...)
			off := NewReassembler(ReassemblerConfig{MaxSDU: maxSDU})
			if sdus, errs := pushAll(off, in); len(sdus) != 0 || len(errs) == 0 || !errors.Is(errs[len(errs)-1], tc.without) {
				t.Errorf("without Resync: %d SDUs, errors %v; want the PDU lost with %v", len(sdus), errs, tc.without)
			}
			for _, cells := range []bool{false, true} {
				r := NewReassembler(ReassemblerConfig{MaxSDU: maxSDU, Resync: true})
				var sdus [][]byte
				var errs []error
				if cells { // PushCells takes the same path
					r.PushCells(in, func(p PDU, err error) {
						if err != nil {
							errs = append(errs, err)
						} else {
							sdus = append(sdus, bytes.Clone(p.SDU))
						}
					})
				} else {
					sdus, errs = pushAll(r, in)
				}
				if len(errs) != 0 || len(sdus) != 1 || !bytes.Equal(sdus[0], real) {
					t.Fatalf("with Resync (PushCells %v): SDUs %q, errors %v; want the real PDU", cells, sdus, errs)
				}
				s := r.Stats()
				if s.Resynced != 1 || s.PDUs != 1 || s.Length != 0 || s.Oversize != 0 {
					t.Errorf("stats %+v", s)
				}
				if n := len(tc.before) / CellSize; n+6 > 9 && s.Discarded != uint64(n+6-9) {
					t.Errorf("%d cells slid out, want %d: %+v", s.Discarded, n+6-9, s)
				}
				// The circuit goes on as usual.
				if sdus, errs := pushAll(r, mustSegment(t, vc, []byte("next"))); len(errs) != 0 || len(sdus) != 1 || string(sdus[0]) != "next" {
					t.Errorf("next PDU: %q %v", sdus, errs)
				}
			}
		})
	}

	// A tail that is not a good PDU fails as before: the real PDU with a
	// cell lost in its middle, after junk, is not made up from the junk.
	r := NewReassembler(ReassemblerConfig{Resync: true})
	in := append(junk(3), cs[:2*CellSize]...)
	in = append(in, cs[3*CellSize:]...)
	if sdus, errs := pushAll(r, in); len(sdus) != 0 || len(errs) != 1 || !errors.Is(errs[0], ErrLength) {
		t.Errorf("junk then a PDU missing a cell: SDUs %q, errors %v; want ErrLength", sdus, errs)
	}
	// And a PDU that ran into the next one (its end lost) gives the next.
	r = NewReassembler(ReassemblerConfig{Resync: true})
	in = append(bytes.Clone(cs[:5*CellSize]), mustSegment(t, vc, []byte("second"))...)
	if sdus, errs := pushAll(r, in); len(errs) != 0 || len(sdus) != 1 || string(sdus[0]) != "second" {
		t.Errorf("a PDU whose end was lost, then another: SDUs %q, errors %v; want the second", sdus, errs)
	}
}
