package nicfw

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
//   - src is p's previous epoch: a frame of the incarnation p replaced,
//     late; dropped.
//   - otherwise p is new or restarted: with an epoch on record, p's receive
//     channels expect 0 again, the acknowledgements owed to it are
//     forgotten, and each message in flight to it is returned (Returned,
//     ErrRestarted) and its channel starts again at 0; the new epoch is
//     recorded.
//   - dst is neither 0 nor this transport's epoch: the frame was meant for
//     an earlier incarnation of this transport; dropped, and a DATA frame
//     is answered with a RESET frame (src: this epoch), from which its
//     sender learns of the restart as above.
//
// So after either side restarts, each message in flight between them is
// either delivered to the new incarnation or returned to its sender, never
// acknowledged and lost. A message in flight to a peer that restarts may
// have been delivered to the old incarnation before it stopped; its return
// (ErrRestarted) says so.

// checkEpochs applies the epochs of frame h from p, and reports whether
// the frame is for this incarnation from p's current one.
func (t *Transport) checkEpochs(p *peer, h header) bool {
	if src := h.src(); src != p.epoch {
		old := p.epoch
		if old != 0 && src == p.prevEpoch {
			t.stats.StaleEpoch++
			return false
		}
		p.prevEpoch, p.epoch = old, src
		if old != 0 {
			t.restarted(p)
		}
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

// restarted resets the channels to p, whose transport restarted (p.epoch
// holds its new epoch already): both directions start again at sequence
// number 0, and the messages in flight to p are returned. Returned runs
// with the channel free and at 0, and may call Send.
func (t *Transport) restarted(p *peer) {
	t.stats.Restarts++
	for i := range p.recv {
		p.recv[i].expect = 0
	}
	for _, ch := range p.ackList {
		p.ackOn[ch] = false
	}
	if len(p.ackList) > 0 {
		t.dropAcks(p, len(p.ackList))
	}
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
