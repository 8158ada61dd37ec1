package nicfw

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// probeModule is the module seam's test module. Its commands:
//
//	1 (dst, from, n): send n control messages to host dst, numbered from
//	  from; results: the number queued
//	2 (ns): run a timeout after ns nanoseconds on the engine's clock
//	3: fail
//
// It records the control messages it receives and the timeouts that ran,
// and, as a SendGate, holds messages to closedTo back.
type probeModule struct {
	bp       *Backplane
	got      map[HostID][]uint64
	fired    []time.Time
	armed    []time.Time
	closedTo HostID
	ticks    int
}

const probeID = 200

func newProbe() *probeModule {
	return &probeModule{got: make(map[HostID][]uint64), closedTo: engUnknown}
}

func (p *probeModule) Name() string { return "probe" }
func (p *probeModule) ID() uint8    { return probeID }
func (p *probeModule) Init(bp *Backplane) error {
	p.bp = bp
	return nil
}

func (p *probeModule) Command(ep EndpointID, op uint16, args []uint64) ([]uint64, error) {
	switch op {
	case 1:
		if len(args) != 3 {
			return nil, errors.New("want dst, from, n")
		}
		var body [8]byte
		for i := range args[2] {
			binary.BigEndian.PutUint64(body[:], args[1]+i)
			if err := p.bp.SendControl(HostID(args[0]), body[:]); err != nil {
				return []uint64{i}, nil
			}
		}
		return []uint64{args[2]}, nil
	case 2:
		at := p.bp.Now().Add(time.Duration(args[0]))
		p.armed = append(p.armed, at)
		p.bp.After(time.Duration(args[0]), func() { p.fired = append(p.fired, p.bp.Now()) })
		return nil, nil
	}
	return nil, errors.New("no such operation")
}

func (p *probeModule) Control(src HostID, body []byte) {
	p.got[src] = append(p.got[src], binary.BigEndian.Uint64(body))
}

func (p *probeModule) Tick(now time.Time) time.Time {
	p.ticks++
	return now.Add(time.Second)
}

func (p *probeModule) MaySend(_ EndpointID, dst HostID, _, _ int) bool { return dst != p.closedTo }

func (p *probeModule) Sent(EndpointID, HostID, int) {}

// command issues module command op through v and returns its completion.
func command(t *testing.T, n *engNet, v *endpoint.View, op uint32, args ...uint64) endpoint.Descriptor {
	t.Helper()
	d := endpoint.Descriptor{Class: endpoint.ClassCommand, Handler: op, NArgs: uint8(len(args))}
	copy(d.Args[:], args)
	mustSend(t, v, endpoint.RequestSend, d)
	var got []endpoint.Descriptor
	n.run(t, 10000, func() bool {
		drain(t, v, endpoint.ReplyReceive, &got)
		return len(got) > 0
	})
	if got[0].Class != endpoint.ClassCommand || got[0].Handler != op {
		t.Fatalf("completion %+v, want a command completion of %#x", got[0], op)
	}
	return got[0]
}

