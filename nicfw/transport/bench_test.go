package transport

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/clock"
)

// BenchmarkTransfer moves b.N messages from A to B over a memlink pair, both
// transports polled by the benchmark's goroutine, with C=8 channels. Under
// loss a manual clock is advanced by RetransmitAfter whenever nothing moves,
// so the figure counts the work of retransmission, not the waiting for it.
func BenchmarkTransfer(b *testing.B) {
	for _, loss := range []float64{0, 0.1} {
		for _, size := range []int{64, 1024} {
			b.Run(fmt.Sprintf("loss=%v/size=%d", loss, size), func(b *testing.B) {
				benchTransfer(b, loss, size, nil)
			})
		}
	}
}

// BenchmarkTransferKeyed is BenchmarkTransfer with every frame
// authenticated (Config.Key).
func BenchmarkTransferKeyed(b *testing.B) {
	for _, loss := range []float64{0, 0.1} {
		for _, size := range []int{64, 1024} {
			b.Run(fmt.Sprintf("loss=%v/size=%d", loss, size), func(b *testing.B) {
				benchTransfer(b, loss, size, testKey)
			})
		}
	}
}

func benchTransfer(b *testing.B, loss float64, size int, key []byte) {
	la, lb, err := memlink.NewPair(memlink.Options{Loss: loss, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	clk := clock.NewManual(time.Unix(1, 0))
	const ra = time.Millisecond
	cfg := Config{Channels: 8, RetransmitAfter: ra, ScanInterval: ra, Clock: clk, Key: key}
	delivered := 0
	cfg.Deliver = func(HostID, int, []byte) bool { delivered++; return true }
	a, err := New(la, cfg)
	if err != nil {
		b.Fatal(err)
	}
	bt, err := New(lb, cfg)
	if err != nil {
		b.Fatal(err)
	}
	a.AddPeer(2, lb.HardwareAddr())
	bt.AddPeer(1, la.HardwareAddr())
	msg := make([]byte, size)

	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	sent := 0
	for sent < b.N || a.Unacked(2) > 0 {
		for sent < b.N {
			if err := a.Send(2, msg, 0); errors.Is(err, ErrBusy) {
				break
			} else if err != nil {
				b.Fatal(err)
			}
			sent++
		}
		nb, err := bt.Poll()
		if err != nil {
			b.Fatal(err)
		}
		na, err := a.Poll()
		if err != nil {
			b.Fatal(err)
		}
		if na+nb == 0 {
			clk.Advance(ra)
		}
	}
	b.StopTimer()
	if delivered != b.N {
		b.Fatalf("delivered %d of %d", delivered, b.N)
	}
	s := a.Stats()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(s.Retransmits)/float64(b.N), "retx/msg")
}
