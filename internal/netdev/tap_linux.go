package netdev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// A Tap is an AF_PACKET socket that sees the frames of one EtherType
// passing the kernel's stack on one device, both directions, each with
// the kernel's receive time stamp.
//
// What it sees: frames that pass the kernel's stack on that device. In a
// lab, a port of the switch namespace sees both directions; on a host whose
// XDP program redirects frames to AF_XDP, the kernel never sees them.
//
// What it misses, it counts: a socket filter (classic BPF) keeps only the
// EtherType, so that the kernel's count of frames dropped for a full
// receive buffer (PACKET_STATISTICS) counts those frames only (Dropped).
//
// Time stamps: the NIC's raw hardware stamp where the driver gives one,
// otherwise the software stamp taken when the frame entered the stack;
// never the time the tap read it.
type Tap struct {
	fd  int
	buf []byte
	oob []byte
}

// MaxFrame is the longest frame a Tap reads: an Ethernet frame of the
// largest MTU (65535) with its header and a VLAN tag, rounded up.
const MaxFrame = 1 << 17

// TapTimeout is how long Read waits for a frame before it reports none,
// so that a reader stops on time.
const TapTimeout = 100 * time.Millisecond

// OpenTap opens a tap on the device named dev (in the calling thread's
// network namespace) for frames of etherType, with a receive buffer of
// buffer bytes.
func OpenTap(dev string, etherType uint16, buffer int) (*Tap, error) {
	return OpenTapUDP(dev, etherType, 0, buffer)
}

// OpenTapUDP is OpenTap that also keeps the UDP datagrams to udpPort
// (xam's UDP form) over IPv4, not fragments, and over IPv6 without
// extension headers; a udpPort of 0 keeps none.
func OpenTapUDP(dev string, etherType, udpPort uint16, buffer int) (*Tap, error) {
	ifi, err := net.InterfaceByName(dev)
	if err != nil {
		return nil, fmt.Errorf("device %q: %w", dev, err)
	}
	all := uint16(unix.ETH_P_ALL)
	proto := all<<8 | all>>8 // network order
	// A socket for all protocols: one for the EtherType alone would miss
	// frames a bridge port forwards and sends, which the kernel hands only
	// to all-protocol taps. The filter below keeps the EtherType's.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	t := &Tap{fd: fd, buf: make([]byte, MaxFrame), oob: make([]byte, 256)}
	fail := func(what string, err error) (*Tap, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("tap on %s: %s: %w", dev, what, err)
	}
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: 12},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: uint32(etherType)},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0xffff},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0},
	}
	if udpPort != 0 {
		const accept, drop = 15, 16 // the last two instructions
		filter = []unix.SockFilter{
			/* 0 */ {Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: 12},
			/* 1 */ {Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: accept - 2, Jf: 0, K: uint32(etherType)},
			/* 2 */ {Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 10 - 3, K: 0x0800},
			// IPv4: UDP, not a fragment, to the port after the header.
			/* 3 */ {Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 23},
			/* 4 */ {Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: drop - 5, K: 17},
			/* 5 */ {Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: 20},
			/* 6 */ {Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, Jt: drop - 7, Jf: 0, K: 0x3fff},
			/* 7 */ {Code: unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH, K: 14},
			/* 8 */ {Code: unix.BPF_LD | unix.BPF_H | unix.BPF_IND, K: 16},
			/* 9 */ {Code: unix.BPF_JMP | unix.BPF_JA, K: 14 - 10},
			/* 10 */ {Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: drop - 11, K: 0x86dd},
			// IPv6: UDP as the next header, to the port.
			/* 11 */ {Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 20},
			/* 12 */ {Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: drop - 13, K: 17},
			/* 13 */ {Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: 14 + 40 + 2},
			// Either way, the destination port is in A.
			/* 14 */ {Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: accept - 15, Jf: drop - 15, K: uint32(udpPort)},
			/* 15 */ {Code: unix.BPF_RET | unix.BPF_K, K: 0xffff},
			/* 16 */ {Code: unix.BPF_RET | unix.BPF_K, K: 0},
		}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return fail("filter", err)
	}
	// FORCE goes past net.core.rmem_max (root or CAP_NET_ADMIN, which an
	// AF_PACKET socket needs anyway); the kernel doubles the value.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, buffer/2); err != nil {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, buffer/2); err != nil {
			return fail("receive buffer", err)
		}
	}
	stamps := unix.SOF_TIMESTAMPING_RX_SOFTWARE | unix.SOF_TIMESTAMPING_SOFTWARE |
		unix.SOF_TIMESTAMPING_RX_HARDWARE | unix.SOF_TIMESTAMPING_RAW_HARDWARE
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING, stamps); err != nil {
		return fail("time stamps", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	// Frames that arrived between socket and bind, of any protocol, were
	// counted before the tap began: start from zero.
	if _, err := unix.GetsockoptTpacketStats(fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err != nil {
		return fail("statistics", err)
	}
	tv := unix.NsecToTimeval(int64(TapTimeout))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("timeout", err)
	}
	return t, nil
}

// Read returns the next frame (valid until the next Read), its time
// stamp, and whether the device sent it (rather than received it); ok is
// false when none came within TapTimeout or a signal interrupted the wait.
func (t *Tap) Read() (frame []byte, ts time.Time, outgoing, ok bool, err error) {
	n, oobn, flags, from, err := unix.Recvmsg(t.fd, t.buf, t.oob, 0)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
		return nil, time.Time{}, false, false, nil
	}
	if err != nil {
		return nil, time.Time{}, false, false, fmt.Errorf("recvmsg: %w", err)
	}
	if flags&unix.MSG_TRUNC != 0 {
		return nil, time.Time{}, false, false, fmt.Errorf("recvmsg: a frame longer than %d bytes", len(t.buf))
	}
	ll, isLL := from.(*unix.SockaddrLinklayer)
	return t.buf[:n], stamp(t.oob[:oobn]), isLL && ll.Pkttype == unix.PACKET_OUTGOING, true, nil
}

// Dropped returns the frames the kernel dropped for a full receive buffer
// since the last call (reading the count resets it).
func (t *Tap) Dropped() (int, error) {
	ts, err := unix.GetsockoptTpacketStats(t.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return 0, fmt.Errorf("tap statistics: %w", err)
	}
	return int(ts.Drops), nil
}

// Close closes the tap.
func (t *Tap) Close() error { return unix.Close(t.fd) }

// stamp returns the kernel's time stamp of the frame whose control
// messages are oob.
func stamp(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Now()
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_TIMESTAMPING || len(m.Data) < 3*16 {
			continue
		}
		// struct scm_timestamping: software, (legacy), raw hardware.
		ts := func(i int) time.Time {
			sec := int64(binary.NativeEndian.Uint64(m.Data[16*i:]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[16*i+8:]))
			return time.Unix(sec, nsec)
		}
		if hw := ts(2); hw.Unix() != 0 {
			return hw
		}
		if sw := ts(0); sw.Unix() != 0 {
			return sw
		}
	}
	return time.Now()
}
