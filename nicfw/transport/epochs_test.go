package transport

import (
	"errors"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
)

// exchange sends the messages numbered in nums from e to dst, polling both
// ends of p (advancing its manual clock when nothing moves, or waiting on
// the system clock), until none is unacknowledged.
func (p *pair) exchange(tb testing.TB, e *end, dst HostID, nums []uint32) {
	tb.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(nums) > 0 || e.tr.Unacked(dst) > 0 {
		if time.Now().After(deadline) {
			tb.Fatalf("%d unsent, %d unacked after 20 s: A %+v, B %+v", len(nums), e.tr.Unacked(dst), p.a.tr.Stats(), p.b.tr.Stats())
		}
		for len(nums) > 0 {
			err := e.tr.Send(dst, payload(nums[0], 100), uint64(nums[0]))
			if errors.Is(err, ErrBusy) {
				break
			}
			if err != nil {
				tb.Fatal(err)
			}
			nums = nums[1:]
		}
		if !p.poll(tb) && p.clk != nil {
			p.clk.Advance(time.Millisecond)
		}
	}
}

// delivered counts the deliveries of each message number from src at e.
func (e *end) delivered(src HostID) map[uint32]int {
	m := map[uint32]int{}
	for _, ns := range e.got[src] {
		for _, n := range ns {
			m[n]++
		}
	}
	return m
}

func numbers(from, to uint32) []uint32 {
	var ns []uint32
	for n := from; n < to; n++ {
		ns = append(ns, n)
	}
	return ns
}

// restartBody runs on a pair whose B end is on link lb: after traffic both
// ways has moved every channel past sequence number 0, B's transport is
// replaced by a new one on the same link (a restart, quicker than any
// timeout) while three of A's messages are on their way to the old one.
// Those come back to A with ErrRestarted (the new B answers them with
// RESET frames), the new B's messages reach A, A's next ones reach the new
// B, each exactly once, and a late frame of the old B is dropped.
func restartBody(t *testing.T, p *pair, lb afxdp.Link, cfg Config) {
	p.exchange(t, p.a, hostB, numbers(0, 40))
	p.exchange(t, p.b, hostA, numbers(0, 40))
	old := p.b
	first := p.a.tr.Peer(hostB).Incarnation()
	if first == 0 {
		t.Fatal("A numbers B's incarnation 0 after hearing it")
	}

	// Three messages leave A for the old B, which never reads them.
	for n := uint32(100); n < 103; n++ {
		if err := p.a.tr.Send(hostB, payload(n, 100), uint64(n)); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Epoch = old.tr.epoch + 1
	p.b = newEnd(t, lb, p.clk, cfg)
	if err := p.b.tr.AddPeer(hostA, p.a.tr.link.HardwareAddr()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(p.a.returned) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, %d of 3 returned: A %+v, new B %+v", len(p.a.returned), p.a.tr.Stats(), p.b.tr.Stats())
		}
		if !p.poll(t) && p.clk != nil {
			p.clk.Advance(time.Millisecond)
		}
	}
	for _, r := range p.a.returned {
		if !errors.Is(r.err, ErrRestarted) || r.n < 100 || r.n >= 103 {
			t.Errorf("returned %+v, want messages 100..102 with ErrRestarted", r)
		}
	}
	if s := p.b.tr.Stats(); s.ResetsSent == 0 || s.Delivered != 0 {
		t.Errorf("new B: %+v, want RESETs sent and nothing delivered", s)
	}

	// Both ways again: the channels start at 0 on both sides.
	p.exchange(t, p.b, hostA, numbers(200, 240))
	p.exchange(t, p.a, hostB, numbers(300, 340))
	for n, k := range p.a.delivered(hostB) {
		if k != 1 || n >= 40 && (n < 200 || n >= 240) {
			t.Errorf("A: message %d from B delivered %d times", n, k)
		}
	}
	if got := len(p.a.delivered(hostB)); got != 80 {
		t.Errorf("A holds %d messages from B, want 80", got)
	}
	for n, k := range p.b.delivered(hostA) {
		if k != 1 || n < 300 || n >= 340 {
			t.Errorf("new B: message %d from A delivered %d times", n, k)
		}
	}
	if got := len(p.b.delivered(hostA)); got != 40 {
		t.Errorf("new B holds %d messages from A, want 40", got)
	}
	if s := p.a.tr.Stats(); s.Restarts != 1 || s.Returned != 3 {
		t.Errorf("A: %+v, want 1 restart and 3 returned", s)
	}
	if n := p.a.tr.Peer(hostB).Incarnation(); n == 0 || n == first {
		t.Errorf("A numbers B's incarnations %d, then %d: want another, not 0", first, n)
	}

	// A late DATA frame of the old B: dropped, not delivered.
	before := p.a.tr.Stats()
	f := epochFrame(t, p.a.tr.link.HardwareAddr(), lb.HardwareAddr(), typeData, 0, 0, 1, old.tr.epoch, p.a.tr.epoch, payload(999, 100))
	if _, err := lb.Send([][]byte{f}); err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		p.poll(t)
		if p.a.tr.Stats().StaleEpoch > before.StaleEpoch {
			break
		}
	}
	if s := p.a.tr.Stats(); s.StaleEpoch != before.StaleEpoch+1 || s.Delivered != before.Delivered || s.Restarts != 1 {
		t.Errorf("after a late frame of the old B: %+v", s)
	}
}

