package transport

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
)

// forgedBase marks forged messages: no real host of these tests sends a
// message numbered forgedBase or above.
const forgedBase = 1 << 30

// Kinds of forged PDUs (forger).
const (
	forgeData    = iota // DATA, both epochs right
	forgeCompact        // compact DATA, both epochs right
	forgeZero           // DATA, destination epoch 0
	forgeAck            // ACK, both epochs right, with acknowledgement entries
	forgeNack           // NACK, both epochs right, a random stamp
	forgeClaim          // DATA from a made-up epoch naming the receiver's: a restart claim
	forgeKinds
)

// forger makes the frames that a host on the segment sends to host dst
// under the address of its peer src, knowing both hosts' epochs (read from
// the real hosts) but not their channels' sequence numbers, which it
// sweeps: each kind of PDU on each channel starts at a random number and
// counts up, through all 2^16 if it goes on long enough. Its DATA
// messages are numbered from forgedBase.
type forger struct {
	dst, src           net.HardwareAddr
	dstEpoch, srcEpoch uint32
	channels           int
	rng                *rand.Rand
	seq                [forgeKinds][]uint16
	n                  uint32 // messages forged
	i                  int    // PDUs forged
	pdus               [forgeKinds]int
}

func newForger(dst, src net.HardwareAddr, dstEpoch, srcEpoch uint32, channels int, seed uint64) *forger {
	f := &forger{dst: dst, src: src, dstEpoch: dstEpoch, srcEpoch: srcEpoch, channels: channels,
		rng: rand.New(rand.NewPCG(seed, 0xf04))}
	for k := range f.seq {
		f.seq[k] = make([]uint16, channels)
		for ch := range f.seq[k] {
			f.seq[k][ch] = uint16(f.rng.Uint32())
		}
	}
	return f
}

// next returns the next sequence number of kind k's sweep on channel ch.
func (f *forger) next(k, ch int) uint16 {
	s := f.seq[k][ch]
	f.seq[k][ch]++
	return s
}

// body returns the payload of a new forged message.
func (f *forger) body() []byte {
	f.n++
	return payload(forgedBase+f.n, 28)
}

// frame returns a frame of forged PDUs and compact cells, as many as the
// MTU allows, half of them DATA with both epochs right, the others of the
// other kinds in turn.
func (f *forger) frame(mtu int) ([]byte, error) {
	room := cells.CellsPerFrame(mtu)
	var cs []byte
	for len(cs)/cells.CellSize+2 <= room {
		k := forgeData
		if f.i%2 == 1 {
			k = 1 + f.i/2%(forgeKinds-1)
		}
		f.i++
		f.pdus[k]++
		ch := f.i / 2 % f.channels
		var sdu []byte
		switch k {
		case forgeData, forgeZero:
			dst := f.dstEpoch
			if k == forgeZero {
				dst = 0
			}
			body := f.body()
			sdu = make([]byte, headerLen+len(body))
			(*header)(sdu).put(typeData, ch, f.next(k, ch), f.rng.Uint32(), len(body), f.srcEpoch, dst)
			copy(sdu[headerLen:], body)
		case forgeCompact:
			body := f.body()
			var h header
			h.put(typeData, ch, f.next(k, ch), f.rng.Uint32()&0xffff, len(body), f.srcEpoch, f.dstEpoch)
			cs = append(cs, compactCell(&h, body)...)
			continue
		case forgeAck:
			const entries = 8
			sdu = make([]byte, headerLen+ackEntryLen*entries)
			(*header)(sdu).put(typeAck, ch, f.next(k, ch), f.rng.Uint32(), 0, f.srcEpoch, f.dstEpoch)
			(*header)(sdu).setAcks(entries)
			for i := range entries {
				c := (ch + 1 + i) % f.channels
				putAck(sdu[headerLen:], i, c, f.next(k, c))
			}
		case forgeNack:
			sdu = make([]byte, headerLen)
			(*header)(sdu).put(typeNack, ch, f.next(k, ch), f.rng.Uint32(), 0, f.srcEpoch, f.dstEpoch)
		case forgeClaim:
			body := f.body()
			sdu = make([]byte, headerLen+len(body))
			(*header)(sdu).put(typeData, ch, 0, f.rng.Uint32(), len(body), f.rng.Uint32()|1, f.dstEpoch)
			copy(sdu[headerLen:], body)
		}
		pdu, err := cells.Segment(cells.SAR{VCI: DefaultVCI}, sdu)
		if err != nil {
			return nil, err
		}
		cs = append(cs, pdu...)
	}
	return (&cells.Framer{Dst: f.dst, Src: f.src}).Append(nil, cs)
}

