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

	"github.com/xam-project/xam/afxdp"
)

// The tests in this file state the Link contract; each runs over every
// implementation in linkPairs.

func forEachLink(t *testing.T, fn func(t *testing.T, a, b afxdp.Link)) {
	for _, lp := range linkPairs {
		t.Run(lp.name, func(t *testing.T) {
			checkGoroutines(t)
			a, b := lp.new(t)
			fn(t, a, b)
		})
	}
}

// stream sends n test frames of mixed sizes from one link to another,
// never more than window ahead of what the receiver has counted (so that the
// receive ring cannot overflow), and checks every frame received: content,
// order, count.
type stream struct {
	from, to afxdp.Link
	n        uint32
	window   uint32
	received atomic.Uint32
}

func (s *stream) send() error {
	batch := make([][]byte, 0, s.from.BatchSize())
	bufs := make([][]byte, s.from.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, s.from.MTU()+afxdp.EthernetHeaderLen)
	}
	deadline := time.Now().Add(30 * time.Second)
	for seq := uint32(0); seq < s.n; {
		if seq-s.received.Load() >= s.window {
			if time.Now().After(deadline) {
				return fmt.Errorf("sender stuck at frame %d: receiver at %d", seq, s.received.Load())
			}
			time.Sleep(10 * time.Microsecond)
			continue
		}
		batch = batch[:0]
		for ; seq < s.n && len(batch) < cap(batch) && seq-s.received.Load() < s.window; seq++ {
			batch = append(batch, makeFrame(bufs[len(batch)], s.to.HardwareAddr(), s.from.HardwareAddr(),
				seq, frameSize(seq, s.from.MTU())))
		}
		n, err := s.from.Send(batch)
		if err != nil || n != len(batch) {
			return fmt.Errorf("Send of %d frames: %d, %v", len(batch), n, err)
		}
	}
	return nil
}

func (s *stream) recv() error {
	frames := make([][]byte, s.to.BatchSize())
	deadline := time.Now().Add(30 * time.Second)
	next := uint32(0)
	for next < s.n {
		n, err := s.to.Recv(frames)
		if err != nil {
			return fmt.Errorf("Recv after %d frames: %w", next, err)
		}
		for _, f := range frames[:n] {
			seq, err := checkFrame(f, s.to.HardwareAddr(), s.from.HardwareAddr())
			if err != nil {
				return err
			}
			if seq != next {
				return fmt.Errorf("received frame %d, want %d", seq, next)
			}
			if want := frameSize(seq, s.from.MTU()); len(f) != want {
				return fmt.Errorf("frame %d is %d bytes, want %d", seq, len(f), want)
			}
			next++
		}
		s.received.Store(next)
		if n == 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("received %d of %d frames in 30s", next, s.n)
			}
			if _, err := s.to.Wait(10 * time.Millisecond); err != nil {
				return fmt.Errorf("Wait: %w", err)
			}
		}
	}
	return nil
}

