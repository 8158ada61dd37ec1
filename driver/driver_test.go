package driver_test

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/driver"
	"github.com/xam-project/xam/loader"
)

// forEach runs body over every harness.
func forEach(t *testing.T, body func(t *testing.T, h harness)) {
	for _, h := range harnesses {
		t.Run(h.name, func(t *testing.T) { body(t, h) })
	}
}

// newPair opens the usual pair over h.
func newPair(t *testing.T, h harness) *pair {
	a, b := configs()
	return h.new(t, a, b)
}

// checkCell checks a received cell: circuit, PTI, HEC and payload.
func checkCell(t *testing.T, cell cells.Cell, vpi, vci uint16, eom bool, tag byte, i int) {
	t.Helper()
	if !cell.Valid() {
		t.Errorf("cell % x: bad HEC", cell.Header())
	}
	if cell.VPI(cells.UNI) != vpi || cell.VCI() != vci || cell.EndOfMessage() != eom || cell.GFC() != 0 || cell.CLP() {
		t.Errorf("cell header %+v, want VPI/VCI %d/%d end of message %v", cell.Fields(cells.UNI), vpi, vci, eom)
	}
	if gotTag, gotI, ok := ident(cell.Payload()); !ok || gotTag != tag || gotI != i {
		t.Errorf("cell payload (%#x, %d, intact %v), want (%#x, %d)", gotTag, gotI, ok, tag, i)
	}
}

// TestRoundTrip sends single cells with every flag on every connection and
// checks that each arrives in its connection's ring, on the right VC.
func TestRoundTrip(t *testing.T) {
	forEach(t, func(t *testing.T, h harness) {
		p := newPair(t, h)
		flags := []driver.Flags{0, driver.EOM, driver.Bulk, driver.EOM | driver.Bulk}
		for c := range p.a.NumConns() {
			for i, f := range flags {
				off := p.a.NextSend(c)
				fill(p.a, c, off, byte(c), i)
				if err := p.a.Send(c, off, f); err != nil {
					t.Fatal(err)
				}
			}
		}
		want := p.a.NumConns() * len(flags)
		if got := collect(t, p.b, want, 5*time.Second); got != want {
			t.Fatalf("B received %d cells, want %d", got, want)
		}
		for c := range p.b.NumConns() {
			spec, _ := p.b.Conn(c)
			got := takeAll(p.b, c)
			if len(got) != len(flags) {
				t.Fatalf("connection %d: %d cells, want %d", c, len(got), len(flags))
			}
			for i, f := range flags {
				vci := spec.RecvVCI
				if f&driver.Bulk != 0 {
					vci++
				}
				checkCell(t, got[i], spec.VPI, vci, f&driver.EOM != 0, byte(c), i)
				if p.b.IsBulk(c, got[i]) != (f&driver.Bulk != 0) {
					t.Errorf("connection %d cell %d: IsBulk %v with flags %b", c, i, !(f&driver.Bulk != 0), f)
				}
			}
		}
		sa, sb := p.a.Stats(), p.b.Stats()
		if sa.CellsSent != uint64(want) || sa.FramesSent != uint64(want) || sb.CellsReceived != uint64(want) || sb.FramesReceived != uint64(want) {
			t.Errorf("stats A %+v, B %+v; want %d cells in %d frames each way", sa, sb, want, want)
		}
		// And back: B's connection 1 to A's connection 1.
		off := p.b.NextSend(1)
		fill(p.b, 1, off, 0xb1, 7)
		if err := p.b.Send(1, off, driver.EOM); err != nil {
			t.Fatal(err)
		}
		if collect(t, p.a, 1, 5*time.Second) != 1 {
			t.Fatal("A received nothing")
		}
		cell, ok := p.a.Take(1)
		if !ok {
			t.Fatal("nothing in A's connection 1")
		}
		checkCell(t, cell, 1, 202, true, 0xb1, 7)
	})
}

