package bench

import (
	"testing"

	"github.com/xam-project/xam/internal/testenv"
)

// TestMain fails the run if the tests leave sockets, eventfds, BPF objects,
// ring or UMEM mappings open, or memory locked, behind. Run again by
// TestHostile as the other user's attacker, the binary attacks and exits
// instead (HostileChild).
func TestMain(m *testing.M) {
	HostileChild()
	testenv.MainWithLeakCheck(m)
}
