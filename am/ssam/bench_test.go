package ssam

import (
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/testenv"
)

// BenchmarkSSAMRoundTrip is the processor cost of one SSAM request of 32
// bytes and its reply through the API and two devices on a memlink pair,
// all run by the benchmark's goroutine: A's Request sends it, B's Poll
// runs the handler, which replies, A's Poll runs the reply handler. It is
// measured as am/amii's BenchmarkAMIIRoundTrip is (four 8-byte arguments
// there), so that the two stand side by side: with no wire and no system
// calls, what each API adds to the data path's round trip.
func BenchmarkSSAMRoundTrip(b *testing.B) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	ha, hb := endpoints(b, la, lb, Config{Timeout: time.Hour})
	var replyH HandlerID
	echo := hb.Register(func(t *Token, data []byte) {
		if err := t.Reply(replyH, data); err != nil {
			b.Error(err)
		}
	})
	answered := 0
	replyH = ha.Register(func(*Token, []byte) { answered++ })
	msg := make([]byte, 32)
	poll := func(e *Endpoint) {
		if _, err := e.Poll(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		want := answered + 1
		if err := ha.Request(0, echo, msg); err != nil {
			b.Fatal(err)
		}
		for answered < want {
			poll(hb)
			poll(ha)
		}
	}
}

// BenchmarkSSAMIdlePoll is the processor cost of a Poll that finds
// nothing, as am/amii's BenchmarkAMIIIdlePoll measures AM-II's.
func BenchmarkSSAMIdlePoll(b *testing.B) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	ha, _ := endpoints(b, la, lb, Config{Timeout: time.Hour})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ha.Poll(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSSAMStream is the processor cost per message of a stream of
// 16-byte requests, batched 28 to a trap with a window of 63, as bench's
// SSAM message rate runs it ("ssam batch 28"), on a memlink pair, both
// endpoints run by the benchmark's goroutine: A requests while its window
// has room, and polls both when it has none; B's handler takes each
// without replying. am/amii's BenchmarkAMIIStream is AM-II's.
func BenchmarkSSAMStream(b *testing.B) {
	const window = 63
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	ha, hb := endpoints(b, la, lb, Config{Window: window, Batch: 28, Timeout: time.Hour})
	delivered := 0
	sink := hb.Register(func(*Token, []byte) { delivered++ })
	msg := make([]byte, 16)
	poll := func(e *Endpoint) {
		if _, err := e.Poll(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	defer testenv.FramesPerOp(b, func() (a, b uint64) { return ha.Device().Stats().FramesSent, hb.Device().Stats().FramesSent })()
	for b.Loop() {
		for ha.Outstanding(0) >= window {
			poll(hb)
			poll(ha)
		}
		if err := ha.Request(0, sink, msg); err != nil {
			b.Fatal(err)
		}
	}
}
