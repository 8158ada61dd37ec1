package amii

import (
	"slices"
	"testing"
)

// The pending ring against a slice doing the same: pushes that wrap
// around and outgrow it, removals at the front, back and middle, keep.
func TestPendingRing(t *testing.T) {
	r := newPendingRing(4)
	var want []uint32
	check := func(step string) {
		t.Helper()
		var got []uint32
		for i := range r.Len() {
			got = append(got, r.at(i).handler)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: %v, want %v", step, got, want)
		}
	}
	next := uint32(0)
	push := func(k int) {
		for range k {
			r.push(pendingRequest{handler: next})
			want = append(want, next)
			next++
		}
	}
	remove := func(i int) {
		r.remove(i)
		want = slices.Delete(want, i, i+1)
	}
	push(4)
	remove(0)
	remove(0)
	push(2) // wraps around
	check("wrapped")
	remove(1) // nearer the front
	remove(2) // nearer the back
	check("removed")
	push(5) // outgrows 4
	check("grown")
	remove(r.Len() - 1)
	remove(3)
	r.keep(func(p *pendingRequest) bool { return p.handler%2 == 0 })
	want = slices.DeleteFunc(want, func(h uint32) bool { return h%2 != 0 })
	check("kept")
	for r.Len() > 0 {
		remove(0)
	}
	check("empty")
}
