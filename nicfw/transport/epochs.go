package transport

import (
	"encoding/binary"
	"math/rand/v2"
)

// Epochs, in the engine thread. Sequence numbers start at 0 when a
// transport starts, so a peer that restarts must be noticed: otherwise the
// survivor, expecting higher numbers, would take the newcomer's first
// messages for late copies (never delivered), and the newcomer would take
// the survivor's for forgeries in turn.
//
// Each transport picks an epoch when it starts (Config.Epoch: a random
// non-zero number), the name of this incarnation. Every frame carries its
// sender's epoch toward the receiver (src: Peer.srcOut, the transport's
// epoch for a first row) and a destination epoch (dst), which names the
// receiver's incarnation as the sender knows it. What a transport asks of
// peer p as dst is p's dstIn: its own epoch for a first row, a random
// number of its choosing for a new incarnation toward p or once renewed,
// the challenge of p's epoch once it believed one (below); RESET frames
// tell p what to write (their payload; p keeps it as its dstOut).
//
// Pairs of incarnations. The channels between this host and p belong to
// a pair of incarnations: this transport's toward p (srcOut) and p's on
// record (epoch). Whenever either changes, both directions' channels
// start again at 0 (startAgain): every message sent under the old pair
// and not acknowledged goes back to its sender (Returned: ErrRestarted,
// or ErrUnreachable after a give-up), for the old pair may have delivered
// it; nothing sent under one pair is delivered or acknowledged under
// another. Every dstIn is drawn anew, or computed anew, for each pair (a
// challenge depends on srcOut and on the count of epochs believed), so a
// frame that names one is of that pair, and p, which must name it, holds
// the same pair: the two sides never disagree on which pair a frame
// belongs to, and no pair is ever entered twice (the epoch replaced is
// kept as prevEpoch, whose frames are stale).
//
// Handshake. A DATA frame goes to p only once p has told, in a RESET of
// its current epoch (or in its first frame), what to name it under the
// pair both sides now hold (Peer.dstOK): until then a message waits in
// its channel, nothing of it sent (sendChannel.sent), and a RESET that
// carries resetAnswer (hello) asks p for it, again at each retransmission
// time of the waiting messages. AddPeer, a row made by SetPeers and a new
// incarnation toward p send one at once. p answers every such RESET, taken
// or refused, with a RESET of its own: a challenge if the RESET claims an
// epoch new to p, the dstIn it asks for otherwise. Once the answer is in,
// the waiting messages go, numbered from 0 under the new pair; a pair
// that changes again first takes them along (they cannot have been
// delivered), and a give-up returns them. So a new incarnation, a
// transport's first included, is confirmed both ways before any channel
// carries data under it, at the cost of a round trip before a peer's
// first message; and a message sent meanwhile waits, it is not lost.
//
// The receiver of a frame from p:
//
//   - no epoch of p is on record: p's first frame (first contact); its
//     epoch is recorded, unconfirmed until a frame from it names dstIn,
//     and frames to p name src until p's RESET says otherwise (p's dstIn
//     is its srcOut for a first row; it refuses anything else, and says
//     so).
//   - src is p's previous epoch: a late frame of the incarnation p
//     replaced; dropped (StaleEpoch). But one that is a RESET naming this
//     incarnation while the record of p is not confirmed may come from
//     the live incarnation, the record being a late frame of an older
//     (dead) one believed on the same grounds: the two cannot be told
//     apart, so the one that answers is taken back and a new incarnation
//     toward p, which only a live one can answer, starts.
//   - src is another new epoch: a claim that p restarted. It is believed
//     only if dst is the challenge for src: a number computed from src,
//     p's address, srcOut and the count of p's epochs believed, under a
//     key this transport drew when it started (AES), which nothing but a
//     RESET of this transport, sent to p's address, tells. Any other claim
//     is dropped (Unconfirmed) and changes nothing, so a frame made up by
//     a third party cannot cut a live peer off or start its channels
//     again, whatever epochs it knows; a DATA or RESET frame is answered
//     with a RESET to the claimed epoch that carries the challenge. A peer
//     that did restart names the challenge in its next frame, which is
//     then believed, and the challenge becomes dstIn; a host that only
//     sends frames under p's address never receives it. Believing an
//     epoch starts a new pair (above); one that replaces a confirmed
//     epoch counts as a restart (Restarts). A RESET that names srcOut
//     while the record of p is not confirmed is believed too (p answers
//     a frame of this incarnation at the epoch it claimed): when both
//     sides started a new incarnation at once (both gave up, or both
//     restarted and each first heard a late frame of the other's previous
//     incarnation), each claims an epoch the other cannot believe yet, and
//     the RESETs that carry the challenges would otherwise be refused as
//     claims themselves. (For a first row srcOut is the transport's epoch,
//     no secret: a host that sends such RESETs under p's address before p
//     is confirmed can have the record replaced, as before p's first frame
//     anyone may speak for p; a confirmed record is not replaced so.)
//   - src is p's epoch: dst must be dstIn. dst 0 is never taken (but by
//     an unreliable transport, which has no channels): a peer names 0 only
//     in the hellos it sends before it has heard this incarnation, which
//     are answered (ZeroEpoch counts the other frames). Any other dst
//     names an earlier pair of incarnations, or a dstIn renewed since
//     (StaleEpoch); only a RESET naming the last dstIn p named (dstHeard),
//     or naming srcOut while p is not confirmed, is still taken, so that
//     two peers that both renewed, or that both started a new
//     incarnation, learn each other's new ones. Each refused frame but a
//     RESET without resetAnswer is answered with a RESET that carries
//     dstIn, from which p learns what to name.
//
// RESETs to a peer are rate-limited (reset): a flood of forged frames is
// not answered with a flood.
//
// So after either side restarts, each message in flight between them is
// either delivered once or returned to its sender, never acknowledged
// and lost, nor delivered twice. A message returned with ErrRestarted may
// have been delivered to the incarnation that stopped before it did; its
// return says so.
//
// New incarnations toward one peer. Two events leave this transport not
// knowing what p holds of their channels: a message given up (timers.go)
// may have been delivered with its acknowledgement lost, or not, so the
// channel's next sequence number could be taken for a copy of it
// (acknowledged and dropped: lost without a word) or refused as outside
// the window for good; and a row of the host table made again for an
// address that had one (SetPeers, after a mapper lost the host for a
// while) starts its channels at 0 while p may keep the old row's. Either
// starts a new incarnation toward p (reincarnate; newPeer): the frames to
// p name a fresh epoch as their src (Peer.srcOut), which p takes as a
// restart of this host on the challenge above, as for any restart; each
// side starts the new pair's channels at 0 and returns what it had sent
// to the other (ErrUnreachable here, ErrRestarted there).
// Stats.Reincarnations counts them. The new incarnation asks p for a
// fresh dstIn, never srcOut, and is not confirmed until p names it. A new
// incarnation clears confirmed, not heard: believing a new epoch of p
// after it is a restart, as it would have been before.
//
// Renewal. Epochs travel in every frame, so a host on the segment may
// learn both of a pair's (by taking one's address on a bridge for a
// while); its frames then pass these checks, and only the sequence numbers
// stand between it and the channels. The receive path (receive.go) checks
// each frame's sequence numbers against the channel windows before any of
// it takes effect, and a frame that no peer can send (a DATA frame outside
// the window, an acknowledgement of a message that is not in flight:
// OutOfWindow, ForgedAcks) shows that someone else knows dstIn. dstIn is
// then renewed (Renewals): a fresh random number, sent to p's address in a
// RESET, asked of p from then on. Frames of p in flight that name the old
// one are answered with the same RESET and cost p a retransmission; the
// forger, which does not receive what is sent to p's address, is left
// naming a number that is no longer taken. A renewal keeps the pair of
// incarnations: the channels go on.

