//go:build linux

package nicfw

import (
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/clock"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

const (
	engStep    = time.Millisecond // the tests' RetransmitAfter
	engGiveUp  = time.Second      // the tests' GiveUpAfter
	tagRed     = 0x7ed
	tagBlue    = 0xb1e
	engUnknown = HostID(9) // a host in no host table
)

// engHost is one host of a test network: its engine, its link and the
// application's views of its endpoints.
type engHost struct {
	eng   *Engine
	link  *memlink.Link
	views map[EndpointID]*endpoint.View
}

// engNet is two hosts, A (hostA) and B (hostB), on a memlink pair and one
// manual clock, or (newXDPEngNet) on a veth pair over AF_XDP and the
// system clock (clk nil).
type engNet struct {
	clk  *clock.Manual
	a, b *engHost
}

func newEngNet(t *testing.T, opts memlink.Options, cfg EngineConfig) *engNet {
	t.Helper()
	return newEngNetWith(t, opts, cfg, nil)
}

// newEngNetWith is newEngNet with per, if not nil, changing each host's
// configuration (its modules, say) before its engine is made.
func newEngNetWith(t *testing.T, opts memlink.Options, cfg EngineConfig, per func(HostID, *EngineConfig)) *engNet {
	t.Helper()
	testenv.NoMemfdLeaks(t, "xam-endpoint")
	la, lb, err := memlink.NewPair(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	n := &engNet{clk: clock.NewManual(time.Unix(1_000_000, 0))}
	if cfg.Transport.RetransmitAfter == 0 {
		cfg.Transport.RetransmitAfter = engStep
	}
	if cfg.Transport.GiveUpAfter == 0 {
		cfg.Transport.GiveUpAfter = engGiveUp
	}
	cfg.Transport.Clock = n.clk
	mk := func(id HostID, l *memlink.Link) *engHost {
		c := cfg
		c.Host = id
		if per != nil {
			per(id, &c)
		}
		e, err := NewEngine(l, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := e.Close(); err != nil {
				t.Error(err)
			}
		})
		return &engHost{eng: e, link: l, views: make(map[EndpointID]*endpoint.View)}
	}
	n.a, n.b = mk(hostA, la), mk(hostB, lb)
	if err := n.a.eng.AddHost(hostB, lb.HardwareAddr()); err != nil {
		t.Fatal(err)
	}
	if err := n.b.eng.AddHost(hostA, la.HardwareAddr()); err != nil {
		t.Fatal(err)
	}
	return n
}

// endpoint creates endpoint id on h and maps it, and its page of
// doorbells, as the application does.
func (h *engHost) endpoint(t *testing.T, id EndpointID, cfg endpoint.Config, vnet VNet) *endpoint.View {
	t.Helper()
	v := h.endpointNoBells(t, id, cfg, vnet)
	if err := v.MapBells(h.eng.BellsFD(id)); err != nil {
		t.Fatal(err)
	}
	return v
}

// endpointNoBells is endpoint for an application that does not map its
// page of doorbells (it rings its header's doorbell only).
func (h *engHost) endpointNoBells(t *testing.T, id EndpointID, cfg endpoint.Config, vnet VNet) *endpoint.View {
	t.Helper()
	m, err := h.eng.CreateEndpoint(id, cfg, vnet)
	if err != nil {
		t.Fatal(err)
	}
	v, err := endpoint.Map(m.FD())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Error(err)
		}
	})
	h.views[id] = v
	return v
}

// poll polls both engines once and returns the work they did.
func (n *engNet) poll(t *testing.T) int {
	t.Helper()
	wa, err := n.a.eng.Poll()
	if err != nil {
		t.Fatal(err)
	}
	wb, err := n.b.eng.Poll()
	if err != nil {
		t.Fatal(err)
	}
	return wa + wb
}

// run calls app, then polls both engines, advancing the clock by engStep
// whenever nothing moved, until app reports it is done. On the system
// clock, limit bounds the seconds, not the rounds.
func (n *engNet) run(t *testing.T, limit int, app func() (done bool)) {
	t.Helper()
	deadline := time.Now().Add(time.Duration(limit) * time.Second)
	for i := 0; !app(); i++ {
		if n.clk != nil && i == limit || n.clk == nil && i&1023 == 0 && time.Now().After(deadline) {
			t.Fatalf("not done after %d rounds", i)
		}
		if n.poll(t) == 0 && n.clk != nil {
			n.clk.Advance(engStep)
		}
	}
}

