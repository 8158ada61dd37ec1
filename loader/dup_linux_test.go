package loader

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/internal/netnstest"
)

// bridgeLab is host A -- [bridge namespace S] -- host B: two veth pairs
// whose inner ends are ports of one bridge in S.
type bridgeLab struct {
	A, B   *netnstest.Host
	S      *netnstest.Host // the bridge's namespace (pair 2's A side)
	FromA  int             // ifindex in S of the port towards A
	bridge string
}

// newBridgeLab builds the lab from two netnstest pairs: pair 1's B end is
// moved into pair 2's A namespace, where both become bridge ports. The
// pairs' cleanups remove everything (the bridge goes with its namespace).
func newBridgeLab(t *testing.T) *bridgeLab {
	t.Helper()
	p1 := netnstest.NewVethPair(t)
	p2 := netnstest.NewVethPair(t)
	lab := &bridgeLab{A: p1.A, B: p2.B, S: p2.A, bridge: fmt.Sprintf("xbr%d", p2.A.Index)}
	s := lab.S.Netlink

	fromA, err := p1.B.Netlink.LinkByIndex(p1.B.Index)
	if err == nil {
		err = p1.B.Netlink.LinkSetNsFd(fromA, int(lab.S.Handle))
	}
	if err != nil {
		t.Fatalf("moving %s into %s: %v", p1.B, lab.S.NS, err)
	}
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: lab.bridge}}
	if err := s.LinkAdd(br); err != nil {
		t.Fatalf("adding bridge in %s: %v", lab.S.NS, err)
	}
	// Keep the bridge silent (no IPv6 router solicitations, MLD reports).
	err = lab.S.Do(func() error {
		return os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", lab.bridge, "disable_ipv6"), []byte("1"), 0)
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("disabling IPv6 on the bridge: %v", err)
	}
	for _, name := range []string{p1.B.Link, p2.A.Link} {
		port, err := s.LinkByName(name)
		if err == nil {
			err = s.LinkSetMaster(port, br)
		}
		if err == nil {
			err = s.LinkSetUp(port)
		}
		if err != nil {
			t.Fatalf("making %s a port of %s: %v", name, lab.bridge, err)
		}
	}
	fromA, err = s.LinkByName(p1.B.Link)
	if err != nil {
		t.Fatal(err)
	}
	lab.FromA = fromA.Attrs().Index
	if err := s.LinkSetUp(br); err != nil {
		t.Fatalf("bringing %s up: %v", lab.bridge, err)
	}
	return lab
}

// attachDup attaches a duplicator to the bridge port towards A (the
// sender), closed at the end of the test.
func (lab *bridgeLab) attachDup(t *testing.T, d Duplicate) *Duplicator {
	t.Helper()
	var dup *Duplicator
	err := lab.S.Do(func() (err error) {
		dup, err = AttachDuplicator(lab.FromA, d)
		return err
	})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	t.Cleanup(func() {
		if err := dup.Close(); err != nil {
			t.Errorf("closing the duplicator: %v", err)
		}
	})
	return dup
}

