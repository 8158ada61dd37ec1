//go:build linux

package afxdp_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/netnstest"
)

// etherType is the EtherType of test frames (xam's, IEEE local experimental).
const etherType = 0x88B5

// redirector is a tiny XDP program for the tests, so that afxdp does not
// depend on loader: frames of etherType go to the XSKMAP entry of their RX
// queue (XDP_PASS if there is none), everything else passes.
type redirector struct {
	xsks *ebpf.Map
	prog *ebpf.Program
	link link.Link
}

// newRedirector loads the program and attaches it in generic mode to h's
// veth end; the test's cleanup removes it.
func newRedirector(tb testing.TB, h *netnstest.Host) *redirector {
	tb.Helper()
	return newRedirectorMode(tb, h, link.XDPGenericMode)
}

// newRedirectorMode is newRedirector attaching in mode (link.XDPGenericMode
// or link.XDPDriverMode).
//
// On a multi-queue veth the two modes see different queues: veth hands a
// frame transmitted on queue q to the peer's queue q, which the native
// program sees as rx_queue_index q, but veth does not record the receive
// queue in the skb, so generic XDP reads the transmit queue as a recorded
// receive queue plus one and sees q-1 (0 for q = 0). Tests that steer by
// queue use native mode.
func newRedirectorMode(tb testing.TB, h *netnstest.Host, mode link.XDPAttachFlags) *redirector {
	tb.Helper()
	return newRedirectorFlags(tb, h, mode, 0)
}

// newRedirectorFlags is newRedirectorMode with the program loaded with
// flags (BPF_F_XDP_HAS_FRAGS: a frags-aware program, which native mode
// needs on a veth whose MTU is above a page's frame).
func newRedirectorFlags(tb testing.TB, h *netnstest.Host, mode link.XDPAttachFlags, flags uint32) *redirector {
	tb.Helper()
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{
		Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(max(h.Queues, 1)),
	})
	if err != nil {
		tb.Fatalf("creating XSKMAP: %v", err)
	}
	tb.Cleanup(func() { xsks.Close() })
	const (
		xdpPass        = 2
		ethTypeOff     = 12
		rxQueueIndex   = 16 // offsetof(struct xdp_md, rx_queue_index)
		etherTypeLE16  = etherType>>8 | (etherType&0xff)<<8
		dataOff, endOf = 0, 4
	)
	insns := asm.Instructions{
		// r2 = data, r3 = data_end; frames shorter than a header pass.
		asm.LoadMem(asm.R2, asm.R1, dataOff, asm.Word),
		asm.LoadMem(asm.R3, asm.R1, endOf, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, afxdp.EthernetHeaderLen),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, ethTypeOff, asm.Half),
		asm.JNE.Imm(asm.R5, etherTypeLE16, "pass"),
		// return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)
		asm.LoadMem(asm.R2, asm.R1, rxQueueIndex, asm.Word),
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "xam_test_redir", Type: ebpf.XDP, License: "GPL", Instructions: insns, Flags: flags,
	})
	if err != nil {
		tb.Fatalf("loading test XDP program: %v", err)
	}
	tb.Cleanup(func() { prog.Close() })
	r := &redirector{xsks: xsks, prog: prog}
	err = h.Do(func() (err error) {
		r.link, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: h.Index, Flags: mode})
		return err
	})
	if err != nil {
		tb.Fatalf("attaching test XDP program to %s (flags %v): %v", h, mode, err)
	}
	tb.Cleanup(func() { r.link.Close() })
	return r
}

// register puts socket s in the XSKMAP entry of its queue.
func (r *redirector) register(tb testing.TB, s *afxdp.Socket) {
	tb.Helper()
	if err := r.xsks.Update(uint32(s.Info().Queue), uint32(s.FD()), ebpf.UpdateAny); err != nil {
		tb.Fatalf("registering socket in XSKMAP: %v", err)
	}
}

// openSocket opens a socket on h's veth end inside h's namespace and closes
// it in the test's cleanup (a second Close is harmless), calling Recv after
// Close as a receive loop does, so that a UMEM left mapped for frames still
// lent at Close goes too.
func openSocket(tb testing.TB, h *netnstest.Host, opts afxdp.Options) *afxdp.Socket {
	tb.Helper()
	var s *afxdp.Socket
	err := h.Do(func() (err error) {
		s, err = afxdp.Open(h.Index, opts)
		return err
	})
	if err != nil {
		tb.Fatalf("opening AF_XDP socket on %s: %v", h, err)
	}
	tb.Cleanup(func() { closeAndDrain(s) })
	return s
}

