//go:build linux

package afxdp_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/internal/netnstest"
)

// The tests in this file are about sockets sharing one UMEM.

// openShared opens sockets sharing one UMEM on queues of h's veth end,
// inside h's namespace, and closes them in the test's cleanup.
func openShared(tb testing.TB, h *netnstest.Host, queues []int, opts afxdp.Options) []*afxdp.Socket {
	tb.Helper()
	var socks []*afxdp.Socket
	err := h.Do(func() (err error) {
		socks, err = afxdp.OpenShared(h.Index, queues, opts)
		return err
	})
	if err != nil {
		tb.Fatalf("opening AF_XDP sockets on queues %v of %s: %v", queues, h, err)
	}
	for _, s := range socks {
		tb.Cleanup(func() { closeAndDrain(s) })
	}
	return socks
}

// openOn opens a socket on u on h's veth end, inside h's namespace, and
// closes it in the test's cleanup.
func openOn(tb testing.TB, u *afxdp.UMEM, h *netnstest.Host, opts afxdp.Options) *afxdp.Socket {
	tb.Helper()
	var s *afxdp.Socket
	err := h.Do(func() (err error) {
		s, err = u.Open(h.Index, opts)
		return err
	})
	if err != nil {
		tb.Fatalf("opening AF_XDP socket on queue %d of %s on a shared UMEM: %v", opts.Queue, h, err)
	}
	tb.Cleanup(func() { closeAndDrain(s) })
	return s
}

// closeSocket closes s and then, as a receive loop does, calls Recv, which
// returns net.ErrClosed and drops the reference to the UMEM that Close left
// for frames still lent.
func closeSocket(t *testing.T, s *afxdp.Socket) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := s.Recv(nil); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Recv after Close: %v, want net.ErrClosed", err)
	}
}

// chunkSet records the UMEM chunks (by address) that received frames
// occupied, with the socket that received them.
type chunkSet struct {
	sync.Mutex
	owner map[uint64]int
}

// tagStream is a stream of n frames from one socket to another whose
// sequence numbers carry a tag (the queue) in their top 16 bits. The
// receiver checks each frame's content, tag, order and size, and that it
// lies in one of its own receive chunks of the UMEM, and records the chunk.
type tagStream struct {
	from, to *afxdp.Socket
	tag      uint32
	n        uint32
	window   uint32
	received atomic.Uint32
	chunks   *chunkSet
}

const tagShift = 16

func (s *tagStream) send() error {
	batch := make([][]byte, 0, s.from.BatchSize())
	bufs := make([][]byte, s.from.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, s.from.MTU()+afxdp.EthernetHeaderLen)
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := uint32(0); i < s.n; {
		if i-s.received.Load() >= s.window {
			if time.Now().After(deadline) {
				return fmt.Errorf("tag %d: sender stuck at frame %d: receiver at %d", s.tag, i, s.received.Load())
			}
			time.Sleep(10 * time.Microsecond)
			continue
		}
		batch = batch[:0]
		for ; i < s.n && len(batch) < cap(batch) && i-s.received.Load() < s.window; i++ {
			batch = append(batch, makeFrame(bufs[len(batch)], s.to.HardwareAddr(), s.from.HardwareAddr(),
				s.tag<<tagShift|i, frameSize(i, s.from.MTU())))
		}
		if n, err := s.from.Send(batch); err != nil || n != len(batch) {
			return fmt.Errorf("tag %d: Send of %d frames: %d, %v", s.tag, len(batch), n, err)
		}
	}
	return nil
}

