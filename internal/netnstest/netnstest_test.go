//go:build linux

package netnstest_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/internal/testenv"
)

// TestMain checks, after all tests, that every thread of the process is in the
// namespace the process started in and that no namespace of this process is
// left.
func TestMain(m *testing.M) {
	start, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	if code == 0 {
		if err := checkThreads(start); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			code = 1
		}
		if left := namespacesOf(os.Getpid()); len(left) > 0 {
			fmt.Fprintln(os.Stderr, "FAIL: namespaces left behind:", left)
			code = 1
		}
	}
	os.Exit(code)
}

// checkThreads returns an error naming the threads not in namespace want.
func checkThreads(want string) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	var bad []string
	for _, task := range tasks {
		ns, err := os.Readlink(filepath.Join("/proc/self/task", task.Name(), "ns/net"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread ended meanwhile
		}
		if err != nil {
			return err
		}
		if ns != want {
			bad = append(bad, fmt.Sprintf("thread %s in %s", task.Name(), ns))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("threads outside %s: %s", want, strings.Join(bad, ", "))
	}
	return nil
}

// namespacesOf lists the named namespaces of process pid.
func namespacesOf(pid int) []string {
	matches, _ := filepath.Glob(fmt.Sprintf("/run/netns/%s%d-*", netnstest.Prefix, pid))
	return matches
}

// checkGone fails the test if namespace name still exists.
func checkGone(t *testing.T, name string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join("/run/netns", name)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("/run/netns/%s still there (Lstat: %v)", name, err)
	}
	if h, err := netns.GetFromName(name); err == nil {
		h.Close()
		t.Errorf("netns.GetFromName(%q) still succeeds", name)
	}
}

// exists reports whether namespace name exists.
func exists(name string) bool {
	h, err := netns.GetFromName(name)
	if err != nil {
		return false
	}
	h.Close()
	return true
}

// exchangeUDP sends a datagram from A to B and the answer back, over kernel
// sockets created in each namespace with Do and used from this goroutine.
func exchangeUDP(t *testing.T, p *netnstest.Pair) {
	t.Helper()
	var a, b *net.UDPConn
	err := p.B.Do(func() (err error) {
		b, err = net.ListenUDP("udp4", &net.UDPAddr{IP: p.B.Addr.Addr().AsSlice()})
		return err
	})
	if err != nil {
		t.Fatalf("listening in %s: %v", p.B, err)
	}
	defer b.Close()
	err = p.A.Do(func() (err error) {
		a, err = net.DialUDP("udp4", nil, b.LocalAddr().(*net.UDPAddr))
		return err
	})
	if err != nil {
		t.Fatalf("dialing from %s: %v", p.A, err)
	}
	defer a.Close()
	deadline := time.Now().Add(5 * time.Second)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)

	ping := []byte("ping " + p.A.NS)
	if _, err := a.Write(ping); err != nil {
		t.Fatalf("sending from %s: %v", p.A, err)
	}
	buf := make([]byte, 1500)
	n, from, err := b.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("receiving in %s: %v", p.B, err)
	}
	if !bytes.Equal(buf[:n], ping) || from.Addr() != p.A.Addr.Addr() {
		t.Fatalf("%s received %q from %v, want %q from %v", p.B, buf[:n], from, ping, p.A.Addr.Addr())
	}
	pong := []byte("pong " + p.B.NS)
	if _, err := b.WriteToUDPAddrPort(pong, from); err != nil {
		t.Fatalf("answering from %s: %v", p.B, err)
	}
	n, err = a.Read(buf)
	if err != nil {
		t.Fatalf("receiving the answer in %s: %v", p.A, err)
	}
	if !bytes.Equal(buf[:n], pong) {
		t.Fatalf("%s received %q, want %q", p.A, buf[:n], pong)
	}
}

