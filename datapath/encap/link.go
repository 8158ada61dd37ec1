package encap

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
)

// discardPort is where the datagram that makes the kernel resolve a next
// hop goes: the peer's kernel drops it (and answers that nothing
// listens), xam's XDP program passes it.
const discardPort = 9

// lookup finds the next hop toward ip in the kernel's tables (neighs
// caches the neighbour table by family for one pass), and makes the
// kernel resolve the hop when it has no usable entry for it, or confirm
// it when the entry is stale (xam's frames bypass the kernel, which would
// otherwise never look at it again).
func (u *UDP) lookup(ip netip.Addr, neighs map[int][]netlink.Neigh) (*hop, error) {
	var h *hop
	err := u.cfg.Do(func() error {
		routes, err := netlink.RouteGet(ip.AsSlice())
		if err != nil {
			return fmt.Errorf("encap: the kernel's route to %v: %w", ip, err)
		}
		if len(routes) == 0 || routes[0].LinkIndex != u.cfg.Ifindex {
			dev := 0
			if len(routes) > 0 {
				dev = routes[0].LinkIndex
			}
			return fmt.Errorf("%w: the kernel routes %v by ifindex %d, xam's device is %d", ErrRoute, ip, dev, u.cfg.Ifindex)
		}
		via := ip
		if gw, ok := netip.AddrFromSlice(routes[0].Gw); ok {
			via = gw.Unmap()
		}
		family := netlink.FAMILY_V4
		if !via.Is4() {
			family = netlink.FAMILY_V6
		}
		list, ok := neighs[family]
		if !ok {
			if list, err = netlink.NeighList(u.cfg.Ifindex, family); err != nil {
				return fmt.Errorf("encap: reading the neighbours of ifindex %d: %w", u.cfg.Ifindex, err)
			}
			neighs[family] = list
		}
		resolving := false
		for _, n := range list {
			if a, ok := netip.AddrFromSlice(n.IP); !ok || a.Unmap() != via {
				continue
			}
			const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT | netlink.NUD_NOARP
			if n.State&usable != 0 && len(n.HardwareAddr) == 6 {
				h = &hop{mac: append(net.HardwareAddr(nil), n.HardwareAddr...), via: via}
				if n.State&netlink.NUD_STALE != 0 {
					u.kick(ip) // the kernel probes it again
				}
				return nil
			}
			resolving = n.State&netlink.NUD_INCOMPLETE != 0
		}
		if !resolving {
			u.kick(ip)
		}
		return fmt.Errorf("%w: no neighbour entry for %v (next hop to %v) yet", ErrUnresolved, via, ip)
	})
	return h, err
}

// kick sends a datagram through the kernel to the peer's discard port:
// the kernel resolves (or confirms) the next hop to send it.
func (u *UDP) kick(ip netip.Addr) {
	u.hold.WriteToUDPAddrPort(nil, netip.AddrPortFrom(ip, discardPort))
}

// Send implements afxdp.Link: each frame, addressed to a peer's xam
// address, goes out in the UDP form to the peer's next hop. A frame to an
// address that names no IP host, or to a peer whose next hop is not
// resolved yet, is dropped and counted (Stats), as a wire loses a frame;
// it counts as handed to the link.
func (u *UDP) Send(frames [][]byte) (int, error) {
	if u.closed.Load() {
		return 0, net.ErrClosed
	}
	if err := afxdp.CheckFrames(frames, u.mtu); err != nil {
		return 0, err
	}
	done := 0
	for done < len(frames) {
		out := u.out[:0]
		start := done
		for done < len(frames) && len(out) < len(u.scratch) {
			f := frames[done]
			done++
			p := u.peer([6]byte(f[0:6]))
			if p == nil {
				u.noPeer.Add(1)
				continue
			}
			h := p.hop.Load()
			if h == nil {
				u.unresolved.Add(1)
				continue
			}
			b := u.scratch[len(out)]
			hdr := cells.UDPHeader{DstMAC: h.mac, SrcMAC: u.devMAC,
				Src: netip.AddrPortFrom(u.cfg.Local, u.cfg.Port), Dst: netip.AddrPortFrom(p.ip, u.cfg.Port)}
			n := hdr.Len()
			payload := copy(b[n:], f[afxdp.EthernetHeaderLen:])
			if _, err := cells.PutUDP(b, &hdr, payload); err != nil {
				return start, err // cannot happen: sizes checked, families matched
			}
			out = append(out, b[:n+payload])
		}
		if len(out) == 0 {
			continue
		}
		k, err := u.inner.Send(out)
		u.sent.Add(uint64(k))
		if err != nil {
			// Which frame the k-th one was is not kept: report the
			// batch's start, the frames before it all sent.
			return start, err
		}
	}
	return len(frames), nil
}

