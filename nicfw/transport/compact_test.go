package transport

import (
	"bytes"
	"slices"
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
// acknowledgements ride in front of the compact cells going back (a
// compact ACK cell in the same frame, or an ACK PDU when more are owed
// than one carries), so no ACK frame of its own is needed; longer
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
		// B answers with short messages: the 10 acknowledgements it owes
		// go in front of the first, in a compact ACK cell.
		send(p.b, hostA, 100, 2, CompactPayload)
		got = take(p.a.link, p.a.tr)
		if len(got) != 1 || len(got[0]) != 3 || got[0][0] != DefaultVCI+1 || got[0][2] != DefaultVCI+1 {
			t.Fatalf("the answers: frames %v", got)
		}
		if sa, sb := p.a.tr.Stats(), p.b.tr.Stats(); sa.Acked != n || sb.AckFrames != 0 || sb.AcksPiggybacked != n {
			t.Errorf("after the answers: A %+v, B %+v", sa, sb)
		}
		// 16 owed (more than a compact ACK cell carries): an ACK PDU on
		// the PDU circuit goes in front.
		const m = 16
		send(p.a, hostB, n, m, CompactPayload)
		take(p.b.link, p.b.tr)
		send(p.b, hostA, 102, 1, CompactPayload)
		got = take(p.a.link, p.a.tr)
		if len(got) != 1 || got[0][0] != DefaultVCI || got[0][len(got[0])-1] != DefaultVCI+1 {
			t.Fatalf("the answer to %d: frames %v", m, got)
		}
		if sa, sb := p.a.tr.Stats(), p.b.tr.Stats(); sa.Acked != n+m || sb.AckFrames != 0 || sb.AcksPiggybacked != n+m {
			t.Errorf("after the answer to %d: A %+v, B %+v", m, sa, sb)
		}
		// A longer message (message n+m: 62 bytes) is a compact cell and
		// its continuation; one longer than CompactMax (message n+m+1:
		// 79 bytes) a PDU.
		send(p.a, hostB, n+m, 1, CompactPayload+40)
		if pl := payload(n+m, CompactPayload+40); len(pl) <= CompactPayload || len(pl) > CompactMax {
			t.Fatalf("message %d has %d bytes: not a compact message of two cells", n+m, len(pl))
		}
		if got := take(p.b.link, p.b.tr); len(got) != 1 || !slices.Equal(got[0], []uint16{DefaultVCI + 1, DefaultVCI + 1}) {
			t.Errorf("a message of two compact cells: frames %v", got)
		}
		send(p.a, hostB, n+m+1, 1, 101)
		if pl := payload(n+m+1, 101); len(pl) <= CompactMax {
			t.Fatalf("message %d has %d bytes: it fits the compact form", n+m+1, len(pl))
		}
		if got := take(p.b.link, p.b.tr); len(got) != 1 || got[0][len(got[0])-1] != DefaultVCI {
			t.Errorf("a longer message: frames %v", got)
		}
		for range 20 {
			p.poll(t)
			p.clk.Advance(DefaultRetransmitAfter)
		}
		checkExactlyOnce(t, p.b, hostA, n+m+2)
	}
}

// compactPDU decodes compact cell c (DATA or ACK), with its continuation
// cell if it has one (more), into the PDU it stands for: its header, then
// its acknowledgement entries or its payload.
func compactPDU(tb testing.TB, c cells.Cell, more ...cells.Cell) tpdu {
	tb.Helper()
	h := make(tpdu, headerLen, headerLen+CompactMax)
	if c.Payload()[0] == typeCompactAck {
		acks := make([]byte, compactAckEntries*ackEntryLen)
		n, ok := decodeCompactAck(c, 0, MaxChannels, h.h(), acks)
		if !ok {
			tb.Fatalf("bad compact ACK cell % x", []byte(c))
		}
		return append(h, acks[:n*ackEntryLen]...)
	}
	var body []byte
	var n int
	ok := false
	if c.Payload()[0] == typeCompactAcked {
		ack := make([]byte, ackEntryLen)
		body, n, ok = decodeCompactAcked(c, 0, MaxChannels, h.h(), ack)
		h = append(h, ack...)
	} else {
		body, n, ok = decodeCompact(c, 0, MaxChannels, h.h())
	}
	if !ok {
		tb.Fatalf("bad compact cell % x", []byte(c))
	}
	body = slices.Clip(body)
	if n > CompactPayload {
		if len(more) == 0 {
			tb.Fatalf("a compact cell of %d bytes without its continuation", n)
		}
		rest, ok := decodeCompactMore(more[0], [3]byte(h.h()[offChan:offSeq+2]), n)
		if !ok {
			tb.Fatalf("bad continuation cell % x", []byte(more[0]))
		}
		body = append(body, rest...)
	}
	return append(h, body...)
}

