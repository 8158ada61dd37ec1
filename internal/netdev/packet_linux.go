package netdev

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// A Packet is an AF_PACKET socket for the frames of one EtherType on one
// device: one system call per frame each way, through the kernel's stack.
// The benchmarks measure it as AF_XDP's kernel peer, and the hostile
// suite sends forged frames with it, as a host on the segment would.
type Packet struct {
	fd int
	to unix.SockaddrLinklayer
}

// ErrNoBuffers: the kernel had no room for a frame sent, and dropped it
// (ENOBUFS, a transmit queue full).
var ErrNoBuffers = errors.New("netdev: no buffer space: the frame was dropped")

// OpenPacket opens an AF_PACKET socket for etherType bound to the device
// ifindex (of the calling thread's network namespace).
func OpenPacket(ifindex int, etherType uint16) (*Packet, error) {
	proto := etherType<<8 | etherType>>8 // network order
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	p := &Packet{fd: fd, to: unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifindex}}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding AF_PACKET socket to ifindex %d: %w", ifindex, err)
	}
	return p, nil
}

// OpenSender opens an AF_PACKET socket that only sends, on the device
// ifindex (of the calling thread's network namespace): it binds to no
// protocol, so it receives nothing, and sends whatever frames it is given,
// as a host on the segment would (the hostile suite's forger).
func OpenSender(ifindex int) (*Packet, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	return &Packet{fd: fd, to: unix.SockaddrLinklayer{Ifindex: ifindex, Halen: 6}}, nil
}

// SetTimeout sets how long Recv waits for a frame (0: for ever).
func (p *Packet) SetTimeout(d time.Duration) error {
	tv := unix.NsecToTimeval(int64(d))
	return unix.SetsockoptTimeval(p.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
}

// Send sends frame, whole, on the device; ErrNoBuffers when the kernel
// dropped it for want of room.
func (p *Packet) Send(frame []byte) error {
	if len(frame) >= 6 {
		copy(p.to.Addr[:6], frame[:6]) // the destination, for a sender bound to no protocol
	}
	err := unix.Sendto(p.fd, frame, 0, &p.to)
	if errors.Is(err, unix.ENOBUFS) {
		return ErrNoBuffers
	}
	if err != nil {
		return fmt.Errorf("AF_PACKET sendto: %w", err)
	}
	return nil
}

// Recv reads the next frame into buf. ok is false when none came within
// the timeout or a signal interrupted the wait; outgoing reports the
// socket's view of a frame the host itself sent.
func (p *Packet) Recv(buf []byte) (n int, outgoing, ok bool, err error) {
	n, from, err := unix.Recvfrom(p.fd, buf, 0)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
		return 0, false, false, nil
	}
	if err != nil {
		return 0, false, false, fmt.Errorf("AF_PACKET recvfrom: %w", err)
	}
	ll, isLL := from.(*unix.SockaddrLinklayer)
	return n, isLL && ll.Pkttype == unix.PACKET_OUTGOING, true, nil
}

// Close closes the socket.
func (p *Packet) Close() error { return unix.Close(p.fd) }
