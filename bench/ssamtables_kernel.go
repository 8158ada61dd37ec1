package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/xam-project/xam/datapath"
)

// The kernel's paths of part 4 of SSAM's tables (see ssamtables.go): a
// TCP ping-pong, a TCP stream and a UDP blast between two places, the
// references SSAM's round trips and bulk writes are set beside.

// Ports of the kernel-socket benchmarks (UDPPing uses 7088).
const (
	tcpPingPort   = 7089
	udpBlastPort  = 7090
	tcpStreamPort = 7091
)

// tcpPair connects a to a listener at bAddr:port in b's namespace and
// returns both ends, with TCP_NODELAY.
func tcpPair(a, b datapath.Place, bAddr netip.Addr, port int) (ca, cb *net.TCPConn, err error) {
	var ln *net.TCPListener
	if err := b.Do(func() (err error) {
		ln, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: bAddr.AsSlice(), Port: port})
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("tcp listener: %w", err)
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		var err error
		cb, err = ln.AcceptTCP()
		accepted <- err
	}()
	err = a.Do(func() (err error) {
		ca, err = net.DialTCP("tcp4", nil, &net.TCPAddr{IP: bAddr.AsSlice(), Port: port})
		return err
	})
	if err != nil {
		ln.Close() // ends the accept
		<-accepted
		if cb != nil {
			cb.Close()
		}
		return nil, nil, fmt.Errorf("tcp dial: %w", err)
	}
	if err := <-accepted; err != nil {
		ca.Close()
		return nil, nil, fmt.Errorf("tcp accept: %w", err)
	}
	for _, c := range []*net.TCPConn{ca, cb} {
		if err := c.SetNoDelay(true); err != nil {
			ca.Close()
			cb.Close()
			return nil, nil, err
		}
	}
	return ca, cb, nil
}

// tcpPing runs a ping-pong of size-byte messages (at least 8) from a to b
// over a kernel TCP connection with TCP_NODELAY, b echoing each message
// with blocking reads, as UDPPing does with datagrams.
func tcpPing(a, b datapath.Place, aAddr, bAddr netip.Addr, cfg PingConfig) (*PingResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	size := max(cfg.Size, 8)
	ca, cb, err := tcpPair(a, b, bAddr, tcpPingPort)
	if err != nil {
		return nil, err
	}
	defer ca.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(cb, buf); err != nil {
				return // closed
			}
			if _, err := cb.Write(buf); err != nil {
				return
			}
		}
	})
	defer wg.Wait()
	defer cb.Close()

	r := cfg.newResult("tcp", size)
	msg := make([]byte, size)
	buf := make([]byte, size)
	for i := range cfg.Warmup + cfg.Count {
		if r.stop(&cfg) {
			break
		}
		binary.BigEndian.PutUint64(msg, uint64(i))
		start := time.Now()
		ca.SetReadDeadline(start.Add(cfg.Timeout))
		if _, err := ca.Write(msg); err != nil {
			return nil, err
		}
		got := false
		for !got {
			_, err := io.ReadFull(ca, buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				return nil, err
			}
			got = binary.BigEndian.Uint64(buf) == uint64(i) // an older, late echo is skipped
		}
		r.record(i >= cfg.Warmup, got, time.Since(start))
	}
	r.finish()
	return r, nil
}

// tcpStream sends total bytes from a to b over a kernel TCP connection in
// writes of msg bytes; the rate counts from the first write until b has
// read the last byte.
func tcpStream(a, b datapath.Place, aAddr, bAddr netip.Addr, total int64, msg int) (*BulkResult, error) {
	if msg < 1 || total < 1 {
		return nil, fmt.Errorf("TCP stream of %d bytes in %d-byte writes", total, msg)
	}
	ca, cb, err := tcpPair(a, b, bAddr, tcpStreamPort)
	if err != nil {
		return nil, err
	}
	defer ca.Close()
	defer cb.Close()
	type result struct {
		n   int64
		end time.Time
		err error
	}
	done := make(chan result, 1)
	go func() {
		buf := make([]byte, 256<<10)
		var n int64
		for n < total {
			k, err := cb.Read(buf)
			n += int64(k)
			if err != nil {
				done <- result{n, time.Now(), err}
				return
			}
		}
		done <- result{n, time.Now(), nil}
	}()
	data := make([]byte, msg)
	start := time.Now()
	var werr error
	for sent := int64(0); sent < total && werr == nil; {
		k := int(min(int64(msg), total-sent))
		_, werr = ca.Write(data[:k])
		sent += int64(k)
	}
	if werr != nil {
		cb.Close() // ends the reader
	}
	r := <-done
	if err := errors.Join(werr, r.err); err != nil {
		return nil, err
	}
	secs := r.end.Sub(start).Seconds()
	return &BulkResult{API: "tcp", Bytes: r.n, Message: msg, Seconds: secs, MBPerSec: float64(r.n) / secs / 1e6}, nil
}

