//go:build linux

package grim

import (
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
)

// inlinePair returns two inline endpoints of channels logical channels
// on their engines over a memlink pair, peers 0 and 1 (engineConfig, with
// set, if not nil, changing it), all closed when tb ends.
func inlinePair(tb testing.TB, channels int, set func(*nicfw.EngineConfig)) (eps [2]*Endpoint, engs [2]*nicfw.Engine) {
	tb.Helper()
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { la.Close(); lb.Close() })
	peers := []nicfw.Name{{Host: 1, Endpoint: 16}, {Host: 2, Endpoint: 16}}
	for i, l := range []*memlink.Link{la, lb} {
		ec := engineConfig(nicfw.HostID(i+1), 1)
		if set != nil {
			set(&ec)
		}
		eng, err := nicfw.NewEngine(l, ec)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { eng.Close() })
		if err := eng.AddHost(nicfw.HostID(2-i), []*memlink.Link{lb, la}[i].HardwareAddr()); err != nil {
			tb.Fatal(err)
		}
		if eps[i], err = New(eng, Config{Peers: peers, Self: i, CutThrough: true, Channels: channels}); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { eps[i].Close() })
		engs[i] = eng
	}
	return eps, engs
}