// TestExchange sends 10,000 frames of mixed sizes each way at once and
// checks them and the counters at both ends.
func TestExchange(t *testing.T) {
	forEachLink(t, func(t *testing.T, a, b afxdp.Link) {
		const n = 10000
		streams := []*stream{{from: a, to: b, n: n, window: 1024}, {from: b, to: a, n: n, window: 1024}}
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i, s := range streams {
			wg.Go(func() { errs[2*i] = s.send() })
			wg.Go(func() { errs[2*i+1] = s.recv() })
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		var bytes uint64
		for seq := uint32(0); seq < n; seq++ {
			bytes += uint64(frameSize(seq, a.MTU()))
		}
		for _, l := range []afxdp.Link{a, b} {
			st, err := l.(afxdp.Statser).Stats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%v: %+v", l.HardwareAddr(), st)
			if st.TxFrames != n || st.RxFrames != n || st.TxBytes != bytes || st.RxBytes != bytes {
				t.Errorf("%v: sent %d frames (%d bytes), received %d (%d bytes); want %d (%d bytes) each way",
					l.HardwareAddr(), st.TxFrames, st.TxBytes, st.RxFrames, st.RxBytes, n, bytes)
			}
			if st.RxDropped != 0 || st.RxRingFull != 0 || st.RxInvalidDescs != 0 || st.TxInvalidDescs != 0 || st.TxDropped != 0 {
				t.Errorf("%v: losses or invalid descriptors: %+v", l.HardwareAddr(), st)
			}
		}
	})
}

// TestFrameSize checks that frames the link cannot carry are refused, with
// nothing sent, and that the largest it can carry passes.
func TestFrameSize(t *testing.T) {
	forEachLink(t, func(t *testing.T, a, b afxdp.Link) {
		max := a.MTU() + afxdp.EthernetHeaderLen
		good := makeFrame(make([]byte, max), b.HardwareAddr(), a.HardwareAddr(), 1, max)
		for _, c := range []struct {
			size  int
			want  error
			words string
		}{
			{max + 1, afxdp.ErrFrameTooLarge, "larger than the link's limit"},
			{9000, afxdp.ErrFrameTooLarge, "larger than the link's limit"},
			{afxdp.EthernetHeaderLen - 1, afxdp.ErrFrameTooShort, "shorter than an Ethernet header"},
			{0, afxdp.ErrFrameTooShort, "shorter than an Ethernet header"},
		} {
			bad := make([]byte, c.size)
			n, err := a.Send([][]byte{good, bad, good})
			var fse *afxdp.FrameSizeError
			if n != 0 || !errors.Is(err, c.want) || !errors.As(err, &fse) || fse.Index != 1 || fse.Len != c.size ||
				fse.Max != max || !strings.Contains(err.Error(), c.words) {
				t.Errorf("Send with a %d-byte frame: %d, %v; want 0 and %v at index 1 saying %q", c.size, n, err, c.want, c.words)
			}
		}
		if ok, err := b.Wait(20 * time.Millisecond); ok || err != nil {
			t.Errorf("after refused sends, peer's Wait = %v, %v; want nothing", ok, err)
		}
		if n, err := a.Send([][]byte{good}); n != 1 || err != nil {
			t.Fatalf("Send of a %d-byte frame: %d, %v", max, n, err)
		}
		frames := make([][]byte, 4)
		if got := recvN(t, b, frames, 1); len(got[0]) != max {
			t.Errorf("received %d bytes, want %d", len(got[0]), max)
		}
		if st, _ := a.(afxdp.Statser).Stats(); st.TxFrames != 1 {
			t.Errorf("TxFrames = %d after refused sends and one good one, want 1", st.TxFrames)
		}
	})
}

// recvN receives exactly n frames into frames (spinning and waiting for up
// to 5s) and returns them; they stay lent until the next Recv.
func recvN(t *testing.T, l afxdp.Link, frames [][]byte, n int) [][]byte {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := l.Recv(frames[:n])
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if got > 0 {
			if got != n {
				t.Fatalf("received %d frames, want %d", got, n)
			}
			return frames[:n]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no frame within 5s")
		}
		l.Wait(100 * time.Millisecond)
	}
}

// TestLentFrames checks that frames lent by Recv stay intact while more
// frames arrive, until the next Recv.
func TestLentFrames(t *testing.T) {
	forEachLink(t, func(t *testing.T, a, b afxdp.Link) {
		buf := make([]byte, 100)
		send := func(seq uint32) {
			t.Helper()
			if n, err := a.Send([][]byte{makeFrame(buf, b.HardwareAddr(), a.HardwareAddr(), seq, 100)}); n != 1 || err != nil {
				t.Fatalf("Send: %d, %v", n, err)
			}
		}
		frames := make([][]byte, 1)
		send(1)
		lent := recvN(t, b, frames, 1)[0]
		for seq := uint32(2); seq < 200; seq++ {
			send(seq)
		}
		time.Sleep(10 * time.Millisecond)
		if seq, err := checkFrame(lent, b.HardwareAddr(), a.HardwareAddr()); seq != 1 || err != nil {
			t.Fatalf("lent frame changed while more arrived: seq %d, %v", seq, err)
		}
		if n, err := b.Recv(nil); n != 0 || err != nil {
			t.Fatalf("Recv(nil) = %d, %v", n, err)
		}
		for seq := uint32(2); seq < 200; seq++ {
			f := recvN(t, b, frames, 1)[0]
			if got, err := checkFrame(f, b.HardwareAddr(), a.HardwareAddr()); got != seq || err != nil {
				t.Fatalf("frame %d: got %d, %v", seq, got, err)
			}
		}
	})
}

