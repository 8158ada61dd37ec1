//go:build linux

package driver_test

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/driver"
)

// benchPair is a pair of devices for the trap benchmarks, with a way to
// learn how many frames have reached each side's link (so that a
// benchmark can wait, untimed, for the cells it will receive).
type benchPair struct {
	*pair
	// arrived returns the frames that have reached d's link since the
	// pair was built; nil when frames arrive as they are sent (memlink).
	arrived func(tb testing.TB, d *driver.Device) uint64
}

var benchPairs = []struct {
	name string
	new  func(tb testing.TB) *benchPair
}{
	{"memlink", func(tb testing.TB) *benchPair {
		a, b := configs()
		return &benchPair{pair: newMemPair(tb, a, b)}
	}},
	{"afxdp", func(tb testing.TB) *benchPair {
		a, b := configs()
		p := newXDPPair(tb, a, b)
		return &benchPair{pair: p.pair, arrived: func(tb testing.TB, d *driver.Device) uint64 {
			prog := p.progB
			if d == p.a {
				prog = p.progA
			}
			c, err := prog.Counters()
			if err != nil {
				tb.Fatal(err)
			}
			return c.Redirected
		}}
	}},
	{"packet", func(tb testing.TB) *benchPair {
		a, b := configs()
		p := newPacketPair(tb, a, b)
		total := map[*driver.Device]uint64{}
		return &benchPair{pair: p, arrived: func(tb testing.TB, d *driver.Device) uint64 {
			n, err := driver.PacketArrivals(d) // resets the kernel's count
			if err != nil {
				tb.Fatal(err)
			}
			total[d] += n
			return total[d]
		}}
	}},
}

// waitArrived waits, untimed, until frames more frames than at mark have
// reached d's link.
func (p *benchPair) waitArrived(b *testing.B, d *driver.Device, mark, frames uint64) {
	if p.arrived == nil {
		return
	}
	deadline := time.Now().Add(2 * time.Second)
	for p.arrived(b, d) < mark+frames {
		if time.Now().After(deadline) {
			b.Fatalf("%d frames did not arrive", frames)
		}
		runtime.Gosched()
	}
}

// drain receives and takes everything waiting for d.
func drain(b *testing.B, d *driver.Device) {
	for {
		n, err := d.Recv(1 << 16)
		if err != nil {
			b.Fatal(err)
		}
		for c := range d.NumConns() {
			for _, ok := d.Take(c); ok; _, ok = d.Take(c) {
			}
		}
		if n == 0 {
			return
		}
	}
}

// chunked runs op b.N times, in chunks of at most k, with prepare(k) run
// untimed before each chunk.
func chunked(b *testing.B, k int, prepare func(k int), op func()) {
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(k, b.N-done)
		b.StopTimer()
		prepare(n)
		b.StartTimer()
		for range n {
			op()
		}
		done += n
	}
}

// recvAtLeast receives until d has delivered want cells, failing the
// benchmark if they never come.
func recvAtLeast(b *testing.B, d *driver.Device, got, want int) {
	for tries := 0; got < want; tries++ {
		n, err := d.Recv(want - got)
		if err != nil {
			b.Fatal(err)
		}
		got += n
		if tries > 1<<24 {
			b.Fatalf("%d of %d cells arrived", got, want)
		}
	}
}

// BenchmarkTrap measures SSAM's trap costs side by side: over AF_XDP, over
// the AF_PACKET system-call path and over the in-memory link (the device's
// own cost), with a null system call for reference. Recv benchmarks include
// taking the cells from the ring; their cells were sent and have arrived at
// the link before the timer runs. Recv1 receives a cell that came in a frame
// of its own; Recv16 a 16-cell batch (one frame over AF_XDP, sixteen over
// AF_PACKET). LinkSend1 is the link alone sending the frame Send builds.
func BenchmarkTrap(b *testing.B) {
	b.Run("null-syscall/getppid-raw", func(b *testing.B) {
		for b.Loop() {
			unix.Getppid()
		}
	})
	b.Run("null-syscall/getppid", func(b *testing.B) {
		for b.Loop() {
			syscall.Syscall(syscall.SYS_GETPPID, 0, 0, 0)
		}
	})
	for _, bp := range benchPairs {
		b.Run(bp.name, func(b *testing.B) {
			p := bp.new(b)
			a, rx := p.a, p.b
			mask := len(a.SendArea(0))/cells.PayloadSize - 1
			for c := range a.NumConns() {
				for s := 0; s <= mask; s++ {
					fill(a, c, s, 1, s)
					fill(rx, c, s, 2, s)
				}
			}
			off := 0
			b.Run("Send", func(b *testing.B) {
				chunked(b, 256, func(int) { drain(b, rx) }, func() {
					if err := a.Send(0, off, driver.EOM); err != nil {
						b.Fatal(err)
					}
					off = (off + 1) & mask
				})
			})
			// The link alone carrying the same one-cell frame: what the
			// device adds to a Send is the difference.
			frame := [][]byte{rawFrame(b, p.macB, p.macA, rawCell(1, 100, 1, 0))}
			b.Run("LinkSend1", func(b *testing.B) {
				l := driver.LinkOf(a)
				chunked(b, 256, func(int) { drain(b, rx) }, func() {
					if _, err := l.Send(frame); err != nil {
						b.Fatal(err)
					}
				})
			})
			b.Run("SendBatch16", func(b *testing.B) {
				chunked(b, 32, func(int) { drain(b, rx) }, func() {
					if err := a.SendBatch(0, off, 16, driver.EOM); err != nil {
						b.Fatal(err)
					}
					off = (off + 16) & mask
				})
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(16*b.N), "ns/cell")
			})
			b.Run("Recv1", func(b *testing.B) {
				chunked(b, 256, func(k int) {
					drain(b, rx)
					mark := p.mark(b, rx)
					for range k {
						a.Send(0, off, 0)
						off = (off + 1) & mask
					}
					p.waitArrived(b, rx, mark, uint64(k))
				}, func() {
					recvAtLeast(b, rx, 0, 1)
					rx.Take(0)
				})
			})
			b.Run("Recv16", func(b *testing.B) {
				perBatch := uint64((16 + a.CellsPerFrame() - 1) / a.CellsPerFrame())
				chunked(b, 128, func(k int) {
					drain(b, rx)
					mark := p.mark(b, rx)
					for range k {
						a.SendBatch(0, off, 16, 0)
						off = (off + 16) & mask
					}
					p.waitArrived(b, rx, mark, uint64(k)*perBatch)
				}, func() {
					recvAtLeast(b, rx, 0, 16)
					for range 16 {
						rx.Take(0)
					}
				})
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(16*b.N), "ns/cell")
			})
			b.Run("SendRecv", func(b *testing.B) {
				// A sends a cell and receives the one B sent it earlier.
				chunked(b, 256, func(k int) {
					drain(b, rx)
					drain(b, a)
					mark := p.mark(b, a)
					for range k {
						rx.Send(0, off, 0)
						off = (off + 1) & mask
					}
					p.waitArrived(b, a, mark, uint64(k))
				}, func() {
					n, err := a.SendRecv(0, off, driver.EOM, 1)
					if err != nil {
						b.Fatal(err)
					}
					off = (off + 1) & mask
					recvAtLeast(b, a, n, 1)
					a.Take(0)
				})
			})
		})
	}
}

// mark returns the frames that have reached d's link so far.
func (p *benchPair) mark(b *testing.B, d *driver.Device) uint64 {
	if p.arrived == nil {
		return 0
	}
	return p.arrived(b, d)
}
