package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/clock"
)

const (
	hostA HostID = 1
	hostB HostID = 2
)

// end is one host of a test pair: its transport, its link, and what it was
// given through the callbacks.
type end struct {
	tr   *Transport
	link *memlink.Link // nil on other links
	// got[src][ch] lists the message numbers delivered on each channel.
	got      map[HostID]map[int][]uint32
	refuse   func(src HostID, n uint32) bool // nil: accept everything
	accepted func(tr *Transport)             // if set, called in Deliver for each message taken (AckNow, AckSoon)
	returned []returnedMsg
}

type returnedMsg struct {
	dst    HostID
	cookie uint64
	n      uint32
	err    error
}

type pair struct {
	clk  *clock.Manual
	a, b *end
	// between, if set, runs once per round of transfer, after the sends
	// and before the polls.
	between func()
}

// newPair connects two transports over a memlink pair, A (host 1) and B
// (host 2), on one manual clock.
func newPair(tb testing.TB, opts memlink.Options, cfg Config) *pair {
	tb.Helper()
	la, lb, err := memlink.NewPair(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { la.Close(); lb.Close() })
	p := pairOn(tb, la, lb, clock.NewManual(time.Unix(1_000_000, 0)), cfg)
	p.a.link, p.b.link = la, lb
	return p
}

// newBarePair is newPair without the handshake: neither end has heard
// the other (the RESETs that AddPeer sends to start it are taken off the
// links).
func newBarePair(tb testing.TB, opts memlink.Options, cfg Config) *pair {
	tb.Helper()
	la, lb, err := memlink.NewPair(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { la.Close(); lb.Close() })
	p := &pair{clk: clock.NewManual(time.Unix(1_000_000, 0))}
	p.a, p.b = newEnd(tb, la, p.clk, cfg), newEnd(tb, lb, p.clk, cfg)
	p.a.link, p.b.link = la, lb
	if err := p.a.tr.AddPeer(hostB, lb.HardwareAddr()); err != nil {
		tb.Fatal(err)
	}
	if err := p.b.tr.AddPeer(hostA, la.HardwareAddr()); err != nil {
		tb.Fatal(err)
	}
	drop := make([][]byte, 8)
	for _, l := range []*memlink.Link{la, lb} {
		if _, err := l.Recv(drop); err != nil {
			tb.Fatal(err)
		}
	}
	p.wait(p.a.tr.cfg.ScanInterval) // nor do they hold back the RESETs a test expects (reset)
	return p
}

// pairOn connects two transports, A (host 1) on la and B (host 2) on lb.
// With clk nil they run on the system clock, and transfer does not advance
// time but waits for it.
func pairOn(tb testing.TB, la, lb afxdp.Link, clk *clock.Manual, cfg Config) *pair {
	tb.Helper()
	p := &pair{clk: clk}
	p.a, p.b = newEnd(tb, la, clk, cfg), newEnd(tb, lb, clk, cfg)
	if err := p.a.tr.AddPeer(hostB, lb.HardwareAddr()); err != nil {
		tb.Fatal(err)
	}
	if err := p.b.tr.AddPeer(hostA, la.HardwareAddr()); err != nil {
		tb.Fatal(err)
	}
	p.connect(tb)
	return p
}

// connect runs the handshake between the ends of p (epochs.go): A asks B
// for its destination epoch in a RESET, B answers, and each then holds
// the other's, so that a test's first message leaves at once. It fails
// the test if the ends are not ready after a few rounds.
func (p *pair) connect(tb testing.TB) {
	tb.Helper()
	pb, pa := p.a.tr.Peer(hostB), p.b.tr.Peer(hostA)
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; !p.a.tr.ready(pb) || !p.b.tr.ready(pa); i++ {
		if time.Now().After(deadline) {
			tb.Fatalf("no handshake: A %+v, B %+v", p.a.tr.Stats(), p.b.tr.Stats())
		}
		if i%4 == 0 { // again, in case the link lost it
			if err := p.a.tr.hello(pb); err != nil {
				tb.Fatal(err)
			}
		}
		if !p.poll(tb) {
			p.wait(p.a.tr.cfg.ScanInterval)
		}
	}
	// A scan interval on, so that the RESETs of the handshake hold back
	// none that a test expects (reset).
	p.wait(max(p.a.tr.cfg.ScanInterval, p.b.tr.cfg.ScanInterval))
}

// wait advances the manual clock of p by d, or sleeps d on the system
// clock.
func (p *pair) wait(d time.Duration) {
	if p.clk != nil {
		p.clk.Advance(d)
	} else {
		time.Sleep(d)
	}
}