// TestBatch sends batches of many sizes and checks that they are packed
// into ceil(k / CellsPerFrame) frames, in order, with EOM on the last cell
// only, wrapping round the send area.
func TestBatch(t *testing.T) {
	forEach(t, func(t *testing.T, h harness) {
		p := newPair(t, h)
		per := p.a.CellsPerFrame()
		if h.name == "packet" {
			if per != 1 {
				t.Fatalf("CellsPerFrame %d on the system-call path, want 1", per)
			}
		} else if mtu := driver.LinkOf(p.a).MTU(); per != (mtu-4)/53 {
			t.Fatalf("CellsPerFrame %d, want (MTU %d - 4)/53", per, mtu)
		}
		slots := len(p.a.SendArea(0)) / cells.PayloadSize
		for _, k := range []int{1, 2, per - 1, per, per + 1, 2*per + 3, 100, 5 * per} {
			if k < 1 {
				continue
			}
			t.Run(fmt.Sprint(k), func(t *testing.T) {
				before, beforeB := p.a.Stats(), p.b.Stats()
				off := slots - 3 // wrap round the end of the area
				for i := range k {
					fill(p.a, 0, (off+i)%slots, 0xba, i)
				}
				if err := p.a.SendBatch(0, off, k, driver.EOM); err != nil {
					t.Fatal(err)
				}
				if got := collect(t, p.b, k, 5*time.Second); got != k {
					t.Fatalf("received %d cells, want %d", got, k)
				}
				cs := takeAll(p.b, 0)
				for i, c := range cs {
					checkCell(t, c, 1, 100, i == k-1, 0xba, i)
				}
				frames := uint64((k + per - 1) / per)
				after, afterB := p.a.Stats(), p.b.Stats()
				if d := after.FramesSent - before.FramesSent; d != frames {
					t.Errorf("%d cells sent in %d frames, want %d (%d cells per frame)", k, d, frames, per)
				}
				if d := afterB.FramesReceived - beforeB.FramesReceived; d != frames {
					t.Errorf("%d cells received in %d frames, want %d", k, d, frames)
				}
				if d := after.CellsSent - before.CellsSent; d != uint64(k) {
					t.Errorf("%d cells counted sent, want %d", d, k)
				}
			})
		}
	})
}

// TestBulkAAL5 sends an AAL5 PDU on the bulk VC and reassembles it from
// the receive ring, as the AM layer does.
func TestBulkAAL5(t *testing.T) {
	forEach(t, func(t *testing.T, h harness) {
		p := newPair(t, h)
		sdu := make([]byte, 3000)
		for i := range sdu {
			sdu[i] = byte(i * 7)
		}
		pdu, err := cells.Segment(cells.SAR{}, sdu) // headers are the device's
		if err != nil {
			t.Fatal(err)
		}
		n := len(pdu) / cells.CellSize
		area := p.a.SendArea(1)
		first := p.a.NextSend(1)
		for i := range n {
			slot := first
			if i > 0 {
				slot = p.a.NextSend(1)
			}
			copy(area[slot*cells.PayloadSize:], cells.Cell(pdu[i*cells.CellSize:]).Payload())
		}
		if err := p.a.SendBatch(1, first, n, driver.Bulk|driver.EOM); err != nil {
			t.Fatal(err)
		}
		if got := collect(t, p.b, n, 5*time.Second); got != n {
			t.Fatalf("received %d cells, want %d", got, n)
		}
		r := cells.NewReassembler(cells.ReassemblerConfig{})
		var done bool
		for _, c := range takeAll(p.b, 1) {
			if !p.b.IsBulk(1, c) {
				t.Fatalf("cell % x not on the bulk VC", c.Header())
			}
			out, ok, err := r.Push(c)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				done = string(out.SDU) == string(sdu) && out.VC == (cells.VC{VPI: 1, VCI: 103})
			}
		}
		if !done {
			t.Error("PDU not reassembled intact on VC 1/103")
		}
	})
}

