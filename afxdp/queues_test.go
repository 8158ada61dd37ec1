//go:build linux

package afxdp_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/internal/netnstest"
)

// A Queues needs sockets of one device; its Wait sleeps until Wake (or a
// frame), and returns net.ErrClosed once it is closed, as does Wake.
func TestQueuesWakeClose(t *testing.T) {
	if _, err := afxdp.NewQueues(nil); !errors.Is(err, afxdp.ErrInvalidOptions) {
		t.Errorf("NewQueues without sockets: %v", err)
	}
	p := netnstest.NewVethPair(t, netnstest.WithQueues(2))
	a0 := openSocket(t, p.A, afxdp.Options{Queue: 0})
	b0 := openSocket(t, p.B, afxdp.Options{Queue: 0})
	if _, err := afxdp.NewQueues([]*afxdp.Socket{a0, b0}); !errors.Is(err, afxdp.ErrInvalidOptions) {
		t.Errorf("NewQueues over two devices: %v", err)
	}
	a1 := openSocket(t, p.A, afxdp.Options{Queue: 1})
	q, err := afxdp.NewQueues([]*afxdp.Socket{a0, a1})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := q.Wait(0); ok || err != nil {
		t.Errorf("Wait(0) with nothing waiting: %v, %v", ok, err)
	}
	done := make(chan error, 1)
	go func() {
		ok, err := q.Wait(-1)
		if ok {
			err = errors.New("a frame, with none sent")
		}
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // Wait is asleep by now, or not yet: either way Wake ends it
	if err := q.Wake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Wait woken: %v", err)
	}
	if q.MTU() != a0.MTU() || q.BatchSize() != a0.BatchSize() || q.HardwareAddr().String() != p.A.MAC.String() || len(q.FDs()) != 2 {
		t.Errorf("Queues: MTU %d, batch %d, MAC %v, %d descriptors", q.MTU(), q.BatchSize(), q.HardwareAddr(), len(q.FDs()))
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Wait(time.Second); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Wait after Close: %v", err)
	}
	if err := q.Wake(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Wake after Close: %v", err)
	}
}
