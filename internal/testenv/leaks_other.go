//go:build !linux

package testenv

import (
	"os"
	"testing"
)

// MainWithLeakCheck runs the tests and exits; the leak check reads /proc
// and is Linux-only.
func MainWithLeakCheck(m *testing.M) { os.Exit(m.Run()) }
