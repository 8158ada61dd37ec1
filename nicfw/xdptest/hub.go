package xdptest

import (
	"testing"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
)

// Hub returns n ports of a new in-memory hub (memlink.Hub) with opts,
// closed when the test ends: the in-memory twin of Star.
func Hub(tb testing.TB, n int, opts memlink.Options) []afxdp.Link {
	tb.Helper()
	hub, err := memlink.NewHub(opts)
	if err != nil {
		tb.Fatal(err)
	}
	var ports []afxdp.Link
	for range n {
		p := hub.Attach()
		tb.Cleanup(func() { p.Close() })
		ports = append(ports, p)
	}
	return ports
}