// moduleBody checks the module seam on n, whose hosts load probes[0] (A)
// and probes[1] (B): a command and its completion, control messages both
// ways delivered exactly once and in order, a command for no module, a
// failing one, a send gate, and timeouts that run once their time has
// come, in time order.
func moduleBody(t *testing.T, n *engNet, probes map[HostID]*probeModule, count int) {
	a1 := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}})
	b1 := n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
	op := func(o uint32) uint32 { return probeID<<16 | o }

	// Control messages both ways, more than a control queue holds, in
	// batches as the queue takes them.
	for _, c := range []struct {
		v   *endpoint.View
		dst HostID
	}{{a1, hostB}, {b1, hostA}} {
		for sent := 0; sent < count; {
			d := command(t, n, c.v, op(1), uint64(c.dst), uint64(sent), uint64(min(count-sent, 40)))
			if reason := CommandStatus(d.Tag); reason != CommandOK || d.NArgs != 1 {
				t.Fatalf("command: status %d, %d results", reason, d.NArgs)
			}
			sent += int(d.Args[0])
			n.run(t, 10000, func() bool { return n.a.eng.mods.ctl[c.dst] == nil && n.b.eng.mods.ctl[c.dst] == nil })
		}
	}
	want := make([]uint64, count)
	for i := range want {
		want[i] = uint64(i)
	}
	n.run(t, 10000, func() bool { return len(probes[hostB].got[hostA]) >= count && len(probes[hostA].got[hostB]) >= count })
	for _, c := range []struct{ at, from HostID }{{hostB, hostA}, {hostA, hostB}} {
		if got := probes[c.at].got[c.from]; !slices.Equal(got, want) {
			t.Errorf("host %d got from %d: %d messages, want %d in order, exactly once", c.at, c.from, len(got), count)
		}
	}

	// A command for no module, and one the module refuses.
	if d := command(t, n, a1, 77<<16|1); CommandStatus(d.Tag) != CommandUnknown {
		t.Errorf("command for no module: status %d", d.Tag)
	}
	if d := command(t, n, a1, op(3)); CommandStatus(d.Tag) != CommandFailed {
		t.Errorf("failing command: status %d", d.Tag)
	}

	// A send gate: closed to B, A1's message waits; opened, it leaves.
	probes[hostA].closedTo = hostB
	mustSend(t, a1, endpoint.RequestSend, short(0, 1, 42))
	for range 20 {
		n.poll(t)
	}
	if st := n.b.eng.Stats(); st.Delivered != 0 {
		t.Fatalf("a message passed a closed gate: %+v", st)
	}
	if n.a.eng.ModuleStats().GateHeld == 0 {
		t.Error("the gate was not asked")
	}
	probes[hostA].closedTo = engUnknown
	var got []endpoint.Descriptor
	n.run(t, 10000, func() bool {
		drain(t, b1, endpoint.RequestReceive, &got)
		return len(got) == 1
	})
	if got[0].Args[0] != 42 {
		t.Errorf("after the gate opened: %+v", got[0])
	}

	// Timeouts: each runs once its time has come on the engine's clock,
	// not before, in time order.
	for _, d := range []time.Duration{30 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond} {
		if d := command(t, n, a1, probeID<<16|2, uint64(d)); CommandStatus(d.Tag) != CommandOK {
			t.Fatalf("timeout command: status %d", d.Tag)
		}
	}
	p := probes[hostA]
	n.run(t, 10000, func() bool { return len(p.fired) == 3 })
	slices.SortFunc(p.armed, func(a, b time.Time) int { return a.Compare(b) })
	for i, at := range p.fired {
		if at.Before(p.armed[i]) {
			t.Errorf("timeout %d ran at %v, before its time %v", i, at, p.armed[i])
		}
	}
	if !slices.IsSortedFunc(p.fired, func(a, b time.Time) int { return a.Compare(b) }) {
		t.Errorf("timeouts out of order: %v", p.fired)
	}
	if p.ticks == 0 {
		t.Error("the coarse timer never ran")
	}
	if st := n.a.eng.ModuleStats(); st.Timeouts != 3 || st.Commands == 0 || st.ControlRecv == 0 {
		t.Errorf("module stats %+v", st)
	}
}

// TestModuleSeam runs the test module on two engines over a memlink that
// loses 10% of the frames: commands, control messages under loss, a send
// gate, and timeouts on the engine's clock (moduleBody).
func TestModuleSeam(t *testing.T) {
	probes := map[HostID]*probeModule{}
	n := newEngNetWith(t, memlink.Options{Loss: 0.10, Seed: 5}, EngineConfig{}, func(id HostID, c *EngineConfig) {
		probes[id] = newProbe()
		c.Modules = []Module{probes[id]}
	})
	moduleBody(t, n, probes, 200)
	if st := n.a.eng.TransportStats(); st.Retransmits == 0 {
		t.Errorf("no retransmissions under 10%% loss: %+v", st)
	}

}

