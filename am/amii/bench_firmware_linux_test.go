//go:build linux

package amii

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
	"github.com/xam-project/xam/nicfw/daemon/daemontest"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// benchCores reads XAM_BENCH_CORES, "APP,ENGINE_A,ENGINE_B" (e.g. 2,8,10):
// the CPU of the benchmark's goroutine and those of the two hosts'
// engines. Unset or malformed: no pinning (ok false).
func benchCores(tb testing.TB) (app, ea, eb int, ok bool) {
	s := os.Getenv("XAM_BENCH_CORES")
	if s == "" {
		return 0, 0, 0, false
	}
	f := strings.Split(s, ",")
	var n [3]int
	if len(f) != 3 {
		tb.Fatalf("XAM_BENCH_CORES %q: want APP,ENGINE_A,ENGINE_B", s)
	}
	for i, x := range f {
		v, err := strconv.Atoi(x)
		if err != nil {
			tb.Fatalf("XAM_BENCH_CORES %q: %v", s, err)
		}
		n[i] = v
	}
	return n[0], n[1], n[2], true
}

// pinThread locks the calling goroutine to its thread and that thread to
// cpu, until the returned function runs.
func pinThread(tb testing.TB, cpu int) (unpin func()) {
	runtime.LockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		tb.Fatal(err)
	}
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		tb.Fatalf("pinning to CPU %d: %v", cpu, err)
	}
	return func() {
		unix.SchedSetaffinity(0, &old)
		runtime.UnlockOSThread()
	}
}

// BenchmarkAMIIRoundTripFirmware is BenchmarkAMIIRoundTrip (two arguments)
// in firmware mode: each host's engine runs in a daemon's thread, the two
// daemons joined by a memlink pair, and the benchmark's goroutine is both
// hosts' application, reaching each engine through its endpoint's shared
// memory. Beside BenchmarkAMIIRoundTrip it is what the hand-offs between
// application and engine add to a round trip (four of them), with no wire
// and no system calls on the message path. busy: the engines never yield
// (daemon.BusyPoll); adaptive: they yield between idle turns, as deployed.
// On a machine of many cores, XAM_BENCH_CORES=APP,ENGINE_A,ENGINE_B puts
// the application and the engines on CPUs of their own; "handoff" is then
// the floor: one cache line's round trip between the application's CPU and
// engine A's.
func BenchmarkAMIIRoundTripFirmware(b *testing.B) {
	for _, c := range []struct {
		name  string
		sleep time.Duration
		group bool
		wait  bool
	}{
		{"busy", daemon.BusyPoll, false, false},
		{"adaptive", daemon.DefaultSleep, false, false},
		{"group", daemon.BusyPoll, true, false},
		{"group,wait", daemon.BusyPoll, true, true},
		{"group,adaptive,wait", daemon.DefaultSleep, true, true},
	} {
		b.Run(c.name, func(b *testing.B) { amiiRoundTripFirmware(b, c.sleep, c.group, c.wait) })
	}
	b.Run("handoff", benchHandoff)
}

func amiiRoundTripFirmware(b *testing.B, sleep time.Duration, group, wait bool) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { la.Close(); lb.Close() })
	firmwareRoundTrips(b, [2]benchLink{la, lb}, [2]net.HardwareAddr{la.HardwareAddr(), lb.HardwareAddr()}, sleep, group, wait)
}