func short(dest, handler uint32, args ...uint64) endpoint.Descriptor {
	d := endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: uint8(len(args)), Dest: dest, Handler: handler}
	copy(d.Args[:], args)
	return d
}

func mustSend(t *testing.T, v *endpoint.View, q endpoint.Queue, d endpoint.Descriptor) {
	t.Helper()
	if err := v.Send(q, &d); err != nil {
		t.Fatal(err)
	}
}

// drain appends everything in receive queue q of v to *into.
func drain(t *testing.T, v *endpoint.View, q endpoint.Queue, into *[]endpoint.Descriptor) {
	t.Helper()
	for {
		var d endpoint.Descriptor
		ok, err := v.Receive(q, &d)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return
		}
		*into = append(*into, d)
	}
}

// twoNets sets up two virtual networks over the two hosts: red (endpoint 1
// on each) and blue (endpoint 2 on each). A1's table also names B2 (blue:
// a wrong tag), B9 (no such endpoint) and a host in no host table.
func twoNets(t *testing.T, n *engNet, cfgA1, cfgB1 endpoint.Config) (a1, a2, b1, b2 *endpoint.View) {
	t.Helper()
	a1 = n.a.endpoint(t, 1, cfgA1, VNet{Tag: tagRed, Table: []Name{
		{hostA, 1}, {hostB, 1}, {hostB, 2}, {hostB, 9}, {engUnknown, 1},
	}})
	a2 = n.a.endpoint(t, 2, endpoint.Config{}, VNet{Tag: tagBlue, Table: []Name{{hostA, 2}, {hostB, 2}}})
	b1 = n.b.endpoint(t, 1, cfgB1, VNet{Tag: tagRed, Table: []Name{{hostA, 1}, {hostB, 1}}})
	b2 = n.b.endpoint(t, 2, endpoint.Config{}, VNet{Tag: tagBlue, Table: []Name{{hostA, 2}, {hostB, 2}}})
	return a1, a2, b1, b2
}

func TestEngineConfig(t *testing.T) {
	testenv.NoMemfdLeaks(t, "xam-endpoint")
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	for _, c := range []EngineConfig{
		{Resident: 1},
		{ReturnQueue: -1},
		{Transport: transport.Config{Deliver: func(HostID, int, []byte) bool { return true }}},
		{Transport: transport.Config{Channels: transport.MaxChannels + 1}},
		{Window: -1},
		{Window: MaxWindow + 1},
	} {
		if _, err := NewEngine(la, c); !errors.Is(err, ErrConfig) {
			t.Errorf("NewEngine(%+v) = %v, want ErrConfig", c, err)
		}
	}
	e, err := NewEngine(la, EngineConfig{Host: hostA})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if err := e.AddHost(hostA, lb.HardwareAddr()); !errors.Is(err, ErrConfig) {
		t.Errorf("AddHost(self) = %v", err)
	}
	vnet := VNet{Tag: 1, Table: []Name{{hostA, 1}, {hostB, 1}}}
	if _, err := e.CreateEndpoint(1, endpoint.Config{}, VNet{Tag: 1}); !errors.Is(err, ErrConfig) {
		t.Errorf("CreateEndpoint with an empty table = %v", err)
	}
	if _, err := e.CreateEndpoint(1, endpoint.Config{TableSize: 3}, vnet); !errors.Is(err, ErrConfig) {
		t.Errorf("CreateEndpoint with TableSize 3 for 2 entries = %v", err)
	}
	m, err := e.CreateEndpoint(1, endpoint.Config{}, vnet)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Config().TableSize; got != 2 {
		t.Errorf("TableSize %d, want 2", got)
	}
	if _, err := e.CreateEndpoint(1, endpoint.Config{}, vnet); !errors.Is(err, ErrEndpointInUse) {
		t.Errorf("second endpoint 1 = %v", err)
	}
}

