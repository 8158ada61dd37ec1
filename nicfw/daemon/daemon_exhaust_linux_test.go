//go:build linux

package daemon

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// heap returns the bytes of heap, and of goroutine stacks, in use after a
// collection.
func heap() (heap, stacks int64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse), int64(m.StackInuse)
}

// rssKB returns the process's resident set (VmRSS), in KiB.
func rssKB() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int64
			for _, c := range strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(f), "kB")) {
				kb = 10*kb + int64(c-'0')
			}
			return kb
		}
	}
	return 0
}

// TestDaemonConnectionFlood: a flood of 10,000 connections past the
// user's quota, all held open, costs the daemon next to nothing: each is
// refused in the accepting goroutine (no goroutine, no buffer of its own),
// and the daemon's heap and goroutines stay where they were. An idle
// connection it serves holds no request buffer either. Before, each
// refused connection had a goroutine with a 64 KiB buffer for up to a
// second (a flood took the daemon from 32 MB to 1.01 GB), and each served
// one a 64 KiB buffer for its life.
func TestDaemonConnectionFlood(t *testing.T) {
	const served, flood = 64, 10000
	d, path, _ := hostileDaemon(t, Config{MaxConnsPerUser: served, MaxConns: 4 * served})
	heap0, stacks0 := heap()
	goroutines, rss := runtime.NumGoroutine(), rssKB()
	var conns []*Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range served {
		c, err := Dial(path)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Stats(); err != nil {
			t.Fatal(err)
		}
	}
	heap1, stacks1 := heap()
	if per := (heap1 - heap0) / served; per > 16<<10 {
		t.Errorf("an idle connection takes %d bytes of heap (both sides), want at most 16 KiB", per)
	}
	// The flood: bare sockets (the test's side costs 4 bytes each), held
	// open, sending nothing.
	fds := make([]int, 0, flood)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	sa := &unix.SockaddrUnix{Name: path}
	start := time.Now()
	for range flood {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("after %d connections: %v", len(fds), err)
		}
		fds = append(fds, fd)
		if err := unix.Connect(fd, sa); err != nil {
			t.Fatalf("after %d connections: %v", len(fds), err)
		}
	}
	waitFor(t, "the flood refused", func() bool { s, _ := d.Stats(); return s.Refused >= flood })
	t.Logf("%d connections refused in %v", flood, time.Since(start))
	heap2, stacks2 := heap()
	grew := heap2 - heap1 + stacks2 - stacks1
	more := runtime.NumGoroutine() - goroutines - served
	t.Logf("the flood held: heap and stacks +%d KiB, goroutines +%d; %d served connections: heap +%d KiB, stacks +%d KiB; RSS %d -> %d KiB",
		grew>>10, more, served, (heap1-heap0)>>10, (stacks1-stacks0)>>10, rss, rssKB())
	if grew > 8<<20 || more > 16 {
		t.Errorf("%d refused connections held open: heap and stacks +%d bytes, %d more goroutines; want at most 8 MiB and 16",
			flood, grew, more)
	}
	// Each refused connection has its reason waiting, typed.
	buf := make([]byte, 4096)
	for _, fd := range []int{fds[0], fds[flood/2], fds[flood-1]} {
		n, err := unix.Read(fd, buf)
		if err != nil || !strings.Contains(string(buf[:n]), `"code":"quota"`) {
			t.Errorf("a refused connection reads %q, %v", buf[:max(n, 0)], err)
		}
	}
	s, err := conns[0].Stats()
	if err != nil || s.Connections != served {
		t.Errorf("after the flood: %d connections, %v", s.Connections, err)
	}
}

