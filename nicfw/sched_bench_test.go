package nicfw

import (
	"fmt"
	"testing"
)

// BenchmarkSchedIdle is one scheduling decision with one or two busy
// endpoints among idle ones, all of one owner and of weight 1: every
// decision ends a visit (an endpoint of weight 1 sends once a round), and
// with one busy endpoint begins a new round, the case where a scheduler
// that asks every endpoint in turn pays for every idle one.
func BenchmarkSchedIdle(b *testing.B) {
	for _, busy := range []int{1, 2} {
		for _, idle := range []int{0, 6, 64, 1024} {
			b.Run(fmt.Sprintf("busy=%d/idle=%d", busy, idle), func(b *testing.B) {
				s, err := NewScheduler(0)
				if err != nil {
					b.Fatal(err)
				}
				n := busy + idle
				pending := make([]bool, n)
				for i := range busy {
					pending[(i*n+n/2)/busy] = true // spread among the idle ones
				}
				for ep := range n {
					if err := s.Add(ep, 1); err != nil {
						b.Fatal(err)
					}
				}
				p := PendingFunc(func(ep int) bool { return pending[ep] })
				b.ReportAllocs()
				for b.Loop() {
					if _, ok := s.Next(p); !ok {
						b.Fatal("nothing chosen")
					}
				}
			})
		}
	}
}