// newEnd starts a transport on l that records what it is given (see end).
func newEnd(tb testing.TB, l afxdp.Link, clk *clock.Manual, cfg Config) *end {
	tb.Helper()
	e := &end{got: make(map[HostID]map[int][]uint32)}
	if clk != nil {
		cfg.Clock = clk
	}
	cfg.Deliver = func(src HostID, ch int, payload []byte) bool {
		n := binary.BigEndian.Uint32(payload)
		if e.refuse != nil && e.refuse(src, n) {
			return false
		}
		checkPayload(tb, payload)
		if e.got[src] == nil {
			e.got[src] = make(map[int][]uint32)
		}
		e.got[src][ch] = append(e.got[src][ch], n)
		if e.accepted != nil {
			e.accepted(e.tr)
		}
		return true
	}
	cfg.Returned = func(dst HostID, cookie uint64, payload []byte, reason error) {
		checkPayload(tb, payload)
		e.returned = append(e.returned, returnedMsg{dst, cookie, binary.BigEndian.Uint32(payload), reason})
	}
	tr, err := New(l, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	e.tr = tr
	return e
}

// payload returns message n: its number and a body of a length and
// content that depend on n, so that checkPayload can verify it.
func payload(n uint32, maxLen int) []byte {
	l := 4 + int(n*7919)%(maxLen-3)
	b := make([]byte, l)
	binary.BigEndian.PutUint32(b, n)
	for i := 4; i < l; i++ {
		b[i] = byte(n) + byte(i)
	}
	return b
}

func checkPayload(tb testing.TB, b []byte) {
	tb.Helper()
	if len(b) < 4 {
		tb.Fatalf("payload of %d bytes", len(b))
	}
	n := binary.BigEndian.Uint32(b)
	for i := 4; i < len(b); i++ {
		if b[i] != byte(n)+byte(i) {
			tb.Fatalf("message %d: byte %d is %d, want %d", n, i, b[i], byte(n)+byte(i))
		}
	}
}

// poll polls both ends once and reports whether any frame moved.
func (p *pair) poll(tb testing.TB) bool {
	tb.Helper()
	na, err := p.a.tr.Poll()
	if err != nil {
		tb.Fatal(err)
	}
	nb, err := p.b.tr.Poll()
	if err != nil {
		tb.Fatal(err)
	}
	return na+nb > 0
}

// transfer sends count messages from each sender in from, in numbered
// order, polling both ends and advancing the clock by step whenever
// nothing moves (on the system clock: waiting), until every message is
// acknowledged.
func (p *pair) transfer(tb testing.TB, count int, maxLen int, step time.Duration, from ...*end) {
	tb.Helper()
	next := make([]uint32, len(from))
	deadline := time.Now().Add(time.Minute)
	for rounds := 0; ; rounds++ {
		if p.clk != nil && rounds > 100*count+1000 || rounds&1023 == 0 && time.Now().After(deadline) {
			tb.Fatalf("no progress after %d rounds: A %+v, B %+v", rounds, p.a.tr.Stats(), p.b.tr.Stats())
		}
		done := true
		for i, e := range from {
			dst := hostB
			if e == p.b {
				dst = hostA
			}
			for int(next[i]) < count {
				err := e.tr.Send(dst, payload(next[i], maxLen), uint64(next[i]))
				if errors.Is(err, ErrBusy) {
					break
				}
				if err != nil {
					tb.Fatal(err)
				}
				next[i]++
			}
			if int(next[i]) < count || e.tr.Unacked(dst) > 0 {
				done = false
			}
		}
		if done {
			return
		}
		if p.between != nil {
			p.between()
		}
		if !p.poll(tb) && p.clk != nil {
			p.clk.Advance(step)
		}
	}
}

// checkExactlyOnce checks that e received messages 0..count-1 from src
// exactly once each, and on each channel in increasing order.
func checkExactlyOnce(tb testing.TB, e *end, src HostID, count int) {
	tb.Helper()
	seen := make([]int, count)
	for ch, ns := range e.got[src] {
		for i, n := range ns {
			if int(n) >= count {
				tb.Fatalf("channel %d: message %d was never sent", ch, n)
			}
			seen[n]++
			if i > 0 && n <= ns[i-1] {
				tb.Fatalf("channel %d: message %d delivered after %d", ch, n, ns[i-1])
			}
		}
	}
	for n, k := range seen {
		if k != 1 {
			tb.Fatalf("message %d delivered %d times", n, k)
		}
	}
}

func TestDeliveryInOrderExactlyOnce(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 4})
	const count = 2000
	p.transfer(t, count, p.a.tr.MaxPayload(), time.Millisecond, p.a)
	checkExactlyOnce(t, p.b, hostA, count)
	if got := len(p.b.got[hostA]); got != 4 {
		t.Errorf("messages used %d channels, want 4", got)
	}
	sa, sb := p.a.tr.Stats(), p.b.tr.Stats()
	if sa.Sent != count || sa.Acked != count || sa.Retransmits != 0 || sb.Delivered != count || sb.Duplicates != 0 {
		t.Errorf("stats A %+v B %+v", sa, sb)
	}
	if sa.BadFrames+sb.BadFrames+sa.UnknownSource+sb.UnknownSource+sa.NotForUs+sb.NotForUs != 0 {
		t.Errorf("frames dropped: A %+v B %+v", sa, sb)
	}
}

// lossBody sends count messages each way between p's ends, whose links
// drop frames: each is delivered exactly once, in order per channel; none
// is returned; the transports retransmitted and saw duplicates.
func lossBody(t *testing.T, p *pair, count, maxLen int) {
	p.transfer(t, count, maxLen, 10*time.Millisecond, p.a, p.b)
	checkExactlyOnce(t, p.b, hostA, count)
	checkExactlyOnce(t, p.a, hostB, count)
	for _, e := range []*end{p.a, p.b} {
		s := e.tr.Stats()
		if len(e.returned) != 0 || s.Retransmits == 0 || s.Duplicates == 0 || s.Acked != uint64(count) {
			t.Errorf("returned %d, stats %+v", len(e.returned), s)
		}
	}
	t.Logf("A: %+v", p.a.tr.Stats())
}

// TestLoss sends 10^5 messages each way over a memlink pair that loses 10%
// of the frames. TestLossOverAFXDP runs the same body over AF_XDP.
func TestLoss(t *testing.T) {
	const count = 100_000
	p := newPair(t, memlink.Options{Loss: 0.1, Seed: 7}, Config{Channels: 8, RetransmitAfter: 10 * time.Millisecond})
	lossBody(t, p, count, 200)
	if f := p.b.link.Faults(); f.Lost == 0 {
		t.Errorf("memlink lost nothing: %+v", f)
	}
}

