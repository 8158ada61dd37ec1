package transport

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/clock"
)

var (
	testKey  = []byte("0123456789abcdef")
	otherKey = []byte("fedcba9876543210")
)

// keyed returns cfg with the test key.
func keyed(cfg Config) Config {
	cfg.Key = testKey
	return cfg
}

// TestKeyConfig: a key is 16 or 32 bytes, and frames carry fewer cells
// with one, so that the trailer keeps them within the MTU.
func TestKeyConfig(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	deliver := func(HostID, int, []byte) bool { return true }
	for _, n := range []int{1, 15, 24, 33} {
		if _, err := New(la, Config{Key: make([]byte, n), Deliver: deliver}); !errors.Is(err, ErrConfig) {
			t.Errorf("key of %d bytes: %v", n, err)
		}
	}
	for _, n := range []int{16, 32} {
		tr, err := New(la, Config{Key: make([]byte, n), Deliver: deliver})
		if err != nil {
			t.Fatalf("key of %d bytes: %v", n, err)
		}
		if want := cells.CellsPerFrame(la.MTU()) - 1; tr.perFrame != want {
			t.Errorf("%d cells per frame, want %d", tr.perFrame, want)
		}
		if cells.FrameLen(tr.perFrame)+trailerLen > la.MTU()+afxdp.EthernetHeaderLen {
			t.Errorf("a full frame of %d cells and its trailer exceeds the MTU", tr.perFrame)
		}
	}
}

// sized returns message n with a payload of size bytes (checkPayload).
func sized(n uint32, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b, n)
	for i := 4; i < size; i++ {
		b[i] = byte(n) + byte(i)
	}
	return b
}

// checkSealed checks that neither host of p refused a frame of the other.
func checkSealed(t *testing.T, p *pair) {
	t.Helper()
	for _, e := range []*end{p.a, p.b} {
		if s := e.tr.Stats(); s.AuthFailed != 0 {
			t.Errorf("keyed traffic refused: %+v", s)
		}
	}
}

// Keyed transports exchange messages under loss exactly once, as unkeyed
// ones do (TestLoss): short ones (compact cells), longer ones, and
// messages that span frames; retransmissions are sealed again.
func TestKeyedLoss(t *testing.T) {
	p := newPair(t, memlink.Options{Loss: 0.1, Seed: 7}, keyed(Config{Channels: 8, RetransmitAfter: 10 * time.Millisecond}))
	lossBody(t, p, 20_000, 200)
	checkSealed(t, p)
	if s := p.a.tr.Stats(); s.Compact == 0 {
		t.Errorf("no compact cells: %+v", s)
	}

	p = newPair(t, memlink.Options{Loss: 0.05, Seed: 11}, keyed(Config{Channels: 4, RetransmitAfter: 10 * time.Millisecond}))
	const count = 300
	p.transfer(t, count, p.a.tr.MaxPayload(), 10*time.Millisecond, p.a, p.b)
	checkExactlyOnce(t, p.b, hostA, count)
	checkExactlyOnce(t, p.a, hostB, count)
	checkSealed(t, p)
	if s := p.a.tr.Stats(); s.Retransmits == 0 {
		t.Errorf("no retransmissions: %+v", s)
	}
}

// Keyed packed frames (a pass's PDUs to one host in one frame) under
// loss, duplication and reordering: each message exactly once.
func TestKeyedPackedUnderLoss(t *testing.T) {
	p := newPair(t, memlink.Options{Loss: 0.10, Duplicate: 0.05, Reorder: 0.05, Seed: 17}, keyed(Config{Channels: 8}))
	const count = 2000
	sent := 0
	for !(sent == count && p.a.tr.Unacked(hostB) == 0 && deliveredFrom(p.b, hostA) == count) {
		p.a.tr.BeginPass()
		for ; sent < count; sent++ {
			if err := p.a.tr.Send(hostB, payload(uint32(sent), 60), uint64(sent)+1); err != nil {
				break
			}
		}
		if err := p.a.tr.EndPass(); err != nil {
			t.Fatal(err)
		}
		p.poll(t)
		p.clk.Advance(DefaultRetransmitAfter / 4)
	}
	checkExactlyOnce(t, p.b, hostA, count)
	checkSealed(t, p)
	if st := p.a.tr.Stats(); st.Packed == 0 || st.Retransmits == 0 {
		t.Errorf("sender: %+v", st)
	}
	if st := p.b.tr.Stats(); st.Duplicates == 0 {
		t.Errorf("receiver saw no duplicates: %+v", st)
	}
}

