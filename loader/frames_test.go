package loader

import (
	"encoding/binary"
	"net"
	"testing"

	"github.com/xam-project/xam/internal/testenv"
)

// Frames for the tests, built by hand from docs/wire.md (package cells is a
// peer layer and may not be imported here).

var (
	macA      = net.HardwareAddr{0x02, 0x78, 0x61, 0x6d, 0x00, 0x0a}
	macB      = net.HardwareAddr{0x02, 0x78, 0x61, 0x6d, 0x00, 0x0b}
	broadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
)

// cellSpec is one cell of a test frame.
type cellSpec struct {
	vpi, vci uint16
	nni      bool
	badHEC   bool // flip a bit of the HEC
	fill     byte // payload byte
}

// refHEC computes the I.432 HEC bit by bit, independently of xdp.c's table:
// CRC-8, generator x^8+x^2+x+1, initial 0, XOR 0x55.
func refHEC(h []byte) byte {
	var crc byte
	for _, b := range h[:4] {
		crc ^= b
		for range 8 {
			if crc&0x80 != 0 {
				crc = crc<<1 ^ 0x07
			} else {
				crc <<= 1
			}
		}
	}
	return crc ^ 0x55
}

// cellHeader returns the 5-byte header of c (PTI 0, CLP 0, GFC 0).
func cellHeader(c cellSpec) []byte {
	h := make([]byte, 5)
	if c.nni {
		h[0] = byte(c.vpi >> 4)
	} else {
		h[0] = byte(c.vpi>>4) & 0x0f
	}
	h[1] = byte(c.vpi<<4) | byte(c.vci>>12)
	h[2] = byte(c.vci >> 4)
	h[3] = byte(c.vci << 4)
	h[4] = refHEC(h)
	if c.badHEC {
		h[4] ^= 0x01
	}
	return h
}

// frame returns an xam frame of version 1 holding cells, from macA to dst
// with EtherType etherType.
func frame(dst net.HardwareAddr, etherType uint16, cells ...cellSpec) []byte {
	f := ethernet(dst, etherType)
	f = append(f, 1, 0, 0, 0)
	binary.BigEndian.PutUint16(f[16:], uint16(len(cells)))
	for _, c := range cells {
		f = append(f, cellHeader(c)...)
		for range 48 {
			f = append(f, c.fill)
		}
	}
	return f
}

// ours returns a well-formed frame to macB with n cells on VPI/VCI 1/100.
func ours(n int) []byte {
	cs := make([]cellSpec, n)
	for i := range cs {
		cs[i] = cellSpec{vpi: 1, vci: 100, fill: byte(i)}
	}
	return frame(macB, DefaultEtherType, cs...)
}

// ethernet returns an Ethernet header from macA to dst.
func ethernet(dst net.HardwareAddr, etherType uint16) []byte {
	f := make([]byte, 14, 1600)
	copy(f, dst)
	copy(f[6:], macA)
	binary.BigEndian.PutUint16(f[12:], etherType)
	return f
}

// ipv4Frame returns a minimal IPv4/UDP frame.
func ipv4Frame() []byte {
	f := ethernet(macB, 0x0800)
	ip := []byte{0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
		0x30, 0x39, 0x30, 0x39, 0, 8, 0, 0}
	binary.BigEndian.PutUint16(ip[10:], inetChecksum(ip[:20])) // a bridge with br_netfilter drops bad ones
	return append(f, ip...)
}

// inetChecksum is the Internet checksum (RFC 1071) of b.
func inetChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// arpFrame returns an ARP request (broadcast).
func arpFrame() []byte {
	f := ethernet(broadcast, 0x0806)
	arp := []byte{0, 1, 8, 0, 6, 4, 0, 1}
	arp = append(arp, macA...)
	arp = append(arp, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2)
	return append(f, arp...)
}

// frags makes load load the frags-aware program (TestRunFrags).
var frags bool

// load loads a Program for cfg, closed at the end of the test.
func load(t *testing.T, cfg Config) *Program {
	t.Helper()
	testenv.RequirePrivileged(t)
	cfg.Frags = cfg.Frags || frags
	p, err := Load(cfg)
	if err != nil {
		t.Fatalf("Load(%+v): %+v", cfg, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// run runs p on f and checks the verdict.
func run(t *testing.T, p *Program, f []byte, want Action) {
	t.Helper()
	got, err := p.Run(f)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got != want {
		t.Errorf("Run(%d-byte frame, EtherType %#04x) = %v, want %v", len(f), binary.BigEndian.Uint16(f[12:]), got, want)
	}
}

// counters reads p's counters and checks that every received frame is
// accounted for exactly once.
func counters(t *testing.T, p *Program) Counters {
	t.Helper()
	c, err := p.Counters()
	if err != nil {
		t.Fatalf("Counters: %v", err)
	}
	if sum := c.Malformed + c.FaultDropped + c.HECDropped + c.NotAdmitted + c.Redirected + c.RedirectMiss; sum != c.Received {
		t.Errorf("counters %+v: outcomes add up to %d, not Received", c, sum)
	}
	if c.OtherDst > c.Passed {
		t.Errorf("counters %+v: OtherDst above Passed", c)
	}
	return c
}

// wantCounters checks p's counters.
func wantCounters(t *testing.T, p *Program, want Counters) {
	t.Helper()
	if got := counters(t, p); got != want {
		t.Errorf("counters:\n got %+v\nwant %+v", got, want)
	}
}