func TestDuplicateAndReorder(t *testing.T) {
	const count = 3000
	p := newPair(t, memlink.Options{Duplicate: 0.2, Reorder: 0.1, Seed: 3}, Config{Channels: 8})
	p.transfer(t, count, 100, DefaultRetransmitAfter, p.a, p.b)
	checkExactlyOnce(t, p.b, hostA, count)
	checkExactlyOnce(t, p.a, hostB, count)
	sa, sb := p.a.tr.Stats(), p.b.tr.Stats()
	if sb.Duplicates == 0 || sa.StaleAcks == 0 {
		t.Errorf("no duplicates seen: A %+v B %+v", sa, sb)
	}
	if f := p.b.link.Faults(); f.Duplicated == 0 || f.Reordered == 0 {
		t.Errorf("faults %+v", f)
	}
}

func TestNackThenRetransmit(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 2, RetransmitAfter: 100 * time.Millisecond, NackDelay: time.Millisecond, ScanInterval: time.Millisecond, AckDelay: -1})
	refusals := 0
	p.b.refuse = func(HostID, uint32) bool { refusals++; return refusals == 1 }
	if err := p.a.tr.Send(hostB, payload(0, 50), 0); err != nil {
		t.Fatal(err)
	}
	p.poll(t) // B refuses and NACKs
	p.poll(t) // A takes the NACK
	sa, sb := p.a.tr.Stats(), p.b.tr.Stats()
	if sb.Refused != 1 || sa.NacksReceived != 1 || p.a.tr.Unacked(hostB) != 1 || len(p.b.got[hostA]) != 0 {
		t.Fatalf("after the NACK: A %+v B %+v", sa, sb)
	}
	p.poll(t)
	if p.a.tr.Stats().Retransmits != 0 {
		t.Fatal("retransmitted before NackDelay")
	}
	p.clk.Advance(time.Millisecond)
	p.poll(t) // A retransmits; B delivers and ACKs
	p.poll(t) // A takes the ACK
	sa, sb = p.a.tr.Stats(), p.b.tr.Stats()
	if sa.Retransmits != 1 || sa.Acked != 1 || sb.Delivered != 1 || p.a.tr.Unacked(hostB) != 0 {
		t.Fatalf("after the retransmission: A %+v B %+v", sa, sb)
	}
	checkExactlyOnce(t, p.b, hostA, 1)
}

// frameTo returns a frame from src to dst, as B sends them to A in pair
// p (its epochs toward A), of one PDU with a transport header and the
// given body.
func frameTo(tb testing.TB, p *pair, dst, src net.HardwareAddr, typ uint8, ch int, seq uint16, stamp uint32, body []byte) []byte {
	tb.Helper()
	pa := p.b.tr.Peer(hostA)
	return epochFrame(tb, dst, src, typ, ch, seq, stamp, pa.srcOut, pa.dstOut, body)
}

