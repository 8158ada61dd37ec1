package encap

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
)

// Config configures a UDP.
type Config struct {
	// Local is this host's address on the device, the source of every
	// frame; its family is every peer's. Required.
	Local netip.Addr
	// Port is the UDP port of every host of the job; 0 means
	// cells.DefaultUDPPort.
	Port uint16
	// Ifindex is the device's index in its namespace. Required.
	Ifindex int
	// Do runs f in the device's network namespace (netlink, the kernel
	// socket that holds the port); nil runs it in the caller's.
	Do func(f func() error) error
	// EtherType is the EtherType of the frames the layers above send and
	// receive; 0 means cells.EtherType.
	EtherType uint16
	// ResolveTimeout bounds how long Resolve waits for a next hop's MAC;
	// 0 means 3 s.
	ResolveTimeout time.Duration
	// MaxLearned bounds the IPv6 peers learned from received frames
	// (IPv6 addresses cannot be read back from their xam address); 0
	// means 4096. Frames from more unknown IPv6 senders are dropped and
	// counted in Stats.Unknown.
	MaxLearned int
}

// Stats counts what a UDP did besides moving frames (the inner link
// counts those).
type Stats struct {
	Sent       uint64 `json:"sent"`       // frames encapsulated and handed to the inner link
	Received   uint64 `json:"received"`   // frames of the UDP form passed up
	Malformed  uint64 `json:"malformed"`  // received frames that were not the UDP form (cells.ParseUDP failed; an IPv4-mapped address among them)
	Unresolved uint64 `json:"unresolved"` // frames dropped: no MAC for the peer's next hop yet
	NoPeer     uint64 `json:"no_peer"`    // frames dropped: an address that names no IP (a group address, an unknown IPv6 peer)
	Unknown    uint64 `json:"unknown"`    // frames dropped: from a source refused (another family, another IP's address, an IPv6 sender past MaxLearned)
	Resolved   uint64 `json:"resolved"`   // next hops found or changed
}

// Errors.
var (
	ErrFamily = errors.New("encap: address of the other family")
	// ErrUnresolved: no MAC for a peer's next hop within the timeout.
	ErrUnresolved = errors.New("encap: next hop not resolved")
	// ErrRoute: the kernel's route to a peer does not leave by the device.
	ErrRoute = errors.New("encap: no route through the device")
)

// UDP is an afxdp.Link that carries the frames of the layers above in
// xam's UDP form over an inner link. It has the inner link's threads
// rules: one sender, one receiver.
type UDP struct {
	inner   afxdp.Link
	cfg     Config
	self    [6]byte
	devMAC  net.HardwareAddr
	over    int
	mtu     int
	etype   [2]byte
	hold    *net.UDPConn // holds the port; kicks neighbour resolution
	changed chan struct{}

	mu      sync.Mutex // peers, learned; the table's writers
	peers   atomic.Pointer[peerTable]
	learned int

	scratch [][]byte // Send's frames, one per batch slot
	out     [][]byte

	sent, received, malformed, unresolved, noPeer, unknown, resolvedN atomic.Uint64

	resolved *sync.Cond // signalled after every resolution pass
	rmu      sync.Mutex
	pass     uint64 // resolution passes done, under rmu

	done   chan struct{}
	wg     sync.WaitGroup
	closed atomic.Bool
}

// peerTable is the UDP's peers, copied on write: by xam address, and the
// address of each by IP (so that a received frame's source finds its
// address without hashing an IPv6 address again).
type peerTable struct {
	byAddr map[[6]byte]*peer
	byIP   map[netip.Addr][6]byte
}

// peer is a host the UDP sends to.
type peer struct {
	ip    netip.Addr
	hop   atomic.Pointer[hop]   // nil until resolved
	route atomic.Pointer[error] // the last lookup's ErrRoute, nil if none
}

// hop is how frames reach a peer: the next hop's MAC and its address (the
// gateway, or the peer itself on the device's subnet).
type hop struct {
	mac net.HardwareAddr
	via netip.Addr
}

