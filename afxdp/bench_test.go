//go:build linux

package afxdp_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/internal/netnstest"
)

// Benchmarks, each family side by side in one run, since absolute numbers
// on a shared machine drift:
//
//	BenchmarkPingPong/{afxdp,afxdp-wait,udp,udp-spin}: round trip of a
//	  64-byte frame (AF_XDP) or datagram (kernel UDP) on one veth pair;
//	  ns/op is the mean RTT, p50-ns and p99-ns its percentiles.
//	BenchmarkFrameRate/{64B,1500B}/batch={64,256}, 3500B/batch=256:
//	  one-way AF_XDP frame rate from one sender goroutine; ns/op per frame,
//	  Mpps (counted at the receiver), MB/s.
//	BenchmarkFrameRatePath/*: variants of 64B/batch=256 that show where
//	  the time goes (receiver program and mode, threaded NAPI, TX budget,
//	  ring size, receiver waiting, GOMAXPROCS, raw vs ordinary sendto).
//	  Each sub-benchmark has a veth pair of its own.
//
// The frame-rate benchmarks also report send-Mpps (the sender's own rate),
// loss-% (frames sent but not counted at B), sendto/kf (sendto calls per
// 1000 frames) and ctxsw/kf (context switches of the process per 1000
// frames). Run: go test -run NONE -bench FrameRate -benchtime 2000000x ./afxdp/

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

// rateCase is one configuration of the one-way frame-rate benchmark: an
// AF_XDP sender on A, and at B either an AF_XDP receiver or (drop) only an
// XDP program that counts and drops the frames.
type rateCase struct {
	name        string
	size, batch int  // frame size and frames per Send (default 64, 256)
	frameSize   int  // UMEM chunk size of both sockets (default 2048)
	mtu         int  // MTU of the veth pair (default 1500)
	native      bool // B's program in native (driver) mode instead of generic
	drop        bool // B's program counts and drops the frames: no AF_XDP receive
	// noXDP: no program at B; the frames go to B's kernel stack, which
	// drops them (unknown EtherType). Nothing counts them: the rate is the
	// sender's, whose sendto returns once the receive path has run.
	noXDP bool
	// sysfs: files under B's /sys/class/net/<dev>/ to write before the run
	// (threaded NAPI), value by path.
	sysfs    map[string]string
	txBudget int  // the sender's Options.TxBudget (default: the batch)
	fill     int  // the receiver's fill and RX ring sizes (default 2048)
	wait     bool // the receiver sleeps in Wait when idle instead of spinning
	procs    int  // GOMAXPROCS during the run (default: unchanged)
	lock     bool // sender and receiver goroutines locked to their OS threads
	cooked   bool // ordinary sendto calls, not raw ones (see kick in sys_linux.go)
}

func (c rateCase) withDefaults() rateCase {
	if c.size == 0 {
		c.size = 64
	}
	if c.batch == 0 {
		c.batch = 256
	}
	if c.frameSize == 0 {
		c.frameSize = afxdp.DefaultFrameSize
	}
	return c
}

// BenchmarkFrameRate measures the one-way frame rate from one sender
// goroutine at the sizes and batches of issue 3, an AF_XDP socket at each
// end, generic XDP at the receiver.
func BenchmarkFrameRate(b *testing.B) {
	var cases []rateCase
	for _, size := range []int{64, 1500} {
		for _, batch := range []int{64, 256} {
			cases = append(cases, rateCase{name: fmt.Sprintf("%dB/batch=%d", size, batch), size: size, batch: batch})
		}
	}
	// 3500-byte frames need 4 KB chunks and a link MTU above 3486.
	cases = append(cases, rateCase{name: "3500B/batch=256", size: 3500, frameSize: 4096, mtu: 3500})
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) { benchFrameRate(b, c) })
	}
}