// TestModuleConfig: module ids must be distinct and not 0.
func TestModuleConfig(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	for _, mods := range [][]Module{{newProbe(), newProbe()}, {zeroModule{}}} {
		if _, err := NewEngine(la, EngineConfig{Modules: mods}); !errors.Is(err, ErrConfig) {
			t.Errorf("modules %v: %v, want ErrConfig", mods, err)
		}
	}
}

type zeroModule struct{}

func (zeroModule) Name() string          { return "zero" }
func (zeroModule) ID() uint8             { return 0 }
func (zeroModule) Init(*Backplane) error { return nil }

// gateRecorder is a SendGate that records what it is asked and told, and
// holds everything back while shut.
type gateRecorder struct {
	shut  bool
	asked [][2]int // size, left
	sent  []int    // left
}

func (g *gateRecorder) Name() string          { return "gate" }
func (g *gateRecorder) ID() uint8             { return 9 }
func (g *gateRecorder) Init(*Backplane) error { return nil }
func (g *gateRecorder) MaySend(_ EndpointID, _ HostID, size, left int) bool {
	g.asked = append(g.asked, [2]int{size, left})
	return !g.shut
}
func (g *gateRecorder) Sent(_ EndpointID, _ HostID, left int) { g.sent = append(g.sent, left) }

// A SendGate sees each message's size and what is left of it: a short
// message once, a bulk message chunk by chunk down to 0; while it is shut
// nothing leaves; a bulk message given up halfway is reported done.
func TestSendGateSizes(t *testing.T) {
	g := &gateRecorder{}
	n := newEngNetWith(t, memlink.Options{}, EngineConfig{Window: 4}, func(id HostID, c *EngineConfig) {
		if id == hostA {
			c.Modules = []Module{g}
		}
	})
	cfg := endpoint.Config{StagingSize: 256 << 10}
	a1, _, b1, _ := twoNets(t, n, cfg, cfg)
	const length = 30_000
	room := int(n.a.eng.bulkRoom(n.a.eng.MaxPayload(), 0))
	g.shut = true
	mustSend(t, a1, endpoint.RequestSend, short(1, 1, 5))
	for range 10 {
		n.poll(t)
	}
	if st := n.b.eng.Stats(); st.Delivered != 0 || len(g.asked) == 0 || g.asked[0] != [2]int{msgCompactLen + 8, msgCompactLen + 8} {
		t.Fatalf("with the gate shut: B delivered %d, gate asked %v", st.Delivered, g.asked)
	}
	g.shut = false
	mustSend(t, a1, endpoint.RequestSend, bulk(1, 2, 0, 0, length))
	var got []endpoint.Descriptor
	n.run(t, 10000, func() bool {
		drain(t, b1, endpoint.RequestReceive, &got)
		return len(got) == 2
	})
	var want []int
	for left := length - room; left > 0; left -= room {
		want = append(want, left)
	}
	want = append([]int{0}, append(want, 0)...) // the short message, then the chunks
	if !slices.Equal(g.sent, want) {
		t.Errorf("Sent with %v, want %v", g.sent, want)
	}
	if last := g.asked[len(g.asked)-1]; last[0] != length || last[1] > room {
		t.Errorf("last asked %v", last)
	}

	// A bulk message whose receiver is gone: given up, reported done.
	n.run(t, 10000, func() bool { return n.a.eng.inFlight() == 0 }) // the last acknowledgements
	g.sent = nil
	n.b.link.Close()
	mustSend(t, a1, endpoint.RequestSend, bulk(1, 3, 0, 0, 200_000))
	for range 10 {
		if _, err := n.a.eng.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	n.clk.Advance(engGiveUp + engStep)
	for range 10 {
		if _, err := n.a.eng.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	if len(g.sent) == 0 || g.sent[len(g.sent)-1] != 0 || slices.Contains(g.sent[:len(g.sent)-1], 0) {
		t.Errorf("a bulk message given up: Sent with %v, want a 0 last only; A %+v %+v", g.sent, n.a.eng.Stats(), n.a.eng.TransportStats())
	}
}
