package grim

import (
	"testing"

	"github.com/xam-project/xam/nicfw/xdptest"
)

// TestGRIMOverAFXDP is TestGRIM's body over real AF_XDP sockets on a
// four-host star (a bridge namespace between the hosts), xam's XDP
// program dropping 10% of the frames at every host.
func TestGRIMOverAFXDP(t *testing.T) {
	grimBody(t, xdptest.Star(t, "grim", 4, 0.10), clusterConfig{cutThrough: true})
}