// registry maps the xam addresses of IPv6 hosts that Addr computed to
// their IP addresses, process-wide. The first IP to claim an address
// keeps it: Addr never rebinds one.
var registry sync.Map // [6]byte -> netip.Addr

// addrOf returns the xam address of ip (Addr) without remembering it.
func addrOf(ip netip.Addr) [6]byte {
	ip = ip.Unmap()
	if ip.Is4() {
		a := ip.As4()
		return [6]byte{0x02, 0x75, a[0], a[1], a[2], a[3]}
	}
	b := ip.As16()
	h := sha256.Sum256(b[:])
	return [6]byte{0x06, h[0], h[1], h[2], h[3], h[4]}
}

// Addr returns the xam address of the host at ip in the UDP form: 02:75
// and the IPv4 address, or 06 and 40 bits of SHA-256 of the IPv6 address
// (which Addr then remembers, so that a UDP of this process can send to
// it; an address already claimed by another IPv6 address stays that
// one's, and frames from the newcomer are refused as impersonation).
func Addr(ip netip.Addr) net.HardwareAddr {
	a := addrOf(ip)
	if ip = ip.Unmap(); !ip.Is4() {
		registry.LoadOrStore(a, ip)
	}
	return a[:]
}

// IP returns the IP address an xam address of the UDP form names: read
// from an IPv4 one, looked up for an IPv6 one that Addr computed.
func IP(addr net.HardwareAddr) (netip.Addr, bool) {
	if len(addr) != 6 {
		return netip.Addr{}, false
	}
	switch {
	case addr[0] == 0x02 && addr[1] == 0x75:
		return netip.AddrFrom4([4]byte(addr[2:6])), true
	case addr[0] == 0x06:
		ip, ok := registry.Load([6]byte(addr))
		if ok {
			return ip.(netip.Addr), true
		}
	}
	return netip.Addr{}, false
}

// New returns a UDP over inner, which it owns once New succeeds (Close
// closes it; on an error it is the caller's still). It holds cfg.Port on
// cfg.Local with a kernel socket, and watches the kernel's routes and
// neighbours in the device's namespace.
func New(inner afxdp.Link, cfg Config) (*UDP, error) {
	if !cfg.Local.IsValid() {
		return nil, errors.New("encap: no local address")
	}
	cfg.Local = cfg.Local.Unmap()
	if cfg.Port == 0 {
		cfg.Port = cells.DefaultUDPPort
	}
	if cfg.EtherType == 0 {
		cfg.EtherType = cells.EtherType
	}
	if cfg.ResolveTimeout == 0 {
		cfg.ResolveTimeout = 3 * time.Second
	}
	if cfg.MaxLearned == 0 {
		cfg.MaxLearned = 4096
	}
	if cfg.Do == nil {
		cfg.Do = func(f func() error) error { return f() }
	}
	u := &UDP{
		inner: inner, cfg: cfg, devMAC: inner.HardwareAddr(),
		over: cells.UDPOverhead(cfg.Local), changed: make(chan struct{}, 1), done: make(chan struct{}),
	}
	u.resolved = sync.NewCond(&u.rmu)
	u.mtu = inner.MTU() - u.over
	if u.mtu < cells.FrameHeaderSize+cells.CellSize {
		return nil, fmt.Errorf("encap: the device's MTU %d leaves no room for a cell after %d bytes of IP and UDP", inner.MTU(), u.over)
	}
	if !cfg.Local.Is4() && !cfg.Local.Is6() {
		return nil, fmt.Errorf("encap: local address %v", cfg.Local)
	}
	u.self = [6]byte(Addr(cfg.Local))
	u.etype = [2]byte{byte(cfg.EtherType >> 8), byte(cfg.EtherType)}
	u.peers.Store(&peerTable{byAddr: map[[6]byte]*peer{}, byIP: map[netip.Addr][6]byte{}})
	batch := inner.BatchSize()
	u.scratch = make([][]byte, batch)
	for i := range u.scratch {
		u.scratch[i] = make([]byte, inner.MTU()+afxdp.EthernetHeaderLen)
	}
	u.out = make([][]byte, 0, batch)

	err := cfg.Do(func() (err error) {
		u.hold, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(cfg.Local, cfg.Port)))
		if err != nil {
			return fmt.Errorf("encap: holding UDP port %d on %v: %w (is another program, or another xam, using it?)", cfg.Port, cfg.Local, err)
		}
		routes := make(chan netlink.RouteUpdate, 64)
		neighs := make(chan netlink.NeighUpdate, 64)
		cb := func(err error) { slog.Debug("encap: netlink subscription", "err", err) }
		if err := netlink.RouteSubscribeWithOptions(routes, u.done, netlink.RouteSubscribeOptions{ErrorCallback: cb}); err != nil {
			return fmt.Errorf("encap: watching routes: %w", err)
		}
		if err := netlink.NeighSubscribeWithOptions(neighs, u.done, netlink.NeighSubscribeOptions{ErrorCallback: cb}); err != nil {
			return fmt.Errorf("encap: watching neighbours: %w", err)
		}
		u.wg.Add(1)
		go u.watch(routes, neighs)
		return nil
	})
	if err != nil {
		close(u.done)
		u.wg.Wait()
		if u.hold != nil {
			u.hold.Close()
		}
		return nil, err
	}
	return u, nil
}

