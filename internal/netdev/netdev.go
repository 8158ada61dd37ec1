// Package netdev reads what a network device can do for XDP and AF_XDP:
// the netdev generic-netlink family's XDP and XSK feature bits (kernel
// 6.3+), the driver's name and the number of queues, and the settings that
// busy polling depends on. It recommends the XDP attach mode and the XSK
// bind mode xam should use, with the reason.
package netdev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// XDP feature bits (NETDEV_XDP_ACT_*, include/uapi/linux/netdev.h).
const (
	XDPBasic       = 1 << 0 // XDP_PASS, XDP_DROP, XDP_ABORTED, XDP_TX
	XDPRedirect    = 1 << 1 // XDP_REDIRECT (what AF_XDP needs)
	XDPNdoXmit     = 1 << 2 // can be the target of a redirect
	XDPXSKZeroCopy = 1 << 3 // AF_XDP zero-copy
	XDPHWOffload   = 1 << 4
	XDPRxSG        = 1 << 5
	XDPNdoXmitSG   = 1 << 6
)

var xdpFeatureNames = []string{"basic", "redirect", "ndo-xmit", "xsk-zerocopy", "hw-offload", "rx-sg", "ndo-xmit-sg"}

// The XDP receive metadata a driver gives programs through kfuncs
// (NETDEV_XDP_RX_METADATA_*, Linux 6.3 and later), and the AF_XDP
// transmit metadata it takes (NETDEV_XSK_FLAGS_*, 6.8 and later).
var (
	rxMetadataNames = []string{"timestamp", "hash", "vlan-tag"}
	xskFeatureNames = []string{"tx-timestamp", "tx-checksum", "tx-launch-time-fifo"}
)

// XDPFeatureNames returns the names of the bits set in f.
func XDPFeatureNames(f uint64) []string { return bitNames(f, xdpFeatureNames) }

// bitNames returns the names of the bits set in f.
func bitNames(f uint64, names []string) []string {
	list := []string{}
	for i, n := range names {
		if f&(1<<i) != 0 {
			list = append(list, n)
		}
	}
	return list
}

// Device describes one network device.
type Device struct {
	Name          string   `json:"name"`
	Index         int      `json:"ifindex"`
	Driver        string   `json:"driver"`
	RxQueues      int      `json:"rx_queues"`
	TxQueues      int      `json:"tx_queues"`
	MTU           int      `json:"mtu"`
	Loopback      bool     `json:"loopback,omitempty"`
	XDPFeatures   []string `json:"xdp_features"`
	XDPFeatureSet uint64   `json:"-"`
	ZCMaxSegs     uint32   `json:"xdp_zc_max_segs"`
	// RxMetadata is the receive metadata the driver gives XDP programs
	// (timestamp, hash, vlan-tag; kfuncs, device-bound programs);
	// XSKFeatures the AF_XDP transmit metadata it takes (tx-timestamp,
	// tx-checksum, tx-launch-time-fifo).
	RxMetadata    []string `json:"xdp_rx_metadata"`
	XSKFeatures   []string `json:"xsk_features"`
	FeaturesKnown bool     `json:"features_known"` // the kernel answered the netdev family query
	// Busy polling (per device and system-wide).
	NapiDeferHardIRQs string `json:"napi_defer_hard_irqs,omitempty"`
	GROFlushTimeout   string `json:"gro_flush_timeout,omitempty"`
	// What xam will use, and why.
	XDPMode    string `json:"xdp_mode"`
	XDPWhy     string `json:"xdp_mode_why"`
	XSKMode    string `json:"xsk_mode"`
	XSKWhy     string `json:"xsk_mode_why"`
	Usable     bool   `json:"usable"`
	UnusableBy string `json:"unusable_because,omitempty"`
	// Multi-buffer frames (AF_XDP XDP_USE_SG and a frags-aware XDP
	// program): whether xam's frames may span several UMEM chunks here,
	// so that the device's MTU may exceed one chunk's, and why not.
	MultiBuffer    bool   `json:"multi_buffer"`
	MultiBufferWhy string `json:"multi_buffer_why"`
	// MaxMTU is the largest MTU whose frames xam carries on the device:
	// one chunk's without multi-buffer (filled in by the caller, who
	// knows the socket's chunk size; 0 if not).
	MaxMTU int `json:"max_mtu,omitempty"`
}

// MultiBufferKernel is the first kernel release with AF_XDP multi-buffer
// (XDP_USE_SG) in copy mode.
var MultiBufferKernel = [2]int{6, 6}

