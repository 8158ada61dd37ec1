package am

import (
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// ownEnginePair is two AM-II endpoints, A1 and B1, on two inline engines
// over a memlink pair, each polling its own engine only (as two hosts do):
// A1's table names B1 and B1's names A1.
func ownEnginePair(tb testing.TB) (ha, hb *AMII) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { la.Close(); lb.Close() })
	mk := func(id nicfw.HostID, l *memlink.Link, peer nicfw.HostID, pl *memlink.Link) *AMII {
		e, err := nicfw.NewEngine(l, nicfw.EngineConfig{Host: id})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { e.Close() })
		if err := e.AddHost(peer, pl.HardwareAddr()); err != nil {
			tb.Fatal(err)
		}
		m, err := e.CreateEndpoint(1, endpoint.Config{}, nicfw.VNet{Tag: amiiRed, Table: []nicfw.Name{{Host: peer, Endpoint: 1}}})
		if err != nil {
			tb.Fatal(err)
		}
		v, err := endpoint.Map(m.FD())
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { v.Close() })
		a, err := NewAMII(v, e.Poll, AMIIConfig{})
		if err != nil {
			tb.Fatal(err)
		}
		return a
	}
	return mk(amiiHostA, la, amiiHostB, lb), mk(amiiHostB, lb, amiiHostA, la)
}

// BenchmarkAMIIRoundTrip is the processor cost of one AM-II request and
// its reply through the API and two inline engines on a memlink pair, all
// run by the benchmark's goroutine as the two hosts of bench's AM-II ping
// run theirs: each AMII polls its own engine only. A sends a request of
// four arguments (Request runs A's engine, which sends it), B's Poll
// receives it and runs the handler, which replies, and sends the reply,
// A's Poll receives it and runs the reply handler. With no wire and
// no system calls it is what AM-II adds to the data path's round trip.
func BenchmarkAMIIRoundTrip(b *testing.B) {
	ha, hb := ownEnginePair(b)
	hb.Register(func(t *Token2, args []uint64) {
		if err := t.Reply(0, args...); err != nil {
			b.Error(err)
		}
	})
	answered := 0
	ha.Register(func(t *Token2, args []uint64) { answered++ })
	poll := func(a *AMII) {
		if _, err := a.Poll(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		want := answered + 1
		if err := ha.Request(0, 0, 1, 2, 3, 4); err != nil {
			b.Fatal(err)
		}
		for answered < want {
			poll(hb)
			poll(ha)
		}
	}
}
