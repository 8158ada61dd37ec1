package cells_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/xam-project/xam/cells"
)

var (
	udpMAC1 = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	udpMAC2 = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
)

// udpFrame returns a frame of the UDP form carrying the xam frame payload
// (frame header and cells) from src to dst.
func udpFrame(tb testing.TB, src, dst netip.AddrPort, payload []byte) []byte {
	tb.Helper()
	h := &cells.UDPHeader{DstMAC: udpMAC1, SrcMAC: udpMAC2, Src: src, Dst: dst}
	b := make([]byte, h.Len()+len(payload))
	copy(b[h.Len():], payload)
	if _, err := cells.PutUDP(b, h, len(payload)); err != nil {
		tb.Fatal(err)
	}
	return b
}

// xamPayload returns an xam frame's payload of n cells.
func xamPayload(tb testing.TB, n int) []byte {
	cs := fuzzSegment(tb, cells.SAR{VPI: 3, VCI: 33}, fuzzBytes(n*cells.PayloadSize-cells.TrailerSize, 5))
	frame, err := (&cells.Framer{Dst: udpMAC1, Src: udpMAC2, MTU: 65535}).Append(nil, cs)
	if err != nil {
		tb.Fatal(err)
	}
	return frame[cells.EthernetHeaderSize:]
}

// TestUDPForm: PutUDP's headers are what gopacket serialises for the same
// addresses (checksums included: IPv4's header, IPv6's UDP), and ParseUDP
// finds the payload and the addresses again.
func TestUDPForm(t *testing.T) {
	for _, tc := range []struct{ name, src, dst string }{
		{"ipv4", "10.0.1.1:18553", "10.0.2.1:18553"},
		{"ipv6", "[fd00:0:0:1::1]:18553", "[fd00:0:0:2::1]:18553"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := netip.MustParseAddrPort(tc.src), netip.MustParseAddrPort(tc.dst)
			for _, n := range []int{1, 28, 1235} {
				payload := xamPayload(t, n)
				got := udpFrame(t, src, dst, payload)

				eth := &layers.Ethernet{DstMAC: udpMAC1, SrcMAC: udpMAC2}
				udp := &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
				var ip gopacket.SerializableLayer
				if src.Addr().Is4() {
					eth.EthernetType = layers.EthernetTypeIPv4
					ip4 := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: layers.IPProtocolUDP,
						SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
					udp.SetNetworkLayerForChecksum(ip4)
					ip = ip4
				} else {
					eth.EthernetType = layers.EthernetTypeIPv6
					ip6 := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP,
						SrcIP: src.Addr().AsSlice(), DstIP: dst.Addr().AsSlice()}
					udp.SetNetworkLayerForChecksum(ip6)
					ip = ip6
				}
				buf := gopacket.NewSerializeBuffer()
				if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
					eth, ip, udp, gopacket.Payload(payload)); err != nil {
					t.Fatal(err)
				}
				want := buf.Bytes()
				if src.Addr().Is4() {
					off := cells.EthernetHeaderSize + cells.IPv4HeaderSize + 6
					want[off], want[off+1] = 0, 0 // IPv4: no UDP checksum
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%d cells: PutUDP\n%x\ngopacket\n%x", n, got[:64], want[:64])
				}

				u, err := cells.ParseUDP(got, dst.Port())
				if err != nil {
					t.Fatal(err)
				}
				if u.Src != src || u.Dst != dst || !bytes.Equal(got[u.Off:u.End], payload) || u.End != len(got) {
					t.Fatalf("ParseUDP = %+v, want %v -> %v, payload at %d", u, src, dst, len(got)-len(payload))
				}
				if _, _, err := cells.UnpackPayload(got[u.Off:u.End]); err != nil {
					t.Fatal(err)
				}
				// Ethernet padding after the datagram is not payload.
				padded := append(bytes.Clone(got), 0, 0, 0)
				if u2, err := cells.ParseUDP(padded, dst.Port()); err != nil || u2 != u {
					t.Fatalf("padded: %+v, %v; want %+v", u2, err, u)
				}
			}
		})
	}
}

