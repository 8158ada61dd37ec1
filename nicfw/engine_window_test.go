//go:build linux

package nicfw

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// Tests of EngineConfig.Window: one endpoint's messages in flight on
// several channels at once.

// windowBody sends per short messages each way between A1 and B1 (with
// the window of n's engines), and per/4 medium messages from A1 to B1
// among them, and checks that each arrives exactly once with its bytes.
// It returns the most messages of A1 seen in flight at once and how many
// arrived after one sent later than them.
func windowBody(t *testing.T, n *engNet, per int, limit int) (most, late int) {
	t.Helper()
	a1 := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}})
	b1 := n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
	type flow struct {
		from, to *endpoint.View
		sent     int
		seen     map[uint64]int
		last     uint64
	}
	flows := []*flow{{from: a1, to: b1}, {from: b1, to: a1}}
	mediums := 0
	for _, f := range flows {
		f.seen = make(map[uint64]int)
	}
	top := maxMediumFits(n.a.eng, 1)
	size := func(i uint64) int { return 1 + int(i)*131%top }
	n.run(t, limit, func() bool {
		if k := n.a.eng.tr.Unacked(hostB); k > most {
			most = k
		}
		done := true
		for fi, f := range flows {
			for f.sent < per {
				i := uint64(f.sent)
				d := short(0, 1, i)
				if fi == 0 && i%4 == 3 {
					// A medium message, from a staging slot of its own.
					off := int(i/4) % 8 * endpoint.MaxMedium
					if _, taken := f.from.Progress(endpoint.RequestSend); mediums >= 8 && int32(taken-uint32(i-32)) <= 0 {
						break // its slot's previous message is not taken yet
					}
					copy(f.from.Staging()[off:], pattern(size(i), byte(i)))
					d = medium(0, 1, off, size(i), i)
				}
				if err := f.from.Send(endpoint.RequestSend, &d); err != nil {
					break // the queue is full
				}
				if d.Class == endpoint.ClassMedium {
					mediums++
				}
				f.sent++
			}
			for {
				d, data, ok := receiveData(t, f.to, endpoint.RequestReceive)
				if !ok {
					break
				}
				i := d.Args[0]
				if f.seen[i]++; f.seen[i] > 1 {
					t.Fatalf("flow %d: message %d twice", fi, i)
				}
				if fi == 0 && i%4 == 3 && (d.Class != endpoint.ClassMedium || !bytes.Equal(data, pattern(size(i), byte(i)))) {
					t.Fatalf("medium message %d: %+v with %d bytes", i, d, len(data))
				}
				if len(f.seen) > 1 && i < f.last {
					late++
				}
				f.last = max(f.last, i)
			}
			if len(f.seen) < per {
				done = false
			}
		}
		return done
	})
	// The last acknowledgements.
	n.run(t, limit, func() bool {
		sa, sb := n.a.eng.Stats(), n.b.eng.Stats()
		return sa.Acked == sa.Sent && sb.Acked == sb.Sent
	})
	for _, e := range []*Engine{n.a.eng, n.b.eng} {
		if s := e.Stats(); s.Sent != uint64(per) || s.Delivered != uint64(per) || s.Returned != 0 || e.pinned != 0 || e.inFlight() != 0 {
			t.Errorf("engine %d: %+v, pinned %d", e.Host(), s, e.pinned)
		}
	}
	return most, late
}

// With a window of 4, one endpoint keeps 4 messages in flight to its
// peer: on a lossless link they arrive in order, each once.
func TestEngineWindow(t *testing.T) {
	for _, w := range []int{4, 0} {
		t.Run(fmt.Sprintf("window %d", w), func(t *testing.T) {
			n := newEngNet(t, memlink.Options{}, EngineConfig{Window: w})
			most, late := windowBody(t, n, 400, 100000)
			if want := max(w, 1); most != want || late != 0 {
				t.Errorf("at most %d in flight (want %d), %d out of order (want 0)", most, want, late)
			}
		})
	}
}

