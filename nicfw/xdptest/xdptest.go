package xdptest

import (
	"fmt"
	"net"
	"os"
	"testing"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// Open attaches xam's XDP program (accepting xam frames for mac) to device
// ifindex, opens an AF_XDP socket on its queue 0 and registers it, all in
// do (which runs its function in the device's network namespace), and has
// the program drop the fraction drop of xam frames, with seed. Everything
// is closed in tb's cleanup; a failure ends the test.
func Open(tb testing.TB, do func(func() error) error, ifindex int, mac net.HardwareAddr, drop float64, seed uint64) (*loader.Program, *afxdp.Socket) {
	tb.Helper()
	e, err := datapath.Open(datapath.Place{Ifindex: ifindex, MAC: mac, Do: do}, loader.ModeAuto, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	if err := e.Prog.SetFaults(loader.Faults{DropRate: drop, Seed: seed}); err != nil {
		tb.Fatal(err)
	}
	return e.Prog, e.Sock
}

// OpenUDP is Open for xam's UDP form (datapath.Encap) on h's veth end,
// from its IPv4 address: the link it returns carries the frames in UDP.
func OpenUDP(t *testing.T, h *netnstest.Host, drop float64, seed uint64) (*loader.Program, afxdp.Link) {
	t.Helper()
	e, err := datapath.Open(datapath.Place{Ifindex: h.Index, MAC: h.MAC, Addr: h.Addr.Addr(), Do: h.Do, Encap: datapath.Encap{UDP: true}}, loader.ModeAuto, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.Prog.SetFaults(loader.Faults{DropRate: drop, Seed: seed}); err != nil {
		t.Fatal(err)
	}
	return e.Prog, e.Link()
}

// OpenHost is Open on h's veth end.
func OpenHost(t *testing.T, h *netnstest.Host, drop float64, seed uint64) (*loader.Program, *afxdp.Socket) {
	t.Helper()
	return Open(t, h.Do, h.Index, h.MAC, drop, seed)
}

// Star brings up a lab of n hosts joined by a bridge namespace (name
// gives the lab its name, made unique with the process id), removed when
// tb ends, and returns an AF_XDP socket on each host with xam's XDP
// program dropping the fraction drop of the frames (seeded per host).
func Star(tb testing.TB, name string, n int, drop float64) []afxdp.Link {
	tb.Helper()
	return StarFaults(tb, name, n, Faults{Drop: drop})
}

// Faults are what a star lab does to xam's frames: each host's XDP
// program drops the fraction Drop of those it receives, and the bridge
// delivers the fraction Dup of those each host sends twice (a tcx
// duplicator on the switch's port from the host: loader.Duplicator).
type Faults struct {
	Drop, Dup float64
}

// StarFaults is Star with the faults f. With duplication the lab always
// has a switch, two hosts too.
func StarFaults(tb testing.TB, name string, n int, f Faults) []afxdp.Link {
	tb.Helper()
	testenv.RequirePrivileged(tb)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("%s%d", name, os.Getpid()), Hosts: n, Switch: f.Dup > 0})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := l.Down(); err != nil {
			tb.Errorf("lab down: %v", err)
		}
	})
	if f.Dup > 0 {
		ds, err := datapath.Duplicate(l, f.Dup, 100)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			// The faults were made: a switch that saw traffic duplicated
			// some of it.
			if c, err := ds.Counters(); err == nil && c.Seen >= 200 && c.Duplicated == 0 {
				tb.Errorf("the duplicators saw %d frames and duplicated none", c.Seen)
			} else if err == nil {
				tb.Logf("the duplicators: %d of %d frames sent twice", c.Duplicated, c.Seen)
			}
			ds.Close()
		})
	}
	var links []afxdp.Link
	for i, h := range l.Hosts {
		_, sock := Open(tb, h.Do, h.Index, h.MAC, f.Drop, uint64(i+1))
		links = append(links, sock)
	}
	return links
}
