package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Prefix starts the name of every namespace of every lab.
const Prefix = "xam-"

// upTimeout bounds the wait for links to report carrier.
const upTimeout = 5 * time.Second

// Config describes a lab to build.
type Config struct {
	Name       string // letters, digits and '_', at most 24; default "lab"
	Hosts      int    // at least 2; default 2
	Switch     bool   // join the hosts through a bridge namespace (always with more than 2 hosts, unless Routed)
	PortRate   uint64 // bits per second of a tbf on each switch port toward a host; 0: none
	PortBuffer uint32 // bytes the tbf queues (its limit); 0 with a rate: 64 KiB
	MTU        int    // 0: the kernel's default (1500)
	Queues     int    // TX/RX queues per veth end; 0: 1
	IPv6       bool   // leave IPv6 on (off by default, so links carry only what tests send)
	// Routed puts each host on a subnet of its own, joined by a router
	// namespace that forwards between them (the kernel's IPv4 and IPv6
	// forwarding): host i is 10.0.(i+1).1/24 and fd00:0:0:(i+1)::1/64,
	// the router's port toward it .254 and ::fe, and every host's default
	// routes go through the router. Not with Switch.
	Routed bool
	// Persistent marks a lab built to outlive its process (`xam lab up`).
	// Otherwise the lab is the building process's: it holds an owner
	// lock on it while it lives, so that once the process is gone without
	// removing it the lab shows as Stale and DownStale removes it.
	Persistent bool
}

var (
	validNode = regexp.MustCompile(`^(sw|rt|h[0-9]+)$`)
)

func (c *Config) fill() error {
	if c.Name == "" {
		c.Name = "lab"
	}
	if err := CheckName(c.Name); err != nil {
		return err
	}
	if c.Hosts == 0 {
		c.Hosts = 2
	}
	if c.Hosts < 2 || c.Hosts > 250 {
		return fmt.Errorf("%d hosts: a lab has 2 to 250", c.Hosts)
	}
	if c.Routed && c.Switch {
		return errors.New("a lab is routed or switched, not both")
	}
	if c.Hosts > 2 && !c.Routed {
		c.Switch = true
	}
	if c.PortRate != 0 && !c.Switch {
		return errors.New("a port rate needs a switch (--switch)")
	}
	if c.PortRate != 0 && c.PortBuffer == 0 {
		c.PortBuffer = 64 << 10
	}
	if c.MTU != 0 && (c.MTU < 68 || c.MTU > 65535) {
		return fmt.Errorf("MTU %d out of range [68, 65535]", c.MTU)
	}
	if c.Queues == 0 {
		c.Queues = 1
	}
	if c.Queues < 1 || c.Queues > 64 {
		return fmt.Errorf("%d queues out of range [1, 64]", c.Queues)
	}
	return nil
}

// Lab is a built lab. Its namespaces stay until Down; Close only releases
// this process's handles on them.
type Lab struct {
	Name   string   `json:"name"`
	Hosts  []*Host  `json:"hosts"`
	Switch *Switch  `json:"switch,omitempty"`
	Router *Router  `json:"router,omitempty"`
	owner  *os.File // the owner lock, nil for a persistent lab
}

// Host is one host namespace and its interface toward the network.
type Host struct {
	Name       string           `json:"name"` // h0, h1, ...
	NS         string           `json:"netns"`
	Link       string           `json:"interface"`
	Index      int              `json:"ifindex"`
	MAC        net.HardwareAddr `json:"-"`
	Addr       netip.Prefix     `json:"ipv4"`
	Addr6      netip.Prefix     `json:"ipv6,omitzero"` // routed labs only
	MTU        int              `json:"mtu"`
	Queues     int              `json:"queues"`
	*Namespace `json:"-"`
}

// MarshalJSON writes the MAC as text.
func (h *Host) MarshalJSON() ([]byte, error) {
	type plain Host
	return json.Marshal(struct {
		*plain
		MAC string `json:"mac"`
	}{(*plain)(h), h.MAC.String()})
}

// Switch is the bridge namespace of a star lab.
type Switch struct {
	NS         string   `json:"netns"`
	Bridge     string   `json:"bridge"`
	Ports      []string `json:"ports"` // Ports[i] faces Hosts[i]
	PortRate   uint64   `json:"port_rate_bps,omitempty"`
	PortBuffer uint32   `json:"port_buffer_bytes,omitempty"`
	*Namespace `json:"-"`
}

// Router is the router namespace of a routed lab (Config.Routed).
type Router struct {
	NS         string         `json:"netns"`
	Ports      []string       `json:"ports"` // Ports[i] faces Hosts[i]
	Addrs      []netip.Prefix `json:"ipv4"`  // Addrs[i] is Ports[i]'s, the gateway of Hosts[i]
	Addrs6     []netip.Prefix `json:"ipv6"`
	*Namespace `json:"-"`
}

