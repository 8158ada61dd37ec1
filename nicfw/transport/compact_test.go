package transport

import (
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
)

// frameCells returns the VCIs of the cells of frame f.
func frameCells(tb testing.TB, f []byte) []uint16 {
	tb.Helper()
	cs, _, err := cells.Unpack(f, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var vcis []uint16
	for o := 0; o < len(cs); o += cells.CellSize {
		vcis = append(vcis, cells.Cell(cs[o:]).VCI())
	}
	return vcis
}

// Messages of up to CompactPayload bytes travel as one compact cell each,
// packed into one frame when sent in one pass; the answers' owed
// acknowledgements ride in front of the compact cells going back (an ACK
// PDU in the same frame), so no ACK frame of its own is needed; longer
// messages stay AAL5 PDUs; NoCompact sends every message as a PDU.
func TestCompactCells(t *testing.T) {
	for _, off := range []bool{false, true} {
		p := newPair(t, memlink.Options{}, Config{Channels: 16, NoCompact: off})
		send := func(from *end, to HostID, first uint32, n, maxLen int) {
			t.Helper()
			from.tr.BeginPass()
			for i := range uint32(n) {
				if err := from.tr.Send(to, payload(first+i, maxLen), 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := from.tr.EndPass(); err != nil {
				t.Fatal(err)
			}
		}
		// take takes the frames waiting at l, hands them to tr, and
		// returns their cells' VCIs.
		take := func(l *memlink.Link, tr *Transport) [][]uint16 {
			t.Helper()
			rx := make([][]byte, 64)
			n, err := l.Recv(rx)
			if err != nil {
				t.Fatal(err)
			}
			var vcis [][]uint16
			for _, f := range rx[:n] {
				vcis = append(vcis, frameCells(t, f))
				tr.BeginPass()
				tr.receive(f)
				if err := tr.flush(); err != nil {
					t.Fatal(err)
				}
				if err := tr.EndPass(); err != nil {
					t.Fatal(err)
				}
			}
			return vcis
		}
		const n = 10
		send(p.a, hostB, 0, n, CompactPayload)
		got := take(p.b.link, p.b.tr)
		if off {
			if p.a.tr.Stats().Compact != 0 || len(got) != 1 || got[0][0] != DefaultVCI {
				t.Errorf("NoCompact: %d compact, frames %v", p.a.tr.Stats().Compact, got)
			}
			continue
		}
		if len(got) != 1 || len(got[0]) != n || got[0][0] != DefaultVCI+1 || p.a.tr.Stats().Compact != n {
			t.Fatalf("%d short messages in one pass: frames %v, stats %+v", n, got, p.a.tr.Stats())
		}
		// B answers with short messages: the acknowledgements it owes go
		// in front of the first, as an ACK PDU on the PDU circuit.
		send(p.b, hostA, 100, 2, CompactPayload)
		got = take(p.a.link, p.a.tr)
		if len(got) != 1 || got[0][0] != DefaultVCI || got[0][len(got[0])-1] != DefaultVCI+1 {
			t.Fatalf("the answers: frames %v", got)
		}
		if sa, sb := p.a.tr.Stats(), p.b.tr.Stats(); sa.Acked != n || sb.AckFrames != 0 || sb.AcksPiggybacked != n {
			t.Errorf("after the answers: A %+v, B %+v", sa, sb)
		}
		// A longer message (message n: 42 bytes) is a PDU.
		send(p.a, hostB, n, 1, CompactPayload+20)
		if pl := payload(n, CompactPayload+20); len(pl) <= CompactPayload {
			t.Fatalf("message %d has %d bytes: it fits a compact cell", n, len(pl))
		}
		if got := take(p.b.link, p.b.tr); len(got) != 1 || got[0][len(got[0])-1] != DefaultVCI {
			t.Errorf("a longer message: frames %v", got)
		}
		for range 20 {
			p.poll(t)
			p.clk.Advance(DefaultRetransmitAfter)
		}
		checkExactlyOnce(t, p.b, hostA, n+1)
	}
}