// TestProtection checks that bad connection indexes, offsets and counts
// are refused, counted, and send nothing.
func TestProtection(t *testing.T) {
	forEach(t, func(t *testing.T, h harness) {
		p := newPair(t, h)
		slots := len(p.a.SendArea(0)) / cells.PayloadSize
		badConns := []int{-1, 3, 4, 5, 1 << 20, math.MinInt, math.MaxInt}
		badOffsets := []int{-1, slots, slots + 1, 2 * slots, 1 << 40, math.MinInt}
		badCounts := []int{0, -1, slots + 1, math.MaxInt}
		for _, c := range badConns {
			for _, err := range []error{
				p.a.Send(c, 0, 0),
				p.a.SendBatch(c, 0, 1, driver.EOM),
				func() error { _, err := p.a.SendRecv(c, 0, 0, 1); return err }(),
			} {
				if !errors.Is(err, driver.ErrBadConn) {
					t.Errorf("connection %d: %v, want ErrBadConn", c, err)
				}
			}
			if o := p.a.NextSend(c); o != -1 {
				t.Errorf("NextSend(%d) = %d, want -1", c, o)
			}
			if _, ok := p.b.Take(c); ok {
				t.Errorf("Take(%d) returned a cell", c)
			}
			if p.a.SendArea(c) != nil {
				t.Errorf("SendArea(%d) is not nil", c)
			}
		}
		for _, o := range badOffsets {
			for _, err := range []error{p.a.Send(0, o, 0), p.a.SendBatch(2, o, 2, 0)} {
				if !errors.Is(err, driver.ErrBadOffset) {
					t.Errorf("offset %d: %v, want ErrBadOffset", o, err)
				}
			}
		}
		for _, n := range badCounts {
			if err := p.a.SendBatch(0, 0, n, 0); !errors.Is(err, driver.ErrBadCount) {
				t.Errorf("count %d: %v, want ErrBadCount", n, err)
			}
		}
		if _, err := p.b.Recv(0); !errors.Is(err, driver.ErrBadCount) {
			t.Errorf("Recv(0): %v, want ErrBadCount", err)
		}
		sa := p.a.Stats()
		want := driver.Stats{
			RefusedConn:   uint64(4 * len(badConns)), // Send, SendBatch, SendRecv, NextSend
			RefusedOffset: uint64(2 * len(badOffsets)),
			RefusedCount:  uint64(len(badCounts)),
		}
		if sa != want {
			t.Errorf("A's stats %+v, want %+v", sa, want)
		}
		if sb := p.b.Stats(); sb.RefusedConn != uint64(len(badConns)) || sb.RefusedCount != 1 {
			t.Errorf("B's stats %+v, want %d refused Takes and a refused Recv", sb, len(badConns))
		}
		if st, ok := driver.LinkOf(p.a).(afxdp.Statser); ok {
			if s, _ := st.Stats(); s.TxFrames != 0 {
				t.Errorf("A's link sent %d frames", s.TxFrames)
			}
		}
		if n := settle(t, p.b); n != 0 || p.b.Stats().FramesReceived != 0 {
			t.Errorf("B received %d cells (%+v)", n, p.b.Stats())
		}
	})
}

