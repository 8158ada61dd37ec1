package main

import (
	"testing"

	"github.com/xam-project/xam/internal/testenv"
)

// TestAMIIKV runs the example in both modes, as `go run` would.
func TestAMIIKV(t *testing.T) {
	testenv.RequirePrivileged(t)
	for _, mode := range []string{"inline", "firmware"} {
		t.Run(mode, func(t *testing.T) {
			if err := run(mode, 300); err != nil {
				t.Fatal(err)
			}
		})
	}
}
