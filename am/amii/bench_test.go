package amii

import (
	"fmt"
	"net"
	"testing"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// ownEnginePair is two AM-II endpoints, A1 and B1, on two inline engines
// over a memlink pair, each polling its own engine only (as two hosts do):
// A1's table names B1 and B1's names A1.
func ownEnginePair(tb testing.TB) (ha, hb *Endpoint) {
	ha, hb, _, _ = ownEnginePairLinks(tb)
	return ha, hb
}

// ownEnginePairLinks is ownEnginePair with its two links.
func ownEnginePairLinks(tb testing.TB) (ha, hb *Endpoint, la, lb *memlink.Link) {
	return ownEnginePairConfig(tb, nicfw.EngineConfig{})
}

// ownEnginePairConfig is ownEnginePairLinks with engines configured by ec.
func ownEnginePairConfig(tb testing.TB, ec nicfw.EngineConfig) (ha, hb *Endpoint, la, lb *memlink.Link) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { la.Close(); lb.Close() })
	ha, hb = inlinePair(tb, [2]afxdp.Link{la, lb}, [2]net.HardwareAddr{la.HardwareAddr(), lb.HardwareAddr()}, ec)
	return ha, hb, la, lb
}

// inlinePair is ownEnginePairConfig on links, hosts A's and B's, whose
// addresses are macs.
func inlinePair(tb testing.TB, links [2]afxdp.Link, macs [2]net.HardwareAddr, ec nicfw.EngineConfig) (ha, hb *Endpoint) {
	mk := func(i int, id, peer HostID) *Endpoint {
		a, err := Open(links[i], Inline{Host: id, Hosts: map[HostID]net.HardwareAddr{peer: macs[1-i]}, Engine: ec},
			VNet{ID: 1, Tag: amiiRed, Table: []Name{{Host: peer, Endpoint: 1}}}, Config{})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { a.Close() })
		return a
	}
	return mk(0, amiiHostA, amiiHostB), mk(1, amiiHostB, amiiHostA)
}

// BenchmarkAMIIRoundTrip is the processor cost of one AM-II request and
// its reply through the API and two inline engines on a memlink pair, all
// run by the benchmark's goroutine as the two hosts of bench's AM-II ping
// run theirs: each AMII polls its own engine only. A sends a request of
// two or four arguments (Request runs A's engine, which sends it), B's Poll
// receives it and runs the handler, which replies, and sends the reply,
// A's Poll receives it and runs the reply handler. With no wire and
// no system calls it is what AM-II adds to the data path's round trip.
func BenchmarkAMIIRoundTrip(b *testing.B) {
	for _, nargs := range []int{2, 4} {
		b.Run(fmt.Sprintf("args=%d", nargs), func(b *testing.B) { amiiRoundTrip(b, nargs, nicfw.EngineConfig{}) })
	}
	b.Run("args=2,unreliable", func(b *testing.B) {
		amiiRoundTrip(b, 2, nicfw.EngineConfig{Transport: transport.Config{Unreliable: true}})
	})
	b.Run("args=2,unprotected", func(b *testing.B) {
		amiiRoundTrip(b, 2, nicfw.EngineConfig{Unprotected: true})
	})
	b.Run("args=2,baseline", func(b *testing.B) {
		amiiRoundTrip(b, 2, nicfw.EngineConfig{Unprotected: true, Transport: transport.Config{Unreliable: true}})
	})
}

// amiiRoundTrip is BenchmarkAMIIRoundTrip with requests of nargs
// arguments: two go in one compact cell, four in an AAL5 PDU.
func amiiRoundTrip(b *testing.B, nargs int, ec nicfw.EngineConfig) {
	ha, hb, la, lb := ownEnginePairConfig(b, ec)
	echoRoundTrips(b, ha, hb, la, lb, []uint64{1, 2, 3, 4}[:nargs], nil)
}

