package loader

//go:generate bash gen.sh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
)

// Wire and program limits.
const (
	// DefaultEtherType is xam's EtherType (IEEE 802 local experimental
	// EtherType 1), used when Config.EtherType is 0.
	DefaultEtherType = 0x88B5

	// MaxScanCells is the most cells per frame the program looks at for
	// the HEC check and admission (xdp.c's MAX_SCAN_CELLS): 169 cells fill
	// a 9000-byte MTU. With admission on, a frame with more cells is
	// dropped as not admitted.
	MaxScanCells = 169

	// DefaultMaxQueues and DefaultMaxCircuits size the socket and admission
	// maps when Config leaves them 0.
	DefaultMaxQueues   = 64
	DefaultMaxCircuits = 4096

	// DupMark is the packet mark of the clones the duplicator makes; a
	// frame carrying it is never duplicated again (xdp.c's DUP_MARK). The
	// mark is cleared when a frame leaves the bridge's namespace.
	DupMark = 0x78616d00
)

// Flags of the program's xam_flags constant (xdp.c's F_*).
const (
	flagDstMAC       = 1 << 0
	flagNoFrameCheck = 1 << 1
	flagDropOnHEC    = 1 << 2
	flagAdmission    = 1 << 3
	flagNNI          = 1 << 4
	flagUDPIP4       = 1 << 5
	flagUDPIP6       = 1 << 6
)

// Sentinel errors; test with errors.Is.
var (
	// ErrAttached: the device already has an XDP program, attached by
	// another process or the legacy way. The error's text says how to
	// remove it. It also matches unix.EBUSY or unix.EEXIST, the kernel's
	// answer.
	ErrAttached = errors.New("loader: an XDP program is already attached")

	// ErrClosed: the Program or Duplicator was closed. It matches
	// net.ErrClosed too, as the closed links of package afxdp do.
	ErrClosed = fmt.Errorf("loader: %w", net.ErrClosed)

	// ErrAdmissionOff: Admit or Revoke on a program loaded without
	// Config.Admission.
	ErrAdmissionOff = errors.New("loader: admission is off (Config.Admission)")

	// ErrNotSupported: the platform has no XDP (not Linux).
	ErrNotSupported = errors.New("loader: XDP needs Linux")

	// ErrNotXam: CountersOn found no XDP program on the device, or not
	// xam's.
	ErrNotXam = errors.New("loader: no xam XDP program on the device")
)

// Mode says how an XDP program is attached to a device.
type Mode int

const (
	// ModeAuto takes the mode RecommendMode gives for the device: generic
	// on veth, native on other devices (falling back to generic, and
	// saying so in Attachment.Reason, when the driver refuses native).
	ModeAuto Mode = iota
	// ModeGeneric (SKB mode) runs the program after the kernel has built
	// an skb. It works on every device; on veth it had the lower latency.
	ModeGeneric
	// ModeNative (driver mode) runs the program in the driver, before any
	// skb exists. It needs driver support.
	ModeNative
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeGeneric:
		return "generic"
	case ModeNative:
		return "native"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode returns the Mode named s: "auto", "generic" (or "skb") or
// "native" (or "driver").
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto", "":
		return ModeAuto, nil
	case "generic", "skb":
		return ModeGeneric, nil
	case "native", "driver", "drv":
		return ModeNative, nil
	}
	return 0, fmt.Errorf("loader: unknown XDP mode %q (want auto, generic or native)", s)
}

