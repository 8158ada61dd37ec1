package datapath

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath/encap"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

var routedLabs atomic.Int32

// routedLab builds a routed lab of two hosts (lab.Config.Routed), removed
// at the end of the test.
func routedLab(t *testing.T, mtu int) *lab.Lab {
	t.Helper()
	testenv.RequirePrivileged(t)
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("dpu%d_%d", os.Getpid(), routedLabs.Add(1)), Routed: true, MTU: mtu})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Down(); err != nil {
			t.Error(err)
		}
	})
	return l
}

// xamFrame returns an xam frame of n cells from src to dst.
func xamFrame(t *testing.T, dst, src net.HardwareAddr, n, mtu int) []byte {
	t.Helper()
	sdu := make([]byte, n*cells.PayloadSize-cells.TrailerSize)
	for i := range sdu {
		sdu[i] = byte(i * 7)
	}
	cs, err := cells.Segment(cells.SAR{VCI: 40}, sdu)
	if err != nil {
		t.Fatal(err)
	}
	f, err := (&cells.Framer{Dst: dst, Src: src, MTU: mtu}).Append(nil, cs)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestUDPEncap: on two hosts of different subnets joined by a router
// namespace, endpoints of the UDP form (IPv4 and IPv6, native and
// generic XDP, MTU 1500 and 9000) carry xam frames through the kernel's
// forwarding both ways, the largest the link takes included; the port
// is held while they are open, other UDP traffic still reaches the
// kernel, and raw xam frames are not taken.
func TestUDPEncap(t *testing.T) {
	for _, c := range []struct {
		mtu  int
		ipv6 bool
		mode loader.Mode
	}{{1500, false, loader.ModeGeneric}, {1500, true, loader.ModeNative}, {9000, false, loader.ModeNative}, {9000, true, loader.ModeGeneric}} {
		t.Run(fmt.Sprintf("mtu=%d/ipv6=%v/%v", c.mtu, c.ipv6, c.mode), func(t *testing.T) {
			l := routedLab(t, c.mtu)
			enc := Encap{UDP: true, IPv6: c.ipv6}
			pa, pb := OnHost(l.Hosts[0]), OnHost(l.Hosts[1])
			pa.Encap, pb.Encap = enc, enc
			a, err := Open(pa, c.mode, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := Open(pb, c.mode, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			over := cells.UDPOverhead4
			if c.ipv6 {
				over = cells.UDPOverhead6
			}
			if got := a.Link().MTU(); got != c.mtu-over {
				t.Errorf("link MTU %d, want %d", got, c.mtu-over)
			}
			peer, err := a.Peer(pb)
			if err != nil {
				t.Fatal(err)
			}
			if want, err := pb.Address(); err != nil || !bytes.Equal(peer, want) || !bytes.Equal(peer, b.MAC) {
				t.Fatalf("A knows B as %v; B's address %v, B's endpoint %v", peer, want, b.MAC)
			}
			if _, err := b.Peer(pa); err != nil { // B answers A
				t.Fatal(err)
			}

			defer startEcho(t, b)()
			most := cells.CellsPerFrame(a.Link().MTU())
			for _, n := range []int{1, 3, most} {
				pingEcho(t, a, xamFrame(t, peer, a.MAC, n, a.Link().MTU()), 5)
			}

			// The port is xam's while the endpoint is open.
			ip, _ := pa.IP()
			err = pa.Do(func() error {
				c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ip, cells.DefaultUDPPort)))
				if err == nil {
					c.Close()
				}
				return err
			})
			if err == nil {
				t.Error("another socket took xam's port")
			}
			// Other UDP traffic is the kernel's, across the router.
			kernelUDP(t, l.Hosts[0], l.Hosts[1], c.ipv6)
			if s := a.UDP.EncapStats(); s.Received == 0 || s.Sent == 0 || s.Malformed != 0 || s.NoPeer != 0 {
				t.Errorf("A's counters %+v", s)
			}
		})
	}
}