// closeAndDrain closes s, if it is open, and calls Recv, which drops the
// reference to the UMEM that Close keeps while frames are lent.
func closeAndDrain(s *afxdp.Socket) {
	s.Close()
	s.Recv(nil)
}

// socketPair is a veth pair with an AF_XDP socket on queue 0 of each end
// and the test program steering etherType frames to it.
type socketPair struct {
	veth *netnstest.Pair
	a, b *afxdp.Socket
	ra   *redirector
	rb   *redirector
}

func newSocketPair(tb testing.TB, opts afxdp.Options, vethOpts ...netnstest.Option) *socketPair {
	tb.Helper()
	p := &socketPair{veth: netnstest.NewVethPair(tb, vethOpts...)}
	p.ra, p.rb = newRedirector(tb, p.veth.A), newRedirector(tb, p.veth.B)
	p.a, p.b = openSocket(tb, p.veth.A, opts), openSocket(tb, p.veth.B, opts)
	p.ra.register(tb, p.a)
	p.rb.register(tb, p.b)
	return p
}

// linkPairs are the implementations every contract test runs over, the idea
// of wireguard-go's genTestPair: the in-memory link and real AF_XDP sockets
// on a veth pair.
var linkPairs = []struct {
	name string
	new  func(tb testing.TB) (a, b afxdp.Link)
}{
	{"memlink", func(tb testing.TB) (afxdp.Link, afxdp.Link) {
		a, b, err := memlink.NewPair(memlink.Options{Depth: 2048})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}},
	{"afxdp", func(tb testing.TB) (afxdp.Link, afxdp.Link) {
		p := newSocketPair(tb, afxdp.Options{})
		return p.a, p.b
	}},
}

// Test frames: Ethernet header, a 4-byte sequence number, then bytes that
// depend on the sequence number and position.
const seqLen = 4

// minTestFrame is the shortest test frame.
const minTestFrame = afxdp.EthernetHeaderLen + seqLen

// makeFrame writes test frame seq of size bytes from src to dst into buf.
func makeFrame(buf []byte, dst, src net.HardwareAddr, seq uint32, size int) []byte {
	f := buf[:size]
	copy(f[0:6], dst)
	copy(f[6:12], src)
	binary.BigEndian.PutUint16(f[12:14], etherType)
	binary.BigEndian.PutUint32(f[14:18], seq)
	for i := minTestFrame; i < size; i++ {
		f[i] = byte(seq*7 + uint32(i))
	}
	return f
}

// checkFrame verifies a test frame from src to dst and returns its sequence
// number.
func checkFrame(f []byte, dst, src net.HardwareAddr) (uint32, error) {
	if len(f) < minTestFrame {
		return 0, fmt.Errorf("frame of %d bytes, shorter than a test frame", len(f))
	}
	if string(f[0:6]) != string(dst) || string(f[6:12]) != string(src) ||
		binary.BigEndian.Uint16(f[12:14]) != etherType {
		return 0, fmt.Errorf("frame header % x, want %v -> %v type %#x", f[:14], src, dst, etherType)
	}
	seq := binary.BigEndian.Uint32(f[14:18])
	for i := minTestFrame; i < len(f); i++ {
		if f[i] != byte(seq*7+uint32(i)) {
			return seq, fmt.Errorf("frame %d (%d bytes): byte %d is %#x, want %#x", seq, len(f), i, f[i], byte(seq*7+uint32(i)))
		}
	}
	return seq, nil
}

// frameSize returns the size of test frame seq on a link with the given
// MTU: a spread from the shortest test frame to the largest the link takes.
func frameSize(seq uint32, mtu int) int {
	max := mtu + afxdp.EthernetHeaderLen
	switch seq % 8 {
	case 0:
		return minTestFrame
	case 1:
		return max
	case 2:
		return 60
	case 3:
		return 64
	}
	x := seq*2654435761 + 12345 // spread the rest over the range
	return minTestFrame + int(x%uint32(max-minTestFrame+1))
}