// Config is fixed when the program is loaded: the program sees these values
// as constants, and the verifier removes the code of features that are off.
// The zero Config is usable: it steers every well-formed frame of
// DefaultEtherType to the sockets.
type Config struct {
	// EtherType of xam frames; 0 means DefaultEtherType. Must be at least
	// 0x0600 (smaller values are 802.3 lengths, not EtherTypes).
	EtherType uint16

	// DstMAC, when set (6 bytes), makes the program take only frames
	// addressed to it or to a group (multicast or broadcast) address;
	// frames of xam's EtherType to another unicast address pass to the
	// kernel (counted in Passed and OtherDst).
	DstMAC net.HardwareAddr

	// SkipFrameCheck turns off the check of the frame header (version 1,
	// at least one cell, exactly 53 bytes per cell after the header).
	// With the check on, frames that fail it are dropped and counted as
	// Malformed.
	SkipFrameCheck bool

	// HECCells is how many leading cells of each frame have their HEC
	// checked (0: none; at most MaxScanCells). Cells with a bad HEC are
	// counted in HECErrors; their frame is still delivered, since the
	// receiver corrects single-bit header errors (ITU-T I.432), unless
	// DropOnHEC is set.
	HECCells int

	// DropOnHEC drops frames with a bad HEC in a checked cell (HECDropped).
	DropOnHEC bool

	// Admission, when set, delivers only frames whose every cell names an
	// admitted VPI/VCI (Program.Admit), SSAM's kernel VCI table; other
	// frames are dropped and counted in NotAdmitted. The header's VPI/VCI
	// is taken as received: a header error can make a cell's circuit
	// unadmitted.
	Admission bool

	// NNI reads cell headers as NNI (12-bit VPI, no GFC) for admission.
	NNI bool

	// Frags loads the frags-aware program (xam_xdp_frags, Linux 5.18 and
	// later), which takes frames of several buffers: native mode on a
	// device whose MTU is larger than a page's frame, and frames larger
	// than a chunk for multi-buffer AF_XDP sockets. Its checks and faults
	// reach every byte of the frame, past the first buffer through the
	// kernel's helpers. Without it, a native attach on such a device is
	// refused (ERANGE on veth above an MTU of 3506).
	Frags bool

	// RxMetadata loads the device-bound program (xam_xdp_meta) for device
	// Ifindex, which puts the frame's receive metadata (RxMeta: the NIC's
	// timestamp, through the kernel's XDP metadata kfunc, Linux 6.3 and
	// later) in front of every frame, where the AF_XDP socket finds it
	// (afxdp.Socket.Metadata). It attaches in native mode only, to that
	// device; not with Frags.
	RxMetadata bool
	// Ifindex is the device a RxMetadata program is bound to.
	Ifindex int

	// UDPPort, when non-zero, makes the program take xam's UDP form
	// instead of raw frames of EtherType (docs/wire.md): IPv4 (no
	// options, not a fragment) or IPv6 (UDP as the next header) carrying
	// UDP to this port, addressed to DstMAC (the next hop's MAC: this
	// device's) when it is set. Its checks and faults start at the frame
	// header after the UDP header; everything else, other UDP ports
	// included, passes to the kernel.
	UDPPort uint16
	// UDPLocal, with UDPPort, is the one destination address taken: the
	// program steers only its family, to it, and passes UDP to the port
	// for other addresses (a host that forwards carries other hosts'
	// datagrams). The zero Addr takes both families, any destination.
	UDPLocal netip.Addr

	// MaxQueues is the number of entries of the socket map, the highest
	// queue index plus one that Register accepts; 0 means
	// DefaultMaxQueues.
	MaxQueues int

	// MaxCircuits bounds the admission map; 0 means DefaultMaxCircuits.
	MaxCircuits int
}

