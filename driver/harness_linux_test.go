//go:build linux

package driver_test

import (
	"testing"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/driver"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/loader"
)

func init() {
	harnesses = append(harnesses,
		harness{"afxdp", func(tb testing.TB, a, b driver.Config) *pair { return newXDPPair(tb, a, b).pair }},
		harness{"packet", newPacketPair},
	)
}

// xdpPair is a pair over AF_XDP sockets on a veth pair, each end with xam's
// XDP program admitting only its device's receive circuits.
type xdpPair struct {
	*pair
	progA *loader.Program
}

// xdpHost loads and attaches the program on h's veth end, opens a socket on
// queue 0 and registers it; the test's cleanup undoes it all.
func xdpHost(tb testing.TB, h *netnstest.Host) (*loader.Program, *afxdp.Socket) {
	tb.Helper()
	var prog *loader.Program
	var sock *afxdp.Socket
	err := h.Do(func() (err error) {
		if prog, err = loader.Load(loader.Config{Admission: true}); err != nil {
			return err
		}
		tb.Cleanup(func() { prog.Close() })
		if _, err = prog.Attach(h.Index, loader.ModeAuto); err != nil {
			return err
		}
		if sock, err = afxdp.Open(h.Index, afxdp.Options{}); err != nil {
			return err
		}
		// A Recv after Close gives back frames still lent, which keep the
		// UMEM mapped until then (afxdp.Socket.Close).
		tb.Cleanup(func() { sock.Close(); sock.Recv(nil) })
		return prog.Register(0, sock.FD())
	})
	if err != nil {
		tb.Fatalf("AF_XDP on %s: %v", h, err)
	}
	return prog, sock
}

// admit admits the receive circuits of cfg's connections: the device's VCI
// table, mirrored in XDP.
func admit(tb testing.TB, prog *loader.Program, cfg driver.Config) {
	tb.Helper()
	for _, c := range cfg.Conns {
		for _, vci := range []uint16{c.RecvVCI, c.RecvVCI + 1} {
			if err := prog.Admit(c.VPI, vci); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

func newXDPPair(tb testing.TB, cfgA, cfgB driver.Config) *xdpPair {
	tb.Helper()
	testenv.RequirePrivileged(tb)
	v := netnstest.NewVethPair(tb, netnstest.WithQueues(1))
	progA, sockA := xdpHost(tb, v.A)
	progB, sockB := xdpHost(tb, v.B)
	cfgA = withPeers(cfgA, v.B.MAC)
	cfgB = withPeers(cfgB, v.A.MAC)
	cfgA.NoLock, cfgB.NoLock = false, false // root may lock
	admit(tb, progA, cfgA)
	admit(tb, progB, cfgB)
	return &xdpPair{
		pair: &pair{
			a: openOn(tb, sockA, cfgA), b: openOn(tb, sockB, cfgB),
			progB: progB, macA: v.A.MAC, macB: v.B.MAC,
		},
		progA: progA,
	}
}

// newPacketPair opens the devices of the system-call path, one in each
// namespace of a veth pair without XDP.
func newPacketPair(tb testing.TB, cfgA, cfgB driver.Config) *pair {
	tb.Helper()
	testenv.RequirePrivileged(tb)
	v := netnstest.NewVethPair(tb, netnstest.WithQueues(1))
	p := &pair{macA: v.A.MAC, macB: v.B.MAC}
	cfgA.NoLock, cfgB.NoLock = false, false // root may lock
	for _, side := range []struct {
		h   *netnstest.Host
		cfg driver.Config
		d   **driver.Device
	}{{v.A, withPeers(cfgA, v.B.MAC), &p.a}, {v.B, withPeers(cfgB, v.A.MAC), &p.b}} {
		err := side.h.Do(func() (err error) {
			*side.d, err = driver.OpenPacket(side.h.Index, side.cfg)
			return err
		})
		if err != nil {
			tb.Fatalf("AF_PACKET device on %s: %v", side.h, err)
		}
		d := *side.d
		tb.Cleanup(func() { d.Close() })
	}
	return p
}
