package cells

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// xam's UDP form (docs/wire.md, "UDP/IP encapsulation") carries the same
// frame header and cells as the raw form, after an IPv4 or IPv6 header and
// a UDP header instead of right after the Ethernet header, so that xam
// crosses routers and runs where only IP is carried:
//
//	| Ethernet (type 0x0800 or 0x86DD) | IPv4 (20) or IPv6 (40) | UDP (8) | ver flg cells | cells ... |
//
// Both UDP ports are the job's xam port. The IPv4 header has no options,
// Don't Fragment set and a valid checksum; IPv6 has no extension header.
// The UDP checksum is sent (IPv6 requires it; IPv4's is zero, "none") but
// receivers do not check it: every cell has its HEC and every PDU its
// CRC-32, as the raw form's do.
const (
	// DefaultUDPPort is the UDP port of xam's UDP form when none is given:
	// below Linux's ephemeral range (32768 and up), so that no kernel
	// socket of the host draws it as its source port.
	DefaultUDPPort uint16 = 18553

	IPv4HeaderSize = 20
	IPv6HeaderSize = 40
	UDPHeaderSize  = 8

	// UDPOverhead4 and UDPOverhead6 are what the UDP form adds to a
	// frame's Ethernet payload: the link MTU left for the xam frame header
	// and cells is the device's minus this.
	UDPOverhead4 = IPv4HeaderSize + UDPHeaderSize
	UDPOverhead6 = IPv6HeaderSize + UDPHeaderSize

	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86DD
	protoUDP      = 17
	udpTTL        = 64
)

// UDP form errors, wrapped with details by ParseUDP.
var (
	ErrNotUDP    = errors.New("cells: not xam's UDP form") // not IP, not UDP, or another port
	ErrIPHeader  = errors.New("cells: bad IP header")      // version, header length, checksum, fragment
	ErrIPLength  = errors.New("cells: IP or UDP length mismatch")
	ErrUDPFamily = errors.New("cells: addresses of different families")
)

// UDPOverhead returns what the UDP form adds after the Ethernet header for
// addresses of a's family.
func UDPOverhead(a netip.Addr) int {
	if a.Is4() || a.Is4In6() {
		return UDPOverhead4
	}
	return UDPOverhead6
}

// UDPHeader is what the UDP form puts in front of an xam frame header.
type UDPHeader struct {
	DstMAC, SrcMAC net.HardwareAddr // the next hop's and the sender's
	Src, Dst       netip.AddrPort   // both IPv4 or both IPv6
}

// Len returns the length of the headers PutUDP writes for h:
// Ethernet, IP and UDP.
func (h *UDPHeader) Len() int { return EthernetHeaderSize + UDPOverhead(h.Dst.Addr()) }

