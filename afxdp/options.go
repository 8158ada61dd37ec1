package afxdp

import (
	"fmt"
	"math/bits"
	"time"
)

// Mode chooses between zero-copy and copy mode when a Socket binds.
type Mode int

const (
	// ModeAuto tries zero-copy first and falls back to copy mode; the
	// fallback and its reason are reported in Info (ZeroCopy false,
	// ZeroCopyErr the refusal). The default.
	ModeAuto Mode = iota
	// ModeCopy binds in copy mode (XDP_COPY): the kernel copies frames
	// between its buffers and the UMEM. Works on every device.
	ModeCopy
	// ModeZeroCopy binds in zero-copy mode (XDP_ZEROCOPY) or fails with an
	// error matching ErrNotSupported.
	ModeZeroCopy
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeCopy:
		return "copy"
	case ModeZeroCopy:
		return "zero-copy"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Options configure a Socket. The zero value of each field selects its
// default; Open validates them before it touches the kernel.
type Options struct {
	// Queue is the device queue the socket binds to. The socket receives
	// only what the XDP program redirects from this queue, and transmits on
	// it (on veth, the peer receives on the queue of the same number).
	Queue int

	// FrameSize is the size of a UMEM chunk: 2048 (default) or 4096 bytes.
	// A chunk holds one frame; the kernel keeps 256 bytes of headroom in
	// front of a received frame (XDP_PACKET_HEADROOM), so 2048-byte chunks
	// receive frames of up to 1792 bytes and 4096-byte chunks up to 3840.
	FrameSize int

	// Headroom is extra room, in bytes, that the kernel leaves in front of
	// every received frame (the UMEM headroom); default 0. Without
	// MultiBuffer it lowers the largest frame by the same amount; with it,
	// a frame takes one more chunk where it needs to.
	Headroom int

	// RxSize, FillSize, TxSize and CompletionSize are the numbers of
	// descriptors in the four rings: powers of two, default 2048 each. The
	// socket has FillSize UMEM chunks for receiving and TxSize chunks for
	// transmitting (its own UMEM, or its share of a UMEM; see UMEM.Open). CompletionSize must be at least TxSize and RxSize at
	// least FillSize, so that neither ring can overflow.
	RxSize, FillSize, TxSize, CompletionSize int

	// BatchSize is what BatchSize reports (default DefaultBatchSize); at
	// most TxSize.
	BatchSize int

	// TxBudget is the number of frames the kernel transmits per system call
	// in copy mode (XDP_MAX_TX_SKB_BUDGET, Linux 6.17 and later; the kernel's
	// default is 32). Default: BatchSize, set only when above 32. At most
	// TxSize. Failure to set it is reported in Info, not returned. With a
	// budget in force of at most 256, Send makes its sendto calls as raw
	// system calls, which the Go scheduler does not see (each is short);
	// with a larger one, as ordinary ones.
	TxBudget int

	// Mode chooses zero-copy or copy mode; default ModeAuto.
	Mode Mode

	// NoNeedWakeup binds without XDP_USE_NEED_WAKEUP, so the socket makes a
	// system call on every transmission and, when the fill ring runs empty,
	// on every empty receive. With the flag (the default) it makes them only
	// when the driver asks.
	NoNeedWakeup bool

	// BusyPoll is the busy-polling time of the socket (SO_BUSY_POLL, with
	// SO_PREFER_BUSY_POLL and SO_BUSY_POLL_BUDGET = BatchSize); default 20µs.
	// It matters only on devices whose queue has a NAPI instance (Info.NAPIID
	// is not 0; veth has none): there an empty Recv makes a recvfrom that
	// runs the driver's receive routine. Failures to set the options are
	// reported in Info.
	BusyPoll time.Duration
	// NoBusyPoll leaves the busy-polling options unset.
	NoBusyPoll bool

	// Spin is how long Wait spins on the RX ring before it sleeps in
	// poll(2); default 20µs. Negative: sleep at once.
	Spin time.Duration

	// BindTimeout bounds the retries of a bind that fails with EBUSY (the
	// queue is still held by a socket closed a moment ago, whose release the
	// kernel completes asynchronously); default 500ms.
	BindTimeout time.Duration

	// MultiBuffer binds with XDP_USE_SG (Linux 6.6 and later), so that a
	// frame larger than a chunk is received in, and sent from, several
	// chunks (descriptors chained with XDP_PKT_CONTD): the socket's MTU is
	// then the device's. A device whose MTU is past
	// MaxMultiBufferMTU(FrameSize) is refused at Open (ErrMTU): its frames
	// would not fit the socket's chunks. Recv gathers
	// such a frame into a buffer of the socket's (one copy); a frame that
	// fits one chunk is lent as before. A kernel without it refuses the
	// bind, reported as ErrNotSupported. Not with a shared UMEM.
	MultiBuffer bool

	// TxTimestamps asks for every frame's transmit time stamp through
	// AF_XDP TX metadata (Linux 6.8 and later): the UMEM is registered
	// with TxMetadataLen bytes of metadata in front of each transmit
	// frame, every descriptor carries XDP_TX_METADATA with
	// XDP_TXMD_FLAGS_TIMESTAMP, and the kernel writes the stamp there when
	// the frame completes: the NIC's, where the driver takes them (xam
	// doctor's xsk_features: tx-timestamp), or in copy mode the kernel's
	// clock (CLOCK_TAI) as the frame's buffer is released. TxStamp reads
	// the last. A kernel without TX metadata refuses the registration
	// (Info.TxMetadataErr) and the socket opens without stamps. Not with
	// MultiBuffer or a shared UMEM.
	TxTimestamps bool
}

// TxMetadataLen is the room the UMEM keeps for TX metadata in front of
// each transmit frame with Options.TxTimestamps: union xsk_tx_metadata
// (flags, then the request or the completion), 24 bytes since Linux 6.15.
const TxMetadataLen = 24

// Defaults.
const (
	DefaultFrameSize   = 2048
	DefaultRingSize    = 2048
	DefaultBusyPoll    = 20 * time.Microsecond
	DefaultSpin        = 20 * time.Microsecond
	DefaultBindTimeout = 500 * time.Millisecond

	// kernelTxBatch is the kernel's default copy-mode transmit budget
	// (TX_BATCH_SIZE in net/xdp/xsk.c).
	kernelTxBatch = 32
	// packetHeadroom is XDP_PACKET_HEADROOM, the room the kernel keeps in
	// front of every received frame.
	packetHeadroom = 256
	// maxRingSize bounds the ring sizes to keep the UMEM reasonable.
	maxRingSize = 1 << 16
)

// maxFrameDescs is the most descriptors of one multi-buffer frame: what
// the kernel's copy-mode transmit puts in one skb, a linear part and
// MAX_SKB_FRAGS fragments (17 by default), less one for margin. 17 chunks
// of 4 KB hold the largest Ethernet frame, so a device of any MTU is
// carried.
const maxFrameDescs = 17

// MaxMultiBufferMTU returns the largest MTU of a socket with UMEM chunks of
// frameSize bytes bound with Options.MultiBuffer: a frame of at most
// maxFrameDescs chunks, and never above 65535 bytes (65535 with 4 KB
// chunks, 34802 with 2 KB ones).
func MaxMultiBufferMTU(frameSize int) int {
	return min(maxFrameDescs*frameSize, 65535+EthernetHeaderLen) - EthernetHeaderLen
}

// MaxMTU returns the largest MTU whose frames a socket with UMEM chunks of
// frameSize bytes and headroom bytes of Options.Headroom receives whole:
// the kernel keeps XDP_PACKET_HEADROOM (256 bytes) in front of every
// received frame, so 1778 with 2 KB chunks and 3826 with 4 KB chunks.
func MaxMTU(frameSize, headroom int) int {
	return frameSize - packetHeadroom - headroom - EthernetHeaderLen
}

// withDefaults returns o with every zero field set to its default, and an
// error wrapping ErrInvalidOptions if a field is out of range.
func (o Options) withDefaults() (Options, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.FrameSize, DefaultFrameSize)
	def(&o.RxSize, DefaultRingSize)
	def(&o.FillSize, DefaultRingSize)
	def(&o.TxSize, DefaultRingSize)
	def(&o.CompletionSize, DefaultRingSize)
	def(&o.BatchSize, DefaultBatchSize)
	if o.TxBudget == 0 {
		o.TxBudget = o.BatchSize
	}
	if o.BusyPoll == 0 {
		o.BusyPoll = DefaultBusyPoll
	}
	if o.Spin == 0 {
		o.Spin = DefaultSpin
	}
	if o.BindTimeout == 0 {
		o.BindTimeout = DefaultBindTimeout
	}
	return o, o.validate()
}