func (s *tagStream) recv() error {
	start, end := afxdp.UMEMRange(s.to)
	info := s.to.Info()
	fs := uint64(info.Options.FrameSize)
	lo, hi := info.ChunkBase, info.ChunkBase+uint64(info.Options.FillSize)*fs
	frames := make([][]byte, s.to.BatchSize())
	deadline := time.Now().Add(30 * time.Second)
	next := uint32(0)
	for next < s.n {
		n, err := s.to.Recv(frames)
		if err != nil {
			return fmt.Errorf("queue %d: Recv after %d frames: %w", info.Queue, next, err)
		}
		for _, f := range frames[:n] {
			p := uintptr(unsafe.Pointer(unsafe.SliceData(f)))
			if p < start || p+uintptr(len(f)) > end {
				return fmt.Errorf("queue %d: frame at %#x outside the UMEM [%#x, %#x)", info.Queue, p, start, end)
			}
			addr := uint64(p - start)
			if addr < lo || addr >= hi {
				return fmt.Errorf("queue %d: frame at UMEM address %#x, outside the socket's receive chunks [%#x, %#x)",
					info.Queue, addr, lo, hi)
			}
			chunk := addr &^ (fs - 1)
			s.chunks.Lock()
			owner, seen := s.chunks.owner[chunk]
			if !seen {
				s.chunks.owner[chunk] = info.Queue
			}
			s.chunks.Unlock()
			if seen && owner != info.Queue {
				return fmt.Errorf("queue %d: frame in chunk %#x, which queue %d used", info.Queue, chunk, owner)
			}
			seq, err := checkFrame(f, s.to.HardwareAddr(), s.from.HardwareAddr())
			if err != nil {
				return fmt.Errorf("queue %d: %w", info.Queue, err)
			}
			if seq>>tagShift != s.tag || seq&(1<<tagShift-1) != next {
				return fmt.Errorf("queue %d: received frame %d of tag %d, want %d of tag %d",
					info.Queue, seq&(1<<tagShift-1), seq>>tagShift, next, s.tag)
			}
			if want := frameSize(next, s.from.MTU()); len(f) != want {
				return fmt.Errorf("queue %d: frame %d is %d bytes, want %d", info.Queue, next, len(f), want)
			}
			next++
		}
		s.received.Store(next)
		if n == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("queue %d: received %d of %d frames in 30s", info.Queue, next, s.n)
			}
			if _, err := s.to.Wait(10 * time.Millisecond); err != nil {
				return fmt.Errorf("queue %d: Wait: %w", info.Queue, err)
			}
		}
	}
	return nil
}

