package nicfw

import (
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// expressNet is A1 (table: B1, A1 itself, a host in no host table) and B1
// (table: A1) on two engines, each endpoint alone on its engine, and
// resident: an endpoint starts evicted, and its engine loads it with its
// first message, which each sent through its queue.
func expressNet(t *testing.T, cfg EngineConfig) (n *engNet, a1, b1 *endpoint.View) {
	t.Helper()
	n = newEngNet(t, memlink.Options{}, cfg)
	a1 = n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}, {hostA, 1}, {engUnknown, 1}}})
	b1 = n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
	mustSend(t, a1, endpoint.RequestSend, short(0, 1, 0))
	mustSend(t, b1, endpoint.RequestSend, short(0, 1, 0))
	var got []endpoint.Descriptor
	n.run(t, 100, func() bool {
		drain(t, a1, endpoint.RequestReceive, &got)
		drain(t, b1, endpoint.RequestReceive, &got)
		return len(got) == 2 && n.a.eng.inFlight() == 0 && n.b.eng.inFlight() == 0
	})
	for _, h := range []*engHost{n.a, n.b} {
		if s := h.eng.ep(1); !s.resident {
			t.Fatalf("endpoint 1 of host %d not resident after its first message", h.eng.Host())
		}
	}
	return n, a1, b1
}