func nsName(lab, node string) string { return Prefix + lab + "-" + node }

// Up builds the lab described by cfg. It refuses to build over an existing
// lab of the same name; on failure it removes whatever it built.
func Up(cfg Config) (*Lab, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if names, err := Namespaces(Prefix + cfg.Name + "-"); err != nil {
		return nil, err
	} else if len(names) > 0 {
		return nil, fmt.Errorf("lab %q exists (%s); remove it with `xam lab down --name %s`",
			cfg.Name, strings.Join(names, ", "), cfg.Name)
	}
	l := &Lab{Name: cfg.Name}
	if !cfg.Persistent {
		// Owned before it is built, so that a crash while building
		// leaves a lab that shows as stale.
		var err error
		if l.owner, err = own(cfg.Name); err != nil {
			return nil, err
		}
	}
	if err := l.build(cfg); err != nil {
		l.Close()
		if derr := Down(cfg.Name); derr != nil {
			err = errors.Join(err, fmt.Errorf("removing the partial lab: %w", derr))
		}
		return nil, fmt.Errorf("lab %s: %w", cfg.Name, err)
	}
	return l, nil
}

func (l *Lab) build(cfg Config) error {
	for i := range cfg.Hosts {
		name := fmt.Sprintf("h%d", i)
		ns, err := NewNamespace(nsName(l.Name, name))
		if err != nil {
			return err
		}
		h := &Host{Name: name, NS: ns.Name, Link: "eth0", Namespace: ns,
			Addr: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 24)}
		if cfg.Routed {
			h.Addr = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i + 1), 1}), 24)
			h.Addr6 = netip.PrefixFrom(subnet6(i, 1), 64)
		}
		l.Hosts = append(l.Hosts, h)
	}
	attrs := func(name string) netlink.LinkAttrs {
		a := netlink.NewLinkAttrs()
		a.Name, a.MTU = name, cfg.MTU
		a.NumTxQueues, a.NumRxQueues = cfg.Queues, cfg.Queues
		return a
	}
	if cfg.Switch {
		ns, err := NewNamespace(nsName(l.Name, "sw"))
		if err != nil {
			return err
		}
		sw := &Switch{NS: ns.Name, Bridge: "br0", Namespace: ns, PortRate: cfg.PortRate, PortBuffer: cfg.PortBuffer}
		l.Switch = sw
		br := &netlink.Bridge{LinkAttrs: attrs("br0")}
		br.NumTxQueues, br.NumRxQueues = 0, 0
		if err := ns.Netlink.LinkAdd(br); err != nil {
			return fmt.Errorf("adding bridge in %s: %w", ns.Name, err)
		}
		if err := ns.Netlink.LinkSetUp(br); err != nil {
			return fmt.Errorf("bringing the bridge up: %w", err)
		}
		if lo, err := ns.Netlink.LinkByName("lo"); err == nil {
			ns.Netlink.LinkSetUp(lo)
		}
		if err := ns.Do(func() error { return DisableIPv6("br0") }); err != nil {
			return err
		}
		for i, h := range l.Hosts {
			port := fmt.Sprintf("p%d", i)
			veth := &netlink.Veth{LinkAttrs: attrs(port), PeerName: h.Link, PeerNamespace: netlink.NsFd(h.Handle)}
			veth.MasterIndex = br.Attrs().Index
			if err := ns.Netlink.LinkAdd(veth); err != nil {
				return fmt.Errorf("adding veth %s (switch) to %s/%s: %w", port, h.NS, h.Link, err)
			}
			sw.Ports = append(sw.Ports, port)
		}
	} else if cfg.Routed {
		if err := l.buildRouter(attrs); err != nil {
			return err
		}
	} else {
		a, b := l.Hosts[0], l.Hosts[1]
		veth := &netlink.Veth{LinkAttrs: attrs(a.Link), PeerName: b.Link, PeerNamespace: netlink.NsFd(b.Handle)}
		if err := a.Netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("adding veth %s/%s to %s/%s: %w", a.NS, a.Link, b.NS, b.Link, err)
		}
	}
	for _, h := range l.Hosts {
		if err := h.configure(cfg.IPv6 || cfg.Routed); err != nil {
			return err
		}
	}
	if sw := l.Switch; sw != nil {
		if err := sw.configure(l.Hosts, cfg); err != nil {
			return err
		}
	}
	if rt := l.Router; rt != nil {
		if err := rt.configure(l.Hosts); err != nil {
			return err
		}
	}
	for _, h := range l.Hosts {
		if err := WaitUp(h.Netlink, h.Index, upTimeout); err != nil {
			return fmt.Errorf("%s: %w", h.NS, err)
		}
	}
	return nil
}