// Recv implements afxdp.Link: it receives frames of the UDP form from the
// inner link and lends them up as Ethernet-shaped frames, rewritten in
// place: destination this host's xam address, source the sender's, the
// EtherType of the layers above, then the frame header and cells.
// Frames that are not the UDP form are dropped and counted.
func (u *UDP) Recv(frames [][]byte) (int, error) {
	n, err := u.inner.Recv(frames)
	if n == 0 || err != nil {
		return 0, err
	}
	j := 0
	for _, f := range frames[:n] {
		r, err := cells.ParseUDP(f, u.cfg.Port)
		if err != nil || r.Dst.Addr() != u.cfg.Local {
			u.malformed.Add(1) // not ours: the XDP program checks less
			continue
		}
		from, ok := u.sender(r.Src.Addr())
		if !ok {
			u.unknown.Add(1)
			continue
		}
		v := f[r.Off-afxdp.EthernetHeaderLen : r.End]
		copy(v[0:6], u.self[:])
		copy(v[6:12], from[:])
		v[12], v[13] = u.etype[0], u.etype[1]
		frames[j] = v
		j++
	}
	u.received.Add(uint64(j))
	// A batch of nothing usable returns none: the caller polls again, as
	// for an empty ring, rather than this loop running under a flood.
	return j, nil
}

// sender returns the xam address of a received frame's source src, and
// whether to take the frame: src of the UDP's family (an IPv4-mapped
// IPv6 source is not IPv4), and not another host's address. An IPv4
// source's address is its own; an IPv6 source's is its hash's, taken if
// no other IPv6 address holds it (in this UDP's peers or the process's
// registry) and, for one not known yet, while fewer than MaxLearned are
// learned.
func (u *UDP) sender(src netip.Addr) ([6]byte, bool) {
	if src.Is4() != u.cfg.Local.Is4() || src.Is4In6() {
		return [6]byte{}, false
	}
	if src.Is4() {
		return addrOf(src), true // the address is the IP's own
	}
	t := u.peers.Load()
	if a, ok := t.byIP[src]; ok {
		return a, true // a peer already: no hash
	}
	a := addrOf(src)
	if t.byAddr[a] != nil {
		return a, false // another IP with the same hash: an impersonation
	}
	if ip, ok := registry.Load(a); ok && ip.(netip.Addr) != src {
		return a, false
	}
	u.mu.Lock()
	full := u.learned >= u.cfg.MaxLearned
	if !full {
		u.learned++
	}
	u.mu.Unlock()
	if full {
		return a, false
	}
	u.add(a, src)
	return a, true
}

// Wait implements afxdp.Link.
func (u *UDP) Wait(timeout time.Duration) (bool, error) { return u.inner.Wait(timeout) }

// BatchSize implements afxdp.Link.
func (u *UDP) BatchSize() int { return u.inner.BatchSize() }

// MTU implements afxdp.Link: the inner link's, less the IP and UDP
// headers.
func (u *UDP) MTU() int { return u.mtu }

// HardwareAddr implements afxdp.Link: this host's xam address, Addr of
// Config.Local.
func (u *UDP) HardwareAddr() net.HardwareAddr { return u.self[:] }

// Close implements afxdp.Link: it stops watching the kernel's tables,
// lets go of the port and closes the inner link.
func (u *UDP) Close() error {
	if u.closed.Swap(true) {
		return net.ErrClosed
	}
	close(u.done)
	u.wg.Wait()
	u.rmu.Lock()
	u.resolved.Broadcast()
	u.rmu.Unlock()
	return errors.Join(u.inner.Close(), u.hold.Close())
}

// Stats implements afxdp.Statser with the inner link's counters.
func (u *UDP) Stats() (afxdp.Stats, error) {
	if s, ok := u.inner.(afxdp.Statser); ok {
		return s.Stats()
	}
	return afxdp.Stats{}, fmt.Errorf("encap: the inner link has no counters: %w", errors.ErrUnsupported)
}

// FD implements afxdp.FDer with the inner link's descriptor (-1 if none).
func (u *UDP) FD() int {
	if f, ok := u.inner.(afxdp.FDer); ok {
		return f.FD()
	}
	return -1
}

// FDs returns the inner link's descriptors: those of its sockets, for a
// poller.
func (u *UDP) FDs() []int {
	if f, ok := u.inner.(interface{ FDs() []int }); ok {
		return f.FDs()
	}
	return []int{u.FD()}
}

// Wake implements afxdp.Waker.
func (u *UDP) Wake() error {
	if w, ok := u.inner.(afxdp.Waker); ok {
		return w.Wake()
	}
	return fmt.Errorf("encap: the inner link cannot be woken: %w", errors.ErrUnsupported)
}

// Info returns the inner socket's setup (the zero Info for other links).
func (u *UDP) Info() afxdp.Info {
	if i, ok := u.inner.(interface{ Info() afxdp.Info }); ok {
		return i.Info()
	}
	return afxdp.Info{}
}

// Sockets returns the sockets of an inner link over several queues
// (afxdp.Queues), for counters; nil for one socket.
func (u *UDP) Sockets() []*afxdp.Socket {
	if l, ok := u.inner.(interface{ Sockets() []*afxdp.Socket }); ok {
		return l.Sockets()
	}
	return nil
}