// epochFrame is frameTo with the epochs given.
func epochFrame(tb testing.TB, dst, src net.HardwareAddr, typ uint8, ch int, seq uint16, stamp, srcEpoch, dstEpoch uint32, body []byte) []byte {
	tb.Helper()
	sdu := make([]byte, headerLen+len(body))
	(*header)(sdu).put(typ, ch, seq, stamp, len(body), srcEpoch, dstEpoch)
	copy(sdu[headerLen:], body)
	cs, err := cells.Segment(cells.SAR{VCI: DefaultVCI}, sdu)
	if err != nil {
		tb.Fatal(err)
	}
	fr := cells.Framer{Dst: dst, Src: src}
	f, err := fr.Append(nil, cs)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// parseFrame decodes a transport frame by hand: its last PDU, or its
// last compact cell as the PDU it stands for.
func parseFrame(tb testing.TB, f []byte) tpdu {
	tb.Helper()
	cs, _, err := cells.Unpack(f, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var h tpdu
	if c := cells.Cell(cs[len(cs)-cells.CellSize:]); c.VCI() == DefaultVCI+1 {
		if c.Payload()[0] == typeCompactMore && len(cs) >= 2*cells.CellSize {
			return compactPDU(tb, cells.Cell(cs[len(cs)-2*cells.CellSize:len(cs)-cells.CellSize]), c)
		}
		return compactPDU(tb, c)
	}
	r := cells.NewReassembler(cells.ReassemblerConfig{})
	r.PushCells(cs, func(pdu cells.PDU, err error) {
		if err != nil {
			tb.Fatal(err)
		}
		if pdu.VC != (cells.VC{VCI: DefaultVCI}) || !valid(pdu.SDU, MaxChannels) {
			tb.Fatalf("bad PDU %+v", pdu)
		}
		h = append(tpdu(nil), pdu.SDU...)
	})
	if h == nil {
		tb.Fatal("no PDU in the frame")
	}
	return h
}

func TestStaleNackIgnored(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 1, RetransmitAfter: 100 * time.Millisecond, NackDelay: time.Millisecond, ScanInterval: time.Millisecond})
	macA, macB := p.a.link.HardwareAddr(), p.b.link.HardwareAddr()
	body := payload(0, 50)
	if err := p.a.tr.Send(hostB, body, 0); err != nil {
		t.Fatal(err)
	}
	// Take the DATA frame off B's link by hand, so B's transport never
	// sees it, and read its header.
	rx := make([][]byte, 4)
	if n, err := p.b.link.Recv(rx); err != nil || n != 1 {
		t.Fatalf("Recv = %d, %v", n, err)
	}
	h := parseFrame(t, rx[0])
	if h.typ() != typeData || h.channel() != 0 || h.seq() != 0 || h.length() != len(body) {
		t.Fatalf("DATA header % x", []byte(h[:headerLen]))
	}
	first := h.stamp()

	inject := func(typ uint8, seq uint16, stamp uint32) {
		t.Helper()
		f := frameTo(t, p, macA, macB, typ, 0, seq, stamp, nil)
		if _, err := p.b.link.Send([][]byte{f}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.a.tr.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	retransmitted := func() uint64 {
		t.Helper()
		p.clk.Advance(time.Millisecond)
		if _, err := p.a.tr.Poll(); err != nil {
			t.Fatal(err)
		}
		return p.a.tr.Stats().Retransmits
	}

	// A NACK with a timestamp of no transmission, and one for another
	// sequence number: both stale, and nothing is retransmitted early.
	inject(typeNack, 0, first-1)
	inject(typeNack, 1, first)
	if s := p.a.tr.Stats(); s.StaleNacks != 2 || s.NacksReceived != 0 {
		t.Fatalf("stats %+v", s)
	}
	if r := retransmitted(); r != 0 {
		t.Fatalf("%d retransmissions after stale NACKs", r)
	}

	// The right NACK makes A retransmit after NackDelay, with a new
	// timestamp.
	inject(typeNack, 0, first)
	if s := p.a.tr.Stats(); s.NacksReceived != 1 {
		t.Fatalf("stats %+v", s)
	}
	if r := retransmitted(); r != 1 {
		t.Fatalf("%d retransmissions after a valid NACK, want 1", r)
	}
	if n, err := p.b.link.Recv(rx); err != nil || n != 1 {
		t.Fatalf("Recv = %d, %v", n, err)
	}
	second := parseFrame(t, rx[0]).stamp()
	if second <= first {
		t.Fatalf("retransmission stamped %d, first transmission %d", second, first)
	}

	// The first NACK again, late (a duplicate): it names the first
	// transmission, not the current one, and must not count.
	inject(typeNack, 0, first)
	if s := p.a.tr.Stats(); s.StaleNacks != 3 || s.NacksReceived != 1 {
		t.Fatalf("stats %+v", s)
	}
	if r := retransmitted(); r != 1 {
		t.Fatalf("%d retransmissions after a stale NACK, want still 1", r)
	}

	// An ACK with the stale timestamp still frees the channel: the message
	// was delivered whichever transmission carried it.
	inject(typeAck, 0, first)
	if s := p.a.tr.Stats(); s.Acked != 1 || p.a.tr.Unacked(hostB) != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestUnreachable(t *testing.T) {
	const giveUp = 2 * time.Second
	p := newPair(t, memlink.Options{}, Config{Channels: 4, RetransmitAfter: 50 * time.Millisecond, GiveUpAfter: giveUp})
	p.b.link.Close() // the peer disappears: frames to it vanish
	for n := range uint32(3) {
		if err := p.a.tr.Send(hostB, payload(n, 80), 100+uint64(n)); err != nil {
			t.Fatal(err)
		}
	}
	start := p.clk.Now()
	for p.clk.Now().Sub(start) < giveUp-50*time.Millisecond {
		p.clk.Advance(50 * time.Millisecond)
		if _, err := p.a.tr.Poll(); err != nil {
			t.Fatal(err)
		}
		if len(p.a.returned) != 0 {
			t.Fatalf("returned after %v, before GiveUpAfter", p.clk.Now().Sub(start))
		}
	}
	if s := p.a.tr.Stats(); s.Retransmits < 3*30 {
		t.Fatalf("only %d retransmissions", s.Retransmits)
	}
	p.clk.Advance(50 * time.Millisecond)
	if _, err := p.a.tr.Poll(); err != nil {
		t.Fatal(err)
	}
	if len(p.a.returned) != 3 {
		t.Fatalf("%d messages returned, want 3", len(p.a.returned))
	}
	seen := map[uint64]bool{}
	for _, r := range p.a.returned {
		if r.dst != hostB || !errors.Is(r.err, ErrUnreachable) || r.cookie != 100+uint64(r.n) {
			t.Fatalf("returned %+v", r)
		}
		seen[r.cookie] = true
	}
	if len(seen) != 3 {
		t.Fatalf("cookies %v", seen)
	}
	if u := p.a.tr.Unacked(hostB); u != 0 || p.a.tr.Stats().Returned != 3 {
		t.Fatalf("unacked %d, stats %+v", u, p.a.tr.Stats())
	}
	// The channels are free again.
	for n := range uint32(4) {
		if err := p.a.tr.Send(hostB, payload(n, 80), 0); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNackKeepsPeerReachable(t *testing.T) {
	const giveUp = time.Second
	p := newPair(t, memlink.Options{}, Config{Channels: 1, RetransmitAfter: 100 * time.Millisecond, GiveUpAfter: giveUp})
	full := true
	p.b.refuse = func(HostID, uint32) bool { return full }
	if err := p.a.tr.Send(hostB, payload(0, 50), 0); err != nil {
		t.Fatal(err)
	}
	for range 3 * giveUp / (100 * time.Millisecond) {
		p.poll(t)
		p.poll(t)
		p.clk.Advance(100 * time.Millisecond)
	}
	if len(p.a.returned) != 0 || p.a.tr.Stats().NacksReceived < 20 {
		t.Fatalf("returned %v, stats %+v", p.a.returned, p.a.tr.Stats())
	}
	if err := p.a.tr.Send(hostB, payload(1, 50), 1); !errors.Is(err, ErrBusy) {
		t.Fatalf("Send to a refusing peer = %v, want ErrBusy", err)
	}
	full = false
	p.transfer(t, 0, 50, 100*time.Millisecond, p.a)
	checkExactlyOnce(t, p.b, hostA, 1)
}

func TestBusy(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 3, AckDelay: -1})
	for n := range uint32(3) {
		if err := p.a.tr.Send(hostB, payload(n, 50), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.a.tr.Send(hostB, payload(3, 50), 0); !errors.Is(err, ErrBusy) {
		t.Fatalf("Send with every channel in flight = %v, want ErrBusy", err)
	}
	if u := p.a.tr.Unacked(hostB); u != 3 {
		t.Fatalf("unacked %d", u)
	}
	p.poll(t) // B delivers and ACKs
	p.poll(t) // A frees the channels
	if u := p.a.tr.Unacked(hostB); u != 0 {
		t.Fatalf("unacked %d after the ACKs", u)
	}
	if err := p.a.tr.Send(hostB, payload(3, 50), 0); err != nil {
		t.Fatal(err)
	}
}

func TestScanSkipsIdlePeers(t *testing.T) {
	const ra = 10 * time.Millisecond
	p := newPair(t, memlink.Options{}, Config{Channels: 2, RetransmitAfter: ra, ScanInterval: ra, AckDelay: -1})
	for i := range 200 {
		if err := p.a.tr.AddPeer(HostID(100+i), net.HardwareAddr{2, 1, 0, 0, byte(i >> 8), byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// The RESETs that start the handshakes with them (AddPeer) are on
	// B's link too: taken off, not for B.
	for rx := make([][]byte, 64); ; {
		if n, err := p.b.link.Recv(rx); err != nil || n == 0 {
			break
		}
	}
	scan := func() Stats {
		t.Helper()
		p.clk.Advance(ra)
		if _, err := p.a.tr.Poll(); err != nil {
			t.Fatal(err)
		}
		return p.a.tr.Stats()
	}
	s0 := scan()
	if s0.Scans == 0 || s0.ScanVisits != 0 {
		t.Fatalf("idle transport: %+v", s0)
	}
	// Two messages to host 100 (no such host on the link: they wait for
	// its handshake, asked for again) and one to B, which B does not take
	// in yet (retransmitted): two active peers of 201.
	for _, dst := range []HostID{100, 100, hostB} {
		if err := p.a.tr.Send(dst, payload(0, 50), 0); err != nil {
			t.Fatal(err)
		}
	}
	s1 := scan()
	if s1.Scans != s0.Scans+1 || s1.ScanVisits != 2 || s1.Retransmits != 1 || s1.ResetsSent <= s0.ResetsSent {
		t.Fatalf("two active peers: %+v", s1)
	}
	// B takes the message in and A the ACK: one active peer is left.
	if _, err := p.b.tr.Poll(); err != nil {
		t.Fatal(err)
	}
	s2 := scan()
	if s2.Acked != 1 || s2.ScanVisits != s1.ScanVisits+1 {
		t.Fatalf("one active peer: %+v", s2)
	}
}

func TestBadFramesCounted(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 2})
	macA, macB := p.a.link.HardwareAddr(), p.b.link.HardwareAddr()
	other := net.HardwareAddr{2, 9, 9, 9, 9, 9}
	good := frameTo(t, p, macA, macB, typeData, 0, 0, 1, payload(0, 50))
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-20] ^= 0x40 // payload bit: the AAL5 CRC fails
	frames := [][]byte{
		frameTo(t, p, other, macB, typeData, 0, 0, 1, payload(0, 50)), // not for A
		frameTo(t, p, macA, other, typeData, 0, 0, 1, payload(0, 50)), // unknown source
		frameTo(t, p, macA, macB, typeData, 2, 0, 1, payload(0, 50)),  // channel out of range
		frameTo(t, p, macA, macB, 9, 0, 0, 1, nil),                    // unknown type
		corrupt,
		good,
	}
	if _, err := p.b.link.Send(frames); err != nil {
		t.Fatal(err)
	}
	if _, err := p.a.tr.Poll(); err != nil {
		t.Fatal(err)
	}
	s := p.a.tr.Stats()
	if s.NotForUs != 1 || s.UnknownSource != 1 || s.BadFrames != 3 || s.Delivered != 1 {
		t.Fatalf("stats %+v", s)
	}
	checkExactlyOnce(t, p.a, hostB, 1)
}

func TestErrors(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{})
	if err := p.a.tr.Send(99, []byte("x"), 0); !errors.Is(err, ErrUnknownHost) {
		t.Errorf("Send to an unknown host = %v", err)
	}
	if max := p.a.tr.MaxPayload(); max != DefaultMaxPayload {
		t.Errorf("MaxPayload = %d, want %d", max, DefaultMaxPayload)
	}
	if err := p.a.tr.Send(hostB, make([]byte, p.a.tr.MaxPayload()+1), 0); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Send of an oversize payload = %v", err)
	}
	if err := p.a.tr.Send(hostB, nil, 0); err != nil {
		t.Errorf("Send of an empty payload = %v", err)
	}
	if err := p.a.tr.AddPeer(hostB, net.HardwareAddr{2, 3, 4, 5, 6, 7}); !errors.Is(err, ErrConfig) {
		t.Errorf("AddPeer of a known id = %v", err)
	}
	if err := p.a.tr.AddPeer(7, p.b.link.HardwareAddr()); !errors.Is(err, ErrConfig) {
		t.Errorf("AddPeer of a known MAC = %v", err)
	}
	deliver := func(HostID, int, []byte) bool { return true }
	for _, cfg := range []Config{
		{}, // no Deliver
		{Deliver: deliver, Channels: MaxChannels + 1}, // too many channels
		{Deliver: deliver, GiveUpAfter: -1},
		{Deliver: deliver, MaxPayload: 65535}, // no room for the header
	} {
		if _, err := New(p.a.link, cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v", cfg, err)
		}
	}
	p.a.link.Close()
	if _, err := p.a.tr.Poll(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Poll on a closed link = %v", err)
	}
	if err := p.a.tr.Send(hostB, []byte("x"), 0); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send on a closed link = %v", err)
	}
}

var _ afxdp.Link = (*memlink.Link)(nil)

func ExampleTransport() {
	la, lb, _ := memlink.NewPair(memlink.Options{})
	defer la.Close()
	defer lb.Close()
	a, _ := New(la, Config{Deliver: func(HostID, int, []byte) bool { return true }})
	b, _ := New(lb, Config{Deliver: func(src HostID, ch int, p []byte) bool {
		fmt.Printf("from host %d on channel %d: %s\n", src, ch, p)
		return true
	}})
	a.AddPeer(2, lb.HardwareAddr())
	b.AddPeer(1, la.HardwareAddr())
	a.Send(2, []byte("hello"), 0) // waits: a RESET asks B what to name it
	b.Poll()                      // answers with a RESET of its own
	a.Poll()                      // takes it in: the message leaves
	b.Poll()                      // delivers; the acknowledgement waits for a reply to carry it
	b.Poll()                      // none came: an ACK frame of its own
	a.Poll()                      // takes the ACK in: the channel is free
	fmt.Println("unacked:", a.Unacked(2))
	// Output:
	// from host 1 on channel 0: hello
	// unacked: 0
}

// In request/reply traffic each DATA frame carries the acknowledgement of
// the one before it the other way, so a round trip is two frames; what
// nothing carries leaves in an ACK frame at the end of the next Poll.
func TestAcksPiggyback(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 4})
	const rounds = 100
	for n := range uint32(rounds) {
		if err := p.a.tr.Send(hostB, payload(n, 60), 0); err != nil {
			t.Fatal(err)
		}
		p.poll(t) // B receives the request: its acknowledgement is owed
		if err := p.b.tr.Send(hostA, payload(n, 60), 0); err != nil {
			t.Fatal(err) // the reply carries it
		}
		p.poll(t) // A receives the reply: acknowledged, its own owed
	}
	sa, sb := p.a.tr.Stats(), p.b.tr.Stats()
	if sa.Acked != rounds || sb.Acked != rounds-1 || p.b.tr.Unacked(hostA) != 1 {
		t.Fatalf("acked: A %+v B %+v", sa, sb)
	}
	if sa.AckFrames != 0 || sb.AckFrames != 0 || sa.AcksPiggybacked != rounds-1 || sb.AcksPiggybacked != rounds {
		t.Fatalf("frames: A %+v B %+v", sa, sb)
	}
	// Nothing more to carry the last acknowledgement: the next Poll but one
	// sends it alone.
	if !p.a.tr.AcksPending() {
		t.Fatal("no acknowledgement pending at A")
	}
	p.poll(t)
	p.poll(t)
	if sa := p.a.tr.Stats(); sa.AckFrames != 1 || p.b.tr.Unacked(hostA) != 0 || p.a.tr.AcksPending() {
		t.Fatalf("after the flush: A %+v, unacked at B %d", sa, p.b.tr.Unacked(hostA))
	}
	checkExactlyOnce(t, p.b, hostA, rounds)
	checkExactlyOnce(t, p.a, hostB, rounds)
}