// heardCurrent notes a frame from p's current incarnation to this one's
// (destination epoch dst): the pair of incarnations is confirmed.
func (p *Peer) heardCurrent(dst uint32) { p.confirmed, p.heard, p.dstHeard = true, true, dst }

// checkEpochs applies the epochs of frame h from p (see above), and
// reports whether the frame is for this incarnation from p's current one.
// A frame it refuses may be answered with a RESET.
func (t *Transport) checkEpochs(p *Peer, h *header, payload []byte) bool {
	src, dst, typ := h.src(), h.dst(), h.typ()
	// A refused DATA frame is answered with a RESET, and so is a RESET
	// whose sender waits for one (resetAnswer); other RESETs are not, so
	// that two hosts never keep answering each other's.
	answer := typ == typeData || typ == typeReset && h.seq()&resetAnswer != 0
	if src != p.epoch {
		switch {
		case p.epoch == 0:
			// p's first frame: it names itself src, and asks for src
			// unless its row for this host was made again (then its
			// answer to the first frame that names src says what).
			p.epoch, p.confirmed, p.dstOut, p.dstOK = src, false, src, true
			t.numberIncarnation(p)
		case src == p.prevEpoch:
			// A late frame of the incarnation p replaced: stale.
			t.stats.StaleEpoch++
			if !p.confirmed && typ == typeReset && dst == p.srcOut {
				// But it answers this incarnation, whose record of p
				// is not confirmed: the epoch on record may be a late
				// one of an incarnation older still (a dead one),
				// believed on the same grounds, which would refuse the
				// live one for good. The two cannot be told apart by
				// their frames: the one that answers is taken back, and
				// a new incarnation toward p, which only a live one can
				// answer, starts (a pair of incarnations is never
				// entered twice).
				p.epoch, p.prevEpoch, p.dstOut = src, p.epoch, src
				t.numberIncarnation(p)
				t.newIncarnation(p, ErrRestarted, true)
			}
			return false
		case dst != 0 && dst == t.challenge(p, src):
			t.believe(p, src, dst)
		case !p.confirmed && typ == typeReset && dst == p.srcOut:
			// p answers a frame of this incarnation toward it at the
			// epoch that frame claimed, while the epoch on record for p
			// has not named this incarnation's destination epoch: p's
			// epoch is believed. When both sides started one at once
			// (both gave up, or both restarted and each first heard a
			// late frame of the other's previous incarnation), each
			// claim is believed so, where each side's RESET, itself a
			// claim, was refused. (For a first row srcOut is this
			// transport's epoch, no secret: a host that sends such
			// RESETs under p's address before p confirmed can have the
			// record replaced, as before p's first frame it can speak
			// for p; a confirmed record is not replaced so.)
			t.believe(p, src, t.challenge(p, src))
		default:
			t.stats.Unconfirmed++
			if typ == typeData || typ == typeReset {
				t.reset(p, h, src, t.challenge(p, src))
			}
			return false
		}
	}
	switch {
	case dst == p.dstIn:
		p.heardCurrent(dst)
		return true
	case dst == 0:
		if t.cfg.Unreliable && typ == typeData {
			return true // no channels, no handshake: both ends agree
		}
		if typ != typeReset || !answer {
			t.stats.ZeroEpoch++ // a hello names 0 until it has heard p
		}
		if answer {
			t.reset(p, h, p.dstOut, p.dstIn)
		}
		return false
	case typ == typeReset && dst == p.dstHeard:
		return true
	case !p.confirmed && typ == typeReset && dst == p.srcOut:
		// p answers a frame of this incarnation toward it, whose dstIn
		// it does not know yet, at the epoch the frame claimed (see
		// above).
		return true
	}
	t.stats.StaleEpoch++
	if typ != typeReset || answer {
		t.reset(p, h, p.dstOut, p.dstIn)
	}
	return false
}