// TestRestart restarts B's transport over memlink (TestRestartOverAFXDP:
// over AF_XDP).
func TestRestart(t *testing.T) {
	cfg := Config{Channels: 4}
	p := newPair(t, memlink.Options{}, cfg)
	restartBody(t, p, p.b.link, cfg)
}

// TestEpochFrames checks the epochs' edge cases frame by frame: the first
// frame of a peer names its epoch; a frame from a peer with no source
// epoch is malformed; a DATA frame addressed to another epoch of this
// transport is answered with RESET and not delivered.
func TestEpochFrames(t *testing.T) {
	p := newBarePair(t, memlink.Options{}, Config{Channels: 2})
	macA, macB := p.a.link.HardwareAddr(), p.b.link.HardwareAddr()
	inject := func(f []byte) {
		t.Helper()
		if _, err := p.b.link.Send([][]byte{f}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.a.tr.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	hello := p.a.tr.Stats().ResetsSent // AddPeer's, which starts the handshake
	inject(epochFrame(t, macA, macB, typeData, 0, 0, 1, 0, 0, payload(1, 50)))
	if s := p.a.tr.Stats(); s.BadFrames != 1 || s.Delivered != 0 {
		t.Fatalf("source epoch 0: %+v", s)
	}
	inject(epochFrame(t, macA, macB, typeData, 0, 0, 1, 5, p.a.tr.epoch+1, payload(2, 50)))
	if s := p.a.tr.Stats(); s.StaleEpoch != 1 || s.ResetsSent != hello+1 || s.Delivered != 0 {
		t.Fatalf("to another epoch: %+v", s)
	}
	rx := make([][]byte, 4)
	if n, err := p.b.link.Recv(rx); err != nil || n != 1 {
		t.Fatalf("Recv = %d, %v", n, err)
	}
	if h := parseFrame(t, rx[0]); h.typ() != typeReset || h.src() != p.a.tr.epoch || h.dst() != 5 || h.stamp() != 1 {
		t.Fatalf("RESET % x", []byte(h))
	}
	inject(epochFrame(t, macA, macB, typeData, 0, 0, 1, 5, p.a.tr.epoch, payload(3, 50)))
	if s := p.a.tr.Stats(); s.Delivered != 1 || s.Restarts != 0 {
		t.Fatalf("to this epoch: %+v", s)
	}
}

// FuzzTransportSDU feeds A a frame from B that carries any SDU whole, in
// well-formed cells: whatever the transport header says, Poll neither
// panics nor fails, and an SDU that valid refuses is counted as a bad
// frame and nothing else.
func FuzzTransportSDU(f *testing.F) {
	seed := func(typ uint8, ch int, seq uint16, stamp, src, dst uint32, acks int, body []byte) {
		sdu := make([]byte, headerLen+ackEntryLen*acks+len(body))
		(*header)(sdu).put(typ, ch, seq, stamp, len(body), src, dst)
		(*header)(sdu).setAcks(acks)
		for i := range acks {
			putAck(sdu[headerLen:], i, i%2, uint16(i))
		}
		copy(sdu[headerLen+ackEntryLen*acks:], body)
		f.Add(sdu)
	}
	seed(typeData, 0, 0, 1, 9, 0, 0, payload(1, 50))
	seed(typeData, 1, 3, 2, 9, 0, 2, payload(2, 50))
	seed(typeAck, 0, 0, 1, 9, 0, 1, nil)
	seed(typeNack, 1, 0, 1, 9, 0, 0, nil)
	seed(typeReset, 0, 0, 1, 9, 7, 0, nil)
	seed(typeReset, 0, 0, 1, 9, 7, 0, []byte{0, 0, 0, 5})
	seed(typeReset, 0, resetAnswer, 0, 9, 0, 0, []byte{0, 0, 0, 5}) // a hello: the handshake's first RESET
	seed(typeData, 0, 0, 1, 0, 0, 0, payload(3, 50))
	seed(9, 0, 0, 1, 9, 0, 0, nil)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, sdu []byte) {
		if len(sdu) > 4000 {
			return
		}
		la, lb, err := memlink.NewPair(memlink.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer la.Close()
		defer lb.Close()
		a, err := New(la, Config{Channels: 2,
			Deliver:  func(HostID, int, []byte) bool { return true },
			Returned: func(HostID, uint64, []byte, error) {}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.AddPeer(hostB, lb.HardwareAddr()); err != nil {
			t.Fatal(err)
		}
		// A has something in flight to B, for acknowledgements to hit.
		if err := a.Send(hostB, payload(0, 50), 0); err != nil {
			t.Fatal(err)
		}
		cs, err := cells.Segment(cells.SAR{VCI: DefaultVCI}, sdu)
		if err != nil {
			return // empty, or too long for one PDU
		}
		fr := cells.Framer{Dst: la.HardwareAddr(), Src: lb.HardwareAddr()}
		frame, err := fr.Append(nil, cs)
		if err != nil {
			return
		}
		if _, err := lb.Send([][]byte{frame}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Poll(); err != nil {
			t.Fatal(err)
		}
		s := a.Stats()
		if !valid(sdu, 2) && (s.BadFrames != 1 || s.Delivered+s.Acked+s.NacksReceived+s.Restarts != 0) {
			t.Fatalf("an invalid SDU: %+v", s)
		}
		if valid(sdu, 2) && s.BadFrames != 0 {
			t.Fatalf("a valid SDU counted bad: %+v", s)
		}
	})
}

// TestForgedEpochIgnored: frames from the peer's MAC that claim a new epoch
// for it without naming this transport's epoch (ACK and DATA frames with
// made-up epochs, as anyone on the segment can send) change nothing: the
// real peer's traffic goes on exactly once, nothing is returned, and the
// DATA claim is answered with a RESET that the real peer drops. Before,
// each forged frame was taken for the peer's restart (returning what was in
// flight and resetting the channels), and the peer's real frames were then
// dropped as stale.
func TestForgedEpochIgnored(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 2})
	macA, macB := p.a.link.HardwareAddr(), p.b.link.HardwareAddr()
	p.transfer(t, 20, 100, time.Millisecond, p.a) // each knows the other's epoch
	before := p.a.tr.Stats()
	for _, f := range [][]byte{
		epochFrame(t, macA, macB, typeAck, 0, 3, 1, 0x5eed, 0, nil),
		epochFrame(t, macA, macB, typeAck, 1, 3, 1, 0x5eee, 0x1234, nil),
		epochFrame(t, macA, macB, typeData, 0, 9, 1, 0x5eef, 0, payload(9999, 50)),
	} {
		if _, err := p.b.link.Send([][]byte{f}); err != nil {
			t.Fatal(err)
		}
	}
	p.transfer(t, 200, 100, time.Millisecond, p.b)
	checkExactlyOnce(t, p.a, hostB, 200)
	checkExactlyOnce(t, p.b, hostA, 20)
	if s := p.a.tr.Stats(); s.Restarts != 0 || s.Returned != 0 || s.Unconfirmed != 3 || s.ResetsSent != before.ResetsSent+1 {
		t.Errorf("A: %+v", s)
	}
	if s := p.b.tr.Stats(); s.Restarts != 0 || s.Returned != 0 {
		t.Errorf("B: %+v", s)
	}
}
