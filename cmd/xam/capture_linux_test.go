package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/lab"
)

// switchCapture builds a two-host lab with a switch and opens a capture of
// buffer bytes on the switch's port toward host 0; both go when the test
// ends.
func switchCapture(t *testing.T, name string, buffer int) (*lab.Lab, *capturer) {
	t.Helper()
	return switchCaptureMTU(t, name, buffer, 0)
}

// switchCaptureMTU is switchCapture on links of MTU mtu (0: 1500).
func switchCaptureMTU(t *testing.T, name string, buffer, mtu int) (*lab.Lab, *capturer) {
	t.Helper()
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("%s%d", name, os.Getpid()), Switch: true, MTU: mtu})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Down() })
	var c *capturer
	if err := l.Switch.Do(func() (err error) {
		c, err = openCapture(l.Switch.Ports[0], buffer)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.close() })
	return l, c
}

// TestCaptureCountsMissed: every frame that crosses the captured port is
// either in the file or counted as missed. The capture's socket has the
// smallest buffer and is not read while host 0 sends a burst of frames
// through the switch, so most of the burst cannot wait in it; once the
// capture reads, recorded plus missed must come to the burst exactly.
// Before, frames dropped at a full buffer were reported as "0 dropped".
func TestCaptureCountsMissed(t *testing.T) {
	testenv.RequirePrivileged(t)
	l, c := switchCapture(t, "miss", minCaptureBuffer)
	a, b := l.Hosts[0], l.Hosts[1]

	const burst = 2000
	cs := make([]byte, cells.CellSize)
	if err := cells.Cell(cs).Encode(cells.UNI, cells.Fields{VCI: 32, PTI: cells.PTIEndOfMessage}); err != nil {
		t.Fatal(err)
	}
	frame, err := (&cells.Framer{Dst: b.MAC, Src: a.MAC}).Append(nil, cs)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		to := &unix.SockaddrLinklayer{Ifindex: a.Index, Halen: 6}
		copy(to.Addr[:], b.MAC)
		for range burst {
			if err := unix.Sendto(fd, frame, 0, to); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	f, err := os.Create(filepath.Join(t.TempDir(), "burst.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Read until every frame of the burst is accounted for; a generous
	// bound only ends a capture that never gets there.
	bound := time.Now().Add(20 * time.Second)
	sink, err := newCaptureSink(f, "erf", "p0")
	if err != nil {
		t.Fatal(err)
	}
	err = c.run(sink, 0, func() bool {
		frames, missed := c.recorded()
		return frames+missed >= burst || time.Now().After(bound)
	})
	if err != nil {
		t.Fatal(err)
	}
	st := c.stats()
	if st.frames+st.missed != burst || st.missed == 0 || st.bad != 0 {
		t.Fatalf("a burst of %d frames: %d recorded, %d missed, %d malformed", burst, st.frames, st.missed, st.bad)
	}
	t.Logf("a burst of %d frames into a %d-byte buffer: %d recorded, %d missed", burst, minCaptureBuffer, st.frames, st.missed)
}