// Under 10% loss each way, with a window of 8: every message exactly
// once; those overtaken by a retransmission arrive out of order.
func TestEngineWindowLoss(t *testing.T) {
	n := newEngNet(t, memlink.Options{Loss: 0.1, Seed: 3}, EngineConfig{Window: 8})
	most, late := windowBody(t, n, 3000, 2_000_000)
	t.Logf("at most %d in flight, %d messages overtaken", most, late)
	if most != 8 {
		t.Errorf("at most %d in flight, want 8", most)
	}
}

// The same with duplication and reordering besides the loss: the engine
// runs pack several messages and acknowledgements into each frame
// (transport.Stats.Packed), and every message still arrives exactly once.
func TestEngineWindowPackedFaults(t *testing.T) {
	n := newEngNet(t, memlink.Options{Loss: 0.1, Duplicate: 0.05, Reorder: 0.05, Seed: 9}, EngineConfig{Window: 8})
	windowBody(t, n, 3000, 2_000_000)
	if sa, sb := n.a.eng.TransportStats(), n.b.eng.TransportStats(); sa.Packed == 0 || sb.Packed == 0 || sa.Retransmits == 0 {
		t.Errorf("A %+v\nB %+v: want packed frames and retransmissions", sa, sb)
	}
}

// TestEngineWindowOverAFXDP is TestEngineWindowLoss over AF_XDP on a veth
// pair, xam's XDP program dropping 10% of the frames.
func TestEngineWindowOverAFXDP(t *testing.T) {
	n := newXDPEngNet(t, EngineConfig{Window: 8, Transport: transport.Config{RetransmitAfter: 2 * time.Millisecond}}, 0.10)
	most, late := windowBody(t, n, 3000, 60)
	t.Logf("at most %d in flight, %d messages overtaken", most, late)
	if most < 2 {
		t.Errorf("at most %d in flight", most)
	}
	if st := n.a.eng.TransportStats(); st.Packed == 0 {
		t.Errorf("no frame carried several messages: %+v", st)
	}
}

