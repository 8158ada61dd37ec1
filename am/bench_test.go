package am

import "testing"

// BenchmarkAMIIRoundTrip is the processor cost of one AM-II request and
// its reply through the API and two inline engines on a memlink pair, all
// run by the benchmark's goroutine: A1 sends a request of four arguments,
// B1's handler replies with them, A1's reply handler runs. With no wire
// and no system calls it is what AM-II adds to the data path's round trip
// (nicfw's BenchmarkEngineRoundTrip is the engines' part).
func BenchmarkAMIIRoundTrip(b *testing.B) {
	n := newAMIINet(b, AMIIConfig{})
	n.serveB = true
	n.b1.Register(func(t *Token2, args []uint64) {
		if err := t.Reply(0, args...); err != nil {
			b.Error(err)
		}
	})
	answered := 0
	n.a1.Register(func(t *Token2, args []uint64) { answered++ })
	b.ReportAllocs()
	for b.Loop() {
		want := answered + 1
		if err := n.a1.Request(0, 0, 1, 2, 3, 4); err != nil {
			b.Fatal(err)
		}
		for answered < want {
			if _, err := n.a1.Poll(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
