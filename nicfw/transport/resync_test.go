package transport

import (
	"net"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
)

// settle polls both ends, advancing the clock a retransmission time at a
// time, until neither has a message unacknowledged, or fails the test.
func (p *pair) settle(t *testing.T) {
	t.Helper()
	for i := 0; p.a.tr.Unacked(hostB) > 0 || p.b.tr.Unacked(hostA) > 0; i++ {
		if i > 2000 {
			t.Fatalf("not settled: A %+v, B %+v", p.a.tr.Stats(), p.b.tr.Stats())
		}
		for p.poll(t) {
		}
		p.clk.Advance(DefaultRetransmitAfter)
		p.poll(t)
	}
	for p.poll(t) {
	}
}

// sendEach sends messages from..to-1 from e to dst, settling after each.
func (p *pair) sendEach(t *testing.T, e *end, dst HostID, from, to uint32) {
	t.Helper()
	for n := from; n < to; n++ {
		if err := e.tr.Send(dst, payload(n, 40), uint64(n)); err != nil {
			t.Fatal(err)
		}
		p.settle(t)
	}
}

// delivered reports which message numbers e got from src, on any channel,
// and how many times each.
func delivered(e *end, src HostID) map[uint32]int {
	m := map[uint32]int{}
	for _, ns := range e.got[src] {
		for _, n := range ns {
			m[n]++
		}
	}
	return m
}

// A host whose row leaves the table and comes back (a mapper that lost it
// for a while) starts its channels again at 0; its peer, which kept its
// row, must not take the new messages for copies of the old ones (they
// were acknowledged and dropped: lost without a word) nor refuse them
// forever. The row's return is a new incarnation toward the peer: each
// side's channels start again, and every message is delivered exactly
// once or returned to its sender.
func TestRowRecreated(t *testing.T) {
	for _, who := range []string{"sender", "receiver"} {
		t.Run(who, func(t *testing.T) {
			p := newPair(t, memlink.Options{}, Config{Channels: 2})
			p.sendEach(t, p.a, hostB, 0, 5)
			p.sendEach(t, p.b, hostA, 100, 105)
			e, other, mac := p.a, hostB, p.b.link.HardwareAddr()
			if who == "receiver" {
				e, other, mac = p.b, hostA, p.a.link.HardwareAddr()
			}
			if err := e.tr.SetPeers(map[HostID]net.HardwareAddr{}); err != nil {
				t.Fatal(err)
			}
			if err := e.tr.SetPeers(map[HostID]net.HardwareAddr{other: mac}); err != nil {
				t.Fatal(err)
			}
			p.sendEach(t, p.a, hostB, 5, 20)
			p.sendEach(t, p.b, hostA, 105, 120)
			checkOnceOrReturned(t, "A to B", delivered(p.b, hostA), p.a.returned, 0, 20)
			checkOnceOrReturned(t, "B to A", delivered(p.a, hostB), p.b.returned, 100, 120)
		})
	}
}

// checkOnceOrReturned checks that each message from..to-1 was delivered
// exactly once, or, not delivered, returned to its sender; the last one
// must have been delivered (the channels work again).
func checkOnceOrReturned(t *testing.T, what string, got map[uint32]int, returned []returnedMsg, from, to uint32) {
	t.Helper()
	back := map[uint32]bool{}
	for _, r := range returned {
		back[r.n] = true
	}
	for n := from; n < to; n++ {
		switch {
		case got[n] > 1:
			t.Errorf("%s: message %d delivered %d times", what, n, got[n])
		case got[n] == 0 && !back[n]:
			t.Errorf("%s: message %d neither delivered nor returned", what, n)
		}
	}
	if got[to-1] != 1 {
		t.Errorf("%s: the last message, %d, delivered %d times", what, to-1, got[to-1])
	}
}