// A compact ACK cell is checked whole before any of it counts: a bad
// CRC, an entry naming a channel the transport does not have, or more
// entries than fit are bad frames, and acknowledge nothing (good ones
// acknowledge in TestCompactCells).
func TestCompactAckChecked(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 2})
	p.a.tr.BeginPass()
	for i := range uint32(2) {
		if err := p.a.tr.Send(hostB, payload(i, CompactPayload), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.a.tr.EndPass(); err != nil {
		t.Fatal(err)
	}
	rx := make([][]byte, 8)
	if _, err := p.b.link.Recv(rx); err != nil { // B never sees them
		t.Fatal(err)
	}
	inject := func(c []byte) { t.Helper(); injectCell(t, p, c) }
	bad := compactAckCell(0, 0, 1, 1)
	bad[cells.HeaderSize+20] ^= 4
	inject(bad)
	inject(compactAckCell(0, 0, 1, 2))  // its entry names channel 2
	inject(compactAckCell(0, 0, 11, 0)) // 11 entries
	if st := p.a.tr.Stats(); st.BadFrames != 3 || st.Acked != 0 || p.a.tr.Unacked(hostB) != 2 {
		t.Fatalf("after 3 bad compact ACK cells: %+v, %d unacknowledged", st, p.a.tr.Unacked(hostB))
	}
}

// cellType returns the type byte of compact cell c.
func cellType(c []byte) uint8 { return cells.Cell(c).Payload()[0] }

// A short message sent while exactly one acknowledgement is owed to its
// destination carries it in its own cell (typeCompactAcked): in
// request/reply traffic every frame after the first is one cell, and no
// ACK frame of its own leaves. The cell stands for the DATA PDU with one
// entry (compactPDU), its stamp 0, and a NACK of it, echoing 0, is taken
// as the answer to that transmission.
func TestCompactAcked(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 4})
	rx := make([][]byte, 8)
	// exchange sends message n from one end to the other and returns the
	// frame it went in, after the other end took it.
	exchange := func(from, to *end, dst HostID, n uint32) []byte {
		t.Helper()
		if err := from.tr.Send(dst, payload(n, CompactPayload), 0); err != nil {
			t.Fatal(err)
		}
		k, err := to.link.Recv(rx)
		if err != nil || k != 1 {
			t.Fatalf("message %d: %d frames, %v", n, k, err)
		}
		f := slices.Clone(rx[0])
		to.tr.BeginPass()
		to.tr.receive(f)
		if err := to.tr.flush(); err != nil {
			t.Fatal(err)
		}
		if err := to.tr.EndPass(); err != nil {
			t.Fatal(err)
		}
		return f
	}
	const rounds = 20
	for i := range uint32(rounds) {
		for _, f := range [][]byte{exchange(p.a, p.b, hostB, i), exchange(p.b, p.a, hostA, 100+i)} {
			cs, _, err := cells.Unpack(f, 0)
			if err != nil {
				t.Fatal(err)
			}
			want := typeCompactAcked
			if i == 0 && len(cs) == cells.CellSize && cellType(cs) == typeCompact {
				want = typeCompact // A's first request: nothing owed yet
			}
			if len(cs) != cells.CellSize || cellType(cs) != want {
				t.Fatalf("round %d: frame of %d cells, type %d; want one cell of type %d", i, len(cs)/cells.CellSize, cellType(cs), want)
			}
			if want == typeCompactAcked {
				h := compactPDU(t, cells.Cell(cs))
				if h.typ() != typeData || h.acks() != 1 || h.stamp() != 0 {
					t.Fatalf("round %d: it stands for type %d, %d entries, stamp %d", i, h.typ(), h.acks(), h.stamp())
				}
			}
		}
	}
	sa, sb := p.a.tr.Stats(), p.b.tr.Stats()
	// Every cell but A's first request is the compact lane's (lane.go).
	if sa.Acked != rounds || sb.Acked != rounds-1 || sa.AckFrames+sb.AckFrames != 0 || sa.BadFrames+sb.BadFrames != 0 ||
		sa.LaneCells+sb.LaneCells != 2*rounds-1 {
		t.Fatalf("after %d rounds: A %+v, B %+v", rounds, sa, sb)
	}
	checkExactlyOnce(t, p.b, hostA, rounds)

	// B refuses A's next message, which carries the acknowledgement of
	// B's last: the NACK matches the transmission, and the message goes
	// again after the NACK delay.
	p.b.refuse = func(HostID, uint32) bool { return true }
	exchange(p.a, p.b, hostB, rounds)
	p.b.refuse = nil
	p.poll(t) // B's NACK reaches A
	if sa, sb := p.a.tr.Stats(), p.b.tr.Stats(); sa.NacksReceived != 1 || sa.StaleNacks != 0 || sb.Acked != rounds {
		t.Fatalf("after the NACK: A %+v, B %+v", sa, sb)
	}
	for range 20 {
		p.poll(t)
		p.clk.Advance(DefaultRetransmitAfter)
	}
	checkExactlyOnce(t, p.b, hostA, rounds+1)
}

