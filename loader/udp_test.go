//go:build linux

package loader

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
)

const testUDPPort = 18553

// udpForm returns the raw frame f (from ours or frame) in xam's UDP form:
// the same Ethernet addresses, then IPv4 or IPv6 and UDP from port to
// port, then f's frame header and cells.
func udpForm(f []byte, v6 bool, port uint16) []byte {
	payload := f[14:]
	out := bytes.Clone(f[:12])
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], port)
	binary.BigEndian.PutUint16(udp[2:], port)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	if v6 {
		out = binary.BigEndian.AppendUint16(out, 0x86dd)
		ip := make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(8+len(payload)))
		ip[6], ip[7] = 17, 64
		ip[8], ip[9], ip[23] = 0xfd, 0, 1
		ip[24], ip[25], ip[39] = 0xfd, 0, 2
		out = append(out, ip...)
	} else {
		out = binary.BigEndian.AppendUint16(out, 0x0800)
		ip := []byte{0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 1, 1, 10, 0, 2, 1}
		binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
		binary.BigEndian.PutUint16(ip[10:], inetChecksum(ip))
		out = append(out, ip...)
	}
	out = append(out, udp...)
	return append(out, payload...)
}

// TestRunUDP: with Config.UDPPort the program takes xam's UDP form, over
// IPv4 and IPv6, to its port and its MAC, checks it from the frame header
// on as it checks raw frames, and passes everything else, raw xam frames
// included.
func TestRunUDP(t *testing.T) {
	p := load(t, Config{DstMAC: macB, UDPPort: testUDPPort, HECCells: 1, DropOnHEC: true})
	for _, v6 := range []bool{false, true} {
		for _, n := range []int{1, 28, testRunMaxCells - 1} {
			run(t, p, udpForm(ours(n), v6, testUDPPort), ActionPass) // no socket: a redirect miss
		}
	}
	want := Counters{Received: 6, RedirectMiss: 6}
	wantCounters(t, p, want)

	pass := map[string][]byte{
		"raw xam frame":  ours(2),
		"other port":     udpForm(ours(2), false, testUDPPort+1),
		"other port, v6": udpForm(ours(2), true, 4789),
		"ipv4 options":   func() []byte { f := udpForm(ours(2), false, testUDPPort); f[14] = 0x46; return f }(),
		"ipv4 fragment":  func() []byte { f := udpForm(ours(2), false, testUDPPort); f[14+6] |= 0x20; return f }(),
		"ipv4 tcp":       func() []byte { f := udpForm(ours(2), false, testUDPPort); f[14+9] = 6; return f }(),
		"ipv6 hop-by-hop": func() []byte {
			f := udpForm(ours(2), true, testUDPPort)
			f[14+6] = 0
			return f
		}(),
		"truncated udp": udpForm(ours(2), false, testUDPPort)[:14+20+4],
		"IPv4":          ipv4Frame(),
		"ARP":           arpFrame(),
	}
	for name, f := range pass {
		t.Run(name, func(t *testing.T) { run(t, p, f, ActionPass) })
	}
	want.Passed += uint64(len(pass))
	wantCounters(t, p, want)

	other := udpForm(ours(2), false, testUDPPort)
	copy(other, macA)
	run(t, p, other, ActionPass)
	want.Passed++
	want.OtherDst++
	wantCounters(t, p, want)

	for name, mod := range map[string]func([]byte){
		"version":    func(f []byte) { f[14+28] = 2 },
		"cell count": func(f []byte) { f[14+28+3]++ },
	} {
		f := udpForm(ours(3), false, testUDPPort)
		mod(f)
		t.Run("malformed "+name, func(t *testing.T) { run(t, p, f, ActionDrop) })
	}
	bad := udpForm(ours(2), true, testUDPPort)
	bad[14+48+4] ^= 0x01 // the first cell's header: its HEC no longer matches
	run(t, p, bad, ActionDrop)
	want.Received += 3
	want.Malformed += 2
	want.HECErrors++
	want.HECDropped++
	wantCounters(t, p, want)
}

// TestRunUDPCorrupt: fault injection in the UDP form flips one byte of a
// cell's payload, never a header of Ethernet, IP, UDP, frame or cell.
func TestRunUDPCorrupt(t *testing.T) {
	p := load(t, Config{DstMAC: macB, UDPPort: testUDPPort, HECCells: MaxScanCells})
	if err := p.SetFaults(Faults{CorruptRate: 1}); err != nil {
		t.Fatal(err)
	}
	for _, v6 := range []bool{false, true} {
		off := 14 + 28 + 4
		if v6 {
			off += 20
		}
		in := udpForm(ours(5), v6, testUDPPort)
		for range 100 {
			out := make([]byte, len(in))
			ret, err := p.XDP().Run(&ebpf.RunOptions{Data: in, DataOut: out})
			if err != nil {
				t.Fatal(err)
			}
			if Action(ret) != ActionPass {
				t.Fatalf("verdict %v", Action(ret))
			}
			diffs := changed(in, out)
			if len(diffs) != 1 || diffs[0] < off || (diffs[0]-off)%53 < 5 {
				t.Fatalf("v6 %v: bytes %v changed, want one in a cell payload (cells from %d)", v6, diffs, off)
			}
		}
	}
	if c := counters(t, p); c.FaultCorrupted != c.Received || c.HECErrors != 0 {
		t.Errorf("counters %+v: want every frame corrupted, headers intact", c)
	}
}

// TestRunUDPLocal: with Config.UDPLocal the program takes only its
// family, to that address; UDP to the port for another address (a host
// that forwards) and the other family pass to the kernel.
func TestRunUDPLocal(t *testing.T) {
	for _, c := range []struct {
		local  string
		v6     bool
		others []byte
	}{
		{"10.0.2.1", false, udpForm(ours(2), true, testUDPPort)},
		{"fd00::2", true, udpForm(ours(2), false, testUDPPort)},
	} {
		p := load(t, Config{DstMAC: macB, UDPPort: testUDPPort, UDPLocal: netip.MustParseAddr(c.local)})
		run(t, p, udpForm(ours(3), c.v6, testUDPPort), ActionPass) // ours: a redirect miss
		run(t, p, c.others, ActionPass)                            // the other family
		elsewhere := udpForm(ours(2), c.v6, testUDPPort)
		if c.v6 {
			elsewhere[14+24+15] = 9 // fd00::9
		} else {
			elsewhere[14+16+3] = 9 // 10.0.2.9
			elsewhere[14+10], elsewhere[14+11] = 0, 0
			binary.BigEndian.PutUint16(elsewhere[14+10:], inetChecksum(elsewhere[14:14+20]))
		}
		run(t, p, elsewhere, ActionPass)
		wantCounters(t, p, Counters{Received: 1, RedirectMiss: 1, Passed: 2})
	}
}