// TestUDPFormRefusals: ParseUDP names what is wrong, and PutUDP refuses
// what it cannot encode.
func TestUDPFormRefusals(t *testing.T) {
	src, dst := netip.MustParseAddrPort("10.0.1.1:18553"), netip.MustParseAddrPort("10.0.2.1:18553")
	good := udpFrame(t, src, dst, xamPayload(t, 2))
	mod := func(f func(b []byte)) []byte { b := bytes.Clone(good); f(b); return b }
	for _, tc := range []struct {
		name  string
		frame []byte
		port  uint16
		want  error
	}{
		{"other port", good, 4789, cells.ErrNotUDP},
		{"arp", mod(func(b []byte) { b[12], b[13] = 0x08, 0x06 }), 18553, cells.ErrNotUDP},
		{"raw xam", mod(func(b []byte) { b[12], b[13] = 0x88, 0xb5 }), 18553, cells.ErrNotUDP},
		{"tcp", mod(func(b []byte) { b[14+9] = 6 }), 18553, cells.ErrNotUDP},
		{"options", mod(func(b []byte) { b[14] = 0x46 }), 18553, cells.ErrIPHeader},
		{"checksum", mod(func(b []byte) { b[14+8]-- }), 18553, cells.ErrIPHeader},
		{"fragment", mod(func(b []byte) { b[14+6] |= 0x20 }), 18553, cells.ErrIPHeader},
		{"ip length", mod(func(b []byte) { b[14+2]++; b[14+10]-- }), 18553, cells.ErrIPLength},
		{"udp length", mod(func(b []byte) { b[14+20+5]-- }), 18553, cells.ErrIPLength},
		{"short", good[:30], 18553, cells.ErrFrameTruncated},
		{"ethernet only", good[:13], 18553, cells.ErrFrameTruncated},
	} {
		if _, err := cells.ParseUDP(tc.frame, tc.port); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// An IPv6 header with an IPv4-mapped address, either side: the UDP
	// form would take it for the IPv4 address (FuzzParseUDP found it).
	good6 := udpFrame(t, netip.MustParseAddrPort("[fd00:0:0:1::1]:18553"), netip.MustParseAddrPort("[fd00:0:0:2::1]:18553"), xamPayload(t, 2))
	for name, at := range map[string]int{"mapped source": 14 + 8, "mapped destination": 14 + 24} {
		b := bytes.Clone(good6)
		copy(b[at:at+16], netip.MustParseAddr("::ffff:127.0.0.1").AsSlice())
		if _, err := cells.ParseUDP(b, 18553); !errors.Is(err, cells.ErrIPHeader) {
			t.Errorf("%s: %v, want %v", name, err, cells.ErrIPHeader)
		}
	}
	h := &cells.UDPHeader{DstMAC: udpMAC1, SrcMAC: udpMAC2, Src: src, Dst: netip.MustParseAddrPort("[::1]:1")}
	if _, err := cells.PutUDP(make([]byte, 100), h, 10); !errors.Is(err, cells.ErrUDPFamily) {
		t.Errorf("mixed families: %v", err)
	}
	h.Dst = dst
	if _, err := cells.PutUDP(make([]byte, 20), h, 10); !errors.Is(err, cells.ErrFrameTooBig) {
		t.Errorf("short buffer: %v", err)
	}
}

// FuzzParseUDP: ParseUDP on arbitrary bytes never panics, returns a
// sentinel on failure, and on success a payload inside the frame whose
// headers PutUDP writes again byte for byte (but the fields it does not
// set: IPv4's TOS, ID, TTL; IPv6's class, flow, hop limit; the checksums).
func FuzzParseUDP(f *testing.F) {
	p := xamPayload(f, 2)
	v4 := udpFrame(f, netip.MustParseAddrPort("10.0.1.1:18553"), netip.MustParseAddrPort("10.0.2.1:18553"), p)
	v6 := udpFrame(f, netip.MustParseAddrPort("[fd00:0:0:1::1]:18553"), netip.MustParseAddrPort("[fd00:0:0:2::1]:18553"), p)
	f.Add(v4, cells.DefaultUDPPort)
	f.Add(v6, cells.DefaultUDPPort)
	f.Add(v4[:40], cells.DefaultUDPPort)
	f.Add(v6[:60], cells.DefaultUDPPort)
	f.Add(v4, uint16(4789))
	f.Add(append(bytes.Clone(v6), 0, 0), cells.DefaultUDPPort)
	big := udpFrame(f, netip.MustParseAddrPort("[fd00:0:0:1::1]:18553"), netip.MustParseAddrPort("[fd00:0:0:2::1]:18553"), xamPayload(f, 1235))
	f.Add(big, cells.DefaultUDPPort)
	f.Add(big[:len(big)-4096], cells.DefaultUDPPort)

	sentinels := []error{cells.ErrNotUDP, cells.ErrIPHeader, cells.ErrIPLength, cells.ErrFrameTruncated}
	f.Fuzz(func(t *testing.T, frame []byte, port uint16) {
		orig := bytes.Clone(frame)
		u, err := cells.ParseUDP(frame, port)
		if !bytes.Equal(frame, orig) {
			t.Fatal("ParseUDP changed the frame")
		}
		if err != nil {
			for _, s := range sentinels {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("error %v wraps no sentinel", err)
		}
		if u.Off > u.End || u.End > len(frame) || u.Dst.Port() != port || u.Src.Addr().Is4() != u.Dst.Addr().Is4() {
			t.Fatalf("ParseUDP = %+v on %d bytes, port %d", u, len(frame), port)
		}
		h := &cells.UDPHeader{DstMAC: frame[0:6], SrcMAC: frame[6:12], Src: u.Src, Dst: u.Dst}
		if h.Len() != u.Off {
			t.Fatalf("payload at %d, headers of %d bytes", u.Off, h.Len())
		}
		b := bytes.Clone(frame[:u.End])
		if _, err := cells.PutUDP(b, h, u.End-u.Off); err != nil {
			t.Fatal(err)
		}
		again, err := cells.ParseUDP(b, port)
		if err != nil || again != u {
			t.Fatalf("PutUDP's headers parse as %+v, %v; want %+v", again, err, u)
		}
	})
}