// PutUDP writes the Ethernet, IP and UDP headers of a frame whose xam
// payload (frame header and cells) is payload bytes long into b, which
// must hold h.Len() bytes, and returns h.Len(). For IPv6 the UDP
// checksum covers the payload, which must already follow the headers in
// b (b[h.Len():h.Len()+payload]); IPv4's is zero.
func PutUDP(b []byte, h *UDPHeader, payload int) (int, error) {
	src, dst := h.Src.Addr().Unmap(), h.Dst.Addr().Unmap()
	if src.Is4() != dst.Is4() || !src.IsValid() || !dst.IsValid() {
		return 0, fmt.Errorf("%w: %v and %v", ErrUDPFamily, h.Src, h.Dst)
	}
	if len(h.DstMAC) != 6 || len(h.SrcMAC) != 6 {
		return 0, fmt.Errorf("cells: UDP form needs 6-byte MACs (dst %v, src %v)", h.DstMAC, h.SrcMAC)
	}
	n := h.Len()
	udpLen := UDPHeaderSize + payload
	if udpLen > 0xffff || len(b) < n || (!dst.Is4() && len(b) < n+payload) {
		return 0, fmt.Errorf("%w: %d payload bytes in a %d-byte buffer", ErrFrameTooBig, payload, len(b))
	}
	copy(b[0:6], h.DstMAC)
	copy(b[6:12], h.SrcMAC)
	ip := b[EthernetHeaderSize:]
	var udp []byte
	if dst.Is4() {
		if IPv4HeaderSize+udpLen > 0xffff {
			return 0, fmt.Errorf("%w: %d payload bytes", ErrFrameTooBig, payload)
		}
		binary.BigEndian.PutUint16(b[12:], etherTypeIPv4)
		ip[0] = 0x45 // version 4, 5 words
		ip[1] = 0
		binary.BigEndian.PutUint16(ip[2:], uint16(IPv4HeaderSize+udpLen))
		binary.BigEndian.PutUint32(ip[4:], 0x4000) // id 0, DF
		ip[8], ip[9] = udpTTL, protoUDP
		ip[10], ip[11] = 0, 0
		s, d := src.As4(), dst.As4()
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.BigEndian.PutUint16(ip[10:], ^fold(sum(0, ip[:IPv4HeaderSize])))
		udp = ip[IPv4HeaderSize:]
	} else {
		binary.BigEndian.PutUint16(b[12:], etherTypeIPv6)
		binary.BigEndian.PutUint32(ip[0:], 6<<28)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6], ip[7] = protoUDP, udpTTL
		s, d := src.As16(), dst.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		udp = ip[IPv6HeaderSize:]
	}
	binary.BigEndian.PutUint16(udp[0:], h.Src.Port())
	binary.BigEndian.PutUint16(udp[2:], h.Dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	udp[6], udp[7] = 0, 0
	if !dst.Is4() {
		// RFC 8200 8.1: the pseudo-header, then the datagram.
		c := sum(0, ip[8:40])
		c += uint32(udpLen) + protoUDP
		c = sum(c, udp[:udpLen])
		ck := ^fold(c)
		if ck == 0 {
			ck = 0xffff
		}
		binary.BigEndian.PutUint16(udp[6:], ck)
	}
	return n, nil
}

// UDPFrame is what ParseUDP finds in a frame of the UDP form.
type UDPFrame struct {
	Src, Dst netip.AddrPort
	// Off is the offset of the xam frame header; End the end of the UDP
	// datagram (a frame may carry Ethernet padding after it).
	Off, End int
}