// firmwareRoundTrips is BenchmarkAMIIRoundTripFirmware's body on the links
// of hosts 1 and 2, whose addresses are macs.
func firmwareRoundTrips(b *testing.B, links [2]benchLink, macs [2]net.HardwareAddr, sleep time.Duration, group, wait bool) {
	app, ca, cb, pinned := benchCores(b)
	if sleep == daemon.BusyPoll && !group && !pinned && runtime.NumCPU() < 4 {
		b.Skip("busy engines need cores of their own: set XAM_BENCH_CORES on a machine of 4 CPUs or more")
	}
	dir := b.TempDir()
	var socks [2]string
	var ds []*daemon.Daemon
	for i, l := range links {
		cfg := daemon.Config{
			Engine: nicfw.EngineConfig{Host: HostID(i + 1)},
			Hosts:  map[nicfw.HostID]net.HardwareAddr{nicfw.HostID(2 - i): macs[1-i]},
			Socket: filepath.Join(dir, strconv.Itoa(i)+".sock"),
			Sleep:  sleep,
		}
		if pinned {
			cfg.Cores = []int{[]int{ca, cb}[i]}
		}
		d, err := daemon.New(l, cfg)
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, d)
		socks[i] = cfg.Socket
	}
	if group {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- daemon.RunGroup(ctx, ds...) }()
		b.Cleanup(func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				b.Errorf("daemons: %v", err)
			}
		})
	} else {
		for _, d := range ds {
			daemontest.Run(b, d)
		}
	}
	if pinned {
		defer pinThread(b, app)()
	}
	dial := func(sock string, peer HostID) *Endpoint {
		a, err := Dial(sock, VNet{ID: 1, Tag: amiiRed, Table: []Name{{Host: peer, Endpoint: 1}}}, Config{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { a.Close() })
		return a
	}
	var waitFn func(*Endpoint)
	if wait {
		waitFn = func(a *Endpoint) {
			if _, err := a.Wait(time.Second); err != nil {
				b.Fatal(err)
			}
		}
	}
	echoRoundTrips(b, dial(socks[0], 2), dial(socks[1], 1), links[0], links[1], []uint64{1, 2}, waitFn)
}

// benchHandoff is the round trip of one cache line between the
// benchmark's CPU and engine A's (XAM_BENCH_CORES): the floor of what a
// hand-off between application and engine costs.
func benchHandoff(b *testing.B) {
	app, ca, _, pinned := benchCores(b)
	if !pinned {
		b.Skip("set XAM_BENCH_CORES")
	}
	// Both sides spin: with one P (-cpu 1) they would take turns at
	// the scheduler's preemption, every 10 ms.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	var line struct {
		_ [64]byte
		v atomic.Uint64
		_ [64]byte
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer pinThread(b, ca)()
		want := uint64(1)
		for {
			switch line.v.Load() {
			case ^uint64(0):
				return
			case want:
				line.v.Store(want + 1)
				want += 2
			}
		}
	}()
	defer pinThread(b, app)()
	next := uint64(1)
	for b.Loop() {
		line.v.Store(next)
		for line.v.Load() != next+1 {
		}
		next += 2
	}
	line.v.Store(^uint64(0))
	<-done
}

// BenchmarkAMIIRoundTripAFXDP is BenchmarkAMIIRoundTrip (two arguments)
// and BenchmarkAMIIRoundTripFirmware's group cases over AF_XDP, each on a
// veth pair of its own with xam's XDP program: inline, the engines run in
// the benchmark's goroutine; group, in one daemon thread (busy-polling)
// while the benchmark's goroutine is both hosts' application, polling
// (group) or in Wait (group,wait). Two threads in all, so on a machine of
// two CPUs XAM_BENCH_CORES=0,1,1 gives each a core of its own: beside
// inline it is what firmware mode's hand-offs add over a real wire, where
// the engine's system calls (the transmit kicks) leave the application's
// thread.
func BenchmarkAMIIRoundTripAFXDP(b *testing.B) {
	veth := func(b *testing.B) (links [2]benchLink, macs [2]net.HardwareAddr) {
		v := netnstest.NewVethPair(b, netnstest.WithQueues(1))
		for i, h := range []*netnstest.Host{v.A, v.B} {
			_, links[i] = xdptest.Open(b, h.Do, h.Index, h.MAC, 0, uint64(1+i))
			macs[i] = h.MAC
		}
		return links, macs
	}
	b.Run("inline", func(b *testing.B) {
		links, macs := veth(b)
		ha, hb := inlinePair(b, [2]afxdp.Link{links[0], links[1]}, macs, nicfw.EngineConfig{})
		if app, _, _, pinned := benchCores(b); pinned {
			defer pinThread(b, app)()
		}
		echoRoundTrips(b, ha, hb, links[0], links[1], []uint64{1, 2}, nil)
	})
	for _, wait := range []bool{false, true} {
		name := "group"
		if wait {
			name += ",wait"
		}
		b.Run(name, func(b *testing.B) {
			links, macs := veth(b)
			firmwareRoundTrips(b, links, macs, daemon.BusyPoll, true, wait)
		})
	}
}
