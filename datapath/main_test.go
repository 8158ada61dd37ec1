package datapath

import (
	"testing"

	"github.com/xam-project/xam/internal/testenv"
)

// TestMain fails the run if the tests leave sockets, BPF objects, ring or
// UMEM mappings open, or memory locked, behind.
func TestMain(m *testing.M) { testenv.MainWithLeakCheck(m) }
