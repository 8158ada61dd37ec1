package transport

import "github.com/xam-project/xam/cells"

// Acknowledgements, in the engine thread. A DATA frame that the receiver
// accepts (or recognises as a duplicate) is owed an acknowledgement; the
// receiver notes it per peer and channel (queueAck) instead of answering at
// once. The next DATA frame to that peer carries every acknowledgement owed
// to it (transmit, send.go): in request/reply traffic the reply
// acknowledges the request, and the next request the reply, so a round
// trip costs two frames, not four. What no DATA frame has carried by the
// end of the Poll after the one that queued it, and at least
// Config.AckDelay after it was queued (Config.AckSoonDelay for a message
// whose receiver said AckSoon; or as soon as half the peer's channels are
// owed one), leaves in an ACK frame of its own
// (flushAcks): the ACK header answers one channel and echoes its
// stamp, the entries after it the others. NACKs are never delayed.
//
// A channel owes at most one acknowledgement: the sender sends its next
// message on a channel only after the acknowledgement of the previous one,
// so a second DATA frame on the channel before the first is acknowledged
// is a retransmission of the same message, and its acknowledgement
// replaces the first.

// queueAck notes that the DATA frame with header h from p is to be
// acknowledged.
func (t *Transport) queueAck(p *Peer, h *header) {
	t.queueAckOf(p, h.channel(), h.seq(), h.stamp())
}

// queueAckOf is queueAck for the DATA frame on channel ch with sequence
// number seq and stamp.
func (t *Transport) queueAckOf(p *Peer, ch int, seq uint16, stamp uint32) {
	if t.cfg.AckDelay < 0 {
		var h header
		h.put(typeData, ch, seq, stamp, 0, 0, 0)
		t.answer(p, typeAck, &h)
		return
	}
	p.ackSeq[ch], p.ackStamp[ch] = seq, stamp
	if t.ackNow {
		p.ackUrgent = true
	} else if t.ackSoon && !p.ackSoon {
		p.ackSoon, p.ackSoonAt = true, t.now()
	}
	if p.ackOn[ch] {
		return
	}
	p.ackOn[ch] = true
	p.ackList = append(p.ackList, uint8(ch))
	if len(p.ackList) == 1 {
		p.ackPoll = t.polls
		if t.cfg.AckDelay > 0 {
			p.ackAt = t.now()
		}
		p.ackIdx = len(t.acking)
		t.acking = append(t.acking, p)
	}
}

// takeAcks writes up to len(b)/ackEntryLen of the acknowledgements owed to
// p into b, oldest first, and forgets them.
func (t *Transport) takeAcks(p *Peer, b []byte) {
	n := len(b) / ackEntryLen
	for i, ch := range p.ackList[:n] {
		putAck(b, i, int(ch), p.ackSeq[ch])
		p.ackOn[ch] = false
	}
	t.dropAcks(p, n)
}

// dropAcks forgets the first n acknowledgements owed to p; a peer owed
// none leaves the acking list.
func (t *Transport) dropAcks(p *Peer, n int) {
	rest := copy(p.ackList, p.ackList[n:])
	p.ackList = p.ackList[:rest]
	if rest > 0 {
		return
	}
	p.ackUrgent, p.ackSoon = false, false
	i, last := p.ackIdx, len(t.acking)-1
	t.acking[i] = t.acking[last]
	t.acking[i].ackIdx = i
	t.acking[last] = nil
	t.acking = t.acking[:last]
	p.ackIdx = -1
}