// Two virtual networks over two hosts: each network's messages reach only
// its own endpoints, replies find their way back through the received
// index, and everything that cannot be delivered comes back to its sender
// with its reason.
func TestEngineVirtualNetworks(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	a1, a2, b1, b2 := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	const count = 20
	for i := range uint64(count) {
		mustSend(t, a1, endpoint.RequestSend, short(1, 100, i, tagRed))
		mustSend(t, a2, endpoint.RequestSend, short(1, 200, i, tagBlue))
	}
	mustSend(t, a1, endpoint.RequestSend, short(0, 50, 42)) // to itself, delivered locally

	var gotB1, gotB2, gotA1, gotA1Rep, gotA2Rep []endpoint.Descriptor
	n.run(t, 10000, func() bool {
		drain(t, b1, endpoint.RequestReceive, &gotB1)
		drain(t, b2, endpoint.RequestReceive, &gotB2)
		return len(gotB1) == count && len(gotB2) == count
	})
	check := func(name string, got []endpoint.Descriptor, handler uint32, tag uint64) {
		t.Helper()
		for i, d := range got {
			want := short(0, handler, uint64(i), tag)
			want.Tag = tag
			want.Incarnation = 1 // the first incarnation of the sending host
			if d != want {
				t.Fatalf("%s: message %d = %+v, want %+v", name, i, d, want)
			}
		}
	}
	check("B1", gotB1, 100, tagRed)
	check("B2", gotB2, 200, tagBlue)

	// B1 replies to what it received, through the index it was given.
	for _, d := range gotB1 {
		mustSend(t, b1, endpoint.ReplySend, short(d.Dest, 300, d.Args[0]))
	}
	n.run(t, 10000, func() bool {
		drain(t, a1, endpoint.ReplyReceive, &gotA1Rep)
		drain(t, a2, endpoint.ReplyReceive, &gotA2Rep)
		return len(gotA1Rep) == count
	})
	for i, d := range gotA1Rep {
		want := short(1, 300, uint64(i)) // B1 is index 1 in A1's table
		want.Tag = tagRed
		want.Incarnation = 1 // the first incarnation of the sending host
		if d != want {
			t.Fatalf("reply %d = %+v, want %+v", i, d, want)
		}
	}
	drain(t, a1, endpoint.RequestReceive, &gotA1)
	if want := (endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: 1, Incarnation: 1, Handler: 50, Tag: tagRed, Args: [8]uint64{42}}); len(gotA1) != 1 || gotA1[0] != want {
		t.Errorf("A1 to itself: %+v, want %+v", gotA1, want)
	}

	// Undeliverable messages. The descriptor's own tag is ignored: the
	// engine stamps the endpoint's, so A1 cannot forge blue's.
	forged := short(2, 7, 1, 2) // compact: the lane declines it (engine_lane.go)
	forged.Tag = tagBlue
	mustSend(t, a1, endpoint.RequestSend, forged)
	mustSend(t, a1, endpoint.RequestSend, short(2, 7, 5, 6, 7)) // the long form: the lane declines it too
	mustSend(t, a1, endpoint.RequestSend, short(3, 8, 4))
	mustSend(t, a1, endpoint.RequestSend, short(4, 9, 5))
	copy(a1.Staging()[100:], "a medium message to no endpoint comes back with its bytes, sixty-four of them")
	mustSend(t, a1, endpoint.ReplySend, endpoint.Descriptor{Class: endpoint.ClassMedium, Dest: 3, Handler: 10, Offset: 100, Length: 64})
	mustSend(t, a1, endpoint.RequestSend, short(99, 11)) // outside the table: refused by Take
	var returned []endpoint.Descriptor
	n.run(t, 10000, func() bool {
		drain(t, a1, endpoint.ReplyReceive, &returned)
		return len(returned) == 5
	})
	for k := 0; k < 20; k++ { // nothing else arrives anywhere
		n.poll(t)
		n.clk.Advance(engStep)
	}
	drain(t, a1, endpoint.ReplyReceive, &returned)
	drain(t, b1, endpoint.RequestReceive, &gotB1)
	drain(t, b2, endpoint.RequestReceive, &gotB2)
	drain(t, a2, endpoint.RequestReceive, &gotA2Rep)
	drain(t, a2, endpoint.ReplyReceive, &gotA2Rep)
	if len(returned) != 5 || len(gotB1) != count || len(gotB2) != count || len(gotA2Rep) != 0 {
		t.Fatalf("returned %d, B1 %d, B2 %d, A2 %d messages", len(returned), len(gotB1), len(gotB2), len(gotA2Rep))
	}
	// Replies before requests: the medium reply was taken first. It comes
	// back with its bytes, in the receive area. The others come back in
	// the order their destinations answer: the window is per destination,
	// so the message to no host is returned while the one to no endpoint
	// (the medium message's destination) waits for its window.
	if b, err := a1.Data(&returned[0]); err != nil || string(b) != string(a1.Staging()[100:164]) {
		t.Errorf("returned medium message: %q, %v", b, err)
	}
	returned[0].Offset = 0
	slices.SortStableFunc(returned[1:], func(x, y endpoint.Descriptor) int { return int(x.Dest) - int(y.Dest) })
	wants := []struct {
		reason endpoint.Reason
		from   endpoint.Queue
		d      endpoint.Descriptor
	}{
		{endpoint.ReasonNoEndpoint, endpoint.ReplySend, endpoint.Descriptor{Class: endpoint.ClassMedium, Dest: 3, Handler: 10, Length: 64}},
		{endpoint.ReasonBadTag, endpoint.RequestSend, short(2, 7, 1, 2)},
		{endpoint.ReasonBadTag, endpoint.RequestSend, short(2, 7, 5, 6, 7)},
		{endpoint.ReasonNoEndpoint, endpoint.RequestSend, short(3, 8, 4)},
		{endpoint.ReasonNoHost, endpoint.RequestSend, short(4, 9, 5)},
	}
	for i, w := range wants {
		d := returned[i]
		reason, from, ok := d.ReturnInfo()
		if !ok || reason != w.reason || from != w.from {
			t.Errorf("returned %d: ReturnInfo = %v, %v, %v; want %v, %v", i, reason, from, ok, w.reason, w.from)
		}
		d.Class &^= endpoint.ClassReturned
		d.Tag = 0
		// Returned by B (its first incarnation), or by A's own engine.
		if wantInc := map[bool]uint8{true: 0, false: 1}[w.reason == endpoint.ReasonNoHost]; d.Incarnation != wantInc {
			t.Errorf("returned %d (%v): incarnation %d, want %d", i, w.reason, d.Incarnation, wantInc)
		}
		d.Incarnation = 0
		if d != w.d {
			t.Errorf("returned %d (%v) = %+v, want %+v", i, w.reason, d, w.d)
		}
	}
	if st := n.a.eng.eps[1].mem.Stats(); st.Refused[endpoint.RefusedDestination] != 1 {
		t.Errorf("A1 refusals %v, want one RefusedDestination", st.Refused)
	}
	if st := n.a.eng.Stats(); st.Returned != 5 {
		t.Errorf("A stats %+v, want 5 returned", st)
	}
	// Every message delivered from another host was in the compact form,
	// and the compact lane put it; the undeliverable ones it declined.
	if st := n.b.eng.Stats(); st.ReturnsSent != 4 || st.Delivered != 2*count || st.Lane != 2*count {
		t.Errorf("B stats %+v, want 4 returns sent and %d delivered by the lane", st, 2*count)
	}
	if st := n.a.eng.Stats(); st.Delivered != count+1 || st.Lane != count {
		t.Errorf("A stats %+v, want %d delivered, %d by the lane", st, count+1, count)
	}
}

