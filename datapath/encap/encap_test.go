package encap

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/testenv"
)

func TestAddr(t *testing.T) {
	for _, s := range []string{"10.0.2.1", "192.168.255.7", "fd00:0:0:2::1", "2001:db8::5"} {
		ip := netip.MustParseAddr(s)
		a := Addr(ip)
		if len(a) != 6 || a[0]&1 != 0 {
			t.Fatalf("Addr(%v) = %v: not a unicast 6-byte address", ip, a)
		}
		back, ok := IP(a)
		if !ok || back != ip {
			t.Errorf("IP(Addr(%v)) = %v, %v", ip, back, ok)
		}
	}
	if a := Addr(netip.MustParseAddr("10.0.2.1")); a.String() != "02:75:0a:00:02:01" {
		t.Errorf("Addr(10.0.2.1) = %v", a)
	}
	if a := Addr(netip.MustParseAddr("::ffff:10.0.2.1")); a.String() != "02:75:0a:00:02:01" {
		t.Errorf("an IPv4-mapped address: %v", a)
	}
	for _, a := range []net.HardwareAddr{{0x06, 0x75, 1, 2, 3, 4}, {2, 0, 0, 0, 0, 1}, {1, 2, 3}} {
		if ip, ok := IP(a); ok {
			t.Errorf("IP(%v) = %v: names nothing this process computed", a, ip)
		}
	}
}

// pair returns a UDP over one end of a memlink pair, its local address
// local, and the other end: the wire, where the test writes and reads the
// UDP form itself.
func pair(t *testing.T, local string, cfg Config) (*UDP, *memlink.Link) {
	t.Helper()
	testenv.RequirePrivileged(t) // netlink subscriptions, a socket on the port
	a, b, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Local = netip.MustParseAddr(local)
	cfg.Ifindex = 1
	if cfg.Port == 0 {
		cfg.Port = 40000 + uint16(time.Now().UnixNano()%20000)
	}
	u, err := New(a, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close(); b.Close() })
	return u, b
}

// udpFrom returns a frame of the UDP form from src to u, carrying an xam
// frame of one cell.
func udpFrom(t *testing.T, u *UDP, src netip.Addr) []byte {
	t.Helper()
	return udpFromTo(t, u, src, u.cfg.Local)
}

// udpFromTo is udpFrom to the address dst.
func udpFromTo(t *testing.T, u *UDP, src, dst netip.Addr) []byte {
	t.Helper()
	c := make([]byte, cells.CellSize)
	if err := cells.Cell(c).Encode(cells.UNI, cells.Fields{VCI: 40, PTI: cells.PTIEndOfMessage}); err != nil {
		t.Fatal(err)
	}
	payload := append([]byte{cells.FrameVersion, 0, 0, 1}, c...)
	h := &cells.UDPHeader{DstMAC: u.devMAC, SrcMAC: net.HardwareAddr{2, 9, 9, 9, 9, 9},
		Src: netip.AddrPortFrom(src, u.cfg.Port), Dst: netip.AddrPortFrom(dst, u.cfg.Port)}
	f := make([]byte, h.Len()+len(payload))
	copy(f[h.Len():], payload)
	if _, err := cells.PutUDP(f, h, len(payload)); err != nil {
		t.Fatal(err)
	}
	return f
}