// AckDelay holds an acknowledgement for at least that long, and FlushAcks
// sends it at once.
func TestAckDelay(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{AckDelay: time.Millisecond})
	if err := p.a.tr.Send(hostB, payload(1, 60), 0); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		p.poll(t)
	}
	if p.a.tr.Unacked(hostB) != 1 {
		t.Fatal("acknowledged before AckDelay")
	}
	p.clk.Advance(time.Millisecond)
	p.poll(t)
	p.poll(t)
	if p.a.tr.Unacked(hostB) != 0 {
		t.Fatal("not acknowledged after AckDelay")
	}
	if err := p.a.tr.Send(hostB, payload(2, 60), 0); err != nil {
		t.Fatal(err)
	}
	p.poll(t)
	if err := p.b.tr.FlushAcks(); err != nil {
		t.Fatal(err)
	}
	p.poll(t)
	if p.a.tr.Unacked(hostB) != 0 || p.b.tr.Stats().AckFrames != 2 {
		t.Fatalf("FlushAcks: unacked %d, B %+v", p.a.tr.Unacked(hostB), p.b.tr.Stats())
	}
}

// AckSoon holds a message's acknowledgement for a DATA frame the other
// way for at most AckSoonDelay, however long the AckDelay; with no
// AckSoonDelay it is AckNow.
func TestAckSoon(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{AckDelay: time.Hour, AckSoonDelay: time.Millisecond})
	p.b.accepted = (*Transport).AckSoon
	send := func(from, to *end, dst HostID, n uint32) {
		t.Helper()
		if err := from.tr.Send(dst, payload(n, 60), 0); err != nil {
			t.Fatal(err)
		}
	}
	send(p.a, p.b, hostB, 0)
	for range 5 {
		p.poll(t)
	}
	if p.a.tr.Unacked(hostB) != 1 || p.b.tr.Stats().AckFrames != 0 {
		t.Fatalf("acknowledged before AckSoonDelay: B %+v", p.b.tr.Stats())
	}
	// B's next message to A carries it.
	send(p.b, p.a, hostA, 0)
	p.poll(t)
	if sb := p.b.tr.Stats(); p.a.tr.Unacked(hostB) != 0 || sb.AckFrames != 0 || sb.AcksPiggybacked != 1 {
		t.Fatalf("the next message did not carry it: unacked %d, B %+v", p.a.tr.Unacked(hostB), sb)
	}
	// Nothing to carry it: it leaves alone once AckSoonDelay has passed.
	send(p.a, p.b, hostB, 1)
	for range 5 {
		p.poll(t)
	}
	if p.a.tr.Unacked(hostB) != 1 {
		t.Fatal("acknowledged before AckSoonDelay")
	}
	p.clk.Advance(time.Millisecond)
	p.poll(t)
	p.poll(t)
	if p.a.tr.Unacked(hostB) != 0 || p.b.tr.Stats().AckFrames != 1 {
		t.Fatalf("after AckSoonDelay: unacked %d, B %+v", p.a.tr.Unacked(hostB), p.b.tr.Stats())
	}
	checkExactlyOnce(t, p.b, hostA, 2)

	// Without an AckSoonDelay, AckSoon is AckNow: the end of the next Poll.
	q := newPair(t, memlink.Options{}, Config{AckDelay: time.Hour})
	q.b.accepted = (*Transport).AckSoon
	send(q.a, q.b, hostB, 0)
	for range 3 {
		q.poll(t)
	}
	if q.a.tr.Unacked(hostB) != 0 || q.b.tr.Stats().AckFrames != 1 {
		t.Fatalf("no AckSoonDelay: unacked %d, B %+v", q.a.tr.Unacked(hostB), q.b.tr.Stats())
	}
}