// withDefaults returns c with its zero fields replaced by the defaults, or
// an error if a field is out of range.
func (c Config) withDefaults() (Config, error) {
	if c.EtherType == 0 {
		c.EtherType = DefaultEtherType
	}
	if c.MaxQueues == 0 {
		c.MaxQueues = DefaultMaxQueues
	}
	if c.MaxCircuits == 0 {
		c.MaxCircuits = DefaultMaxCircuits
	}
	switch {
	case c.EtherType < 0x0600:
		return c, fmt.Errorf("loader: EtherType %#04x is an 802.3 length, not an EtherType (want at least 0x0600)", c.EtherType)
	case c.DstMAC != nil && len(c.DstMAC) != 6:
		return c, fmt.Errorf("loader: destination MAC %v is not 6 bytes", c.DstMAC)
	case c.HECCells < 0 || c.HECCells > MaxScanCells:
		return c, fmt.Errorf("loader: HECCells %d out of range [0, %d]", c.HECCells, MaxScanCells)
	case c.DropOnHEC && c.HECCells == 0:
		return c, errors.New("loader: DropOnHEC needs HECCells > 0")
	case c.NNI && !c.Admission:
		return c, errors.New("loader: NNI only matters with Admission")
	case c.RxMetadata && c.Ifindex <= 0:
		return c, errors.New("loader: RxMetadata needs the Ifindex of the device it is bound to")
	case c.RxMetadata && c.Frags:
		return c, errors.New("loader: RxMetadata with Frags: the receive metadata program takes frames of one buffer")
	case c.MaxQueues < 1 || c.MaxQueues > 1<<16:
		return c, fmt.Errorf("loader: MaxQueues %d out of range [1, %d]", c.MaxQueues, 1<<16)
	case c.MaxCircuits < 1 || c.MaxCircuits > 1<<20:
		return c, fmt.Errorf("loader: MaxCircuits %d out of range [1, %d]", c.MaxCircuits, 1<<20)
	}
	return c, nil
}

// flags returns the program's xam_flags for c.
func (c Config) flags() uint32 {
	var f uint32
	if c.DstMAC != nil {
		f |= flagDstMAC
	}
	if c.SkipFrameCheck {
		f |= flagNoFrameCheck
	}
	if c.DropOnHEC {
		f |= flagDropOnHEC
	}
	if c.Admission {
		f |= flagAdmission
	}
	if c.NNI {
		f |= flagNNI
	}
	switch a := c.UDPLocal.Unmap(); {
	case c.UDPPort == 0 || !a.IsValid():
	case a.Is4():
		f |= flagUDPIP4
	default:
		f |= flagUDPIP6
	}
	return f
}

// Faults are injected into xam frames by the XDP program, standing for the
// wire: before the receiver's checks, after the frame check. They are off
// by default and may be changed at any time with Program.SetFaults.
type Faults struct {
	// DropRate is the fraction of frames dropped (FaultDropped), 0..1.
	DropRate float64
	// CorruptRate is the fraction of the remaining frames in which one
	// randomly chosen cell payload byte is inverted (FaultCorrupted), 0..1.
	CorruptRate float64
	// Seed, when non-zero, makes the decisions come from a splitmix64
	// generator seeded with Seed, one copy per CPU (each CPU's stream
	// starts again at Seed on every SetFaults). Frames received by one CPU
	// in the same order then meet the same fate in every run. Seed 0 uses
	// the kernel's bpf_get_prandom_u32.
	Seed uint64
}

// threshold converts a probability to the program's 32-bit threshold: an
// event happens when a uniform 32-bit number is below it.
func threshold(name string, rate float64) (uint64, error) {
	if math.IsNaN(rate) || rate < 0 || rate > 1 {
		return 0, fmt.Errorf("loader: %s %v out of range [0, 1]", name, rate)
	}
	return uint64(math.Round(rate * (1 << 32))), nil
}

// Counters are the XDP program's counters, summed over CPUs, since it was
// loaded. Every frame the program sees is Passed or Received; every
// Received frame ends in exactly one of Malformed, FaultDropped, HECDropped,
// NotAdmitted, Redirected and RedirectMiss.
type Counters struct {
	Received       uint64 `json:"received"`        // frames of xam's EtherType (and destination, if filtered)
	Redirected     uint64 `json:"redirected"`      // handed to the socket of the receiving queue
	RedirectMiss   uint64 `json:"redirect_miss"`   // no socket registered for the receiving queue: passed to the kernel
	Passed         uint64 `json:"passed"`          // not xam frames: passed to the kernel
	OtherDst       uint64 `json:"other_dst"`       // xam's EtherType to another unicast MAC (included in Passed)
	Malformed      uint64 `json:"malformed"`       // dropped: bad version, cell count or length
	FaultDropped   uint64 `json:"fault_dropped"`   // dropped by fault injection
	FaultCorrupted uint64 `json:"fault_corrupted"` // corrupted by fault injection (then delivered)
	HECErrors      uint64 `json:"hec_errors"`      // cells with a bad HEC (Config.HECCells)
	HECDropped     uint64 `json:"hec_dropped"`     // frames dropped for a bad HEC (Config.DropOnHEC)
	NotAdmitted    uint64 `json:"not_admitted"`    // frames dropped for a cell of an unadmitted VPI/VCI
}