// TestUnboundVCI checks that a cell on a circuit no connection binds never
// reaches a ring: the device drops and counts it, or over AF_XDP, the XDP
// program's admission check (the kernel VCI table) does.
func TestUnboundVCI(t *testing.T) {
	forEach(t, func(t *testing.T, h harness) {
		p := newPair(t, h)
		inject(t, p,
			rawFrame(t, p.macB, p.macA, rawCell(1, 999, 1, 1)), // unbound VCI
			rawFrame(t, p.macB, p.macA, rawCell(3, 100, 1, 2)), // bound VCI, unbound VPI
			rawFrame(t, p.macB, p.macA, rawCell(1, 200, 1, 3)), // B's send VCI, not its receive VCI
			rawFrame(t, p.macB, p.macA, rawCell(1, 100, 1, 4))) // bound: B's connection 0
		if got := collect(t, p.b, 1, 5*time.Second); got != 1 {
			t.Fatalf("received %d cells, want 1", got)
		}
		settle(t, p.b)
		cs := takeAll(p.b, 0)
		if len(cs) != 1 {
			t.Fatalf("connection 0 got %d cells", len(cs))
		}
		checkCell(t, cs[0], 1, 100, false, 1, 4)
		for c := 1; c < p.b.NumConns(); c++ {
			if n := len(takeAll(p.b, c)); n != 0 {
				t.Errorf("connection %d got %d cells", c, n)
			}
		}
		st := p.b.Stats()
		if p.progB != nil {
			ct, err := p.progB.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if ct.NotAdmitted != 3 || st.DroppedUnknownVCI != 0 || st.FramesReceived != 1 {
				t.Errorf("XDP dropped %d frames as not admitted (want 3); device %+v", ct.NotAdmitted, st)
			}
			return
		}
		if st.DroppedUnknownVCI != 3 || st.CellsReceived != 1 {
			t.Errorf("stats %+v, want 3 cells dropped for an unknown VCI and 1 delivered", st)
		}
	})
}

// TestWrongPeer checks that cells on a connection's circuit in a frame
// from a MAC other than the connection's peer never reach its ring: a
// connection is bound to its peer, and anyone else's cells there (a
// misconfigured host, a made-up frame) are not the peer's messages. They
// are dropped and counted; the peer's own cell on the same circuit is
// delivered. Before, only the destination MAC and the circuit were checked,
// and such cells reached SSAM, which took them for the peer's requests and
// answers.
func TestWrongPeer(t *testing.T) {
	forEach(t, func(t *testing.T, h harness) {
		p := newPair(t, h)
		stranger := net.HardwareAddr{0x02, 0x5e, 0x00, 0x00, 0x00, 0x01}
		inject(t, p,
			rawFrame(t, p.macB, stranger, rawCell(1, 100, 1, 1)),
			rawFrame(t, p.macB, stranger, rawCell(1, 101, 1, 2)),
			rawFrame(t, p.macB, p.macA, rawCell(1, 100, 1, 3)))
		if got := collect(t, p.b, 1, 5*time.Second); got != 1 {
			t.Fatalf("received %d cells, want 1", got)
		}
		settle(t, p.b)
		cs := takeAll(p.b, 0)
		if len(cs) != 1 {
			t.Fatalf("connection 0 got %d cells", len(cs))
		}
		checkCell(t, cs[0], 1, 100, false, 1, 3)
		if st := p.b.Stats(); st.DroppedWrongPeer != 2 || st.CellsReceived != 1 {
			t.Errorf("stats %+v, want 2 cells dropped from the wrong peer and 1 delivered", st)
		}
	})
}

// TestHEC checks that a single-bit header error is corrected and that the
// I.432 receiver then discards errored cells until a good one arrives.
func TestHEC(t *testing.T) {
	forEach(t, func(t *testing.T, h harness) {
		p := newPair(t, h)
		flip := func(c cells.Cell, mask byte) cells.Cell {
			c[0] ^= mask // GFC bits: the circuit stays admitted in XDP
			return c
		}
		inject(t, p, rawFrame(t, p.macB, p.macA,
			rawCell(1, 100, 2, 1),             // good
			flip(rawCell(1, 100, 2, 2), 0x80), // one bit: corrected (-> detection mode)
			flip(rawCell(1, 100, 2, 3), 0x40), // one bit, in detection mode: discarded
			rawCell(1, 100, 2, 4),             // good (-> correction mode)
			flip(rawCell(1, 100, 2, 5), 0x30), // two bits: discarded
			rawCell(1, 100, 2, 6),             // good
		))
		if got := collect(t, p.b, 4, 5*time.Second); got != 4 {
			t.Fatalf("received %d cells, want 4", got)
		}
		cs := takeAll(p.b, 0)
		for k, i := range []int{1, 2, 4, 6} {
			checkCell(t, cs[k], 1, 100, false, 2, i)
		}
		if st := p.b.Stats(); st.HECCorrected != 1 || st.DroppedHEC != 2 || st.CellsReceived != 4 {
			t.Errorf("stats %+v, want 1 corrected, 2 discarded, 4 delivered", st)
		}
	})
}