// A sender that gives up on a message (its peer heard nothing for
// GiveUpAfter) does not know whether the peer got it: the peer, back,
// must still take the sender's next messages. Before, the channel's next
// sequence number was one the peer did not expect, refused as out of its
// window for good.
func TestGiveUpThenPeerBack(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 1, GiveUpAfter: time.Second})
	p.sendEach(t, p.a, hostB, 0, 3)
	// B hears nothing: its frames are taken off its link and dropped.
	if err := p.a.tr.Send(hostB, payload(3, 40), 3); err != nil {
		t.Fatal(err)
	}
	drop := make([][]byte, 64)
	for range 300 {
		p.a.tr.Poll()
		p.b.link.Recv(drop)
		p.clk.Advance(DefaultRetransmitAfter)
		if len(p.a.returned) > 0 {
			break
		}
	}
	if len(p.a.returned) != 1 || p.a.returned[0].n != 3 {
		t.Fatalf("returned %+v, want message 3 given up", p.a.returned)
	}
	p.sendEach(t, p.a, hostB, 4, 10)
	p.sendEach(t, p.b, hostA, 100, 105)
	checkOnceOrReturned(t, "A to B", delivered(p.b, hostA), p.a.returned, 0, 10)
	checkOnceOrReturned(t, "B to A", delivered(p.a, hostB), p.b.returned, 100, 105)
}

// Both sides give up at once (an outage longer than GiveUpAfter with a
// message in flight each way), so each starts a new incarnation toward the
// other and each claims an epoch the other cannot believe yet: the RESETs
// that carry the challenges, addressed to the new incarnations, teach them
// all the same, and the pair talks again.
func TestBothGiveUp(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 1, GiveUpAfter: time.Second})
	p.sendEach(t, p.a, hostB, 0, 3)
	p.sendEach(t, p.b, hostA, 100, 103)
	if err := p.a.tr.Send(hostB, payload(3, 40), 3); err != nil {
		t.Fatal(err)
	}
	if err := p.b.tr.Send(hostA, payload(103, 40), 103); err != nil {
		t.Fatal(err)
	}
	drop := make([][]byte, 64)
	for range 300 {
		p.a.tr.Poll()
		p.b.link.Recv(drop)
		p.b.tr.Poll()
		p.a.link.Recv(drop)
		p.clk.Advance(DefaultRetransmitAfter)
		if len(p.a.returned) > 0 && len(p.b.returned) > 0 {
			break
		}
	}
	if sa, sb := p.a.tr.Stats(), p.b.tr.Stats(); sa.Reincarnations != 1 || sb.Reincarnations != 1 {
		t.Fatalf("reincarnations: A %d, B %d; want 1 each", sa.Reincarnations, sb.Reincarnations)
	}
	p.sendEach(t, p.a, hostB, 4, 10)
	p.sendEach(t, p.b, hostA, 104, 110)
	checkOnceOrReturned(t, "A to B", delivered(p.b, hostA), p.a.returned, 0, 10)
	checkOnceOrReturned(t, "B to A", delivered(p.a, hostB), p.b.returned, 100, 110)
	if sa := p.a.tr.Stats(); sa.Reincarnations != 1 {
		t.Errorf("A started %d incarnations, want 1: %+v", sa.Reincarnations, sa)
	}
}

// After a new incarnation toward B, A's receive channels from B expect 0
// again, but a frame naming destination epoch 0 is still refused: B's
// epoch is no secret (B's frames to any host carry it), and a host that
// knows it could otherwise have A deliver a message of its making.
func TestNoZeroAfterReincarnate(t *testing.T) {
	p, in := warmPair(t)
	macA, macB := p.a.link.HardwareAddr(), p.b.link.HardwareAddr()
	p.a.tr.reincarnate(p.a.tr.Peer(hostB))
	before := p.a.tr.Stats()
	out := in.send(epochFrame(t, macA, macB, typeData, 0, 0, 1, p.b.tr.epoch, 0, payload(forgedBase, 50)))
	if s := p.a.tr.Stats(); forgedDelivered(p.a) != 0 || s.Delivered != before.Delivered || s.ZeroEpoch != before.ZeroEpoch+1 {
		t.Fatalf("forged frame with destination epoch 0: delivered %d, stats %+v", forgedDelivered(p.a), s)
	}
	if len(out) != 1 || out[0].typ() != typeReset {
		t.Errorf("answered with %d frames, want a RESET", len(out))
	}
}

