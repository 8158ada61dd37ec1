//go:build linux

package afxdp_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/internal/netnstest"
)

// The tests in this file are about the AF_XDP socket itself.

// TestSocketInfo checks what Open reports on veth: copy mode after a
// refused zero-copy bind, the TX budget, no NAPI instance to busy-poll.
func TestSocketInfo(t *testing.T) {
	checkGoroutines(t)
	veth := netnstest.NewVethPair(t, netnstest.WithQueues(2))
	s := openSocket(t, veth.A, afxdp.Options{BatchSize: 256})
	info := s.Info()
	t.Logf("%+v", info)
	if info.ZeroCopy || !errors.Is(info.ZeroCopyErr, unix.EOPNOTSUPP) {
		t.Errorf("ZeroCopy %v, ZeroCopyErr %v; want copy mode after EOPNOTSUPP (veth has no zero-copy)",
			info.ZeroCopy, info.ZeroCopyErr)
	}
	if info.TxBudget != 256 || info.TxBudgetErr != nil {
		t.Errorf("TxBudget %d, %v; want 256 (XDP_MAX_TX_SKB_BUDGET is in Linux 6.17+)", info.TxBudget, info.TxBudgetErr)
	}
	if info.NAPIID != 0 || info.BusyPoll || info.BusyPollErr != nil {
		t.Errorf("NAPIID %d, BusyPoll %v (%v); want no NAPI on veth and the options accepted",
			info.NAPIID, info.BusyPoll, info.BusyPollErr)
	}
	if !info.NeedWakeup || info.Ifindex != veth.A.Index || info.Ifname != veth.A.Link || info.Queue != 0 ||
		info.DeviceMTU != 1500 || info.MTU != 1500 || s.MTU() != 1500 || s.BatchSize() != 256 ||
		s.HardwareAddr().String() != veth.A.MAC.String() || s.FD() < 0 {
		t.Errorf("Info %+v, MTU %d, BatchSize %d, MAC %v, FD %d", info, s.MTU(), s.BatchSize(), s.HardwareAddr(), s.FD())
	}
	if o := info.Options; o.FrameSize != 2048 || o.RxSize != 2048 || o.TxBudget != 256 || o.BindTimeout != 500*time.Millisecond {
		t.Errorf("options in force %+v, want the defaults", o)
	}

	// Queue 1, copy mode asked for, busy polling off.
	s1 := openSocket(t, veth.A, afxdp.Options{Queue: 1, Mode: afxdp.ModeCopy, NoBusyPoll: true, NoNeedWakeup: true})
	if i := s1.Info(); i.Queue != 1 || i.ZeroCopy || i.ZeroCopyErr != nil || i.NeedWakeup || i.TxBudget != 64 || i.BusyPollErr != nil {
		t.Errorf("ModeCopy on queue 1: %+v", i)
	}

	// Zero-copy required: refused.
	err := veth.B.Do(func() error {
		s, err := afxdp.Open(veth.B.Index, afxdp.Options{Mode: afxdp.ModeZeroCopy})
		if err == nil {
			s.Close()
		}
		return err
	})
	if !errors.Is(err, afxdp.ErrNotSupported) || !strings.Contains(err.Error(), "zero-copy") {
		t.Errorf("ModeZeroCopy on veth: %v; want ErrNotSupported naming zero-copy", err)
	}

	// No such device.
	err = veth.B.Do(func() error {
		_, err := afxdp.Open(veth.B.Index+100, afxdp.Options{})
		return err
	})
	if err == nil {
		t.Errorf("Open on a missing device succeeded")
	}
}