// Messages in flight from the window when the peer is gone come back once
// each, medium ones with their bytes; closing the endpoint meanwhile keeps
// its memory until the last is done.
func TestEngineWindowReturns(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{Window: 4})
	a1 := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}})
	a2 := n.a.endpoint(t, 2, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}})
	n.b.link.Close() // B is gone
	ea := n.a.eng
	const count = 6
	for i := range uint64(count) {
		d := short(0, 1, i)
		if i%2 == 1 {
			copy(a1.Staging()[int(i)*endpoint.MaxMedium:], pattern(100+int(i), byte(i)))
			d = medium(0, 1, int(i)*endpoint.MaxMedium, 100+int(i), i)
		}
		mustSend(t, a1, endpoint.RequestSend, d)
		mustSend(t, a2, endpoint.RequestSend, short(0, 2, i))
	}
	poll := func() {
		if _, err := ea.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	poll()
	if ea.eps[1].flying != 4 || ea.eps[2].flying != 4 || ea.pinned != 2 || ea.res.Outstanding(1) != 4 {
		t.Fatalf("in flight: %d and %d, pinned %d", ea.eps[1].flying, ea.eps[2].flying, ea.pinned)
	}
	// A2 closes with four messages in flight: its memory stays.
	memA2 := ea.eps[2].mem
	if err := ea.CloseEndpoint(2); err != nil {
		t.Fatal(err)
	}
	if memA2.FD() == -1 {
		t.Fatal("A2's memory closed with messages in flight")
	}
	var ret []received
	n.clk.Advance(engGiveUp + engStep)
	for range 20 {
		poll()
		n.clk.Advance(engStep)
		collect(t, a1, endpoint.ReplyReceive, &ret)
	}
	if len(ret) != count {
		t.Fatalf("returned %d of %d", len(ret), count)
	}
	seen := make(map[uint64]bool)
	for _, r := range ret {
		reason, from, ok := r.d.ReturnInfo()
		i := r.d.Args[0]
		if !ok || reason != endpoint.ReasonUnreachable || from != endpoint.RequestSend || seen[i] {
			t.Errorf("returned %+v: %v %v", r.d, reason, from)
		}
		seen[i] = true
		if i%2 == 1 && !bytes.Equal(r.data, pattern(100+int(i), byte(i))) {
			t.Errorf("returned medium message %d with %d bytes", i, len(r.data))
		}
	}
	if memA2.FD() != -1 || ea.pinned != 0 || ea.res.Outstanding(1) != 0 || ea.eps[1].flying != 0 || ea.inFlight() != 0 {
		t.Errorf("after the returns: A2 fd %d, pinned %d, outstanding %d", memA2.FD(), ea.pinned, ea.res.Outstanding(1))
	}
	if s := ea.Stats(); s.Returned != count || s.ReturnsLost != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestEngineWeight: an endpoint's weight (VNet.Weight) is its share of
// the engine's sends while several endpoints have work.
func TestEngineWeight(t *testing.T) {
	cfg := EngineConfig{SendBudget: 4, Window: 64, Loiter: 1, Transport: transport.Config{Channels: 128}}
	n := newEngNet(t, memlink.Options{}, cfg)
	heavy := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}, Weight: 3})
	light := n.a.endpoint(t, 2, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}})
	sink := n.b.endpoint(t, 1, endpoint.Config{QueueEntries: 1024}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}, {hostA, 2}}})
	for i := range uint64(60) {
		mustSend(t, heavy, endpoint.RequestSend, short(0, 1, i))
		mustSend(t, light, endpoint.RequestSend, short(0, 2, i))
	}
	var got []endpoint.Descriptor
	n.run(t, 1000, func() bool {
		drain(t, sink, endpoint.RequestReceive, &got)
		return len(got) >= 40
	})
	var from [3]int
	for _, d := range got[:40] {
		from[d.Handler]++
	}
	if from[1] != 30 || from[2] != 10 {
		t.Errorf("first 40 deliveries: %d from the endpoint of weight 3, %d from that of weight 1; want 30 and 10", from[1], from[2])
	}
	if _, err := n.a.eng.CreateEndpoint(3, endpoint.Config{}, VNet{Tag: 1, Table: []Name{{hostB, 1}}, Weight: MaxWeight + 1}); !errors.Is(err, ErrConfig) {
		t.Errorf("weight %d: %v, want ErrConfig", MaxWeight+1, err)
	}
}

// TestEngineBatchesFrames: an engine run hands everything it sends to the
// link in one batch, the messages to one host packed into one frame:
// eight messages of one endpoint, queued before the run, leave in one
// frame; the acknowledgements the receiver owes for them go through its
// batches too, and every message arrives exactly once, in order.
func TestEngineBatchesFrames(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{Window: 8})
	a1 := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}})
	b1 := n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
	for i := range uint64(8) {
		mustSend(t, a1, endpoint.RequestSend, short(0, 1, i))
	}
	if _, err := n.a.eng.Poll(); err != nil {
		t.Fatal(err)
	}
	if st := n.a.eng.TransportStats(); st.Sent != 8 || st.Batches != 1 || st.BatchFrames != 1 || st.Packed != 8 {
		t.Fatalf("one run sending 8 messages: %d sent in %d batches of %d frames, %d packed; want 8 in 1 frame", st.Sent, st.Batches, st.BatchFrames, st.Packed)
	}
	var got []endpoint.Descriptor
	n.run(t, 1000, func() bool {
		drain(t, b1, endpoint.RequestReceive, &got)
		return len(got) == 8 && n.a.eng.Stats().Acked == 8
	})
	for i, d := range got {
		if d.Args[0] != uint64(i) {
			t.Errorf("message %d carries %d", i, d.Args[0])
		}
	}
	if st := n.b.eng.TransportStats(); st.AckFrames == 0 || st.BatchFrames < st.AckFrames {
		t.Errorf("B's acknowledgements did not go through its batches: %+v", st)
	}
}