// A full receive queue NACKs; the messages arrive, in order, once the
// application makes room.
func TestEngineQueueFull(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	a1, _, b1, _ := twoNets(t, n, endpoint.Config{}, endpoint.Config{QueueEntries: 4})
	const count = 12
	for i := range uint64(count) {
		mustSend(t, a1, endpoint.RequestSend, short(1, 1, i))
	}
	for range 200 {
		if n.poll(t) == 0 {
			n.clk.Advance(engStep)
		}
	}
	if ts := n.b.eng.TransportStats(); ts.Refused == 0 || n.b.eng.Stats().QueueFull == 0 {
		t.Fatalf("B refused nothing: %+v", ts)
	}
	if ts := n.a.eng.TransportStats(); ts.NacksReceived == 0 || ts.Returned != 0 {
		t.Fatalf("A transport %+v, want NACKs and nothing returned", ts)
	}
	var got []endpoint.Descriptor
	drain(t, b1, endpoint.RequestReceive, &got)
	if len(got) != 4 {
		t.Fatalf("%d messages in a full queue of 4", len(got))
	}
	n.run(t, 10000, func() bool {
		drain(t, b1, endpoint.RequestReceive, &got)
		return len(got) >= count
	})
	for i, d := range got {
		if d.Args[0] != uint64(i) {
			t.Fatalf("message %d carries %d", i, d.Args[0])
		}
	}
	if len(got) != count {
		t.Fatalf("%d messages, want %d", len(got), count)
	}
}