// flushAcks queues an ACK frame (into t.tx) for each peer whose owed
// acknowledgements are due, or for every peer owed any with force.
func (t *Transport) flushAcks(force bool) {
	for i := len(t.acking) - 1; i >= 0; i-- {
		p := t.acking[i]
		if !force && !t.ackDue(p) {
			continue
		}
		if len(p.ackList) <= compactAckMax && !t.cfg.NoCompact {
			t.flushCompactAck(p)
			continue
		}
		n := min(len(p.ackList), t.ackOneMax)
		fl := frameLen(ackEntryLen*(n-1)) + t.trail
		if cap(p.ackFrame) < fl {
			p.ackFrame = make([]byte, frameLen(ackEntryLen*(t.ackOneMax-1))+t.trail)
		}
		f := p.ackFrame[:fl]
		sdu := t.ackPDU(p, n) // may move another peer into place i, visited already
		t.putHeaders(f, p, cells.CellCount(len(sdu)), cells.FlagStart)
		t.seg.Put(f[len(t.eth):], sdu)
		t.tx = append(t.tx, f)
		t.stats.AckFrames++
		if len(p.ackList) > 0 {
			p.ackPoll = t.polls // the rest go at the next flush
		}
	}
}

// ackDue reports whether the acknowledgements owed to p are to leave in
// an ACK frame now: not in the Poll that queued the first of them, and,
// with an AckDelay, once it has passed or once half of p's channels are
// owed one (a sender with no channel free waits for this frame, so a
// stream in one direction is acknowledged at half its window, not at
// the delay), or once one of them is for a message whose receiver said
// AckNow (nothing will carry it soon).
func (t *Transport) ackDue(p *Peer) bool {
	if p.ackPoll == t.polls {
		return false
	}
	if t.cfg.AckDelay <= 0 || p.ackUrgent || len(p.ackList) >= t.ackEarly {
		return true
	}
	now := t.now()
	return now.Sub(p.ackAt) >= t.cfg.AckDelay || p.ackSoon && now.Sub(p.ackSoonAt) >= t.cfg.AckSoonDelay
}

// AckNow, called by Config.Deliver for the message it is given, has that
// message's acknowledgement leave at the end of the next Poll, whatever
// the AckDelay: the receiver knows that no message to its sender will
// carry it soon (one that will not be answered). With a delay, a
// receiver calls it for every message but those it expects to answer.
func (t *Transport) AckNow() { t.ackNow = true }

// AckSoon, called by Config.Deliver for the message it is given, has that
// message's acknowledgement wait at most Config.AckSoonDelay (and at least
// until the end of the next Poll) for a DATA frame to its sender to carry
// it: the receiver expects to send one soon (the next request after a
// reply). Without an AckSoonDelay or an AckDelay it is AckNow.
func (t *Transport) AckSoon() {
	if t.cfg.AckSoonDelay <= 0 || t.cfg.AckDelay <= 0 {
		t.ackNow = true
		return
	}
	t.ackSoon = true
}

// flushCompactAck queues (into t.tx) a frame of one compact ACK cell that
// carries every acknowledgement owed to p (at most compactAckMax).
func (t *Transport) flushCompactAck(p *Peer) {
	fl := len(t.eth) + cells.CellSize + t.trail
	if cap(p.ackFrame) < fl {
		p.ackFrame = make([]byte, max(fl, frameLen(ackEntryLen*(t.ackOneMax-1))+t.trail))
	}
	f := p.ackFrame[:fl]
	t.putHeaders(f, p, 1, cells.FlagStart)
	t.putCompactAck(cells.Cell(f[len(t.eth):]), p, len(p.ackList))
	t.tx = append(t.tx, f)
	t.stats.AckFrames++
}

// scratchSDU returns the transport's scratch buffer with length n.
func (t *Transport) scratchSDU(n int) []byte {
	if cap(t.scratch) < n {
		t.scratch = make([]byte, n, max(n, 2*cap(t.scratch)))
	}
	return t.scratch[:n]
}

// AcksPending reports whether acknowledgements are owed and not sent. An
// engine about to sleep calls FlushAcks first.
func (t *Transport) AcksPending() bool { return len(t.acking) > 0 }

// FlushAcks sends every acknowledgement owed, in ACK frames, at once.
func (t *Transport) FlushAcks() error {
	if len(t.acking) == 0 {
		return nil
	}
	t.flushAcks(true)
	return t.flush()
}

// AcksOwed reports whether acknowledgements are owed to any peer: queued,
// and not yet carried by a frame.
func (t *Transport) AcksOwed() bool { return len(t.acking) > 0 }