// QueueCount is what the program counted on one receive queue: the
// frames of xam's that reached its redirect (Redirected and RedirectMiss),
// and those of them that found no socket on the queue, passed to the
// kernel, which drops them.
type QueueCount struct {
	Queue    int    `json:"queue"`
	Frames   uint64 `json:"frames"`
	NoSocket uint64 `json:"no_socket"`
}

// RxMetaLen is the length of the receive metadata that a RxMetadata
// program puts in front of every frame.
const RxMetaLen = 24

// rxMetaMagic marks the metadata area as xam's ("xam1").
const rxMetaMagic = 0x78616d31

// RxMeta is a frame's receive metadata (Config.RxMetadata).
type RxMeta struct {
	// Timestamp is the NIC's receive stamp, in ns on its clock, if
	// Stamped; a NIC without hardware stamps (a veth) gives none.
	Timestamp uint64
	Stamped   bool
	// Hash is the NIC's RSS hash of the frame, if Hashed, and RSSType
	// what it covered (enum xdp_rss_hash_type: L3, L4, IPv4, IPv6, ...;
	// 0 for a frame the NIC hashed as no known protocol, as xam's raw
	// frames).
	Hash    uint32
	RSSType uint32
	Hashed  bool
}

// ParseRxMeta reads the RxMetaLen bytes in front of a frame; ok is false
// if they are not xam's (a program without RxMetadata put none there).
func ParseRxMeta(b []byte) (m RxMeta, ok bool) {
	if len(b) != RxMetaLen || binary.NativeEndian.Uint32(b[20:]) != rxMetaMagic {
		return RxMeta{}, false
	}
	flags := binary.NativeEndian.Uint32(b[16:])
	return RxMeta{Timestamp: binary.NativeEndian.Uint64(b), Stamped: flags&1 != 0,
		Hash: binary.NativeEndian.Uint32(b[8:]), RSSType: binary.NativeEndian.Uint32(b[12:]), Hashed: flags&2 != 0}, true
}

// Duplicate configures the duplicator.
type Duplicate struct {
	// EtherType of the frames to duplicate; 0 means DefaultEtherType.
	EtherType uint16
	// DstMAC, when set, limits duplication to frames addressed to it or to
	// a group address (as Config.DstMAC), so that one receiver of several
	// behind the bridge gets the duplicates.
	DstMAC net.HardwareAddr
	// Rate is the fraction of frames sent twice, 0..1.
	Rate float64
	// Seed, when non-zero, seeds the decisions as in Faults.Seed.
	Seed uint64
}

// DupCounters are the duplicator's counters, summed over CPUs.
type DupCounters struct {
	Seen        uint64 // frames of the EtherType (and destination) arriving (clones excluded)
	Duplicated  uint64 // clones sent
	CloneErrors uint64 // clones that bpf_clone_redirect could not send
}

// Action is an XDP program's verdict on a frame.
type Action uint32

// The XDP actions (enum xdp_action).
const (
	ActionAborted Action = iota
	ActionDrop
	ActionPass
	ActionTX
	ActionRedirect
)

func (a Action) String() string {
	switch a {
	case ActionAborted:
		return "XDP_ABORTED"
	case ActionDrop:
		return "XDP_DROP"
	case ActionPass:
		return "XDP_PASS"
	case ActionTX:
		return "XDP_TX"
	case ActionRedirect:
		return "XDP_REDIRECT"
	}
	return fmt.Sprintf("Action(%d)", uint32(a))
}