// TestOverflow checks that cells finding their ring full are dropped and
// counted, and that the ring works again once emptied.
func TestOverflow(t *testing.T) {
	forEach(t, func(t *testing.T, h harness) {
		a, b := configs()
		b.RecvSlots = 8
		p := h.new(t, a, b)
		if err := p.a.SendBatch(0, 0, 20, 0); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for p.b.Stats().DroppedRingFull+p.b.Stats().CellsReceived < 20 && time.Now().Before(deadline) {
			collect(t, p.b, 1, 10*time.Millisecond)
		}
		if st := p.b.Stats(); st.CellsReceived != 8 || st.DroppedRingFull != 12 {
			t.Errorf("stats %+v, want 8 delivered and 12 dropped for a full ring", st)
		}
		if n := len(takeAll(p.b, 0)); n != 8 {
			t.Errorf("took %d cells, want 8", n)
		}
		if err := p.a.SendBatch(0, 0, 5, 0); err != nil {
			t.Fatal(err)
		}
		if got := collect(t, p.b, 5, 5*time.Second); got != 5 {
			t.Errorf("after emptying the ring: received %d, want 5", got)
		}
	})
}

// TestLeftovers checks that Recv(max) leaves the rest of a frame's cells
// queued, in order, for the next call.
func TestLeftovers(t *testing.T) {
	forEach(t, func(t *testing.T, h harness) {
		p := newPair(t, h)
		for i := range 10 {
			fill(p.a, 0, i, 3, i)
		}
		if err := p.a.SendBatch(0, 0, 10, driver.EOM); err != nil {
			t.Fatal(err)
		}
		if ok, err := p.b.Wait(5 * time.Second); !ok || err != nil {
			t.Fatalf("Wait: %v, %v", ok, err)
		}
		total := 0
		deadline := time.Now().Add(5 * time.Second)
		for total < 10 && time.Now().Before(deadline) {
			n, err := p.b.Recv(3)
			if err != nil || n > 3 {
				t.Fatalf("Recv(3): %d, %v", n, err)
			}
			total += n
			if n == 3 && p.b.CellsPerFrame() > 1 {
				// The frame's other cells wait in the device.
				if ok, _ := p.b.Wait(0); !ok && total < 10 {
					t.Errorf("after %d cells, Wait(0) says nothing is pending", total)
				}
			}
		}
		cs := takeAll(p.b, 0)
		if total != 10 || len(cs) != 10 {
			t.Fatalf("received %d, took %d; want 10", total, len(cs))
		}
		for i, c := range cs {
			checkCell(t, c, 1, 100, i == 9, 3, i)
		}
		if st := p.b.Stats(); st.DroppedRingFull+st.DroppedHEC+st.DroppedUnknownVCI != 0 {
			t.Errorf("drops: %+v", st)
		}
	})
}

// TestNoAllocs checks that the traps allocate nothing.
func TestNoAllocs(t *testing.T) {
	forEach(t, func(t *testing.T, h harness) {
		p := newPair(t, h)
		off := 0
		for _, c := range []struct {
			name string
			fn   func()
		}{
			{"Send", func() { p.a.Send(0, off, driver.EOM); off = (off + 1) % 64 }},
			{"SendBatch", func() { p.a.SendBatch(1, off, 16, driver.EOM|driver.Bulk); off = (off + 16) % 64 }},
			{"SendRecv", func() { p.a.SendRecv(2, off, 0, 16) }},
			{"NextSend", func() { p.a.NextSend(0) }},
			{"Wait", func() { p.b.Wait(time.Millisecond) }},
			{"Recv+Take", func() {
				p.b.Recv(16)
				for c := range 3 {
					for _, ok := p.b.Take(c); ok; _, ok = p.b.Take(c) {
					}
				}
			}},
		} {
			if allocs := testing.AllocsPerRun(200, c.fn); allocs != 0 {
				t.Errorf("%s: %v allocations per call", c.name, allocs)
			}
		}
		if p.b.Stats().CellsReceived == 0 {
			t.Error("B received nothing: the receive path was not exercised")
		}
	})
}

