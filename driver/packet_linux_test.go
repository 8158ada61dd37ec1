//go:build linux

package driver_test

import (
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/driver"
)

// TestPacketSyscalls checks the system-call path between two namespaces:
// a frame and a sendto per cell, a recvfrom per frame.
func TestPacketSyscalls(t *testing.T) {
	a, b := configs()
	p := newPacketPair(t, a, b)
	const k = 10
	for i := range k {
		fill(p.a, 0, i, 5, i)
	}
	if err := p.a.SendBatch(0, 0, k, driver.EOM); err != nil {
		t.Fatal(err)
	}
	if err := p.a.Send(1, 0, 0); err != nil {
		t.Fatal(err)
	}
	if got := collect(t, p.b, k+1, 5*time.Second); got != k+1 {
		t.Fatalf("received %d cells, want %d", got, k+1)
	}
	for i, c := range takeAll(p.b, 0) {
		checkCell(t, c, 1, 100, i == k-1, 5, i)
	}
	sa, _ := driver.LinkOf(p.a).(afxdp.Statser).Stats()
	sb, _ := driver.LinkOf(p.b).(afxdp.Statser).Stats()
	if sa.TxFrames != k+1 || sa.TxKicks != k+1 {
		t.Errorf("sender: %d frames in %d sendto calls, want %d each", sa.TxFrames, sa.TxKicks, k+1)
	}
	if sb.RxFrames != k+1 || sb.RxKicks < k+1 {
		t.Errorf("receiver: %d frames in %d recvfrom calls, want %d frames and a call each", sb.RxFrames, sb.RxKicks, k+1)
	}
	if st := p.a.Stats(); st.FramesSent != k+1 || st.CellsSent != k+1 {
		t.Errorf("device stats %+v, want %d one-cell frames", st, k+1)
	}
}
