package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/xam-project/xam/internal/netdev"

	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath/encap"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// Place is where an endpoint lives: a device, its MAC, the host's IPv4
// address (the zero Addr if it has none), how to run code in its network
// namespace, and how xam's frames travel there (Encap).
type Place struct {
	Ifindex int
	MAC     net.HardwareAddr
	Addr    netip.Addr
	// Addr6 is the host's IPv6 address, for the UDP form over IPv6 (the
	// zero Addr: the device's first global one).
	Addr6 netip.Addr
	Do    func(func() error) error
	// Encap is the frames' form: raw Ethernet (the zero Encap) or UDP.
	Encap Encap
	// Dev and Netns name the device and its named network namespace
	// ("": the caller's), for a program started on the Place (`xam fw
	// --dev Dev --netns Netns`); OnHost sets them.
	Dev, Netns string
}

// Here returns the Place of device ifindex in the caller's namespace.
func Here(ifindex int, mac net.HardwareAddr) Place {
	return Place{Ifindex: ifindex, MAC: mac, Do: func(f func() error) error { return f() }}
}

// OnHost returns the Place of a lab host's interface, in its namespace.
func OnHost(h *lab.Host) Place {
	return Place{Ifindex: h.Index, MAC: h.MAC, Addr: h.Addr.Addr(), Addr6: h.Addr6.Addr(), Do: h.Do, Dev: h.Link, Netns: h.NS}
}

// Encap is the form xam's frames take on a device (docs/wire.md): raw
// Ethernet frames of xam's EtherType, the default on one LAN, or with UDP
// its UDP form, IPv4 (IPv6 with IPv6) and UDP to Port, which crosses
// routers and runs where only IP is carried (package encap).
type Encap struct {
	UDP  bool
	IPv6 bool
	Port uint16 // 0: cells.DefaultUDPPort
}

// ParseEncap reads an --encap flag: raw, udp[:PORT] or udp6[:PORT].
func ParseEncap(s string) (Encap, error) {
	kind, port, hasPort := strings.Cut(s, ":")
	var e Encap
	switch kind {
	case "raw", "":
		if hasPort {
			return e, fmt.Errorf("--encap %q: raw frames have no port", s)
		}
		return e, nil
	case "udp":
		e.UDP = true
	case "udp6":
		e.UDP, e.IPv6 = true, true
	default:
		return e, fmt.Errorf("--encap %q: want raw, udp[:PORT] or udp6[:PORT]", s)
	}
	if hasPort {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return e, fmt.Errorf("--encap %q: the port is a number in 1..65535", s)
		}
		e.Port = uint16(n)
	}
	if e.Port == 0 {
		e.Port = cells.DefaultUDPPort
	}
	return e, nil
}

// String returns the flag's form of e: raw, udp:PORT or udp6:PORT.
func (e Encap) String() string {
	switch {
	case !e.UDP:
		return "raw"
	case e.IPv6:
		return fmt.Sprintf("udp6:%d", e.port())
	}
	return fmt.Sprintf("udp:%d", e.port())
}

func (e Encap) port() uint16 {
	if e.Port == 0 {
		return cells.DefaultUDPPort
	}
	return e.Port
}

// IP returns the address p's frames come from in the UDP form: Addr, or
// Addr6 with Encap.IPv6; when it is not set, the device's first global
// address of that family.
func (p Place) IP() (netip.Addr, error) {
	a := p.Addr
	if p.Encap.IPv6 {
		a = p.Addr6
	}
	if a.IsValid() {
		return a, nil
	}
	family, name := netlink.FAMILY_V4, "IPv4"
	if p.Encap.IPv6 {
		family, name = netlink.FAMILY_V6, "IPv6"
	}
	err := p.Do(func() error {
		link, err := netlink.LinkByIndex(p.Ifindex)
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(link, family)
		if err != nil {
			return err
		}
		for _, ad := range addrs {
			if ip, ok := netip.AddrFromSlice(ad.IP); ok && ip.IsGlobalUnicast() {
				a = ip.Unmap()
				return nil
			}
		}
		return nil
	})
	if err == nil && !a.IsValid() {
		err = fmt.Errorf("datapath: %s has no global %s address, which xam's UDP form needs", devName(p), name)
	}
	return a, err
}

// Address returns the address the protocol layers know the host at p by:
// its MAC on raw Ethernet, the xam address of its IP in the UDP form
// (encap.Addr).
func (p Place) Address() (net.HardwareAddr, error) {
	if !p.Encap.UDP {
		return p.MAC, nil
	}
	ip, err := p.IP()
	if err != nil {
		return nil, err
	}
	return encap.Addr(ip), nil
}