// A host that disappears: the messages to it come back to their senders
// with ReasonUnreachable once GiveUpAfter has passed, those still queued
// behind them at once.
func TestEngineUnreachable(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	a1, a2, _, _ := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	n.b.link.Close() // B is gone; it is not polled again
	const count = 5
	for i := range uint64(count) {
		mustSend(t, a1, endpoint.RequestSend, short(1, 1, i))
	}
	mustSend(t, a2, endpoint.RequestSend, short(1, 2, 99))
	pollA := func() {
		if _, err := n.a.eng.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	start := n.clk.Now()
	for range 10 {
		pollA()
		n.clk.Advance(engStep)
	}
	var r1, r2 []endpoint.Descriptor
	drain(t, a1, endpoint.ReplyReceive, &r1)
	if len(r1) != 0 {
		t.Fatalf("returned before GiveUpAfter: %+v", r1)
	}
	n.clk.Advance(engGiveUp)
	for range 10 {
		pollA()
	}
	drain(t, a1, endpoint.ReplyReceive, &r1)
	drain(t, a2, endpoint.ReplyReceive, &r2)
	if el := n.clk.Now().Sub(start); el > engGiveUp+20*engStep {
		t.Errorf("took %v", el)
	}
	if len(r1) != count || len(r2) != 1 {
		t.Fatalf("returned %d to A1 and %d to A2, want %d and 1", len(r1), len(r2), count)
	}
	for i, d := range append(r1, r2...) {
		reason, from, ok := d.ReturnInfo()
		want := short(1, 1, uint64(i))
		if i == count {
			want = short(1, 2, 99)
		}
		d.Class &^= endpoint.ClassReturned
		d.Tag = 0
		if !ok || reason != endpoint.ReasonUnreachable || from != endpoint.RequestSend || d != want {
			t.Errorf("returned %d: %v %v %v %+v, want %+v", i, reason, from, ok, d, want)
		}
	}
	if ts := n.a.eng.TransportStats(); ts.Returned != 2 {
		t.Errorf("transport returned %d, want 2 (one in flight per endpoint)", ts.Returned)
	}
	if rs := n.a.eng.res; rs.Outstanding(1) != 0 || rs.Outstanding(2) != 0 || n.a.eng.pinned != 0 {
		t.Errorf("endpoints still pinned")
	}
}

// 10^4 short messages, from four endpoints (two per host), under 10% loss
// in each direction: each is delivered exactly once, in order per sender.
func TestEngineLoss(t *testing.T) {
	n := newEngNet(t, memlink.Options{Loss: 0.1, Seed: 7}, EngineConfig{})
	a1, a2, b1, b2 := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	const per = 2500
	type flow struct {
		from, to   *endpoint.View
		dest, src  uint32 // the receiver's index at the sender, the sender's at the receiver
		next, recv uint64
		tag        uint64
	}
	flows := []*flow{
		{from: a1, to: b1, dest: 1, src: 0, tag: tagRed},
		{from: a2, to: b2, dest: 1, src: 0, tag: tagBlue},
		{from: b1, to: a1, dest: 0, src: 1, tag: tagRed},
		{from: b2, to: a2, dest: 0, src: 1, tag: tagBlue},
	}
	n.run(t, 2_000_000, func() bool {
		done := true
		for _, f := range flows {
			for f.next < per {
				d := short(f.dest, uint32(f.tag), f.next)
				if err := f.from.Send(endpoint.RequestSend, &d); errors.Is(err, endpoint.ErrQueueFull) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				f.next++
			}
			for {
				var d endpoint.Descriptor
				ok, err := f.to.Receive(endpoint.RequestReceive, &d)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				if d.Args[0] != f.recv || d.Tag != f.tag || d.Handler != uint32(f.tag) || d.Dest != f.src {
					t.Fatalf("flow %x: got %+v, want message %d", f.tag, d, f.recv)
				}
				f.recv++
			}
			if f.recv < per {
				done = false
			}
		}
		return done
	})
	for range 100 { // nothing more arrives
		n.poll(t)
		n.clk.Advance(engStep)
	}
	for _, f := range flows {
		var d endpoint.Descriptor
		if ok, _ := f.to.Receive(endpoint.RequestReceive, &d); ok {
			t.Fatalf("flow %x: extra message %+v", f.tag, d)
		}
	}
	ta, tb := n.a.eng.TransportStats(), n.b.eng.TransportStats()
	if ta.Retransmits == 0 || tb.Retransmits == 0 || ta.Returned+tb.Returned != 0 {
		t.Errorf("transport A %+v, B %+v", ta, tb)
	}
	if sa, sb := n.a.eng.Stats(), n.b.eng.Stats(); sa.Delivered+sb.Delivered != 4*per || sa.Acked+sb.Acked != 4*per {
		t.Errorf("engine A %+v, B %+v", sa, sb)
	}
	t.Logf("lost frames: %d to A, %d to B; retransmissions %d + %d", n.a.link.Faults().Lost, n.b.link.Faults().Lost, ta.Retransmits, tb.Retransmits)
}

// Four times more active endpoints than resident frames, on both hosts,
// with one channel: every message is delivered, in order per sender, the
// senders take turns (round robin), and the faults are counted.
// TestEngineResidencyOverAFXDP runs the same body over AF_XDP.
func TestEngineResidency(t *testing.T) {
	residencyBody(t, newEngNet(t, memlink.Options{}, residencyConfig), 4, 100000)
}

// Eight times more active endpoints than frames: every message is
// delivered, and at every step only R endpoints are in the fast tables
// (scheduled, their translation table loaded); the others are reached
// through their doorbells.
func TestEngineResidency8x(t *testing.T) {
	residencyBody(t, newEngNet(t, memlink.Options{}, residencyConfig), 8, 100000)
}

var residencyConfig = EngineConfig{Resident: 3, Loiter: 2, Transport: transport.Config{Channels: 1}}

func residencyBody(t *testing.T, n *engNet, factor, limit int) {
	const per = 40
	eps := factor * residencyConfig.Resident
	var senders, receivers []*endpoint.View
	for i := range EndpointID(eps) {
		senders = append(senders, n.a.endpoint(t, i+1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, i + 1}}}))
		receivers = append(receivers, n.b.endpoint(t, i+1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, i + 1}}}))
	}
	for i, v := range senders {
		for k := range uint64(per) {
			mustSend(t, v, endpoint.RequestSend, short(0, uint32(i), k))
		}
	}
	got := make([]uint64, eps)
	n.run(t, limit, func() bool {
		checkResidency(t, n.a.eng)
		checkResidency(t, n.b.eng)
		done := true
		for i, v := range receivers {
			var ds []endpoint.Descriptor
			drain(t, v, endpoint.RequestReceive, &ds)
			for _, d := range ds {
				if d.Handler != uint32(i) || d.Args[0] != got[i] || d.Dest != 0 {
					t.Fatalf("receiver %d: %+v, want message %d", i, d, got[i])
				}
				got[i]++
			}
			if got[i] < per {
				done = false
			}
		}
		return done
	})
	// The last acknowledgements.
	n.run(t, limit, func() bool { return n.a.eng.Stats().Acked == uint64(eps*per) })
	ra, rb := n.a.eng.ResidencyStats(), n.b.eng.ResidencyStats()
	if ra.Faults <= uint64(eps) || ra.Evictions == 0 || rb.Faults <= uint64(eps) || rb.Evictions == 0 {
		t.Errorf("residency A %+v, B %+v: want more faults than endpoints", ra, rb)
	}
	// The scheduler is offered only endpoints whose next message can
	// leave, so the single channel shows as waiting, never as ErrBusy.
	if sa := n.a.eng.Stats(); sa.Busy != 0 || sa.Acked != uint64(eps*per) || sa.Sent != uint64(eps*per) {
		t.Errorf("engine A %+v", sa)
	}
	t.Logf("%d endpoints, %d frames: residency A %+v, B %+v", eps, residencyConfig.Resident, ra, rb)
}

