package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netdev"
)

// The kernel's own paths, measured beside the raw AF_XDP ping-pong: UDP
// sockets (the conventional stack) and AF_PACKET sockets carrying the same
// xam frames (a system call per frame, SSAM's "conventional path").

// UDPPing runs a ping-pong of size-byte datagrams (at least 8) from a to b
// over kernel UDP sockets, b echoing with blocking reads.
func UDPPing(a, b datapath.Place, aAddr, bAddr netip.Addr, cfg PingConfig) (*PingResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	size := max(cfg.Size, 8)
	var ca, cb *net.UDPConn
	if err := b.Do(func() (err error) {
		cb, err = net.ListenUDP("udp4", &net.UDPAddr{IP: bAddr.AsSlice(), Port: 7088})
		return err
	}); err != nil {
		return nil, fmt.Errorf("udp echo socket: %w", err)
	}
	defer cb.Close()
	if err := a.Do(func() (err error) {
		ca, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: bAddr.AsSlice(), Port: 7088})
		return err
	}); err != nil {
		return nil, fmt.Errorf("udp ping socket: %w", err)
	}
	defer ca.Close()
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := cb.ReadFromUDPAddrPort(buf)
			if err != nil {
				return // closed
			}
			cb.WriteToUDPAddrPort(buf[:n], from)
		}
	})
	defer wg.Wait()
	defer cb.Close()

	r := cfg.newResult("udp", size)
	msg := make([]byte, size)
	buf := make([]byte, 65536)
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
			n, err := ca.Read(buf)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			if err != nil {
				return nil, err
			}
			got = n >= 8 && binary.BigEndian.Uint64(buf) == uint64(i)
		}
		r.record(i >= cfg.Warmup, got, time.Since(start))
	}
	r.finish()
	return r, nil
}

// PacketPing runs the ping-pong of raw xam frames from a to b through
// AF_PACKET sockets, one system call per frame each way. No XDP program may
// be attached for xam's EtherType while it runs.
func PacketPing(a, b datapath.Place, cfg PingConfig) (*PingResult, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	frame, err := rawFrame(b.MAC, a.MAC, cfg.Size)
	if err != nil {
		return nil, err
	}
	var fa, fb *netdev.Packet
	if err := a.Do(func() (err error) { fa, err = netdev.OpenPacket(a.Ifindex, cells.EtherType); return err }); err != nil {
		return nil, err
	}
	defer fa.Close()
	if err := b.Do(func() (err error) { fb, err = netdev.OpenPacket(b.Ifindex, cells.EtherType); return err }); err != nil {
		return nil, err
	}
	// The echo: a blocking receive and a send per frame, until told to
	// stop (it wakes every 50 ms to look).
	if err := fb.SetTimeout(50 * time.Millisecond); err != nil {
		fb.Close()
		return nil, err
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 65536)
		for !stop.Load() {
			n, out, ok, err := fb.Recv(buf)
			if err != nil || !ok || out || n < cells.EthernetHeaderSize {
				continue // timeouts, and the socket's view of its own echoes
			}
			var mac [6]byte
			copy(mac[:], buf[0:6])
			copy(buf[0:6], buf[6:12])
			copy(buf[6:12], mac[:])
			fb.Send(buf[:n])
		}
	})
	defer func() {
		stop.Store(true)
		wg.Wait()
		fb.Close()
	}()
	if err := fa.SetTimeout(cfg.Timeout); err != nil {
		return nil, err
	}
	buf := make([]byte, 65536)
	answered := func(seq uint64) (bool, error) {
		n, out, ok, err := fa.Recv(buf)
		// The socket also sees its own transmissions.
		return err == nil && ok && !out && isAnswer(buf[:n], seq), err
	}
	return pingFrames(cfg, "packet", frame, 1, func() error { return fa.Send(frame) }, answered)
}