// recvAll receives what u has, waiting briefly for the memlink.
func recvAll(t *testing.T, u *UDP) [][]byte {
	t.Helper()
	var got [][]byte
	bufs := make([][]byte, 64)
	for {
		if ok, err := u.Wait(100 * time.Millisecond); err != nil || !ok {
			return got
		}
		n, err := u.Recv(bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range bufs[:n] {
			got = append(got, bytes.Clone(f))
		}
	}
}

// TestRecv: frames of the UDP form come up Ethernet-shaped (this host's
// address, the sender's, xam's EtherType, the frame header and cells);
// anything else is dropped and counted; IPv6 senders past MaxLearned are
// dropped and counted, not remembered.
func TestRecv(t *testing.T) {
	u, wire := pair(t, "::1", Config{MaxLearned: 3})
	var frames [][]byte
	for i := range 5 {
		frames = append(frames, udpFrom(t, u, netip.AddrFrom16([16]byte{0xfd, 15: byte(i + 1)})))
	}
	bad := bytes.Clone(frames[0])
	bad[12], bad[13] = 0x88, 0xb5 // a raw frame
	frames = append(frames, bad, frames[0][:40])
	if _, err := wire.Send(frames); err != nil {
		t.Fatal(err)
	}
	got := recvAll(t, u)
	if len(got) != 3 {
		t.Fatalf("%d frames came up, want 3 (MaxLearned)", len(got))
	}
	for i, f := range got {
		from := Addr(netip.AddrFrom16([16]byte{0xfd, 15: byte(i + 1)}))
		if !bytes.Equal(f[0:6], u.HardwareAddr()) || !bytes.Equal(f[6:12], from) || f[12] != 0x88 || f[13] != 0xb5 {
			t.Errorf("frame %d: % x", i, f[:14])
		}
		if _, _, err := cells.Unpack(f, 0); err != nil {
			t.Errorf("frame %d: %v", i, err)
		}
	}
	if s := u.EncapStats(); s.Received != 3 || s.Unknown != 2 || s.Malformed != 2 {
		t.Errorf("counters %+v: want 3 received, 2 unknown, 2 malformed", s)
	}
}

// TestRecvRefusals: a frame to another address, from an IPv4-mapped
// address, or from an IPv6 address whose xam address another IPv6
// address holds (an impersonation: 40 bits of hash can be matched) is
// dropped and counted; a batch of nothing usable returns none, not the
// next batch.
func TestRecvRefusals(t *testing.T) {
	u, wire := pair(t, "::1", Config{})
	victim, forger := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::66")
	registry.Store(addrOf(forger), victim) // as if victim's hash were forger's
	t.Cleanup(func() { registry.Delete(addrOf(forger)) })
	mapped := udpFrom(t, u, netip.MustParseAddr("fd00::5"))
	m := netip.MustParseAddr("::ffff:10.0.0.1").As16()
	copy(mapped[14+8:14+24], m[:]) // an IPv4-mapped source (PutUDP makes none)
	frames := [][]byte{
		udpFromTo(t, u, netip.MustParseAddr("fd00::5"), netip.MustParseAddr("fd00::99")), // to another host
		mapped,
		udpFrom(t, u, forger),
	}
	if _, err := wire.Send(frames); err != nil {
		t.Fatal(err)
	}
	if ok, err := u.Wait(time.Second); !ok || err != nil {
		t.Fatalf("Wait: %v, %v", ok, err)
	}
	bufs := make([][]byte, 64)
	if n, err := u.Recv(bufs); n != 0 || err != nil {
		t.Errorf("Recv = %d, %v; want nothing", n, err)
	}
	if s := u.EncapStats(); s.Malformed != 2 || s.Unknown != 1 || s.Received != 0 {
		t.Errorf("counters %+v: want 2 malformed (not to us; the mapped source, which cells.ParseUDP refuses), 1 unknown", s)
	}
	// An IPv4 UDP takes no IPv6 frame.
	u4, wire4 := pair(t, "127.0.0.1", Config{})
	if _, err := wire4.Send([][]byte{udpFromTo(t, u4, netip.MustParseAddr("fd00::1"), netip.MustParseAddr("::1"))}); err != nil {
		t.Fatal(err)
	}
	if got := recvAll(t, u4); len(got) != 0 || u4.EncapStats().Malformed != 1 {
		t.Errorf("an IPv6 frame on an IPv4 link: %d frames, counters %+v", len(got), u4.EncapStats())
	}
}

// TestSendDrops: frames to an address that names no IP, or to a peer whose
// route leaves by another device, are dropped and counted, and Send still
// reports them handed to the link; a frame too large for the link, less
// the headers, is refused before anything is sent.
func TestSendDrops(t *testing.T) {
	u, _ := pair(t, "127.0.0.1", Config{})
	mk := func(dst net.HardwareAddr, n int) []byte {
		f := make([]byte, n)
		copy(f, dst)
		copy(f[6:], u.HardwareAddr())
		return f
	}
	frames := [][]byte{
		mk(net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 71), // a group address
		mk(Addr(netip.MustParseAddr("fd00::9")), 71),                 // the other family
		mk(Addr(netip.MustParseAddr("127.0.0.2")), 71),               // routed by lo: ifindex 1 here, but no neighbour
		mk(net.HardwareAddr{0x06, 0x75, 0xde, 0xad, 0xbe, 0xef}, 71), // an IPv6 address nobody computed
	}
	n, err := u.Send(frames)
	if n != len(frames) || err != nil {
		t.Fatalf("Send = %d, %v", n, err)
	}
	if s := u.EncapStats(); s.NoPeer != 3 || s.Unresolved != 1 || s.Sent != 0 {
		t.Errorf("counters %+v: want 3 without a peer, 1 unresolved", s)
	}
	if _, err := u.Send([][]byte{mk(Addr(netip.MustParseAddr("127.0.0.2")), 1500+14-27)}); err == nil {
		t.Error("a frame past the link's MTU (the device's less 28) was taken")
	}
	if _, err := u.Resolve(netip.MustParseAddr("::1")); !errors.Is(err, ErrFamily) {
		t.Errorf("Resolve of the other family: %v", err)
	}
}
