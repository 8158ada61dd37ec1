package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netdev"
	"github.com/xam-project/xam/lab"
)

// runCapture records the xam frames a device carries as a pcap file in ERF
// encapsulation (every cell, and every AAL5 PDU reassembled from them),
// which Wireshark dissects (capturer says what it sees and what it counts).
func runCapture(e *env, args []string) error {
	fs := newFlags(e, "capture", "capture --dev IF [--netns NS] --out FILE [--format erf|ether] [--count N] [--duration D] [--buffer BYTES]   (erf: pcap of ATM cells and AAL5 PDUs; ether: pcapng of the Ethernet frames)")
	dev := fs.String("dev", "", "the device to capture on")
	ns := fs.String("netns", "", "the named network namespace the device is in (e.g. xam-lab-sw)")
	out := fs.String("out", "", "the pcap file to write")
	count := fs.Int("count", 0, "stop after this many frames (0: no limit)")
	dur := fs.Duration("duration", 10*time.Second, "stop after this long (0: no limit)")
	buffer := fs.Int("buffer", defaultCaptureBuffer, "the capture socket's receive buffer in bytes: frames that arrive while it is full are missed (and counted)")
	encapFlag := fs.String("encap", "raw", "the frames' form: raw, or udp[:PORT] (udp6[:PORT] is the same) to keep xam's UDP form to PORT as well")
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
	enc, err := datapath.ParseEncap(*encapFlag)
	if err != nil {
		return usageError("%v", err)
	}
	var udpPort uint16
	if enc.UDP {
		udpPort = enc.Port
	}
	if err := needPrivileges("xam capture"); err != nil {
		return err
	}
	var c *capturer
	open := func() (err error) {
		c, err = openCaptureUDP(*dev, udpPort, *buffer)
		return err
	}
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

// capturer reads xam's frames from a tap (netdev.Tap: an AF_PACKET socket
// that keeps xam's EtherType) on one device, with the kernel's time stamps,
// and counts what the kernel dropped for a full receive buffer as missed.
type capturer struct {
	tap     *netdev.Tap
	udpPort uint16       // xam's UDP form is kept too, to this port; 0: raw frames only
	frames  atomic.Int64 // frames recorded, for a reader in another goroutine
	missed  atomic.Int64
	st      captureStats
}

type captureStats struct{ frames, cells, pdus, bad, missed int }

// openCapture opens the capture's tap on dev with a receive buffer of
// buffer bytes.
func openCapture(dev string, buffer int) (*capturer, error) {
	return openCaptureUDP(dev, 0, buffer)
}

// openCaptureUDP is openCapture that also keeps xam's UDP form to
// udpPort.
func openCaptureUDP(dev string, udpPort uint16, buffer int) (*capturer, error) {
	tap, err := netdev.OpenTapUDP(dev, cells.EtherType, udpPort, buffer)
	if err != nil {
		return nil, err
	}
	return &capturer{tap: tap, udpPort: udpPort}, nil
}

func (c *capturer) close() error { return c.tap.Close() }

// stats returns the counts so far; missed is up to date after run returns.
func (c *capturer) stats() captureStats { return c.st }

// recorded returns the frames recorded and missed so far, from any
// goroutine.
func (c *capturer) recorded() (frames, missed int64) { return c.frames.Load(), c.missed.Load() }

// collectMissed adds the kernel's count of dropped frames since the last
// call.
func (c *capturer) collectMissed() error {
	n, err := c.tap.Dropped()
	if err != nil {
		return err
	}
	c.st.missed += n
	c.missed.Store(int64(c.st.missed))
	return nil
}

// captureSink is where a capture's frames go: a file of one format.
type captureSink interface {
	frame(ts time.Time, frame, body []byte, dir cells.Direction, st *captureStats) error
	close(missed int) error
}

func newCaptureSink(w io.Writer, format, dev string) (captureSink, error) {
	if format == "ether" {
		fw, err := cells.NewFrameWriter(w, dev)
		return &etherSink{fw: fw, r: cells.NewReassembler(cells.ReassemblerConfig{})}, err
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

// etherSink records the frames as they were on the wire, and counts the
// AAL5 PDUs they carry as the ERF sink does (reassembled, not recorded).
type etherSink struct {
	fw *cells.FrameWriter
	r  *cells.Reassembler
}

func (s *etherSink) frame(ts time.Time, frame, body []byte, dir cells.Direction, st *captureStats) error {
	for o := 0; o+cells.CellSize <= len(body); o += cells.CellSize {
		st.cells++
		if _, ok, _ := s.r.Push(cells.Cell(body[o : o+cells.CellSize])); ok {
			st.pdus++
		}
	}
	return s.fw.WriteFrame(ts, frame, dir)
}

func (s *etherSink) close(missed int) error { return s.fw.Close(time.Now(), uint64(missed)) }

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
		buf, ts, outgoing, ok, err := c.tap.Read()
		if err != nil {
			return err
		}
		if !ok {
			if err := c.collectMissed(); err != nil {
				return err
			}
			continue
		}
		if len(buf) < cells.EthernetHeaderSize {
			continue
		}
		var body []byte
		if t := uint16(buf[12])<<8 | uint16(buf[13]); t == cells.EtherType {
			body, _, err = cells.Unpack(buf, 0)
		} else if c.udpPort == 0 {
			continue // not xam's (the filter keeps only xam's)
		} else if u, uerr := cells.ParseUDP(buf, c.udpPort); uerr != nil {
			err = uerr
		} else {
			body, _, err = cells.UnpackPayload(buf[u.Off:u.End])
		}
		if err != nil {
			st.bad++
			continue
		}
		st.frames++
		c.frames.Store(int64(st.frames))
		dir := cells.DirectionInbound
		if outgoing {
			dir = cells.DirectionOutbound
		}
		if err := sink.frame(ts, buf, body, dir, st); err != nil {
			return err
		}
	}
	return c.collectMissed()
}