// With an AckDelay, a one-way stream is acknowledged once half the peer's
// channels are owed one, not after the delay: the sender is never left
// with no channel free for the whole delay.
func TestAckDelayHalfWindow(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 8, AckDelay: time.Hour})
	for i := range 3 {
		if err := p.a.tr.Send(hostB, payload(uint32(i), 60), 0); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		p.poll(t)
	}
	if n := p.a.tr.Unacked(hostB); n != 3 || p.b.tr.Stats().AckFrames != 0 {
		t.Fatalf("3 of 8 channels owed: %d unacknowledged, B %+v; want all 3 held", n, p.b.tr.Stats())
	}
	if err := p.a.tr.Send(hostB, payload(3, 60), 0); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p.poll(t)
	}
	if n := p.a.tr.Unacked(hostB); n != 0 || p.b.tr.Stats().AckFrames != 1 {
		t.Fatalf("4 of 8 channels owed: %d unacknowledged, B %+v; want one ACK frame for all", n, p.b.tr.Stats())
	}
	checkExactlyOnce(t, p.b, hostA, 4)
}

// On a link whose frames carry more than DefaultMaxPayload (a jumbo or
// multi-buffer MTU) MaxPayload defaults to MaxPayloadLimit, and messages
// of that size, two frames each, arrive exactly once under loss; FrameRoom
// is what one frame carries with every acknowledgement.
func TestMaxPayloadFollowsMTU(t *testing.T) {
	const count = 300
	for _, c := range []struct {
		mtu, want int
	}{
		{1500, DefaultMaxPayload},
		{9000, DefaultMaxPayload},  // 169 cells: 8052 bytes a frame
		{9800, MaxPayloadLimit(4)}, // 184 cells: 8788 bytes
		{65522, MaxPayloadLimit(4)},
	} {
		t.Run(fmt.Sprint(c.mtu), func(t *testing.T) {
			p := newPair(t, memlink.Options{MTU: c.mtu, Loss: 0.05, Seed: 5}, Config{Channels: 4, RetransmitAfter: 10 * time.Millisecond})
			if got := p.a.tr.MaxPayload(); got != c.want {
				t.Fatalf("MaxPayload %d at MTU %d, want %d", got, c.mtu, c.want)
			}
			fr := p.a.tr.FrameRoom()
			if want := cells.CellsPerFrame(c.mtu)*cells.PayloadSize - cells.TrailerSize - headerLen - 4*ackEntryLen; fr != want {
				t.Fatalf("FrameRoom %d, want %d", fr, want)
			}
			if c.mtu < 9800 {
				return
			}
			p.transfer(t, count, p.a.tr.MaxPayload(), 10*time.Millisecond, p.a, p.b)
			checkExactlyOnce(t, p.b, hostA, count)
			if sa := p.a.tr.Stats(); sa.Retransmits == 0 {
				t.Errorf("A %+v", sa)
			}
		})
	}
	if err := (Config{MaxPayload: MaxPayloadLimit(8) + 1}).withDefaults().check(nil); err == nil {
		t.Error("MaxPayload past the limit accepted")
	}
}

