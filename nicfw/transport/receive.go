package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/loader"
)

// The receive path, in the engine thread, one batch per Poll:
//
//  1. link.Recv lends a batch of frames (valid until the next Recv).
//  2. Each frame is checked: addressed to this host, from a host in the
//     table, xam framing (cells.Unpack), then its cells go through the
//     peer's reassembler (HEC, AAL5 length and CRC-32). A PDU may span
//     frames; a frame flagged cells.FlagStart drops what the reassembler
//     holds of an earlier PDU whose end was lost.
//  3. The PDU's transport header is checked and dispatched: its epochs
//     (epochs.go), then every sequence number it carries against the
//     channel windows (below), then piggy-backed acknowledgements to the
//     send channel table, DATA to the receive channel table and Deliver
//     (an acknowledgement owed, acks.go, or a NACK queued in t.tx), ACK
//     and NACK to the send channel table.
//  4. The acknowledgements that are due (acks.go) join the NACKs, and all
//     go to the link in one batch.
//  5. The timer scan runs if its period has passed (timers.go).

// Poll receives and handles one batch of frames, sends the acknowledgements
// it produced and runs the timer scan when it is due. It returns the number
// of frames received; an engine that gets 0 for a while may sleep in the
// link's Wait (but no longer than Config.ScanInterval while Unacked is not
// zero for some peer). It returns the link's errors.
func (t *Transport) Poll() (int, error) {
	t.polls++
	if t.pass > 0 {
		return t.poll() // inside a pass (the engine's Poll): its end is the pass's
	}
	t.BeginPass()
	n, err := t.poll()
	if eerr := t.EndPass(); eerr != nil {
		err = errors.Join(err, eerr)
	}
	return n, err
}

