package driver

import (
	"encoding/binary"
	"fmt"

	"github.com/xam-project/xam/cells"
)

// The send side. One goroutine at a time (Device.tx's mutex):
//
//  1. The application writes a cell payload into its connection's send area
//     at the slot NextSend gave it (no copy: the area is the device's).
//  2. A trap (Send, SendBatch, SendRecv) names the connection and the slot
//     with two integers. The device masks and checks them, then builds the
//     frames in its own transmit buffers: the connection's Ethernet and
//     frame headers, and per cell the connection's precomputed cell header
//     (VPI/VCI/PTI with its HEC; the caller never supplies one) followed by
//     the 48-byte payload copied from the slot.
//  3. link.Send copies the frames into the link (the UMEM of an AF_XDP
//     socket; a sendto per frame on the system-call path) and returns. The
//     slots are free for reuse as soon as the trap returns.

// SendArea returns connection conn's send area: SendSlots*48 bytes, slot i
// at [48*i, 48*i+48). The application writes cell payloads here and names
// them by slot in the send traps. It returns nil for an index out of range
// or after Close.
func (d *Device) SendArea(conn int) []byte {
	if uint(conn) >= uint(len(d.conns)) || d.closed.Load() {
		return nil
	}
	return d.conns[conn].send
}

// NextSend returns the slot index of connection conn's next free send slot
// and advances the connection's cursor: successive calls return successive
// slots, modulo SendSlots. The device does not track slots after it has
// sent them, so a layer that keeps cells for retransmission (and resends
// them by slot) must size SendSlots so the cursor does not come round to
// them. It returns -1, and counts a refusal, for an index out of range, and
// -1 after Close.
func (d *Device) NextSend(conn int) int {
	d.tx.Lock()
	defer d.tx.Unlock()
	c := conn & d.connMask
	if c != conn || c >= len(d.conns) {
		d.tx.stats.RefusedConn++
		return -1
	}
	if d.closed.Load() {
		return -1
	}
	cn := &d.conns[c]
	o := cn.next
	cn.next = (o + 1) & d.slotMask
	return o
}

// Send transmits one cell, the payload in slot offset of connection conn's
// send area, in a frame of its own. The cell goes on the connection's short
// VC, or its bulk VC with Bulk, with the end-of-message bit if f has EOM.
// An index or offset out of range sends nothing and returns an error
// wrapping ErrBadConn or ErrBadOffset.
func (d *Device) Send(conn, offset int, f Flags) error {
	d.tx.Lock()
	defer d.tx.Unlock()
	return d.send(conn, offset, 1, f)
}

// SendBatch transmits count cells from consecutive slots of connection
// conn's send area, starting at slot offset and wrapping modulo SendSlots,
// packed into as few frames as the link's MTU allows (CellsPerFrame cells
// each), handed to the link in one call. EOM, if set, goes on the last cell
// only; Bulk applies to all. A count outside 1..SendSlots sends nothing and
// returns an error wrapping ErrBadCount.
func (d *Device) SendBatch(conn, offset, count int, f Flags) error {
	d.tx.Lock()
	defer d.tx.Unlock()
	return d.send(conn, offset, count, f)
}

// send is the send trap; d.tx is held.
func (d *Device) send(conn, offset, count int, f Flags) error {
	// Protection, as SSAM's trap: mask, then check, so that no value
	// indexes outside the tables and none aliases another entry.
	c := conn & d.connMask
	if c != conn || c >= len(d.conns) {
		d.tx.stats.RefusedConn++
		return fmt.Errorf("driver: connection %d (the device has %d): %w", conn, len(d.conns), ErrBadConn)
	}
	slot := offset & d.slotMask
	if slot != offset {
		d.tx.stats.RefusedOffset++
		return fmt.Errorf("driver: send slot %d (connection %d has %d): %w", offset, conn, d.sendSlots, ErrBadOffset)
	}
	if count < 1 || count > d.sendSlots {
		d.tx.stats.RefusedCount++
		return fmt.Errorf("driver: %d cells (a batch has 1 to %d): %w", count, d.sendSlots, ErrBadCount)
	}
	if d.closed.Load() {
		return errClosed
	}
	cn := &d.conns[c]
	f &= flagMask
	body := &cn.hdr[f&Bulk]
	last := &cn.hdr[f]
	per := d.perFrame
	frames := 0
	for left := count; left > 0; frames++ {
		k := min(per, left)
		left -= k
		fr := d.tx.bufs[frames][:cells.FrameLen(k)]
		copy(fr, cn.frameHdr[:])
		binary.BigEndian.PutUint16(fr[frameHeaderLen-2:], uint16(k))
		p := fr[frameHeaderLen:]
		for j := 0; j < k; j++ {
			h := body
			if left == 0 && j == k-1 {
				h = last
			}
			copy(p[:cells.HeaderSize], h[:])
			s := slot * cells.PayloadSize
			copy(p[cells.HeaderSize:cells.CellSize], cn.send[s:s+cells.PayloadSize])
			p = p[cells.CellSize:]
			slot = (slot + 1) & d.slotMask
		}
		d.tx.out[frames] = fr
	}
	n, err := d.link.Send(d.tx.out[:frames])
	sent := min(n*per, count)
	if n == frames {
		sent = count
	}
	d.tx.stats.FramesSent += uint64(n)
	d.tx.stats.CellsSent += uint64(sent)
	if err != nil {
		return fmt.Errorf("driver: link sent %d of %d frames: %w", n, frames, err)
	}
	return nil
}