// configure brings the host's interface up with its address and records
// its attributes.
func (h *Host) configure(ipv6 bool) error {
	info, err := h.ConfigureLink(h.Link, h.Addr, ipv6)
	h.Index, h.MTU, h.Queues, h.MAC = info.Index, info.MTU, info.Queues, info.MAC
	if err == nil && h.Addr6.IsValid() {
		err = h.addAddr6(h.Index, h.Addr6)
	}
	return err
}

// subnet6 returns address host of routed host i's IPv6 subnet,
// fd00:0:0:(i+1)::/64.
func subnet6(i int, host byte) netip.Addr {
	a := [16]byte{0: 0xfd, 6: byte((i + 1) >> 8), 7: byte(i + 1), 15: host}
	return netip.AddrFrom16(a)
}

// addAddr6 adds an IPv6 address to a link without duplicate address
// detection, so that it is usable at once.
func (n *Namespace) addAddr6(index int, p netip.Prefix) error {
	link, err := n.Netlink.LinkByIndex(index)
	if err != nil {
		return err
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 128)}, Flags: unix.IFA_F_NODAD}
	if err := n.Netlink.AddrAdd(link, a); err != nil {
		return fmt.Errorf("adding %v to %s: %w", p, link.Attrs().Name, err)
	}
	return nil
}

// buildRouter makes the router namespace and a veth from each of its
// ports to a host.
func (l *Lab) buildRouter(attrs func(string) netlink.LinkAttrs) error {
	ns, err := NewNamespace(nsName(l.Name, "rt"))
	if err != nil {
		return err
	}
	rt := &Router{NS: ns.Name, Namespace: ns}
	l.Router = rt
	for i, h := range l.Hosts {
		port := fmt.Sprintf("r%d", i)
		veth := &netlink.Veth{LinkAttrs: attrs(port), PeerName: h.Link, PeerNamespace: netlink.NsFd(h.Handle)}
		if err := ns.Netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("adding veth %s (router) to %s/%s: %w", port, h.NS, h.Link, err)
		}
		rt.Ports = append(rt.Ports, port)
		rt.Addrs = append(rt.Addrs, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i + 1), 254}), 24))
		rt.Addrs6 = append(rt.Addrs6, netip.PrefixFrom(subnet6(i, 0xfe), 64))
	}
	return nil
}

