package transport

import (
	"encoding/binary"
	"fmt"

	"github.com/xam-project/xam/cells"
)

// The compact lane. In request/reply traffic of short messages every
// frame is one compact DATA cell that carries the acknowledgement of the
// message before it (typeCompactAcked), between two incarnations that
// know each other, on channels whose numbers follow on. The general
// receive path turns such a cell into the DATA PDU it stands for (a
// header and an acknowledgement entry) and dispatches that: the epochs,
// the windows, the acknowledgement, the message. laneAcked takes it
// straight from the cell's fields instead, with the same checks, when
// the frame is exactly that steady state:
//
//   - the cell checks (HEC, VPI, type, length, channels, CRC-10), as
//     decodeCompactAcked checks it;
//   - its source epoch is p's current one and its destination epoch this
//     incarnation's toward p (checkEpochs' first case), and no message
//     waits for the handshake;
//   - its acknowledgement lies in its send channel's window (inWindows);
//   - its sequence number is the one its channel expects (a duplicate or
//     a late copy goes the general way, which counts it).
//
// Anything else (a first frame, a new incarnation, a forgery, a
// retransmission, an unreliable transport) declines before any of it
// takes effect, and the general path handles the cell as before.

// laneFrame handles frame f from p by the compact lane if it is a frame
// of one compact DATA cell with an acknowledgement that starts a message
// (cells.UnpackCell), or of such a cell and its continuation
// (cells.UnpackPair): taken false, it is not or the lane declined, and
// nothing happened; otherwise ok reports whether the cells checked.
func (t *Transport) laneFrame(p *Peer, f []byte) (ok, taken bool) {
	cell, fh, one := cells.UnpackCell(f, t.cfg.EtherType)
	if !one {
		return t.lanePairFrame(p, f)
	}
	if fh.Flags()&cells.FlagStart == 0 || binary.BigEndian.Uint32(cell)>>4 != t.compactKey || cell.Payload()[0] != typeCompactAcked {
		return false, false
	}
	if ok, taken = t.laneAcked(p, cell, nil); taken && p.reasm.Discard(t.vc) {
		t.stats.Abandoned++ // a PDU in progress that this frame's start cut short
	}
	return ok, taken
}

// lanePairFrame is laneFrame for a frame of two cells.
func (t *Transport) lanePairFrame(p *Peer, f []byte) (ok, taken bool) {
	cell, more, fh, two := cells.UnpackPair(f, t.cfg.EtherType)
	if !two || fh.Flags()&cells.FlagStart == 0 || binary.BigEndian.Uint32(cell)>>4 != t.compactKey ||
		binary.BigEndian.Uint32(more)>>4 != t.compactKey || cell.Payload()[0] != typeCompactAcked {
		return false, false
	}
	if ok, taken = t.laneAcked(p, cell, more); taken && p.reasm.Discard(t.vc) {
		t.stats.Abandoned++
	}
	return ok, taken
}

// laneAcked handles compact DATA cell with an acknowledgement from p, and
// more, its continuation cell or nil (then a message of two cells is
// bad), by the compact lane (above). taken false: the lane declined,
// nothing happened, and the general path is to handle the cell; otherwise
// ok reports whether the cells checked.
func (t *Transport) laneAcked(p *Peer, cell, more cells.Cell) (ok, taken bool) {
	b := (*[cells.PayloadSize]byte)(cell.Payload()) // checked once
	ch, ach := int(b[1]), int(b[4])
	if t.cfg.Unreliable || p.waiting > 0 || ch >= len(p.send) || ach >= len(p.send) {
		return false, false
	}
	seq, aseq := binary.BigEndian.Uint16(b[2:]), binary.BigEndian.Uint16(b[5:])
	src, dst := binary.BigEndian.Uint32(b[7:]), binary.BigEndian.Uint32(b[11:])
	r := &p.recv[ch]
	if src != p.epoch || src == 0 || dst != p.dstIn || r.expect != seq || !ackInWindow(&p.send[ach], aseq) {
		return false, false
	}
	tr := binary.BigEndian.Uint16(b[compactOffCRC:])
	n := int(tr >> 10)
	if !cell.Valid() || cell.VPI(cells.UNI) != t.vc.VPI ||
		tr&0x3ff != cells.CRC10Trailer(b[:compactOffCRC], uint8(n)) {
		return false, true
	}
	payload := b[compactHeaderLen:compactOffCRC]
	if n <= CompactPayload {
		payload = payload[:n]
	} else if more == nil {
		return false, true // a first cell alone (receiveCompact hands the lane none that a continuation follows)
	} else if payload = t.joinPair(payload[:CompactPayload], more, [3]byte(b[1:4]), n); payload == nil {
		return false, true
	}
	p.heardCurrent(dst)
	t.stats.LaneCells++
	t.acked(p, ach, aseq)
	t.deliverNext(p, r, ch, seq, 0, payload, nil)
	return true, true
}

// The compact lane's send. An inline engine sends a short message the
// application hands it (the express path) in a pass of its own: BeginPass,
// SendTo, EndPass, which puts the frame in the pass's batch (output) and
// hands the batch to the link (flushOut, pack). SendNow builds the
// message's frames in its channel's buffer (one compact cell, most often)
// and hands them to the link at once, when that is all the pass would
// send: outside a pass, to a peer whose incarnations are confirmed, with a
// free channel, on a transport without a key. Otherwise it takes the
// general way. The link's refusal is what it is at a pass's end: the
// frames are lost, as on the wire, the message stays in its channel, and
// retransmission recovers it.

// SendNow sends payload to p in a pass of its own, as BeginPass, SendTo
// and EndPass do: sent false, the message was not taken (err is SendTo's);
// sent true, it is in its channel, delivered or returned in time, and err
// is the link's, which lost its frames (retransmitted).
func (t *Transport) SendNow(p *Peer, payload []byte, cookie uint64) (sent bool, err error) {
	if t.pass != 0 || t.aead != nil || t.cfg.Unreliable || len(payload) > t.maxPL ||
		p == nil || p.gone || !p.dstOK || p.unacked == len(p.send) {
		t.BeginPass()
		if err := t.SendTo(p, payload, cookie); err != nil {
			t.EndPass() // nothing of the pass left to send
			return false, err
		}
		return true, t.EndPass()
	}
	i := p.freeChannel()
	c := &p.send[i]
	t.load(c, i, c.seq, len(payload), payload, nil)
	c.compact, c.cookie, c.retries = t.compactable(payload), cookie, 0
	t.occupy(p, c)
	c.sent = true
	frames, err := t.build(p, c)
	if err != nil {
		t.unplace(p, c)
		return false, fmt.Errorf("nicfw: send to host %d: %w", p.id, err)
	}
	t.counted(p, c, len(payload))
	t.stats.LaneSends++
	t.stats.Batches++
	t.stats.BatchFrames += uint64(len(frames))
	if _, err := t.link.Send(frames); err != nil {
		return true, fmt.Errorf("nicfw: send: %w", err)
	}
	return true, nil
}
