package lab

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/internal/testenv"
)

var labs atomic.Int32

// testLab builds a lab with a name unique to this process and removes it in
// the test's cleanup.
func testLab(t *testing.T, cfg Config) *Lab {
	t.Helper()
	testenv.RequirePrivileged(t)
	cfg.Name = fmt.Sprintf("t%d_%d", os.Getpid(), labs.Add(1))
	l, err := Up(cfg)
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Down(); err != nil {
			t.Errorf("Down: %v", err)
		}
		if left, _ := Namespaces(Prefix + l.Name + "-"); len(left) != 0 {
			t.Errorf("namespaces left after Down: %v", left)
		}
	})
	return l
}

// udpExchange sends a datagram from a to b and an answer back, over kernel
// sockets created in each host's namespace.
func udpExchange(t *testing.T, a, b *Host) {
	t.Helper()
	udpExchangeTo(t, a, b, b.Addr.Addr())
}

// udpExchangeTo is udpExchange to b's address to. A datagram may be lost
// while the lab's neighbours are still being resolved (a router queues
// few packets for an unresolved one, and a loaded machine may take its
// time), so a sends again every 200 ms until b's answer comes, for up to
// 10 s; b answers each datagram.
func udpExchangeTo(t *testing.T, a, b *Host, to netip.Addr) {
	t.Helper()
	var ca, cb *net.UDPConn
	if err := b.Do(func() (err error) {
		cb, err = net.ListenUDP("udp", &net.UDPAddr{IP: to.AsSlice(), Port: 7777})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	if err := a.Do(func() (err error) {
		ca, err = net.DialUDP("udp", nil, &net.UDPAddr{IP: to.AsSlice(), Port: 7777})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	deadline := time.Now().Add(10 * time.Second)
	cb.SetDeadline(deadline)
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 16)
		for {
			n, from, err := cb.ReadFromUDP(buf)
			if err != nil {
				got <- err.Error()
				return
			}
			if string(buf[:n]) != "ping" {
				got <- fmt.Sprintf("%q", buf[:n])
				return
			}
			if _, err := cb.WriteToUDP([]byte("pong"), from); err != nil {
				got <- err.Error()
				return
			}
		}
	}()
	buf := make([]byte, 16)
	for {
		if _, err := ca.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		ca.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := ca.Read(buf)
		if err == nil && string(buf[:n]) == "pong" {
			return
		}
		select {
		case why := <-got:
			t.Fatalf("%s -> %s: %s", a.Name, b.Name, why)
		default:
		}
		if err == nil {
			t.Fatalf("%s <- %s: %q", a.Name, b.Name, buf[:n])
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s <-> %s: no answer in 10 s: %v", a.Name, b.Name, err)
		}
	}
}

func TestPointToPoint(t *testing.T) {
	l := testLab(t, Config{MTU: 3000})
	if len(l.Hosts) != 2 || l.Switch != nil {
		t.Fatalf("lab %+v", l)
	}
	for i, h := range l.Hosts {
		if h.NS != fmt.Sprintf("xam-%s-h%d", l.Name, i) || h.Link != "eth0" || h.MTU != 3000 || len(h.MAC) != 6 || h.Queues != 1 {
			t.Errorf("host %d: %+v", i, h)
		}
		if got := h.Addr.String(); got != fmt.Sprintf("10.0.0.%d/24", i+1) {
			t.Errorf("host %d address %s", i, got)
		}
	}
	udpExchange(t, l.Hosts[0], l.Hosts[1])
	udpExchange(t, l.Hosts[1], l.Hosts[0])

	if _, err := Up(Config{Name: l.Name}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("second Up with the same name: %v", err)
	}
	if names, _ := List(); !contains(names, l.Name) {
		t.Errorf("List() = %v, lacks %s", names, l.Name)
	}
	js, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"netns":"xam-` + l.Name + `-h0"`, `"mac":"` + l.Hosts[1].MAC.String() + `"`, `"ipv4":"10.0.0.2/24"`, `"interface":"eth0"`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("JSON %s lacks %s", js, want)
		}
	}
}

// TestRouted: hosts on subnets of their own reach each other through the
// router namespace, over IPv4 and IPv6, and the router's ports are the
// hosts' gateways.
func TestRouted(t *testing.T) {
	l := testLab(t, Config{Hosts: 3, Routed: true, MTU: 9000})
	if l.Switch != nil || l.Router == nil || len(l.Router.Ports) != 3 {
		t.Fatalf("lab %+v, router %+v", l, l.Router)
	}
	for i, h := range l.Hosts {
		if got, want := h.Addr.String(), fmt.Sprintf("10.0.%d.1/24", i+1); got != want {
			t.Errorf("host %d: address %s, want %s", i, got, want)
		}
		if got, want := h.Addr6.String(), fmt.Sprintf("fd00:0:0:%d::1/64", i+1); got != want {
			t.Errorf("host %d: address %s, want %s", i, got, want)
		}
		if got, want := l.Router.Addrs[i].String(), fmt.Sprintf("10.0.%d.254/24", i+1); got != want {
			t.Errorf("router port %d: %s, want %s", i, got, want)
		}
	}
	a, b := l.Hosts[0], l.Hosts[2]
	for _, to := range []netip.Addr{b.Addr.Addr(), b.Addr6.Addr()} {
		udpExchangeTo(t, a, b, to)
	}
	udpExchangeTo(t, l.Hosts[1], a, a.Addr6.Addr())
	// The path goes through the router: h0's route to h2 has the router
	// as its gateway.
	var routes []netlink.Route
	err := a.Do(func() (err error) {
		routes, err = netlink.RouteGet(b.Addr.Addr().AsSlice())
		return err
	})
	if err != nil || len(routes) != 1 || !routes[0].Gw.Equal(l.Router.Addrs[0].Addr().AsSlice()) {
		t.Errorf("h0's route to %v: %+v, %v; want via %v", b.Addr, routes, err, l.Router.Addrs[0].Addr())
	}
	if _, err := Up(Config{Name: "bad", Routed: true, Switch: true}); err == nil {
		t.Error("a routed and switched lab was built")
	}
}

func TestStarWithShapedPorts(t *testing.T) {
	l := testLab(t, Config{Hosts: 3, PortRate: 100_000_000, PortBuffer: 32 << 10})
	sw := l.Switch
	if sw == nil || len(sw.Ports) != 3 {
		t.Fatalf("switch %+v", sw)
	}
	udpExchange(t, l.Hosts[0], l.Hosts[2])
	udpExchange(t, l.Hosts[1], l.Hosts[0])
	for i, name := range sw.Ports {
		port, err := sw.Netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		qs, err := sw.Netlink.QdiscList(port)
		if err != nil {
			t.Fatal(err)
		}
		var tbf *netlink.Tbf
		for _, q := range qs {
			if q, ok := q.(*netlink.Tbf); ok {
				tbf = q
			}
		}
		if tbf == nil || tbf.Rate != 100_000_000/8 || tbf.Limit != 32<<10 {
			t.Errorf("port %s: qdiscs %v, want tbf 100 Mbit limit 32 KiB", name, qs)
		}
		neighs, err := sw.Netlink.NeighList(port.Attrs().Index, unix.AF_BRIDGE)
		if err != nil {
			t.Fatal(err)
		}
		static := false
		for _, n := range neighs {
			if n.HardwareAddr.String() == l.Hosts[i].MAC.String() && n.State&netlink.NUD_NOARP != 0 {
				static = true
			}
		}
		if !static {
			t.Errorf("port %s has no static FDB entry for %v: %v", name, l.Hosts[i].MAC, neighs)
		}
	}
}

func TestDownAll(t *testing.T) {
	testenv.RequirePrivileged(t)
	name := fmt.Sprintf("t%d_all", os.Getpid())
	l, err := Up(Config{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	l.Close() // as `xam lab up` does: the lab outlives the handles
	// A leftover of a crashed run: a lone namespace with a lab's name.
	leftover := fmt.Sprintf("t%d_crash", os.Getpid())
	ns, err := NewNamespace(Prefix + leftover + "-h0")
	if err != nil {
		t.Fatal(err)
	}
	ns.Close()
	t.Cleanup(func() { Down(name); Down(leftover) })

	// DownAll as such would also remove the labs of tests running in
	// parallel in other packages; its matching is limited to this test's.
	mine := fmt.Sprintf("t%d_", os.Getpid())
	removed, err := downMatching(func(lab string) bool { return strings.HasPrefix(lab, mine) })
	if err != nil {
		t.Fatal(err)
	}
	if !contains(removed, name) || !contains(removed, leftover) {
		t.Errorf("removed %v, want %s and %s", removed, name, leftover)
	}
	for _, n := range []string{name, leftover} {
		if left, _ := Namespaces(Prefix + n + "-"); len(left) != 0 {
			t.Errorf("left after DownAll: %v", left)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Name: "bad name"}, {Name: "a-b"}, {Hosts: 1}, {Hosts: 251},
		{PortRate: 1000}, {MTU: 10}, {Queues: 65},
	} {
		if _, err := Up(cfg); err == nil {
			t.Errorf("Up(%+v) succeeded", cfg)
		}
	}
	if err := Down("../etc"); err == nil {
		t.Error("Down with a bad name succeeded")
	}
}

func TestSplitName(t *testing.T) {
	for ns, want := range map[string]string{
		"xam-lab-h0": "lab/h0", "xam-my_lab-sw": "my_lab/sw", "xam-x-h12": "x/h12",
		"xamt-1-a": "", "xam-lab": "", "xam-lab-eth0": "", "other": "",
	} {
		lab, node, ok := splitName(ns)
		got := ""
		if ok {
			got = lab + "/" + node
		}
		if got != want {
			t.Errorf("splitName(%q) = %q, want %q", ns, got, want)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestHelperFailingLab is run by TestCleanupAfterFailure in a child
// process: it builds a lab the way tests do and fails.
func TestHelperFailingLab(t *testing.T) {
	if os.Getenv("XAM_LAB_FAILING_CHILD") != "1" {
		return
	}
	l := testLab(t, Config{Hosts: 3})
	fmt.Printf("LAB %s\n", l.Name)
	t.Fatal("failing on purpose")
}

func TestCleanupAfterFailure(t *testing.T) {
	testenv.RequirePrivileged(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFailingLab$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "XAM_LAB_FAILING_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the failing child passed:\n%s", out)
	}
	var name string
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "LAB "); ok {
			name = rest
		}
	}
	if name == "" {
		t.Fatalf("the child built no lab:\n%s", out)
	}
	if left, _ := Namespaces(Prefix + name + "-"); len(left) != 0 {
		Down(name)
		t.Fatalf("the failed test left %v behind", left)
	}
	// Nothing of it in the root namespace either: no bridge, no veth.
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if n := l.Attrs().Name; n == "br0" || strings.HasPrefix(n, "p") && l.Type() == "veth" {
			t.Errorf("link %s (%s) in the root namespace", n, l.Type())
		}
	}
}
