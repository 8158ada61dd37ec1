package main

import (
	"slices"
	"testing"
)

// TestCounter: every host reads the sum of every host's ADD.
func TestCounter(t *testing.T) {
	totals, err := run(4)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(totals, []int64{10, 10, 10, 10}) {
		t.Errorf("totals %v, want 10 at each host", totals)
	}
}