// Messages up to MaxPayload span several frames; under loss each is still
// delivered exactly once, and a message that lost a frame is dropped whole
// when the next one starts.
func TestMultiFrameLoss(t *testing.T) {
	const count = 1500
	p := newPair(t, memlink.Options{Loss: 0.05, Seed: 11}, Config{Channels: 4, RetransmitAfter: 10 * time.Millisecond})
	if got := p.a.tr.MaxPayload(); got != DefaultMaxPayload {
		t.Fatalf("MaxPayload %d, want %d", got, DefaultMaxPayload)
	}
	p.transfer(t, count, p.a.tr.MaxPayload(), 10*time.Millisecond, p.a, p.b)
	checkExactlyOnce(t, p.b, hostA, count)
	checkExactlyOnce(t, p.a, hostB, count)
	sa, sb := p.a.tr.Stats(), p.b.tr.Stats()
	if sa.Retransmits == 0 || sb.Abandoned == 0 || sa.Acked != count || sb.Acked != count {
		t.Errorf("A %+v B %+v", sa, sb)
	}
	t.Logf("A %+v", sa)
}

// Unreliable transports send at once, keep nothing and acknowledge
// nothing: under loss messages are simply lost.
func TestUnreliable(t *testing.T) {
	p := newPair(t, memlink.Options{Loss: 0.2, Seed: 5}, Config{Unreliable: true, Channels: 1})
	const count = 1000
	for n := range uint32(count) {
		if err := p.a.tr.Send(hostB, payload(n, 300), 0); err != nil {
			t.Fatal(err) // never ErrBusy, though there is one channel
		}
		p.poll(t)
	}
	p.poll(t)
	sa, sb := p.a.tr.Stats(), p.b.tr.Stats()
	got := len(p.b.got[hostA][0])
	if got == count || got < count/2 || sb.Delivered != uint64(got) || sa.Sent != count {
		t.Fatalf("delivered %d of %d: A %+v B %+v", got, count, sa, sb)
	}
	if sa.Retransmits+sa.Acked+sb.AckFrames+sb.AcksPiggybacked != 0 || p.a.tr.Unacked(hostB) != 0 {
		t.Fatalf("reliability at work: A %+v B %+v", sa, sb)
	}
}

