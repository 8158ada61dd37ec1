package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/am/job"
	"github.com/xam-project/xam/am/ssam"
)

// The round trips of RunJob, and its kernel peers: UDP and TCP between
// the devices' addresses, a server goroutine on one rank and the client
// on the other, started and ended at fences.

// pingTimeout bounds one round trip of a job's ping: past it the run
// fails (the peer is gone), rather than count it lost.
const pingTimeout = 10 * time.Second

// roundTrips: rank 0 pings rank 1 over AM-II, SSAM, GRIM, kernel UDP and
// kernel TCP, one after the other in the same run.
func (x *jobRun) roundTrips() (Reported, error) {
	count := x.pick(2000, 20000)
	warm := min(count/10, 1000)
	am, err := x.pingAMII(count, warm)
	if err != nil {
		return nil, fmt.Errorf("AM-II: %w", err)
	}
	ss, err := x.pingSSAM(count, warm)
	if err != nil {
		return nil, fmt.Errorf("SSAM: %w", err)
	}
	gr, err := x.pingGRIM(count, warm)
	if err != nil {
		return nil, fmt.Errorf("GRIM: %w", err)
	}
	udp, err := x.kernelPing("udp", count, warm)
	if err != nil {
		return nil, fmt.Errorf("kernel UDP: %w", err)
	}
	tcp, err := x.kernelPing("tcp", count, warm)
	if err != nil {
		return nil, fmt.Errorf("kernel TCP: %w", err)
	}
	if x.j.Rank != 0 {
		return nil, nil
	}
	us := func(h *hdrhistogram.Histogram, q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1e3 }
	r := &jobResult{}
	for _, p := range []struct {
		name string
		h    *hdrhistogram.Histogram
	}{{"AM-II", am}, {"SSAM", ss}, {"GRIM", gr}, {"kernel UDP", udp}, {"kernel TCP", tcp}} {
		r.add(p.name+", p50", "µs", us(p.h, 50))
		r.add(p.name+", p99", "µs", us(p.h, 99))
	}
	peers := []Peer{peer("kernel UDP, p50", us(udp, 50)), peer("kernel TCP, p50", us(tcp, 50))}
	r.figs = []Figure{
		jobFig("AM-II round trip, p50", "µs", us(am, 50), peers...),
		jobFig("SSAM round trip, p50", "µs", us(ss, 50), peers...),
		jobFig("GRIM round trip, p50", "µs", us(gr, 50), peers...),
		jobFig("AM-II round trip, p99", "µs", us(am, 99), peer("kernel UDP, p99", us(udp, 99))),
	}
	return r, nil
}

// pingLoop makes warm+count round trips at rank 0, each sent by send(seq)
// and waited for by polling until answered(seq), and returns the measured
// ones' times.
func pingLoop(count, warm int, send func(seq uint64) error, poll func() (int, error), answered func(seq uint64) bool) (*hdrhistogram.Histogram, error) {
	h := newHistogram()
	for i := range warm + count {
		seq := uint64(i + 1)
		t0 := time.Now()
		if err := send(seq); err != nil {
			return nil, err
		}
		for k := 0; !answered(seq); k++ {
			if _, err := poll(); err != nil {
				return nil, err
			}
			if k&1023 == 1023 && time.Since(t0) > pingTimeout {
				return nil, fmt.Errorf("round trip %d not answered within %v", seq, pingTimeout)
			}
		}
		if i >= warm {
			h.RecordValue(int64(time.Since(t0))) //nolint:errcheck // within the histogram's minute
		}
	}
	return h, nil
}

// pingAMII: AM-II short requests, answered by a short reply.
func (x *jobRun) pingAMII(count, warm int) (*hdrhistogram.Histogram, error) {
	s, err := x.openAMII()
	if err != nil {
		return nil, err
	}
	var h *hdrhistogram.Histogram
	if x.j.Rank == 0 {
		h, err = pingLoop(count, warm, func(seq uint64) error { return s.Request(1, s.echo, seq) },
			s.poll, func(seq uint64) bool { return s.last == seq })
	}
	return h, x.closeAMII(s, err)
}

