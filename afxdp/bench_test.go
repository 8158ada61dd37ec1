//go:build linux

package afxdp_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/internal/netnstest"
)

// Benchmarks, each family side by side on one veth pair in one run, since
// absolute numbers on a shared machine drift:
//
//	BenchmarkPingPong/{afxdp,afxdp-wait,udp,udp-spin}: round trip of a
//	  64-byte frame (AF_XDP) or datagram (kernel UDP); ns/op is the mean
//	  RTT, p50-ns and p99-ns its percentiles.
//	BenchmarkFrameRate/{64B,1500B}/batch={64,256}: one-way AF_XDP frame
//	  rate from one sender goroutine; ns/op per frame, Mpps, MB/s.
//
// Run: go test -run NONE -bench . ./afxdp/

const (
	pingSize   = 64
	rttTimeout = time.Second
)

var errRTTTimeout = errors.New("no reply within 1s")

// roundTripper does one round trip of a message carrying seq.
type roundTripper func(seq uint32) error

// benchRTT runs b.N round trips and reports the mean (ns/op) and the p50
// and p99 of their times.
func benchRTT(b *testing.B, rt roundTripper) {
	for i := range 100 { // warm up: caches, ARP, page faults
		if err := rt(uint32(i)); err != nil {
			b.Fatal(err)
		}
	}
	samples := make([]int64, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if err := rt(uint32(i)); err != nil {
			b.Fatalf("round trip %d: %v", i, err)
		}
		samples[i] = int64(time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(samples)
	pct := func(p float64) float64 { return float64(samples[min(int(p*float64(len(samples))), len(samples)-1)]) }
	b.ReportMetric(pct(0.50), "p50-ns")
	b.ReportMetric(pct(0.99), "p99-ns")
}

// xdpEcho answers every frame that arrives at s with the same frame, MAC
// addresses swapped, until stop is set (and, in wait mode, s woken).
func xdpEcho(s *afxdp.Socket, wait bool, stop *atomic.Bool) error {
	frames := make([][]byte, s.BatchSize())
	var mac [6]byte
	for !stop.Load() {
		n, err := s.Recv(frames)
		if err != nil {
			return err
		}
		if n == 0 {
			if wait {
				if _, err := s.Wait(-1); err != nil {
					return err
				}
			}
			continue
		}
		for _, f := range frames[:n] {
			copy(mac[:], f[0:6])
			copy(f[0:6], f[6:12])
			copy(f[6:12], mac[:])
		}
		if _, err := s.Send(frames[:n]); err != nil {
			return err
		}
	}
	return nil
}

// xdpRoundTrip sends a ping frame from s and spins (or waits) for its echo.
func xdpRoundTrip(s *afxdp.Socket, peer net.HardwareAddr, wait bool) roundTripper {
	ping := [][]byte{makeFrame(make([]byte, pingSize), peer, s.HardwareAddr(), 0, pingSize)}
	frames := make([][]byte, 1)
	return func(seq uint32) error {
		binary.BigEndian.PutUint32(ping[0][14:], seq)
		if _, err := s.Send(ping); err != nil {
			return err
		}
		var start time.Time
		for spins := 0; ; spins++ {
			n, err := s.Recv(frames)
			if err != nil {
				return err
			}
			if n == 1 {
				if got := binary.BigEndian.Uint32(frames[0][14:]); got != seq {
					return fmt.Errorf("reply %d, want %d", got, seq)
				}
				return nil
			}
			if wait {
				if _, err := s.Wait(rttTimeout); err != nil {
					return err
				}
			}
			if spins&1023 == 1023 {
				if start.IsZero() {
					start = time.Now()
				} else if time.Since(start) > rttTimeout {
					return errRTTTimeout
				}
			}
		}
	}
}

// udpSockets opens a connected pair of kernel UDP sockets between A and B,
// non-blocking, as raw descriptors for a spinning loop.
func udpSockets(b *testing.B, veth *netnstest.Pair) (fa, fb int) {
	open := func(h *netnstest.Host, local, remote *unix.SockaddrInet4) (fd int) {
		err := h.Do(func() (err error) {
			if fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0); err != nil {
				return err
			}
			if err = unix.Bind(fd, local); err == nil {
				err = unix.Connect(fd, remote)
			}
			return err
		})
		if err != nil {
			b.Fatalf("UDP socket in %s: %v", h, err)
		}
		b.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	sa := &unix.SockaddrInet4{Port: 40001, Addr: veth.A.Addr.Addr().As4()}
	sb := &unix.SockaddrInet4{Port: 40002, Addr: veth.B.Addr.Addr().As4()}
	return open(veth.A, sa, sb), open(veth.B, sb, sa)
}

// udpSpinEcho answers every datagram at fd until stop is set, spinning on
// non-blocking reads.
func udpSpinEcho(fd int, stop *atomic.Bool) error {
	buf := make([]byte, 2048)
	for !stop.Load() {
		n, err := unix.Read(fd, buf)
		if err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return err
		}
		if _, err := unix.Write(fd, buf[:n]); err != nil {
			return err
		}
	}
	return nil
}

func udpSpinRoundTrip(fd int) roundTripper {
	ping := make([]byte, pingSize)
	buf := make([]byte, 2048)
	return func(seq uint32) error {
		binary.BigEndian.PutUint32(ping, seq)
		if _, err := unix.Write(fd, ping); err != nil {
			return err
		}
		start := time.Now()
		for {
			n, err := unix.Read(fd, buf)
			if err == nil && n == pingSize && binary.BigEndian.Uint32(buf) == seq {
				return nil
			}
			if err != nil && err != unix.EAGAIN {
				return err
			}
			if time.Since(start) > rttTimeout {
				return errRTTTimeout
			}
		}
	}
}

func BenchmarkPingPong(b *testing.B) {
	p := newSocketPair(b, afxdp.Options{})
	run := func(name string, echo func(stop *atomic.Bool) error, wake func(), rt roundTripper) {
		var stop atomic.Bool
		var wg sync.WaitGroup
		var echoErr error
		wg.Go(func() { echoErr = echo(&stop) })
		b.Run(name, func(b *testing.B) { benchRTT(b, rt) })
		stop.Store(true)
		wake()
		wg.Wait()
		if echoErr != nil {
			b.Fatalf("%s echo: %v", name, echoErr)
		}
	}
	none := func() {}

	// Raw AF_XDP, both ends spinning on the RX ring.
	run("afxdp", func(stop *atomic.Bool) error { return xdpEcho(p.b, false, stop) }, none,
		xdpRoundTrip(p.a, p.b.HardwareAddr(), false))

	// Raw AF_XDP, both ends in Wait (spin 20µs, then poll(2)).
	run("afxdp-wait", func(stop *atomic.Bool) error { return xdpEcho(p.b, true, stop) }, func() { p.b.Wake() },
		xdpRoundTrip(p.a, p.b.HardwareAddr(), true))

	// Kernel UDP through Go's net package (blocking reads in the netpoller).
	var ua, ub *net.UDPConn
	if err := p.veth.B.Do(func() (err error) {
		ub, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.veth.B.Addr.Addr().AsSlice(), Port: 40000})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ub.Close() })
	if err := p.veth.A.Do(func() (err error) { ua, err = net.DialUDP("udp4", nil, ub.LocalAddr().(*net.UDPAddr)); return err }); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ua.Close() })
	ping, buf := make([]byte, pingSize), make([]byte, 2048)
	run("udp", func(stop *atomic.Bool) error {
		buf := make([]byte, 2048)
		for {
			n, from, err := ub.ReadFromUDPAddrPort(buf)
			if stop.Load() {
				return nil
			}
			if err != nil {
				return err
			}
			if _, err := ub.WriteToUDPAddrPort(buf[:n], from); err != nil {
				return err
			}
		}
	}, func() { ub.SetReadDeadline(time.Now()) }, func(seq uint32) error {
		binary.BigEndian.PutUint32(ping, seq)
		if _, err := ua.Write(ping); err != nil {
			return err
		}
		ua.SetReadDeadline(time.Now().Add(rttTimeout))
		for {
			n, err := ua.Read(buf)
			if err != nil {
				return err
			}
			if n == pingSize && binary.BigEndian.Uint32(buf) == seq {
				return nil
			}
		}
	})

	// Kernel UDP, both ends spinning on non-blocking reads.
	fa, fb := udpSockets(b, p.veth)
	run("udp-spin", func(stop *atomic.Bool) error { return udpSpinEcho(fb, stop) }, none, udpSpinRoundTrip(fa))
}

