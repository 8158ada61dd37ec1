package datapath

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/xam-project/xam/internal/netdev"

	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
)

// Place is where an endpoint lives: a device, its MAC, the host's IPv4
// address (the zero Addr if it has none) and how to run code in its
// network namespace.
type Place struct {
	Ifindex int
	MAC     net.HardwareAddr
	Addr    netip.Addr
	Do      func(func() error) error
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
	return Place{Ifindex: h.Index, MAC: h.MAC, Addr: h.Addr.Addr(), Do: h.Do, Dev: h.Link, Netns: h.NS}
}

// Endpoint is an AF_XDP socket on a device queue with xam's XDP program
// steering xam frames to it.
type Endpoint struct {
	MAC  net.HardwareAddr
	Prog *loader.Program
	Att  *loader.Attachment
	Sock *afxdp.Socket
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
	e := &Endpoint{MAC: p.MAC}
	opts := afxdp.Options{Queue: queue, Mode: zeroCopyMode()}
	err := p.Do(func() (err error) {
		if link, err := netlink.LinkByIndex(p.Ifindex); err == nil {
			mtu := link.Attrs().MTU
			if mtu > afxdp.MaxMTU(2048, 0) {
				opts.FrameSize = BigChunk // 2 KB chunks hold frames of up to 1792 bytes
			}
			if mtu > afxdp.MaxMTU(BigChunk, 0) {
				cfg.Frags, opts.MultiBuffer = true, true
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
		if e.Sock, err = afxdp.Open(p.Ifindex, opts); errors.Is(err, afxdp.ErrNotSupported) && opts.MultiBuffer {
			// A kernel before 6.6: no XDP_USE_SG.
			opts.MultiBuffer = false
			e.Sock, err = afxdp.Open(p.Ifindex, opts)
		}
		if err != nil {
			if opts.Mode == afxdp.ModeZeroCopy {
				err = zeroCopyError(devName(p), err)
			}
			return err
		}
		noteXSK(devName(p), e.Sock.Info())
		return e.Prog.Register(queue, e.Sock.FD())
	})
	if err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
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

// Close closes the socket and detaches and unloads the program.
func (e *Endpoint) Close() error {
	var errs []error
	if e.Sock != nil {
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
	bufs := make([][]byte, e.Sock.BatchSize())
	for !stop.Load() {
		n, err := e.Sock.Recv(bufs)
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
		if _, err := e.Sock.Send(bufs[:n]); err != nil {
			return err
		}
	}
	return nil
}