// checkResidency fails t unless exactly e's resident endpoints are in its
// fast tables: at most R of them, in the scheduler, their tables loaded;
// the others out of the scheduler, tables dropped, marked to ring their
// doorbells.
func checkResidency(t *testing.T, e *Engine) {
	t.Helper()
	res := e.residentEndpoints()
	if len(res) > e.res.Frames() || e.sched.Len() != len(res) {
		t.Fatalf("%d endpoints resident, %d scheduled, %d frames", len(res), e.sched.Len(), e.res.Frames())
	}
	for id, s := range e.eps {
		if s == nil || s.closed {
			continue
		}
		_, inFrame := e.res.Resident(id)
		if s.resident != inFrame || s.resident != (s.table != nil) || !s.resident && s.evIdx < 0 {
			t.Fatalf("endpoint %d: resident %v, in a frame %v, table loaded %v, on the evicted list %v", id, s.resident, inFrame, s.table != nil, s.evIdx >= 0)
		}
	}
}

// The engines run in a goroutine of their own on the system clock while
// the applications send and receive in theirs, through shared memory.
func TestEngineConcurrent(t *testing.T) {
	testenv.NoMemfdLeaks(t, "xam-endpoint")
	la, lb, err := memlink.NewPair(memlink.Options{Loss: 0.02, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	cfg := EngineConfig{Transport: transport.Config{RetransmitAfter: time.Millisecond}}
	cfg.Host = hostA
	ea, err := NewEngine(la, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	cfg.Host = hostB
	eb, err := NewEngine(lb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	if err := ea.AddHost(hostB, lb.HardwareAddr()); err != nil {
		t.Fatal(err)
	}
	if err := eb.AddHost(hostA, la.HardwareAddr()); err != nil {
		t.Fatal(err)
	}
	view := func(e *Engine, table []Name) *endpoint.View {
		m, err := e.CreateEndpoint(1, endpoint.Config{QueueEntries: 8}, VNet{Tag: tagRed, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		v, err := endpoint.Map(m.FD())
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	va := view(ea, []Name{{hostB, 1}})
	defer va.Close()
	vb := view(eb, []Name{{hostA, 1}})
	defer vb.Close()

	const count = 2000
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // the engines
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := ea.Poll(); err != nil {
				t.Error(err)
				return
			}
			if _, err := eb.Poll(); err != nil {
				t.Error(err)
				return
			}
			runtime.Gosched()
		}
	}()
	go func() { // the sender on A
		defer wg.Done()
		for i := uint64(0); i < count; {
			d := short(0, 1, i)
			switch err := va.Send(endpoint.RequestSend, &d); {
			case err == nil:
				i++
			case errors.Is(err, endpoint.ErrQueueFull):
				select {
				case <-done:
					return
				default:
				}
				runtime.Gosched()
			default:
				t.Error(err)
				return
			}
		}
	}()
	go func() { // the receiver on B
		defer wg.Done()
		defer close(done)
		deadline := time.Now().Add(60 * time.Second)
		for i := uint64(0); i < count; {
			var d endpoint.Descriptor
			ok, err := vb.Receive(endpoint.RequestReceive, &d)
			switch {
			case err != nil:
				t.Error(err)
				return
			case ok:
				if d.Args[0] != i || d.Tag != tagRed {
					t.Errorf("got %+v, want message %d", d, i)
					return
				}
				i++
			case time.Now().After(deadline):
				t.Errorf("received %d of %d", i, count)
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	wg.Wait()
}