// Endpoint is an AF_XDP socket on a device queue with xam's XDP program
// steering xam frames to it.
type Endpoint struct {
	MAC  net.HardwareAddr
	Prog *loader.Program
	Att  *loader.Attachment
	Sock *afxdp.Socket // the socket (OpenQueues: the first queue's)
	// Queues is the link over the sockets of OpenQueues; nil for one
	// socket.
	Queues *afxdp.Queues
	// UDP carries the frames in xam's UDP form over Queues or Sock, for
	// a Place whose Encap is UDP; nil for raw frames. Link returns the
	// topmost there is: UDP, Queues or Sock.
	UDP *encap.UDP
}

// Open loads and attaches the XDP program on the device at p and opens an
// AF_XDP socket on queue.
func Open(p Place, mode loader.Mode, queue int) (*Endpoint, error) {
	return OpenConfig(p, mode, queue, loader.Config{DstMAC: p.MAC})
}

// BigChunk is the UMEM chunk of the sockets OpenConfig opens on devices
// whose frames a 2 KB chunk does not hold.
const BigChunk = 4096

// MaxMTU returns the largest device MTU whose frames OpenConfig's sockets
// carry: one 4 KB chunk's (3826), or with multi-buffer frames 17 chunks'
// (65535, all an Ethernet frame can be).
func MaxMTU(multiBuffer bool) int {
	if multiBuffer {
		return afxdp.MaxMultiBufferMTU(BigChunk)
	}
	return afxdp.MaxMTU(BigChunk, 0)
}

// MultiBuffer reports whether OpenConfig binds multi-buffer sockets on a
// device of MTU mtu: its frames do not fit one chunk and the kernel has
// XDP_USE_SG (netdev.MultiBufferKernel).
func MultiBuffer(mtu int) bool {
	k, err := netdev.Kernel()
	return mtu > MaxMTU(false) && err == nil && netdev.KernelAtLeast(k.Release, netdev.MultiBufferKernel[0], netdev.MultiBufferKernel[1])
}

// OpenConfig is Open with the program's configuration; with
// cfg.Admission, the VCIs in admit (on VPI 0) are admitted.
//
// The device's MTU decides the frames: up to 1778 bytes of payload, 2 KB
// UMEM chunks; up to 3826, 4 KB chunks; above, frames of several chunks
// (multi-buffer: the frags-aware program, Linux 5.18 and later, and an
// AF_XDP socket bound with XDP_USE_SG, 6.6 and later), so that the link's
// MTU is the device's. A kernel without them gets the largest frame one
// chunk holds, as the socket's Info (MultiBuffer false, MTU) says.
func OpenConfig(p Place, mode loader.Mode, queue int, cfg loader.Config, admit ...uint16) (*Endpoint, error) {
	return open(p, mode, []int{queue}, cfg, admit)
}

// OpenQueues is Open with a socket on each of queues, sharing one UMEM
// (afxdp.OpenShared), each registered in the program for its queue:
// frames that the device spreads over those queues all reach the
// Endpoint's Link, an afxdp.Queues. Shared sockets take frames of one
// chunk only: a device whose MTU needs multi-buffer frames is refused.
func OpenQueues(p Place, mode loader.Mode, queues []int) (*Endpoint, error) {
	if len(queues) == 0 {
		return nil, errors.New("datapath: no queue to open")
	}
	return open(p, mode, queues, loader.Config{DstMAC: p.MAC}, nil)
}