// Config returns the configuration in use, defaults filled in.
func (u *UDP) Config() Config { return u.cfg }

// EncapStats returns the UDP's own counters.
func (u *UDP) EncapStats() Stats {
	return Stats{
		Sent: u.sent.Load(), Received: u.received.Load(), Malformed: u.malformed.Load(),
		Unresolved: u.unresolved.Load(), NoPeer: u.noPeer.Load(), Unknown: u.unknown.Load(),
		Resolved: u.resolvedN.Load(),
	}
}

// peer returns the peer of address a, adding it (and starting its
// resolution) if a names an IP of the UDP's family.
func (u *UDP) peer(a [6]byte) *peer {
	if p := u.peers.Load().byAddr[a]; p != nil {
		return p
	}
	ip, ok := IP(a[:])
	if !ok || ip.Is4() != u.cfg.Local.Is4() || addrOf(ip) != a {
		return nil
	}
	return u.add(a, ip)
}

// add adds the peer at ip, address a, unless it is there, and has the
// watcher resolve it.
func (u *UDP) add(a [6]byte, ip netip.Addr) *peer {
	ip = ip.Unmap()
	u.mu.Lock()
	old := u.peers.Load()
	p := old.byAddr[a]
	if p == nil {
		p = &peer{ip: ip}
		t := &peerTable{byAddr: maps.Clone(old.byAddr), byIP: maps.Clone(old.byIP)}
		t.byAddr[a], t.byIP[ip] = p, a
		u.peers.Store(t)
	}
	u.mu.Unlock()
	u.poke()
	return p
}

// poke has the watcher look at the routes and neighbours again.
func (u *UDP) poke() {
	select {
	case u.changed <- struct{}{}:
	default:
	}
}