// TestSocketReopen closes and reopens a socket on the same queue many times
// in a row: the kernel releases a queue asynchronously, and Open retries the
// EBUSY bind. A second socket on a queue that stays busy fails clearly.
func TestSocketReopen(t *testing.T) {
	checkGoroutines(t)
	p := newSocketPair(t, afxdp.Options{})
	frames := make([][]byte, 8)
	buf := make([]byte, 64)
	retries := 0
	for i := range 20 {
		if err := p.b.Close(); err != nil {
			t.Fatalf("round %d: Close: %v", i, err)
		}
		p.b = openSocket(t, p.veth.B, afxdp.Options{})
		retries += p.b.Info().BindRetries
		p.rb.register(t, p.b)
		f := makeFrame(buf, p.b.HardwareAddr(), p.a.HardwareAddr(), uint32(i), 64)
		if n, err := p.a.Send([][]byte{f}); n != 1 || err != nil {
			t.Fatalf("round %d: Send: %d, %v", i, n, err)
		}
		got := recvN(t, p.b, frames, 1)
		if seq, err := checkFrame(got[0], p.b.HardwareAddr(), p.a.HardwareAddr()); seq != uint32(i) || err != nil {
			t.Fatalf("round %d: received %d, %v", i, seq, err)
		}
	}
	t.Logf("20 reopens, %d EBUSY retries in all", retries)

	err := p.veth.B.Do(func() error {
		s, err := afxdp.Open(p.veth.B.Index, afxdp.Options{BindTimeout: 30 * time.Millisecond})
		if err == nil {
			s.Close()
		}
		return err
	})
	if !errors.Is(err, unix.EBUSY) || !strings.Contains(err.Error(), "queue busy") {
		t.Errorf("second socket on a busy queue: %v; want EBUSY saying the queue is busy", err)
	}
}

// mappings returns the lines of /proc/self/maps that map socket ino, or a
// UMEM that overlaps [start, end) (the range alone would also find what the
// process mapped there after the UMEM went).
func mappings(t *testing.T, ino string, start, end uintptr) []string {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(line, "socket:["+ino+"]") {
			out = append(out, line)
			continue
		}
		var lo, hi uintptr
		if _, err := fmt.Sscanf(line, "%x-%x", &lo, &hi); err == nil && lo < end && hi > start &&
			strings.Contains(line, afxdp.UMEMMapName) {
			out = append(out, line)
		}
	}
	return out
}

// socketInode returns the inode of the socket behind fd.
func socketInode(t *testing.T, fd int) string {
	t.Helper()
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || !strings.HasPrefix(target, "socket:[") {
		t.Fatalf("fd %d: %q, %v", fd, target, err)
	}
	return strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")
}

// TestSocketReleases checks that Close unmaps the four rings and the UMEM
// and closes the socket, and that a receiver still holding lent frames when
// another goroutine closes the socket can read them: the UMEM then goes at
// its next Recv.
func TestSocketReleases(t *testing.T) {
	checkGoroutines(t)
	p := newSocketPair(t, afxdp.Options{})
	for _, lent := range []bool{false, true} {
		s := p.b
		ino := socketInode(t, s.FD())
		start, end := afxdp.UMEMRange(s)
		maps := mappings(t, ino, start, end)
		if len(maps) != 5 {
			t.Fatalf("%d mappings of the socket and its UMEM, want 4 rings and the UMEM:\n%s", len(maps), strings.Join(maps, "\n"))
		}
		var frames [][]byte
		if lent {
			f := makeFrame(make([]byte, 300), s.HardwareAddr(), p.a.HardwareAddr(), 7, 300)
			if _, err := p.a.Send([][]byte{f, f, f}); err != nil {
				t.Fatal(err)
			}
			frames = recvN(t, s, make([][]byte, 3), 3)
		}
		fd := s.FD()
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		wg.Wait()
		if target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err == nil && target == "socket:["+ino+"]" {
			t.Errorf("fd %d still open after Close", fd)
		}
		maps = mappings(t, ino, start, end)
		if lent {
			// The UMEM stays until the receiver's next Recv.
			if len(maps) != 1 {
				t.Errorf("after Close with frames lent: %d mappings, want the UMEM only:\n%s", len(maps), strings.Join(maps, "\n"))
			}
			for _, f := range frames {
				if seq, err := checkFrame(f, s.HardwareAddr(), p.a.HardwareAddr()); seq != 7 || err != nil {
					t.Errorf("lent frame after Close: %d, %v", seq, err)
				}
			}
			if _, err := s.Recv(frames); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Recv after Close: %v", err)
			}
			maps = mappings(t, ino, start, end)
		}
		if len(maps) != 0 {
			t.Errorf("after Close (frames lent: %v): still mapped:\n%s", lent, strings.Join(maps, "\n"))
		}
		p.b = openSocket(t, p.veth.B, afxdp.Options{})
		p.rb.register(t, p.b)
	}
}

