package netdev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNoNtuple: the device takes no n-tuple steering rules (its driver
// has none, as a veth's, or they are turned off).
var ErrNoNtuple = errors.New("the device takes no n-tuple steering rules")

// SteerRule is an n-tuple rule that Steer installed on a device: the
// NIC sends the frames it matches to one receive queue.
type SteerRule struct {
	Dev      string
	Location uint32 // the rule's place in the device's table
	Queue    int
	What     string // what it matches, as ethtool -n would say
}

// flowSpec is struct ethtool_rx_flow_spec (linux/ethtool.h).
type flowSpec struct {
	flowType   uint32
	hU         [52]byte // union ethtool_flow_union: the values
	hExt       [20]byte // struct ethtool_flow_ext
	mU         [52]byte // the masks
	mExt       [20]byte
	_          [4]byte
	ringCookie uint64 // the queue
	location   uint32
	_          [4]byte
}

// rxnfc is struct ethtool_rxnfc without its rule locations.
type rxnfc struct {
	cmd      uint32
	flowType uint32
	data     uint64
	fs       flowSpec
	ruleCnt  uint32
	_        [4]byte
}

// ifreqPtr is struct ifreq with a pointer in its union (ifr_data).
type ifreqPtr struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte
}

// rxClsLocAny lets the driver choose the rule's location.
const rxClsLocAny = 0xffffffff

// steerSpec returns the rule that matches xam's frames: with udpPort 0,
// Ethernet frames of etherType; otherwise UDP datagrams to udpPort over
// IPv4, or IPv6 with ipv6.
func steerSpec(etherType, udpPort uint16, ipv6 bool, queue int) (flowSpec, string) {
	fs := flowSpec{ringCookie: uint64(queue), location: rxClsLocAny}
	switch {
	case udpPort == 0:
		// struct ethhdr: h_dest, h_source, h_proto.
		fs.flowType = unix.ETHER_FLOW
		binary.BigEndian.PutUint16(fs.hU[12:], etherType)
		binary.BigEndian.PutUint16(fs.mU[12:], 0xffff)
		return fs, fmt.Sprintf("flow-type ether proto %#04x action %d", etherType, queue)
	case ipv6:
		// struct ethtool_tcpip6_spec: ip6src[4], ip6dst[4], psrc, pdst, tclass.
		fs.flowType = unix.UDP_V6_FLOW
		binary.BigEndian.PutUint16(fs.hU[34:], udpPort)
		binary.BigEndian.PutUint16(fs.mU[34:], 0xffff)
		return fs, fmt.Sprintf("flow-type udp6 dst-port %d action %d", udpPort, queue)
	}
	// struct ethtool_tcpip4_spec: ip4src, ip4dst, psrc, pdst, tos.
	fs.flowType = unix.UDP_V4_FLOW
	binary.BigEndian.PutUint16(fs.hU[10:], udpPort)
	binary.BigEndian.PutUint16(fs.mU[10:], 0xffff)
	return fs, fmt.Sprintf("flow-type udp4 dst-port %d action %d", udpPort, queue)
}

// Steer installs an n-tuple rule on dev (in the caller's network
// namespace) that sends xam's frames to queue: frames of etherType, or
// with a udpPort xam's UDP form to that port (IPv6 with ipv6), what
// `ethtool -N DEV flow-type ...` installs. It refuses with ErrNoNtuple
// where the device takes no rules. Remove deletes the rule.
func Steer(dev string, etherType, udpPort uint16, ipv6 bool, queue int) (*SteerRule, error) {
	if queue < 0 {
		return nil, fmt.Errorf("netdev: steering to queue %d", queue)
	}
	fs, what := steerSpec(etherType, udpPort, ipv6, queue)
	req := rxnfc{cmd: unix.ETHTOOL_SRXCLSRLINS, fs: fs}
	if err := ethtool(dev, unsafe.Pointer(&req)); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return nil, fmt.Errorf("netdev: %s: %w (ethtool -k %s | grep ntuple: the driver's n-tuple filters, and `ethtool -K %s ntuple on` where it has them)", dev, ErrNoNtuple, dev, dev)
		}
		return nil, fmt.Errorf("netdev: installing the rule %q on %s: %w", what, dev, err)
	}
	return &SteerRule{Dev: dev, Location: req.fs.location, Queue: queue, What: what}, nil
}

// Remove deletes the rule from its device (in the caller's network
// namespace, the one it was installed in).
func (r *SteerRule) Remove() error {
	req := rxnfc{cmd: unix.ETHTOOL_SRXCLSRLDEL, fs: flowSpec{location: r.Location}}
	if err := ethtool(r.Dev, unsafe.Pointer(&req)); err != nil {
		return fmt.Errorf("netdev: removing rule %d (%s) from %s: %w", r.Location, r.What, r.Dev, err)
	}
	return nil
}

// ethtool makes the SIOCETHTOOL request whose data is at p on dev.
func ethtool(dev string, p unsafe.Pointer) error {
	if len(dev) >= unix.IFNAMSIZ {
		return fmt.Errorf("device name %q too long", dev)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var ifr ifreqPtr
	copy(ifr.name[:], dev)
	ifr.data = p
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	if errno != 0 {
		return errno
	}
	return nil
}
