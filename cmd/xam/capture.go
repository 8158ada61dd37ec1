package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/lab"
)

// runCapture records the xam frames a device carries as a pcap file in ERF
// encapsulation (every cell, and every AAL5 PDU reassembled from them),
// which Wireshark dissects. It reads through an AF_PACKET socket, so it sees
// what passes the kernel's stack on that device: in a lab, a port of the
// switch namespace sees both directions; on a host whose XDP program
// redirects xam frames to AF_XDP, the kernel never sees them.
func runCapture(e *env, args []string) error {
	fs := newFlags(e, "capture", "capture --dev IF [--netns NS] --out FILE [--count N] [--duration D]")
	dev := fs.String("dev", "", "the device to capture on")
	ns := fs.String("netns", "", "the named network namespace the device is in (e.g. xam-lab-sw)")
	out := fs.String("out", "", "the pcap file to write")
	count := fs.Int("count", 0, "stop after this many frames (0: no limit)")
	dur := fs.Duration("duration", 10*time.Second, "stop after this long (0: no limit)")
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
	var fd int
	open := func() (err error) {
		fd, err = captureSocket(*dev)
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
	defer unix.Close(fd)

	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	st, err := capture(fd, f, *count, *dur)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	fmt.Fprintf(e.stderr, "xam capture: %d frames, %d cells, %d PDUs, %d dropped (%s)\n",
		st.frames, st.cells, st.pdus, st.bad, *out)
	return err
}

// captureSocket opens an AF_PACKET socket for all protocols on dev (a
// socket for one EtherType would miss frames a bridge port forwards and
// sends: the kernel hands those only to all-protocol taps), with a short
// receive timeout so that the capture can stop on time. capture keeps
// xam's frames.
func captureSocket(dev string) (int, error) {
	idx, err := ifindex(dev)
	if err != nil {
		return -1, err
	}
	all := uint16(unix.ETH_P_ALL)
	proto := all<<8 | all>>8 // network order
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return -1, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: idx}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("binding to %s: %w", dev, err)
	}
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
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

type captureStats struct{ frames, cells, pdus, bad int }

// capture reads frames from fd until count frames or dur have passed, and
// records them.
func capture(fd int, w *os.File, count int, dur time.Duration) (captureStats, error) {
	var st captureStats
	cw, err := cells.NewCaptureWriter(w, cells.UNI)
	if err != nil {
		return st, err
	}
	// One reassembler per direction would be exact; frames of both
	// directions on one circuit are rare in xam (each side receives on its
	// own VCI), so one per capture serves.
	r := cells.NewReassembler(cells.ReassemblerConfig{})
	buf := make([]byte, 65536)
	start := time.Now()
	for (count == 0 || st.frames < count) && (dur == 0 || time.Since(start) < dur) {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("recvfrom: %w", err)
		}
		if n < cells.EthernetHeaderSize || uint16(buf[12])<<8|uint16(buf[13]) != cells.EtherType {
			continue // not xam's
		}
		body, _, err := cells.Unpack(buf[:n], 0)
		if err != nil {
			st.bad++
			continue
		}
		st.frames++
		now := time.Now()
		for o := 0; o < len(body); o += cells.CellSize {
			c := cells.Cell(body[o : o+cells.CellSize])
			if err := cw.WriteCell(now, c); err != nil {
				return st, err
			}
			st.cells++
			pdu, ok, _ := r.Push(c)
			if ok {
				if err := cw.WritePDU(now, pdu.VC, pdu.CPCS); err != nil && !errors.Is(err, cells.ErrCaptureTooLong) {
					return st, err
				}
				st.pdus++
			}
		}
	}
	return st, nil
}
