package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/lab"
)

// runCapture records the xam frames a device carries as a pcap file in ERF
// encapsulation (every cell, and every AAL5 PDU reassembled from them),
// which Wireshark dissects (capturer says what it sees and what it counts).
func runCapture(e *env, args []string) error {
	fs := newFlags(e, "capture", "capture --dev IF [--netns NS] --out FILE [--format erf|ether] [--count N] [--duration D] [--buffer BYTES]")
	dev := fs.String("dev", "", "the device to capture on")
	ns := fs.String("netns", "", "the named network namespace the device is in (e.g. xam-lab-sw)")
	out := fs.String("out", "", "the pcap file to write")
	count := fs.Int("count", 0, "stop after this many frames (0: no limit)")
	dur := fs.Duration("duration", 10*time.Second, "stop after this long (0: no limit)")
	buffer := fs.Int("buffer", defaultCaptureBuffer, "the capture socket's receive buffer in bytes: frames that arrive while it is full are missed (and counted)")
	format := fs.String("format", "erf", "erf: pcap of ATM cells and reassembled AAL5 PDUs (Wireshark's own ATM dissectors; open with -o erf.aal5_type:Unspecified); ether: pcapng of the Ethernet frames with their direction and the missed count (Wireshark with tools/wireshark/xam.lua)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dev == "" || *out == "" {
		return usageError("--dev and --out are required")
	}
	if *count < 0 || *dur < 0 {
		return usageError("--count and --duration must not be negative")
	}
	if *count == 0 && *dur == 0 {
		return usageError("give --count or --duration, or the capture never ends")
	}
	if *format != "erf" && *format != "ether" {
		return usageError("--format %q: want erf or ether", *format)
	}
	if *buffer < minCaptureBuffer || *buffer > maxCaptureBuffer {
		return usageError("--buffer %d: want %d..%d bytes", *buffer, minCaptureBuffer, maxCaptureBuffer)
	}
	if err := needPrivileges("xam capture"); err != nil {
		return err
	}
	var c *capturer
	open := func() (err error) {
		c, err = openCapture(*dev, *buffer)
		return err
	}
	var err error
	if *ns != "" {
		var n *lab.Namespace
		if n, err = lab.OpenNamespace(*ns); err == nil {
			err = n.Do(open)
			n.Close()
		}
	} else {
		err = open()
	}
	if err != nil {
		return err
	}
	defer c.close()

	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	in := watchInterrupts(e, "the capture ends and its counts follow")
	defer in.release()
	stop := in.flag()
	deadline := time.Time{}
	if *dur > 0 {
		deadline = time.Now().Add(*dur)
	}
	sink, err := newCaptureSink(f, *format, *dev)
	if err != nil {
		f.Close()
		return err
	}
	err = c.run(sink, *count, func() bool { return stop.Load() || !deadline.IsZero() && time.Now().After(deadline) })
	st := c.stats()
	if cerr := sink.close(st.missed); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	fmt.Fprintf(e.stderr, "xam capture: %d frames, %d cells, %d PDUs, %d missed, %d malformed (%s)\n",
		st.frames, st.cells, st.pdus, st.missed, st.bad, *out)
	if st.missed > 0 {
		fmt.Fprintf(e.stderr, "xam capture: %d frames arrived while the socket's buffer was full and are not in the file; a larger --buffer (now %d) keeps more\n",
			st.missed, *buffer)
	}
	return err
}

// The capture socket's receive buffer: large by default, so that bursts at
// wire speed wait in it rather than being missed.
const (
	defaultCaptureBuffer = 64 << 20
	minCaptureBuffer     = 4 << 10
	maxCaptureBuffer     = 1 << 30
)