// runStreams runs the streams at once, each sender and receiver in its own
// goroutine, and then checks the counters of both ends of every stream.
func runStreams(t *testing.T, streams []*tagStream) {
	t.Helper()
	txBefore, rxBefore := make([]afxdp.Stats, len(streams)), make([]afxdp.Stats, len(streams))
	for i, s := range streams {
		txBefore[i], _ = s.from.Stats()
		rxBefore[i], _ = s.to.Stats()
	}
	var wg sync.WaitGroup
	errs := make([]error, 2*len(streams))
	for i, s := range streams {
		wg.Go(func() { errs[2*i] = s.send() })
		wg.Go(func() { errs[2*i+1] = s.recv() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, s := range streams {
		tx, err := s.from.Stats()
		if err != nil {
			t.Fatal(err)
		}
		rx, err := s.to.Stats()
		if err != nil {
			t.Fatal(err)
		}
		sent, got := tx.TxFrames-txBefore[i].TxFrames, rx.RxFrames-rxBefore[i].RxFrames
		if sent != uint64(s.n) || got != uint64(s.n) {
			t.Errorf("tag %d: sent %d, received %d; want %d", s.tag, sent, got, s.n)
		}
		if rx.RxDropped != 0 || rx.RxRingFull != 0 || rx.RxInvalidDescs != 0 || tx.TxInvalidDescs != 0 || tx.TxDropped != 0 {
			t.Errorf("tag %d: losses or invalid descriptors: sender %+v, receiver %+v", s.tag, tx, rx)
		}
	}
}

// TestSharedUMEMQueues opens sockets on the four queues of each end of a
// veth pair, the four of an end sharing one UMEM, and streams frames on all
// queues at once: on veth, what a socket transmits on queue q arrives on
// the peer's queue q, where the test program redirects it to the socket of
// that queue. Every frame arrives intact, on its own queue, in one of the
// receiving socket's own chunks; closing a socket (the one that registered
// the UMEM among them) leaves the others working; closing the last unmaps
// the UMEM.
func TestSharedUMEMQueues(t *testing.T) {
	checkGoroutines(t)
	const nq, ring, frameSz = 4, 256, 2048
	veth := netnstest.NewVethPair(t, netnstest.WithQueues(nq))
	rb := newRedirectorMode(t, veth.B, link.XDPDriverMode) // queue q -> q (see newRedirectorMode)
	opts := afxdp.Options{FillSize: ring, RxSize: ring, TxSize: ring, CompletionSize: ring}
	queues := []int{0, 1, 2, 3}
	senders := openShared(t, veth.A, queues, opts)
	receivers := openShared(t, veth.B, queues, opts)
	for _, r := range receivers {
		rb.register(t, r)
	}

	umemStart := map[string]uintptr{}
	for _, side := range []struct {
		name  string
		socks []*afxdp.Socket
	}{{"A", senders}, {"B", receivers}} {
		start0, end0 := afxdp.UMEMRange(side.socks[0])
		if end0-start0 != nq*2*ring*frameSz {
			t.Errorf("%s: UMEM of %d bytes, want %d", side.name, end0-start0, nq*2*ring*frameSz)
		}
		umemStart[side.name] = start0
		for q, s := range side.socks {
			info := s.Info()
			t.Logf("%s queue %d: SharedUMEM %v ChunkBase %#x ZeroCopy %v (%v) NeedWakeup %v",
				side.name, q, info.SharedUMEM, info.ChunkBase, info.ZeroCopy, info.ZeroCopyErr, info.NeedWakeup)
			if start, end := afxdp.UMEMRange(s); start != start0 || end != end0 {
				t.Errorf("%s queue %d: UMEM [%#x, %#x), queue 0's [%#x, %#x)", side.name, q, start, end, start0, end0)
			}
			if info.Queue != q || info.SharedUMEM != (q > 0) || info.ChunkBase != uint64(q*2*ring*frameSz) ||
				info.ZeroCopy || !errors.Is(info.ZeroCopyErr, unix.EOPNOTSUPP) || !info.NeedWakeup || info.MTU != 1500 {
				t.Errorf("%s queue %d: %+v; want queue %d, shared %v, chunks from %#x, copy mode after EOPNOTSUPP",
					side.name, q, info, q, q > 0, q*2*ring*frameSz)
			}
		}
	}
	if umemStart["A"] == umemStart["B"] {
		t.Errorf("both ends share one UMEM mapping")
	}

	chunks := &chunkSet{owner: map[uint64]int{}}
	streams := func(qs ...int) []*tagStream {
		var out []*tagStream
		for _, q := range qs {
			out = append(out, &tagStream{from: senders[q], to: receivers[q], tag: uint32(q), n: 3000, window: ring / 2, chunks: chunks})
		}
		return out
	}
	runStreams(t, streams(0, 1, 2, 3))
	perQueue := map[int]int{}
	for _, q := range chunks.owner {
		perQueue[q]++
	}
	t.Logf("receive chunks used per queue: %v", perQueue)
	for q := range nq {
		if perQueue[q] < 2 {
			t.Errorf("queue %d received into %d chunks", q, perQueue[q])
		}
	}

	// Close the socket that registered B's UMEM and a sender that did not
	// register A's: the others keep working. Frames sent on queue 0 now go
	// to B's kernel stack; the test program passes them, since the XSKMAP
	// entry went with the socket, and no other socket gets them.
	closed := []*afxdp.Socket{receivers[0], senders[2]}
	inos := []string{socketInode(t, receivers[0].FD()), socketInode(t, senders[2].FD())}
	for _, s := range closed {
		closeSocket(t, s)
	}
	for i, s := range closed {
		start, end := afxdp.UMEMRange(s)
		if maps := mappings(t, inos[i], 0, 0); len(maps) != 0 {
			t.Errorf("closed socket still mapped:\n%s", strings.Join(maps, "\n"))
		}
		if maps := mappings(t, "-", start, end); len(maps) == 0 {
			t.Errorf("UMEM [%#x, %#x) unmapped while other sockets use it", start, end)
		}
	}
	var stray sync.WaitGroup
	stopStray := make(chan struct{})
	stray.Go(func() { // frames of tag 0 on queue 0
		f := makeFrame(make([]byte, 64), receivers[0].HardwareAddr(), senders[0].HardwareAddr(), 0, 64)
		for {
			select {
			case <-stopStray:
				return
			default:
			}
			if _, err := senders[0].Send([][]byte{f}); err != nil {
				t.Errorf("Send on queue 0: %v", err)
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	})
	runStreams(t, streams(1, 3))
	close(stopStray)
	stray.Wait()

	// Closing the rest unmaps both UMEMs and every ring.
	var ranges [][2]uintptr
	var all []string
	for _, socks := range [][]*afxdp.Socket{senders, receivers} {
		start, end := afxdp.UMEMRange(socks[1])
		ranges = append(ranges, [2]uintptr{start, end})
		for _, s := range socks {
			if fd := s.FD(); fd >= 0 {
				all = append(all, socketInode(t, fd))
				closeSocket(t, s)
			}
		}
	}
	for _, r := range ranges {
		if maps := mappings(t, "-", r[0], r[1]); len(maps) != 0 {
			t.Errorf("UMEM still mapped after the last socket closed:\n%s", strings.Join(maps, "\n"))
		}
	}
	for _, ino := range all {
		if maps := mappings(t, ino, 0, 0); len(maps) != 0 {
			t.Errorf("rings still mapped after Close:\n%s", strings.Join(maps, "\n"))
		}
	}
}

// TestSharedUMEMDevices shares one UMEM between a socket on each end of a
// veth pair (two devices, in two namespaces, with the same queue number)
// and exchanges frames both ways through it; it also checks what UMEM.Open
// refuses and that the UMEM outlives its handle while sockets use it.
func TestSharedUMEMDevices(t *testing.T) {
	checkGoroutines(t)
	const ring, frameSz = 256, 2048
	veth := netnstest.NewVethPair(t)
	ra, rb := newRedirector(t, veth.A), newRedirector(t, veth.B)
	u, err := afxdp.NewUMEM(afxdp.UMEMOptions{Chunks: 5 * ring})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	if o := u.Options(); o.FrameSize != frameSz || o.Chunks != 5*ring {
		t.Errorf("UMEM options %+v", o)
	}
	opts := afxdp.Options{FillSize: ring, RxSize: ring, TxSize: ring, CompletionSize: ring}
	a := openOn(t, u, veth.A, opts)
	b := openOn(t, u, veth.B, opts)
	ra.register(t, a)
	rb.register(t, b)
	if total, free := u.Chunks(); total != 5*ring || free != ring {
		t.Errorf("Chunks() = %d, %d; want %d, %d", total, free, 5*ring, ring)
	}
	if ia, ib := a.Info(), b.Info(); ia.SharedUMEM || !ib.SharedUMEM || ia.ChunkBase != 0 || ib.ChunkBase != 2*ring*frameSz ||
		ia.Queue != 0 || ib.Queue != 0 {
		t.Errorf("A %+v\nB %+v", ia, ib)
	}
	sa, ea := afxdp.UMEMRange(a)
	if sb, eb := afxdp.UMEMRange(b); sa != sb || ea != eb {
		t.Errorf("A's UMEM [%#x, %#x), B's [%#x, %#x)", sa, ea, sb, eb)
	}

	// What Open refuses.
	for _, c := range []struct {
		h     *netnstest.Host
		opts  afxdp.Options
		want  error
		words string
	}{
		{veth.A, opts, afxdp.ErrInvalidOptions, "queue 0 already has a socket of this UMEM"},
		{veth.A, afxdp.Options{Queue: 1}, afxdp.ErrInvalidOptions, "needs 4096 chunks"},
		{veth.A, afxdp.Options{Queue: 1, FrameSize: 4096}, afxdp.ErrInvalidOptions, "frame size 4096 differs"},
		{veth.A, afxdp.Options{Queue: 1, Mode: afxdp.ModeZeroCopy}, afxdp.ErrInvalidOptions, "mode zero-copy differs"},
		{veth.A, afxdp.Options{Queue: 1, NoNeedWakeup: true}, afxdp.ErrInvalidOptions, "NoNeedWakeup"},
		{veth.A, afxdp.Options{Queue: 1, FillSize: 100}, afxdp.ErrInvalidOptions, "fill ring size 100"},
	} {
		err := c.h.Do(func() error {
			s, err := u.Open(c.h.Index, c.opts)
			if err == nil {
				s.Close()
			}
			return err
		})
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.words) {
			t.Errorf("Open(%+v): %v; want %v saying %q", c.opts, err, c.want, c.words)
		}
	}
	if total, free := u.Chunks(); total != 5*ring || free != ring {
		t.Errorf("after refused Opens: Chunks() = %d, %d; want %d, %d", total, free, 5*ring, ring)
	}

	// Closing the handle leaves the sockets working.
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if err := u.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	err = veth.A.Do(func() error {
		_, err := u.Open(veth.A.Index, afxdp.Options{Queue: 1, FillSize: 64, TxSize: 64})
		return err
	})
	if !errors.Is(err, net.ErrClosed) {
		t.Errorf("Open after Close: %v, want net.ErrClosed", err)
	}
	chunks := &chunkSet{owner: map[uint64]int{}}
	runStreams(t, []*tagStream{
		{from: a, to: b, tag: 1, n: 3000, window: ring / 2, chunks: chunks},
		{from: b, to: a, tag: 2, n: 3000, window: ring / 2, chunks: &chunkSet{owner: map[uint64]int{}}},
	})

	ia, ib := socketInode(t, a.FD()), socketInode(t, b.FD())
	closeSocket(t, a)
	if maps := mappings(t, "-", sa, ea); len(maps) == 0 {
		t.Errorf("UMEM unmapped while B uses it")
	}
	closeSocket(t, b)
	if maps := append(mappings(t, "-", sa, ea), append(mappings(t, ia, 0, 0), mappings(t, ib, 0, 0)...)...); len(maps) != 0 {
		t.Errorf("still mapped after the last socket closed:\n%s", strings.Join(maps, "\n"))
	}
}

// TestSharedErr checks how refusals of a shared UMEM are reported: EINVAL
// on a kernel older than 5.10 and EOPNOTSUPP as ErrNotSupported, the rest
// as the kernel gave them.
func TestSharedErr(t *testing.T) {
	for _, c := range []struct {
		err         error
		release     string
		unsupported bool
		words       string
	}{
		{unix.EINVAL, "5.4.0-150-generic", true, "needs Linux 5.10 (running 5.4.0-150-generic)"},
		{unix.EINVAL, "5.9.16", true, "needs Linux 5.10"},
		{unix.EINVAL, "5.10.0", false, "invalid argument"},
		{unix.EINVAL, "6.18.44-fc-v657", false, "invalid argument"},
		{unix.EINVAL, "garbage", false, "invalid argument"},
		{fmt.Errorf("binding: %w", unix.EOPNOTSUPP), "6.18.44", true, "zero-copy mode"},
		{unix.EBUSY, "4.19.0", false, "busy"},
	} {
		err := afxdp.SharedErr(c.err, c.release)
		if errors.Is(err, afxdp.ErrNotSupported) != c.unsupported || !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.words) {
			t.Errorf("SharedErr(%v, %q) = %v; want unsupported %v, wrapping the errno, saying %q",
				c.err, c.release, err, c.unsupported, c.words)
		}
	}
}
