package bench

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/loader"
)

// TestDataPathCountsAgree sends xam frames both ways across a veth pair
// through xam's XDP program and AF_XDP sockets, with kernel traffic and
// malformed xam frames mixed in, and checks that every frame arrives intact
// and that the program's counters, the sockets' own counts and the kernel's
// XDP_STATISTICS all agree.
func TestDataPathCountsAgree(t *testing.T) {
	p := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	a, b := places(p)
	ea, err := datapath.Open(a, loader.ModeAuto, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ea.Close() })
	eb, err := datapath.Open(b, loader.ModeAuto, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eb.Close() })

	const n = 3000
	send := func(from, to *datapath.Endpoint, seenAtTo map[uint64]bool) {
		batch := make([][]byte, 0, 64)
		for i := range n {
			f, err := rawFrame(to.MAC, from.MAC, 1+i%1344)
			if err != nil {
				t.Fatal(err)
			}
			binary.BigEndian.PutUint64(f[seqOffset:], uint64(i))
			batch = append(batch, f)
			if len(batch) == cap(batch) || i == n-1 {
				if k, err := from.Sock.Send(batch); err != nil || k != len(batch) {
					t.Fatalf("Send: %d of %d, %v", k, len(batch), err)
				}
				batch = batch[:0]
				drain(t, to, seenAtTo) // keep the receiver's rings moving
			}
		}
	}
	// A malformed xam frame (cell count 2, one cell present) and a kernel
	// UDP datagram, both toward B: the first is dropped and counted, the
	// second passes to the kernel.
	bad, _ := rawFrame(eb.MAC, ea.MAC, 10)
	bad[17] = 2
	if k, err := ea.Sock.Send([][]byte{bad}); err != nil || k != 1 {
		t.Fatalf("Send(bad): %d, %v", k, err)
	}
	udpToB(t, p)

	seenA, seenB := map[uint64]bool{}, map[uint64]bool{}
	send(ea, eb, seenB)
	send(eb, ea, seenA)
	deadline := time.Now().Add(5 * time.Second)
	for (len(seenA) < n || len(seenB) < n) && time.Now().Before(deadline) {
		drain(t, eb, seenB)
		drain(t, ea, seenA)
	}
	if len(seenA) != n || len(seenB) != n {
		t.Fatalf("received %d at A and %d at B of %d each", len(seenA), len(seenB), n)
	}
	for _, side := range []struct {
		name string
		e    *datapath.Endpoint
		bad  uint64 // malformed frames received
		tx   uint64 // frames sent
	}{{"A", ea, 0, n + 1}, {"B", eb, 1, n}} {
		c, err := side.e.Prog.Counters()
		if err != nil {
			t.Fatal(err)
		}
		s, err := side.e.Sock.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if c.Redirected != n || c.Malformed != side.bad || c.RedirectMiss != 0 || c.Received != n+side.bad {
			t.Errorf("%s: program counters %+v", side.name, c)
		}
		if s.RxFrames != c.Redirected || s.TxFrames != side.tx || s.RxDropped != 0 || s.RxRingFull != 0 ||
			s.RxInvalidDescs != 0 || s.TxInvalidDescs != 0 || s.TxDropped != 0 {
			t.Errorf("%s: socket stats %+v do not agree with %d redirected", side.name, s, c.Redirected)
		}
	}
	if c, _ := eb.Prog.Counters(); c.Passed == 0 {
		t.Errorf("B's program passed nothing to the kernel (the UDP datagram): %+v", c)
	}
}

// drain receives what is waiting at e, checks each frame's length and
// records its sequence number.
func drain(t *testing.T, e *datapath.Endpoint, seen map[uint64]bool) {
	t.Helper()
	bufs := make([][]byte, e.Sock.BatchSize())
	for {
		k, err := e.Sock.Recv(bufs)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			return
		}
		for _, f := range bufs[:k] {
			seq := binary.BigEndian.Uint64(f[seqOffset:])
			size := 1 + int(seq)%1344
			if want := cells.FrameLen((size + cells.PayloadSize - 1) / cells.PayloadSize); len(f) != want {
				t.Fatalf("frame %d: %d bytes, want %d", seq, len(f), want)
			}
			seen[seq] = true
		}
	}
}

// udpToB sends one kernel UDP datagram from A to B and waits for it.
func udpToB(t *testing.T, p *netnstest.Pair) {
	t.Helper()
	var fd int
	if err := p.B.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrInet4{Port: 7099, Addr: p.B.Addr.Addr().As4()})
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var c net.Conn
	if err := p.A.Do(func() (err error) {
		c, err = net.Dial("udp4", net.JoinHostPort(p.B.Addr.Addr().String(), "7099"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("kernel"))
	tv := unix.NsecToTimeval(int64(2 * time.Second))
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	buf := make([]byte, 16)
	if k, _, err := unix.Recvfrom(fd, buf, 0); err != nil || string(buf[:k]) != "kernel" {
		t.Fatalf("UDP datagram while attached: %q, %v", buf[:k], err)
	}
}
