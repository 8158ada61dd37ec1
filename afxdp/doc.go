// Package afxdp is xam's NIC: a small batch link interface that the
// protocol layers use, and its implementation over AF_XDP sockets. Package
// memlink implements the same interface in memory for unprivileged tests.
//
// # The link
//
// Link (link.go) is modelled on wireguard-go's conn.Bind: Send a batch of
// whole Ethernet frames, Recv a batch, BatchSize, MTU, HardwareAddr, Close,
// with the contract in the doc comments. Optional capabilities are separate
// interfaces found by type assertion: Statser (counters, XDP_STATISTICS),
// FDer (the socket's descriptor, for the loader's XSKMAP and for pollers),
// Waker (interrupt a Wait without closing).
//
// Receiving is shaped for an engine that polls. Recv never blocks and
// returns 0 when nothing is waiting, so a busy loop costs one atomic load
// of the RX ring's producer index per empty call and no system call. It
// lends frames instead of copying them: they are slices of the UMEM, valid
// until the next Recv, which gives their chunks back to the kernel. When the
// engine has been idle for a while it calls Wait, which spins on the ring
// for Options.Spin and then sleeps in poll(2) on the socket and an eventfd
// (written by Wake and Close), with a timeout for the engine's timers.
// Sending copies the frames into the link's transmit chunks, so the caller
// keeps its buffers; nothing is allocated per frame or per batch.
//
// After Close every method that returns an error returns net.ErrClosed.
// Frames still lent when another goroutine closes the socket stay readable:
// the UMEM is then unmapped by the receiver's next Recv (which returns
// net.ErrClosed), so a receive loop should call Recv until it does.
//
// # The socket
//
// Open creates an AF_XDP socket on one queue of a device, in the calling
// thread's network namespace (netnstest.Host.Do in tests), and binds it;
// the socket may then be used from any goroutine. It owns a UMEM of
// FillSize+TxSize chunks of 2048 or 4096 bytes, split once: receive chunks
// circulate fill ring -> RX ring -> lent to the caller -> fill ring; transmit
// chunks free list -> TX ring -> completion ring -> free list. The two
// sides therefore share no state, and each has its own mutex: one goroutine
// may send while another receives (gVisor's "one RX goroutine, one TX
// goroutine", made safe against misuse and against Close).
//
// The socket receives nothing by itself: an XDP program on the device must
// redirect frames to it through an XSKMAP entry whose key is the queue and
// whose value is FD(). That is package loader's job; this package's tests
// carry a tiny program of their own. An AF_XDP socket receives only from
// the device queue it is bound to (the kernel checks device and queue), so
// steering between processes happens above it.
//
// # Rings
//
// The ring layer (ring.go and one file per ring: fillqueue.go, rxqueue.go,
// txqueue.go, completionqueue.go; umem.go) is xam's own, after gVisor's
// pkg/xdp: the shared producer and consumer indices are read and written
// only with sync/atomic, each side keeps cached copies and touches the shared
// index only when the cached one says full or empty. github.com/asavie/xdp's
// Socket is not used: it reads the indices with plain loads, does not unmap
// its rings on Close (so the socket, which the mappings keep alive, never
// releases its queue), panics on some errors, and has no need_wakeup,
// XDP_OPTIONS, busy-poll or TX-budget support. Its Program must never be
// used (it steals all traffic of the queue; see shared/notes/afxdp.md).
//
// # Kernel features and what Open does with them
//
//   - Zero-copy: in ModeAuto Open binds with XDP_ZEROCOPY first and, if the
//     driver refuses (veth always does: EOPNOTSUPP), with XDP_COPY; the
//     refusal is kept in Info.ZeroCopyErr and the mode the kernel granted in
//     Info.ZeroCopy (read back with XDP_OPTIONS). ModeZeroCopy fails instead.
//   - need_wakeup (XDP_USE_NEED_WAKEUP, default on): Send makes a sendto
//     only when the TX ring asks for it, Recv a recvfrom only when the fill
//     ring does. Copy mode always asks on TX and never on the fill ring; in
//     copy mode the kernel transmits inside the sendto, TxBudget frames per
//     call, so Send calls it until the TX ring is empty.
//   - TX budget: XDP_MAX_TX_SKB_BUDGET (Linux 6.17+) is set to
//     Options.TxBudget (default BatchSize) when above the kernel's 32;
//     refusal goes to Info.TxBudgetErr.
//   - Busy polling: SO_PREFER_BUSY_POLL, SO_BUSY_POLL and
//     SO_BUSY_POLL_BUDGET are set unless NoBusyPoll; refusals go to
//     Info.BusyPollErr. They matter only if the queue has a NAPI instance
//     (Info.NAPIID, read at bind; veth has none): then an empty Recv makes a
//     recvfrom, which runs the driver's receive routine in the caller.
//   - Queue reuse: the kernel releases a closed socket's queue
//     asynchronously, so an immediate rebind may fail with EBUSY; Open
//     retries for Options.BindTimeout (500ms) and counts Info.BindRetries.
//   - Frame sizes: the kernel keeps 256 bytes of headroom in a receive chunk,
//     so MTU() is the device MTU lowered to what a chunk can receive (1778
//     with 2048-byte chunks). Send refuses, before sending anything, a frame
//     longer than MTU()+14 or shorter than 14 bytes (*FrameSizeError).
//
// # Errors
//
// Errors carry the device and queue and wrap the kernel's errno (test with
// errors.Is against golang.org/x/sys/unix values) or a sentinel of this
// package: ErrInvalidOptions, ErrNotSupported, ErrFrameTooLarge,
// ErrFrameTooShort; net.ErrClosed after Close. Nothing panics. The
// completion of a transmitted frame means the kernel is done with its chunk,
// not that the frame was delivered; a frame dropped by the device in copy
// mode (sendto's EBUSY) is counted in Stats.TxDropped.
//
// On systems other than Linux the package builds, Open validates its
// options and then fails with ErrNotSupported.
package afxdp
