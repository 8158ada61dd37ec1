package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath"
)

// The kernel's own paths, measured beside the raw AF_XDP ping-pong: UDP
// sockets (the conventional stack) and AF_PACKET sockets carrying the same
// xam frames (a system call per frame, SSAM's "conventional path").

// UDPPing runs a ping-pong of size-byte datagrams (at least 8) from a to b
// over kernel UDP sockets, b echoing with blocking reads.
func UDPPing(a, b datapath.Place, aAddr, bAddr netip.Addr, cfg PingConfig) (*PingResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	size := max(cfg.Size, 8)
	var ca, cb *net.UDPConn
	if err := b.Do(func() (err error) {
		cb, err = net.ListenUDP("udp4", &net.UDPAddr{IP: bAddr.AsSlice(), Port: 7088})
		return err
	}); err != nil {
		return nil, fmt.Errorf("udp echo socket: %w", err)
	}
	defer cb.Close()
	if err := a.Do(func() (err error) {
		ca, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: bAddr.AsSlice(), Port: 7088})
		return err
	}); err != nil {
		return nil, fmt.Errorf("udp ping socket: %w", err)
	}
	defer ca.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := cb.ReadFromUDPAddrPort(buf)
			if err != nil {
				return // closed
			}
			cb.WriteToUDPAddrPort(buf[:n], from)
		}
	})
	defer wg.Wait()
	defer cb.Close()

	r := cfg.newResult("udp", size)
	msg := make([]byte, size)
	buf := make([]byte, 65536)
	for i := range cfg.Warmup + cfg.Count {
		if r.stop(&cfg) {
			break
		}
		binary.BigEndian.PutUint64(msg, uint64(i))
		start := time.Now()
		ca.SetReadDeadline(start.Add(cfg.Timeout))
		if _, err := ca.Write(msg); err != nil {
			return nil, err
		}
		got := false
		for !got {
			n, err := ca.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				return nil, err
			}
			got = n >= 8 && binary.BigEndian.Uint64(buf) == uint64(i)
		}
		r.record(i >= cfg.Warmup, got, time.Since(start))
	}
	r.finish()
	return r, nil
}

// packetSocket opens an AF_PACKET socket for xam's EtherType bound to the
// device.
func packetSocket(ifindex int) (int, error) {
	proto := htons(cells.EtherType)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return -1, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("binding AF_PACKET socket to ifindex %d: %w", ifindex, err)
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// outgoing reports whether a packet socket's recvfrom address marks a frame
// the host itself sent.
func outgoing(from unix.Sockaddr) bool {
	ll, ok := from.(*unix.SockaddrLinklayer)
	return ok && ll.Pkttype == unix.PACKET_OUTGOING
}

// PacketPing runs the ping-pong of raw xam frames from a to b through
// AF_PACKET sockets, one system call per frame each way. No XDP program may
// be attached for xam's EtherType while it runs.
func PacketPing(a, b datapath.Place, cfg PingConfig) (*PingResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	frame, err := rawFrame(b.MAC, a.MAC, cfg.Size)
	if err != nil {
		return nil, err
	}
	var fa, fb int
	if err := a.Do(func() (err error) { fa, err = packetSocket(a.Ifindex); return err }); err != nil {
		return nil, err
	}
	defer unix.Close(fa)
	if err := b.Do(func() (err error) { fb, err = packetSocket(b.Ifindex); return err }); err != nil {
		return nil, err
	}
	// The echo: a blocking recvfrom and a sendto per frame, until told to
	// stop (it wakes every 50 ms to look).
	poll := unix.NsecToTimeval(int64(50 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fb, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &poll); err != nil {
		unix.Close(fb)
		return nil, err
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 65536)
		to := &unix.SockaddrLinklayer{Protocol: htons(cells.EtherType), Ifindex: b.Ifindex}
		for !stop.Load() {
			n, from, err := unix.Recvfrom(fb, buf, 0)
			if err != nil || n < cells.EthernetHeaderSize || outgoing(from) {
				continue // timeouts, and the socket's view of its own echoes
			}
			var mac [6]byte
			copy(mac[:], buf[0:6])
			copy(buf[0:6], buf[6:12])
			copy(buf[6:12], mac[:])
			unix.Sendto(fb, buf[:n], 0, to)
		}
	})
	defer func() {
		stop.Store(true)
		wg.Wait()
		unix.Close(fb)
	}()

	tv := unix.NsecToTimeval(int64(cfg.Timeout))
	if err := unix.SetsockoptTimeval(fa, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, err
	}
	r := cfg.newResult("packet", cfg.Size)
	r.FrameBytes = len(frame)
	to := &unix.SockaddrLinklayer{Protocol: htons(cells.EtherType), Ifindex: a.Ifindex}
	buf := make([]byte, 65536)
	for i := range cfg.Warmup + cfg.Count {
		if r.stop(&cfg) {
			break
		}
		seq := uint64(i)
		binary.BigEndian.PutUint64(frame[seqOffset:], seq)
		start := time.Now()
		if err := unix.Sendto(fa, frame, 0, to); err != nil {
			return nil, fmt.Errorf("AF_PACKET sendto: %w", err)
		}
		got := false
		for !got {
			n, from, err := unix.Recvfrom(fa, buf, 0)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) && time.Since(start) > cfg.Timeout {
				break
			}
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("AF_PACKET recvfrom: %w", err)
			}
			// The socket also sees its own transmissions.
			got = !outgoing(from) && n >= seqOffset+8 && binary.BigEndian.Uint64(buf[seqOffset:]) == seq
		}
		r.record(i >= cfg.Warmup, got, time.Since(start))
	}
	r.finish()
	return r, nil
}
