//go:build linux

package afxdp_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/internal/netnstest"
)

// TestMultiBuffer: sockets bound with Options.MultiBuffer on a veth pair
// whose MTU is past a chunk carry frames of every size up to the MTU, each
// byte checked, in generic and native XDP mode (native needs the program
// frags-aware on such an MTU), with 4 KB and 2 KB chunks: frames of one
// chunk are lent, larger ones gathered. Without MultiBuffer the same
// device's socket keeps the MTU one chunk allows.
func TestMultiBuffer(t *testing.T) {
	for _, c := range []struct {
		mode      link.XDPAttachFlags
		frame     int
		deviceMTU int
	}{
		{link.XDPGenericMode, 4096, 9000},
		{link.XDPDriverMode, 4096, 9000},
		{link.XDPGenericMode, 2048, 9000},
		{link.XDPGenericMode, 4096, afxdp.MaxMultiBufferMTU(4096)},
		{link.XDPDriverMode, 4096, afxdp.MaxMultiBufferMTU(4096)},
	} {
		name := fmt.Sprintf("%s/chunk=%d/mtu=%d", map[link.XDPAttachFlags]string{link.XDPGenericMode: "generic", link.XDPDriverMode: "native"}[c.mode], c.frame, c.deviceMTU)
		t.Run(name, func(t *testing.T) {
			veth := netnstest.NewVethPair(t, netnstest.WithMTU(c.deviceMTU))
			ra := newRedirectorFlags(t, veth.A, c.mode, unix.BPF_F_XDP_HAS_FRAGS)
			rb := newRedirectorFlags(t, veth.B, c.mode, unix.BPF_F_XDP_HAS_FRAGS)
			opts := afxdp.Options{FrameSize: c.frame, MultiBuffer: true, Mode: afxdp.ModeCopy}
			var a, b *afxdp.Socket
			err := veth.A.Do(func() (err error) { a, err = afxdp.Open(veth.A.Index, opts); return err })
			if errors.Is(err, afxdp.ErrNotSupported) {
				t.Fatalf("multi-buffer refused (Linux 6.6 or later has it): %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { closeAndDrain(a) })
			b = openSocket(t, veth.B, opts)
			ra.register(t, a)
			rb.register(t, b)
			want := min(c.deviceMTU, afxdp.MaxMultiBufferMTU(c.frame))
			if a.MTU() != want || !a.Info().MultiBuffer {
				t.Fatalf("MTU %d, multi-buffer %v; want %d, true", a.MTU(), a.Info().MultiBuffer, want)
			}
			sendAndCheck(t, a, b, 400)
		})
	}
	// A device whose frames would not fit 17 chunks is refused at open,
	// with the MTU that would fit: never a truncated frame later.
	t.Run("too-large", func(t *testing.T) {
		veth := netnstest.NewVethPair(t, netnstest.WithMTU(65535))
		err := veth.A.Do(func() error {
			s, err := afxdp.Open(veth.A.Index, afxdp.Options{FrameSize: 2048, MultiBuffer: true})
			if err == nil {
				s.Close()
			}
			return err
		})
		if !errors.Is(err, afxdp.ErrMTU) || !strings.Contains(err.Error(), fmt.Sprintf("mtu %d", afxdp.MaxMultiBufferMTU(2048))) {
			t.Errorf("Open on a device of MTU 65535 with 2 KB chunks: %v, want ErrMTU naming MTU %d", err, afxdp.MaxMultiBufferMTU(2048))
		}
	})
	t.Run("without", func(t *testing.T) {
		veth := netnstest.NewVethPair(t, netnstest.WithMTU(9000))
		s := openSocket(t, veth.A, afxdp.Options{FrameSize: 4096})
		if s.MTU() != afxdp.MaxMTU(4096, 0) || s.Info().MultiBuffer {
			t.Errorf("MTU %d, multi-buffer %v; want %d, false", s.MTU(), s.Info().MultiBuffer, afxdp.MaxMTU(4096, 0))
		}
	})
}

// sendAndCheck sends n test frames of sizes spread up to the MTU from a
// to b in batches, and checks that b receives each once, intact, in order.
func sendAndCheck(t *testing.T, a, b *afxdp.Socket, n int) {
	t.Helper()
	mtu := a.MTU()
	buf := make([]byte, mtu+afxdp.EthernetHeaderLen)
	rx := make([][]byte, 64)
	next := uint32(0)
	receive := func(deadline time.Time) {
		for {
			k, err := b.Recv(rx)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range rx[:k] {
				seq, err := checkFrame(f, b.HardwareAddr(), a.HardwareAddr())
				if err != nil {
					t.Fatal(err)
				}
				if seq != next || len(f) != frameSize(seq, mtu) {
					t.Fatalf("received frame %d of %d bytes, want frame %d of %d", seq, len(f), next, frameSize(next, mtu))
				}
				next++
			}
			if k == 0 || time.Now().After(deadline) {
				return
			}
		}
	}
	for seq := uint32(0); seq < uint32(n); seq++ {
		f := makeFrame(buf, b.HardwareAddr(), a.HardwareAddr(), seq, frameSize(seq, mtu))
		if _, err := a.Send([][]byte{f}); err != nil {
			t.Fatalf("sending frame %d (%d bytes): %v", seq, len(f), err)
		}
		if seq%16 == 15 {
			receive(time.Now())
		}
	}
	for deadline := time.Now().Add(10 * time.Second); next < uint32(n) && time.Now().Before(deadline); {
		receive(time.Now())
		if _, err := b.Wait(10 * time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if next != uint32(n) {
		st, _ := b.Stats()
		t.Fatalf("received %d of %d frames; receiver %+v", next, n, st)
	}
}

// TestMultiBufferTooLarge: a receiver whose chunks give it a smaller MTU
// than the sender's (2 KB chunks: 32 KB frames at most; its device's MTU
// raised past that after it opened) drops each larger frame whole and
// counts it, and receives the others intact: never a truncated frame.
func TestMultiBufferTooLarge(t *testing.T) {
	veth := netnstest.NewVethPair(t, netnstest.WithMTU(afxdp.MaxMultiBufferMTU(2048)))
	ra := newRedirectorFlags(t, veth.A, link.XDPGenericMode, unix.BPF_F_XDP_HAS_FRAGS)
	rb := newRedirectorFlags(t, veth.B, link.XDPGenericMode, unix.BPF_F_XDP_HAS_FRAGS)
	b := openSocket(t, veth.B, afxdp.Options{FrameSize: 2048, MultiBuffer: true, Mode: afxdp.ModeCopy})
	for _, h := range []*netnstest.Host{veth.A, veth.B} {
		if err := h.Do(func() error { return setMTU(h.Index, afxdp.MaxMultiBufferMTU(4096)) }); err != nil {
			t.Fatal(err)
		}
	}
	a := openSocket(t, veth.A, afxdp.Options{FrameSize: 4096, MultiBuffer: true, Mode: afxdp.ModeCopy})
	ra.register(t, a)
	rb.register(t, b)
	if b.MTU() != afxdp.MaxMultiBufferMTU(2048) || a.MTU() <= b.MTU() {
		t.Fatalf("MTUs %d and %d", a.MTU(), b.MTU())
	}
	buf := make([]byte, a.MTU()+afxdp.EthernetHeaderLen)
	sizes := []int{100, b.MTU() + afxdp.EthernetHeaderLen, b.MTU() + afxdp.EthernetHeaderLen + 1, a.MTU() + afxdp.EthernetHeaderLen, 5000}
	for i, size := range sizes {
		if _, err := a.Send([][]byte{makeFrame(buf, b.HardwareAddr(), a.HardwareAddr(), uint32(i), size)}); err != nil {
			t.Fatal(err)
		}
	}
	var got []int
	rx := make([][]byte, 8)
	for deadline := time.Now().Add(5 * time.Second); len(got) < 3 && time.Now().Before(deadline); {
		k, err := b.Recv(rx)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range rx[:k] {
			seq, err := checkFrame(f, b.HardwareAddr(), a.HardwareAddr())
			if err != nil || len(f) != sizes[seq] {
				t.Fatalf("frame %d of %d bytes: %v", seq, len(f), err)
			}
			got = append(got, int(seq))
		}
		if k == 0 {
			b.Wait(10 * time.Millisecond) //nolint:errcheck // Recv says
		}
	}
	st, err := b.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[0 1 4]" || st.RxInvalidDescs != 2 {
		t.Errorf("received frames %v, %d invalid; want [0 1 4] and the 2 too large counted", got, st.RxInvalidDescs)
	}
}

// setMTU sets the MTU of device ifindex (in the calling thread's
// namespace).
func setMTU(ifindex, mtu int) error {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return err
	}
	return netlink.LinkSetMTU(l, mtu)
}
