package netdev

import (
	"fmt"
	"net"
	"strconv"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// netdev generic netlink (Documentation/netlink/specs/netdev.yaml).
const (
	netdevFamily    = "netdev"
	netdevCmdDevGet = 1
	netdevAttrIfidx = 1
	netdevGenlVer   = 1
)

// Describe reads what is known of the device named dev in the calling
// thread's network namespace.
func Describe(dev string) (*Device, error) {
	link, err := netlink.LinkByName(dev)
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", dev, err)
	}
	a := link.Attrs()
	d := &Device{Name: a.Name, Index: a.Index, RxQueues: a.NumRxQueues, TxQueues: a.NumTxQueues, MTU: a.MTU,
		Loopback: a.Flags&net.FlagLoopback != 0}
	// sysfs shows the namespace that mounted it, not the calling thread's:
	// trust it only when the interface there is this one.
	sysfsOK := readSysfs(dev, "ifindex") == strconv.Itoa(a.Index)
	d.Driver = ethtoolDriver(dev, "")
	if d.Driver == "" && sysfsOK {
		d.Driver = driverName(dev)
	}
	if d.Driver == "" {
		d.Driver = link.Type()
	}
	if err := queryFeatures(d); err != nil && err != errNoFamily {
		return nil, fmt.Errorf("device %s: XDP features: %w", dev, err)
	}
	if sysfsOK {
		d.NapiDeferHardIRQs = readSysfs(dev, "napi_defer_hard_irqs")
		d.GROFlushTimeout = readSysfs(dev, "gro_flush_timeout")
	}
	d.recommend()
	k, _ := Kernel()
	d.recommendMultiBuffer(k.Release)
	return d, nil
}

// ethtoolDriver asks the driver its name with ETHTOOL_GDRVINFO (through a
// socket of the calling thread's namespace), or returns fallback.
func ethtoolDriver(dev, linkType string) string {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		defer unix.Close(fd)
		if info, err := unix.IoctlGetEthtoolDrvinfo(fd, dev); err == nil {
			if s := unix.ByteSliceToString(info.Driver[:]); s != "" {
				return s
			}
		}
	}
	return linkType
}

// genlHeader is a generic netlink header (struct genlmsghdr: command,
// version, two reserved zero bytes). nl.Genlmsg serializes four bytes from
// a two-byte struct, sending whatever follows it in memory as the reserved
// field, which the kernel may refuse with EINVAL.
type genlHeader [nl.SizeofGenlmsg]byte

func (h genlHeader) Len() int          { return len(h) }
func (h genlHeader) Serialize() []byte { return h[:] }

// queryFeatures asks the netdev family for the device's XDP features.
func queryFeatures(d *Device) error {
	fam, err := netlink.GenlFamilyGet(netdevFamily)
	if err != nil {
		return errNoFamily
	}
	req := nl.NewNetlinkRequest(int(fam.ID), unix.NLM_F_REQUEST)
	req.AddData(genlHeader{netdevCmdDevGet, netdevGenlVer})
	req.AddData(nl.NewRtAttr(netdevAttrIfidx, nl.Uint32Attr(uint32(d.Index))))
	msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
	if err != nil {
		return err
	}
	if len(msgs) == 0 || len(msgs[0]) < nl.SizeofGenlmsg {
		return fmt.Errorf("empty answer")
	}
	raw, err := nl.ParseRouteAttr(msgs[0][nl.SizeofGenlmsg:])
	if err != nil {
		return err
	}
	attrs := make(map[uint16][]byte, len(raw))
	for _, a := range raw {
		attrs[a.Attr.Type&nl.NLA_TYPE_MASK] = a.Value
	}
	parseDevAttrs(d, attrs)
	return nil
}