func TestPair(t *testing.T) {
	p := netnstest.NewVethPair(t)
	if p.A.NS == p.B.NS || bytes.Equal(p.A.MAC, p.B.MAC) || p.A.Addr == p.B.Addr {
		t.Fatalf("A and B share a name, MAC or address: %+v %+v", p.A, p.B)
	}
	if p.A.Addr.Masked() != p.B.Addr.Masked() || p.A.Addr.Bits() != 24 {
		t.Errorf("addresses %v and %v not in one /24", p.A.Addr, p.B.Addr)
	}
	for _, h := range []*netnstest.Host{p.A, p.B} {
		if !strings.HasPrefix(h.NS, netnstest.Prefix) || len(h.Link) > 15 {
			t.Errorf("names %q / %q", h.NS, h.Link)
		}
		link, err := h.Netlink.LinkByName(h.Link)
		if err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		a := link.Attrs()
		if link.Type() != "veth" || a.Index != h.Index || !bytes.Equal(a.HardwareAddr, h.MAC) ||
			a.MTU != 1500 || h.MTU != 1500 || a.NumTxQueues != h.Queues || h.Queues < 1 {
			t.Errorf("%s: type %s index %d MAC %v MTU %d queues %d; recorded index %d MAC %v MTU %d queues %d",
				h, link.Type(), a.Index, a.HardwareAddr, a.MTU, a.NumTxQueues, h.Index, h.MAC, h.MTU, h.Queues)
		}
		if a.Flags&net.FlagUp == 0 || a.OperState != netlink.OperUp {
			t.Errorf("%s: flags %v operstate %v, want up", h, a.Flags, a.OperState)
		}
		addrs, err := h.Netlink.AddrList(link, netlink.FAMILY_V4)
		if err != nil || len(addrs) != 1 || addrs[0].IPNet.String() != h.Addr.String() {
			t.Errorf("%s: IPv4 addresses %v (%v), want %v", h, addrs, err, h.Addr)
		}
		if addrs, err := h.Netlink.AddrList(link, netlink.FAMILY_V6); err != nil || len(addrs) != 0 {
			t.Errorf("%s: IPv6 addresses %v (%v), want none", h, addrs, err)
		}
		lo, err := h.Netlink.LinkByName("lo")
		if err != nil || lo.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("%s: lo not up (%v)", h.NS, err)
		}
		// Do runs in the host's namespace.
		err = h.Do(func() error {
			cur, err := netns.Get()
			if err != nil {
				return err
			}
			defer cur.Close()
			if !cur.Equal(h.Handle) {
				return fmt.Errorf("Do ran in %v, not %v", cur, h.Handle)
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}

	exchangeUDP(t, p)

	// The exchange resolved each other's address to the recorded MAC.
	for _, c := range []struct{ h, peer *netnstest.Host }{{p.A, p.B}, {p.B, p.A}} {
		neighs, err := c.h.Netlink.NeighList(c.h.Index, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, n := range neighs {
			if n.IP.Equal(c.peer.Addr.Addr().AsSlice()) {
				found = true
				if !bytes.Equal(n.HardwareAddr, c.peer.MAC) {
					t.Errorf("%s resolves %v to %v, want %v", c.h, c.peer.Addr.Addr(), n.HardwareAddr, c.peer.MAC)
				}
			}
		}
		if !found {
			t.Errorf("%s has no neighbour entry for %v: %v", c.h, c.peer.Addr.Addr(), neighs)
		}
	}
}

func TestOptions(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithMTU(9000), netnstest.WithQueues(4), netnstest.WithIPv4(false))
	for _, h := range []*netnstest.Host{p.A, p.B} {
		link, err := h.Netlink.LinkByIndex(h.Index)
		if err != nil {
			t.Fatal(err)
		}
		a := link.Attrs()
		if a.MTU != 9000 || h.MTU != 9000 || a.NumTxQueues != 4 || a.NumRxQueues != 4 || h.Queues != 4 {
			t.Errorf("%s: MTU %d, %d TX and %d RX queues; recorded MTU %d, %d queues",
				h, a.MTU, a.NumTxQueues, a.NumRxQueues, h.MTU, h.Queues)
		}
		if addrs, err := h.Netlink.AddrList(link, netlink.FAMILY_ALL); err != nil || len(addrs) != 0 || h.Addr.IsValid() {
			t.Errorf("%s: addresses %v (%v), recorded %v; want none", h, addrs, err, h.Addr)
		}
		if a.OperState != netlink.OperUp {
			t.Errorf("%s: operstate %v", h, a.OperState)
		}
	}

	p = netnstest.NewVethPair(t, netnstest.WithIPv6(true))
	err := p.A.Do(func() error {
		b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + p.A.Link + "/disable_ipv6")
		if err == nil && strings.TrimSpace(string(b)) != "0" {
			err = fmt.Errorf("disable_ipv6 = %q", b)
		}
		return err
	})
	if err != nil {
		t.Errorf("WithIPv6(true): %v", err)
	}
}

func TestDo(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithIPv4(false))
	want := errors.New("from fn")
	if err := p.A.Do(func() error { return want }); !errors.Is(err, want) {
		t.Errorf("Do returned %v, want fn's error", err)
	}
	if err := p.A.Do(func() error { runtime.Goexit(); return nil }); err == nil {
		t.Errorf("Do after Goexit returned nil")
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "boom") {
				t.Errorf("recovered %v, want fn's panic", r)
			}
		}()
		p.B.Do(func() error { panic("boom") })
		t.Errorf("Do returned after fn panicked")
	}()
}