// pingSSAM: SSAM requests of 8 bytes, answered with them.
func (x *jobRun) pingSSAM(count, warm int) (*hdrhistogram.Histogram, error) {
	var echo, pong, done ssam.HandlerID
	var last uint64
	var dones int
	var returned error
	cfg := job.Config{Mode: job.Inline, Device: x.cfg.Device, XDP: x.cfg.XDP}
	cfg.SetupSSAM = func(s *job.SSAM) error {
		echo = s.Register(func(t *ssam.Token, data []byte) { t.Reply(pong, data) }) //nolint:errcheck // a missing reply is seen by the pinger
		pong = s.Register(func(_ *ssam.Token, data []byte) { last = binary.BigEndian.Uint64(data) })
		done = s.Register(func(*ssam.Token, []byte) { dones++ })
		s.OnReturn(func(r ssam.Returned) { returned = fmt.Errorf("a message came back: %v", r) })
		return nil
	}
	s, err := job.OpenSSAM(x.ctx, x.j, cfg)
	if err != nil {
		return nil, err
	}
	var h *hdrhistogram.Histogram
	poll := func() (int, error) {
		n, err := s.Poll()
		return n, errors.Join(err, returned)
	}
	var msg [8]byte
	if x.j.Rank == 0 {
		h, err = pingLoop(count, warm, func(seq uint64) error {
			binary.BigEndian.PutUint64(msg[:], seq)
			return s.Request(s.Conn(1), echo, msg[:])
		}, poll, func(seq uint64) bool { return last == seq })
	}
	if err == nil {
		quiet := func() bool {
			for r := range x.j.Size {
				if r != x.j.Rank && s.Outstanding(s.Conn(r)) > 0 {
					return false
				}
			}
			return true
		}
		err = x.finish(func(r int) error { return s.Request(s.Conn(r), done, msg[:]) }, poll, quiet, &dones)
	}
	if berr := s.Barrier(x.ctx); err == nil {
		err = berr
	}
	return h, errors.Join(err, s.Close())
}

// pingGRIM: GRIM short messages on channel 0, answered by a short reply.
func (x *jobRun) pingGRIM(count, warm int) (*hdrhistogram.Histogram, error) {
	const echo, pong, done = grim.FirstUserHandler, grim.FirstUserHandler + 1, grim.FirstUserHandler + 2
	var last uint32
	var dones int
	var returned error
	cfg := job.Config{Mode: job.Inline, Device: x.cfg.Device, XDP: x.cfg.XDP}
	cfg.SetupGRIM = func(g *job.GRIM) error {
		g.OnReturn(func(r grim.Returned) { returned = fmt.Errorf("a message came back: %v", r) })
		return errors.Join(
			g.Handle(echo, func(t *grim.Token, args [grim.ShortArgs]uint32, _ []byte) { t.Reply(pong, args[0]) }), //nolint:errcheck // a missing reply is seen by the pinger
			g.Handle(pong, func(_ *grim.Token, args [grim.ShortArgs]uint32, _ []byte) { last = args[0] }),
			g.Handle(done, func(*grim.Token, [grim.ShortArgs]uint32, []byte) { dones++ }))
	}
	g, err := job.OpenGRIM(x.ctx, x.j, cfg)
	if err != nil {
		return nil, err
	}
	var h *hdrhistogram.Histogram
	poll := func() (int, error) {
		n, err := g.Poll()
		return n, errors.Join(err, returned)
	}
	ch, err := g.Channel(0)
	if err == nil && x.j.Rank == 0 {
		h, err = pingLoop(count, warm, func(seq uint64) error { return ch.Short(1, echo, uint32(seq)) },
			poll, func(seq uint64) bool { return last == uint32(seq) })
	}
	if err == nil {
		err = x.finish(func(r int) error { return ch.Short(r, done) }, poll, func() bool { return ch.Outstanding() == 0 }, &dones)
	}
	if berr := g.Barrier(x.ctx); err == nil {
		err = berr
	}
	return h, errors.Join(err, g.Close())
}

// server runs serve on a listener of network at rank srv's device address
// while the other ranks run client (given the server's address), between
// two fences; it returns client's error at the clients, serve's at the
// server.
func (x *jobRun) server(network string, srv int, serve func(l io.Closer) error, listen func(addr string) (io.Closer, string, error), client func(addr string) error) error {
	key := x.key(network + ".addr")
	var l io.Closer
	var serr error
	var wg sync.WaitGroup
	if x.j.Rank == srv {
		if !x.addrs[srv].IsValid() {
			serr = fmt.Errorf("device %s has no IPv4 address for kernel %s", x.hosts[srv].Device, network)
		} else {
			var addr string
			if l, addr, serr = listen(netip.AddrPortFrom(x.addrs[srv], 0).String()); serr == nil {
				if serr = x.j.Put(key, []byte(addr)); serr == nil {
					wg.Go(func() { serr = serve(l) })
				}
			}
		}
	}
	if err := x.j.Fence(x.ctx); err != nil {
		return err
	}
	var cerr error
	if x.j.Rank != srv {
		b, err := x.j.Get(srv, key)
		if err != nil {
			cerr = fmt.Errorf("the %s server at rank %d: %w", network, srv, err)
		} else {
			cerr = client(string(b))
		}
	}
	ferr := x.j.Fence(x.ctx)
	if l != nil {
		l.Close()
	}
	wg.Wait()
	if x.j.Rank == srv && errors.Is(serr, net.ErrClosed) {
		serr = nil
	}
	return errors.Join(cerr, serr, ferr)
}

