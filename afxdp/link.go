package afxdp

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// Link is a point of attachment to an Ethernet segment that moves whole
// frames in batches: xam's NIC as the protocol layers (the SSAM driver, the
// firmware engine) see it. *Socket implements it over an AF_XDP socket;
// package memlink implements it in memory for unprivileged tests.
//
// A frame is a whole Ethernet frame without the frame check sequence:
// destination MAC, source MAC, EtherType, payload. A link neither pads nor
// checks frames beyond their length; it delivers them unreliably, like the
// wire: frames may be lost (a full receive ring, a busy peer), and over fault
// injection duplicated or reordered.
//
// # Threads
//
// One goroutine at a time may send (Send) and one at a time may receive
// (Recv, Wait); the two may be different goroutines and run concurrently.
// Close, the optional capabilities, BatchSize, MTU and HardwareAddr may be
// called from any goroutine at any time. Implementations serialise callers
// that break the rule, but then the frames lent by Recv may be overwritten
// under the first receiver.
//
// # Close
//
// Close releases the link. A Send, Recv or Wait running in another goroutine
// returns promptly (a blocked Wait wakes up). After Close, every method that
// returns an error returns net.ErrClosed (errors.Is), Close included; BatchSize,
// MTU and HardwareAddr keep returning what they did.
type Link interface {
	// Send transmits frames in order, copying each into the link's own
	// transmit buffers, so the caller may reuse frames as soon as Send
	// returns. It returns the number of frames handed to the link. Before
	// transmitting anything it checks every frame's length: a frame longer
	// than MTU()+EthernetHeaderLen or shorter than EthernetHeaderLen makes it
	// send nothing and return a *FrameSizeError (errors.Is ErrFrameTooLarge or
	// ErrFrameTooShort). Send may wait briefly for transmit buffers; it
	// returns n < len(frames) only with a non-nil error. Frames of any number
	// may be passed; BatchSize is the number the link moves best at once.
	Send(frames [][]byte) (int, error)

	// Recv receives up to len(frames) frames without blocking: it stores
	// them in frames[:n] and returns n, which is 0 when none is waiting.
	//
	// The frames are lent, not copied: each is valid until the next call of
	// Recv on this link (which gives them back to the link, so it can receive
	// into their buffers again) or Close. A caller that keeps a frame copies
	// it. Recv(nil) gives the lent frames back without receiving.
	Recv(frames [][]byte) (int, error)

	// Wait blocks until Recv would return at least one frame (true), the
	// timeout passes (false), Wake is called (false, on links that have it)
	// or the link is closed (false, net.ErrClosed). A negative timeout waits
	// without limit; a zero timeout only checks. Implementations may spin for
	// a short while before they sleep. An engine that polls calls Recv in its
	// loop and Wait only when it has been idle for a while.
	Wait(timeout time.Duration) (bool, error)

	// BatchSize returns the number of frames the link moves best in one call
	// of Send or Recv: the size of the batches callers should build.
	BatchSize() int

	// MTU returns the largest payload after the Ethernet header that the link
	// carries in both directions; the largest frame is MTU()+EthernetHeaderLen
	// bytes.
	MTU() int

	// HardwareAddr returns the link's MAC address, the source of the frames it
	// sends. The caller must not modify it.
	HardwareAddr() net.HardwareAddr

	// Close releases the link as described in the type's documentation.
	Close() error
}

// Optional capabilities, found by type assertion (as with wireguard-go's
// conn.Bind): a link that has a capability implements its interface.

// Statser is a link that counts what it does.
type Statser interface {
	// Stats returns the link's counters since it was opened.
	Stats() (Stats, error)
}

// FDer is a link backed by a file descriptor: for an AF_XDP socket, the
// descriptor that the XDP program's XSKMAP must hold (loader's Register) and
// that a poller may wait on (readable when frames are waiting).
type FDer interface {
	// FD returns the descriptor, or -1 after Close. The link owns it: the
	// caller must not close it or use it after Close.
	FD() int
}

// Waker is a link whose Wait can be interrupted without closing it: the
// firmware engine sleeps in Wait when idle and an application wakes it when
// it posts work.
type Waker interface {
	// Wake makes a Wait that is blocked, or the next one if none is, return
	// (false, nil). It never blocks and may be called from any goroutine.
	Wake() error
}