// TestKeyedForger: the forger of TestForgerWithEpochs (both epochs right,
// read from the real hosts, sweeping every sequence number), without the
// key: half its frames carry no trailer, half a made-up one. Nothing it
// sends is delivered or takes effect: every forged frame is counted in
// AuthFailed, and none reaches the epoch and window checks (no renewal,
// no RESET).
func TestKeyedForger(t *testing.T) {
	const count = 3000
	p := newPair(t, memlink.Options{Seed: 13, Depth: 1 << 14}, keyed(Config{Channels: 4}))
	mtu := p.a.link.MTU() - trailerLen
	toA := newForger(p.a.link.HardwareAddr(), p.b.link.HardwareAddr(), p.a.tr.epoch, p.b.tr.epoch, 4, 1)
	toB := newForger(p.b.link.HardwareAddr(), p.a.link.HardwareAddr(), p.b.tr.epoch, p.a.tr.epoch, 4, 2)
	rng := rand.New(rand.NewPCG(5, 6))
	const perRound = 10
	frames := make([][]byte, perRound)
	forged := map[*end]uint64{}
	forge := func(l afxdp.Link, f *forger, to *end) {
		for i := range frames {
			fr, err := f.frame(mtu)
			if err != nil {
				t.Fatal(err)
			}
			if i%2 == 1 {
				// A trailer cell with a plausible counter and a made-up tag.
				var tr [trailerLen]byte
				copy(tr[:], to.tr.trailerHdr[:])
				binary.BigEndian.PutUint64(tr[trailerLen-tagLen-counterLen:], to.tr.sealed+uint64(i))
				for j := trailerLen - tagLen; j < trailerLen; j++ {
					tr[j] = byte(rng.Uint32())
				}
				fr = append(fr, tr[:]...)
				binary.BigEndian.PutUint16(fr[afxdp.EthernetHeaderLen+2:], uint16((len(fr)-frameHeader)/cells.CellSize))
			}
			frames[i] = fr
		}
		if _, err := l.Send(frames); err != nil {
			t.Fatal(err)
		}
		forged[to] += perRound
	}
	started := false
	base := map[*end]Stats{}
	p.between = func() {
		if !started && (deliveredFrom(p.a, hostB) < 8 || deliveredFrom(p.b, hostA) < 8) {
			return
		}
		if !started {
			// First contact is over (its RESETs: a keyed host takes no
			// destination epoch 0).
			base[p.a], base[p.b] = p.a.tr.Stats(), p.b.tr.Stats()
		}
		started = true
		forge(p.b.link, toA, p.a)
		forge(p.a.link, toB, p.b)
		p.clk.Advance(100 * time.Microsecond)
	}
	p.transfer(t, count, 100, time.Millisecond, p.a, p.b)
	for range 3 {
		p.poll(t)
	}
	for _, e := range []*end{p.a, p.b} {
		if n := forgedDelivered(e); n > 0 {
			t.Fatalf("%d forged messages delivered", n)
		}
	}
	checkExactlyOnce(t, p.b, hostA, count)
	checkExactlyOnce(t, p.a, hostB, count)
	for _, e := range []*end{p.a, p.b} {
		s, b := e.tr.Stats(), base[e]
		if forged[e] == 0 || s.AuthFailed != forged[e] {
			t.Errorf("%d frames forged, AuthFailed %d", forged[e], s.AuthFailed)
		}
		if len(e.returned) != 0 || s.Restarts+s.Renewals+s.ResetsSent+s.ZeroEpoch+s.Unconfirmed+s.StaleEpoch+
			s.OutOfWindow+s.ForgedAcks+s.StaleNacks+s.BadFrames !=
			b.Restarts+b.Renewals+b.ResetsSent+b.ZeroEpoch+b.Unconfirmed+b.StaleEpoch+
				b.OutOfWindow+b.ForgedAcks+b.StaleNacks+b.BadFrames {
			t.Errorf("a forged frame took effect: returned %d, %+v", len(e.returned), s)
		}
	}
}