// kernelPing: rank 0 pings rank 1 with 32-byte messages over kernel UDP
// or TCP; the other ranks wait.
func (x *jobRun) kernelPing(network string, count, warm int) (*hdrhistogram.Histogram, error) {
	var h *hdrhistogram.Histogram
	listen := func(addr string) (io.Closer, string, error) {
		if network == "udp" {
			c, err := net.ListenPacket("udp", addr)
			if err != nil {
				return nil, "", err
			}
			return c, c.LocalAddr().String(), nil
		}
		return tcpListen(addr)
	}
	serve := func(l io.Closer) error {
		if pc, ok := l.(net.PacketConn); ok {
			buf := make([]byte, 64)
			for {
				n, from, err := pc.ReadFrom(buf)
				if err != nil {
					return err
				}
				if _, err := pc.WriteTo(buf[:n], from); err != nil {
					return err
				}
			}
		}
		c, err := l.(net.Listener).Accept()
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = io.Copy(c, c)
		return err
	}
	client := func(addr string) error {
		if x.j.Rank != 0 {
			return nil
		}
		c, err := net.Dial(network, addr)
		if err != nil {
			return err
		}
		defer c.Close()
		msg, buf := make([]byte, 32), make([]byte, 32)
		var got uint64
		h, err = pingLoop(count, warm, func(seq uint64) error {
			binary.BigEndian.PutUint64(msg, seq)
			c.SetDeadline(time.Now().Add(pingTimeout)) //nolint:errcheck // the read says
			_, err := c.Write(msg)
			return err
		}, func() (int, error) {
			if _, err := io.ReadFull(c, buf); err != nil {
				return 0, err
			}
			got = binary.BigEndian.Uint64(buf)
			return 1, nil
		}, func(seq uint64) bool { return got == seq })
		return err
	}
	err := x.server(network, 1, serve, listen, client)
	return h, err
}

// tcpStream streams total bytes over kernel TCP from rank 0 to rank 1 in
// 64 KB writes, and returns the MB/s rank 0 saw (until rank 1 said it had
// every byte).
func (x *jobRun) tcpStream(total int) (float64, error) {
	var mbs float64
	client := func(addr string) error {
		if x.j.Rank != 0 {
			return nil
		}
		took, err := tcpSend(addr, total)
		mbs = float64(total) / took.Seconds() / 1e6
		return err
	}
	return mbs, x.server("tcp", 1, tcpSink, tcpListen, client)
}

// tcpIncast streams per bytes over kernel TCP from every rank but 0 to
// rank 0 at once, and returns the aggregate MB/s (at rank 0).
func (x *jobRun) tcpIncast(per int) (float64, error) {
	var took time.Duration
	err := x.server("tcp", 0, tcpSink, tcpListen, func(addr string) error {
		var err error
		took, err = tcpSend(addr, per)
		return err
	})
	if err != nil {
		return 0, err
	}
	times, err := x.gather("tcp.incast", took.Seconds())
	if err != nil || x.j.Rank != 0 {
		return 0, err
	}
	slowest := 0.0
	for _, t := range times[1:] {
		slowest = max(slowest, t)
	}
	return float64((x.j.Size-1)*per) / slowest / 1e6, nil
}

func tcpListen(addr string) (io.Closer, string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	return l, l.Addr().String(), nil
}

// tcpSink accepts connections until closed; each is read to its end (a
// length first) and answered with one byte.
func tcpSink(l io.Closer) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.(net.Listener).Accept()
		if err != nil {
			return err
		}
		wg.Go(func() {
			defer c.Close()
			var n [8]byte
			if _, err := io.ReadFull(c, n[:]); err != nil {
				return
			}
			if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint64(n[:]))); err == nil {
				c.Write([]byte{1}) //nolint:errcheck // the sender waits for it
			}
		})
	}
}

// tcpSend sends total bytes to addr's tcpSink in 64 KB writes and returns
// the time until the sink answered.
func tcpSend(addr string, total int) (time.Duration, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Minute)) //nolint:errcheck // a failed write says
	buf := make([]byte, 64<<10)
	t0 := time.Now()
	binary.BigEndian.PutUint64(buf[:8], uint64(total))
	if _, err := c.Write(buf[:8]); err != nil {
		return 0, err
	}
	for sent := 0; sent < total; {
		n, err := c.Write(buf[:min(len(buf), total-sent)])
		if err != nil {
			return 0, err
		}
		sent += n
	}
	if _, err := io.ReadFull(c, buf[:1]); err != nil {
		return 0, fmt.Errorf("the sink's answer: %w", err)
	}
	return time.Since(t0), nil
}
