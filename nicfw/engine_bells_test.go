package nicfw

import (
	"testing"

	"github.com/xam-project/xam/internal/testenv"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// An endpoint the engine found idle ParkAfter times in a row is parked:
// no longer polled, woken by its page of doorbells, and its next message
// leaves in the first Poll after it is sent. One whose application did not
// map the page is never parked, and its messages leave at once too. An
// application that rings every bit of its page (and the summary) makes the
// engine look at its endpoints for nothing: nothing is sent that was not
// queued. A parked endpoint's Send kicks a sleeping engine, and only a
// sleeping one.
func TestEngineParksIdleEndpoints(t *testing.T) {
	const park = 4
	n := newEngNet(t, memlink.Options{}, EngineConfig{ParkAfter: park})
	a1 := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}})
	a2 := n.a.endpointNoBells(t, 2, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}})
	b1 := n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}, {hostA, 2}}})
	var got []endpoint.Descriptor
	delivered := func(want int) func() bool {
		return func() bool { drain(t, b1, endpoint.RequestReceive, &got); return len(got) == want }
	}
	mustSend(t, a1, endpoint.RequestSend, short(0, 1, 1))
	mustSend(t, a2, endpoint.RequestSend, short(0, 1, 2))
	n.run(t, 100, delivered(2))
	for range 4 * park {
		n.poll(t)
	}
	ea := n.a.eng
	if st := ea.Stats(); st.Parks != 1 || len(ea.parked) != 1 || ea.parked[0].id != 1 {
		t.Fatalf("after %d idle Polls: %d parks, parked %d endpoints", 4*park, st.Parks, len(ea.parked))
	}
	// Its next message leaves in one Poll, woken by its bit.
	sent, rings := ea.TransportStats().Sent, ea.Stats().Rings // its first send rang, evicted
	mustSend(t, a1, endpoint.RequestSend, short(0, 1, 3))
	if _, err := ea.Poll(); err != nil {
		t.Fatal(err)
	}
	if st := ea.Stats(); ea.TransportStats().Sent != sent+1 || st.Rings != rings+1 || len(ea.parked) != 0 {
		t.Fatalf("a parked endpoint's send: %d sent in one Poll, %d rings, %d parked", ea.TransportStats().Sent-sent, st.Rings-rings, len(ea.parked))
	}
	mustSend(t, a2, endpoint.RequestSend, short(0, 1, 4))
	if _, err := ea.Poll(); err != nil {
		t.Fatal(err)
	}
	if ea.TransportStats().Sent != sent+2 {
		t.Fatal("the endpoint without its page: its message did not leave in one Poll")
	}
	n.run(t, 100, delivered(4))

	// A page rung all over.
	for range 4 * park {
		n.poll(t)
	}
	page, err := endpoint.MapBells(ea.BellsFD(1))
	if err != nil {
		t.Fatal(err)
	}
	defer page.Close()
	sent = ea.TransportStats().Sent
	for bit := -1; bit <= endpoint.BellsSize*8; bit++ {
		page.Ring(bit)
	}
	for range 2 {
		if _, err := ea.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	if ea.TransportStats().Sent != sent {
		t.Fatalf("a page rung all over: %d sent", ea.TransportStats().Sent-sent)
	}

	// Kicks: none while the engine is awake, one while it sleeps.
	for range 4 * park {
		n.poll(t)
	}
	if len(ea.parked) != 1 {
		t.Fatalf("%d parked", len(ea.parked))
	}
	kicks := 0
	a1.SetKick(func() { kicks++ })
	mustSend(t, a1, endpoint.RequestSend, short(0, 1, 5))
	if kicks != 0 {
		t.Fatalf("an awake engine kicked %d times", kicks)
	}
	n.run(t, 100, delivered(5))
	for range 4 * park {
		n.poll(t)
	}
	if err := ea.SetIdle(true); err != nil {
		t.Fatal(err)
	}
	mustSend(t, a1, endpoint.RequestSend, short(0, 1, 6))
	if kicks != 1 {
		t.Fatalf("a sleeping engine kicked %d times", kicks)
	}
	if err := ea.SetIdle(false); err != nil {
		t.Fatal(err)
	}
	n.run(t, 100, delivered(6))
}

// Endpoints of one group share a page, those of another group have their
// own; a page goes with its group's last endpoint, and none leaks.
func TestEngineBellPages(t *testing.T) {
	testenv.NoMemfdLeaks(t, "xam-doorbells")
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	vnet := func(group uint64) VNet { return VNet{Tag: tagRed, Table: []Name{{hostB, 1}}, Group: group} }
	n.a.endpoint(t, 1, endpoint.Config{}, vnet(5))
	n.a.endpoint(t, 2, endpoint.Config{}, vnet(5))
	n.a.endpoint(t, 3, endpoint.Config{}, vnet(6))
	e := n.a.eng
	if len(e.bellList) != 2 || e.BellsFD(1) != e.BellsFD(2) || e.BellsFD(1) == e.BellsFD(3) || e.BellsFD(1) < 0 {
		t.Fatalf("%d pages; descriptors %d %d %d", len(e.bellList), e.BellsFD(1), e.BellsFD(2), e.BellsFD(3))
	}
	for _, id := range []EndpointID{1, 3} {
		if err := e.CloseEndpoint(id); err != nil {
			t.Fatal(err)
		}
	}
	if len(e.bellList) != 1 || e.BellsFD(2) < 0 || e.BellsFD(1) != -1 {
		t.Fatalf("after closing 1 and 3: %d pages", len(e.bellList))
	}
	if err := e.CloseEndpoint(2); err != nil {
		t.Fatal(err)
	}
	if len(e.bellList) != 0 || len(e.bellPages) != 0 {
		t.Fatalf("after closing all: %d pages", len(e.bellList))
	}
}