// forgedDelivered returns how many forged messages e delivered.
func forgedDelivered(e *end) int {
	n := 0
	for _, chs := range e.got {
		for _, ns := range chs {
			for _, m := range ns {
				if m >= forgedBase {
					n++
				}
			}
		}
	}
	return n
}

// checkForgeries checks p's hosts after count real messages each way ran
// under a forger that knew both epochs: no forged message was delivered,
// each real one exactly once and in order per channel, none returned, no
// restart believed, and the forgeries refused and counted: with
// destination epoch 0, with a made-up epoch, and the first with both
// epochs right and a sequence number out of the window, after which the
// destination epoch was renewed and the forger's epochs were stale.
func checkForgeries(t *testing.T, p *pair, count int) {
	t.Helper()
	for _, e := range []*end{p.a, p.b} {
		if n := forgedDelivered(e); n > 0 {
			t.Fatalf("%d forged messages delivered: A %+v\nB %+v", n, p.a.tr.Stats(), p.b.tr.Stats())
		}
	}
	for _, e := range []*end{p.a, p.b} {
		for _, r := range e.returned {
			t.Errorf("message %d to host %d came back: %v", r.n, r.dst, r.err) // and is not delivered
		}
	}
	checkExactlyOnce(t, p.b, hostA, count)
	checkExactlyOnce(t, p.a, hostB, count)
	for _, e := range []*end{p.a, p.b} {
		s := e.tr.Stats()
		if len(e.returned) != 0 || s.Restarts != 0 {
			t.Errorf("returned %d, %+v", len(e.returned), s)
		}
		if s.ZeroEpoch == 0 || s.Unconfirmed == 0 || s.StaleEpoch == 0 || s.Renewals == 0 ||
			s.OutOfWindow+s.ForgedAcks != s.Renewals {
			t.Errorf("forgeries not refused as such: %+v", s)
		}
	}
}

