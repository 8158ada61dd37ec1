package grim

import (
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// TestGRIMOverAFXDP is TestGRIM's body over real AF_XDP sockets on a
// four-host star (a bridge namespace between the hosts), xam's XDP
// program dropping 10% of the frames at every host and the bridge
// delivering 5% of every host's twice (loader.Duplicator), every message
// authenticated (Config.Key).
func TestGRIMOverAFXDP(t *testing.T) {
	key, err := nicfw.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	grimBody(t, xdptest.StarFaults(t, "grim", 4, xdptest.Faults{Drop: 0.10, Dup: 0.05}), clusterConfig{cutThrough: true, key: key})
}

// TestGRIMFirmwareAuthenticated is the body in firmware mode with every
// message authenticated; a daemon refuses the network's tag with another
// key.
func TestGRIMFirmwareAuthenticated(t *testing.T) {
	key, err := nicfw.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	links := xdptest.Hub(t, 4, memlink.Options{Loss: 0.05, Seed: 17})
	grimBody(t, links, clusterConfig{firmware: true, key: key})
}
