package loader

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/internal/netnstest"
)

// Tests of the program attached to real devices: veth pairs between two
// network namespaces (internal/netnstest), generic XDP unless said.

// attach attaches p to h's veth end in mode, detached at the end of the test.
func attach(t *testing.T, p *Program, h *netnstest.Host, mode Mode) *Attachment {
	t.Helper()
	var a *Attachment
	err := h.Do(func() (err error) {
		a, err = p.Attach(h.Index, mode)
		return err
	})
	if err != nil {
		t.Fatalf("attaching to %s: %v", h, err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Errorf("detaching from %s: %v", h, err)
		}
	})
	return a
}

// xdpState returns the XDP attachment netlink reports for h's veth end.
func xdpState(t *testing.T, h *netnstest.Host) netlink.LinkXdp {
	t.Helper()
	l, err := h.Netlink.LinkByIndex(h.Index)
	if err != nil {
		t.Fatalf("reading %s: %v", h, err)
	}
	if l.Attrs().Xdp == nil {
		return netlink.LinkXdp{}
	}
	return *l.Attrs().Xdp
}

// sender returns a packet socket in h's namespace that sends whole frames
// out of h's veth end.
func sender(t *testing.T, h *netnstest.Host) func(frames ...[]byte) {
	t.Helper()
	var fd int
	err := h.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0) // protocol 0: send only
		return err
	})
	if err != nil {
		t.Fatalf("packet socket in %s: %v", h.NS, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return func(frames ...[]byte) {
		t.Helper()
		for _, f := range frames {
			sa := &unix.SockaddrLinklayer{Ifindex: h.Index, Halen: 6}
			copy(sa.Addr[:], f[:6])
			if err := unix.Sendto(fd, f, 0, sa); err != nil {
				t.Fatalf("sending a %d-byte frame from %s: %v", len(f), h, err)
			}
		}
	}
}

// waitCounters polls p's counters until done accepts them or 5 s pass.
func waitCounters(t *testing.T, p *Program, done func(Counters) bool) Counters {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := counters(t, p)
		if done(c) || time.Now().After(deadline) {
			return c
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// receiveN receives frames from x until it has n or 2 s pass.
func receiveN(x *testXSK, n int) [][]byte {
	var got [][]byte
	deadline := time.Now().Add(2 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		got = append(got, x.Receive(10*time.Millisecond)...)
	}
	return got
}

// withMAC returns f with its destination MAC set to mac.
func withMAC(f []byte, mac net.HardwareAddr) []byte {
	copy(f, mac)
	return f
}

func TestAttachKeepsHostTraffic(t *testing.T) {
	pair := netnstest.NewVethPair(t)
	pa, pb := load(t, Config{}), load(t, Config{})
	aa := attach(t, pa, pair.A, ModeAuto)
	ab := attach(t, pb, pair.B, ModeAuto)
	for _, a := range []*Attachment{aa, ab} {
		if a.Mode() != ModeGeneric || !strings.Contains(a.Reason(), "veth") {
			t.Errorf("ModeAuto on veth: mode %v (%s), want generic because of veth", a.Mode(), a.Reason())
		}
	}
	if x := xdpState(t, pair.B); !x.Attached || x.AttachMode != xdpAttachedSKB {
		t.Fatalf("netlink after Attach: %+v, want attached in generic (SKB) mode", x)
	}

	t.Run("ping", func(t *testing.T) { ping(t, pair) })
	t.Run("UDP", func(t *testing.T) { udpEcho(t, pair) })
	t.Run("TCP", func(t *testing.T) { tcpEcho(t, pair) })

	for _, p := range []*Program{pa, pb} {
		c := counters(t, p)
		if c.Passed == 0 || c.Received != 0 {
			t.Errorf("counters %+v: want host traffic passed, none received", c)
		}
	}
	if err := ab.Close(); err != nil {
		t.Fatal(err)
	}
	if x := xdpState(t, pair.B); x.Attached {
		t.Errorf("netlink after Close: %+v, want nothing attached", x)
	}
}

// ping sends ICMP echo requests from A to B through a raw socket and waits
// for the replies.
func ping(t *testing.T, pair *netnstest.Pair) {
	var c net.PacketConn
	err := pair.A.Do(func() (err error) {
		c, err = net.ListenPacket("ip4:icmp", pair.A.Addr.Addr().String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dst := &net.IPAddr{IP: pair.B.Addr.Addr().AsSlice()}
	id := uint16(os.Getpid())
	for seq := uint16(1); seq <= 3; seq++ {
		req := []byte{8, 0, 0, 0, byte(id >> 8), byte(id), byte(seq >> 8), byte(seq), 'x', 'a', 'm', 0}
		binary.BigEndian.PutUint16(req[2:], inetChecksum(req))
		if _, err := c.WriteTo(req, dst); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 1500)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				t.Fatalf("echo reply %d: %v", seq, err)
			}
			if n >= 8 && buf[0] == 0 && binary.BigEndian.Uint16(buf[4:]) == id && binary.BigEndian.Uint16(buf[6:]) == seq {
				break
			}
		}
	}
}

func udpEcho(t *testing.T, pair *netnstest.Pair) {
	var srv, cli *net.UDPConn
	err := pair.B.Do(func() (err error) {
		srv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: pair.B.Addr.Addr().AsSlice()})
		return err
	})
	if err == nil {
		err = pair.A.Do(func() (err error) {
			cli, err = net.DialUDP("udp4", nil, srv.LocalAddr().(*net.UDPAddr))
			return err
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	defer cli.Close()
	go func() {
		buf := make([]byte, 100)
		for {
			n, from, err := srv.ReadFromUDP(buf)
			if err != nil {
				return
			}
			srv.WriteToUDP(buf[:n], from)
		}
	}()
	buf := make([]byte, 100)
	for i := range 5 {
		msg := fmt.Sprintf("udp %d", i)
		if _, err := cli.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		cli.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, err := cli.Read(buf)
		if err != nil || string(buf[:n]) != msg {
			t.Fatalf("UDP echo %d: %q, %v", i, buf[:n], err)
		}
	}
}

func tcpEcho(t *testing.T, pair *netnstest.Pair) {
	var ln net.Listener
	var conn net.Conn
	err := pair.B.Do(func() (err error) {
		ln, err = net.Listen("tcp4", net.JoinHostPort(pair.B.Addr.Addr().String(), "0"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	err = pair.A.Do(func() (err error) {
		conn, err = net.DialTimeout("tcp4", ln.Addr().String(), 2*time.Second)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msg := bytes.Repeat([]byte("xam over TCP "), 10000) // several segments
	go conn.Write(msg)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("TCP echo of %d bytes: %v", len(msg), err)
	}
}

func TestAttachTwice(t *testing.T) {
	pair := netnstest.NewVethPair(t)
	p1, p2 := load(t, Config{}), load(t, Config{})
	attach(t, p1, pair.B, ModeGeneric)
	for name, p := range map[string]*Program{"same program": p1, "another program": p2} {
		for _, mode := range []Mode{ModeGeneric, ModeNative} {
			err := pair.B.Do(func() error {
				a, err := p.Attach(pair.B.Index, mode)
				if err == nil {
					a.Close()
				}
				return err
			})
			if !errors.Is(err, ErrAttached) || !(errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST)) {
				t.Fatalf("%s, %v mode: %v, want ErrAttached (EBUSY or EEXIST)", name, mode, err)
			}
			// It names the process that owns the link (this one), not a
			// tool that would cut that process off its device.
			if want := fmt.Sprintf("process %d (", os.Getpid()); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), pair.B.Link) ||
				strings.Contains(err.Error(), "bpftool") {
				t.Errorf("%s, %v mode: error does not name the link's owner (%s) on %s: %v", name, mode, want, pair.B.Link, err)
			}
		}
	}
	t.Logf("second attach: %v", func() error {
		return pair.B.Do(func() error { _, err := p2.Attach(pair.B.Index, ModeGeneric); return err })
	}())
}

func TestAttachOverLegacyProgram(t *testing.T) {
	pair := netnstest.NewVethPair(t)
	legacy, p := load(t, Config{}), load(t, Config{})
	const xdpFlagsSKBMode = 1 << 1
	setLegacy := func(fd int) error {
		return pair.B.Do(func() error {
			l, err := netlink.LinkByIndex(pair.B.Index)
			if err != nil {
				return err
			}
			return netlink.LinkSetXdpFdWithFlags(l, fd, xdpFlagsSKBMode)
		})
	}
	if err := setLegacy(legacy.XDP().FD()); err != nil {
		t.Fatalf("legacy attach: %v", err)
	}
	t.Cleanup(func() {
		if err := setLegacy(-1); err != nil {
			t.Errorf("legacy detach: %v", err)
		}
	})
	err := pair.B.Do(func() error { _, err := p.Attach(pair.B.Index, ModeGeneric); return err })
	want := "ip link set dev " + pair.B.Link + " xdpgeneric off"
	if !errors.Is(err, ErrAttached) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Attach over a legacy program: %v; want ErrAttached saying %q", err, want)
	}
	t.Logf("attach over a legacy program: %v", err)
}

func TestAttachNative(t *testing.T) {
	t.Run("veth", func(t *testing.T) {
		pair := netnstest.NewVethPair(t)
		p := load(t, Config{})
		a := attach(t, p, pair.B, ModeNative)
		if a.Mode() != ModeNative {
			t.Errorf("mode %v, want native", a.Mode())
		}
		if x := xdpState(t, pair.B); !x.Attached || x.AttachMode != xdpAttachedDrv {
			t.Errorf("netlink: %+v, want attached in native (driver) mode", x)
		}
		// Frames still arrive: native veth XDP on B, frames sent from A.
		send := sender(t, pair.A)
		send(withMAC(ours(2), pair.B.MAC))
		c := waitCounters(t, p, func(c Counters) bool { return c.Received == 1 })
		if c.Received != 1 || c.RedirectMiss != 1 {
			t.Errorf("counters %+v, want one frame received, no socket", c)
		}
	})
	t.Run("peer MTU too large", func(t *testing.T) {
		pair := netnstest.NewVethPair(t, netnstest.WithMTU(9000))
		p := load(t, Config{})
		err := pair.B.Do(func() error { _, err := p.Attach(pair.B.Index, ModeNative); return err })
		if !errors.Is(err, unix.ERANGE) || !strings.Contains(err.Error(), "MTU") {
			t.Fatalf("native attach on a 9000-byte MTU veth: %v, want ERANGE explained", err)
		}
		t.Logf("native attach with a jumbo MTU: %v", err)
		a := attach(t, p, pair.B, ModeAuto)
		if a.Mode() != ModeGeneric {
			t.Errorf("ModeAuto: %v", a.Mode())
		}
	})
}

func TestRecommendMode(t *testing.T) {
	pair := netnstest.NewVethPair(t)
	err := pair.B.Do(func() error {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		for _, c := range []struct {
			ifindex int
			want    Mode
			why     string
		}{{pair.B.Index, ModeGeneric, "veth"}, {lo.Index, ModeGeneric, "loopback"}} {
			m, why, err := RecommendMode(c.ifindex)
			if err != nil {
				return err
			}
			if m != c.want || !strings.Contains(why, c.why) {
				return fmt.Errorf("RecommendMode(%d) = %v, %q; want %v because of %s", c.ifindex, m, why, c.want, c.why)
			}
		}
		if _, _, err := RecommendMode(1 << 30); err == nil {
			return errors.New("RecommendMode of a missing device succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestRedirectToSocket sends frames from A to an AF_XDP socket on B.
func TestRedirectToSocket(t *testing.T) {
	pair := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	p := load(t, Config{DstMAC: pair.B.MAC, HECCells: 1})
	attach(t, p, pair.B, ModeGeneric)
	var x *testXSK
	err := pair.B.Do(func() (err error) {
		x, err = newTestXSK(pair.B.Index, 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	if err := p.Register(0, x.FD()); err != nil {
		t.Fatal(err)
	}

	// With a socket in the map, a test run redirects (to nowhere: test
	// runs do not carry out the redirect).
	run(t, p, withMAC(ours(1), pair.B.MAC), ActionRedirect)

	send := sender(t, pair.A)
	var want [][]byte
	for i := range 20 {
		f := withMAC(ours(1+i%testRunMaxCells), pair.B.MAC)
		f[len(f)-1] = byte(i)
		want = append(want, f)
		send(f)
	}
	bad := withMAC(ours(2), pair.B.MAC)
	bad[17] = 3
	send(bad)                              // malformed: dropped
	send(withMAC(ours(1), pair.A.MAC))     // another host's: passed
	send(withMAC(ipv4Frame(), pair.B.MAC)) // not ours: passed
	hecBad := withMAC(frame(nil, DefaultEtherType, cellSpec{vci: 9, badHEC: true}), pair.B.MAC)
	send(hecBad) // delivered, counted
	want = append(want, hecBad)

	got := receiveN(x, len(want))
	if len(got) != len(want) {
		t.Fatalf("received %d frames, want %d", len(got), len(want))
	}
	// Compared as a set: the sending goroutine may move between CPUs, whose
	// backlogs the receiving side drains independently.
	sent := make(map[string]int)
	for _, f := range want {
		sent[string(f)]++
	}
	for i, f := range got {
		if sent[string(f)] == 0 {
			t.Errorf("received frame %d (%d bytes, % x...) was not sent", i, len(f), f[:min(len(f), 24)])
		}
		sent[string(f)]--
	}
	c := waitCounters(t, p, func(c Counters) bool { return c.Received == 23 && c.Passed >= 2 })
	if c.Received != 23 || c.Redirected != 22 || c.Malformed != 1 || c.OtherDst != 1 || c.Passed < 2 || c.HECErrors != 1 || c.RedirectMiss != 0 {
		t.Errorf("counters %+v", c)
	}
	if extra := x.Receive(50 * time.Millisecond); len(extra) != 0 {
		t.Errorf("%d frames more than sent", len(extra))
	}

	// Unregistered, the queue has no socket: frames pass to the kernel.
	if err := p.Unregister(0); err != nil {
		t.Fatal(err)
	}
	send(withMAC(ours(1), pair.B.MAC))
	c = waitCounters(t, p, func(c Counters) bool { return c.RedirectMiss == 1 })
	if c.RedirectMiss != 1 {
		t.Errorf("after Unregister: %+v, want one redirect miss", c)
	}
	if got := x.Receive(50 * time.Millisecond); len(got) != 0 {
		t.Errorf("received %d frames after Unregister", len(got))
	}

	// The kernel forgets a socket that is closed.
	if err := p.Register(0, x.FD()); err != nil {
		t.Fatal(err)
	}
	x.Close()
	send(withMAC(ours(1), pair.B.MAC))
	c = waitCounters(t, p, func(c Counters) bool { return c.RedirectMiss == 2 })
	if c.RedirectMiss != 2 {
		t.Errorf("after closing the socket: %+v, want a second redirect miss", c)
	}
}

// TestJumboFrames checks the whole-frame loops on frames longer than a test
// run takes: 169 cells (MaxScanCells) and more, on a veth with a 9100-byte
// MTU, where generic XDP sees the frame in one piece.
func TestJumboFrames(t *testing.T) {
	pair := netnstest.NewVethPair(t, netnstest.WithMTU(9100), netnstest.WithQueues(1))
	p := load(t, Config{Admission: true, HECCells: MaxScanCells})
	if err := p.Admit(1, 100); err != nil {
		t.Fatal(err)
	}
	attach(t, p, pair.B, ModeGeneric)
	send := sender(t, pair.A)

	full := withMAC(ours(MaxScanCells), pair.B.MAC)
	send(full) // admitted, good HECs
	lastBad := bytes.Clone(full)
	lastBad[len(lastBad)-49] ^= 1 // last cell's HEC
	send(lastBad)
	lastOther := bytes.Clone(full)
	copy(lastOther[len(lastOther)-53:], cellHeader(cellSpec{vpi: 1, vci: 101}))
	send(lastOther)                                 // last cell's circuit not admitted
	send(withMAC(ours(MaxScanCells+1), pair.B.MAC)) // more cells than the program looks at
	want := Counters{Received: 4, RedirectMiss: 2, HECErrors: 1, NotAdmitted: 2}
	if c := waitCounters(t, p, func(c Counters) bool { return c.Received == 4 }); c != want {
		t.Errorf("counters:\n got %+v\nwant %+v", c, want)
	}
}

// TestAttachmentDiesWithOwner attaches from a child process and kills it
// with SIGKILL: the kernel must remove the program with the process.
func TestAttachmentDiesWithOwner(t *testing.T) {
	pair := netnstest.NewVethPair(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", childEnv, pair.B.NS, pair.B.Index))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "attached" {
			t.Fatalf("child said %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("child did not attach within 10 s")
	}
	if x := xdpState(t, pair.B); !x.Attached {
		t.Fatalf("child attached, but netlink says %+v", x)
	}
	if err := cmd.Process.Signal(unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for xdpState(t, pair.B).Attached {
		if time.Now().After(deadline) {
			t.Fatalf("an XDP program is still attached 5 s after its owner was killed: %+v", xdpState(t, pair.B))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The device is free again.
	attach(t, load(t, Config{}), pair.B, ModeGeneric)
}

// childMain runs in the child process of TestAttachmentDiesWithOwner:
// spec is "namespace ifindex". It attaches, says so, and waits to be killed.
func childMain(spec string) int {
	var ns string
	var ifindex int
	if _, err := fmt.Sscan(spec, &ns, &ifindex); err != nil {
		fmt.Fprintf(os.Stderr, "child: bad spec %q: %v\n", spec, err)
		return 2
	}
	runtime.LockOSThread()
	h, err := netns.GetFromName(ns)
	if err == nil {
		err = netns.Set(h)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "child: entering %s: %v\n", ns, err)
		return 2
	}
	p, err := Load(Config{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "child: %v\n", err)
		return 2
	}
	a, err := p.Attach(ifindex, ModeGeneric)
	if err != nil {
		fmt.Fprintf(os.Stderr, "child: %v\n", err)
		return 2
	}
	fmt.Println("attached")
	time.Sleep(time.Minute) // killed long before
	runtime.KeepAlive(a)
	return 1
}