// BenchmarkFrameRatePath takes BenchmarkFrameRate's 64B/batch=256 case
// apart, side by side, to show where the time goes (the frame-rate notes
// in doc.go discuss a run). On veth, the receiving end's work (generic XDP,
// or native XDP in veth's NAPI, and the AF_XDP receive copy) runs in a
// softirq inside the sender's sendto, on the sender's CPU, unless threaded
// NAPI moves it to a kernel thread.
//
//	xsk-generic      the base case: AF_XDP receiver, generic XDP at B
//	drop-generic     B's program counts and drops: the sender and the
//	                 receive path up to XDP, without the AF_XDP receive
//	no-xdp           no program at B: sender, veth and B's stack only
//	xsk-native       native XDP at B (veth's NAPI, in the same softirq)
//	drop-native
//	xsk-native-threaded, drop-native-threaded
//	                 native XDP with threaded NAPI at B: the receive path
//	                 runs in a kernel thread, on the other CPU
//	xsk-native-threaded-wait
//	                 the same with a receiver that sleeps in Wait instead of
//	                 spinning on the CPU the NAPI thread needs
//	budget=32        the kernel's default TX budget: a sendto per 32 frames
//	fill=4096        a larger receiver fill (and RX) ring
//	recv-wait        the receiver sleeps in Wait instead of spinning
//	procs=3          GOMAXPROCS 3 on 2 CPUs: an idle P, so sysmon does not
//	                 take the P of a sender in a system call
//	locked           sender and receiver locked to their OS threads
//	syscall, syscall-drop
//	                 xsk-generic and drop-generic with ordinary (scheduler-
//	                 aware) sendto calls instead of raw ones
func BenchmarkFrameRatePath(b *testing.B) {
	threaded := map[string]string{"threaded": "1"}
	for _, c := range []rateCase{
		{name: "xsk-generic"},
		{name: "drop-generic", drop: true},
		{name: "no-xdp", noXDP: true},
		{name: "xsk-native", native: true},
		{name: "drop-native", native: true, drop: true},
		{name: "xsk-native-threaded", native: true, sysfs: threaded},
		{name: "drop-native-threaded", native: true, drop: true, sysfs: threaded},
		{name: "xsk-native-threaded-wait", native: true, wait: true, sysfs: threaded},
		{name: "budget=32", txBudget: 32},
		{name: "fill=4096", fill: 4096},
		{name: "recv-wait", wait: true},
		{name: "procs=3", procs: 3},
		{name: "locked", lock: true},
		{name: "syscall", cooked: true},
		{name: "syscall-drop", cooked: true, drop: true},
	} {
		b.Run(c.name, func(b *testing.B) { benchFrameRate(b, c) })
	}
}

// dropper is an XDP program that counts the frames of etherType in a
// per-CPU counter and drops them; everything else passes.
type dropper struct {
	counts *ebpf.Map
}

func newDropper(tb testing.TB, h *netnstest.Host, mode link.XDPAttachFlags) *dropper {
	tb.Helper()
	counts, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		tb.Fatalf("creating counter map: %v", err)
	}
	tb.Cleanup(func() { counts.Close() })
	const (
		xdpDrop, xdpPass = 1, 2
		etherTypeLE16    = etherType>>8 | (etherType&0xff)<<8
	)
	insns := asm.Instructions{
		asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
		asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, afxdp.EthernetHeaderLen),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JNE.Imm(asm.R5, etherTypeLE16, "pass"),
		// (*bpf_map_lookup_elem(&counts, &0))++
		asm.StoreImm(asm.R10, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, counts.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "drop"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, xdpDrop).WithSymbol("drop"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "xam_test_drop", Type: ebpf.XDP, License: "GPL", Instructions: insns,
	})
	if err != nil {
		tb.Fatalf("loading counting XDP program: %v", err)
	}
	tb.Cleanup(func() { prog.Close() })
	var l link.Link
	if err := h.Do(func() (err error) {
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: h.Index, Flags: mode})
		return err
	}); err != nil {
		tb.Fatalf("attaching counting XDP program to %s: %v", h, err)
	}
	tb.Cleanup(func() { l.Close() })
	return &dropper{counts: counts}
}