// kernelUDP exchanges a datagram between a and b's kernels on another
// port.
func kernelUDP(t *testing.T, a, b *lab.Host, ipv6 bool) {
	t.Helper()
	to := b.Addr.Addr()
	if ipv6 {
		to = b.Addr6.Addr()
	}
	var cb *net.UDPConn
	if err := b.Do(func() (err error) {
		cb, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(to, 7000)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	err := a.Do(func() error {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(to, 7000)))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("kernel"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if err := cb.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, _, err := cb.ReadFromUDP(buf); err != nil || string(buf[:n]) != "kernel" {
		t.Fatalf("kernel UDP across the router with xam attached: %q, %v", buf[:n], err)
	}
}

// TestUDPEncapNeighbourChange: when the MAC of the router's port changes
// and the host's neighbour table learns it (as a gratuitous ARP would
// teach it), the UDP link follows: frames go to the new MAC.
func TestUDPEncapNeighbourChange(t *testing.T) {
	l := routedLab(t, 1500)
	pa, pb := OnHost(l.Hosts[0]), OnHost(l.Hosts[1])
	pa.Encap, pb.Encap = Encap{UDP: true}, Encap{UDP: true}
	a, err := Open(pa, loader.ModeGeneric, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(pb, loader.ModeGeneric, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	peer, err := a.Peer(pb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Peer(pa); err != nil {
		t.Fatal(err)
	}
	defer startEcho(t, b)()
	pingEcho(t, a, xamFrame(t, peer, a.MAC, 2, 1472), 3)

	// A new MAC on the router's port toward A, and A's neighbour entry
	// for the gateway replaced with it.
	rt := l.Router
	port, err := rt.Netlink.LinkByName(rt.Ports[0])
	if err != nil {
		t.Fatal(err)
	}
	newMAC := net.HardwareAddr{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}
	if err := rt.Netlink.LinkSetHardwareAddr(port, newMAC); err != nil {
		t.Fatal(err)
	}
	gw := rt.Addrs[0].Addr()
	pass := a.UDP.Passes()
	if err := l.Hosts[0].Netlink.NeighSet(&netlink.Neigh{LinkIndex: pa.Ifindex, Family: netlink.FAMILY_V4,
		State: netlink.NUD_REACHABLE, IP: gw.AsSlice(), HardwareAddr: newMAC}); err != nil {
		t.Fatal(err)
	}
	// The change reaches the link through its netlink subscription.
	for {
		if mac, ok := a.UDP.NextHop(pb.Addr); ok && bytes.Equal(mac, newMAC) {
			break
		}
		next := a.UDP.WaitPass(pass, time.Minute)
		if next == pass {
			t.Fatalf("no resolution pass in a minute; next hop %v", func() net.HardwareAddr { m, _ := a.UDP.NextHop(pb.Addr); return m }())
		}
		pass = next
	}
	pingEcho(t, a, xamFrame(t, peer, a.MAC, 2, 1472), 3)

	// A route to B by another device (lo): frames to B are not sent the
	// old way; once the route goes, the old way is found again.
	waitHop := func(want bool) {
		t.Helper()
		pass := a.UDP.Passes()
		for {
			if _, ok := a.UDP.NextHop(pb.Addr); ok == want {
				return
			}
			next := a.UDP.WaitPass(pass, time.Minute)
			if next == pass {
				t.Fatalf("no resolution pass in a minute; want a next hop: %v", want)
			}
			pass = next
		}
	}
	h0 := l.Hosts[0]
	lo, err := h0.Netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	r := &netlink.Route{LinkIndex: lo.Attrs().Index, Dst: &net.IPNet{IP: pb.Addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := h0.Netlink.RouteAdd(r); err != nil {
		t.Fatal(err)
	}
	waitHop(false)
	if err := h0.Netlink.RouteDel(r); err != nil {
		t.Fatal(err)
	}
	waitHop(true)
	pingEcho(t, a, xamFrame(t, peer, a.MAC, 2, 1472), 3)
}

// TestUDPEncapRefusals: the UDP form says what it lacks: an address, a
// route by the device, a peer of the same family.
func TestUDPEncapRefusals(t *testing.T) {
	l := routedLab(t, 1500)
	pa := OnHost(l.Hosts[0])
	pa.Encap = Encap{UDP: true}
	a, err := Open(pa, loader.ModeGeneric, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.UDP.Resolve(netip.MustParseAddr("fd00::1")); !errors.Is(err, encap.ErrFamily) {
		t.Errorf("an IPv6 peer of an IPv4 link: %v", err)
	}
	if _, err := a.UDP.Resolve(netip.MustParseAddr("127.0.0.2")); !errors.Is(err, encap.ErrRoute) {
		t.Errorf("a peer routed by lo: %v", err)
	}
	// A second data path on the port: refused with the reason.
	if _, err := encap.New(a.Sock, encap.Config{Local: pa.Addr, Ifindex: pa.Ifindex, Do: pa.Do}); err == nil {
		t.Error("a second UDP link took the same port")
	}
	if _, err := (Place{Ifindex: 1, Do: pa.Do, Dev: "lo", Encap: Encap{UDP: true}}).IP(); err == nil {
		t.Error("lo has a global address?")
	}
	for _, bad := range []string{"udp:0", "udp:x", "raw:5", "tcp"} {
		if _, err := ParseEncap(bad); err == nil {
			t.Errorf("ParseEncap(%q) accepted", bad)
		}
	}
	for in, want := range map[string]string{"": "raw", "udp": "udp:18553", "udp6:4000": "udp6:4000"} {
		if e, err := ParseEncap(in); err != nil || e.String() != want {
			t.Errorf("ParseEncap(%q) = %v, %v; want %s", in, e, err, want)
		}
	}
}