// windowDestsBody sends per short messages from A1, whose engine has a
// window of 1, to each of dests endpoints of B in turn, and checks that
// each arrives exactly once and in the order sent to it (one in flight
// per destination), that A1 had several in flight at once (one to each
// destination) and never more than one to a destination. It returns the
// most of A1's messages seen in flight at once.
func windowDestsBody(t *testing.T, n *engNet, dests, per, limit int) (most int) {
	t.Helper()
	table := make([]Name, dests)
	bs := make([]*endpoint.View, dests)
	for i := range dests {
		table[i] = Name{hostB, EndpointID(i + 1)}
		bs[i] = n.b.endpoint(t, EndpointID(i+1), endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
	}
	a1 := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: table})
	sa := n.a.eng.eps[1]
	sent, got := 0, make([]uint64, dests) // next message number each expects
	n.run(t, limit, func() bool {
		most = max(most, sa.flying)
		for _, c := range sa.flyingTo {
			if c.n > 1 {
				t.Fatalf("%d messages in flight to endpoint %d, window 1", c.n, c.ep)
			}
		}
		for sent < per*dests {
			dest := sent % dests
			d := short(uint32(dest), 1, uint64(sent/dests))
			if err := a1.Send(endpoint.RequestSend, &d); err != nil {
				break // the queue is full
			}
			sent++
		}
		done := true
		for i, b := range bs {
			for {
				d, _, ok := receiveData(t, b, endpoint.RequestReceive)
				if !ok {
					break
				}
				if d.Args[0] != got[i] {
					t.Fatalf("endpoint %d: message %d, want %d (window 1: in order)", i+1, d.Args[0], got[i])
				}
				got[i]++
			}
			done = done && got[i] == uint64(per)
		}
		return done
	})
	n.run(t, limit, func() bool {
		s := n.a.eng.Stats()
		return s.Acked == s.Sent
	})
	if most < 2 || most > dests {
		t.Errorf("at most %d of A1's messages in flight at once, want 2..%d (one per destination)", most, dests)
	}
	if s := n.a.eng.Stats(); s.Sent != uint64(per*dests) || s.Returned != 0 || n.a.eng.pinned != 0 || len(sa.flyingTo) != 0 {
		t.Errorf("A: %+v, pinned %d, counts %v", s, n.a.eng.pinned, sa.flyingTo)
	}
	return most
}

// The window is per destination: with a window of 1, an endpoint's
// messages to three endpoints are in flight together, and under 10% loss
// each way those to each arrive exactly once and in order.
func TestEngineWindowPerDestination(t *testing.T) {
	for _, loss := range []float64{0, 0.1} {
		t.Run(fmt.Sprintf("loss %g", loss), func(t *testing.T) {
			n := newEngNet(t, memlink.Options{Loss: loss, Seed: 5}, EngineConfig{})
			most := windowDestsBody(t, n, 3, 500, 2_000_000)
			st := n.a.eng.TransportStats()
			t.Logf("at most %d in flight, %d retransmissions, %d stepped aside", most, st.Retransmits, n.a.eng.stats.Aside)
			if loss > 0 && (st.Retransmits == 0 || n.a.eng.stats.Aside == 0) {
				t.Errorf("under %g loss: %d retransmissions, %d messages stepped aside; want some of each (the order above held with them)", loss, st.Retransmits, n.a.eng.stats.Aside)
			}
		})
	}
}

