//go:build linux

package driver

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
)

// OpenPacket opens a device on the conventional path, for comparison: an
// AF_PACKET socket for cfg.EtherType on interface ifindex of the calling
// thread's network namespace, with batching disabled. Every cell is a frame
// of its own and a system call of its own (sendto per cell, recvfrom per
// frame). The device owns the socket: Close closes it. The caller needs
// CAP_NET_RAW.
func OpenPacket(ifindex int, cfg Config) (*Device, error) {
	et := cfg.EtherType
	if et == 0 {
		et = cells.EtherType
	}
	if et < 0x0600 {
		return nil, badConfig("EtherType %#04x is an 802.3 length (want at least 0x0600)", et)
	}
	l, err := newPacketLink(ifindex, et)
	if err != nil {
		return nil, err
	}
	d, err := open(l, cfg, 1, true)
	if err != nil {
		l.Close()
		return nil, err
	}
	return d, nil
}

// packetBatch is the packet link's BatchSize: the most frames one Recv
// reads (a recvfrom each).
const packetBatch = 64

// packetRcvBuf is the receive buffer asked for the socket, so that a burst
// of one-cell frames (each an skb of about 1 KB) is not dropped.
const packetRcvBuf = 4 << 20

// packetLink is an afxdp.Link over an AF_PACKET socket: the system-call
// path. Send makes one sendto per frame, Recv one recvfrom per frame (and
// one more that finds nothing, when fewer frames wait than asked for), Wait
// a poll(2) on the socket and an eventfd (written by Wake and Close).
type packetLink struct {
	fd, efd int
	ifname  string
	mtu     int
	mac     net.HardwareAddr
	closed  atomic.Bool
	sockFD  atomic.Int64 // fd for FD, -1 once closed

	rx struct {
		sync.Mutex
		bufs [][]byte // receive buffers, lent until the next Recv
		pfds [2]unix.PollFd
	}
	tx sync.Mutex

	txFrames, txBytes, rxFrames, rxBytes, txKicks, rxKicks, sleeps atomic.Uint64
}

var _ interface {
	afxdp.Link
	afxdp.Statser
	afxdp.FDer
	afxdp.Waker
} = (*packetLink)(nil)

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func newPacketLink(ifindex int, etherType uint16) (l *packetLink, err error) {
	ifi, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("driver: interface %d: %w", ifindex, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, badConfig("interface %s has no Ethernet address", ifi.Name)
	}
	l = &packetLink{fd: -1, efd: -1, ifname: ifi.Name, mtu: ifi.MTU, mac: ifi.HardwareAddr}
	defer func() {
		if err != nil {
			l.release()
		}
	}()
	proto := htons(etherType)
	l.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("driver: AF_PACKET socket: %w", err)
	}
	if err := unix.Bind(l.fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifindex}); err != nil {
		return nil, fmt.Errorf("driver: binding AF_PACKET socket to %s: %w", ifi.Name, err)
	}
	// Best effort: a bigger receive buffer (beyond rmem_max needs
	// CAP_NET_ADMIN), and no copies of our own frames (Linux 4.20+; a
	// socket bound to one protocol does not see them anyway).
	if unix.SetsockoptInt(l.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, packetRcvBuf) != nil {
		unix.SetsockoptInt(l.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, packetRcvBuf)
	}
	unix.SetsockoptInt(l.fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
	l.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("driver: eventfd: %w", err)
	}
	l.rx.bufs = make([][]byte, packetBatch)
	size := l.mtu + afxdp.EthernetHeaderLen
	backing := make([]byte, packetBatch*size)
	for i := range l.rx.bufs {
		l.rx.bufs[i] = backing[i*size : (i+1)*size : (i+1)*size]
	}
	l.sockFD.Store(int64(l.fd))
	l.rx.pfds = [2]unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}, {Fd: int32(l.efd), Events: unix.POLLIN}}
	return l, nil
}

func (l *packetLink) BatchSize() int                 { return packetBatch }
func (l *packetLink) MTU() int                       { return l.mtu }
func (l *packetLink) HardwareAddr() net.HardwareAddr { return l.mac }

// FD returns the AF_PACKET socket, or -1 after Close.
func (l *packetLink) FD() int { return int(l.sockFD.Load()) }