// capturer reads xam's frames from an AF_PACKET socket on one device.
//
// What it sees: frames that pass the kernel's stack on that device. In a
// lab, a port of the switch namespace sees both directions; on a host whose
// XDP program redirects xam frames to AF_XDP, the kernel never sees them.
//
// What it misses, it counts: a socket filter (classic BPF) keeps only xam's
// EtherType, so that the kernel's count of frames dropped for a full
// receive buffer (PACKET_STATISTICS) counts xam frames only; that count is
// read as the capture goes (reading it resets it) and reported as missed.
//
// Time stamps: the kernel's receive time stamp of each frame
// (SO_TIMESTAMPING), the NIC's raw hardware stamp where the driver gives
// one, otherwise the software stamp taken when the frame entered the
// stack; never the time the capture read it.
type capturer struct {
	fd     int
	buf    []byte
	oob    []byte
	frames atomic.Int64 // frames recorded, for a reader in another goroutine
	missed atomic.Int64
	st     captureStats
}

type captureStats struct{ frames, cells, pdus, bad, missed int }

// openCapture opens the capture socket on dev with a receive buffer of
// buffer bytes.
func openCapture(dev string, buffer int) (*capturer, error) {
	idx, err := ifindex(dev)
	if err != nil {
		return nil, err
	}
	all := uint16(unix.ETH_P_ALL)
	proto := all<<8 | all>>8 // network order
	// A socket for all protocols: one for xam's EtherType alone would miss
	// frames a bridge port forwards and sends, which the kernel hands only
	// to all-protocol taps. The filter below keeps xam's.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	c := &capturer{fd: fd, buf: make([]byte, 65536), oob: make([]byte, 256)}
	fail := func(what string, err error) (*capturer, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("capture socket on %s: %s: %w", dev, what, err)
	}
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_H | unix.BPF_ABS, K: 12},
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, Jt: 0, Jf: 1, K: uint32(cells.EtherType)},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0xffff},
		{Code: unix.BPF_RET | unix.BPF_K, K: 0},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return fail("filter", err)
	}
	// FORCE goes past net.core.rmem_max (root or CAP_NET_ADMIN, which an
	// AF_PACKET socket needs anyway); the kernel doubles the value.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, buffer/2); err != nil {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, buffer/2); err != nil {
			return fail("receive buffer", err)
		}
	}
	stamps := unix.SOF_TIMESTAMPING_RX_SOFTWARE | unix.SOF_TIMESTAMPING_SOFTWARE |
		unix.SOF_TIMESTAMPING_RX_HARDWARE | unix.SOF_TIMESTAMPING_RAW_HARDWARE
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPING, stamps); err != nil {
		return fail("time stamps", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: idx}); err != nil {
		return fail("bind", err)
	}
	// Frames that arrived between socket and bind, of any protocol, were
	// counted before the capture began: start from zero.
	if _, err := unix.GetsockoptTpacketStats(fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err != nil {
		return fail("statistics", err)
	}
	// A short receive timeout, so that the capture stops on time.
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("timeout", err)
	}
	return c, nil
}

func (c *capturer) close() error { return unix.Close(c.fd) }

// stats returns the counts so far; missed is up to date after run returns.
func (c *capturer) stats() captureStats { return c.st }

// recorded returns the frames recorded and missed so far, from any
// goroutine.
func (c *capturer) recorded() (frames, missed int64) { return c.frames.Load(), c.missed.Load() }

// collectMissed adds the kernel's count of dropped frames since the last
// call.
func (c *capturer) collectMissed() error {
	ts, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return fmt.Errorf("capture statistics: %w", err)
	}
	c.st.missed += int(ts.Drops)
	c.missed.Store(int64(c.st.missed))
	return nil
}

// stamp returns the kernel's time stamp of the frame whose control
// messages are oob.
func stamp(oob []byte) time.Time {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Now()
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_TIMESTAMPING || len(m.Data) < 3*16 {
			continue
		}
		// struct scm_timestamping: software, (legacy), raw hardware.
		ts := func(i int) time.Time {
			sec := int64(binary.NativeEndian.Uint64(m.Data[16*i:]))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[16*i+8:]))
			return time.Unix(sec, nsec)
		}
		if hw := ts(2); hw.Unix() != 0 {
			return hw
		}
		if sw := ts(0); sw.Unix() != 0 {
			return sw
		}
	}
	return time.Now()
}

