package coord

import (
	"testing"
	"time"

	"github.com/xam-project/xam/nicfw/xdptest"
)

// TestTokenOverAFXDP is TestTokenSafetyLiveness's body over real AF_XDP
// sockets on a four-host star (a bridge namespace between the hosts), on
// the system clock, xam's XDP program dropping 10% of the frames at every
// host and the bridge delivering 5% of every host's twice
// (loader.Duplicator): three senders take turns with the fourth host's
// token, every message once.
func TestTokenOverAFXDP(t *testing.T) {
	tokenBody(t, newStarOn(t, xdptest.StarFaults(t, "coord", 4, xdptest.Faults{Drop: 0.10, Dup: 0.05}), nil, Config{}, time.Hour), 6, 60)
}