// Resolve adds the host at ip as a peer and waits until its next hop's MAC
// is known (or cfg.ResolveTimeout passes: ErrUnresolved, or ErrRoute when
// the kernel routes ip by another device). It returns the peer's xam
// address, the address the layers above send to.
func (u *UDP) Resolve(ip netip.Addr) (net.HardwareAddr, error) {
	ip = ip.Unmap()
	if ip.Is4() != u.cfg.Local.Is4() {
		return nil, fmt.Errorf("%w: peer %v, local %v", ErrFamily, ip, u.cfg.Local)
	}
	a := Addr(ip)
	held, _ := IP(a)
	var p *peer
	if held == ip {
		p = u.add([6]byte(a), ip)
		held = p.ip // a sender learned before, with the same hash
	}
	if held != ip {
		return nil, fmt.Errorf("encap: %v's address %v is %v's already (a 40-bit hash collision)", ip, a, held)
	}
	deadline := time.Now().Add(u.cfg.ResolveTimeout)
	timer := time.AfterFunc(u.cfg.ResolveTimeout, func() {
		u.rmu.Lock()
		u.resolved.Broadcast()
		u.rmu.Unlock()
	})
	defer timer.Stop()
	u.rmu.Lock()
	defer u.rmu.Unlock()
	start := u.pass
	for p.hop.Load() == nil {
		if u.closed.Load() {
			return nil, net.ErrClosed
		}
		// A route by another device, found by a pass that began after
		// this call: waiting would not change it.
		if err := p.route.Load(); err != nil && u.pass > start+1 {
			return nil, *err
		}
		if !time.Now().Before(deadline) {
			if err := p.route.Load(); err != nil {
				return nil, *err
			}
			return nil, fmt.Errorf("%w: %v, after %v", ErrUnresolved, ip, u.cfg.ResolveTimeout)
		}
		u.resolved.Wait()
	}
	return a, nil
}

// Passes returns how many times the UDP has looked up its peers' next
// hops (watch says when it does).
func (u *UDP) Passes() uint64 {
	u.rmu.Lock()
	defer u.rmu.Unlock()
	return u.pass
}