// challenge returns the destination epoch that a frame from p claiming
// the new epoch src must carry to be believed: the first four bytes of
// AES, under the transport's key, of p's address, src, srcOut and the
// count of p's epochs believed (never 0, nor srcOut). So it names the
// pair of incarnations it would start, once: a challenge told before
// this host's incarnation toward p changed, or before it believed
// another epoch of p, is not taken after.
func (t *Transport) challenge(p *Peer, src uint32) uint32 {
	b := &t.prfBuf
	*b = [len(t.prfBuf)]byte{}
	copy(b[:6], p.mac)
	binary.BigEndian.PutUint32(b[6:], src)
	binary.BigEndian.PutUint32(b[10:], p.srcOut)
	binary.BigEndian.PutUint16(b[14:], uint16(p.believed))
	t.prf.Encrypt(b[:], b[:])
	c := binary.BigEndian.Uint32(b[:])
	for c == 0 || c == p.srcOut {
		c++
	}
	return c
}

// believe takes src in as p's epoch: its frame named the challenge, which
// becomes dstIn. A new pair of incarnations starts (startAgain): what was
// sent under the old one goes back, what waits stays. A confirmed epoch
// it replaces was a restart.
func (t *Transport) believe(p *Peer, src, challenge uint32) {
	old, restart := p.epoch, p.confirmed || p.heard
	p.epoch, p.dstOut, p.dstIn = src, src, challenge
	t.numberIncarnation(p)
	p.heard, p.confirmed, p.dstOK, p.dstHeard = false, false, false, 0
	p.believed++      // no frame of an earlier incarnation answers this challenge again
	p.prevEpoch = old // its late frames are stale: never believed again
	if restart {
		// The epoch replaced had heard this transport: p restarted.
		t.stats.Restarts++
	}
	// Otherwise the epoch on record never showed it had heard this
	// transport (made up, or an incarnation that never got to); either
	// way the channels start again under the new pair of incarnations,
	// and what was sent under the old pair goes back: only the real
	// peer could have taken it, and that one has now moved on.
	t.startAgain(p, ErrRestarted, true)
}

