package nicfw

import (
	"fmt"
	"time"

	"github.com/xam-project/xam/cells"
)

// The receive path, in the engine thread, one batch per Poll:
//
//  1. link.Recv lends a batch of frames (valid until the next Recv).
//  2. Each frame is checked: addressed to this host, from a host in the
//     table, xam framing (cells.Unpack), then its cells go through the
//     reassembler (HEC, AAL5 length and CRC-32). A frame carries one whole
//     PDU, so one reassembler serves all peers.
//  3. The PDU's transport header is checked and dispatched: DATA to the
//     receive channel table and Deliver (answered by an ACK or a NACK, queued
//     in t.tx), ACK and NACK to the send channel table.
//  4. The queued ACKs and NACKs go to the link in one batch.
//  5. The timer scan runs if its period has passed (timers.go).

// Poll receives and handles one batch of frames, sends the acknowledgements
// it produced and runs the timer scan when it is due. It returns the number
// of frames received; an engine that gets 0 for a while may sleep in the
// link's Wait (but no longer than Config.ScanInterval while Unacked is not
// zero for some peer). It returns the link's errors.
func (t *Transport) Poll() (int, error) {
	n, err := t.link.Recv(t.rx)
	if err != nil {
		return 0, fmt.Errorf("nicfw: receive: %w", err)
	}
	now := t.clk.Now()
	for _, f := range t.rx[:n] {
		t.receive(f, now)
	}
	clear(t.rx[:n])
	if err := t.flush(); err != nil {
		return n, err
	}
	if !now.Before(t.nextScan) {
		t.nextScan = now.Add(t.cfg.ScanInterval)
		if err := t.scan(now); err != nil {
			return n, err
		}
	}
	return n, nil
}

// receive handles one frame.
func (t *Transport) receive(f []byte, now time.Time) {
	if len(f) < 12 || [6]byte(f[:6]) != t.mac {
		t.stats.NotForUs++
		return
	}
	p := t.byMAC[[6]byte(f[6:12])]
	if p == nil {
		t.stats.UnknownSource++
		return
	}
	cs, _, err := cells.Unpack(f, t.cfg.EtherType)
	if err != nil {
		t.stats.BadFrames++
		return
	}
	// One frame, one PDU: a frame whose last cell does not end a message
	// is refused before it can leave a partial PDU in the reassembler.
	if len(cs) < cells.CellSize || !cells.Cell(cs[len(cs)-cells.CellSize:]).EndOfMessage() {
		t.stats.BadFrames++
		return
	}
	// The PDU must span the whole frame: then it is the frame's only one.
	want := len(cs) / cells.CellSize
	ok := false
	t.reasm.PushCells(cs, func(pdu cells.PDU, err error) {
		if err != nil || pdu.Cells != want || pdu.VC != t.vc || !valid(pdu.SDU, len(p.send)) {
			return
		}
		ok = true
		t.dispatch(p, header(pdu.SDU), pdu.SDU[headerLen:], now)
	})
	if !ok {
		t.stats.BadFrames++
	}
}

// dispatch handles one checked transport PDU from p.
func (t *Transport) dispatch(p *peer, h header, payload []byte, now time.Time) {
	ch := h.channel()
	switch h.typ() {
	case typeData:
		r := &p.recv[ch]
		if h.seq() != r.expect {
			// Stop-and-wait: the sender moves to expect+1 only after
			// expect was delivered, so any other number is a message
			// delivered already whose ACK was lost.
			t.stats.Duplicates++
			t.answer(p, typeAck, h)
			return
		}
		if !t.cfg.Deliver(p.id, ch, payload) {
			t.stats.Refused++
			t.answer(p, typeNack, h)
			return
		}
		r.expect++
		t.stats.Delivered++
		t.answer(p, typeAck, h)

	case typeAck:
		c := &p.send[ch]
		if !c.inUse || c.seq != h.seq() {
			t.stats.StaleAcks++
			return
		}
		t.release(p, c)
		t.stats.Acked++

	case typeNack:
		c := &p.send[ch]
		if !c.inUse || c.seq != h.seq() || c.stamp != h.stamp() {
			t.stats.StaleNacks++
			return
		}
		t.stats.NacksReceived++
		c.heard = now
		c.due = now.Add(t.cfg.NackDelay)
	}
}

// answer queues an ACK or a NACK to p for the DATA frame with header h,
// echoing its channel, sequence number and timestamp.
func (t *Transport) answer(p *peer, typ uint8, h header) {
	// Every received frame yields at most one answer and t.tx holds a
	// whole receive batch, so there is always room.
	var sdu [headerLen]byte
	header(sdu[:]).put(typ, h.channel(), h.seq(), h.stamp(), 0)
	f := t.ctl[len(t.tx)]
	t.putHeaders(f, p, 1)
	t.seg.Put(f[len(t.eth):], sdu[:])
	t.tx = append(t.tx, f)
}

// flush sends the queued ACKs and NACKs.
func (t *Transport) flush() error {
	if len(t.tx) == 0 {
		return nil
	}
	_, err := t.link.Send(t.tx)
	t.tx = t.tx[:0]
	if err != nil {
		return fmt.Errorf("nicfw: send acknowledgements: %w", err)
	}
	return nil
}