// KernelAtLeast reports whether kernel release (uname -r: "6.1.0-18-amd64")
// is major.minor or later; a release it cannot read is not.
func KernelAtLeast(release string, major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(release, "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// recommendMultiBuffer fills the multi-buffer fields for a kernel of
// release, the modes already chosen (recommend).
func (d *Device) recommendMultiBuffer(release string) {
	mb := MultiBufferKernel
	switch {
	case !KernelAtLeast(release, mb[0], mb[1]):
		d.MultiBuffer, d.MultiBufferWhy = false, fmt.Sprintf("kernel %q predates AF_XDP multi-buffer (XDP_USE_SG, %d.%d): a frame fits one UMEM chunk, keep the MTU at or below max_mtu", release, mb[0], mb[1])
	case d.XDPMode == "native" && d.FeaturesKnown && d.XDPFeatureSet&XDPRxSG == 0:
		d.MultiBuffer, d.MultiBufferWhy = false, "the driver's native XDP has no multi-buffer (rx-sg): a frame fits one UMEM chunk; generic XDP (--xdp-mode generic) carries larger frames, slower"
	case d.XSKMode == "zero-copy" && d.ZCMaxSegs <= 1:
		d.MultiBuffer, d.MultiBufferWhy = true, "in copy mode: the driver's zero-copy takes one buffer a frame (xdp_zc_max_segs), so a socket bound for multi-buffer frames runs in copy mode"
	default:
		d.MultiBuffer, d.MultiBufferWhy = true, "frags-aware XDP program and sockets bound with XDP_USE_SG: a frame spans up to 17 UMEM chunks"
	}
}

// recommend fills the mode fields from what is known of the device.
func (d *Device) recommend() {
	d.Usable = true
	switch {
	case d.Driver == "veth":
		d.XDPMode, d.XDPWhy = "generic", "veth: generic XDP measured faster than native (no ptr_ring hop) and has no peer-MTU limit"
	case d.Loopback:
		d.XDPMode, d.XDPWhy = "generic", "the loopback device has no native XDP"
	case d.FeaturesKnown && d.XDPFeatureSet&(XDPBasic|XDPRedirect) == XDPBasic|XDPRedirect:
		d.XDPMode, d.XDPWhy = "native", "the driver implements XDP with redirect"
	case d.FeaturesKnown:
		d.XDPMode, d.XDPWhy = "generic", "the driver has no native XDP redirect; generic XDP works on any device, slower"
	default:
		d.XDPMode, d.XDPWhy = "generic", "the kernel does not report XDP features (netdev family missing); generic is the safe choice"
	}
	switch {
	case d.FeaturesKnown && d.XDPFeatureSet&XDPXSKZeroCopy != 0:
		d.XSKMode, d.XSKWhy = "zero-copy", "the driver supports AF_XDP zero-copy (xam falls back to copy, and says so, if binding fails)"
	default:
		d.XSKMode, d.XSKWhy = "copy", "the driver has no AF_XDP zero-copy"
	}
	if d.RxQueues == 0 {
		d.Usable, d.UnusableBy = false, "the device reports no receive queues"
	}
}

// readSysfs reads a device attribute from /sys/class/net, trimmed; "" if
// absent.
func readSysfs(dev, attr string) string {
	b, err := os.ReadFile(filepath.Join("/sys/class/net", dev, attr))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// driverName reads the driver from sysfs (the device/driver link); virtual
// devices without one fall back to the ethtool answer if any.
func driverName(dev string) string {
	target, err := os.Readlink(filepath.Join("/sys/class/net", dev, "device", "driver"))
	if err == nil {
		return filepath.Base(target)
	}
	return ""
}

var errNoFamily = errors.New("netdev generic netlink family not available")

// parseDevAttrs reads the attributes of a NETDEV_CMD_DEV_GET answer.
func parseDevAttrs(d *Device, attrs map[uint16][]byte) {
	if v, ok := attrs[3]; ok && len(v) >= 8 { // NETDEV_A_DEV_XDP_FEATURES
		d.XDPFeatureSet = binary.NativeEndian.Uint64(v)
	}
	if v, ok := attrs[4]; ok && len(v) >= 4 { // NETDEV_A_DEV_XDP_ZC_MAX_SEGS
		d.ZCMaxSegs = binary.NativeEndian.Uint32(v)
	}
	var meta, xsk uint64
	if v, ok := attrs[5]; ok && len(v) >= 8 { // NETDEV_A_DEV_XDP_RX_METADATA_FEATURES
		meta = binary.NativeEndian.Uint64(v)
	}
	if v, ok := attrs[6]; ok && len(v) >= 8 { // NETDEV_A_DEV_XSK_FEATURES
		xsk = binary.NativeEndian.Uint64(v)
	}
	d.RxMetadata, d.XSKFeatures = bitNames(meta, rxMetadataNames), bitNames(xsk, xskFeatureNames)
	d.XDPFeatures = XDPFeatureNames(d.XDPFeatureSet)
	d.FeaturesKnown = true
}

func (d *Device) String() string {
	return fmt.Sprintf("%s (ifindex %d, driver %s)", d.Name, d.Index, d.Driver)
}

// MissingBPF returns what caps lacks to load xam's XDP program: CAP_BPF
// and CAP_PERFMON (the verifier allows the program's pointer arithmetic
// only with CAP_PERFMON), unless CAP_SYS_ADMIN stands in for both (as on
// kernels before 5.8, which have neither).
func MissingBPF(caps map[string]bool) []string {
	if caps["CAP_SYS_ADMIN"] {
		return nil
	}
	var missing []string
	for _, c := range []string{"CAP_BPF", "CAP_PERFMON"} {
		if !caps[c] {
			missing = append(missing, c)
		}
	}
	return missing
}

// Preferred busy polling (SO_PREFER_BUSY_POLL) keeps a device's
// interrupts off while an application polls its queue, which it can do
// only if the device defers them: napi_defer_hard_irqs above 0, and
// gro_flush_timeout, the time after which they come back if nobody polls.
// The kernel's documentation (busy_poll.rst) suggests 2 and 200 µs.
const (
	TunedDeferHardIRQs   = 2
	TunedGROFlushTimeout = 200 * time.Microsecond
)

// NAPITuned reports whether d's settings let preferred busy polling keep
// its interrupts off, and if not, the advice.
func (d *Device) NAPITuned() (bool, string) {
	if d.NapiDeferHardIRQs == "" {
		return true, "" // not known here
	}
	if d.NapiDeferHardIRQs != "0" && d.GROFlushTimeout != "0" {
		return true, ""
	}
	return false, fmt.Sprintf("%s: napi_defer_hard_irqs %s, gro_flush_timeout %s: preferred busy polling cannot keep the device's interrupts off; `xam fw --tune-napi` sets %d and %d ns for its run and restores them on exit",
		d.Name, d.NapiDeferHardIRQs, d.GROFlushTimeout, TunedDeferHardIRQs, TunedGROFlushTimeout.Nanoseconds())
}