// renew gives p a fresh dstIn, after frame h, which named the current one,
// turned out forged, and tells p in a RESET.
func (t *Transport) renew(p *Peer, h *header) {
	old := p.dstIn
	for p.dstIn == old || p.dstIn == 0 || p.dstIn == p.srcOut {
		p.dstIn = rand.Uint32()
	}
	t.stats.Renewals++
	t.reset(p, h, p.dstOut, p.dstIn)
}

// reset queues a RESET to p in answer to frame h, from this epoch to
// destination epoch dst, asking p to name this transport want from now
// on. At most one goes to a peer per Config.ScanInterval, so that a flood
// of forged frames does not make this transport flood the peer in turn,
// and two hosts never keep answering each other's RESETs; one that asks
// for a dstIn not asked for yet (a renewal) goes at once. Any RESET with
// dstIn teaches p what to name, so a peer whose frames are refused learns
// it within a scan interval, whatever else comes under its address.
func (t *Transport) reset(p *Peer, h *header, dst, want uint32) {
	now := t.now()
	if now.Sub(p.resetAt) < t.cfg.ScanInterval && (want != p.dstIn || want == p.resetWant) {
		return
	}
	p.resetAt, p.resetWant = now, want
	t.control(p, typeReset, h, dst, want)
	t.stats.ResetsSent++
}

// ready reports whether DATA frames may go to p: p has told the
// destination epoch to name it by under the pair of incarnations both
// sides hold now (dstOK). An unreliable transport sends at once.
func (t *Transport) ready(p *Peer) bool {
	return p.dstOK || t.cfg.Unreliable
}

