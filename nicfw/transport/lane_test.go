package transport

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/clock"
)

// The compact lane (lane.go) takes only the steady state: a cell it
// declines goes the general way, which counts it as before, and nothing of
// it takes effect twice. After a request and its reply (the reply taken by
// the lane), A is sent a copy of that reply (a retransmission: a
// duplicate), a cell whose acknowledgement lies outside its window (a
// forgery), one that names another source epoch, and one that follows on
// correctly (the lane's).
func TestLaneDeclines(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 2})
	pb := p.b.tr.Peer(hostA) // B's frames to A name these epochs
	if err := p.a.tr.Send(hostB, payload(0, CompactPayload), 0); err != nil {
		t.Fatal(err)
	}
	p.poll(t) // B takes A's request, unacknowledged yet
	reply := new(header)
	body := payload(0, CompactPayload)
	reply.put(typeData, 0, 0, 0, len(body), pb.srcOut, pb.dstOut)
	inject := func(c []byte) Stats { t.Helper(); injectCell(t, p, c); return p.a.tr.Stats() }

	st := inject(compactAckedCell(reply, body, 0, 0))
	if st.LaneCells != 1 || st.Delivered != 1 || st.Acked != 1 {
		t.Fatalf("the reply: %+v", st)
	}
	st = inject(compactAckedCell(reply, body, 0, 0))
	if st.LaneCells != 1 || st.Delivered != 1 || st.Duplicates != 1 || st.Acked != 1 || st.StaleAcks != 1 {
		t.Fatalf("its copy: %+v", st)
	}
	next := new(header)
	next.put(typeData, 0, 1, 0, len(body), pb.srcOut, pb.dstOut)
	st = inject(compactAckedCell(next, body, 0, 9)) // A never sent message 9
	if st.LaneCells != 1 || st.Delivered != 1 || st.ForgedAcks != 1 {
		t.Fatalf("an acknowledgement out of its window: %+v", st)
	}
	// The forgery renewed the destination epoch B names (epochs.go):
	// what follows names the new one, and an old source epoch is stale.
	pa := p.a.tr.Peer(hostB)
	other := new(header)
	other.put(typeData, 0, 1, 0, len(body), pb.srcOut+1, pa.dstIn)
	st = inject(compactAckedCell(other, body, 0, 0))
	if st.LaneCells != 1 || st.Delivered != 1 {
		t.Fatalf("another source epoch: %+v", st)
	}
	next.setEpochs(pb.srcOut, pa.dstIn)
	st = inject(compactAckedCell(next, body, 0, 0))
	if st.LaneCells != 2 || st.Delivered != 2 || st.BadFrames != 0 {
		t.Fatalf("the next reply: %+v", st)
	}
}

// sendNow is SendNow from e to its peer host dst, which must take it.
func sendNow(tb testing.TB, e *end, dst HostID, n uint32) error {
	tb.Helper()
	sent, err := e.tr.SendNow(e.tr.Peer(dst), payload(n, CompactPayload), 0)
	if !sent {
		tb.Fatalf("message %d not taken: %v", n, err)
	}
	return err
}