// TestDaemonConnectionBound: MaxConns bounds the connections of all users
// together; past it a connection is refused with ErrQuota (here one user,
// under its own quota), and served again once one closes.
func TestDaemonConnectionBound(t *testing.T) {
	_, path, _ := hostileDaemon(t, Config{MaxConns: 3, MaxConnsPerUser: 100})
	var conns []*Conn
	for range 3 {
		c, err := Dial(path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Stats(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	over, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = over.Stats()
	over.Close()
	if !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "the daemon has 3 connections open") {
		t.Errorf("a fourth connection: %v, want ErrQuota", err)
	}
	conns[0].Close()
	waitFor(t, "a connection after one closed", func() bool { return served(path) })
}

// TestDaemonBigCloseOffEngine: closing a large endpoint whose application
// has gone (its mapping with it) does not stall the engine: the page
// tables of the engine's mapping are dropped and the pages freed outside
// the engine goroutine (the daemon's releases count it), so that an engine
// round trip of another client (Daemon.do, as every socket request makes)
// waits far less than the release of such a memory takes, measured side by
// side. Before, the engine unmapped and freed it in its own thread: an
// 811 MB endpoint stalled others' requests by 143 ms.
func TestDaemonBigCloseOffEngine(t *testing.T) {
	const staging = 256 << 20
	var inEngine atomic.Int64 // the longest the engine took to close an endpoint, this trial
	engineClosed = func(dt time.Duration) {
		if int64(dt) > inEngine.Load() {
			inEngine.Store(int64(dt))
		}
	}
	t.Cleanup(func() { engineClosed = func(time.Duration) {} }) // after the daemon stops
	d, path, _ := hostileDaemon(t, Config{UserMemory: 1 << 30, Sleep: 50 * time.Microsecond})
	cfg := endpoint.Config{StagingSize: staging, TableSize: len(oneEntry)}
	const trials = 3
	var release, stall, closing []time.Duration
	for range trials {
		inEngine.Store(0)
		// The baseline: unmapping and freeing such a memory, here.
		mem, err := endpoint.NewMemory(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		mem.Close()
		release = append(release, time.Since(t0))

		c, err := Dial(path)
		if err != nil {
			t.Fatal(err)
		}
		c.SetTimeout(time.Minute)
		ep, err := c.Open(OpenRequest{StagingSize: staging, Table: oneEntry})
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
		// The application goes: its mapping first, then its connection,
		// as a process that dies.
		ep.View.Close()
		unix.Close(ep.notify)
		unix.Close(ep.kick)
		var worst atomic.Int64
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() {
			for !stop.Load() {
				t0 := time.Now()
				if d.do(func() {}) != nil {
					return
				}
				if dt := int64(time.Since(t0)); dt > worst.Load() {
					worst.Store(dt)
				}
			}
		})
		time.Sleep(10 * time.Millisecond)
		c.Close()
		waitFor(t, "the endpoint closed", func() bool { s, _ := d.Stats(); return s.Endpoints == 0 })
		time.Sleep(50 * time.Millisecond)
		stop.Store(true)
		wg.Wait()
		stall = append(stall, time.Duration(worst.Load()))
		closing = append(closing, time.Duration(inEngine.Load()))
	}
	t.Logf("releasing a %d MiB endpoint here: %v; the engine closed one in %v; the longest engine round trip meanwhile: %v",
		staging>>20, release, closing, stall)
	if dt := slicesMin(closing); dt > slicesMin(release)/10 {
		t.Errorf("the engine took %v (least of %d) to close a %d MiB endpoint, a tenth or more of releasing its memory (%v): it released the memory itself",
			dt, trials, staging>>20, slicesMin(release))
	}
	if slicesMin(stall) > slicesMin(release)/2 {
		t.Errorf("closing a %d MiB endpoint stalled the engine %v (least of %d), half or more of what releasing it takes (%v)",
			staging>>20, slicesMin(stall), trials, slicesMin(release))
	}
	for bound := time.Now().Add(5 * time.Second); d.bigReleased.Load() != trials; time.Sleep(time.Millisecond) {
		if time.Now().After(bound) {
			t.Errorf("%d of %d large endpoints released by the daemon, off the engine's path", d.bigReleased.Load(), trials)
			break
		}
	}
}

func slicesMin(l []time.Duration) time.Duration {
	m := l[0]
	for _, x := range l[1:] {
		m = min(m, x)
	}
	return m
}
