package endpoint

import (
	"testing"
	"time"
)

// TestBackoff: the sleeps start at MinBackoff, double up to MaxBackoff,
// never exceed what is left, and start again after Reset.
func TestBackoff(t *testing.T) {
	var b Backoff
	want := []time.Duration{MinBackoff, 2 * MinBackoff, 4 * MinBackoff}
	for i, w := range want {
		if got := b.Next(time.Hour); got != w {
			t.Fatalf("sleep %d: %v, want %v", i, got, w)
		}
	}
	for range 20 {
		b.Next(time.Hour)
	}
	if got := b.Next(time.Hour); got != MaxBackoff {
		t.Fatalf("after many: %v, want %v", got, MaxBackoff)
	}
	if got := b.Next(time.Millisecond); got != time.Millisecond {
		t.Fatalf("with 1 ms left: %v", got)
	}
	b.Reset()
	if got := b.Next(time.Hour); got != MinBackoff {
		t.Fatalf("after Reset: %v, want %v", got, MinBackoff)
	}
}