// open is OpenConfig and OpenQueues.
func open(p Place, mode loader.Mode, queues []int, cfg loader.Config, admit []uint16) (*Endpoint, error) {
	e := &Endpoint{MAC: p.MAC}
	opts := socketOptions(queues[0])
	// Time stamps both ways: the receive metadata program, and transmit
	// stamps through TX metadata where the frames fit one chunk.
	opts.TxTimestamps = cfg.RxMetadata && len(queues) == 1
	var local netip.Addr
	if p.Encap.UDP {
		var err error
		if local, err = p.IP(); err != nil {
			return nil, err
		}
		if cfg.RxMetadata {
			return nil, errors.New("datapath: the UDP form with time stamps: not built (the receive metadata sits in front of the Ethernet header the UDP form hides)")
		}
		cfg.UDPPort, cfg.UDPLocal = p.Encap.port(), local
	}
	err := p.Do(func() (err error) {
		if link, err := netlink.LinkByIndex(p.Ifindex); err == nil {
			mtu := link.Attrs().MTU
			if mtu > afxdp.MaxMTU(2048, 0) {
				opts.FrameSize = BigChunk // 2 KB chunks hold frames of up to 1792 bytes
			}
			if mtu > afxdp.MaxMTU(BigChunk, 0) {
				if len(queues) > 1 {
					return fmt.Errorf("datapath: %s: MTU %d needs multi-buffer frames, which sockets on several queues (a shared UMEM) do not take: at most MTU %d, or one queue", devName(p), mtu, MaxMTU(false))
				}
				cfg.Frags, opts.MultiBuffer = true, true
				opts.TxTimestamps = false
			}
		}
		if e.Prog, err = loader.Load(cfg); err != nil && cfg.Frags {
			// A kernel before 5.18: frames of one buffer.
			cfg.Frags, opts.MultiBuffer = false, false
			e.Prog, err = loader.Load(cfg)
		}
		if err != nil {
			return err
		}
		for _, vci := range admit {
			if err := e.Prog.Admit(0, vci); err != nil {
				return err
			}
		}
		if e.Att, err = e.Prog.Attach(p.Ifindex, mode); err != nil {
			return err
		}
		var copyWhy string
		if opts.Mode == afxdp.ModeAuto {
			if copyWhy = noZeroCopy(devName(p)); copyWhy != "" {
				opts.Mode = afxdp.ModeCopy // no bind that is sure to fail
			}
		}
		var socks []*afxdp.Socket
		if len(queues) == 1 {
			var s *afxdp.Socket
			if s, err = afxdp.Open(p.Ifindex, opts); errors.Is(err, afxdp.ErrNotSupported) && opts.MultiBuffer {
				// A kernel before 6.6: no XDP_USE_SG.
				opts.MultiBuffer = false
				s, err = afxdp.Open(p.Ifindex, opts)
			}
			socks = []*afxdp.Socket{s}
		} else {
			opts.Queue = 0
			socks, err = afxdp.OpenShared(p.Ifindex, queues, opts)
		}
		if err != nil {
			if opts.Mode == afxdp.ModeZeroCopy {
				err = zeroCopyError(p, err)
			}
			return err
		}
		e.Sock = socks[0]
		if len(socks) > 1 {
			if e.Queues, err = afxdp.NewQueues(socks); err != nil {
				for _, s := range socks {
					s.Close()
				}
				e.Sock = nil
				return err
			}
		}
		for i, s := range socks {
			noteXSK(devName(p), s.Info(), copyWhy)
			if err := e.Prog.Register(queues[i], s.FD()); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && p.Encap.UDP {
		e.UDP, err = encap.New(e.Link(), encap.Config{Local: local, Port: p.Encap.port(), Ifindex: p.Ifindex, Do: p.Do, EtherType: cfg.EtherType})
		if err == nil {
			e.MAC = e.UDP.HardwareAddr()
		}
	}
	if err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Link returns the Endpoint's link: its socket, or with several queues
// (OpenQueues) the Queues over their sockets, or in the UDP form the UDP
// over either.
func (e *Endpoint) Link() afxdp.Link {
	if e.UDP != nil {
		return e.UDP
	}
	if e.Queues != nil {
		return e.Queues
	}
	return e.Sock
}

// devName names p's device for messages.
func devName(p Place) string {
	if p.Dev != "" {
		return p.Dev
	}
	if ifc, err := net.InterfaceByIndex(p.Ifindex); err == nil {
		return ifc.Name
	}
	return fmt.Sprintf("ifindex %d", p.Ifindex)
}

// Peer returns the address that frames from e to the host at p carry:
// p's MAC on raw Ethernet; in the UDP form, the xam address of p's IP,
// once e has found the MAC of the next hop toward it (encap.UDP.Resolve).
func (e *Endpoint) Peer(p Place) (net.HardwareAddr, error) {
	if e.UDP == nil {
		return p.MAC, nil
	}
	c := e.UDP.Config()
	p.Encap = Encap{UDP: true, IPv6: !c.Local.Is4(), Port: c.Port}
	ip, err := p.IP()
	if err != nil {
		return nil, err
	}
	return e.UDP.Resolve(ip)
}

// Close closes the socket and detaches and unloads the program.
func (e *Endpoint) Close() error {
	var errs []error
	if e.UDP != nil {
		errs = append(errs, e.UDP.Close()) // closes the link below it
		if e.Queues != nil {
			for _, s := range e.Queues.Sockets() {
				s.Recv(nil)
			}
		} else if e.Sock != nil {
			e.Sock.Recv(nil)
		}
	} else if e.Queues != nil {
		errs = append(errs, e.Queues.Close())
		for _, s := range e.Queues.Sockets() {
			s.Recv(nil) // gives back lent frames, which keep the UMEM mapped until then
		}
	} else if e.Sock != nil {
		errs = append(errs, e.Sock.Close())
		e.Sock.Recv(nil) // gives back lent frames, which keep the UMEM mapped until then
	}
	if e.Prog != nil {
		errs = append(errs, e.Prog.Close()) // also detaches e.Att
	}
	return errors.Join(errs...)
}

// Echo answers every xam frame the endpoint receives with the same frame,
// addresses swapped, until stop is set. It spins on the ring.
func (e *Endpoint) Echo(stop *atomic.Bool) error {
	l := e.Link()
	bufs := make([][]byte, l.BatchSize())
	for !stop.Load() {
		n, err := l.Recv(bufs)
		if err != nil {
			return err
		}
		if n == 0 {
			continue
		}
		for _, f := range bufs[:n] {
			var mac [6]byte
			copy(mac[:], f[0:6])
			copy(f[0:6], f[6:12])
			copy(f[6:12], mac[:])
		}
		if _, err := l.Send(bufs[:n]); err != nil {
			return err
		}
	}
	return nil
}