// count returns the number of frames dropped so far.
func (d *dropper) count() (uint64, error) {
	var per []uint64
	if err := d.counts.Lookup(uint32(0), &per); err != nil {
		return 0, err
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

// benchFrameRate sends b.N frames from A to B in batches and counts them
// at B; the rate is what B counted per second of the run, from the first
// Send until B has counted everything (or nothing more for 100ms).
func benchFrameRate(b *testing.B, c rateCase) {
	c = c.withDefaults()
	if c.procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(c.procs))
	}
	if c.cooked {
		defer afxdp.SetRawKickBudget(afxdp.SetRawKickBudget(0))
	}
	var vopts []netnstest.Option
	if c.mtu > 0 {
		vopts = append(vopts, netnstest.WithMTU(c.mtu))
	}
	veth := netnstest.NewVethPair(b, vopts...)
	mode := link.XDPGenericMode
	if c.native {
		mode = link.XDPDriverMode
	}
	rxOpts := afxdp.Options{BatchSize: 256, FrameSize: c.frameSize}
	if c.fill > 0 {
		rxOpts.FillSize, rxOpts.RxSize = c.fill, c.fill
	}
	var rcv *afxdp.Socket
	var drop *dropper
	switch {
	case c.noXDP:
	case c.drop:
		drop = newDropper(b, veth.B, mode)
	default:
		r := newRedirectorMode(b, veth.B, mode)
		rcv = openSocket(b, veth.B, rxOpts)
		r.register(b, rcv)
	}
	snd := openSocket(b, veth.A, afxdp.Options{BatchSize: 256, FrameSize: c.frameSize, TxBudget: c.txBudget})
	for path, v := range c.sysfs {
		setSysfs(b, veth.B, path, v)
	}

	frames := make([][]byte, c.batch)
	for i := range frames {
		frames[i] = makeFrame(make([]byte, c.size), veth.B.MAC, snd.HardwareAddr(), uint32(i), c.size)
	}
	var received atomic.Int64
	var sendDone atomic.Bool
	var wg sync.WaitGroup
	want := int64(b.N)
	var rxBefore afxdp.Stats
	switch {
	case c.noXDP:
		wg.Go(func() {
			for !sendDone.Load() {
				time.Sleep(time.Millisecond)
			}
			received.Store(want)
		})
	case rcv != nil:
		rxBefore, _ = rcv.Stats()
		wg.Go(func() {
			if c.lock {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
			}
			rx := make([][]byte, rcv.BatchSize())
			var got int64
			var idleSince time.Time
			for got < want {
				n, err := rcv.Recv(rx)
				if err != nil {
					return
				}
				got += int64(n)
				received.Store(got)
				if n > 0 {
					idleSince = time.Time{}
					continue
				}
				if !sendDone.Load() {
					if c.wait {
						rcv.Wait(10 * time.Millisecond)
					}
					continue
				}
				if idleSince.IsZero() {
					idleSince = time.Now()
				} else if time.Since(idleSince) > 100*time.Millisecond {
					return // the rest was lost
				}
			}
		})
	default:
		base, err := drop.count()
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			var last int64
			var idleSince time.Time
			for {
				n, err := drop.count()
				if err != nil {
					b.Error(err)
					return
				}
				got := int64(n - base)
				received.Store(got)
				if got >= want {
					return
				}
				if got != last || !sendDone.Load() {
					last, idleSince = got, time.Time{}
				} else if idleSince.IsZero() {
					idleSince = time.Now()
				} else if time.Since(idleSince) > 100*time.Millisecond {
					return
				}
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	txBefore, _ := snd.Stats()
	if c.lock {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	var ru0 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	b.SetBytes(int64(c.size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for sent := 0; sent < b.N; {
		n := min(c.batch, b.N-sent)
		if _, err := snd.Send(frames[:n]); err != nil {
			b.Fatal(err)
		}
		sent += n
	}
	sendTime := time.Since(start)

	sendDone.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var ru1 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	got := received.Load()
	txAfter, _ := snd.Stats()
	b.ReportMetric(float64(got)/elapsed.Seconds()/1e6, "Mpps")
	b.ReportMetric(float64(b.N)/sendTime.Seconds()/1e6, "send-Mpps")
	b.ReportMetric(100*float64(int64(b.N)-got)/float64(b.N), "loss-%")
	b.ReportMetric(1000*float64(ru1.Nvcsw+ru1.Nivcsw-ru0.Nvcsw-ru0.Nivcsw)/float64(b.N), "ctxsw/kf")
	b.ReportMetric(1000*float64(txAfter.TxKicks-txBefore.TxKicks)/float64(b.N), "sendto/kf")
	if rcv != nil {
		after, _ := rcv.Stats()
		if lost := after.RxDropped + after.RxRingFull - rxBefore.RxDropped - rxBefore.RxRingFull; lost > 0 {
			b.Logf("%d of %d frames dropped at the receiver (XDP_STATISTICS)", lost, b.N)
		}
	}
}

// setSysfs writes value to /sys/class/net/<dev>/<path> of h's veth end.
// A sysfs shows the devices of the network namespace of whoever mounted
// it, so a throwaway thread unshares its mount namespace, enters h's
// network namespace and mounts a sysfs of its own; the thread ends with
// its goroutine, still locked, and nothing else ever runs on it.
func setSysfs(tb testing.TB, h *netnstest.Host, path, value string) {
	tb.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare(CLONE_NEWNS): %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("making mounts private: %w", err)
			}
			if err := unix.Setns(int(h.Handle), unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("setns: %w", err)
			}
			dir, err := os.MkdirTemp("", "xam-sysfs-")
			if err != nil {
				return err
			}
			defer os.Remove(dir)
			if err := unix.Mount("sysfs", dir, "sysfs", 0, ""); err != nil {
				return fmt.Errorf("mounting sysfs: %w", err)
			}
			defer unix.Unmount(dir, unix.MNT_DETACH)
			return os.WriteFile(filepath.Join(dir, "class/net", h.Link, path), []byte(value), 0)
		}()
	}()
	if err := <-errc; err != nil {
		tb.Fatalf("%s: writing %q to %s: %v", h, value, path, err)
	}
}