// TestSocketMTU checks the frame limits: a device MTU larger than a 2048-byte
// chunk can receive is lowered, 4096-byte chunks take it.
func TestSocketMTU(t *testing.T) {
	checkGoroutines(t)
	veth := netnstest.NewVethPair(t, netnstest.WithMTU(3000))
	ra, rb := newRedirector(t, veth.A), newRedirector(t, veth.B)
	for _, c := range []struct {
		frameSize, mtu int
	}{{2048, 2048 - 256 - 14}, {4096, 3000}} {
		opts := afxdp.Options{FrameSize: c.frameSize}
		a, b := openSocket(t, veth.A, opts), openSocket(t, veth.B, opts)
		ra.register(t, a)
		rb.register(t, b)
		if a.MTU() != c.mtu || a.Info().DeviceMTU != 3000 {
			t.Errorf("%d-byte chunks: MTU %d (device %d), want %d", c.frameSize, a.MTU(), a.Info().DeviceMTU, c.mtu)
		}
		max := c.mtu + afxdp.EthernetHeaderLen
		f := makeFrame(make([]byte, max+1), b.HardwareAddr(), a.HardwareAddr(), 1, max+1)
		if _, err := a.Send([][]byte{f}); !errors.Is(err, afxdp.ErrFrameTooLarge) {
			t.Errorf("%d-byte chunks: %d-byte frame: %v, want ErrFrameTooLarge", c.frameSize, max+1, err)
		}
		if n, err := a.Send([][]byte{f[:max]}); n != 1 || err != nil {
			t.Fatalf("%d-byte chunks: %d-byte frame: %d, %v", c.frameSize, max, n, err)
		}
		if got := recvN(t, b, make([][]byte, 1), 1); len(got[0]) != max {
			t.Errorf("%d-byte chunks: received %d bytes, want %d", c.frameSize, len(got[0]), max)
		}
		a.Close()
		b.Close()
	}
}

// TestSocketOverrun sends more frames than the receiver has chunks, while it
// does not read: the kernel drops the rest and XDP_STATISTICS accounts for
// every frame.
func TestSocketOverrun(t *testing.T) {
	checkGoroutines(t)
	const ring, sent = 256, 1000
	p := newSocketPair(t, afxdp.Options{FillSize: ring, RxSize: ring, TxSize: ring, CompletionSize: ring})
	buf := make([][]byte, 50)
	for i := range buf {
		buf[i] = make([]byte, 128)
	}
	for seq := uint32(0); seq < sent; seq += uint32(len(buf)) {
		batch := make([][]byte, len(buf))
		for i := range batch {
			batch[i] = makeFrame(buf[i], p.b.HardwareAddr(), p.a.HardwareAddr(), seq+uint32(i), 128)
		}
		if n, err := p.a.Send(batch); n != len(batch) || err != nil {
			t.Fatalf("Send: %d, %v", n, err)
		}
	}
	// The receive side runs in softirq; wait until every frame is counted.
	var st afxdp.Stats
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		if st, err = p.b.Stats(); err != nil {
			t.Fatal(err)
		}
		if st.RxDropped+st.RxRingFull >= sent-ring || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	frames := make([][]byte, 2*ring)
	n, err := p.b.Recv(frames)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frames[:n] {
		if seq, err := checkFrame(f, p.b.HardwareAddr(), p.a.HardwareAddr()); seq != uint32(i) || err != nil {
			t.Fatalf("frame %d: %d, %v", i, seq, err)
		}
	}
	st, _ = p.b.Stats()
	t.Logf("receiver: %+v", st)
	if n != ring || st.RxDropped+st.RxRingFull != sent-ring || st.RxFillRingEmptyDescs == 0 {
		t.Errorf("received %d, dropped %d + ring full %d, fill ring empty %d; want %d received and %d dropped",
			n, st.RxDropped, st.RxRingFull, st.RxFillRingEmptyDescs, ring, sent-ring)
	}
	// The next Recv gives the chunks back: traffic flows again.
	if _, err := p.b.Recv(nil); err != nil {
		t.Fatal(err)
	}
	f := makeFrame(make([]byte, 64), p.b.HardwareAddr(), p.a.HardwareAddr(), 5000, 64)
	if _, err := p.a.Send([][]byte{f}); err != nil {
		t.Fatal(err)
	}
	if got := recvN(t, p.b, frames, 1); len(got[0]) != 64 {
		t.Errorf("after the overrun: %d bytes", len(got[0]))
	}
}

