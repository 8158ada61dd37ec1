package main

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/xam-project/xam/datapath/encap"
	"github.com/xam-project/xam/nicfw"
)

// hostFlags is xam fw's host table, from its --host flags (hostFlag) or
// a job.
type hostFlags map[nicfw.HostID]net.HardwareAddr

func (h hostFlags) String() string { return fmt.Sprint(map[nicfw.HostID]net.HardwareAddr(h)) }

// set adds the host of an ID=MAC or ID=IP flag; for an IP, the address
// it takes is the IP's in xam's UDP form (encap.Addr), and set returns
// the IP.
func (h hostFlags) set(s string) (netip.Addr, error) {
	id, addr, ok := strings.Cut(s, "=")
	if !ok {
		return netip.Addr{}, fmt.Errorf("%q: want ID=MAC (or ID=IP with --encap udp)", s)
	}
	n, err := strconv.ParseUint(id, 10, 16)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q: host id: %v", s, err)
	}
	if _, dup := h[nicfw.HostID(n)]; dup {
		return netip.Addr{}, fmt.Errorf("host %d given twice", n)
	}
	if ip, err := netip.ParseAddr(addr); err == nil {
		h[nicfw.HostID(n)] = encap.Addr(ip)
		return ip.Unmap(), nil
	}
	hw, err := net.ParseMAC(addr)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q: neither a MAC nor an IP address", s)
	}
	h[nicfw.HostID(n)] = hw
	return netip.Addr{}, nil
}

// hostFlag is --host: hostFlags that also keeps the IPs given.
type hostFlag struct{ c *fwConfig }

func (f hostFlag) String() string {
	if f.c == nil {
		return ""
	}
	return f.c.hosts.String()
}

func (f hostFlag) Set(s string) error {
	ip, err := f.c.hosts.set(s)
	if err == nil && ip.IsValid() {
		f.c.hostIPs = append(f.c.hostIPs, ip)
	}
	return err
}