// express hands d to A's engine for A1 and reports whether it took it.
func express(t *testing.T, n *engNet, q endpoint.Queue, d endpoint.Descriptor) bool {
	t.Helper()
	ok, err := n.a.eng.Express(1, q, &d)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// receiveArgs polls both engines until v's receive queue q holds want
// messages, and returns their first arguments.
func receiveArgs(t *testing.T, n *engNet, v *endpoint.View, q endpoint.Queue, want int) []uint64 {
	t.Helper()
	var got []endpoint.Descriptor
	n.run(t, 1000, func() bool {
		drain(t, v, q, &got)
		return len(got) >= want
	})
	args := make([]uint64, len(got))
	for i, d := range got {
		args[i] = d.Args[0]
	}
	return args
}

// A short message handed over directly leaves at once, without the send
// queue, and arrives as a queued one does, with its sender's name and its
// virtual network's tag checked; the engine counts it.
func TestExpress(t *testing.T) {
	n, a1, b1 := expressNet(t, EngineConfig{})
	before, _ := n.a.link.Stats()
	if !express(t, n, endpoint.RequestSend, short(0, 3, 7, 8)) {
		t.Fatal("Express declined a short message from an idle endpoint")
	}
	if put, taken := a1.Progress(endpoint.RequestSend); put != 1 || taken != 1 {
		t.Errorf("the send queue moved (%d put, %d taken): the message went through it", put, taken)
	}
	if done := a1.Done(); done != 1 {
		t.Errorf("Done %d after the express message, want 1 (the queued one only)", done)
	}
	if ls, _ := n.a.link.Stats(); ls.TxFrames != before.TxFrames+1 {
		t.Errorf("%d frames left A at once, want 1", ls.TxFrames-before.TxFrames)
	}
	var got []endpoint.Descriptor
	n.run(t, 100, func() bool {
		drain(t, b1, endpoint.RequestReceive, &got)
		return len(got) == 1
	})
	if d := got[0]; d.Class != endpoint.ClassShort || d.Handler != 3 || d.NArgs != 2 || d.Args[0] != 7 || d.Args[1] != 8 || d.Dest != 0 {
		t.Errorf("received %+v", d)
	}
	if st := n.a.eng.Stats(); st.Express != 1 || st.Sent != 2 {
		t.Errorf("A's engine counted %d express of %d sent, want 1 of 2", st.Express, st.Sent)
	}
	// The reply comes back the same way.
	r := short(0, 4, 9)
	ok, err := n.b.eng.Express(1, endpoint.ReplySend, &r)
	if err != nil || !ok {
		t.Fatalf("B's reply: express %v, %v", ok, err)
	}
	if args := receiveArgs(t, n, a1, endpoint.ReplyReceive, 1); len(args) != 1 || args[0] != 9 {
		t.Errorf("A received replies %v, want [9]", args)
	}
}

// Express declines, doing nothing, wherever the queued path would order
// things otherwise or needs the engine's turn; the message then goes
// through the queue, and nothing is lost or reordered.
func TestExpressDeclines(t *testing.T) {
	t.Run("queued first", func(t *testing.T) {
		n, a1, b1 := expressNet(t, EngineConfig{Window: 4})
		mustSend(t, a1, endpoint.RequestSend, short(0, 1, 1))
		if express(t, n, endpoint.RequestSend, short(0, 1, 2)) {
			t.Fatal("Express passed a message queued before it")
		}
		mustSend(t, a1, endpoint.RequestSend, short(0, 1, 2))
		if args := receiveArgs(t, n, b1, endpoint.RequestReceive, 2); args[0] != 1 || args[1] != 2 {
			t.Errorf("received %v, want [1 2]", args)
		}
	})
	t.Run("reply queued", func(t *testing.T) {
		n, a1, _ := expressNet(t, EngineConfig{Window: 4})
		mustSend(t, a1, endpoint.ReplySend, short(0, 1, 1))
		if express(t, n, endpoint.RequestSend, short(0, 1, 2)) {
			t.Fatal("Express passed a reply queued before it")
		}
	})
	t.Run("window full", func(t *testing.T) {
		n, a1, b1 := expressNet(t, EngineConfig{})
		if !express(t, n, endpoint.RequestSend, short(0, 1, 1)) {
			t.Fatal("first message declined")
		}
		if express(t, n, endpoint.RequestSend, short(0, 1, 2)) {
			t.Fatal("Express sent past a window of 1")
		}
		mustSend(t, a1, endpoint.RequestSend, short(0, 1, 2))
		if args := receiveArgs(t, n, b1, endpoint.RequestReceive, 2); args[0] != 1 || args[1] != 2 {
			t.Errorf("received %v, want [1 2]", args)
		}
	})
	t.Run("not resident", func(t *testing.T) {
		n := newEngNet(t, memlink.Options{}, EngineConfig{})
		n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}})
		if express(t, n, endpoint.RequestSend, short(0, 1, 1)) {
			t.Fatal("Express sent from an endpoint the engine has not loaded")
		}
	})
	t.Run("another endpoint busy", func(t *testing.T) {
		n, _, b1 := expressNet(t, EngineConfig{Window: 8, SendBudget: 1})
		a2 := n.a.endpoint(t, 2, endpoint.Config{}, VNet{Tag: tagBlue, Table: []Name{{hostB, 2}}})
		b2 := n.b.endpoint(t, 2, endpoint.Config{}, VNet{Tag: tagBlue, Table: []Name{{hostA, 2}}})
		if !express(t, n, endpoint.RequestSend, short(0, 1, 1)) {
			t.Fatal("Express declined beside an idle endpoint")
		}
		for i := range uint64(4) {
			mustSend(t, a2, endpoint.RequestSend, short(0, 1, 10+i))
		}
		if _, err := n.a.eng.Poll(); err != nil { // A2 sends one (SendBudget) and stays busy
			t.Fatal(err)
		}
		if express(t, n, endpoint.RequestSend, short(0, 1, 2)) {
			t.Fatal("Express took the turn of a busy endpoint")
		}
		if got := receiveArgs(t, n, b2, endpoint.RequestReceive, 4); len(got) != 4 {
			t.Errorf("B2 received %v", got)
		}
		if got := receiveArgs(t, n, b1, endpoint.RequestReceive, 1); len(got) != 1 || got[0] != 1 {
			t.Errorf("B1 received %v, want [1]", got)
		}
	})
	t.Run("ordered", func(t *testing.T) {
		n := newEngNet(t, memlink.Options{}, EngineConfig{Window: 4})
		a1 := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}, Ordered: true})
		b1 := n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}, Ordered: true})
		mustSend(t, a1, endpoint.RequestSend, short(0, 1, 0))
		if _, err := n.a.eng.Poll(); err != nil { // loads A1 and sends: in flight, unacknowledged
			t.Fatal(err)
		}
		if express(t, n, endpoint.RequestSend, short(0, 1, 1)) {
			t.Fatal("Express passed an unacknowledged message of an ordered endpoint")
		}
		if st := n.a.eng.ep(1).mem.Stats(); st.Taken != 1 {
			t.Errorf("the declined descriptor was counted taken (%d)", st.Taken)
		}
		receiveArgs(t, n, b1, endpoint.RequestReceive, 1)
		n.run(t, 100, func() bool { return n.a.eng.inFlight() == 0 })
		if !express(t, n, endpoint.RequestSend, short(0, 1, 2)) {
			t.Fatal("Express declined once the ordered endpoint's message was acknowledged")
		}
		if got := receiveArgs(t, n, b1, endpoint.RequestReceive, 1); got[0] != 2 {
			t.Errorf("received %v, want [2]", got)
		}
	})
	t.Run("not short", func(t *testing.T) {
		n, _, _ := expressNet(t, EngineConfig{})
		d := short(0, 1, 1)
		d.Class, d.Length = endpoint.ClassMedium, 8
		if express(t, n, endpoint.RequestSend, d) {
			t.Fatal("Express took a medium message")
		}
		if express(t, n, endpoint.RequestReceive, short(0, 1, 1)) {
			t.Fatal("Express took a message for a receive queue")
		}
	})
	t.Run("refused", func(t *testing.T) {
		n, _, _ := expressNet(t, EngineConfig{})
		bad := short(3, 1, 1) // outside the table of 3
		if express(t, n, endpoint.RequestSend, bad) {
			t.Fatal("Express took a destination outside the table")
		}
		bad = short(0, 1, 1)
		bad.NArgs = endpoint.MaxShortArgs + 1
		if express(t, n, endpoint.RequestSend, bad) {
			t.Fatal("Express took too many arguments")
		}
		if st := n.a.eng.ep(1).mem.Stats(); st.Taken != 1 {
			t.Errorf("declined descriptors counted taken: %d", st.Taken)
		}
	})
	t.Run("closed", func(t *testing.T) {
		n, _, _ := expressNet(t, EngineConfig{})
		if err := n.a.eng.CloseEndpoint(1); err != nil {
			t.Fatal(err)
		}
		if express(t, n, endpoint.RequestSend, short(0, 1, 1)) {
			t.Fatal("Express took a message of a closed endpoint")
		}
		d := short(0, 1, 1)
		if ok, err := n.a.eng.Express(7, endpoint.RequestSend, &d); ok || err != nil {
			t.Fatalf("Express to no endpoint: %v, %v", ok, err)
		}
	})
}