// SetPeers replaces the host table: a host that stays keeps its messages
// in flight under its new id; one that leaves has them returned at once.
func TestSetPeers(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 4})
	macB := p.b.link.HardwareAddr()
	for n := range uint32(3) {
		if err := p.a.tr.Send(hostB, payload(n, 100), uint64(n)); err != nil {
			t.Fatal(err)
		}
	}
	const moved = HostID(7)
	if err := p.a.tr.SetPeers(map[HostID]net.HardwareAddr{moved: macB, hostA: p.a.link.HardwareAddr()}); err != nil {
		t.Fatal(err)
	}
	if err := p.a.tr.Send(hostB, payload(9, 100), 9); !errors.Is(err, ErrUnknownHost) {
		t.Fatalf("send to the old id: %v", err)
	}
	for range 10 {
		p.poll(t)
	}
	checkExactlyOnce(t, p.b, hostA, 3)
	if s := p.a.tr.Stats(); s.Acked != 3 || len(p.a.returned) != 0 || p.a.tr.Unacked(moved) != 0 {
		t.Fatalf("after the move: stats %+v, returned %v", s, p.a.returned)
	}
	// B leaves the table with two messages in flight.
	for n := uint32(3); n < 5; n++ {
		if err := p.a.tr.Send(moved, payload(n, 100), uint64(n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.a.tr.SetPeers(nil); err != nil {
		t.Fatal(err)
	}
	if len(p.a.returned) != 2 || p.a.returned[0].dst != moved || !errors.Is(p.a.returned[1].err, ErrUnreachable) {
		t.Fatalf("returned %+v, want messages 3 and 4 from host %d", p.a.returned, moved)
	}
	if err := p.a.tr.Send(moved, payload(5, 100), 5); !errors.Is(err, ErrUnknownHost) {
		t.Fatalf("send to a host that left: %v", err)
	}
	for _, bad := range []map[HostID]net.HardwareAddr{
		{1: macB, 2: macB},
		{1: net.HardwareAddr{1, 2, 3}},
	} {
		if err := p.a.tr.SetPeers(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("SetPeers(%v) = %v, want ErrConfig", bad, err)
		}
	}
}

// TestForgedCircuitsDoNotWedge: one frame from the peer's MAC whose cells
// open PDUs on four made-up circuits and never end them costs at most the
// PDU in progress: the real circuit's PDUs are delivered after it, exactly
// once. Before, the frame filled the peer's reassembler (four circuits) and
// every later PDU of the peer was refused, for good.
func TestForgedCircuitsDoNotWedge(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 2})
	var cs []byte
	for vci := uint16(100); vci < 104; vci++ {
		pdu, err := cells.Segment(cells.SAR{VCI: vci}, make([]byte, 200))
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, pdu[:cells.CellSize]...) // a first cell, no end
	}
	forged, err := (&cells.Framer{Dst: p.a.link.HardwareAddr(), Src: p.b.link.HardwareAddr()}).Append(nil, cs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.b.link.Send([][]byte{forged}); err != nil {
		t.Fatal(err)
	}
	p.transfer(t, 200, 300, time.Millisecond, p.b)
	checkExactlyOnce(t, p.a, hostB, 200)
}

// fillPayload is a Filler of message n (payload), counting its calls.
type fillPayload struct {
	n, maxLen uint32
	calls     int
}

func (f *fillPayload) Fill(b []byte) {
	f.calls++
	copy(b, payload(f.n, int(f.maxLen)))
}

// SendToFill sends what its Filler writes into the transport's buffer,
// retransmitted under loss as any message is; a message that finds no
// channel (ErrBusy) or does not fit (ErrTooLarge) is never filled.
func TestSendToFill(t *testing.T) {
	const count, maxLen = 200, 5000
	p := newPair(t, memlink.Options{Loss: 0.1, Seed: 3}, Config{Channels: 2, RetransmitAfter: 10 * time.Millisecond})
	peer := p.a.tr.Peer(hostB)
	busy := false
	for n := uint32(0); n < count; {
		f := &fillPayload{n: n, maxLen: maxLen}
		err := p.a.tr.SendToFill(peer, len(payload(n, maxLen)), f, uint64(n))
		switch {
		case errors.Is(err, ErrBusy):
			busy = true
			if f.calls != 0 {
				t.Fatalf("message %d filled %d times with ErrBusy", n, f.calls)
			}
			if !p.poll(t) {
				p.clk.Advance(time.Millisecond)
			}
			continue
		case err != nil:
			t.Fatal(err)
		case f.calls != 1:
			t.Fatalf("message %d filled %d times", n, f.calls)
		}
		n++
	}
	for p.a.tr.Unacked(hostB) > 0 {
		if !p.poll(t) {
			p.clk.Advance(time.Millisecond)
		}
	}
	checkExactlyOnce(t, p.b, hostA, count)
	if st := p.a.tr.Stats(); !busy || st.Retransmits == 0 {
		t.Errorf("busy %v, stats %+v: want both ErrBusy and retransmissions", busy, st)
	}
	f := &fillPayload{n: 1, maxLen: maxLen}
	if err := p.a.tr.SendToFill(peer, p.a.tr.MaxPayload()+1, f, 0); !errors.Is(err, ErrTooLarge) || f.calls != 0 {
		t.Errorf("an oversize message: %v, filled %d times", err, f.calls)
	}
}
