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
// FillSize+TxSize chunks of 2048 or 4096 bytes (or that many chunks of a
// shared UMEM, below), split once: receive chunks
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
// steering between processes happens above it. On a multi-queue veth, a
// frame transmitted on queue q arrives on the peer's queue q under a native
// XDP program, but on queue q-1 (0 for q = 0) under a generic one: veth
// does not record the receive queue, and generic XDP takes the transmit
// queue for a recorded receive queue plus one (Linux 6.18; the shared-UMEM
// test steers by queue, so it uses native mode).
//
// # Sharing a UMEM
//
// Sockets on several queues of a device, or on several devices, can share
// one UMEM (issue 3's "one socket per queue; shared UMEM where supported"):
// OpenShared(ifindex, queues, opts) opens one socket per queue on a UMEM
// sized for them; NewUMEM and UMEM.Open do the same step by step, for
// sockets on other devices or opened later. The first socket registers the
// UMEM (XDP_UMEM_REG); every other one binds with XDP_SHARED_UMEM and the
// descriptor of a socket already bound to it, with a fill and a completion
// ring of its own (Linux 5.10 and later; older kernels share only on one
// queue and answer EINVAL, reported as ErrNotSupported) and its own RX and
// TX rings. Chunks are partitioned: each socket takes FillSize+TxSize
// consecutive chunks (Info.ChunkBase) when it opens and keeps them for
// good, so no two sockets ever use the same chunk and each Socket's two
// sides stay as independent as with a UMEM of its own. Frame size,
// headroom, mode and need_wakeup are the UMEM's: the kernel applies the
// first socket's mode to all. The mapping is reference-counted (each socket
// and the UMEM handle hold one): closing one socket unmaps only its rings,
// and the memory goes with the last reference. Two sockets of one UMEM on
// the same queue (which would share the fill ring) are refused.
//
// A UMEM is a memfd mapped shared, named so that /proc/PID/maps shows it
// as "/memfd:xam-AF_XDP-UMEM (deleted)"; the package's tests check that
// none is left.
//
// # Rings
//
// The ring layer (ring.go and one file per ring: fillqueue.go, rxqueue.go,
// txqueue.go, completionqueue.go; umem.go) is xam's own, after gVisor's
// pkg/xdp: the shared producer and consumer indices are read and written
// only with sync/atomic, each side keeps cached copies and touches the shared
// index only when the cached one says full or empty. github.com/asavie/xdp's
// Socket, the Go library this package outgrew, serves only as the
// benchmarks' peer (bench/asavie.go): it reads the indices with plain
// loads, does not unmap its rings on Close (so the socket, which the
// mappings keep alive, never releases its queue), panics on some errors,
// and has no need_wakeup, XDP_OPTIONS, busy-poll or TX-budget support. Its
// Program must never be used: it redirects every frame of the queue to the
// socket, so the host's own traffic on that queue never reaches the kernel.
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
//   - System calls: Send's sendto is a raw system call (the goroutine
//     keeps its P) in zero-copy mode and when the TX budget in force is at
//     most 256 frames: a copy-mode sendto transmits the whole batch and
//     outlasts sysmon's 20µs tick, and an ordinary call then had its P
//     handed off and back, about 9 context switches per call (see the
//     frame-rate notes below). Larger budgets use ordinary calls.
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
// # Frame rate on veth
//
// BenchmarkFrameRate and BenchmarkFrameRatePath (64-byte frames, copy mode,
// Linux 6.18 on 2 vCPUs shared with other work, so ±10% between runs). One
// sender goroutine moves about 0.55-0.65 Mpps into an AF_XDP receiver,
// with batches of 64 or 256, and 0.5 Mpps at 1500 bytes. The cost is per
// frame, and almost all of it is in the kernel. veth hands a transmitted
// frame to netif_rx, and the softirq that receives it runs when
// __dev_direct_xmit re-enables bottom halves: inside the sender's sendto,
// on the sender's CPU. So the sender's core pays for the receiving end too.
// A perf profile of that case puts 61% of the sender's time in the receive
// softirq, 16% in veth_xmit and 10% in building and freeing skbs; Send
// itself is under 1%. Within the softirq, generic XDP takes 39% of the
// sender's time: reallocating the skb head for 256 bytes of headroom 9%,
// the AF_XDP receive and its copy 14%.
//
// Variants show the same thing. When the receiver's program drops the
// frames (sender side only), the rate is 0.65-0.8 Mpps; with no XDP
// program at the receiver, 0.8-0.9 Mpps. Native XDP is no faster
// (0.56/0.74). The 1.2 Mpps from one sender core is out of reach
// while that core also runs the receive path.
//
// Threaded NAPI at the receiver (native XDP, /sys/class/net/DEV/threaded
// set to 1) moves the receive path to a kernel thread on the other CPU.
// The sender alone then sends 1.2-1.8 Mpps, of which the receiver's
// program counts 1.1-1.7 (drop-native-threaded; the rest overflows veth's
// ring). With two vCPUs, though, that thread and an AF_XDP receiver share
// one CPU: a receiver sleeping in Wait takes 0.65-0.85 Mpps of a 1-1.2
// Mpps blast, and a spinning one starves the thread (0.28-0.32 Mpps).
//
// The cost that was ours was the Go scheduler. A sendto of 256 frames
// lasts about 0.4ms. Made as an ordinary system call, it had its P taken
// by sysmon and handed to a thread that found nothing to do, then had to
// get the P back: 37 context switches per 1000 frames, and sysmon at 5% of
// the profile. Raw calls (see "System calls" above) make 0.5 context
// switches per 1000 frames, with sysmon at 0.3%. The rate gain is modest:
// pooled medians over interleaved runs rose 4.5% to an AF_XDP receiver
// (19 runs each, 0.551 -> 0.576 Mpps; single series ranged from +2% to
// +11%) and 10% into a dropping program (13 runs, 0.69 -> 0.76 Mpps). The
// syscall variant measures the same as the code before the change.
//
// These moved the rate by no more than the noise (medians within 5% over
// six interleaved runs): a TX budget of 32 instead of 256
// (8 times the sendto calls, same rate with raw calls); a 4096-entry
// receiver fill ring; a receiver that waits instead of spinning, or that
// backs off between small batches (fewer cache-line transfers); GOMAXPROCS
// 3; locking the goroutines to their threads; SO_SNDBUF from 16 KiB to
// 4 MiB (veth orphans the skb, so the send buffer never fills). RPS to the
// other CPU helps (0.65-0.71 Mpps) only while the sender runs on the first
// one.
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