// WaitPass waits until a pass after the n-th is done, or timeout, and
// returns Passes.
func (u *UDP) WaitPass(n uint64, timeout time.Duration) uint64 {
	timer := time.AfterFunc(timeout, func() {
		u.rmu.Lock()
		u.resolved.Broadcast()
		u.rmu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	u.rmu.Lock()
	defer u.rmu.Unlock()
	for u.pass <= n && time.Now().Before(deadline) && !u.closed.Load() {
		u.resolved.Wait()
	}
	return u.pass
}

// NextHop returns the MAC that frames to the peer at ip go to, if the
// peer's next hop is resolved.
func (u *UDP) NextHop(ip netip.Addr) (net.HardwareAddr, bool) {
	p := u.peers.Load().byAddr[addrOf(ip)]
	if p == nil {
		return nil, false
	}
	if h := p.hop.Load(); h != nil {
		return h.mac, true
	}
	return nil, false
}

// watch resolves the peers' next hops after every route or neighbour
// change and every peer added; while a peer is unresolved, again after
// 100 ms, backing off to 2 s; and every 5 s in any case (the kernel's
// neighbour entries go stale while xam's frames bypass it, and a
// subscription that the kernel overran stops). Events that arrive while a
// pass runs are taken together by the next.
func (u *UDP) watch(routes <-chan netlink.RouteUpdate, neighs <-chan netlink.NeighUpdate) {
	defer u.wg.Done()
	defer func() {
		// The library's readers block on full channels: drain them until
		// they close (they do once done is closed).
		if routes != nil {
			go func() {
				for range routes {
				}
			}()
		}
		if neighs != nil {
			go func() {
				for range neighs {
				}
			}()
		}
	}()
	const (
		quick    = 100 * time.Millisecond
		slowest  = 2 * time.Second
		periodic = 5 * time.Second
	)
	retry := quick
	timer := time.NewTimer(quick)
	defer timer.Stop()
	for {
		pending := u.resolveAll()
		u.rmu.Lock()
		u.pass++
		u.resolved.Broadcast()
		u.rmu.Unlock()
		wait := periodic
		if pending {
			wait = retry
			retry = min(2*retry, slowest)
		} else {
			retry = quick
		}
		timer.Reset(wait)
		select {
		case <-u.done:
			return
		case _, ok := <-routes:
			if !ok {
				routes = u.resubscribeRoutes()
			}
		case _, ok := <-neighs:
			if !ok {
				neighs = u.resubscribeNeighs()
			}
		case <-u.changed:
			retry = quick
		case <-timer.C:
		}
		// Take what else came in: one pass for all of it.
		for n := len(routes); n > 0; n-- {
			if _, ok := <-routes; !ok {
				routes = u.resubscribeRoutes()
				break
			}
		}
		for n := len(neighs); n > 0; n-- {
			if _, ok := <-neighs; !ok {
				neighs = u.resubscribeNeighs()
				break
			}
		}
	}
}

// resubscribeRoutes and resubscribeNeighs subscribe again to the
// kernel's changes after the library closed a subscription (a receive
// error: the kernel overran it); nil (the periodic pass stands in) if they
// cannot.
func (u *UDP) resubscribeRoutes() <-chan netlink.RouteUpdate {
	return resubscribe(u, func(c chan netlink.RouteUpdate) error {
		return netlink.RouteSubscribeWithOptions(c, u.done, netlink.RouteSubscribeOptions{})
	})
}

func (u *UDP) resubscribeNeighs() <-chan netlink.NeighUpdate {
	return resubscribe(u, func(c chan netlink.NeighUpdate) error {
		return netlink.NeighSubscribeWithOptions(c, u.done, netlink.NeighSubscribeOptions{})
	})
}

func resubscribe[T any](u *UDP, subscribe func(chan T) error) <-chan T {
	c := make(chan T, 64)
	if err := u.cfg.Do(func() error { return subscribe(c) }); err != nil {
		return nil
	}
	return c
}

// resolveAll looks up every peer's next hop and reports whether one is
// left unresolved. A peer whose route leaves by another device loses its
// hop (its frames are dropped, counted, rather than sent by the wrong
// way); one whose lookup failed otherwise keeps the hop known last, a
// stale neighbour being the best guess.
func (u *UDP) resolveAll() (pending bool) {
	neighs := map[int][]netlink.Neigh{} // by family, read once per pass
	for _, p := range u.peers.Load().byAddr {
		h, err := u.lookup(p.ip, neighs)
		if errors.Is(err, ErrRoute) {
			p.route.Store(&err)
			p.hop.Store(nil)
		} else {
			p.route.Store(nil)
		}
		if err != nil {
			pending = true
			continue
		}
		if old := p.hop.Load(); old == nil || !bytes.Equal(old.mac, h.mac) || old.via != h.via {
			p.hop.Store(h)
			u.resolvedN.Add(1)
		}
	}
	return pending
}

// Report is what a UDP says of itself: its form, its counters and its
// peers' next hops (xam fw stats, xam stat).
type Report struct {
	Form  string `json:"form"`  // udp:PORT or udp6:PORT
	Local string `json:"local"` // the address and port frames come from
	// MTU is what the layers above get: the device's, less IP and UDP.
	MTU   int       `json:"mtu"`
	Stats Stats     `json:"stats"`
	Peers []NextHop `json:"peers,omitempty"`
}

// NextHop is a peer and the MAC its frames go to ("" until resolved).
type NextHop struct {
	Peer string `json:"peer"`
	Via  string `json:"via,omitempty"` // the gateway, where the peer is not on the device's subnet
	MAC  string `json:"mac,omitempty"`
}

// Report returns what u says of itself.
func (u *UDP) Report() Report {
	form := "udp"
	if !u.cfg.Local.Is4() {
		form = "udp6"
	}
	r := Report{Form: fmt.Sprintf("%s:%d", form, u.cfg.Port), Local: netip.AddrPortFrom(u.cfg.Local, u.cfg.Port).String(),
		MTU: u.mtu, Stats: u.EncapStats()}
	for _, p := range u.peers.Load().byAddr {
		n := NextHop{Peer: p.ip.String()}
		if h := p.hop.Load(); h != nil {
			n.MAC = h.mac.String()
			if h.via != p.ip {
				n.Via = h.via.String()
			}
		}
		r.Peers = append(r.Peers, n)
	}
	slices.SortFunc(r.Peers, func(a, b NextHop) int { return strings.Compare(a.Peer, b.Peer) })
	return r
}
