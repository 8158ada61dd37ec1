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