// hello asks p, in a RESET that carries resetAnswer, for the destination
// epoch to name it by: messages wait for it. The RESET names the best
// destination epoch on record (0 before p's first frame) and asks p to
// name dstIn; p answers it, refused or taken, with a RESET of its own
// (a challenge, if the RESET claims an epoch new to p). It is sent as any
// RESET is (reset: at most one per scan interval), at once (outside a
// pass: flush returns the link's error) or in the pass's batch.
func (t *Transport) hello(p *Peer) error {
	var h header
	t.reset(p, &h, p.dstOut, p.dstIn)
	return t.flush()
}

// freshEpoch returns a random epoch other than 0, old and this
// transport's own.
func (t *Transport) freshEpoch(old uint32) uint32 {
	e := old
	for e == old || e == 0 || e == t.epoch {
		e = rand.Uint32()
	}
	return e
}

// reincarnate starts a new incarnation of this transport toward p, whose
// state of the channels between them is no longer known: a message given
// up may have been delivered (its acknowledgement lost) or not, so the
// sequence number after it could be taken for a copy of it or refused as
// out of the window for good. Every message in flight to p goes back
// (Returned, ErrUnreachable), both directions' channels start again at
// 0, and the frames to p name a fresh epoch: p takes it as a restart of
// this host (on the challenge, as for any), and starts its own channels
// again, returning what it had in flight.
func (t *Transport) reincarnate(p *Peer) {
	t.newIncarnation(p, ErrUnreachable, false)
}

// newIncarnation starts a new incarnation of this transport toward p:
// a fresh srcOut and destination epoch, both directions' channels at 0,
// the messages sent to p returned with why (and, unless keepWaiting,
// those that wait too), and a RESET that tells p.
func (t *Transport) newIncarnation(p *Peer, why error, keepWaiting bool) {
	t.stats.Reincarnations++
	p.srcOut = t.freshEpoch(p.srcOut)
	t.fresh(p)
	t.startAgain(p, why, keepWaiting)
	t.hello(p) // tells p at once, if it hears
}

// fresh readies p's destination epochs for an incarnation toward p that p
// may not know of, whose srcOut is set: p must name a new dstIn (never
// srcOut), which it learns from a RESET, and is not confirmed until it
// does; nothing goes to p until it has told what to name it under the new
// pair (dstOK).
func (t *Transport) fresh(p *Peer) {
	p.dstIn = t.freshEpoch(p.srcOut)
	p.dstHeard, p.confirmed, p.dstOK = 0, false, false
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

// startAgain starts both directions of p's channels again at sequence
// number 0 and returns each message in flight to p with why: each one
// sent, and, unless keepWaiting, each one that waits for the handshake
// too (keepWaiting: those stay, numbered anew, and go once the new
// incarnations are confirmed; nothing of them left, so they cannot
// have been delivered). The free channels start again first, then each
// busy one is freed, starts again and its message goes back; Returned
// runs with the channel free and at 0, and may call Send: a message it
// sends takes a free channel, numbered anew, and is not among those
// returned here (the busy ones were noted first).
func (t *Transport) startAgain(p *Peer, why error, keepWaiting bool) {
	t.forgetReceived(p)
	var busy [MaxChannels]bool
	for i := range p.send {
		c := &p.send[i]
		busy[i] = c.inUse && (c.sent || !keepWaiting)
		if !busy[i] {
			c.seq = 0
			(*header)(&c.hdr).setSeq(0) // a waiting message: numbered anew
		}
	}
	for i := range p.send {
		if !busy[i] {
			continue
		}
		c := &p.send[i]
		t.release(p, c)
		c.seq = 0
		t.stats.Returned++
		p.stats.Returned++
		if t.cfg.Returned != nil {
			t.cfg.Returned(p.id, c.cookie, t.payload(c), why)
		}
	}
}

// numberIncarnation gives p's epoch, just taken in, the next incarnation
// number (Peer.Incarnation).
func (t *Transport) numberIncarnation(p *Peer) {
	if t.incarnations++; t.incarnations == 0 {
		t.incarnations = 1
	}
	p.incarnation = t.incarnations
}