// benchLink is a link whose frames a benchmark counts: a memlink or an
// AF_XDP socket.
type benchLink interface {
	afxdp.Link
	Stats() (afxdp.Stats, error)
}

// echoRoundTrips times b.N request/reply round trips from ha to hb, whose
// handlers it registers (hb's echoes, ha's counts), with args as the
// requests' arguments, and reports the frames la and lb sent per round
// trip. The benchmark's goroutine polls both; wait, if set, runs before
// each Poll (firmware mode's Wait).
func echoRoundTrips(b *testing.B, ha, hb *Endpoint, la, lb benchLink, args []uint64, wait func(*Endpoint)) {
	hb.Register(func(t *Token, args []uint64) {
		if err := t.Reply(0, args...); err != nil {
			b.Error(err)
		}
	})
	answered := 0
	ha.Register(func(t *Token, args []uint64) { answered++ })
	poll := func(a *Endpoint) {
		if wait != nil {
			wait(a)
		}
		if _, err := a.Poll(); err != nil {
			b.Fatal(err)
		}
	}
	frames := func() uint64 {
		sa, _ := la.Stats()
		sb, _ := lb.Stats()
		return sa.TxFrames + sb.TxFrames
	}
	before := frames()
	b.ReportAllocs()
	defer func() { b.ReportMetric(float64(frames()-before)/float64(b.N), "frames/op") }()
	for b.Loop() {
		want := answered + 1
		if err := ha.Request(0, 0, args...); err != nil {
			b.Fatal(err)
		}
		for answered < want {
			poll(hb)
			poll(ha)
		}
	}
}

// BenchmarkAMIIStream is the processor cost per message of a stream of
// two-argument requests from one endpoint, coalesced, with a window and
// credits of 128, as bench's AM-II message rate runs it, on a memlink pair,
// both hosts run by the benchmark's goroutine: A queues requests while it
// has credits and polls when it has none, B polls, its handler taking
// each without replying (the implicit replies give the credits back).
func BenchmarkAMIIStream(b *testing.B) {
	const window = 128
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { la.Close(); lb.Close() })
	entries := max(window, endpoint.DefaultQueueEntries)
	mk := func(id HostID, l *memlink.Link, peer HostID, pl *memlink.Link, coalesce bool) *Endpoint {
		a, err := Open(l, Inline{Host: id, Hosts: map[HostID]net.HardwareAddr{peer: pl.HardwareAddr()}, Engine: nicfw.EngineConfig{Window: window}},
			VNet{ID: 1, Tag: amiiRed, Table: []Name{{Host: peer, Endpoint: 1}}}, Config{Credits: window, Coalesce: coalesce, QueueEntries: entries})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { a.Close() })
		return a
	}
	ha, hb := mk(amiiHostA, la, amiiHostB, lb, true), mk(amiiHostB, lb, amiiHostA, la, false)
	delivered := 0
	if err := hb.Handle(1, func(*Token, []uint64) { delivered++ }); err != nil {
		b.Fatal(err)
	}
	args := []uint64{1, 2}
	b.ReportAllocs()
	defer testenv.FramesPerOp(b, func() (a, b uint64) {
		sa, _ := la.Stats()
		sb, _ := lb.Stats()
		return sa.TxFrames, sb.TxFrames
	})()
	for b.Loop() {
		for ha.Outstanding() >= window {
			if _, err := hb.Poll(); err != nil {
				b.Fatal(err)
			}
			if _, err := ha.Poll(); err != nil {
				b.Fatal(err)
			}
		}
		if err := ha.Request(0, 1, args...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAMIIIdlePoll is the processor cost of an inline Poll that finds
// nothing: a client that waits for its reply by polling notices it on
// average half an idle Poll late, on each host, so this is part of every
// round trip over a wire (am/ssam's BenchmarkSSAMIdlePoll is SSAM's).
func BenchmarkAMIIIdlePoll(b *testing.B) {
	ha, _ := ownEnginePair(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ha.Poll(); err != nil {
			b.Fatal(err)
		}
	}
}