// What the queued path returns or delivers locally, the express path does
// too, and at once: a message to a host in no host table is in the
// sender's reply receive queue when Express returns; one to the sender's
// own host is in the receiver's queue.
func TestExpressReturnsAndLocal(t *testing.T) {
	n, a1, _ := expressNet(t, EngineConfig{})
	if !express(t, n, endpoint.RequestSend, short(2, 1, 5)) {
		t.Fatal("declined")
	}
	var got []endpoint.Descriptor
	drain(t, a1, endpoint.ReplyReceive, &got)
	if len(got) != 1 {
		t.Fatalf("%d returned at once, want 1", len(got))
	}
	if reason, from, ok := got[0].ReturnInfo(); !ok || reason != endpoint.ReasonNoHost || from != endpoint.RequestSend || got[0].Args[0] != 5 {
		t.Errorf("returned %+v: %v %v %v", got[0], reason, from, ok)
	}
	if !express(t, n, endpoint.RequestSend, short(1, 1, 6)) {
		t.Fatal("declined a message to its own host")
	}
	got = got[:0]
	drain(t, a1, endpoint.RequestReceive, &got)
	if len(got) != 1 || got[0].Args[0] != 6 {
		t.Errorf("own host received %+v, want the message", got)
	}
}

// The compact lane's send (engine_lane.go) keeps the books the slot's
// path keeps: the message is a flight that pins its endpoint's frame and
// counts in its window until its acknowledgement, and one that comes back
// is returned with the descriptor it was sent with.
func TestExpressLaneBooks(t *testing.T) {
	n, a1, b1 := expressNet(t, EngineConfig{})
	ea, s := n.a.eng, n.a.eng.ep(1)
	if !express(t, n, endpoint.RequestSend, short(0, 3, 7, 8)) {
		t.Fatal("declined")
	}
	if ea.inFlight() != 1 || ea.pinned != 1 || s.owner.pinned != 1 || s.flying != 1 || ea.res.Outstanding(1) != 1 || s.state != slotEmpty {
		t.Fatalf("in flight: %d flights, pinned %d (owner %d), flying %d, held %d, slot %v",
			ea.inFlight(), ea.pinned, s.owner.pinned, s.flying, ea.res.Outstanding(1), s.state)
	}
	if args := receiveArgs(t, n, b1, endpoint.RequestReceive, 1); len(args) != 1 || args[0] != 7 {
		t.Fatalf("B1 received %v", args)
	}
	n.run(t, 1000, func() bool { return ea.inFlight() == 0 })
	if ea.pinned != 0 || s.flying != 0 || ea.res.Outstanding(1) != 0 {
		t.Fatalf("acknowledged: pinned %d, flying %d, held %d", ea.pinned, s.flying, ea.res.Outstanding(1))
	}
	// B1 closes: the next message comes back with its descriptor.
	if err := n.b.eng.CloseEndpoint(1); err != nil {
		t.Fatal(err)
	}
	if !express(t, n, endpoint.RequestSend, short(0, 3, 9, 10)) {
		t.Fatal("declined")
	}
	var got []endpoint.Descriptor
	n.run(t, 1000, func() bool {
		drain(t, a1, endpoint.ReplyReceive, &got)
		return len(got) == 1
	})
	d := got[0]
	if reason, from, ok := d.ReturnInfo(); !ok || reason != endpoint.ReasonClosed || from != endpoint.RequestSend ||
		d.Handler != 3 || d.NArgs != 2 || d.Args[0] != 9 || d.Args[1] != 10 || d.Dest != 0 {
		t.Errorf("returned %+v: %v %v %v", d, reason, from, ok)
	}
	if ea.inFlight() != 0 || ea.pinned != 0 || s.flying != 0 {
		t.Errorf("returned: %d flights, pinned %d, flying %d", ea.inFlight(), ea.pinned, s.flying)
	}
}
