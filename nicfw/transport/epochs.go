package transport

// Epochs, in the engine thread. Sequence numbers start at 0 when a
// transport starts, so a peer that restarts must be noticed: otherwise the
// survivor, expecting higher numbers, would take the newcomer's first
// messages for duplicates (acknowledged, never delivered), and the
// newcomer would take the survivor's for duplicates in turn.
//
// Each transport picks an epoch when it starts (Config.Epoch: a random
// non-zero number), the name of this incarnation. Every frame carries its
// sender's epoch (src) and the epoch the sender has heard from the
// receiver (dst; 0 before it has heard any). The receiver of a frame from
// peer p:
//
//   - src is p's current epoch: as usual.
//   - no epoch of p is on record: p's first frame; its epoch is recorded,
//     unconfirmed until a frame from it names this transport's epoch as
//     dst (the peer has heard this incarnation).
//   - src is p's previous epoch: a frame of the incarnation p replaced,
//     late; dropped.
//   - src is new and dst is this transport's epoch: p's (new) incarnation
//     has heard this one (the handshake below), which a frame made up by a
//     third party cannot show without knowing this epoch. If the epoch on
//     record was confirmed, p restarted: p's receive channels expect 0
//     again, the acknowledgements owed to it are forgotten, each message
//     in flight to it is returned (Returned, ErrRestarted) and its channel
//     starts again at 0. If it was not (a frame made up before the peer's
//     first, say), the new epoch replaces it quietly: what is in flight
//     goes on to the real peer.
//   - src is new and dst is not this epoch: a claim, not yet believed
//     (counted in Unconfirmed). Nothing changes, so one forged frame with a
//     made-up epoch cannot cut a live peer off; a DATA frame is answered
//     with a RESET frame (src: this epoch, dst: the claimed one). A peer
//     that did restart learns this epoch from it and names it as dst in
//     its next frame (its retransmission), which is then believed.
//   - dst is neither 0 nor this transport's epoch: the frame was meant for
//     an earlier incarnation of this transport; dropped, and a DATA frame
//     is answered with a RESET frame (src: this epoch), from which its
//     sender learns of the restart as above (the RESET's dst is its own
//     epoch, so it believes it).
//
// So after either side restarts, each message in flight between them is
// either delivered to the new incarnation or returned to its sender, never
// acknowledged and lost; the restart costs the restarted side one
// retransmission time. A message in flight to a peer that restarts may
// have been delivered to the old incarnation before it stopped; its return
// (ErrRestarted) says so.

// checkEpochs applies the epochs of frame h from p, and reports whether
// the frame is for this incarnation from p's current one.
func (t *Transport) checkEpochs(p *Peer, h header) bool {
	src := h.src()
	if src != p.epoch {
		switch old := p.epoch; {
		case old == 0:
			p.epoch, p.confirmed = src, false
		case src == p.prevEpoch:
			t.stats.StaleEpoch++
			return false
		case h.dst() == t.epoch && !p.confirmed:
			// The epoch on record never showed it had heard this
			// transport: made up, or an incarnation that never got to.
			// Nothing it sent was acknowledged by the real peer, so the
			// messages in flight simply go on to the new epoch.
			p.epoch = src
			t.forgetReceived(p)
		case h.dst() == t.epoch:
			p.prevEpoch, p.epoch = old, src
			t.restarted(p)
		default:
			t.stats.Unconfirmed++
			if h.typ() == typeData {
				t.answer(p, typeReset, h)
				t.stats.ResetsSent++
			}
			return false
		}
	}
	if h.dst() == t.epoch {
		p.confirmed = true
	}
	if dst := h.dst(); dst != 0 && dst != t.epoch {
		t.stats.StaleEpoch++
		if h.typ() == typeData {
			t.answer(p, typeReset, h)
			t.stats.ResetsSent++
		}
		return false
	}
	return true
}

// forgetReceived resets the receive side of p's channels: they expect 0,
// and nothing is owed an acknowledgement.
func (t *Transport) forgetReceived(p *Peer) {
	for i := range p.recv {
		p.recv[i].expect = 0
	}
	for _, ch := range p.ackList {
		p.ackOn[ch] = false
	}
	if len(p.ackList) > 0 {
		t.dropAcks(p, len(p.ackList))
	}
}

// restarted resets the channels to p, whose transport restarted (p.epoch
// holds its new epoch already): both directions start again at sequence
// number 0, and the messages in flight to p are returned. Returned runs
// with the channel free and at 0, and may call Send.
func (t *Transport) restarted(p *Peer) {
	t.stats.Restarts++
	t.forgetReceived(p)
	for i := range p.send {
		if !p.send[i].inUse {
			p.send[i].seq = 0
		}
	}
	for i := range p.send {
		c := &p.send[i]
		if !c.inUse {
			continue
		}
		t.release(p, c)
		c.seq = 0
		t.stats.Returned++
		if t.cfg.Returned != nil {
			t.cfg.Returned(p.id, c.cookie, t.payload(c), ErrRestarted)
		}
	}
}