// A compact cell with an acknowledgement is checked whole before any of
// it counts: a flipped payload bit, a length changed under its CRC, an
// acknowledgement naming a channel the transport does not have, or a
// length beyond CompactPayload make it a bad frame that acknowledges and
// delivers nothing.
func TestCompactAckedChecked(t *testing.T) {
	p := unackedPair(t)
	inject := func(c []byte) { t.Helper(); injectCell(t, p, c) }
	sdu := new(header)
	pb := p.b.tr.Peer(hostA) // B's frames to A name these epochs
	body := payload(7, CompactPayload)
	sdu.put(typeData, 0, 0, 0, len(body), pb.srcOut, pb.dstOut)
	bad := compactAckedCell(sdu, body, 0, 0)
	bad[cells.HeaderSize+20] ^= 4
	inject(bad)
	bad = compactAckedCell(sdu, body, 0, 0)
	bad[cells.HeaderSize+compactOffCRC] ^= 4 // the length, one more
	inject(bad)
	inject(compactAckedCell(sdu, body, 2, 0))                           // channel 2 acknowledged
	inject(compactAckedCell(sdu, make([]byte, CompactPayload+1), 0, 0)) // 32 bytes
	if st := p.a.tr.Stats(); st.BadFrames != 4 || st.Acked != 0 || st.Delivered != 0 || p.a.tr.Unacked(hostB) != 1 {
		t.Fatalf("after 4 bad cells: %+v, %d unacknowledged", st, p.a.tr.Unacked(hostB))
	}
	// The same cell, good, delivers and acknowledges.
	inject(compactAckedCell(sdu, body, 0, 0))
	if st := p.a.tr.Stats(); st.Acked != 1 || st.Delivered != 1 || st.LaneCells != 1 {
		t.Fatalf("the good cell: %+v", st)
	}
}