// TestKeyedBitFlip: a sealed frame with any one bit flipped (headers,
// cells, counter or tag) is dropped and counted; the frame itself is
// delivered once, and a replay of it is a duplicate, acknowledged again
// and not delivered.
func TestKeyedBitFlip(t *testing.T) {
	p := newPair(t, memlink.Options{}, keyed(Config{Channels: 2, AckDelay: -1}))
	p.exchange(t, p.a, hostB, numbers(0, 4))
	for _, size := range []int{20, 200} { // a compact cell, an AAL5 PDU
		n := uint32(100 + size)
		if err := p.a.tr.Send(hostB, sized(n, size), 0); err != nil {
			t.Fatal(err)
		}
		rx := make([][]byte, 8)
		got, err := p.b.link.Recv(rx)
		if err != nil || got != 1 {
			t.Fatalf("Recv: %d frames, %v", got, err)
		}
		frame := append([]byte(nil), rx[0]...)
		before := p.b.tr.Stats()
		flips := 0
		for bit := 0; bit < 8*len(frame); bit += 7 {
			if bit >= 8*6 && bit < 8*12 {
				continue // the source address: another host's frames (UnknownSource)
			}
			f := append([]byte(nil), frame...)
			f[bit/8] ^= 1 << (bit % 8)
			if _, err := p.a.link.Send([][]byte{f}); err != nil {
				t.Fatal(err)
			}
			if _, err := p.b.tr.Poll(); err != nil {
				t.Fatal(err)
			}
			flips++
		}
		s := p.b.tr.Stats()
		if bad := s.AuthFailed - before.AuthFailed; bad+s.NotForUs-before.NotForUs != uint64(flips) || bad == 0 {
			t.Errorf("%d frames flipped, %d failed authentication: %+v", flips, bad, s)
		}
		if s.Delivered != before.Delivered {
			t.Fatalf("a flipped frame was delivered: %+v", s)
		}
		for range 2 {
			if _, err := p.a.link.Send([][]byte{frame}); err != nil {
				t.Fatal(err)
			}
			p.poll(t)
		}
		s = p.b.tr.Stats()
		if s.Delivered != before.Delivered+1 || s.Duplicates != before.Duplicates+1 {
			t.Errorf("the frame and its replay: %+v", s)
		}
		for range 3 {
			p.poll(t)
		}
		if p.a.tr.Unacked(hostB) != 0 {
			t.Fatalf("message %d not acknowledged", n)
		}
	}
}

