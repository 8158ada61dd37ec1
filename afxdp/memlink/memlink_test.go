package memlink_test

import (
	"encoding/binary"
	"errors"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
)

func newPair(t *testing.T, opts memlink.Options) (a, b *memlink.Link) {
	t.Helper()
	a, b, err := memlink.NewPair(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// frame returns a 64-byte frame from a to b carrying seq.
func frame(a, b *memlink.Link, seq uint32) []byte {
	f := make([]byte, 64)
	copy(f, b.HardwareAddr())
	copy(f[6:], a.HardwareAddr())
	binary.BigEndian.PutUint16(f[12:], 0x88B5)
	binary.BigEndian.PutUint32(f[14:], seq)
	return f
}

// sendAll sends frames 0..n-1 from a to b in batches of 16.
func sendAll(t *testing.T, a, b *memlink.Link, n int) {
	t.Helper()
	batch := make([][]byte, 0, 16)
	for seq := range n {
		batch = append(batch, frame(a, b, uint32(seq)))
		if len(batch) == cap(batch) || seq == n-1 {
			if got, err := a.Send(batch); got != len(batch) || err != nil {
				t.Fatalf("Send: %d, %v", got, err)
			}
			batch = batch[:0]
		}
	}
}

// recvAll returns the sequence numbers of every frame waiting at b.
func recvAll(t *testing.T, b *memlink.Link) []uint32 {
	t.Helper()
	var seqs []uint32
	frames := make([][]byte, 7)
	for {
		n, err := b.Recv(frames)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return seqs
		}
		for _, f := range frames[:n] {
			seqs = append(seqs, binary.BigEndian.Uint32(f[14:]))
		}
	}
}

func TestDefaults(t *testing.T) {
	a, b := newPair(t, memlink.Options{})
	if a.MTU() != 1500 || a.BatchSize() != afxdp.DefaultBatchSize ||
		a.HardwareAddr().String() != "02:00:00:00:00:0a" || b.HardwareAddr().String() != "02:00:00:00:00:0b" {
		t.Errorf("MTU %d, batch %d, MACs %v %v", a.MTU(), a.BatchSize(), a.HardwareAddr(), b.HardwareAddr())
	}
	sendAll(t, a, b, 100)
	sendAll(t, b, a, 50)
	if got := recvAll(t, b); len(got) != 100 || !slices.IsSorted(got) {
		t.Errorf("b received %v", got)
	}
	if got := recvAll(t, a); len(got) != 50 {
		t.Errorf("a received %d", len(got))
	}
}

func TestInvalidOptions(t *testing.T) {
	for _, c := range []struct {
		opts  memlink.Options
		words string
	}{
		{memlink.Options{MTU: -1}, "MTU -1"},
		{memlink.Options{BatchSize: -1}, "batch size"},
		{memlink.Options{Depth: -1}, "depth"},
		{memlink.Options{Loss: 1.5}, "loss probability 1.5"},
		{memlink.Options{Duplicate: -0.1}, "duplicate probability"},
		{memlink.Options{Reorder: math.NaN()}, "reorder probability"},
		{memlink.Options{AddrA: net.HardwareAddr{1, 2}}, "MAC addresses"},
	} {
		_, _, err := memlink.NewPair(c.opts)
		if !errors.Is(err, afxdp.ErrInvalidOptions) || !strings.Contains(err.Error(), c.words) {
			t.Errorf("NewPair(%+v): %v, want ErrInvalidOptions saying %q", c.opts, err, c.words)
		}
	}
}

// TestDepth checks that a full receive queue drops and counts.
func TestDepth(t *testing.T) {
	a, b := newPair(t, memlink.Options{Depth: 8})
	sendAll(t, a, b, 20)
	if got := recvAll(t, b); !slices.Equal(got, []uint32{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("received %v, want the first 8", got)
	}
	st, _ := b.Stats()
	if st.RxRingFull != 12 || st.RxFrames != 8 {
		t.Errorf("stats %+v, want 12 dropped for a full queue", st)
	}
	recvAll(t, b) // gives the lent buffers back
	sendAll(t, a, b, 8)
	if got := recvAll(t, b); len(got) != 8 {
		t.Errorf("after draining: %d received, want 8", len(got))
	}
}

// TestLoss checks the loss rate, its accounting and its determinism.
func TestLoss(t *testing.T) {
	const n, p = 20000, 0.1
	run := func(seed uint64) ([]uint32, afxdp.Stats, memlink.Faults) {
		a, b := newPair(t, memlink.Options{Loss: p, Seed: seed, Depth: n})
		sendAll(t, a, b, n)
		got := recvAll(t, b)
		st, _ := b.Stats()
		return got, st, b.Faults()
	}
	got, st, f := run(1)
	lost := n - len(got)
	// Binomial: standard deviation sqrt(n p (1-p)) ≈ 42; allow 5.
	if math.Abs(float64(lost)-n*p) > 5*math.Sqrt(n*p*(1-p)) {
		t.Errorf("lost %d of %d, want about %d", lost, n, int(n*p))
	}
	if st.RxDropped != uint64(lost) || f.Lost != uint64(lost) || !slices.IsSorted(got) {
		t.Errorf("lost %d; RxDropped %d, Faults %+v; in order: %v", lost, st.RxDropped, f, slices.IsSorted(got))
	}
	again, _, _ := run(1)
	other, _, _ := run(2)
	if !slices.Equal(got, again) {
		t.Errorf("same seed, different losses")
	}
	if slices.Equal(got, other) {
		t.Errorf("different seeds, same losses")
	}
}

// TestDuplicate checks that duplicates arrive right after their original.
func TestDuplicate(t *testing.T) {
	const n = 10000
	a, b := newPair(t, memlink.Options{Duplicate: 0.2, Seed: 3, Depth: 2 * n})
	sendAll(t, a, b, n)
	got := recvAll(t, b)
	dups := b.Faults().Duplicated
	if len(got) != n+int(dups) || math.Abs(float64(dups)-0.2*n) > 5*math.Sqrt(n*0.2*0.8) {
		t.Fatalf("received %d with %d duplicates, want %d + about %d", len(got), dups, n, n/5)
	}
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != n {
		t.Errorf("duplicates not adjacent to their original")
	}
}

// TestReorder checks that a reordered frame arrives right after the frame
// that followed it, and that Flush delivers a held frame.
func TestReorder(t *testing.T) {
	const n = 10000
	a, b := newPair(t, memlink.Options{Reorder: 0.1, Seed: 4, Depth: n})
	sendAll(t, a, b, n)
	a.Flush()
	got := recvAll(t, b)
	if len(got) != n {
		t.Fatalf("received %d, want %d", len(got), n)
	}
	swaps := 0
	for i := 0; i < n; i++ {
		if got[i] == uint32(i) {
			continue
		}
		// A held frame i arrives after frame i+1: a swapped pair.
		if i+1 >= n || got[i] != uint32(i+1) || got[i+1] != uint32(i) {
			t.Fatalf("position %d: %v", i, got[max(i-2, 0):min(i+3, n)])
		}
		swaps++
		i++
	}
	r := b.Faults().Reordered
	if uint64(swaps) != r || r < n/20 || r > n/5 {
		t.Errorf("%d swaps, %d reordered; want equal and about %d", swaps, r, int(n*0.1*0.9))
	}
}

// TestConcurrent runs a sender and a receiver per direction with faults on,
// for the race detector; every frame sent is received or counted lost.
func TestConcurrent(t *testing.T) {
	const n = 20000
	a, b := newPair(t, memlink.Options{Loss: 0.01, Duplicate: 0.01, Reorder: 0.01, Seed: 5})
	var wg sync.WaitGroup
	counts := make([]int, 2)
	for i, d := range []struct{ from, to *memlink.Link }{{a, b}, {b, a}} {
		wg.Go(func() {
			batch := make([][]byte, 8)
			for seq := 0; seq < n; seq += len(batch) {
				for j := range batch {
					batch[j] = frame(d.from, d.to, uint32(seq+j))
				}
				if _, err := d.from.Send(batch); err != nil {
					t.Error(err)
					return
				}
			}
			d.from.Flush()
		})
		wg.Go(func() {
			frames := make([][]byte, 32)
			idle := 0
			for idle < 20 {
				k, err := d.to.Recv(frames)
				if err != nil {
					t.Error(err)
					return
				}
				counts[i] += k
				if k == 0 {
					idle++
					d.to.Wait(5 * time.Millisecond)
				} else {
					idle = 0
				}
			}
		})
	}
	wg.Wait()
	for i, l := range []*memlink.Link{b, a} {
		f := l.Faults()
		st, _ := l.Stats()
		if want := n - int(f.Lost) + int(f.Duplicated) - int(st.RxRingFull); counts[i] != want {
			t.Errorf("direction %d: received %d, want %d (faults %+v, ring full %d)", i, counts[i], want, f, st.RxRingFull)
		}
	}
}

// TestNoAllocs checks that sending and receiving allocate nothing.
func TestNoAllocs(t *testing.T) {
	a, b := newPair(t, memlink.Options{Loss: 0.1, Duplicate: 0.1, Reorder: 0.1})
	batch := [][]byte{frame(a, b, 1), frame(a, b, 2), frame(a, b, 3), frame(a, b, 4)}
	frames := make([][]byte, 8)
	allocs := testing.AllocsPerRun(1000, func() {
		a.Send(batch)
		b.Recv(frames)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Send+Recv, want 0", allocs)
	}
}

func BenchmarkSendRecv(b *testing.B) {
	x, y, _ := memlink.NewPair(memlink.Options{})
	defer x.Close()
	defer y.Close()
	batch := make([][]byte, 64)
	for i := range batch {
		batch[i] = frame(x, y, uint32(i))
	}
	frames := make([][]byte, 64)
	b.SetBytes(64 * 64)
	b.ReportAllocs()
	for b.Loop() {
		x.Send(batch)
		y.Recv(frames)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/frame")
}