// TestConcurrent runs a sender and a receiver per device, both ways, with
// a goroutine reading the counters, for the race detector.
func TestConcurrent(t *testing.T) {
	forEach(t, func(t *testing.T, h harness) {
		p := newPair(t, h)
		const batches, k = 300, 8
		var wg sync.WaitGroup
		got := make([]int, 2)
		for i, d := range []struct{ from, to *driver.Device }{{p.a, p.b}, {p.b, p.a}} {
			wg.Go(func() {
				for j := range batches {
					off := j * k % 1024
					for s := range k {
						fill(d.from, 0, off+s, byte(i), j*k+s)
					}
					if err := d.from.SendBatch(0, off, k, driver.EOM); err != nil {
						t.Error(err)
						return
					}
				}
			})
			wg.Go(func() {
				next := 0
				deadline := time.Now().Add(10 * time.Second)
				for next < batches*k && time.Now().Before(deadline) {
					if _, err := d.to.Recv(32); err != nil {
						t.Error(err)
						return
					}
					for c, ok := d.to.Take(0); ok; c, ok = d.to.Take(0) {
						if tag, n, intact := ident(c.Payload()); !intact || tag != byte(i) || n != next {
							t.Errorf("direction %d: cell (%d, %d, %v), want %d", i, tag, n, intact, next)
							return
						}
						next++
					}
					d.to.Wait(time.Millisecond)
				}
				got[i] = next
			})
		}
		stop := make(chan struct{})
		reader := make(chan struct{})
		go func() {
			defer close(reader)
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Microsecond):
					p.a.Stats()
					p.b.Stats()
				}
			}
		}()
		wg.Wait()
		close(stop)
		<-reader
		for i, n := range got {
			if n != batches*k {
				t.Errorf("direction %d: %d cells in order, want %d", i, n, batches*k)
			}
		}
	})
}

// TestClose checks the device after Close.
func TestClose(t *testing.T) {
	l, peer, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer peer.Close()
	a, _ := configs()
	d, err := driver.Open(l, withPeers(a, peer.HardwareAddr()))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	_, recvErr := d.Recv(1)
	_, waitErr := d.Wait(0)
	for name, err := range map[string]error{
		"Send": d.Send(0, 0, 0), "SendBatch": d.SendBatch(0, 0, 2, 0), "Recv": recvErr, "Wait": waitErr, "Close": d.Close(),
	} {
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s after Close: %v, want net.ErrClosed", name, err)
		}
	}
	if _, ok := d.Take(0); ok || d.SendArea(0) != nil || d.NextSend(0) != -1 || d.PinnedBytes() != 0 {
		t.Error("Take, SendArea, NextSend or PinnedBytes work after Close")
	}
	if _, err := l.Send([][]byte{make([]byte, 60)}); err != nil {
		t.Errorf("the link was closed with the device: %v", err)
	}
}