// TestCompactPairChecked: a compact message of two cells (a payload of
// CompactPayload+1 to CompactMax bytes) is checked whole: a first cell
// without its continuation, a continuation alone, or one that names
// another message or fails its CRC makes a bad frame that delivers
// nothing; the good pair delivers the whole payload once, also with the
// acknowledgement in its first cell.
func TestCompactPairChecked(t *testing.T) {
	p := unackedPair(t)
	pb := p.b.tr.Peer(hostA) // B's frames to A name these epochs
	body := payload(3, CompactMax)
	if len(body) <= CompactPayload {
		t.Fatalf("a body of %d bytes", len(body))
	}
	h := new(header)
	h.put(typeData, 0, 0, 0, len(body), pb.srcOut, pb.dstOut)
	more := func(h *header, b []byte) []byte {
		c := compactCell(h, nil) // the cell header; its payload written next
		putCompactMore(cells.Cell(c).Payload(), h, b)
		return c
	}
	first := compactCell(h, body)
	other := new(header)
	other.put(typeData, 0, 1, 0, len(body), pb.srcOut, pb.dstOut) // the next message's
	corrupt := more(h, body)
	corrupt[cells.HeaderSize+30] ^= 2
	for i, f := range [][]byte{
		first,
		more(h, body),
		slices.Concat(first, more(other, body)),
		slices.Concat(first, corrupt),
	} {
		injectCell(t, p, f)
		if st := p.a.tr.Stats(); st.BadFrames != uint64(i+1) || st.Delivered != 0 {
			t.Fatalf("after bad frame %d: %+v", i, st)
		}
	}
	var got [][]byte
	p.a.tr.cfg.Deliver = func(_ HostID, _ int, b []byte) bool { got = append(got, slices.Clone(b)); return true }
	injectCell(t, p, slices.Concat(first, more(h, body)))
	injectCell(t, p, slices.Concat(first, more(h, body))) // a duplicate
	if st := p.a.tr.Stats(); st.Delivered != 1 || st.Duplicates != 1 || len(got) != 1 || !bytes.Equal(got[0], body) {
		t.Fatalf("the good pair: %+v, delivered %x, want %x", st, got, body)
	}
	// With an acknowledgement in the first cell (of A's message 0), as
	// the next message of the channel.
	h.put(typeData, 0, 1, 0, len(body), pb.srcOut, pb.dstOut)
	injectCell(t, p, slices.Concat(compactAckedCell(h, body, 0, 0), more(h, body)))
	if st := p.a.tr.Stats(); st.Delivered != 2 || st.Acked != 1 || st.BadFrames != 4 || len(got) != 2 || !bytes.Equal(got[1], body) {
		t.Fatalf("the pair with an acknowledgement: %+v", st)
	}
}

// unackedPair returns a pair of two channels whose A has sent B one
// message, which B never saw: the cells a test injects from B may
// acknowledge it.
func unackedPair(t *testing.T) *pair {
	t.Helper()
	p := newPair(t, memlink.Options{}, Config{Channels: 2})
	if err := p.a.tr.Send(hostB, payload(0, CompactPayload), 0); err != nil {
		t.Fatal(err)
	}
	rx := make([][]byte, 8)
	if _, err := p.b.link.Recv(rx); err != nil {
		t.Fatal(err)
	}
	return p
}

// injectCell sends cell c from B's link to A in a frame of its own, as B's
// transport would, and has A's transport take it.
func injectCell(tb testing.TB, p *pair, c []byte) {
	tb.Helper()
	fr := cells.Framer{Dst: p.a.link.HardwareAddr(), Src: p.b.link.HardwareAddr()}
	f, err := fr.Append(nil, c)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := p.b.link.Send([][]byte{f}); err != nil {
		tb.Fatal(err)
	}
	if _, err := p.a.tr.Poll(); err != nil {
		tb.Fatal(err)
	}
}

// tpdu is a PDU as the tests read it: its header's fields, then its
// acknowledgement entries and payload.
type tpdu []byte

func (b tpdu) h() *header    { return (*header)(b) }
func (b tpdu) typ() uint8    { return b.h().typ() }
func (b tpdu) channel() int  { return b.h().channel() }
func (b tpdu) seq() uint16   { return b.h().seq() }
func (b tpdu) stamp() uint32 { return b.h().stamp() }
func (b tpdu) length() int   { return b.h().length() }
func (b tpdu) acks() int     { return b.h().acks() }
func (b tpdu) src() uint32   { return b.h().src() }
func (b tpdu) dst() uint32   { return b.h().dst() }
