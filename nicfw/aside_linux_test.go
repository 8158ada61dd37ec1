package nicfw

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// Messages queued to a host that is gone, more than the window lets fly,
// do not hold up those behind them: once the transport has sent the one
// in flight again (the host is stalled), the others to that host step
// aside, and the endpoint's messages to a live host leave at once, in
// order, long before the give-up. The messages aside, a medium one with
// its bytes as they were when it was taken, come back unreachable after
// the give-up, each once, in the order sent.
func TestEngineStepAside(t *testing.T) {
	n, hostC := withDeadHost(t)
	b1 := n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
	a1 := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}, {hostC, 1}}})
	// Three messages to C1 first: one flies, two wait, the second a medium.
	want := []byte("the medium message's bytes")
	copy(a1.Staging()[64:], want)
	mustSend(t, a1, endpoint.RequestSend, short(1, 7, 1000))
	mustSend(t, a1, endpoint.RequestSend, medium(1, 7, 64, len(want), 1001))
	mustSend(t, a1, endpoint.RequestSend, short(1, 7, 1002))
	const count = 200
	start := n.clk.Now()
	overwritten := false
	streamInOrder(t, n, a1, b1, count, func() {
		if !overwritten && n.a.eng.stats.Aside >= 1 {
			copy(a1.Staging()[64:], "overwritten, as the application may once it is taken")
			overwritten = true
		}
	})
	if took := n.clk.Now().Sub(start); took >= engGiveUp {
		t.Fatalf("B1's %d messages took %v, the give-up time (%v): held up behind C1's", count, took, engGiveUp)
	}
	if a := n.a.eng.stats.Aside; a != 2 || !overwritten {
		t.Fatalf("%d messages stepped aside, want C1's two waiting", a)
	}
	ret := returnedOnce(t, n, a1, 3) // C1's three
	for i, r := range ret {
		reason, from, ok := r.d.ReturnInfo()
		if !ok || reason != endpoint.ReasonUnreachable || from != endpoint.RequestSend || r.d.Args[0] != 1000+uint64(i) {
			t.Errorf("return %d: %+v (%v, %v), want message %d unreachable", i, r.d, reason, from, 1000+i)
		}
		if i == 1 && !bytes.Equal(r.data, want) {
			t.Errorf("the medium message came back with %q, want %q", r.data, want)
		}
	}
	if s := n.a.eng.eps[1]; s.flying != 0 || len(s.aside) != 0 || n.a.eng.pinned != 0 {
		t.Errorf("after the returns: %d in flight, %d aside, pinned %d", s.flying, len(s.aside), n.a.eng.pinned)
	}
}

// An endpoint that closes with messages aside discards them, as it does
// those still in its send queues: none comes back, the endpoint's memory
// goes once its message in flight is given up, and the engine goes on.
func TestEngineStepAsideClose(t *testing.T) {
	n, hostC := withDeadHost(t)
	b1 := n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
	a1 := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostC, 1}}})
	a2 := n.a.endpoint(t, 2, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}})
	for k := range uint64(4) {
		mustSend(t, a1, endpoint.RequestSend, short(0, 7, k))
	}
	n.run(t, 100000, func() bool { return len(n.a.eng.eps[1].aside) == 3 })
	if err := n.a.eng.CloseEndpoint(1); err != nil {
		t.Fatal(err)
	}
	if s := n.a.eng.eps[1]; len(s.aside) != 0 || s.flying != 1 {
		t.Fatalf("closed: %d aside, %d in flight; want 0 and 1", len(s.aside), s.flying)
	}
	// The engine goes on: A2's message to B1 arrives, and after the
	// give-up nothing of A1's is left.
	mustSend(t, a2, endpoint.RequestSend, short(0, 7, 42))
	var got []received
	n.run(t, 100000, func() bool {
		collect(t, b1, endpoint.RequestReceive, &got)
		return len(got) == 1 && n.a.eng.eps[1].flying == 0
	})
	var ret []received
	collect(t, a1, endpoint.ReplyReceive, &ret)
	if len(ret) != 0 || got[0].d.Args[0] != 42 {
		t.Fatalf("after the close: %d returned to the closed endpoint, B1 got %+v", len(ret), got[0].d)
	}
}

// TestEngineStepAsideOverAFXDP is TestEngineStepAside's first half over
// AF_XDP on a veth pair, on the system clock: behind three messages to a
// host that no engine answers for (its frames go to B's interface, which
// is not its), 200 to B1 arrive in order while the first to that host is
// still in flight and the other two are aside.
func TestEngineStepAsideOverAFXDP(t *testing.T) {
	// Given up after 30 s: held up behind C1's, B1's messages would arrive
	// after that, and the test fail then, not hang.
	n := newXDPEngNet(t, EngineConfig{Transport: transport.Config{RetransmitAfter: 2 * time.Millisecond, GiveUpAfter: 30 * time.Second}}, 0)
	const hostC HostID = 3
	if err := n.a.eng.AddHost(hostC, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x99}); err != nil {
		t.Fatal(err)
	}
	b1 := n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
	a1 := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}, {hostC, 1}}})
	for k := range uint64(3) {
		mustSend(t, a1, endpoint.RequestSend, short(1, 7, 1000+k))
	}
	streamInOrder(t, n, a1, b1, 200, nil)
	var ret []received
	collect(t, a1, endpoint.ReplyReceive, &ret)
	if s := n.a.eng.eps[1]; s.flying < 1 || len(s.aside) != 2 || n.a.eng.stats.Aside != 2 || len(ret) != 0 {
		t.Fatalf("B1's messages arrived with %d of A1's in flight, %d aside (%d stepped aside), %d returned; want C1's first in flight and 2 aside", s.flying, len(s.aside), n.a.eng.stats.Aside, len(ret))
	}
}