func (o Options) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("afxdp: %w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	if o.Queue < 0 {
		return bad("queue %d is negative", o.Queue)
	}
	if o.FrameSize != 2048 && o.FrameSize != 4096 {
		return bad("frame size %d: must be 2048 or 4096", o.FrameSize)
	}
	if o.Headroom < 0 || o.Headroom > o.FrameSize-packetHeadroom-EthernetHeaderLen-64 {
		return bad("headroom %d out of range [0, %d] for %d-byte frames",
			o.Headroom, o.FrameSize-packetHeadroom-EthernetHeaderLen-64, o.FrameSize)
	}
	for _, r := range []struct {
		name string
		n    int
	}{{"RX", o.RxSize}, {"fill", o.FillSize}, {"TX", o.TxSize}, {"completion", o.CompletionSize}} {
		if r.n <= 0 || r.n > maxRingSize || bits.OnesCount(uint(r.n)) != 1 {
			return bad("%s ring size %d: must be a power of two in [1, %d]", r.name, r.n, maxRingSize)
		}
	}
	if o.CompletionSize < o.TxSize {
		return bad("completion ring (%d) smaller than TX ring (%d)", o.CompletionSize, o.TxSize)
	}
	if o.RxSize < o.FillSize {
		return bad("RX ring (%d) smaller than fill ring (%d)", o.RxSize, o.FillSize)
	}
	if o.BatchSize < 1 || o.BatchSize > o.TxSize {
		return bad("batch size %d out of range [1, TX ring size %d]", o.BatchSize, o.TxSize)
	}
	if o.TxBudget < 1 || o.TxBudget > o.TxSize {
		return bad("TX budget %d out of range [1, TX ring size %d]", o.TxBudget, o.TxSize)
	}
	if o.Mode < ModeAuto || o.Mode > ModeZeroCopy {
		return bad("unknown mode %d", int(o.Mode))
	}
	if o.BusyPoll < 0 {
		return bad("busy-poll time %v is negative", o.BusyPoll)
	}
	if o.BindTimeout < 0 {
		return bad("bind timeout %v is negative", o.BindTimeout)
	}
	return nil
}