// captureSink is where a capture's frames go: a file of one format.
type captureSink interface {
	frame(ts time.Time, frame, body []byte, dir cells.Direction, st *captureStats) error
	close(missed int) error
}

func newCaptureSink(w io.Writer, format, dev string) (captureSink, error) {
	if format == "ether" {
		fw, err := cells.NewFrameWriter(w, dev)
		return etherSink{fw}, err
	}
	cw, err := cells.NewCaptureWriter(w, cells.UNI)
	// One reassembler per direction would be exact; frames of both
	// directions on one circuit are rare in xam (each side receives on its
	// own VCI), so one per capture serves.
	return &erfSink{cw: cw, r: cells.NewReassembler(cells.ReassemblerConfig{})}, err
}

// erfSink records every cell, and every AAL5 PDU reassembled from them.
type erfSink struct {
	cw *cells.CaptureWriter
	r  *cells.Reassembler
}

func (s *erfSink) frame(ts time.Time, _, body []byte, _ cells.Direction, st *captureStats) error {
	for o := 0; o < len(body); o += cells.CellSize {
		cl := cells.Cell(body[o : o+cells.CellSize])
		if err := s.cw.WriteCell(ts, cl); err != nil {
			return err
		}
		st.cells++
		pdu, ok, _ := s.r.Push(cl)
		if ok {
			if err := s.cw.WritePDU(ts, pdu.VC, pdu.CPCS); err != nil && !errors.Is(err, cells.ErrCaptureTooLong) {
				return err
			}
			st.pdus++
		}
	}
	return nil
}

func (s *erfSink) close(int) error { return nil }

// etherSink records the frames as they were on the wire.
type etherSink struct{ fw *cells.FrameWriter }

func (s etherSink) frame(ts time.Time, frame, body []byte, dir cells.Direction, st *captureStats) error {
	st.cells += len(body) / cells.CellSize
	return s.fw.WriteFrame(ts, frame, dir)
}

func (s etherSink) close(missed int) error { return s.fw.Close(time.Now(), uint64(missed)) }

// direction tells from an AF_PACKET source address which way a frame went.
func direction(from unix.Sockaddr) cells.Direction {
	ll, ok := from.(*unix.SockaddrLinklayer)
	switch {
	case !ok:
		return cells.DirectionUnknown
	case ll.Pkttype == unix.PACKET_OUTGOING:
		return cells.DirectionOutbound
	}
	return cells.DirectionInbound
}

// run records frames into sink until count frames are recorded (0: no
// limit) or done reports true.
func (c *capturer) run(sink captureSink, count int, done func() bool) error {
	st := &c.st
	lastStats := time.Now()
	for (count == 0 || st.frames < count) && !done() {
		if time.Since(lastStats) > time.Second {
			lastStats = time.Now()
			if err := c.collectMissed(); err != nil {
				return err
			}
		}
		n, oobn, _, from, err := unix.Recvmsg(c.fd, c.buf, c.oob, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			if err := c.collectMissed(); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("recvmsg: %w", err)
		}
		buf := c.buf[:n]
		if n < cells.EthernetHeaderSize || uint16(buf[12])<<8|uint16(buf[13]) != cells.EtherType {
			continue // not xam's (the filter keeps only xam's)
		}
		body, _, err := cells.Unpack(buf, 0)
		if err != nil {
			st.bad++
			continue
		}
		st.frames++
		c.frames.Store(int64(st.frames))
		if err := sink.frame(stamp(c.oob[:oobn]), buf, body, direction(from), st); err != nil {
			return err
		}
	}
	return c.collectMissed()
}

func ifindex(dev string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(dev)
	if err != nil {
		return 0, fmt.Errorf("device %q: %w", dev, err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, fmt.Errorf("device %s: %w", dev, err)
	}
	return int(ifr.Uint32()), nil
}