// ParseUDP checks a received frame of the UDP form addressed to port and
// returns where its xam payload is (frame[Off:End]) and its addresses. It
// checks the EtherType, the IP version and header (IPv4: 20 bytes, no
// options; the header checksum; not a fragment. IPv6: UDP as the next
// header, no IPv4-mapped address), the protocol, the destination port and
// every length, but neither the UDP checksum nor the xam payload
// (UnpackPayload does).
func ParseUDP(frame []byte, port uint16) (UDPFrame, error) {
	var u UDPFrame
	if len(frame) < EthernetHeaderSize {
		return u, fmt.Errorf("%w: %d bytes, shorter than the Ethernet header", ErrFrameTruncated, len(frame))
	}
	ip := frame[EthernetHeaderSize:]
	var start, end int // the UDP datagram's, in frame
	switch t := binary.BigEndian.Uint16(frame[12:]); t {
	case etherTypeIPv4:
		if len(ip) < IPv4HeaderSize {
			return u, fmt.Errorf("%w: %d bytes after Ethernet, shorter than an IPv4 header", ErrFrameTruncated, len(ip))
		}
		if ip[0] != 0x45 {
			return u, fmt.Errorf("%w: version and header length %#02x, want 0x45 (IPv4, no options)", ErrIPHeader, ip[0])
		}
		if ip[9] != protoUDP {
			return u, fmt.Errorf("%w: IP protocol %d", ErrNotUDP, ip[9])
		}
		if f := binary.BigEndian.Uint16(ip[6:]); f&0x3fff != 0 {
			return u, fmt.Errorf("%w: a fragment (flags and offset %#04x)", ErrIPHeader, f)
		}
		if fold(sum(0, ip[:IPv4HeaderSize])) != 0xffff {
			return u, fmt.Errorf("%w: IPv4 header checksum", ErrIPHeader)
		}
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if total < IPv4HeaderSize+UDPHeaderSize || total > len(ip) {
			return u, fmt.Errorf("%w: IPv4 total length %d, %d bytes after Ethernet", ErrIPLength, total, len(ip))
		}
		s, d := [4]byte(ip[12:16]), [4]byte(ip[16:20])
		u.Src = netip.AddrPortFrom(netip.AddrFrom4(s), 0)
		u.Dst = netip.AddrPortFrom(netip.AddrFrom4(d), 0)
		start, end = EthernetHeaderSize+IPv4HeaderSize, EthernetHeaderSize+total
	case etherTypeIPv6:
		if len(ip) < IPv6HeaderSize {
			return u, fmt.Errorf("%w: %d bytes after Ethernet, shorter than an IPv6 header", ErrFrameTruncated, len(ip))
		}
		if ip[0]>>4 != 6 {
			return u, fmt.Errorf("%w: version %d in an IPv6 frame", ErrIPHeader, ip[0]>>4)
		}
		if ip[6] != protoUDP {
			return u, fmt.Errorf("%w: IPv6 next header %d", ErrNotUDP, ip[6])
		}
		plen := int(binary.BigEndian.Uint16(ip[4:]))
		if plen < UDPHeaderSize || IPv6HeaderSize+plen > len(ip) {
			return u, fmt.Errorf("%w: IPv6 payload length %d, %d bytes after its header", ErrIPLength, plen, len(ip)-IPv6HeaderSize)
		}
		src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		if src.Is4In6() || dst.Is4In6() {
			// Not for the wire (RFC 4291, 2.5.5.2; Linux drops them too),
			// and the UDP form takes a mapped address for the IPv4 one:
			// an answer would go out as IPv4, to an address the frame chose.
			return u, fmt.Errorf("%w: IPv4-mapped address in an IPv6 header (%v to %v)", ErrIPHeader, src, dst)
		}
		u.Src, u.Dst = netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, 0)
		start, end = EthernetHeaderSize+IPv6HeaderSize, EthernetHeaderSize+IPv6HeaderSize+plen
	default:
		return u, fmt.Errorf("%w: EtherType %#04x", ErrNotUDP, t)
	}
	udp := frame[start:end]
	if len(udp) < UDPHeaderSize {
		return u, fmt.Errorf("%w: %d bytes of UDP", ErrFrameTruncated, len(udp))
	}
	if p := binary.BigEndian.Uint16(udp[2:]); p != port {
		return u, fmt.Errorf("%w: UDP port %d, want %d", ErrNotUDP, p, port)
	}
	if l := int(binary.BigEndian.Uint16(udp[4:])); l != len(udp) {
		return u, fmt.Errorf("%w: UDP length %d, IP carries %d", ErrIPLength, l, len(udp))
	}
	u.Src = netip.AddrPortFrom(u.Src.Addr(), binary.BigEndian.Uint16(udp[0:]))
	u.Dst = netip.AddrPortFrom(u.Dst.Addr(), port)
	u.Off, u.End = start+UDPHeaderSize, end
	return u, nil
}

// sum adds b to the one's complement sum c as 16-bit big-endian words.
func sum(c uint32, b []byte) uint32 {
	for len(b) >= 2 {
		c += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		c += uint32(b[0]) << 8
	}
	return c
}

// fold folds a one's complement sum into 16 bits.
func fold(c uint32) uint16 {
	for c>>16 != 0 {
		c = c&0xffff + c>>16
	}
	return uint16(c)
}
