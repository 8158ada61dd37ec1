package clock

import (
	"testing"
	"time"
)

func TestManual(t *testing.T) {
	var m Manual
	if got := m.Now(); !got.Equal(time.Unix(0, 0)) {
		t.Fatalf("zero Manual reads %v, want the Unix epoch", got)
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewManual(start)
	c.Advance(1500 * time.Millisecond)
	c.Advance(-time.Hour)
	if got, want := c.Now(), start.Add(1500*time.Millisecond); !got.Equal(want) {
		t.Fatalf("Now() = %v, want %v", got, want)
	}
	var _ Clock = c
	var _ Clock = System{}
}

func TestSystem(t *testing.T) {
	a := time.Now()
	b := System{}.Now()
	c := time.Now()
	if b.Before(a) || c.Before(b) {
		t.Fatalf("System.Now() = %v, not between %v and %v", b, a, c)
	}
	// Round(0) strips the monotonic reading: the wall-clock parts agree
	// too (unless the wall clock was stepped since the process started).
	if d := c.Round(0).Sub(b.Round(0)); d < 0 || d > time.Second {
		t.Fatalf("System.Now()'s wall-clock reading is %v behind time.Now's", d)
	}
}
