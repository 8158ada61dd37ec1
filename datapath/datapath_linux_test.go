package datapath

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/loader"
)

// at is the Place of a veth end in its namespace.
func at(h *netnstest.Host) Place {
	return Place{Ifindex: h.Index, MAC: h.MAC, Addr: h.Addr.Addr(), Do: h.Do}
}

// TestOpenEcho: the data path opened on both ends of a veth pair carries
// xam frames: B echoes (Endpoint.Echo) what A sends, and A gets each back
// with the addresses swapped. Closing both leaves nothing behind
// (TestMain's leak check).
func TestOpenEcho(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, err := Open(at(p.A), loader.ModeAuto, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(at(p.B), loader.ModeAuto, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	defer startEcho(t, b)()
	c := make(cells.Cell, cells.CellSize)
	if err := c.Encode(cells.UNI, cells.Fields{VCI: 32, PTI: cells.PTIEndOfMessage}); err != nil {
		t.Fatal(err)
	}
	copy(c[cells.HeaderSize:], "xam datapath")
	f := cells.Framer{Dst: p.B.MAC, Src: p.A.MAC, MTU: 1500}
	frame, err := f.Append(nil, c)
	if err != nil {
		t.Fatal(err)
	}
	pingEcho(t, a, frame, 10)
}

// startEcho has b echo what it receives (Endpoint.Echo) in a goroutine
// of its own, and returns the function that stops it and reports its
// error; deferred after b's Close, it runs before it.
func startEcho(t *testing.T, b *Endpoint) (stop func()) {
	var halt atomic.Bool
	var wg sync.WaitGroup
	var err error
	wg.Go(func() { err = b.Echo(&halt) })
	return func() {
		halt.Store(true)
		wg.Wait()
		if err != nil {
			t.Error(err)
		}
	}
}

// pingEcho sends frame from a n times, one at a time, and checks that
// each comes back echoed: the same bytes, addresses swapped.
func pingEcho(t *testing.T, a *Endpoint, frame []byte, n int) {
	t.Helper()
	l := a.Link()
	bufs := make([][]byte, l.BatchSize())
	for i := range n {
		if _, err := l.Send([][]byte{frame}); err != nil {
			t.Fatal(err)
		}
		var got []byte
		for deadline := time.Now().Add(10 * time.Second); got == nil; {
			k, err := l.Recv(bufs)
			if err != nil {
				t.Fatal(err)
			}
			if k > 0 {
				got = bufs[0]
			} else if time.Now().After(deadline) {
				t.Fatalf("frame %d: no echo in 10 s", i)
			}
		}
		if !bytes.Equal(got[0:6], frame[6:12]) || !bytes.Equal(got[6:12], frame[0:6]) || !bytes.Equal(got[12:], frame[12:]) {
			t.Fatalf("frame %d (%d bytes) echoed as %d bytes: % x", i, len(frame), len(got), got[:min(len(got), 64)])
		}
	}
}

// TestOpenJumbo: on a veth pair whose MTU is past a 4 KB chunk (9000 and
// the largest), the data path opens the frags-aware program and
// multi-buffer sockets, in native and generic mode, and frames of the
// MTU's full size, cells and all, cross intact both ways (B echoes).
func TestOpenJumbo(t *testing.T) {
	for _, c := range []struct {
		mtu  int
		mode loader.Mode
	}{{9000, loader.ModeNative}, {9000, loader.ModeGeneric}, {65535, loader.ModeNative}} {
		t.Run(fmt.Sprintf("mtu=%d/%v", c.mtu, c.mode), func(t *testing.T) {
			p := netnstest.NewVethPair(t, netnstest.WithQueues(1), netnstest.WithMTU(c.mtu))
			a, err := Open(at(p.A), c.mode, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := Open(at(p.B), c.mode, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			info := a.Sock.Info()
			if !info.MultiBuffer || info.MTU != min(c.mtu, afxdp.MaxMultiBufferMTU(4096)) || a.Prog.Config().Frags != true {
				t.Fatalf("socket %+v, frags %v: want multi-buffer at the device's MTU", info, a.Prog.Config().Frags)
			}
			defer startEcho(t, b)()
			f := cells.Framer{Dst: p.B.MAC, Src: p.A.MAC, MTU: info.MTU}
			var cs []byte
			for i := range f.CellsPerFrame() {
				c := make(cells.Cell, cells.CellSize)
				if err := c.Encode(cells.UNI, cells.Fields{VCI: 32}); err != nil {
					t.Fatal(err)
				}
				for k := cells.HeaderSize; k < cells.CellSize; k++ {
					c[k] = byte(i*7 + k)
				}
				cs = append(cs, c...)
			}
			frame, err := f.Append(nil, cs)
			if err != nil {
				t.Fatal(err)
			}
			if len(frame) <= 4096 {
				t.Fatalf("a frame of %d bytes: want one past a chunk", len(frame))
			}
			pingEcho(t, a, frame, 20)
		})
	}
}