// TestSocketTxBudget checks that a TX budget above the kernel's 32 is
// used: one sendto per 256-frame batch instead of eight; and that the
// sendto calls are raw system calls up to a budget of 256.
func TestSocketTxBudget(t *testing.T) {
	checkGoroutines(t)
	veth := netnstest.NewVethPair(t) // frames to B go to its stack, which drops them
	const batches = 20
	for _, c := range []struct {
		budget, kicks int
	}{{256, batches}, {32, batches * 256 / 32}} {
		s := openSocket(t, veth.A, afxdp.Options{BatchSize: 256, TxBudget: c.budget})
		batch := make([][]byte, 256)
		for i := range batch {
			batch[i] = makeFrame(make([]byte, 64), veth.B.MAC, s.HardwareAddr(), uint32(i), 64)
		}
		for range batches {
			if n, err := s.Send(batch); n != len(batch) || err != nil {
				t.Fatalf("Send: %d, %v", n, err)
			}
		}
		st, _ := s.Stats()
		t.Logf("TxBudget %d (in force %d): %+v", c.budget, s.Info().TxBudget, st)
		// Exact unless the kernel pushed back (EAGAIN from a full send
		// buffer), which adds kicks.
		if c.budget == 256 && (st.TxKicks < batches || st.TxKicks > batches*3/2) ||
			c.budget == 32 && st.TxKicks < uint64(c.kicks) {
			t.Errorf("TxBudget %d: %d sendto calls for %d batches of 256, want %d", c.budget, st.TxKicks, batches, c.kicks)
		}
		if st.TxFrames != batches*256 {
			t.Errorf("TxFrames %d", st.TxFrames)
		}
		if !afxdp.RawKick(s) {
			t.Errorf("TxBudget %d: ordinary sendto calls, want raw ones", c.budget)
		}
		s.Close()
	}
	// A budget above 256 makes sendto calls too long to hide from the Go
	// scheduler.
	s := openSocket(t, veth.A, afxdp.Options{BatchSize: 512, TxBudget: 512})
	if s.Info().TxBudget != 512 || afxdp.RawKick(s) {
		t.Errorf("TxBudget %d: raw sendto calls %v, want ordinary ones", s.Info().TxBudget, afxdp.RawKick(s))
	}
}

// TestSocketTxDropped checks that frames the device drops on transmit
// (sendto's EBUSY in copy mode) are counted, not returned as errors: here
// frames larger than the peer's MTU.
func TestSocketTxDropped(t *testing.T) {
	checkGoroutines(t)
	p := newSocketPair(t, afxdp.Options{FrameSize: 4096}, netnstest.WithMTU(3000))
	link, err := p.veth.B.Netlink.LinkByIndex(p.veth.B.Index)
	if err == nil {
		err = p.veth.B.Netlink.LinkSetMTU(link, 1500)
	}
	if err != nil {
		t.Fatalf("lowering the MTU of %s: %v", p.veth.B, err)
	}
	big := makeFrame(make([]byte, 2000), p.b.HardwareAddr(), p.a.HardwareAddr(), 1, 2000)
	small := makeFrame(make([]byte, 100), p.b.HardwareAddr(), p.a.HardwareAddr(), 2, 100)
	if n, err := p.a.Send([][]byte{big, big, small, big}); n != 4 || err != nil {
		t.Fatalf("Send: %d, %v", n, err)
	}
	if st, _ := p.a.Stats(); st.TxDropped != 3 || st.TxFrames != 4 {
		t.Errorf("TxDropped %d of TxFrames %d, want 3 of 4", st.TxDropped, st.TxFrames)
	}
	if f := recvN(t, p.b, make([][]byte, 4), 1)[0]; len(f) != 100 {
		t.Errorf("received %d bytes, want the 100-byte frame", len(f))
	}
}

