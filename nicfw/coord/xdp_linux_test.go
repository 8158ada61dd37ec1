package coord

import (
	"testing"
	"time"

	"github.com/xam-project/xam/nicfw/xdptest"
)

// TestTokenOverAFXDP is TestTokenSafetyLiveness's body over real AF_XDP
// sockets on a four-host star (a bridge namespace between the hosts), on
// the system clock, xam's XDP program dropping 10% of the frames at every
// host: three senders take turns with the fourth host's token.
func TestTokenOverAFXDP(t *testing.T) {
	tokenBody(t, newStarOn(t, xdptest.Star(t, "coord", 4, 0.10), nil, Config{}, time.Hour), 6, 60)
}