// TestWait checks Wait's results: frames waiting, timeout, Wake, Close.
func TestWait(t *testing.T) {
	forEachLink(t, func(t *testing.T, a, b afxdp.Link) {
		if ok, err := b.Wait(0); ok || err != nil {
			t.Errorf("Wait(0) on an idle link = %v, %v", ok, err)
		}
		start := time.Now()
		if ok, err := b.Wait(30 * time.Millisecond); ok || err != nil || time.Since(start) < 30*time.Millisecond {
			t.Errorf("Wait(30ms) on an idle link = %v, %v after %v", ok, err, time.Since(start))
		}

		// A frame sent while Wait sleeps wakes it.
		go func() {
			time.Sleep(20 * time.Millisecond)
			a.Send([][]byte{makeFrame(make([]byte, 64), b.HardwareAddr(), a.HardwareAddr(), 0, 64)})
		}()
		if ok, err := b.Wait(-1); !ok || err != nil {
			t.Errorf("Wait(-1) for a frame = %v, %v", ok, err)
		}
		if ok, err := b.Wait(0); !ok || err != nil {
			t.Errorf("Wait(0) with a frame waiting = %v, %v", ok, err)
		}
		recvN(t, b, make([][]byte, 1), 1)

		// Wake ends a blocked Wait.
		w := b.(afxdp.Waker)
		go func() {
			time.Sleep(20 * time.Millisecond)
			w.Wake()
		}()
		start = time.Now()
		if ok, err := b.Wait(10 * time.Second); ok || err != nil || time.Since(start) > 5*time.Second {
			t.Errorf("Wait woken by Wake = %v, %v after %v", ok, err, time.Since(start))
		}

		// Close ends a blocked Wait with net.ErrClosed.
		go func() {
			time.Sleep(20 * time.Millisecond)
			b.Close()
		}()
		if ok, err := b.Wait(-1); ok || !errors.Is(err, net.ErrClosed) {
			t.Errorf("Wait ended by Close = %v, %v; want net.ErrClosed", ok, err)
		}
	})
}

// TestClose checks that after Close every method returns net.ErrClosed, and
// that closing one end leaves the other working.
func TestClose(t *testing.T) {
	forEachLink(t, func(t *testing.T, a, b afxdp.Link) {
		mtu, batch, mac := a.MTU(), a.BatchSize(), a.HardwareAddr()
		frames := make([][]byte, 4)
		f := makeFrame(make([]byte, 64), b.HardwareAddr(), a.HardwareAddr(), 0, 64)
		if _, err := a.Send([][]byte{f}); err != nil {
			t.Fatal(err)
		}
		if err := a.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		calls := map[string]error{}
		_, calls["Send"] = a.Send([][]byte{f})
		_, calls["Send(nil)"] = a.Send(nil)
		_, calls["Recv"] = a.Recv(frames)
		_, calls["Recv(nil)"] = a.Recv(nil)
		_, calls["Wait"] = a.Wait(time.Second)
		_, calls["Wait(0)"] = a.Wait(0)
		_, calls["Stats"] = a.(afxdp.Statser).Stats()
		calls["Wake"] = a.(afxdp.Waker).Wake()
		calls["Close"] = a.Close()
		for name, err := range calls {
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("%s after Close: %v, want net.ErrClosed", name, err)
			}
		}
		if a.MTU() != mtu || a.BatchSize() != batch || a.HardwareAddr().String() != mac.String() {
			t.Errorf("MTU, BatchSize, HardwareAddr changed by Close")
		}
		if fd, ok := a.(afxdp.FDer); ok && fd.FD() != -1 {
			t.Errorf("FD after Close = %d, want -1", fd.FD())
		}

		// The other end still works: it received the frame sent before
		// Close, and Send to the closed end is not an error.
		recvN(t, b, frames, 1)
		if n, err := b.Send([][]byte{makeFrame(make([]byte, 64), a.HardwareAddr(), b.HardwareAddr(), 0, 64)}); n != 1 || err != nil {
			t.Errorf("Send to a closed peer: %d, %v", n, err)
		}
	})
}

// TestCloseConcurrent closes a link while other goroutines send and
// receive in loops; they must all stop with net.ErrClosed.
func TestCloseConcurrent(t *testing.T) {
	forEachLink(t, func(t *testing.T, a, b afxdp.Link) {
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for i, l := range []afxdp.Link{a, b} {
			wg.Go(func() {
				buf := make([]byte, 64)
				f := makeFrame(buf, b.HardwareAddr(), a.HardwareAddr(), 0, 64)
				for {
					if _, err := l.Send([][]byte{f, f, f, f}); err != nil {
						errs[i] = err
						return
					}
				}
			})
		}
		wg.Go(func() {
			frames := make([][]byte, 64)
			for {
				n, err := b.Recv(frames)
				if err != nil {
					errs[2] = err
					return
				}
				for _, f := range frames[:n] {
					if _, err := checkFrame(f, b.HardwareAddr(), a.HardwareAddr()); err != nil {
						errs[2] = err
						return
					}
				}
				if n == 0 {
					b.Wait(time.Millisecond)
				}
			}
		})
		time.Sleep(50 * time.Millisecond)
		a.Close()
		b.Close()
		wg.Wait()
		for i, err := range errs {
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("goroutine %d stopped with %v, want net.ErrClosed", i, err)
			}
		}
	})
}