// SendNow sends request/reply traffic by the compact lane, one cell a
// frame, and a payload too long for a cell as an AAL5 PDU, both handed to
// the link at once; inside a pass it takes the general way. Every message
// arrives once, in order.
func TestSendNow(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 4})
	const rounds = 20
	before, _ := p.a.link.Stats()
	for i := range uint32(rounds) {
		if err := sendNow(t, p.a, hostB, i); err != nil {
			t.Fatal(err)
		}
		p.poll(t)
		if err := sendNow(t, p.b, hostA, i); err != nil {
			t.Fatal(err)
		}
		p.poll(t)
	}
	sa, sb := p.a.tr.Stats(), p.b.tr.Stats()
	la, _ := p.a.link.Stats()
	if sa.LaneSends != rounds || sb.LaneSends != rounds || la.TxFrames-before.TxFrames != rounds || sa.Acked != rounds {
		t.Fatalf("after %d rounds: A %+v, B %+v, A's link %+v", rounds, sa, sb, la)
	}
	// The general way in a pass; a payload longer than a cell by the lane.
	p.a.tr.BeginPass()
	if err := sendNow(t, p.a, hostB, rounds); err != nil {
		t.Fatal(err)
	}
	if err := p.a.tr.EndPass(); err != nil {
		t.Fatal(err)
	}
	if sent, err := p.a.tr.SendNow(p.a.tr.Peer(hostB), payload(rounds+1, CompactPayload+40)[:CompactPayload+1], 0); !sent || err != nil {
		t.Fatalf("a long payload: sent %v, %v", sent, err)
	}
	for range 10 {
		p.poll(t)
		p.clk.Advance(DefaultRetransmitAfter)
	}
	if sa := p.a.tr.Stats(); sa.LaneSends != rounds+1 || p.a.tr.Unacked(hostB) != 0 {
		t.Fatalf("the general way: %+v, %d unacknowledged", sa, p.a.tr.Unacked(hostB))
	}
	checkExactlyOnce(t, p.b, hostA, rounds+2)
}

// refusingLink refuses the next refuse frames sent.
type refusingLink struct {
	afxdp.Link
	refuse int
}

func (l *refusingLink) Send(frames [][]byte) (int, error) {
	if l.refuse > 0 {
		l.refuse--
		return 0, errors.New("refused")
	}
	return l.Link.Send(frames)
}

// A frame the link refuses is lost as on the wire: SendNow reports the
// link's error with the message taken, and the message is retransmitted
// and arrives once.
func TestSendNowLinkRefuses(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	rl := &refusingLink{Link: la}
	p := pairOn(t, rl, lb, clock.NewManual(time.Unix(1, 0)), Config{Channels: 2})
	rl.refuse = 1
	sent, err := p.a.tr.SendNow(p.a.tr.Peer(hostB), payload(0, CompactPayload), 0)
	if !sent || err == nil {
		t.Fatalf("sent %v, %v; want sent and the link's error", sent, err)
	}
	if p.a.tr.Stats().LaneSends != 1 {
		t.Fatalf("not by the lane: %+v", p.a.tr.Stats())
	}
	for range 20 {
		p.poll(t)
		p.clk.Advance(DefaultRetransmitAfter)
	}
	if st := p.a.tr.Stats(); st.Retransmits == 0 || st.Acked != 1 {
		t.Fatalf("after the refusal: %+v", st)
	}
	checkExactlyOnce(t, p.b, hostA, 1)
}

// A frame of one compact cell goes by the lane only with the headers
// cells.Unpack takes: with another frame version or cell count it is a
// bad frame, as on the general path, and delivers nothing; with them
// right, the same cell is the lane's.
func TestLaneFrameHeaders(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 2})
	if err := p.a.tr.Send(hostB, payload(0, CompactPayload), 0); err != nil {
		t.Fatal(err)
	}
	p.poll(t) // B takes A's request
	pb := p.b.tr.Peer(hostA)
	reply := new(header)
	body := payload(0, CompactPayload)
	reply.put(typeData, 0, 0, 0, len(body), pb.srcOut, pb.dstOut)
	cell := compactAckedCell(reply, body, 0, 0)
	fr := cells.Framer{Dst: p.a.link.HardwareAddr(), Src: p.b.link.HardwareAddr()}
	f, err := fr.Append(nil, cell)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func([]byte){
		func(b []byte) { b[afxdp.EthernetHeaderLen] = cells.FrameVersion + 1 },
		func(b []byte) { b[afxdp.EthernetHeaderLen+3] = 2 }, // two cells announced
	} {
		g := slices.Clone(f)
		bad(g)
		p.a.tr.receive(g)
	}
	if st := p.a.tr.Stats(); st.BadFrames != 2 || st.Delivered != 0 || st.LaneCells != 0 {
		t.Fatalf("after two bad frames: %+v", st)
	}
	p.a.tr.receive(f)
	if st := p.a.tr.Stats(); st.BadFrames != 2 || st.Delivered != 1 || st.LaneCells != 1 || st.Acked != 1 {
		t.Fatalf("the good frame: %+v", st)
	}
}