// TestKernelTraffic checks that the host's own traffic between the
// namespaces (ICMP echo, UDP, TCP) still works while AF_XDP sockets and the
// program are attached at both ends and frames of our EtherType flow.
func TestKernelTraffic(t *testing.T) {
	checkGoroutines(t)
	p := newSocketPair(t, afxdp.Options{})
	frames := make([][]byte, 4)
	xdpRound := func(seq uint32) {
		t.Helper()
		for _, d := range []struct{ from, to *afxdp.Socket }{{p.a, p.b}, {p.b, p.a}} {
			f := makeFrame(make([]byte, 100), d.to.HardwareAddr(), d.from.HardwareAddr(), seq, 100)
			if _, err := d.from.Send([][]byte{f}); err != nil {
				t.Fatal(err)
			}
			if s, err := checkFrame(recvN(t, d.to, frames, 1)[0], d.to.HardwareAddr(), d.from.HardwareAddr()); s != seq || err != nil {
				t.Fatalf("AF_XDP frame %d: got %d, %v", seq, s, err)
			}
		}
	}
	xdpRound(1)
	addrA, addrB := p.veth.A.Addr.Addr(), p.veth.B.Addr.Addr()

	t.Run("icmp", func(t *testing.T) {
		var c net.PacketConn
		if err := p.veth.A.Do(func() (err error) { c, err = net.ListenPacket("ip4:icmp", addrA.String()); return err }); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		for seq := uint16(1); seq <= 3; seq++ {
			req := echoRequest(0x4a4d, seq, []byte("xam afxdp test"))
			if _, err := c.WriteTo(req, &net.IPAddr{IP: addrB.AsSlice()}); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 1500)
			for {
				n, from, err := c.ReadFrom(buf)
				if err != nil {
					t.Fatalf("echo %d: %v", seq, err)
				}
				// Type 0 (reply), our id and sequence, our payload.
				if from.String() == addrB.String() && n == len(req) && buf[0] == 0 &&
					bytes.Equal(buf[4:8], req[4:8]) && bytes.Equal(buf[8:n], req[8:]) {
					break
				}
			}
		}
	})

	t.Run("udp", func(t *testing.T) {
		var a, b *net.UDPConn
		if err := p.veth.B.Do(func() (err error) {
			b, err = net.ListenUDP("udp4", &net.UDPAddr{IP: addrB.AsSlice()})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if err := p.veth.A.Do(func() (err error) {
			a, err = net.DialUDP("udp4", nil, b.LocalAddr().(*net.UDPAddr))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		a.SetDeadline(time.Now().Add(5 * time.Second))
		b.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 100)
		for i := range 10 {
			msg := fmt.Appendf(nil, "udp %d", i)
			if _, err := a.Write(msg); err != nil {
				t.Fatal(err)
			}
			n, from, err := b.ReadFromUDPAddrPort(buf)
			if err != nil || !bytes.Equal(buf[:n], msg) {
				t.Fatalf("B received %q, %v", buf[:n], err)
			}
			if _, err := b.WriteToUDPAddrPort(buf[:n], from); err != nil {
				t.Fatal(err)
			}
			if n, err := a.Read(buf); err != nil || !bytes.Equal(buf[:n], msg) {
				t.Fatalf("A received %q, %v", buf[:n], err)
			}
		}
	})

	t.Run("tcp", func(t *testing.T) {
		var l net.Listener
		if err := p.veth.B.Do(func() (err error) { l, err = net.Listen("tcp4", addrB.String()+":0"); return err }); err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var wg sync.WaitGroup
		defer wg.Wait()
		wg.Go(func() {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			io.Copy(c, c)
		})
		var c net.Conn
		if err := p.veth.A.Do(func() (err error) { c, err = net.Dial("tcp4", l.Addr().String()); return err }); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		msg := bytes.Repeat([]byte("tcp through xam's XDP program "), 1000)
		go c.Write(msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("TCP echo of %d bytes: %v", len(msg), err)
		}
	})
	xdpRound(2)
}

// echoRequest builds an ICMP echo request.
func echoRequest(id, seq uint16, payload []byte) []byte {
	m := make([]byte, 8+len(payload))
	m[0] = 8 // echo request
	binary.BigEndian.PutUint16(m[4:], id)
	binary.BigEndian.PutUint16(m[6:], seq)
	copy(m[8:], payload)
	var sum uint32
	for i := 0; i+1 < len(m); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(m[i:]))
	}
	if len(m)%2 == 1 {
		sum += uint32(m[len(m)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(m[2:], ^uint16(sum))
	return m
}

// TestSocketNoAllocs checks that Send, Recv and Wait allocate nothing.
func TestSocketNoAllocs(t *testing.T) {
	checkGoroutines(t)
	p := newSocketPair(t, afxdp.Options{})
	batch := make([][]byte, 16)
	for i := range batch {
		batch[i] = makeFrame(make([]byte, 200), p.b.HardwareAddr(), p.a.HardwareAddr(), uint32(i), 200)
	}
	frames := make([][]byte, 64)
	received := 0
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := p.a.Send(batch); err != nil {
			t.Fatal(err)
		}
		p.b.Wait(time.Millisecond)
		n, _ := p.b.Recv(frames)
		received += n
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Send+Wait+Recv, want 0", allocs)
	}
	if received == 0 {
		t.Errorf("nothing received")
	}
}
