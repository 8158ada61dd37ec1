package driver

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/xam-project/xam/cells"
)

// The receive side. One goroutine at a time (Device.rx's mutex):
//
//  1. Recv takes up the cells of the last frames it pulled, if it stopped in
//     the middle of them (it never drops a cell because max was reached).
//  2. If it needs more, it pulls one batch of frames from the link. The
//     link lends them (AF_XDP: slices of the UMEM) until the next pull.
//  3. Each frame is checked: our EtherType, to our MAC or a group address,
//     then cells.Unpack (version, cell count, length). Each cell's header
//     goes through the device's HECReceiver (I.432: a single-bit error is
//     corrected, others discard the cell), then the VPI/VCI is looked up in
//     the table bound at open, SSAM's kernel VCI table. A cell on a circuit
//     of connection c, in a frame from c's peer, is copied, 53 bytes with
//     its (corrected) header, into c's receive ring; a cell on an unbound
//     circuit, or from another MAC (a connection is bound to its peer:
//     anyone else's cells on its circuit are not the peer's messages),
//     reaches no ring. Every drop is counted by reason.
//  4. Take hands out the ring's cells in order, as views into the ring.

// Recv receives without blocking: it delivers up to max cells into the
// receive rings of the connections they belong to and returns how many it
// delivered. It first finishes the frames of the previous call, then pulls
// at most one batch of frames from the link (no more frames than it still
// needs cells). Cells of a frame beyond max stay queued for the next call;
// cells dropped (unknown circuit, header error, ring full) are counted, not
// returned. A max below 1 is refused with ErrBadCount.
func (d *Device) Recv(max int) (int, error) {
	d.rx.Lock()
	defer d.rx.Unlock()
	return d.recv(max)
}

// SendRecv is Send followed by Recv in one trap (SSAM's write-read trap). If
// the send is refused or fails, nothing is received.
func (d *Device) SendRecv(conn, offset int, f Flags, max int) (int, error) {
	d.tx.Lock()
	err := d.send(conn, offset, 1, f)
	d.tx.Unlock()
	if err != nil {
		return 0, err
	}
	d.rx.Lock()
	defer d.rx.Unlock()
	return d.recv(max)
}

// recv is the receive trap; d.rx is held.
func (d *Device) recv(max int) (int, error) {
	if max < 1 {
		d.rx.stats.RefusedCount++
		return 0, fmt.Errorf("driver: receive at most %d cells: %w", max, ErrBadCount)
	}
	if d.closed.Load() {
		return 0, errClosed
	}
	got := d.drain(max)
	if got == max {
		return got, nil
	}
	want := min(len(d.rx.frames), max-got)
	n, err := d.link.Recv(d.rx.frames[:want])
	d.rx.n, d.rx.next = n, 0
	if err != nil {
		d.rx.n = 0
		return got, fmt.Errorf("driver: link receive: %w", err)
	}
	return got + d.drain(max-got), nil
}

// drain delivers up to max cells from the frames pulled last and returns
// how many it delivered; it stops early only when the frames are used up.
func (d *Device) drain(max int) int {
	got := 0
	for got < max {
		if len(d.rx.cur) == 0 && !d.open() {
			break
		}
		cell := d.rx.cur[:cells.CellSize]
		d.rx.cur = d.rx.cur[cells.CellSize:]
		if d.deliver(cell) {
			got++
		}
	}
	return got
}

// open checks the next pulled frame that is ours and makes its cells
// current; false when no frame is left.
func (d *Device) open() bool {
	for d.rx.next < d.rx.n {
		f := d.rx.frames[d.rx.next]
		d.rx.frames[d.rx.next] = nil
		d.rx.next++
		d.rx.stats.FramesReceived++
		if len(f) < cells.EthernetHeaderSize ||
			binary.BigEndian.Uint16(f[12:]) != d.etherType ||
			f[0]&1 == 0 && string(f[:6]) != string(d.src) {
			d.rx.stats.DroppedNotOurs++
			continue
		}
		body, _, err := cells.Unpack(f, d.etherType)
		if err != nil {
			d.rx.stats.DroppedMalformed++
			continue
		}
		d.rx.cur = body
		d.rx.src = [6]byte(f[6:12])
		return true
	}
	return false
}

// deliver checks one cell and copies it into its connection's ring.
func (d *Device) deliver(cell []byte) bool {
	var h [cells.HeaderSize]byte
	copy(h[:], cell)
	switch d.rx.hec.Check(cells.Cell(h[:])) {
	case cells.HECDiscarded:
		d.rx.stats.DroppedHEC++
		return false
	case cells.HECCorrected:
		d.rx.stats.HECCorrected++
	}
	// UNI header word: GFC(4) VPI(8) VCI(16) PTI(3) CLP(1).
	key := binary.BigEndian.Uint32(h[:]) >> 4 & 0xffffff
	ci := d.rx.lastConn
	if key != d.rx.lastKey || ci < 0 {
		var ok bool
		if ci, ok = d.circuits[key]; !ok {
			d.rx.stats.DroppedUnknownVCI++
			return false
		}
		d.rx.lastKey, d.rx.lastConn = key, ci
	}
	c := &d.conns[ci]
	if d.rx.src != c.peer {
		d.rx.stats.DroppedWrongPeer++
		return false
	}
	if c.tail-c.head >= d.recvSlots {
		d.rx.stats.DroppedRingFull++
		return false
	}
	o := int(c.tail&d.recvMask) * cells.CellSize
	slot := c.ring[o : o+cells.CellSize]
	copy(slot, cell)
	copy(slot, h[:])
	c.tail++
	d.rx.stats.CellsReceived++
	return true
}

// Take returns the oldest unread cell of connection conn's receive ring,
// 53 bytes with its header (corrected if it had a single-bit error), and
// removes it from the ring; false when the ring is empty. The cell is a view
// into the ring, valid until the next Recv (or SendRecv, or Close), which
// may reuse its slot. An index out of range returns false and counts a
// refusal.
func (d *Device) Take(conn int) (cells.Cell, bool) {
	d.rx.Lock()
	defer d.rx.Unlock()
	c := conn & d.connMask
	if c != conn || c >= len(d.conns) {
		d.rx.stats.RefusedConn++
		return nil, false
	}
	cn := &d.conns[c]
	if cn.head == cn.tail || d.closed.Load() {
		return nil, false
	}
	o := int(cn.head&d.recvMask) * cells.CellSize
	cn.head++
	return cells.Cell(cn.ring[o : o+cells.CellSize : o+cells.CellSize]), true
}

// Wait blocks until Recv has something to look at: frames pulled but not
// finished (it then returns at once), or frames waiting in the link (the
// link's Wait). It returns false when the timeout passes; a negative timeout
// waits without limit, zero only checks. Cells already in the receive rings
// do not count: Take them first.
func (d *Device) Wait(timeout time.Duration) (bool, error) {
	d.rx.Lock()
	pending := len(d.rx.cur) > 0 || d.rx.next < d.rx.n
	d.rx.Unlock()
	if d.closed.Load() {
		return false, errClosed
	}
	if pending {
		return true, nil
	}
	ok, err := d.link.Wait(timeout)
	if err != nil {
		return ok, fmt.Errorf("driver: link wait: %w", err)
	}
	return ok, nil
}
