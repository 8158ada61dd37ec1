package mapper

import (
	"net"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/clock"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// TestModule runs the mapper as the module of three engines on one
// segment: the engines learn the same table, each its own id from it, and
// then carry a message between two endpoints named by those ids. Nothing
// outside the engines drives the mapper: its frames reach it through the
// engine's link, and the engine's coarse timer runs it.
func TestModule(t *testing.T) {
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	h, err := memlink.NewHub(memlink.Options{BatchSize: 8, Depth: 256})
	if err != nil {
		t.Fatal(err)
	}
	var engs []*nicfw.Engine
	var mods []*Module
	for i := range 3 {
		l := h.AttachMAC(net.HardwareAddr{2, 0, 0, 0, 0, byte(0x30 + i)})
		m := NewModule(Config{Clock: clk, ProbeInterval: 20 * time.Millisecond, Privileged: true})
		cfg := nicfw.EngineConfig{Host: 100, Modules: []nicfw.Module{m}}
		cfg.Transport.Clock = clk
		e, err := nicfw.NewEngine(l, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		engs, mods = append(engs, e), append(mods, m)
	}
	poll := func() {
		for _, e := range engs {
			if _, err := e.Poll(); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(time.Millisecond)
	}
	agreed := func() bool {
		seen := map[nicfw.HostID]bool{}
		for i, m := range mods {
			if len(m.Table().Hosts) != 3 || m.Table().Epoch != mods[0].Table().Epoch || m.LastError() != nil {
				return false
			}
			seen[engs[i].Host()] = true
		}
		return len(seen) == 3 && !seen[100]
	}
	for i := 0; !agreed(); i++ {
		if i == 20000 {
			for i, m := range mods {
				t.Logf("engine %d: host %d, table %+v, stats %+v, err %v", i, engs[i].Host(), m.Table(), m.Stats(), m.LastError())
			}
			t.Fatal("the engines' mappers did not agree on a table")
		}
		poll()
	}
	if st := engs[0].ModuleStats(); st.Ticks == 0 || st.FramesForMod == 0 {
		t.Errorf("module stats %+v: the engine did not run the mapper", st)
	}

	// A message from engine 0's endpoint to engine 2's, by their ids.
	a, b := engs[0], engs[2]
	ma, err := a.CreateEndpoint(1, endpoint.Config{}, nicfw.VNet{Tag: 7, Table: []nicfw.Name{{Host: b.Host(), Endpoint: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := b.CreateEndpoint(1, endpoint.Config{}, nicfw.VNet{Tag: 7, Table: []nicfw.Name{{Host: a.Host(), Endpoint: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	va, err := endpoint.Map(ma.FD())
	if err != nil {
		t.Fatal(err)
	}
	defer va.Close()
	vb, err := endpoint.Map(mb.FD())
	if err != nil {
		t.Fatal(err)
	}
	defer vb.Close()
	if err := va.Send(endpoint.RequestSend, &endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: 1, Args: [8]uint64{42}}); err != nil {
		t.Fatal(err)
	}
	var d endpoint.Descriptor
	for i := 0; ; i++ {
		if i == 20000 {
			t.Fatalf("not delivered: engine 0 %+v, engine 2 %+v", a.Stats(), b.Stats())
		}
		poll()
		if ok, err := vb.Receive(endpoint.RequestReceive, &d); err != nil {
			t.Fatal(err)
		} else if ok {
			break
		}
	}
	if d.Args[0] != 42 || d.Dest != 0 {
		t.Errorf("delivered %+v", d)
	}
}
