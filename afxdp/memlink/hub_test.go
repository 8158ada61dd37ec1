package memlink

import (
	"errors"
	"net"
	"testing"

	"github.com/xam-project/xam/afxdp"
)

// A hub delivers a unicast frame to its addressee only, a broadcast to
// every other port, counts what a full queue drops, shows the tap every
// frame sent, and lets a port inject what Send would refuse.
func TestHub(t *testing.T) {
	h, err := NewHub(Options{Depth: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := h.Attach(), h.Attach(), h.Attach()
	var tapped int
	h.SetTap(func(net.HardwareAddr, []byte) { tapped++ })
	frame := func(dst net.HardwareAddr) []byte {
		f := make([]byte, 60)
		copy(f, dst)
		copy(f[6:], a.HardwareAddr())
		return f
	}
	if _, err := a.Send([][]byte{frame(b.HardwareAddr()), frame(net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})}); err != nil {
		t.Fatal(err)
	}
	rx := make([][]byte, 4)
	if n, _ := b.Recv(rx); n != 2 {
		t.Errorf("B received %d frames, want the unicast and the broadcast", n)
	}
	if n, _ := c.Recv(rx); n != 1 {
		t.Errorf("C received %d frames, want the broadcast", n)
	}
	if n, _ := a.Recv(rx); n != 0 {
		t.Errorf("A received %d of its own frames", n)
	}
	for range 3 {
		if _, err := a.Send([][]byte{frame(b.HardwareAddr())}); err != nil {
			t.Fatal(err)
		}
	}
	if st, _ := b.Stats(); st.RxRingFull != 1 {
		t.Errorf("B's full queue: %+v, want 1 dropped", st)
	}
	if tapped != 5 {
		t.Errorf("the tap saw %d frames, want 5", tapped)
	}
	if _, err := a.Send([][]byte{make([]byte, 3)}); !errors.Is(err, afxdp.ErrFrameTooShort) {
		t.Errorf("a 3-byte frame: %v", err)
	}
	a.Inject(make([]byte, 3))
	if n, _ := c.Recv(rx); n != 1 || len(rx[0]) != 3 {
		t.Errorf("the injected frame: %d frames", n)
	}
	if err := c.Close(); err != nil || !errors.Is(c.Close(), net.ErrClosed) {
		t.Errorf("Close: %v, then not ErrClosed", err)
	}
	if _, err := NewHub(Options{Duplicate: 0.1}); !errors.Is(err, afxdp.ErrInvalidOptions) {
		t.Errorf("a hub that duplicates: %v", err)
	}
}