// TestForgerWithEpochs: while the hosts exchange messages both ways over
// memlink (2% of frames lost), a forger that knows both hosts' addresses
// and epochs sends each, under the other's address, frames full of forged
// PDUs: DATA frames with destination epoch 0, DATA frames (and compact
// cells) with both epochs right sweeping all 2^16 sequence numbers of every
// channel, ACK frames sweeping acknowledgements, NACKs, and restart claims
// that name the receiver's epoch. No forged message is delivered, every
// real one exactly once and in order, and the refusals are counted. The
// forger has one chance to be lucky per host: its first frame with both
// epochs right and a DATA or ACK sequence number must fall in the window
// of its channel (6 numbers of 2^16, lateWindow+2), or the host renews its
// destination epoch; the test would fail with probability under 2*6/2^16
// = 1.8e-4 (memlink being deterministic, with its seeds it passes).
// Before epochs were both required and sequence numbers checked against
// the windows, DATA frames with destination epoch 0 were taken, a sweep
// that met the expected number delivered a forged message and went on
// delivering (the expected number follows it), and a claim naming the
// receiver's epoch restarted the channels and returned the real messages
// in flight.
func TestForgerWithEpochs(t *testing.T) {
	const count = 3000
	p := newPair(t, memlink.Options{Loss: 0.02, Seed: 13, Depth: 1 << 14}, Config{Channels: 4})
	mtu := p.a.link.MTU()
	toA := newForger(p.a.link.HardwareAddr(), p.b.link.HardwareAddr(), p.a.tr.epoch, p.b.tr.epoch, 4, 1)
	toB := newForger(p.b.link.HardwareAddr(), p.a.link.HardwareAddr(), p.b.tr.epoch, p.a.tr.epoch, 4, 2)
	// Ten frames each way per round, fewer than a Poll takes in: the
	// forger never fills a receive queue. Time moves on every round, as
	// frames always arrive.
	const perRound = 10
	frames := make([][]byte, perRound)
	forge := func(l afxdp.Link, f *forger) {
		for i := range frames {
			fr, err := f.frame(mtu)
			if err != nil {
				t.Fatal(err)
			}
			frames[i] = fr
		}
		if _, err := l.Send(frames); err != nil {
			t.Fatal(err)
		}
	}
	started := false
	p.between = func() {
		// Once each host has taken messages in, each has named the
		// other's epoch: the forger begins.
		if !started && (deliveredFrom(p.a, hostB) < 8 || deliveredFrom(p.b, hostA) < 8) {
			return
		}
		started = true
		forge(p.b.link, toA)
		forge(p.a.link, toB)
		p.clk.Advance(100 * time.Microsecond)
	}
	p.transfer(t, count, 100, time.Millisecond, p.a, p.b)
	checkForgeries(t, p, count)
	for _, f := range []*forger{toA, toB} {
		if f.pdus[forgeData] < 4<<16 {
			t.Errorf("%d DATA PDUs with both epochs right: not every sequence number of every channel swept", f.pdus[forgeData])
		}
	}
	t.Logf("forged PDUs to A %v (data, compact, zero, ack, nack, claim), A %+v", toA.pdus, p.a.tr.Stats())
}

// injector sends hand-made frames to A of p under B's address, lets A take
// them in, and takes what A sent B off B's link (B's transport never sees
// it), as PDUs.
type injector struct {
	t *testing.T
	p *pair
}

func (in injector) send(frames ...[]byte) []tpdu {
	in.t.Helper()
	if _, err := in.p.b.link.Send(frames); err != nil {
		in.t.Fatal(err)
	}
	if _, err := in.p.a.tr.Poll(); err != nil {
		in.t.Fatal(err)
	}
	var out []tpdu
	rx := make([][]byte, 64)
	for {
		n, err := in.p.b.link.Recv(rx)
		if err != nil {
			in.t.Fatal(err)
		}
		if n == 0 {
			return out
		}
		for _, f := range rx[:n] {
			out = append(out, framePDUs(in.t, f)...)
		}
	}
}