// TestCleanup checks that a pair's cleanup leaves nothing behind.
func TestCleanup(t *testing.T) {
	testenv.RequirePrivileged(t) // here, not only in the subtest
	var p *netnstest.Pair
	t.Run("pair", func(t *testing.T) {
		p = netnstest.NewVethPair(t)
		exchangeUDP(t, p)
	})
	if p == nil {
		t.Fatal("no pair created")
	}
	for _, h := range []*netnstest.Host{p.A, p.B} {
		checkGone(t, h.NS)
		if h.Handle.IsOpen() || h.Netlink != nil {
			t.Errorf("%s: handle %v or netlink socket still open", h, h.Handle)
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		a := l.Attrs()
		for _, h := range []*netnstest.Host{p.A, p.B} {
			if a.Name == h.Link || bytes.Equal(a.HardwareAddr, h.MAC) {
				t.Errorf("link %s (%v) of %s in the root namespace", a.Name, a.HardwareAddr, h)
			}
		}
	}
}

// helperEnv enables the TestHelper tests, which the tests below run in a
// child process; its value says which.
const helperEnv = "XAM_NETNSTEST_HELPER"

// helperLine is how a helper reports the pair it created.
var helperLine = regexp.MustCompile(`(?m)^netnstest-helper: A=(\S+) B=(\S+)$`)

func TestHelperFailingBody(t *testing.T) {
	if os.Getenv(helperEnv) != "failing-body" {
		return // a helper, run by TestCleanupAfterFailure in a child process
	}
	p := netnstest.NewVethPair(t)
	fmt.Printf("netnstest-helper: A=%s B=%s\n", p.A.NS, p.B.NS)
	t.Fatal("failing on purpose")
}

func TestHelperCrash(t *testing.T) {
	if os.Getenv(helperEnv) != "crash" {
		return // a helper, run by TestSweep in a child process
	}
	p := netnstest.NewVethPair(t)
	fmt.Printf("netnstest-helper: A=%s B=%s\n", p.A.NS, p.B.NS)
	syscall.Kill(os.Getpid(), syscall.SIGKILL) // no cleanup runs
	t.Fatal("still alive after SIGKILL")
}

// runHelper runs helper test name in a child process and returns its error,
// its output and the names of the namespaces it reported.
func runHelper(t *testing.T, name, mode string) (error, string, [2]string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	out, err := cmd.CombinedOutput()
	m := helperLine.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("%s reported no pair (%v):\n%s", name, err, out)
	}
	return err, string(out), [2]string{m[1], m[2]}
}

// TestCleanupAfterFailure checks that the pair of a test that fails with
// t.Fatal is removed.
func TestCleanupAfterFailure(t *testing.T) {
	testenv.RequirePrivileged(t) // the child would skip
	err, out, names := runHelper(t, "TestHelperFailingBody", "failing-body")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 || !strings.Contains(out, "--- FAIL: TestHelperFailingBody") {
		t.Errorf("child ended with %v, want a failure:\n%s", err, out)
	}
	for _, name := range names {
		checkGone(t, name)
	}
}

// TestSweep checks that Sweep removes the namespaces of a killed test process
// and keeps those of live ones.
func TestSweep(t *testing.T) {
	live := netnstest.NewVethPair(t, netnstest.WithIPv4(false))
	err, out, names := runHelper(t, "TestHelperCrash", "crash")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL:\n%s", err, out)
	}
	for _, name := range names {
		if !exists(name) {
			// Another test process may have swept first; the check below
			// still holds.
			t.Logf("%s already gone before Sweep", name)
		}
	}
	if err := netnstest.Sweep(); err != nil {
		t.Errorf("Sweep: %v", err)
	}
	for _, name := range names {
		checkGone(t, name)
	}
	for _, h := range []*netnstest.Host{live.A, live.B} {
		if !exists(h.NS) {
			t.Errorf("Sweep removed %s of a live process", h.NS)
		}
	}
}

// TestParallel creates pairs in parallel and checks that their names and
// addresses are distinct and that each pair carries traffic.
func TestParallel(t *testing.T) {
	var (
		mu   sync.Mutex
		seen = map[string]string{}
	)
	claim := func(t *testing.T, kind, v string) {
		mu.Lock()
		defer mu.Unlock()
		if by, dup := seen[kind+" "+v]; dup {
			t.Errorf("%s %s used by %s too", kind, v, by)
		}
		seen[kind+" "+v] = t.Name()
	}
	t.Run("group", func(t *testing.T) {
		for i := range 16 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				p := netnstest.NewVethPair(t)
				for _, h := range []*netnstest.Host{p.A, p.B} {
					claim(t, "namespace", h.NS)
					claim(t, "link", h.Link)
					claim(t, "address", h.Addr.String())
					claim(t, "MAC", h.MAC.String())
				}
				exchangeUDP(t, p)
			})
		}
	})
	if left := namespacesOf(os.Getpid()); len(left) > 0 {
		t.Errorf("namespaces left after the parallel tests: %v", left)
	}
}