// The epoch a host's peer holds for it is the one it names itself with
// toward that peer (SrcEpoch), before and after a new incarnation: what
// an engine's envelopes must name.
func TestSrcEpochIsPeersEpoch(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 2})
	p.sendEach(t, p.a, hostB, 0, 3)
	p.sendEach(t, p.b, hostA, 100, 103)
	if got, want := p.a.tr.Peer(hostB).Epoch(), p.b.tr.Peer(hostA).SrcEpoch(); got != want || want != p.b.tr.Config().Epoch {
		t.Fatalf("A holds %d for B, B names itself %d (its epoch %d)", got, want, p.b.tr.Config().Epoch)
	}
	if err := p.b.tr.SetPeers(map[HostID]net.HardwareAddr{}); err != nil {
		t.Fatal(err)
	}
	if err := p.b.tr.SetPeers(map[HostID]net.HardwareAddr{hostA: p.a.link.HardwareAddr()}); err != nil {
		t.Fatal(err)
	}
	p.sendEach(t, p.b, hostA, 103, 106)
	if got, want := p.a.tr.Peer(hostB).Epoch(), p.b.tr.Peer(hostA).SrcEpoch(); got != want || want == p.b.tr.Config().Epoch {
		t.Fatalf("after B's row for A was made again: A holds %d for B, B names itself %d (its epoch %d)", got, want, p.b.tr.Config().Epoch)
	}
}

// A started a new incarnation toward B once, long since settled (its
// frames to B name a number of their own); then B's transport restarts,
// or B's row for A is made again. A's next messages must each be
// delivered or returned: before, one was acknowledged to A by B's new
// incarnation on A's old channel, A then took B's restart in and started
// its channel again, and the next message, numbered as that one, was
// taken for its copy and dropped.
func TestReincarnatedThenPeerRestarts(t *testing.T) {
	for _, how := range []string{"restart", "row"} {
		t.Run(how, func(t *testing.T) {
			cfg := Config{Channels: 1, AckDelay: -1}
			p := newPair(t, memlink.Options{}, cfg)
			acked := map[uint64]bool{}
			p.a.tr.cfg.Acked = func(_ HostID, c uint64) { acked[c] = true }
			p.exchange(t, p.a, hostB, numbers(0, 5))
			p.exchange(t, p.b, hostA, numbers(100, 105))
			pb := p.a.tr.Peer(hostB)
			p.a.tr.reincarnate(pb)
			p.exchange(t, p.b, hostA, numbers(105, 110)) // A's ACKs carry its new incarnation
			for range 5 {
				p.poll(t)
			}
			if !pb.confirmed || pb.srcOut == p.a.tr.epoch {
				t.Fatalf("the new incarnation did not settle: confirmed %v", pb.confirmed)
			}
			if how == "restart" {
				c := cfg
				c.Epoch = p.b.tr.epoch + 1
				lb := p.b.link
				p.b = newEnd(t, lb, p.clk, c)
				p.b.link = lb
				if err := p.b.tr.AddPeer(hostA, p.a.link.HardwareAddr()); err != nil {
					t.Fatal(err)
				}
			} else {
				mac := p.a.link.HardwareAddr()
				if err := p.b.tr.SetPeers(map[HostID]net.HardwareAddr{}); err != nil {
					t.Fatal(err)
				}
				if err := p.b.tr.SetPeers(map[HostID]net.HardwareAddr{hostA: mac}); err != nil {
					t.Fatal(err)
				}
			}
			for n := uint32(10); n < 20; n++ {
				p.exchange(t, p.a, hostB, []uint32{n})
			}
			got := delivered(p.b, hostA)
			for n := uint32(10); n < 20; n++ {
				if acked[uint64(n)] && got[n] != 1 {
					t.Errorf("message %d acknowledged to A, delivered %d times to B", n, got[n])
				}
			}
			checkOnceOrReturned(t, "A to B", got, p.a.returned, 10, 20)
		})
	}
}