func (t *Transport) poll() (int, error) {
	// What this pass sent so far goes first: the answers it is waiting for
	// cannot come before, and receiving may free the channels whose frames
	// are in the batch.
	if err := t.flushOut(); err != nil {
		return 0, err
	}
	if len(t.left) > 0 {
		// Acked may send (and so add to the list): it gets a fresh one.
		left := t.left
		t.left = t.leftSpare[:0]
		for _, m := range left {
			t.cfg.Acked(m.dst, m.cookie)
		}
		clear(left)
		t.leftSpare = left[:0]
	}
	n, err := t.link.Recv(t.rx)
	if err != nil {
		return 0, fmt.Errorf("nicfw: receive: %w", err)
	}
	if t.meta != nil && n > 0 {
		t.rxStamps(t.rx[:n])
	}
	for _, f := range t.rx[:n] {
		t.receive(f)
	}
	clearFew(t.rx[:n])
	if len(t.acking) > 0 {
		t.flushAcks(false)
	}
	if err := t.flush(); err != nil {
		return n, err
	}
	if t.scanDue() {
		now := t.now()
		if !now.Before(t.nextScan) {
			t.nextScan = now.Add(t.cfg.ScanInterval)
			if err := t.scan(now); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// The clock. Reading the system clock costs more than the rest of an idle
// Poll (about 150 ns on a virtual machine), so the transport reads it at
// most once per pass — a Poll, or an engine's whole loop around its sends
// and its Poll (BeginPass, EndPass) — and only when something needs it:
// a Send, a NACK, an acknowledgement delay, the timer scan. With the system
// clock the timer scan is checked every idleClockEvery Polls, not every
// Poll: its period is milliseconds, a Poll takes well under one. Other
// clocks (a test's manual clock) are checked every Poll.

// idleClockEvery is how many Polls check the timer scan once, on the
// system clock.
const idleClockEvery = 16

// BeginPass starts a pass: the clock is read at most once until EndPass,
// and the frames sent go to the link in one batch (output).
func (t *Transport) BeginPass() { t.pass++ }

// EndPass ends a pass: it sends the pass's batch and returns the link's
// error. Outside a pass every use of the time reads the clock, and every
// send goes to the link at once.
func (t *Transport) EndPass() error {
	if t.pass--; t.pass == 0 {
		t.nowOK = false
		return t.flushOut()
	}
	return nil
}

// now returns the time of the current pass, reading the clock on first use.
func (t *Transport) now() time.Time {
	if !t.nowOK {
		t.tnow = t.clk.Now()
		t.nowOK = t.pass > 0
	}
	return t.tnow
}

// scanDue reports whether this Poll checks the timer scan.
func (t *Transport) scanDue() bool {
	if !t.sysClock {
		return true
	}
	if t.idle++; t.idle < idleClockEvery {
		return false
	}
	t.idle = 0
	return true
}

// receive handles one frame.
// rxStamps counts the receive metadata of the frames of a batch
// (Config.RxStamps), with one reading of the system clock.
func (t *Transport) rxStamps(frames [][]byte) {
	now := uint64(time.Now().UnixNano())
	for _, f := range frames {
		m, ok := loader.ParseRxMeta(t.meta.Metadata(f, loader.RxMetaLen))
		if !ok {
			continue
		}
		t.stats.RxMeta++
		if m.Stamped {
			t.stats.RxStamped++
			if now > m.Timestamp {
				t.stats.RxStampLagNs += now - m.Timestamp
			}
		}
	}
}

func (t *Transport) receive(f []byte) {
	if len(f) < 12 || [6]byte(f[:6]) != t.mac {
		t.stats.NotForUs++
		return
	}
	p := t.last
	if p == nil || [6]byte(f[6:12]) != [6]byte(p.mac) {
		p = t.byMAC[[6]byte(f[6:12])]
		t.last = p
	}
	if p == nil {
		t.stats.UnknownSource++
		return
	}
	// Nothing of a frame counts before its trailer checks (auth.go).
	if t.aead != nil && !t.open(f) {
		t.stats.AuthFailed++
		return
	}
	if t.aead == nil && (len(f) == len(t.eth)+cells.CellSize || len(f) == len(t.eth)+2*cells.CellSize) {
		if ok, taken := t.laneFrame(p, f); taken {
			if !ok {
				t.stats.BadFrames++
			}
			return
		}
	}
	cs, fh, err := cells.Unpack(f, t.cfg.EtherType)
	if err != nil {
		t.stats.BadFrames++
		return
	}
	if last := len(cs) - cells.CellSize; t.aead != nil {
		cs = cs[:last] // the trailer
	} else if binary.BigEndian.Uint32(cs[last:]) == t.trailerWord {
		t.stats.AuthFailed++ // a keyed host's frame
		return
	}
	if fh.Flags()&cells.FlagStart != 0 && p.reasm.Discard(t.vc) {
		t.stats.Abandoned++
	}
	t.bad, t.rxPeer = false, p
	// Compact cells (compact.go) go their own way; the cells between them
	// go through the reassembler, in order.
	from := 0
	for o := 0; o < len(cs); o += cells.CellSize {
		if binary.BigEndian.Uint32(cs[o:])>>4 != t.compactKey {
			continue
		}
		if o > from {
			p.reasm.PushCells(cs[from:o], t.onPDU)
		}
		used, ok := t.receiveCompact(p, cs[o:])
		if !ok {
			t.bad = true
		}
		o += (used - 1) * cells.CellSize // a continuation cell, taken with its first
		from = o + cells.CellSize
	}
	if from < len(cs) {
		p.reasm.PushCells(cs[from:], t.onPDU)
	}
	t.rxPeer = nil
	if t.bad {
		t.stats.BadFrames++
	}
}

// onPDU is the reassembler's callback for the frame receive handles: a
// PDU from t.rxPeer, checked and dispatched.
func (t *Transport) onPDU(pdu cells.PDU, err error) {
	p := t.rxPeer
	if err != nil || pdu.VC != t.vc || !valid(pdu.SDU, len(p.send)) {
		t.bad = true
		return
	}
	h := (*header)(pdu.SDU)
	acks := pdu.SDU[headerLen : headerLen+ackEntryLen*h.acks()]
	t.dispatch(p, h, acks, pdu.SDU[headerLen+len(acks):])
}

// The windows. A channel is stop-and-wait: its sender sends message n+1
// only once message n was acknowledged, so the receiver, expecting e, can
// be sent e (new) or e-1 (a retransmission whose ACK was lost) and
// nothing else; a copy of an earlier message arrives only late, from the
// network, and up to lateWindow behind e-1 is taken for one. Likewise an
// acknowledgement names the message a send channel has in flight, the one
// before it (a duplicate), or up to lateWindow before that; a free channel
// can be sent only the duplicates, never the number it sends next. dispatch
// checks every sequence number a PDU carries against these windows before
// any of it takes effect: one outside makes the whole PDU a forgery,
// dropped and counted (OutOfWindow, ForgedAcks), and renews the peer's
// destination epoch (epochs.go). So a forger that knows a pair's epochs
// but not the channels' sequence numbers has one try: unless the number
// it sends lies in the window (one chance in 2^16/(lateWindow+2)), it is
// found out at once and left naming a destination epoch that is no
// longer taken, and no sweep of sequence numbers moves a window.

// lateWindow is how far behind a window a sequence number is still taken
// for a late copy (dropped quietly) rather than a forgery.
const lateWindow = 4

// dispatch handles one checked transport PDU from p: its piggy-backed
// acknowledgements (the entries in acks), then the frame itself.
func (t *Transport) dispatch(p *Peer, h *header, acks, payload []byte) {
	ok := t.checkEpochs(p, h, payload)
	if p.waiting > 0 && t.ready(p) {
		t.sendWaiting(p) // p's first frame told what to name it
	}
	if !ok {
		return
	}
	if !t.inWindows(p, h, acks) {
		t.renew(p, h)
		return
	}
	for i := range h.acks() {
		ch, seq := ackAt(acks, i)
		t.acked(p, ch, seq)
	}
	ch := h.channel()
	switch h.typ() {
	case typeData:
		if t.cfg.Unreliable {
			if t.cfg.Deliver(p.id, ch, payload) {
				t.stats.Delivered++
				p.stats.Delivered++
				p.stats.DeliveredBytes += uint64(len(payload))
			} else {
				t.stats.Refused++
				p.stats.Refused++
			}
			return
		}
		r := &p.recv[ch]
		switch r.expect - h.seq() {
		case 0:
		case 1:
			// The message delivered last, again: its ACK was lost.
			t.stats.Duplicates++
			t.ackNow = true
			t.queueAck(p, h)
			return
		default:
			// A late copy of an earlier message, whose sender has its
			// ACK already (inWindows took no other number).
			t.stats.Late++
			return
		}
		t.deliverNext(p, r, ch, h.seq(), h.stamp(), payload, h)

	case typeAck:
		t.acked(p, ch, h.seq())

	case typeReset:
		// checkEpochs has taken the peer's new epoch in, and returned what
		// was in flight to its previous incarnation; the payload says
		// what to name the peer from now on, under the incarnations both
		// sides now hold: the messages that waited for it go.
		p.dstOut, p.dstOK = binary.BigEndian.Uint32(payload), true
		if h.seq()&resetAnswer != 0 {
			// Its sender waits for ours.
			t.reset(p, h, p.dstOut, p.dstIn)
		}
		if p.waiting > 0 {
			t.sendWaiting(p)
		}

	case typeNack:
		c := &p.send[ch]
		if !c.inUse || !c.sent || c.seq != h.seq() || c.stamp != h.stamp() {
			t.stats.StaleNacks++
			return
		}
		t.stats.NacksReceived++
		now := t.now()
		c.heard, c.due, c.timed = now, now.Add(t.cfg.NackDelay), true
	}
}

// deliverNext hands payload, the DATA message on channel ch with sequence
// number seq and stamp from p, which its channel's receive state r
// expects, to Deliver: taken, it is counted and owed an acknowledgement;
// refused, it is NACKed. h is its PDU's header, or nil (the compact lane:
// made from the fields where an answer needs it).
func (t *Transport) deliverNext(p *Peer, r *recvChannel, ch int, seq uint16, stamp uint32, payload []byte, h *header) {
	t.ackNow, t.ackSoon = false, false
	if !t.cfg.Deliver(p.id, ch, payload) {
		t.stats.Refused++
		p.stats.Refused++
		t.answer(p, typeNack, orDataHeader(h, ch, seq, stamp, p))
		return
	}
	r.expect++
	if r.expect == 0 && t.aead != nil {
		t.renew(p, orDataHeader(h, ch, seq, stamp, p)) // the numbers come round again (auth.go)
	}
	t.stats.Delivered++
	p.stats.Delivered++
	p.stats.DeliveredBytes += uint64(len(payload))
	t.queueAckOf(p, ch, seq, stamp)
}

// orDataHeader returns h, or if it is nil the header of a DATA PDU from
// p's current incarnation with channel ch, sequence number seq and stamp
// (what an answer echoes).
func orDataHeader(h *header, ch int, seq uint16, stamp uint32, p *Peer) *header {
	if h == nil {
		h = new(header)
		h.put(typeData, ch, seq, stamp, 0, p.epoch, p.dstIn)
	}
	return h
}

// inWindows reports whether every sequence number of the PDU with header
// h and acknowledgement entries acks from p lies in its window (above),
// counting the PDU as forged when one does not. A NACK is not checked: a
// stale one is ignored anyway (dispatch).
func (t *Transport) inWindows(p *Peer, h *header, acks []byte) bool {
	for i := range len(acks) / ackEntryLen {
		if ch, seq := ackAt(acks, i); !ackInWindow(&p.send[ch], seq) {
			t.stats.ForgedAcks++
			return false
		}
	}
	switch h.typ() {
	case typeAck:
		if !ackInWindow(&p.send[h.channel()], h.seq()) {
			t.stats.ForgedAcks++
			return false
		}
	case typeData:
		if !t.cfg.Unreliable && p.recv[h.channel()].expect-h.seq() > lateWindow+1 {
			t.stats.OutOfWindow++
			return false
		}
	}
	return true
}

// ackInWindow reports whether an acknowledgement of message seq may come
// for send channel c: the message in flight, or one up to lateWindow+1
// before it (before the one c sends next, when c is free or its message
// waits for the handshake, unsent).
func ackInWindow(c *sendChannel, seq uint16) bool {
	d := c.seq - seq
	return d <= lateWindow+1 && (c.inUse && c.sent || d > 0)
}

// acked handles the acknowledgement of message seq on channel ch to p.
func (t *Transport) acked(p *Peer, ch int, seq uint16) {
	c := &p.send[ch]
	if !c.inUse || !c.sent || c.seq != seq {
		t.stats.StaleAcks++
		return
	}
	cookie := c.cookie
	t.release(p, c)
	p.stalled = false
	t.stats.Acked++
	if t.cfg.Acked != nil {
		t.cfg.Acked(p.id, cookie)
	}
}

// answer queues an ACK or NACK to p for the DATA frame with header h,
// echoing its channel, sequence number and stamp.
func (t *Transport) answer(p *Peer, typ uint8, h *header) {
	t.control(p, typ, h, p.dstOut, 0)
}

// control queues a frame of type typ to p in answer to frame h, echoing
// its channel, sequence number and stamp, with destination epoch dst; a
// RESET carries want.
func (t *Transport) control(p *Peer, typ uint8, h *header, dst, want uint32) {
	// A PDU yields at most one answer: more than a batch's worth grows
	// the buffers.
	i := t.ctlHeld + len(t.tx)
	if i == len(t.ctl) {
		t.ctl = append(t.ctl, make([]byte, frameLen(resetLen)+t.trail))
	}
	var sdu [headerLen + resetLen]byte
	n, seq := 0, h.seq()
	if typ == typeReset {
		n, seq = resetLen, 0
		binary.BigEndian.PutUint32(sdu[headerLen:], want)
		if !t.ready(p) {
			seq = resetAnswer
		}
	}
	(*header)(sdu[:]).put(typ, h.channel(), seq, h.stamp(), n, p.srcOut, dst)
	f := t.ctl[i]
	t.putHeaders(f, p, 1, cells.FlagStart)
	t.seg.Put(f[len(t.eth):], sdu[:headerLen+n])
	t.tx = append(t.tx, f)
}

// flush sends the queued ACKs, NACKs and RESETs: at once outside a
// pass, into the pass's batch inside one (their buffers are then held
// until the batch goes, ctlHeld).
func (t *Transport) flush() error {
	if len(t.tx) == 0 {
		return nil
	}
	err := t.output(t.tx)
	if t.pass > 0 {
		t.ctlHeld += len(t.tx) // in the pass's batch until flushOut
	}
	clear(t.tx)
	t.tx = t.tx[:0]
	if err != nil {
		return fmt.Errorf("nicfw: send acknowledgements: %w", err)
	}
	return nil
}
