// Package loader loads xam's XDP program into the kernel with cilium/ebpf
// and attaches it to network devices. The program is xam's receive filter:
// it steers frames of xam's EtherType (and, when configured, xam's
// destination MAC) to the AF_XDP socket of the queue they arrive on, and
// returns XDP_PASS for everything else, so the host's own traffic (ARP, IP,
// SSH) is never disturbed. It stands for SSAM's kernel VCI table: it can
// check each cell's HEC and admit only configured VPI/VCI pairs. For tests
// it injects faults: it drops and corrupts frames at set rates, and a
// second program, the duplicator, sends frames twice from a bridge port.
//
// # Model
//
// Load turns a Config into a Program: the XDP program and its maps (the
// socket map, counters, fault settings, admission map) in the kernel, not
// yet attached anywhere. The Config is compiled in: the program sees its
// values as constants, so the verifier removes what is turned off, and it
// cannot change afterwards (load another Program). What may change at run
// time goes through maps: sockets (Register, Unregister), admitted circuits
// (Admit, Revoke) and faults (SetFaults).
//
// Program.Attach attaches the program to a device through a bpf_link. The
// kernel keeps it attached while the link's file descriptor is open, that
// is until Attachment.Close, Program.Close or the end of the process, by
// whatever means (a SIGKILL included): nothing of xam stays on a device
// after its owner is gone. The package holds every open Attachment, and
// with it its Program, until it is closed, so the garbage collector never
// closes the link of one whose owner kept no reference (cilium/ebpf closes
// the descriptors of the objects it collects): a program that attaches and
// drops both keeps receiving until it ends. The same holds for a
// Duplicator. A Program that was never attached, or whose attachments are
// all closed, is the caller's to keep or lose.
//
// One Program may be attached to several devices; a device holds one XDP
// program, and attaching a second fails with ErrAttached, whose text says
// what holds the device and how to remove it. Interface indexes are those
// of the network namespace of the calling OS thread; after Attach returns,
// the Attachment may be used from anywhere.
//
// An AF_XDP socket receives only the frames of the device and queue it is
// bound to. Register puts a socket in the map under its queue's index; the
// program redirects a frame arriving on queue q to the socket registered
// for q. With no socket on q, the frame passes to the kernel (which drops
// it: no protocol handles xam's EtherType) and counts as RedirectMiss. The
// kernel removes a socket from the map when the socket is closed.
//
// # What the program does with a frame
//
//  1. Not xam's EtherType (VLAN-tagged frames included), or shorter than
//     an Ethernet header: XDP_PASS (Passed). With Config.DstMAC, a frame to another unicast address
//     passes too (Passed, OtherDst); group addresses are taken.
//  2. Otherwise it is Received. Unless Config.SkipFrameCheck, the frame
//     header must say version 1 and a cell count n >= 1 with exactly 53*n
//     bytes after it (docs/wire.md); else XDP_DROP (Malformed). Malformed
//     frames of xam's EtherType never reach a socket.
//  3. Faults, standing for the wire: a DropRate fraction is dropped
//     (FaultDropped), then in a CorruptRate fraction one byte of a cell
//     payload is inverted (FaultCorrupted).
//  4. With Config.HECCells, the HEC of that many leading cells is checked;
//     each bad one counts in HECErrors. The frame is still delivered (the
//     receiver corrects single-bit header errors as ITU-T I.432 says)
//     unless Config.DropOnHEC (HECDropped).
//  5. With Config.Admission, every cell's VPI/VCI must be in the admission
//     map; else XDP_DROP (NotAdmitted).
//  6. Redirect to the socket of the receiving queue (Redirected), or
//     XDP_PASS when there is none (RedirectMiss).
//
// Counters are per CPU in the kernel; Program.Counters sums them. Program.Run
// runs the program on a frame in the kernel without a device
// (BPF_PROG_TEST_RUN), which is how the tests check all of the above.
//
// # Modes
//
// ModeGeneric runs the program on skbs and works on every device; on veth it
// had the lower latency (notes/afxdp.md: 2.1-2.7 us against 3.5 us round
// trips), and veth has no zero-copy anyway. ModeNative runs in the driver and
// is what NICs want. ModeAuto asks RecommendMode: generic on veth, loopback
// and other virtual devices, native on NICs, falling back to generic (and
// saying so in Attachment.Reason) if the driver refuses.
//
// The program sees a frame as one buffer (it is not frags-aware). Generic
// XDP linearizes long frames for it; native drivers attach such a program
// only while the MTU fits a page (on veth, the peer's MTU at most 3506;
// Attach explains the ERANGE).
//
// # Faults and duplicates
//
// Faults are decided by comparing a 32-bit random number with rate * 2^32.
// With Faults.Seed the numbers come from a splitmix64 generator per CPU,
// each starting at the seed, so a run in which one CPU receives the frames
// in the same order is repeatable; without, from bpf_get_prandom_u32.
//
// The XDP hook cannot clone a frame. AttachDuplicator puts a tcx ingress
// program (kernel 6.6+) on a bridge port, the one towards the sender, that
// clones a fraction of the xam frames arriving there back into the same
// ingress with bpf_clone_redirect; the clone carries DupMark so that it is
// not cloned again, and the bridge forwards both. It is not on the sender's
// own device, because AF_XDP transmit bypasses that device's tc hooks; nor
// on the egress towards the receiver, because a clone sent to an egress
// stays marked "redirected" across the veth, and generic XDP on the receiver
// skips redirected skbs, so the clone would reach the receiver's kernel
// stack instead of its socket (measured on veth: with a generic-mode
// receiver none of the egress clones arrived, with a native-mode one all
// did).
//
// # Errors
//
// Errors carry short context and wrap their cause with %w: kernel errnos
// (errors.Is(err, unix.EBUSY)), ebpf.ErrNotSupported, and a rejected program
// as *ebpf.VerifierError (errors.As, then %+v for the verifier's log).
// ErrAttached, ErrClosed (also net.ErrClosed), ErrAdmissionOff and
// ErrNotSupported (not Linux) are the package's own. Nothing panics.
//
// Loading needs CAP_BPF and CAP_NET_ADMIN (or root); AF_XDP sockets need
// CAP_NET_RAW.
//
// # The BPF source
//
// xdp.c holds both programs. The generated xam_bpfel.go and xam_bpfel.o are
// committed, so building and testing need no C toolchain; after changing
// xdp.c, run `go generate ./loader` (gen.sh: clang-14 and libbpf headers,
// installed from Debian's packages when missing and run as root).
package loader