func BenchmarkFrameRate(b *testing.B) {
	p := newSocketPair(b, afxdp.Options{BatchSize: 256})
	for _, size := range []int{64, 1500} {
		for _, batch := range []int{64, 256} {
			b.Run(fmt.Sprintf("%dB/batch=%d", size, batch), func(b *testing.B) {
				benchFrameRate(b, p, size, batch)
			})
		}
	}
	// 3500-byte frames need 4 KB chunks and a link MTU above 3486.
	jumbo := newSocketPair(b, afxdp.Options{BatchSize: 256, FrameSize: 4096}, netnstest.WithMTU(3500))
	b.Run("3500B/batch=256", func(b *testing.B) { benchFrameRate(b, jumbo, 3500, 256) })
}

// benchFrameRate sends b.N frames of size bytes from A to B in batches and
// counts them at B; the rate is what B received per second of the run.
func benchFrameRate(b *testing.B, p *socketPair, size, batch int) {
	frames := make([][]byte, batch)
	for i := range frames {
		frames[i] = makeFrame(make([]byte, size), p.b.HardwareAddr(), p.a.HardwareAddr(), uint32(i), size)
	}
	rx := make([][]byte, p.b.BatchSize())
	for { // drain what an earlier run left
		if n, _ := p.b.Recv(rx); n == 0 {
			break
		}
	}
	before, _ := p.b.Stats()
	var received atomic.Int64
	var sendDone atomic.Bool
	var wg sync.WaitGroup
	want := int64(b.N)
	wg.Go(func() {
		var got int64
		var idleSince time.Time
		for got < want {
			n, err := p.b.Recv(rx)
			if err != nil {
				return
			}
			got += int64(n)
			received.Store(got)
			if n > 0 || !sendDone.Load() {
				idleSince = time.Time{}
				continue
			}
			if idleSince.IsZero() {
				idleSince = time.Now()
			} else if time.Since(idleSince) > 100*time.Millisecond {
				return // the rest was lost
			}
		}
	})
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for sent := 0; sent < b.N; {
		n := min(batch, b.N-sent)
		if _, err := p.a.Send(frames[:n]); err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	sendDone.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	got := received.Load()
	after, _ := p.b.Stats()
	b.ReportMetric(float64(got)/elapsed.Seconds()/1e6, "Mpps")
	b.ReportMetric(100*float64(int64(b.N)-got)/float64(b.N), "loss-%")
	if lost := after.RxDropped + after.RxRingFull - before.RxDropped - before.RxRingFull; lost > 0 {
		b.Logf("%d of %d frames dropped at the receiver (XDP_STATISTICS)", lost, b.N)
	}
}
