package transport

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// floodFrames makes forged frames for the host whose MAC is dst, claiming to
// come from its peer src, or from a stranger: cells that open PDUs on
// made-up circuits and never end them, ACK, DATA and RESET frames with
// made-up epochs, random cells on the transport's own circuit, and garbage.
func floodFrames(t *testing.T, dst, src net.HardwareAddr, rng *rand.Rand) [][]byte {
	t.Helper()
	stranger := net.HardwareAddr{0x02, 0xbd, 0, 0, 0, 9}
	frame := func(from net.HardwareAddr, cs []byte) []byte {
		f, err := (&cells.Framer{Dst: dst, Src: from}).Append(nil, cs)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	var out [][]byte
	for range 64 {
		var open []byte
		for vci := uint16(100); vci < 104; vci++ {
			pdu, err := cells.Segment(cells.SAR{VCI: vci + uint16(rng.IntN(50))}, make([]byte, 500))
			if err != nil {
				t.Fatal(err)
			}
			open = append(open, pdu[:cells.CellSize]...)
		}
		out = append(out, frame(src, open))
		out = append(out, epochFrame(t, dst, src, typeAck, rng.IntN(16), uint16(rng.Uint32()), rng.Uint32(), rng.Uint32()|1, 0, nil))
		out = append(out, epochFrame(t, dst, src, typeData, rng.IntN(16), uint16(rng.Uint32()), rng.Uint32(), rng.Uint32()|1, rng.Uint32(), payload(rng.Uint32(), 60)))
		out = append(out, epochFrame(t, dst, src, typeReset, rng.IntN(16), 0, rng.Uint32(), rng.Uint32()|1, rng.Uint32(), nil))
		var junk []byte
		for range 1 + rng.IntN(4) {
			c := make([]byte, cells.CellSize)
			for i := range c {
				c[i] = byte(rng.Uint32())
			}
			pti := uint8(rng.IntN(2))
			if err := cells.Cell(c).Encode(cells.UNI, cells.Fields{VCI: DefaultVCI, PTI: pti}); err != nil {
				t.Fatal(err)
			}
			junk = append(junk, c...)
		}
		out = append(out, frame(src, junk), frame(stranger, junk))
	}
	return out
}

// TestFloodOverAFXDP: while the transports exchange 20,000 messages each
// way over AF_XDP (2% of frames dropped), host B's side of the veth sends A
// a flood of forged frames (floodFrames: made-up circuits, epochs, ACKs,
// RESETs, random cells on the transport's circuit, frames from a stranger)
// as fast as it can. Every real message is delivered exactly once, none is
// returned, and no restart is believed. Before, the flood's forged circuits
// filled A's reassembler and its forged epochs were taken for B's restarts:
// real traffic stopped, or came back as returned.
func TestFloodOverAFXDP(t *testing.T) {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	_, sockA := xdptest.OpenHost(t, v.A, 0.02, 21)
	_, sockB := xdptest.OpenHost(t, v.B, 0.02, 22)
	p := pairOn(t, sockA, sockB, nil, Config{Channels: 16, RetransmitAfter: time.Millisecond})
	forged := floodFrames(t, v.A.MAC, v.B.MAC, rand.New(rand.NewPCG(7, 8)))

	var stop atomic.Bool
	var sent atomic.Int64
	var wg sync.WaitGroup
	var floodErr error
	wg.Go(func() {
		floodErr = v.B.Do(func() error {
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			to := &unix.SockaddrLinklayer{Ifindex: v.B.Index, Halen: 6}
			copy(to.Addr[:], v.A.MAC)
			for i := 0; !stop.Load(); i++ {
				if err := unix.Sendto(fd, forged[i%len(forged)], 0, to); err != nil && err != unix.ENOBUFS {
					return err
				}
				sent.Add(1)
			}
			return nil
		})
	})
	// The exchange begins once the flood has.
	for sent.Load() < 100 && floodErr == nil {
		time.Sleep(time.Millisecond)
	}
	lossBody(t, p, 20_000, 64)
	stop.Store(true)
	wg.Wait()
	if floodErr != nil {
		t.Fatal(floodErr)
	}
	sa, sb := p.a.tr.Stats(), p.b.tr.Stats()
	if sa.Restarts != 0 || sb.Restarts != 0 || sa.Unconfirmed == 0 {
		t.Errorf("A %+v\nB %+v", sa, sb)
	}
	t.Logf("%d forged frames sent to A during the exchange; A: %d unconfirmed epochs, %d bad frames, %d from unknown sources",
		sent.Load(), sa.Unconfirmed, sa.BadFrames, sa.UnknownSource)
}