// framePDUs decodes every PDU and compact cell of a transport frame.
func framePDUs(tb testing.TB, f []byte) []tpdu {
	tb.Helper()
	cs, _, err := cells.Unpack(f, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var out []tpdu
	r := cells.NewReassembler(cells.ReassemblerConfig{})
	for o := 0; o < len(cs); o += cells.CellSize {
		c := cells.Cell(cs[o : o+cells.CellSize])
		if c.VCI() == DefaultVCI+1 {
			if next := o + cells.CellSize; next < len(cs) && cs[next+cells.HeaderSize] == typeCompactMore {
				out = append(out, compactPDU(tb, c, cells.Cell(cs[next:next+cells.CellSize])))
				o = next
				continue
			}
			out = append(out, compactPDU(tb, c))
			continue
		}
		r.PushCells(c, func(pdu cells.PDU, err error) {
			if err != nil || !valid(pdu.SDU, MaxChannels) {
				tb.Fatalf("bad PDU %+v: %v", pdu, err)
			}
			out = append(out, append(tpdu(nil), pdu.SDU...))
		})
	}
	return out
}

// resetWant returns the destination epoch a RESET asks for.
func resetWant(h tpdu) uint32 { return binary.BigEndian.Uint32(h[headerLen:]) }

// warmPair returns a pair over memlink that has exchanged messages 0..9
// both ways: each host has named the other's epoch, and nothing is in
// flight or owed.
func warmPair(t *testing.T) (*pair, injector) {
	p := newPair(t, memlink.Options{}, Config{Channels: 2, AckDelay: -1})
	p.exchange(t, p.a, hostB, numbers(0, 10))
	p.exchange(t, p.b, hostA, numbers(0, 10))
	for range 3 {
		p.poll(t)
	}
	return p, injector{t, p}
}

// TestZeroEpochRefused: once a peer has named this host's epoch, a frame
// from it with destination epoch 0 is refused, though its sequence
// number is the expected one, and answered with a RESET that tells the
// peer's address what to name.
func TestZeroEpochRefused(t *testing.T) {
	p, in := warmPair(t)
	macA, macB := p.a.link.HardwareAddr(), p.b.link.HardwareAddr()
	eA, eB := p.a.tr.epoch, p.b.tr.epoch
	expect := p.a.tr.Peer(hostB).recv[0].expect
	before := p.a.tr.Stats()
	out := in.send(epochFrame(t, macA, macB, typeData, 0, expect, 1, eB, 0, payload(forgedBase, 50)))
	s := p.a.tr.Stats()
	if s.ZeroEpoch != 1 || s.Delivered != before.Delivered || s.Renewals != 0 || forgedDelivered(p.a) != 0 {
		t.Fatalf("stats %+v", s)
	}
	if len(out) != 1 || out[0].typ() != typeReset || out[0].dst() != eB || resetWant(out[0]) != eA {
		t.Fatalf("answered %v", out)
	}
	// An ACK with destination epoch 0 is refused too, unanswered.
	if out := in.send(epochFrame(t, macA, macB, typeAck, 0, 0, 1, eB, 0, nil)); len(out) != 0 || p.a.tr.Stats().ZeroEpoch != 2 {
		t.Fatalf("answered %v, stats %+v", out, p.a.tr.Stats())
	}
	p.exchange(t, p.b, hostA, numbers(10, 20))
	checkExactlyOnce(t, p.a, hostB, 20)
}

// TestOutOfWindowRenews: a DATA frame with both epochs right is taken only
// with its channel's expected number (delivered) or the one before (a
// duplicate, acknowledged again); a few numbers further behind are late
// copies, dropped quietly; any other number is a forgery: the frame is
// dropped, and the host renews the destination epoch it asks of the peer,
// which a RESET to the peer's address tells. Frames naming the old one are
// then refused, the expected sequence number no longer helps, and the
// real peer, told by the RESET that answers its next frame, goes on.
func TestOutOfWindowRenews(t *testing.T) {
	p, in := warmPair(t)
	macA, macB := p.a.link.HardwareAddr(), p.b.link.HardwareAddr()
	eA, eB := p.a.tr.epoch, p.b.tr.epoch
	expect := p.a.tr.Peer(hostB).recv[0].expect
	forged := func(seq uint16, dst uint32) []byte {
		return epochFrame(t, macA, macB, typeData, 0, seq, 1, eB, dst, payload(forgedBase+uint32(seq), 50))
	}
	if out := in.send(forged(expect-1-lateWindow, eA)); len(out) != 0 || p.a.tr.Stats().Late != 1 {
		t.Fatalf("a late copy: answered %v, stats %+v", out, p.a.tr.Stats())
	}
	if out := in.send(forged(expect-1, eA)); len(out) != 1 || out[0].typ() != typeAck || p.a.tr.Stats().Duplicates != 1 {
		t.Fatalf("a duplicate: answered %v, stats %+v", out, p.a.tr.Stats())
	}
	out := in.send(forged(expect-2-lateWindow, eA))
	s := p.a.tr.Stats()
	if s.OutOfWindow != 1 || s.Renewals != 1 || len(out) != 1 || out[0].typ() != typeReset || out[0].dst() != eB {
		t.Fatalf("out of the window: answered %v, stats %+v", out, s)
	}
	renewed := resetWant(out[0])
	if renewed == eA || renewed == 0 || p.a.tr.Peer(hostB).dstIn != renewed {
		t.Fatalf("renewed to %#x, epoch %#x", renewed, eA)
	}
	// The expected number, naming the old destination epoch: refused, and
	// not answered, the RESET that told B having just gone; once a scan
	// interval has passed, answered again.
	out = in.send(forged(expect, eA), forged(expect+1, eA))
	if s := p.a.tr.Stats(); s.StaleEpoch != 2 || s.Delivered != 10 || len(out) != 0 {
		t.Fatalf("after the renewal: answered %v, stats %+v", out, s)
	}
	p.clk.Advance(p.a.tr.Config().ScanInterval)
	out = in.send(forged(expect, eA), forged(expect+1, eA))
	if s := p.a.tr.Stats(); s.StaleEpoch != 4 || s.Delivered != 10 || len(out) != 1 || resetWant(out[0]) != renewed {
		t.Fatalf("a scan interval later: answered %v, stats %+v", out, s)
	}
	if forgedDelivered(p.a) != 0 {
		t.Fatal("a forged message was delivered")
	}
	// B has not seen the RESETs (taken off its link): its next frames are
	// refused and answered, and then taken.
	p.exchange(t, p.b, hostA, numbers(10, 30))
	p.exchange(t, p.a, hostB, numbers(10, 30))
	checkExactlyOnce(t, p.a, hostB, 30)
	checkExactlyOnce(t, p.b, hostA, 30)
	if s := p.b.tr.Stats(); s.Renewals != 0 || p.b.tr.Peer(hostA).dstOut != renewed {
		t.Errorf("B names A %#x, want %#x: %+v", p.b.tr.Peer(hostA).dstOut, renewed, s)
	}
}

// TestForgedAcksRefused: an acknowledgement must name the message its
// channel has in flight, or one just before: a frame that carries any
// other is a forgery and is dropped whole, its other acknowledgements and
// its DATA included, even where they were right.
func TestForgedAcksRefused(t *testing.T) {
	p, in := warmPair(t)
	macA, macB := p.a.link.HardwareAddr(), p.b.link.HardwareAddr()
	eA, eB := p.a.tr.epoch, p.b.tr.epoch
	if err := p.a.tr.Send(hostB, payload(10, 50), 10); err != nil {
		t.Fatal(err)
	}
	pb := p.a.tr.Peer(hostB)
	ch := 0
	for !pb.send[ch].inUse {
		ch++
	}
	seq, other := pb.send[ch].seq, &pb.send[1-ch]
	expect := pb.recv[0].expect
	// A DATA frame with the expected number that acknowledges the message
	// in flight, and a message the other channel has not sent yet.
	body := payload(forgedBase, 50)
	sdu := make([]byte, headerLen+2*ackEntryLen+len(body))
	(*header)(sdu).put(typeData, 0, expect, 1, len(body), eB, eA)
	(*header)(sdu).setAcks(2)
	putAck(sdu[headerLen:], 0, ch, seq)
	putAck(sdu[headerLen:], 1, 1-ch, other.seq)
	copy(sdu[headerLen+2*ackEntryLen:], body)
	cs, err := cells.Segment(cells.SAR{VCI: DefaultVCI}, sdu)
	if err != nil {
		t.Fatal(err)
	}
	f, err := (&cells.Framer{Dst: macA, Src: macB}).Append(nil, cs)
	if err != nil {
		t.Fatal(err)
	}
	in.send(f)
	s := p.a.tr.Stats()
	if s.ForgedAcks != 1 || s.Renewals != 1 || s.Delivered != 10 || p.a.tr.Unacked(hostB) != 1 || forgedDelivered(p.a) != 0 {
		t.Fatalf("stats %+v, unacked %d", s, p.a.tr.Unacked(hostB))
	}
	// An ACK frame of a message far ahead, naming the renewed destination
	// epoch (as a forger that learnt it would): refused as well.
	in.send(epochFrame(t, macA, macB, typeAck, ch, seq+100, 1, eB, pb.dstIn, nil))
	if s := p.a.tr.Stats(); s.ForgedAcks != 2 || s.Renewals != 2 || p.a.tr.Unacked(hostB) != 1 {
		t.Fatalf("stats %+v", s)
	}
	// The real message gets through, and B's acknowledgement frees it.
	p.exchange(t, p.a, hostB, nil)
	checkExactlyOnce(t, p.b, hostA, 11)
}

// TestRestartClaimChallenged: a frame from a new epoch that names this
// host's epoch (as a restarted peer's would, and a forger's that knows
// the epochs) changes nothing; it is answered, to the peer's address, with
// a RESET that carries the challenge for the new epoch. A frame from that
// epoch naming the challenge (the restarted peer's, which got the RESET)
// is believed: a restart.
func TestRestartClaimChallenged(t *testing.T) {
	p, in := warmPair(t)
	macA, macB := p.a.link.HardwareAddr(), p.b.link.HardwareAddr()
	eA, eB := p.a.tr.epoch, p.b.tr.epoch
	if err := p.a.tr.Send(hostB, payload(10, 50), 10); err != nil {
		t.Fatal(err)
	}
	if n, err := p.b.link.Recv(make([][]byte, 4)); err != nil || n != 1 {
		t.Fatalf("Recv = %d, %v", n, err) // the message never reaches B
	}
	claimed := eB + 1
	out := in.send(epochFrame(t, macA, macB, typeData, 0, 0, 1, claimed, eA, payload(forgedBase, 50)))
	s := p.a.tr.Stats()
	if s.Unconfirmed != 1 || s.Restarts != 0 || s.Returned != 0 || s.Delivered != 10 || p.a.tr.Unacked(hostB) != 1 {
		t.Fatalf("a claim: stats %+v", s)
	}
	if len(out) != 1 || out[0].typ() != typeReset || out[0].dst() != claimed {
		t.Fatalf("answered %v", out)
	}
	challenge := resetWant(out[0])
	if challenge == eA || challenge != p.a.tr.challenge(p.a.tr.Peer(hostB), claimed) {
		t.Fatalf("challenge %#x", challenge)
	}
	// A RESET claim is answered too, but RESETs go to a host at most once
	// per scan interval.
	reset := func() []byte {
		sdu := make([]byte, headerLen+resetLen)
		(*header)(sdu).put(typeReset, 0, 0, 1, resetLen, claimed, eA)
		binary.BigEndian.PutUint32(sdu[headerLen:], claimed)
		cs, err := cells.Segment(cells.SAR{VCI: DefaultVCI}, sdu)
		if err != nil {
			t.Fatal(err)
		}
		f, err := (&cells.Framer{Dst: macA, Src: macB}).Append(nil, cs)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if out := in.send(reset()); len(out) != 0 {
		t.Fatalf("a RESET claim at once: answered %v", out)
	}
	p.clk.Advance(p.a.tr.Config().ScanInterval)
	if out := in.send(reset(), reset()); len(out) != 1 || resetWant(out[0]) != challenge {
		t.Fatalf("RESET claims answered %v", out)
	}
	if s := p.a.tr.Stats(); s.Unconfirmed != 4 || s.Restarts != 0 {
		t.Fatalf("RESET claims: stats %+v", s)
	}
	// The restarted peer names the challenge: believed.
	in.send(epochFrame(t, macA, macB, typeData, 0, 0, 1, claimed, challenge, payload(100, 50)))
	s = p.a.tr.Stats()
	if s.Restarts != 1 || s.Returned != 1 || s.Delivered != 11 || p.a.tr.Peer(hostB).Epoch() != claimed {
		t.Fatalf("the answer: stats %+v", s)
	}
}