// blastResult is the outcome of udpBlast: the rate counts the bytes that
// arrived.
type blastResult struct {
	BulkResult
	Sent     int     `json:"datagrams_sent"`
	Received int     `json:"datagrams_received"`
	Loss     float64 `json:"loss"`
}

// udpRcvBuf is the receive buffer asked for the blast's receiving socket
// (as the AF_PACKET path asks for its own).
const udpRcvBuf = 4 << 20

// udpBlast sends total bytes from a to b as datagrams of msg bytes, back to
// back with no flow control, and counts at b what arrives: the rate is the
// bytes received over the time from the first send to the last arrival.
// The receiver stops when every datagram has arrived, or 200 ms after the
// last one did.
func udpBlast(a, b datapath.Place, aAddr, bAddr netip.Addr, total int64, msg int) (*blastResult, error) {
	if msg < 1 || msg > maxDatagram || total < 1 {
		return nil, fmt.Errorf("UDP blast of %d bytes in %d-byte datagrams", total, msg)
	}
	var ca, cb *net.UDPConn
	if err := b.Do(func() (err error) {
		cb, err = net.ListenUDP("udp4", &net.UDPAddr{IP: bAddr.AsSlice(), Port: udpBlastPort})
		return err
	}); err != nil {
		return nil, fmt.Errorf("udp receiving socket: %w", err)
	}
	defer cb.Close()
	cb.SetReadBuffer(udpRcvBuf)
	if raw, err := cb.SyscallConn(); err == nil { // beyond rmem_max, with CAP_NET_ADMIN
		raw.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, udpRcvBuf)
		})
	}
	if err := a.Do(func() (err error) {
		ca, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: bAddr.AsSlice(), Port: udpBlastPort})
		return err
	}); err != nil {
		return nil, fmt.Errorf("udp sending socket: %w", err)
	}
	defer ca.Close()
	datagrams := int((total + int64(msg) - 1) / int64(msg))
	type result struct {
		n     int64
		count int
		last  time.Time
		err   error
	}
	done := make(chan result, 1)
	go func() {
		buf := make([]byte, maxDatagram)
		var r result
		for r.count < datagrams {
			cb.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			k, err := cb.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				r.err = err
				break
			}
			r.n += int64(k)
			r.count++
			r.last = time.Now()
		}
		done <- r
	}()
	data := make([]byte, msg)
	start := time.Now()
	var werr error
	for sent := int64(0); sent < total; {
		k := int(min(int64(msg), total-sent))
		if _, err := ca.Write(data[:k]); err != nil {
			var errno syscall.Errno
			if !errors.As(err, &errno) || errno != syscall.ENOBUFS && errno != syscall.ECONNREFUSED {
				werr = err
				break
			}
		}
		sent += int64(k)
	}
	r := <-done
	if err := errors.Join(werr, r.err); err != nil {
		return nil, err
	}
	if r.count == 0 {
		return nil, fmt.Errorf("none of %d datagrams arrived", datagrams)
	}
	secs := r.last.Sub(start).Seconds()
	return &blastResult{
		BulkResult: BulkResult{API: "udp", Bytes: r.n, Message: msg, Seconds: secs, MBPerSec: float64(r.n) / secs / 1e6},
		Sent:       datagrams, Received: r.count, Loss: 1 - float64(r.count)/float64(datagrams),
	}, nil
}