// TestEngineWindowPerDestinationOverAFXDP is the same over AF_XDP on a
// veth pair, xam's XDP program dropping 10% of the frames.
func TestEngineWindowPerDestinationOverAFXDP(t *testing.T) {
	n := newXDPEngNet(t, EngineConfig{Transport: transport.Config{RetransmitAfter: 2 * time.Millisecond}}, 0.10)
	most := windowDestsBody(t, n, 3, 300, 60)
	t.Logf("at most %d in flight, %d stepped aside", most, n.a.eng.stats.Aside)
	if n.a.eng.stats.Aside == 0 {
		t.Error("no message stepped aside under 10% loss: the order above was not tried with them")
	}
}

// A destination that stops answering holds up only what goes to it: with
// the window of 1, A1's message to a host that is gone stays in flight
// until the transport gives up on it, while its messages to B1 keep
// leaving and arriving; then it comes back, once, unreachable.
func TestEngineWindowDeadDestination(t *testing.T) {
	n, hostC := withDeadHost(t)
	b1 := n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
	a1 := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}, {hostC, 1}}})
	mustSend(t, a1, endpoint.RequestSend, short(1, 7, 1000)) // to C1, first
	const count = 200
	start := n.clk.Now()
	streamInOrder(t, n, a1, b1, count, nil)
	if took := n.clk.Now().Sub(start); took >= engGiveUp || n.a.eng.eps[1].flying == 0 {
		t.Fatalf("B1's %d messages took %v (give-up %v); A1 has %d in flight, want C1's", count, took, engGiveUp, n.a.eng.eps[1].flying)
	}
	ret := returnedOnce(t, n, a1, 1)
	if reason, from, ok := ret[0].d.ReturnInfo(); !ok || reason != endpoint.ReasonUnreachable || from != endpoint.RequestSend || ret[0].d.Args[0] != 1000 {
		t.Errorf("returned %+v: %v, %v", ret[0].d, reason, from)
	}
	if s := n.a.eng.eps[1]; s.flying != 0 || len(s.flyingTo) != 0 || n.a.eng.pinned != 0 {
		t.Errorf("after the return: %d in flight, counts %v, pinned %d", s.flying, s.flyingTo, n.a.eng.pinned)
	}
}

// withDeadHost is an engine pair on a memlink pair with a third host, C,
// in A's host table, for which no engine answers.
func withDeadHost(t *testing.T) (*engNet, HostID) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	const hostC HostID = 3
	if err := n.a.eng.AddHost(hostC, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}); err != nil {
		t.Fatal(err)
	}
	return n, hostC
}

// returnedOnce runs n until v's reply receive queue has given want
// messages, then a while longer, and fails if it gives more: the returns
// of want messages, each once.
func returnedOnce(t *testing.T, n *engNet, v *endpoint.View, want int) []received {
	t.Helper()
	var ret []received
	n.run(t, 100000, func() bool {
		collect(t, v, endpoint.ReplyReceive, &ret)
		return len(ret) >= want
	})
	for range 20 { // nothing more comes back
		n.poll(t)
		n.clk.Advance(engStep)
	}
	collect(t, v, endpoint.ReplyReceive, &ret)
	if len(ret) != want {
		t.Fatalf("%d returned, want %d", len(ret), want)
	}
	return ret
}

// streamInOrder sends count short messages from from to the endpoint of
// its table's index 0, to, as fast as from's request queue takes them,
// numbered from 0, and runs n until to has received them all, checking
// that they arrive in order. each, if set, runs at every round.
func streamInOrder(t *testing.T, n *engNet, from, to *endpoint.View, count int, each func()) {
	t.Helper()
	sent, got := 0, 0
	n.run(t, 100000, func() bool {
		if each != nil {
			each()
		}
		for sent < count {
			d := short(0, 7, uint64(sent))
			if from.Send(endpoint.RequestSend, &d) != nil {
				break // the queue is full
			}
			sent++
		}
		for {
			d, _, ok := receiveData(t, to, endpoint.RequestReceive)
			if !ok {
				break
			}
			if d.Args[0] != uint64(got) {
				t.Fatalf("message %d, want %d", d.Args[0], got)
			}
			got++
		}
		return got == count
	})
}