// Stats are a link's counters. The first group is counted by the link in
// user space; the second by the kernel (XDP_STATISTICS of an AF_XDP socket)
// and is zero for links without a kernel socket, except where noted.
type Stats struct {
	TxFrames  uint64 // frames handed to the link by Send
	TxBytes   uint64 // their bytes
	RxFrames  uint64 // frames returned by Recv
	RxBytes   uint64 // their bytes
	TxKicks   uint64 // system calls made to start transmission (sendto)
	TxDropped uint64 // frames the kernel reported dropped on transmit (sendto returned EBUSY)
	RxKicks   uint64 // system calls made to wake the receive side (recvfrom: need_wakeup, busy polling)
	Sleeps    uint64 // times Wait slept (poll(2) for a socket)

	// Kernel (XDP_STATISTICS).
	RxDropped            uint64 // frames dropped by the kernel, e.g. too large for a UMEM chunk (memlink: lost by fault injection)
	RxInvalidDescs       uint64 // invalid descriptors on the RX ring
	TxInvalidDescs       uint64 // invalid descriptors on the TX ring
	RxRingFull           uint64 // frames dropped because the RX ring was full (memlink: the receive queue)
	RxFillRingEmptyDescs uint64 // times the kernel found the fill ring empty
	TxRingEmptyDescs     uint64 // times the kernel found the TX ring empty
}

// EthernetHeaderLen is the length of an Ethernet II header: destination and
// source MAC, EtherType. A link's largest frame is its MTU plus this.
const EthernetHeaderLen = 14

// DefaultBatchSize is the batch size of links opened without one.
const DefaultBatchSize = 64

// Errors. They are wrapped with context; test for them with errors.Is.
var (
	// ErrFrameTooLarge: a frame longer than the link's MTU plus the
	// Ethernet header. See FrameSizeError.
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrFrameTooShort: a frame shorter than an Ethernet header (an empty
	// frame included). See FrameSizeError.
	ErrFrameTooShort = errors.New("frame too short")
	// ErrNotSupported: the system lacks what the link needs (AF_XDP
	// sockets, Linux, zero-copy on this device when Mode is ModeZeroCopy).
	ErrNotSupported = errors.New("not supported")
	// ErrInvalidOptions: the options given to a constructor are invalid.
	ErrInvalidOptions = errors.New("invalid options")
	// ErrMTU: the device's frames may be larger than the socket's chunks
	// hold (Options.MultiBuffer): Open refuses, rather than truncate or
	// drop them later.
	ErrMTU = errors.New("device MTU too large for the socket's chunks")
)

// FrameSizeError is the error Send returns for a frame of a size the link
// cannot carry. It matches ErrFrameTooLarge or ErrFrameTooShort with
// errors.Is.
type FrameSizeError struct {
	Index int // position of the frame in the batch
	Len   int // its length in bytes
	Min   int // the shortest frame the link sends (EthernetHeaderLen)
	Max   int // the longest (MTU + EthernetHeaderLen)
	MTU   int // the link's MTU
}

func (e *FrameSizeError) Error() string {
	if e.Len < e.Min {
		return fmt.Sprintf("afxdp: frame %d is %d bytes, shorter than an Ethernet header (%d bytes); nothing sent",
			e.Index, e.Len, e.Min)
	}
	return fmt.Sprintf("afxdp: frame %d is %d bytes, larger than the link's limit of %d (MTU %d + %d-byte Ethernet header); nothing sent",
		e.Index, e.Len, e.Max, e.MTU, EthernetHeaderLen)
}

// Unwrap returns ErrFrameTooShort or ErrFrameTooLarge.
func (e *FrameSizeError) Unwrap() error {
	if e.Len < e.Min {
		return ErrFrameTooShort
	}
	return ErrFrameTooLarge
}

// CheckFrames returns a *FrameSizeError for the first frame that a link with
// the given MTU cannot carry, or nil. Link implementations call it at the
// start of Send.
func CheckFrames(frames [][]byte, mtu int) error {
	max := mtu + EthernetHeaderLen
	for i, f := range frames {
		if len(f) < EthernetHeaderLen || len(f) > max {
			return &FrameSizeError{Index: i, Len: len(f), Min: EthernetHeaderLen, Max: max, MTU: mtu}
		}
	}
	return nil
}