// Send makes one sendto per frame, on the socket's bound interface.
func (l *packetLink) Send(frames [][]byte) (int, error) {
	l.tx.Lock()
	defer l.tx.Unlock()
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	if err := afxdp.CheckFrames(frames, l.mtu); err != nil {
		return 0, err
	}
	var bytes uint64
	for i, f := range frames {
		for {
			l.txKicks.Add(1)
			_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(l.fd), uintptr(unsafe.Pointer(&f[0])), uintptr(len(f)), 0, 0, 0)
			if e == unix.EINTR {
				continue
			}
			if e != 0 {
				l.count(&l.txFrames, &l.txBytes, i, bytes)
				return i, fmt.Errorf("driver: %s: AF_PACKET sendto: %w", l.ifname, e)
			}
			break
		}
		bytes += uint64(len(f))
	}
	l.count(&l.txFrames, &l.txBytes, len(frames), bytes)
	return len(frames), nil
}

func (l *packetLink) count(frames, bytes *atomic.Uint64, n int, b uint64) {
	if n > 0 {
		frames.Add(uint64(n))
		bytes.Add(b)
	}
}

// Recv makes one non-blocking recvfrom per frame, into the link's buffers,
// which it lends until the next call.
func (l *packetLink) Recv(frames [][]byte) (int, error) {
	l.rx.Lock()
	defer l.rx.Unlock()
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	n := 0
	var bytes uint64
	for n < len(frames) && n < len(l.rx.bufs) {
		buf := l.rx.bufs[n]
		l.rxKicks.Add(1)
		r, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(l.fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)),
			unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EINTR {
			continue
		}
		if e == unix.EAGAIN {
			break
		}
		if e != 0 {
			l.count(&l.rxFrames, &l.rxBytes, n, bytes)
			return n, fmt.Errorf("driver: %s: AF_PACKET recvfrom: %w", l.ifname, e)
		}
		frames[n] = buf[:r:r]
		bytes += uint64(r)
		n++
	}
	l.count(&l.rxFrames, &l.rxBytes, n, bytes)
	return n, nil
}

// Wait sleeps in poll(2) on the socket and the eventfd.
func (l *packetLink) Wait(timeout time.Duration) (bool, error) {
	l.rx.Lock()
	defer l.rx.Unlock()
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		if l.closed.Load() {
			return false, net.ErrClosed
		}
		ms := -1
		switch {
		case timeout == 0:
			ms = 0
		case timeout > 0:
			left := time.Until(deadline)
			if left <= 0 {
				return false, nil
			}
			ms = int((left + time.Millisecond - 1) / time.Millisecond)
		}
		l.rx.pfds[0].Revents, l.rx.pfds[1].Revents = 0, 0
		if ms != 0 {
			l.sleeps.Add(1)
		}
		n, err := unix.Poll(l.rx.pfds[:], ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("driver: %s: poll: %w", l.ifname, err)
		}
		if l.closed.Load() {
			return false, net.ErrClosed
		}
		if l.rx.pfds[1].Revents&unix.POLLIN != 0 {
			var b [8]byte
			unix.Read(l.efd, b[:])
			return false, nil
		}
		if l.rx.pfds[0].Revents&unix.POLLIN != 0 {
			return true, nil
		}
		if n == 0 && timeout >= 0 {
			return false, nil
		}
	}
}

// Wake makes a blocked Wait, or the next one, return (false, nil).
func (l *packetLink) Wake() error {
	if l.closed.Load() {
		return net.ErrClosed
	}
	return l.poke()
}

func (l *packetLink) poke() error {
	one := [8]byte{1}
	if _, err := unix.Write(l.efd, one[:]); err != nil && !errors.Is(err, unix.EAGAIN) {
		return fmt.Errorf("driver: eventfd: %w", err)
	}
	return nil
}

// Stats counts the frames and the system calls (TxKicks: sendto, RxKicks:
// recvfrom, Sleeps: poll with a timeout).
func (l *packetLink) Stats() (afxdp.Stats, error) {
	if l.closed.Load() {
		return afxdp.Stats{}, net.ErrClosed
	}
	return afxdp.Stats{
		TxFrames: l.txFrames.Load(), TxBytes: l.txBytes.Load(),
		RxFrames: l.rxFrames.Load(), RxBytes: l.rxBytes.Load(),
		TxKicks: l.txKicks.Load(), RxKicks: l.rxKicks.Load(), Sleeps: l.sleeps.Load(),
	}, nil
}

// Close wakes a blocked Wait and closes the socket.
func (l *packetLink) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return net.ErrClosed
	}
	l.sockFD.Store(-1)
	l.poke()
	l.rx.Lock()
	l.tx.Lock()
	defer l.tx.Unlock()
	defer l.rx.Unlock()
	return l.release()
}

func (l *packetLink) release() error {
	var errs []error
	for _, fd := range []*int{&l.fd, &l.efd} {
		if *fd >= 0 {
			if err := unix.Close(*fd); err != nil {
				errs = append(errs, fmt.Errorf("driver: close: %w", err))
			}
			*fd = -1
		}
	}
	return errors.Join(errs...)
}