// An engine that closes sends the acknowledgements it owes: the reply it
// took in its last Poll is not left to its sender's retransmissions and
// returned, unreachable, once the sender gives up.
func TestEngineCloseSendsAcks(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	a1 := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}})
	b1 := n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
	mustSend(t, a1, endpoint.RequestSend, short(0, 7, 1))
	var got []received
	n.run(t, 1000, func() bool {
		if d, _, ok := receiveData(t, b1, endpoint.RequestReceive); ok {
			mustSend(t, b1, endpoint.ReplySend, short(d.Dest, 8, 2))
		}
		collect(t, a1, endpoint.ReplyReceive, &got)
		return len(got) == 1
	})
	if !n.a.eng.tr.AcksOwed() {
		t.Fatal("A owes no acknowledgement after taking the reply: the test does not test Close")
	}
	if err := n.a.eng.Close(); err != nil {
		t.Fatal(err)
	}
	for range 3 * int(engGiveUp/engStep) {
		if _, err := n.b.eng.Poll(); err != nil {
			t.Fatal(err)
		}
		n.clk.Advance(engStep)
	}
	if s := n.b.eng.Stats(); s.Returned != 0 || s.Acked != s.Sent {
		t.Errorf("B: %d of %d acknowledged, %d returned: the reply A took was not acknowledged", s.Acked, s.Sent, s.Returned)
	}
}

// TestEngineFullFrames: with the default send budget (the link's batch,
// 64), a run that finds more one-cell messages queued than it may send
// stops at a full frame: two frames of 28 cells (MTU 1500), the rest left
// for the next run, not a third frame of 8. A budget set explicitly is
// spent whole, as before. Every message arrives once, in order.
func TestEngineFullFrames(t *testing.T) {
	perFrame := cells.CellsPerFrame(1500)
	for _, c := range []struct {
		budget, sent, frames int
	}{
		{0, 2 * perFrame, 2},
		{64, 64, 3},
	} {
		t.Run(fmt.Sprintf("budget=%d", c.budget), func(t *testing.T) {
			n := newEngNet(t, memlink.Options{}, EngineConfig{Window: 200, SendBudget: c.budget, Transport: transport.Config{Channels: 256}})
			a1 := n.a.endpoint(t, 1, endpoint.Config{QueueEntries: 256}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}})
			b1 := n.b.endpoint(t, 1, endpoint.Config{QueueEntries: 256}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
			// A first message makes the hosts' handshake (the transport
			// holds what is sent before it ends) and is acknowledged.
			var got []endpoint.Descriptor
			mustSend(t, a1, endpoint.RequestSend, short(0, 1, 0))
			n.run(t, 1000, func() bool {
				drain(t, b1, endpoint.RequestReceive, &got)
				return len(got) == 1 && n.a.eng.Stats().Acked == 1
			})
			const count = 150
			for i := range uint64(count) {
				mustSend(t, a1, endpoint.RequestSend, short(0, 1, 1+i))
			}
			before := n.a.eng.TransportStats()
			if _, err := n.a.eng.Poll(); err != nil {
				t.Fatal(err)
			}
			st := n.a.eng.TransportStats()
			if sent, frames := st.Sent-before.Sent, st.BatchFrames-before.BatchFrames; sent != uint64(c.sent) || frames != uint64(c.frames) {
				t.Errorf("a run sent %d messages in %d frames; want %d in %d", sent, frames, c.sent, c.frames)
			}
			n.run(t, 10000, func() bool {
				drain(t, b1, endpoint.RequestReceive, &got)
				return len(got) == 1+count && n.a.eng.Stats().Acked == 1+count
			})
			for i, d := range got {
				if d.Args[0] != uint64(i) {
					t.Fatalf("message %d carries %d", i, d.Args[0])
				}
			}
		})
	}
}