// TestKeyedUnkeyed: a keyed and an unkeyed host do not talk, nor do hosts
// with different keys.
func TestKeyedUnkeyed(t *testing.T) {
	for _, keys := range [][2][]byte{{testKey, nil}, {testKey, otherKey}} {
		la, lb, err := memlink.NewPair(memlink.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer la.Close()
		defer lb.Close()
		p := &pair{clk: clock.NewManual(time.Unix(1_000_000, 0))}
		p.a = newEnd(t, la, p.clk, Config{Key: keys[0]})
		p.b = newEnd(t, lb, p.clk, Config{Key: keys[1]})
		p.a.link, p.b.link = la, lb
		if err := p.a.tr.AddPeer(hostB, lb.HardwareAddr()); err != nil {
			t.Fatal(err)
		}
		if err := p.b.tr.AddPeer(hostA, la.HardwareAddr()); err != nil {
			t.Fatal(err)
		}
		for i := range uint32(4) {
			for _, e := range []*end{p.a, p.b} {
				dst := hostB
				if e == p.b {
					dst = hostA
				}
				if err := e.tr.Send(dst, payload(i, 100), uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
		}
		for range 20 {
			p.poll(t)
			p.clk.Advance(DefaultRetransmitAfter)
		}
		sa, sb := p.a.tr.Stats(), p.b.tr.Stats()
		if deliveredFrom(p.a, hostB)+deliveredFrom(p.b, hostA) != 0 || sa.Acked+sb.Acked != 0 {
			t.Fatalf("keys %q, %q: hosts talked: A %+v\nB %+v", keys[0], keys[1], sa, sb)
		}
		if sa.AuthFailed == 0 || sb.AuthFailed == 0 {
			t.Errorf("keys %q, %q: refusals not counted: A %+v\nB %+v", keys[0], keys[1], sa, sb)
		}
	}
}

// TestKeyedNoAllocs: the keyed send and receive paths allocate nothing.
func TestKeyedNoAllocs(t *testing.T) {
	p := newPair(t, memlink.Options{}, keyed(Config{Channels: 2, AckDelay: -1}))
	p.exchange(t, p.a, hostB, numbers(0, 4))
	p.b.tr.cfg.Deliver = func(HostID, int, []byte) bool { return true }
	for _, size := range []int{20, 200} {
		msg := sized(1, size)
		allocs := testing.AllocsPerRun(200, func() {
			if err := p.a.tr.Send(hostB, msg, 0); err != nil {
				t.Fatal(err)
			}
			p.b.tr.Poll()
			p.a.tr.Poll()
		})
		if allocs != 0 {
			t.Errorf("%d-byte messages: %v allocations per round trip", size, allocs)
		}
	}
}

// TestKeyedReplayAfterWrap: a channel's sequence numbers come round again
// after 2^16 messages; a keyed receiver then renews the destination
// epoch it asks of the peer, so a DATA frame recorded before, replayed
// when its number is the expected one again, is refused (StaleEpoch), and
// so is an ACK recorded before. The real messages go on exactly once.
func TestKeyedReplayAfterWrap(t *testing.T) {
	p := newPair(t, memlink.Options{}, keyed(Config{Channels: 1, AckDelay: -1}))
	p.exchange(t, p.a, hostB, numbers(0, 2))
	p.exchange(t, p.b, hostA, numbers(0, 2))
	rx := make([][]byte, 8)
	// Message 2 from A, recorded on its way to B (and then let through).
	if err := p.a.tr.Send(hostB, sized(2, 40), 2); err != nil {
		t.Fatal(err)
	}
	if n, err := p.b.link.Recv(rx); err != nil || n != 1 {
		t.Fatalf("Recv: %d, %v", n, err)
	}
	data := append([]byte(nil), rx[0]...)
	if _, err := p.a.link.Send([][]byte{data}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.b.tr.Poll(); err != nil {
		t.Fatal(err)
	}
	// Its ACK from B, recorded on its way to A (and let through).
	if n, err := p.a.link.Recv(rx); err != nil || n != 1 {
		t.Fatalf("Recv: %d, %v", n, err)
	}
	ack := append([]byte(nil), rx[0]...)
	if _, err := p.b.link.Send([][]byte{ack}); err != nil {
		t.Fatal(err)
	}
	p.poll(t)
	if p.a.tr.Unacked(hostB) != 0 {
		t.Fatal("message 2 not acknowledged")
	}
	// Messages 3 .. 2^16+1: channel 0 comes round to message 2's number.
	const count = 1<<16 + 2
	for n := uint32(3); n < count; n++ {
		if err := p.a.tr.Send(hostB, sized(n, 8), uint64(n)); err != nil {
			t.Fatalf("message %d: %v", n, err)
		}
		for i := 0; p.a.tr.Unacked(hostB) > 0; i++ {
			if i == 100 {
				t.Fatalf("message %d: no progress: A %+v\nB %+v", n, p.a.tr.Stats(), p.b.tr.Stats())
			}
			if !p.poll(t) {
				p.clk.Advance(DefaultRetransmitAfter)
			}
		}
	}
	for range 3 {
		p.poll(t)
	}
	sa, sb := p.a.tr.Stats(), p.b.tr.Stats()
	if sa.Renewals == 0 || sb.Renewals == 0 {
		t.Fatalf("no renewal on the wrap: A %+v\nB %+v", sa, sb)
	}
	// B expects message 2's number again; A's channel 0 sends it next.
	if e, s := p.b.tr.Peer(hostA).recv[0].expect, p.a.tr.Peer(hostB).send[0].seq; e != 2 || s != 2 {
		t.Fatalf("B expects %d, A sends %d next; want 2", e, s)
	}
	if err := p.a.tr.Send(hostB, sized(count, 8), count); err != nil {
		t.Fatal(err)
	}
	if _, err := p.b.link.Recv(rx); err != nil { // held back: the replays go first
		t.Fatal(err)
	}
	held := append([]byte(nil), rx[0]...)
	if _, err := p.a.link.Send([][]byte{data}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.b.link.Send([][]byte{ack}); err != nil {
		t.Fatal(err)
	}
	p.poll(t)
	if p.a.tr.Unacked(hostB) != 1 {
		t.Fatal("a replayed ACK acknowledged the message in flight")
	}
	if _, err := p.a.link.Send([][]byte{held}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p.poll(t)
	}
	ns := p.b.got[hostA][0]
	if len(ns) != count+1 || ns[len(ns)-1] != count {
		t.Fatalf("B got %d messages, last %d: %+v", len(ns), ns[len(ns)-1], p.b.tr.Stats())
	}
	checkExactlyOnce(t, p.b, hostA, count+1)
	for _, c := range []struct{ before, after Stats }{{sa, p.a.tr.Stats()}, {sb, p.b.tr.Stats()}} {
		if c.after.StaleEpoch <= c.before.StaleEpoch || c.after.AuthFailed != 0 {
			t.Errorf("replay not refused for its epoch: %+v", c.after)
		}
	}
}