func dupCounters(t *testing.T, d *Duplicator) DupCounters {
	t.Helper()
	c, err := d.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDuplicator(t *testing.T) {
	lab := newBridgeLab(t)
	const rate, n = 0.1, 5000
	dup := lab.attachDup(t, Duplicate{Rate: rate})
	// The receiver counts what arrives with the XDP program.
	p := load(t, Config{})
	attach(t, p, lab.B, ModeGeneric)
	send := sender(t, lab.A)

	f := withMAC(ours(3), lab.B.MAC)
	for range n {
		send(f)
	}
	for range 100 {
		send(withMAC(ipv4Frame(), lab.B.MAC)) // not ours: never duplicated
	}
	c := waitCounters(t, p, func(c Counters) bool {
		d := dupCounters(t, dup)
		return d.Seen == n && c.Received == n+d.Duplicated && c.Passed >= 100
	})
	d := dupCounters(t, dup)
	t.Logf("duplicator %+v; receiver %+v", d, c)
	if d.Seen != n || d.CloneErrors != 0 {
		t.Errorf("duplicator saw %d frames of %d (clone errors %d)", d.Seen, n, d.CloneErrors)
	}
	if c.Received != n+d.Duplicated {
		t.Errorf("receiver got %d xam frames, want %d sent + %d duplicates", c.Received, n, d.Duplicated)
	}
	if tol := tolerance(rate, n); !within(d.Duplicated, n, rate, tol) {
		t.Errorf("duplicated %d of %d, want %.0f%% ± %.1f", d.Duplicated, n, 100*rate, 100*tol)
	}
	if c.Passed < 100 {
		t.Errorf("receiver passed %d frames, want the 100 IPv4 frames", c.Passed)
	}

	// Rate 0: no more duplicates.
	if err := dup.SetRate(0, 0); err != nil {
		t.Fatal(err)
	}
	for range 500 {
		send(f)
	}
	c = waitCounters(t, p, func(c Counters) bool { return c.Received == n+d.Duplicated+500 })
	if d2 := dupCounters(t, dup); d2.Duplicated != d.Duplicated || c.Received != n+d.Duplicated+500 {
		t.Errorf("after SetRate(0): duplicator %+v, receiver %+v", d2, c)
	}

	// Rate 1: every frame twice, never three times.
	if err := dup.SetRate(1, 0); err != nil {
		t.Fatal(err)
	}
	before := counters(t, p).Received
	for range 500 {
		send(f)
	}
	c = waitCounters(t, p, func(c Counters) bool { return c.Received == before+1000 })
	if c.Received != before+1000 {
		t.Errorf("rate 1: receiver got %d frames for 500 sent, want 1000", c.Received-before)
	}
}

func TestDuplicatorFilters(t *testing.T) {
	lab := newBridgeLab(t)
	p := load(t, Config{})
	attach(t, p, lab.B, ModeGeneric)
	send := sender(t, lab.A)
	other := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0c} // unknown: the bridge floods it to B

	t.Run("EtherType", func(t *testing.T) {
		dup := lab.attachDup(t, Duplicate{EtherType: 0x88b6, Rate: 1, Seed: 3})
		before := counters(t, p).Received
		send(withMAC(ours(1), lab.B.MAC)) // 0x88B5: not for this duplicator
		c := waitCounters(t, p, func(c Counters) bool { return c.Received == before+1 })
		if d := dupCounters(t, dup); d.Seen != 0 || d.Duplicated != 0 || c.Received != before+1 {
			t.Errorf("duplicator for 0x88b6: %+v, receiver %+v", d, c)
		}
	})
	t.Run("DstMAC", func(t *testing.T) {
		dup := lab.attachDup(t, Duplicate{DstMAC: lab.B.MAC, Rate: 1})
		before := counters(t, p).Received
		send(withMAC(ours(1), lab.B.MAC), withMAC(ours(1), other), withMAC(ours(1), broadcast))
		c := waitCounters(t, p, func(c Counters) bool { return c.Received == before+5 })
		d := dupCounters(t, dup)
		if d.Seen != 2 || d.Duplicated != 2 || c.Received != before+5 {
			t.Errorf("duplicator for %v: %+v, receiver got %d frames for 3 sent, want 5", lab.B.MAC, d, c.Received-before)
		}
	})
}

func TestDuplicatorValidates(t *testing.T) {
	lab := newBridgeLab(t)
	err := lab.S.Do(func() error {
		for _, d := range []Duplicate{{Rate: -1}, {Rate: 2}, {EtherType: 0x0100, Rate: 0.5}, {DstMAC: net.HardwareAddr{1}}} {
			if dup, err := AttachDuplicator(lab.FromA, d); err == nil {
				dup.Close()
				return fmt.Errorf("AttachDuplicator accepted %+v", d)
			}
		}
		if _, err := AttachDuplicator(0, Duplicate{}); err == nil {
			return errors.New("AttachDuplicator accepted ifindex 0")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	dup := lab.attachDup(t, Duplicate{Rate: 0.5})
	if err := dup.SetRate(1.5, 0); err == nil {
		t.Error("SetRate(1.5) accepted")
	}
	if err := dup.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := dup.Counters(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Counters after Close: %v", err)
	}
	if err := dup.SetRate(0.5, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("SetRate after Close: %v", err)
	}
}