// TestConfig checks that Open refuses invalid configurations.
func TestConfig(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	tiny, tinyPeer, _ := memlink.NewPair(memlink.Options{MTU: 56})
	defer tiny.Close()
	defer tinyPeer.Close()
	peer := lb.HardwareAddr()
	good := driver.ConnSpec{Peer: peer, VPI: 1, SendVCI: 10, RecvVCI: 20}
	cfg := func(edit func(*driver.Config)) driver.Config {
		c := driver.Config{Conns: []driver.ConnSpec{good}, NoLock: true}
		edit(&c)
		return c
	}
	for _, c := range []struct {
		link  afxdp.Link
		cfg   driver.Config
		words string
	}{
		{la, cfg(func(c *driver.Config) { c.Conns = nil }), "0 connections"},
		{la, cfg(func(c *driver.Config) { c.SendSlots = 3 }), "SendSlots 3"},
		{la, cfg(func(c *driver.Config) { c.RecvSlots = -8 }), "RecvSlots -8"},
		{la, cfg(func(c *driver.Config) { c.SendSlots = 2 * driver.MaxSlots }), "SendSlots"},
		{la, cfg(func(c *driver.Config) { c.Src = net.HardwareAddr{1} }), "source MAC"},
		{la, cfg(func(c *driver.Config) { c.EtherType = 0x0100 }), "EtherType"},
		{la, cfg(func(c *driver.Config) { c.Conns[0].Peer = nil }), "peer MAC"},
		{la, cfg(func(c *driver.Config) { c.Conns[0].VPI = 256 }), "VPI 256"},
		{la, cfg(func(c *driver.Config) { c.Conns[0].RecvVCI = 0xffff }), "bulk VC"},
		{la, cfg(func(c *driver.Config) { c.Conns[0].SendVCI = 0xffff }), "bulk VC"},
		{la, cfg(func(c *driver.Config) {
			c.Conns = append(c.Conns, driver.ConnSpec{Peer: peer, VPI: 1, SendVCI: 30, RecvVCI: 21})
		}), "both receive on VPI/VCI 1/21"},
		{tiny, cfg(func(*driver.Config) {}), "MTU 56"},
	} {
		d, err := driver.Open(c.link, c.cfg)
		if err == nil {
			d.Close()
		}
		if !errors.Is(err, driver.ErrBadConfig) || !strings.Contains(err.Error(), c.words) {
			t.Errorf("Open(%+v): %v, want ErrBadConfig saying %q", c.cfg, err, c.words)
		}
	}
	// The same receive VCIs on different VPIs are fine (connections 0 and 2).
	a, _ := configs()
	d, err := driver.Open(la, withPeers(a, peer))
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
}

// TestForeignFrames checks the frame checks before the cells: another
// EtherType or unicast destination, malformed frames; group addresses are
// accepted.
func TestForeignFrames(t *testing.T) {
	p := newPair(t, harnesses[0])
	good := rawFrame(t, p.macB, p.macA, rawCell(1, 100, 4, 1))
	other := append([]byte(nil), good...)
	other[12], other[13] = 0x08, 0x00
	elsewhere := append([]byte(nil), good...)
	copy(elsewhere, net.HardwareAddr{2, 9, 9, 9, 9, 9})
	broadcast := rawFrame(t, net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, p.macA, rawCell(1, 100, 4, 2))
	truncated := good[:len(good)-1]
	miscounted := append([]byte(nil), good...)
	miscounted[17] = 2
	inject(t, p, other, elsewhere, truncated, miscounted, broadcast, good)
	if got := collect(t, p.b, 2, time.Second); got != 2 {
		t.Fatalf("received %d cells, want 2", got)
	}
	cs := takeAll(p.b, 0)
	checkCell(t, cs[0], 1, 100, false, 4, 2)
	checkCell(t, cs[1], 1, 100, false, 4, 1)
	if st := p.b.Stats(); st.DroppedNotOurs != 2 || st.DroppedMalformed != 2 || st.FramesReceived != 6 {
		t.Errorf("stats %+v, want 2 frames not ours and 2 malformed of 6", st)
	}
}

// TestCellsPerFrameCapped: on a link whose MTU holds more cells a frame
// than xam's XDP program checks (a multi-buffer link past 9000 bytes), the
// device packs loader.MaxScanCells cells a frame, which the program's
// admission (SSAM's VCI table) takes, rather than frames it would drop.
func TestCellsPerFrameCapped(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{MTU: 65522})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	d, err := driver.Open(la, driver.Config{Conns: []driver.ConnSpec{{Peer: lb.HardwareAddr(), VPI: 1, SendVCI: 10, RecvVCI: 20}}, NoLock: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got := d.CellsPerFrame(); got != loader.MaxScanCells {
		t.Errorf("CellsPerFrame %d on an MTU of 65522, want %d", got, loader.MaxScanCells)
	}
}