// UMEMOptions configure a UMEM that several sockets share (NewUMEM). The
// zero value of each field but Chunks selects its default.
type UMEMOptions struct {
	// Chunks is the number of chunks, at most MaxUMEMChunks. Every socket
	// opened on the UMEM takes FillSize+TxSize of them (4096 with the
	// default ring sizes), for good.
	Chunks int

	// FrameSize and Headroom are as in Options, for every socket of the
	// UMEM.
	FrameSize int
	Headroom  int

	// Mode and NoNeedWakeup are as in Options. The kernel applies them when
	// the first socket binds; the others inherit them.
	Mode         Mode
	NoNeedWakeup bool
}

// MaxUMEMChunks bounds UMEMOptions.Chunks (4 GiB of 4096-byte chunks).
const MaxUMEMChunks = 1 << 20

// withDefaults returns o with every zero field but Chunks set to its
// default, and an error wrapping ErrInvalidOptions if a field is out of
// range.
func (o UMEMOptions) withDefaults() (UMEMOptions, error) {
	so, err := Options{FrameSize: o.FrameSize, Headroom: o.Headroom, Mode: o.Mode}.withDefaults()
	if err != nil {
		return o, err
	}
	o.FrameSize = so.FrameSize
	if o.Chunks < 1 || o.Chunks > MaxUMEMChunks {
		return o, fmt.Errorf("afxdp: %w: UMEM of %d chunks: must be in [1, %d]", ErrInvalidOptions, o.Chunks, MaxUMEMChunks)
	}
	return o, nil
}

// sharedOptions checks the arguments of OpenShared and returns opts with
// defaults filled in.
func sharedOptions(queues []int, opts Options) (Options, error) {
	if len(queues) == 0 {
		return opts, fmt.Errorf("afxdp: %w: no queues", ErrInvalidOptions)
	}
	if opts.Queue != 0 {
		return opts, fmt.Errorf("afxdp: %w: Options.Queue %d: OpenShared takes the queues as its argument",
			ErrInvalidOptions, opts.Queue)
	}
	return opts.withDefaults()
}
