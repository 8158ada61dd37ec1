package nicfw

import (
	"fmt"
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// BenchmarkEngineRoundTrip is the processor cost of one AM-II round trip
// through two inline engines on a memlink pair, on the system clock, both
// run by the benchmark's goroutine: A's endpoint sends a short request, B's
// application takes it from its receive queue and replies, A takes the
// reply. With no wire and no system calls it is what the engines add to
// the raw data path's round trip.
func BenchmarkEngineRoundTrip(b *testing.B) { engineRoundTrip(b, nil) }

// BenchmarkEngineRoundTripModule is BenchmarkEngineRoundTrip with the test
// module loaded on both engines: a send gate asked before every message, a
// coarse timer, a command and control handler that the round trips do not
// use. Beside BenchmarkEngineRoundTrip it shows what a loaded module costs
// on the message path; an engine without modules pays a nil check.
func BenchmarkEngineRoundTripModule(b *testing.B) {
	engineRoundTrip(b, func() []Module { return []Module{newProbe()} })
}

func engineRoundTrip(b *testing.B, mods func() []Module) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	mk := func(id HostID, l *memlink.Link, peer HostID, pl *memlink.Link) (*Engine, *endpoint.View) {
		cfg := EngineConfig{Host: id}
		if mods != nil {
			cfg.Modules = mods()
		}
		e, err := NewEngine(l, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := e.AddHost(peer, pl.HardwareAddr()); err != nil {
			b.Fatal(err)
		}
		m, err := e.CreateEndpoint(1, endpoint.Config{}, VNet{Tag: 7, Table: []Name{{peer, 1}}})
		if err != nil {
			b.Fatal(err)
		}
		v, err := endpoint.Map(m.FD())
		if err != nil {
			b.Fatal(err)
		}
		return e, v
	}
	ea, va := mk(1, la, 2, lb)
	eb, vb := mk(2, lb, 1, la)
	defer func() { va.Close(); vb.Close(); ea.Close(); eb.Close() }()
	req := endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: 4, Args: [endpoint.MaxShortArgs]uint64{1, 2, 3, 4}}
	var d endpoint.Descriptor
	poll := func(e *Engine) {
		if _, err := e.Poll(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := va.Send(endpoint.RequestSend, &req); err != nil {
			b.Fatal(err)
		}
		for {
			poll(ea)
			poll(eb)
			if ok, err := vb.Receive(endpoint.RequestReceive, &d); err != nil {
				b.Fatal(err)
			} else if ok {
				break
			}
		}
		d.Class, d.NArgs, d.Dest = endpoint.ClassShort, 4, 0
		if err := vb.Send(endpoint.ReplySend, &d); err != nil {
			b.Fatal(err)
		}
		for {
			poll(eb)
			poll(ea)
			if ok, err := va.Receive(endpoint.ReplyReceive, &d); err != nil {
				b.Fatal(err)
			} else if ok {
				break
			}
		}
	}
}

// BenchmarkEngineIdlePoll is the cost of a Poll that finds nothing to do:
// endpoints open, nothing queued, nothing received. A busy-polling
// engine notices a frame on average half an idle Poll late. With more
// endpoints open it shows what the idle ones cost each Poll: their
// applications ring their page of doorbells (View.MapBells), as amii's,
// grim's and the daemon's do, and nothing else of them is read.
func BenchmarkEngineIdlePoll(b *testing.B) {
	for _, n := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			la, lb, err := memlink.NewPair(memlink.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer la.Close()
			defer lb.Close()
			e, err := NewEngine(la, EngineConfig{Host: 1, Resident: max(n, DefaultResident)})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			if err := e.AddHost(2, lb.HardwareAddr()); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				m, err := e.CreateEndpoint(EndpointID(i+1), endpoint.Config{}, VNet{Tag: 7, Table: []Name{{2, 1}}})
				if err != nil {
					b.Fatal(err)
				}
				v, err := endpoint.Map(m.FD())
				if err != nil {
					b.Fatal(err)
				}
				defer v.Close()
				if err := v.MapBells(e.BellsFD(EndpointID(i + 1))); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Poll(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEndpointFault measures an endpoint fault: loading an endpoint
// into the engine's fast tables (its translation table copied in, the
// scheduler told) and evicting the least recently used one. Three
// endpoints take turns in two frames, so every touch faults.
func BenchmarkEndpointFault(b *testing.B) {
	for _, size := range []int{1, 256, 4096} {
		b.Run(fmt.Sprintf("table=%d", size), func(b *testing.B) {
			la, lb, err := memlink.NewPair(memlink.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer la.Close()
			defer lb.Close()
			e, err := NewEngine(la, EngineConfig{Resident: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			table := make([]Name, size)
			var eps []*epState
			for id := range EndpointID(3) {
				if _, err := e.CreateEndpoint(id+1, endpoint.Config{TableSize: size}, VNet{Tag: 1, Table: table}); err != nil {
					b.Fatal(err)
				}
				eps = append(eps, e.eps[id+1])
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				e.touch(eps[i%3])
			}
			b.StopTimer()
			if st := e.ResidencyStats(); st.Faults < uint64(b.N) {
				b.Fatalf("%d faults in %d touches", st.Faults, b.N)
			}
		})
	}
}
