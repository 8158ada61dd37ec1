package netnstest

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Prefix begins the name of every namespace this package creates.
const Prefix = "xamt-"

// Pair is two hosts joined by a veth pair. Its fields are set by NewVethPair
// and stay valid until the test's cleanup.
type Pair struct {
	A, B *Host
}

// Host is one end of a Pair: a network namespace and the veth end in it.
type Host struct {
	NS      string           // namespace name, mounted at /run/netns/NS
	Handle  netns.NsHandle   // open handle of the namespace
	Netlink *netlink.Handle  // route-netlink socket inside the namespace; safe for concurrent use
	Link    string           // name of the veth end in the namespace
	Index   int              // interface index of the veth end
	MAC     net.HardwareAddr // MAC address of the veth end
	MTU     int              // MTU of the veth end
	Queues  int              // number of TX (and RX) queues of the veth end
	Addr    netip.Prefix     // IPv4 address and prefix; invalid when IPv4 is off
}

// String returns the host's namespace and link names, for logs.
func (h *Host) String() string { return h.NS + "/" + h.Link }

// Option changes how NewVethPair builds a pair.
type Option func(*config)

type config struct {
	mtu    int  // 0: the kernel's default (1500)
	queues int  // 0: the kernel's default (for veth, one per possible CPU)
	ipv4   bool // assign 10.x.y.1/24 and .2/24
	ipv6   bool // leave IPv6 enabled on the veth ends
}

func defaultConfig() config { return config{ipv4: true} }

func (c config) validate() error {
	if c.mtu != 0 && (c.mtu < 68 || c.mtu > 65535) {
		return fmt.Errorf("MTU %d out of range [68, 65535]", c.mtu)
	}
	if c.queues != 0 && (c.queues < 1 || c.queues > 4096) {
		return fmt.Errorf("%d queues out of range [1, 4096]", c.queues)
	}
	return nil
}

// WithMTU sets the MTU of both veth ends.
func WithMTU(mtu int) Option { return func(c *config) { c.mtu = mtu } }

// WithQueues gives both veth ends n TX and n RX queues (the kernel's default
// for veth is one of each per possible CPU).
func WithQueues(n int) Option { return func(c *config) { c.queues = n } }

// WithIPv4 turns the IPv4 addresses on (the default) or off.
func WithIPv4(on bool) Option { return func(c *config) { c.ipv4 = on } }

// WithIPv6 leaves IPv6 enabled on the veth ends (off by default), with the
// link-local addresses and the traffic that comes with them.
func WithIPv6(on bool) Option { return func(c *config) { c.ipv6 = on } }

// newPair fills in the names and addresses of pair number n of process pid.
func newPair(pid int, token string, n uint64, cfg config) *Pair {
	p := &Pair{A: &Host{}, B: &Host{}}
	for i, h := range []*Host{p.A, p.B} {
		side := "ab"[i]
		h.NS = fmt.Sprintf("%s%d-%s-%d-%c", Prefix, pid, token, n, side)
		h.Link = fmt.Sprintf("x%d-%x%c", pid, n&0xfffff, side) // at most 1+7+1+5+1 = 15 bytes
		h.Handle = netns.None()
		if cfg.ipv4 {
			h.Addr = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(n >> 8), byte(n), byte(1 + i)}), 24)
		}
	}
	return p
}