// configure addresses the router's ports, turns forwarding on and gives
// every host its default routes through the router.
func (rt *Router) configure(hosts []*Host) error {
	err := rt.Do(func() error {
		for _, f := range []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"} {
			if err := os.WriteFile(f, []byte("1\n"), 0); err != nil {
				return fmt.Errorf("turning forwarding on in %s: %w", rt.NS, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, name := range rt.Ports {
		info, err := rt.ConfigureLink(name, rt.Addrs[i], true)
		if err != nil {
			return err
		}
		if err := rt.addAddr6(info.Index, rt.Addrs6[i]); err != nil {
			return err
		}
		if err := WaitUp(rt.Netlink, info.Index, upTimeout); err != nil {
			return fmt.Errorf("%s: %w", rt.NS, err)
		}
		h := hosts[i]
		for _, gw := range []netip.Addr{rt.Addrs[i].Addr(), rt.Addrs6[i].Addr()} {
			r := &netlink.Route{LinkIndex: h.Index, Gw: gw.AsSlice()}
			if err := h.Netlink.RouteAdd(r); err != nil {
				return fmt.Errorf("default route via %v in %s: %w", gw, h.NS, err)
			}
		}
	}
	return nil
}

// configure brings the ports up, installs a static FDB entry for each
// host's MAC on its port (so unknown unicast never floods to the other
// hosts), and the tbf shapers.
func (sw *Switch) configure(hosts []*Host, cfg Config) error {
	for i, name := range sw.Ports {
		port, err := sw.Netlink.LinkByName(name)
		if err != nil {
			return fmt.Errorf("finding port %s: %w", name, err)
		}
		if err := sw.Do(func() error { return DisableIPv6(name) }); err != nil {
			return err
		}
		if err := sw.Netlink.LinkSetUp(port); err != nil {
			return fmt.Errorf("bringing port %s up: %w", name, err)
		}
		fdb := &netlink.Neigh{
			LinkIndex:    port.Attrs().Index,
			Family:       unix.AF_BRIDGE,
			State:        netlink.NUD_NOARP,
			Flags:        netlink.NTF_MASTER,
			HardwareAddr: hosts[i].MAC,
		}
		if err := sw.Netlink.NeighSet(fdb); err != nil {
			return fmt.Errorf("static FDB entry for %v on %s: %w", hosts[i].MAC, name, err)
		}
		if cfg.PortRate != 0 {
			if err := sw.shape(port, cfg); err != nil {
				return err
			}
		}
		if err := WaitUp(sw.Netlink, port.Attrs().Index, upTimeout); err != nil {
			return fmt.Errorf("%s: %w", sw.NS, err)
		}
	}
	return nil
}

// shape installs `tbf rate R burst B limit L` as the port's root qdisc: the
// port's queue toward its host is the switch's output buffer.
func (sw *Switch) shape(port netlink.Link, cfg Config) error {
	// A bucket of a few frames: frames leave at the port's rate, as from
	// a switch's output port (the bucket only absorbs the lateness of the
	// qdisc's timer), and a larger packet (a GSO packet of the kernel's
	// TCP, up to 64 KB on veth) is cut into frames before it queues, as it
	// would be on a wire, rather than taken or dropped whole.
	burst := 4 * uint32(port.Attrs().MTU+14)
	q := &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: port.Attrs().Index,
			Handle:    netlink.MakeHandle(1, 0),
			Parent:    netlink.HANDLE_ROOT,
		},
		Rate:   cfg.PortRate / 8,
		Limit:  cfg.PortBuffer,
		Buffer: burst,
	}
	if err := sw.Netlink.QdiscReplace(q); err != nil {
		return fmt.Errorf("tbf on %s: %w", port.Attrs().Name, err)
	}
	return nil
}

// PortDrops returns the frames the switch has dropped so far on its port
// toward host i (Ports[i]): its tbf's drop counter, 0 on an unshaped port.
func (sw *Switch) PortDrops(i int) (uint64, error) {
	if i < 0 || i >= len(sw.Ports) {
		return 0, fmt.Errorf("lab: no switch port %d", i)
	}
	port, err := sw.Netlink.LinkByName(sw.Ports[i])
	if err != nil {
		return 0, err
	}
	qs, err := sw.Netlink.QdiscList(port)
	if err != nil {
		return 0, err
	}
	for _, q := range qs {
		if t, ok := q.(*netlink.Tbf); ok && t.Statistics != nil && t.Statistics.Queue != nil {
			return uint64(t.Statistics.Queue.Drops), nil
		}
	}
	return 0, nil
}

// Close releases this process's handles on the lab's namespaces; the lab
// stays.
func (l *Lab) Close() error {
	var errs []error
	for _, h := range l.Hosts {
		if h.Namespace != nil {
			errs = append(errs, h.Namespace.Close())
		}
	}
	if l.Switch != nil && l.Switch.Namespace != nil {
		errs = append(errs, l.Switch.Namespace.Close())
	}
	if l.Router != nil && l.Router.Namespace != nil {
		errs = append(errs, l.Router.Namespace.Close())
	}
	return errors.Join(errs...)
}

// Down closes the lab's handles and removes it, and lets go of its owner
// lock.
func (l *Lab) Down() error {
	err := errors.Join(l.Close(), Down(l.Name))
	if l.owner != nil {
		l.owner.Close()
		l.owner = nil
	}
	return err
}

// Down stops the daemons of the lab named name (StopDaemons), then removes
// every namespace of the lab, and their links. A lab that does not exist
// is not an error.
func Down(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	_, err := StopDaemons(name, DaemonGrace)
	errs := []error{err}
	names, err := Namespaces(Prefix + name + "-")
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, ns := range names {
		if lab, _, ok := splitName(ns); ok && lab == name {
			errs = append(errs, DeleteNamespace(ns))
		}
	}
	if err := os.Remove(ownerPath(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DownAll removes every lab, including the leftovers of crashed runs, and
// returns the names of the labs it removed.
func DownAll() ([]string, error) {
	return downMatching(func(string) bool { return true })
}

// downMatching removes the labs whose names match.
func downMatching(match func(lab string) bool) ([]string, error) {
	labs, err := List()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, name := range labs {
		if match(name) {
			removed = append(removed, name)
			errs = append(errs, Down(name))
		}
	}
	return removed, errors.Join(errs...)
}

// List returns the names of the labs that exist.
func List() ([]string, error) {
	names, err := Namespaces(Prefix)
	if err != nil {
		return nil, err
	}
	var labs []string
	for _, ns := range names {
		lab, _, ok := splitName(ns)
		if ok && (len(labs) == 0 || labs[len(labs)-1] != lab) {
			labs = append(labs, lab)
		}
	}
	return labs, nil
}

// splitName splits "xam-LAB-NODE" into LAB and NODE (h<i> or sw).
func splitName(ns string) (lab, node string, ok bool) {
	rest, ok := strings.CutPrefix(ns, Prefix)
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return "", "", false
	}
	lab, node = rest[:i], rest[i+1:]
	if !validName.MatchString(lab) || !validNode.MatchString(node) {
		return "", "", false
	}
	return lab, node, true
}
