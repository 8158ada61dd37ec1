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
// sender's epoch (src) and a destination epoch (dst), which names the
// receiver as the sender knows it. What a transport asks of peer p as dst
// is p's dstIn: its own epoch at first, a random number of its choosing
// once renewed (below); RESET frames tell p what to write (their payload;
// p keeps it as its dstOut). The receiver of a frame from p:
//
//   - no epoch of p is on record: p's first frame (first contact); its
//     epoch is recorded, unconfirmed until a frame from it names dstIn.
//   - src is p's previous epoch: a late frame of the incarnation p
//     replaced; dropped (StaleEpoch).
//   - src is another new epoch: a claim that p restarted. It is believed
//     only if dst is the challenge for src: a number computed from src and
//     p's address under a key this transport drew when it started (AES),
//     which nothing but a RESET of this transport, sent to p's address,
//     tells. Any other claim is dropped (Unconfirmed) and changes nothing,
//     so a frame made up by a third party cannot cut a live peer off or
//     start its channels again, whatever epochs it knows; a DATA or RESET
//     frame is answered with a RESET to the claimed epoch that carries the
//     challenge. A peer that did restart names the challenge in its next
//     frame (its retransmission), which is then believed, and the
//     challenge becomes dstIn; a host that only sends frames under p's
//     address never receives it. A believed epoch that replaces a
//     confirmed one is a restart: p's receive channels expect 0 again, the
//     acknowledgements owed to it are forgotten, each message in flight to
//     it is returned (Returned, ErrRestarted) and its channel starts again
//     at 0. One that replaces an unconfirmed record (made up before p's
//     first frame, say) replaces it quietly: what is in flight goes on to
//     the real peer.
//   - src is p's epoch: dst must be dstIn. dst 0 is taken only from a peer
//     not yet confirmed whose dstIn was never renewed: its first frames,
//     sent before it heard this incarnation (ZeroEpoch counts the others).
//     Any other dst names an earlier incarnation of this transport, or a
//     dstIn renewed since (StaleEpoch); only a RESET naming the last dstIn
//     p named (dstHeard) is still taken, so that two peers that both
//     renewed learn each other's new ones. Each refused frame but a RESET
//     is answered with a RESET that carries dstIn (a frame with dst 0: a
//     DATA frame only), from which p learns what to name: after a restart
//     of this transport, or a renewal.
//
// RESETs to a peer are rate-limited (reset): a flood of forged frames is
// not answered with a flood.
//
// So after either side restarts, each message in flight between them is
// either delivered to the new incarnation or returned to its sender, never
// acknowledged and lost; the restart costs the restarted side a
// retransmission time or two. A message in flight to a peer that restarts
// may have been delivered to the old incarnation before it stopped; its
// return (ErrRestarted) says so.
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
// p name a fresh epoch as their src (Peer.srcOut, the transport's own
// epoch for a first row), which p takes as a restart of this host on the
// challenge above, as for any restart; this side's channels with p start
// again at 0, and each side returns what it had in flight to the other
// (ErrUnreachable here, ErrRestarted there). Stats.Reincarnations counts
// the give-ups that started one. The new incarnation asks p for a fresh
// dstIn, never srcOut, so that destination epoch 0 is refused (p's epoch
// is no secret: a host that knows it could otherwise have a frame of its
// making delivered to the channels that expect 0 again); p learns it from
// the RESET its first refused frame gets. Until p names it, a RESET
// naming srcOut is taken too (p answers our claim at the epoch it
// claimed, a number only frames to p's address carry), and one that
// claims a new epoch of p is believed on it, as on a challenge: when both
// sides gave up at once, each claims an epoch the other cannot believe
// yet, and the RESETs that carry the challenges would otherwise be
// refused as claims themselves. A new incarnation clears confirmed, not
// heard: believing a new epoch of p after it is a restart, as it would
// have been before (what p had in flight goes back to it).
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
// naming a number that is no longer taken.

// checkEpochs applies the epochs of frame h from p (see above), and
// reports whether the frame is for this incarnation from p's current one.
// A frame it refuses may be answered with a RESET.
func (t *Transport) checkEpochs(p *Peer, h header, payload []byte) bool {
	src, dst, typ := h.src(), h.dst(), h.typ()
	if src != p.epoch {
		switch {
		case p.epoch == 0:
			p.epoch, p.confirmed, p.dstOut = src, false, src
		case src == p.prevEpoch:
			t.stats.StaleEpoch++
			return false
		case dst != 0 && dst == t.challenge(p, src):
			t.believe(p, src, dst)
		case !p.confirmed && typ == typeReset && dst == p.srcOut && dst != t.epoch:
			// p answers a frame of our new incarnation toward it
			// (reincarnate, newPeer) at the epoch that frame claimed, a
			// number only frames to p's address carry: as good as the
			// challenge, so p's epoch is believed. When both sides
			// started one at once (both gave up), each claim is believed
			// so, where each side's RESET, itself a claim, was refused.
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
		p.confirmed, p.heard, p.dstHeard = true, true, dst
		return true
	case dst == 0:
		if !p.confirmed && p.dstIn == p.srcOut && typ != typeReset && t.aead == nil {
			return true
		}
		t.stats.ZeroEpoch++
		if typ == typeData {
			t.reset(p, h, p.dstOut, p.dstIn)
		}
		return false
	case typ == typeReset && dst == p.dstHeard:
		return true
	case !p.confirmed && typ == typeReset && dst == p.srcOut && dst != t.epoch:
		// p answers a frame of a new incarnation toward it (reincarnate,
		// newPeer), whose dstIn it does not know yet, at the epoch the
		// frame claimed: a number only frames to p's address carry.
		return true
	}
	t.stats.StaleEpoch++
	if typ != typeReset {
		t.reset(p, h, p.dstOut, p.dstIn)
	}
	return false
}

// challenge returns the destination epoch that a frame from p claiming
// the new epoch src must carry to be believed: the first four bytes of
// AES, under the transport's key, of p's address and src (never 0, nor
// this transport's epoch).
func (t *Transport) challenge(p *Peer, src uint32) uint32 {
	b := &t.prfBuf
	*b = [len(t.prfBuf)]byte{}
	copy(b[:6], p.mac)
	binary.BigEndian.PutUint32(b[6:], src)
	binary.BigEndian.PutUint32(b[10:], p.believed)
	t.prf.Encrypt(b[:], b[:])
	c := binary.BigEndian.Uint32(b[:])
	for c == 0 || c == p.srcOut {
		c++
	}
	return c
}

// believe takes src in as p's epoch: its frame named the challenge, which
// becomes dstIn. A confirmed epoch it replaces was a restart.
func (t *Transport) believe(p *Peer, src, challenge uint32) {
	old, restart := p.epoch, p.confirmed || p.heard
	p.epoch, p.dstOut, p.dstIn = src, src, challenge
	p.heard = false
	if t.aead != nil {
		p.believed++ // no replayed frame answers this challenge again (auth.go)
	}
	if !restart {
		// The epoch on record never showed it had heard this transport:
		// made up, or an incarnation that never got to. Nothing it sent
		// was acknowledged by the real peer, so the messages in flight
		// simply go on to the new epoch.
		t.forgetReceived(p)
		return
	}
	p.prevEpoch = old
	t.restarted(p)
}

// renew gives p a fresh dstIn, after frame h, which named the current one,
// turned out forged, and tells p in a RESET.
func (t *Transport) renew(p *Peer, h header) {
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
func (t *Transport) reset(p *Peer, h header, dst, want uint32) {
	now := t.now()
	if now.Sub(p.resetAt) < t.cfg.ScanInterval && (want != p.dstIn || want == p.resetWant) {
		return
	}
	p.resetAt, p.resetWant = now, want
	t.control(p, typeReset, h, dst, want)
	t.stats.ResetsSent++
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
	t.stats.Reincarnations++
	p.srcOut = t.freshEpoch(p.srcOut)
	t.fresh(p)
	t.startAgain(p, ErrUnreachable)
}

// fresh readies p's destination epochs for an incarnation toward p that p
// may not know of, whose srcOut is set: p must name a new dstIn (never
// srcOut, so that a frame naming 0, which a host that knows p's epoch
// could make, is refused and answered with a RESET that teaches it), and
// is not confirmed until it does.
func (t *Transport) fresh(p *Peer) {
	p.dstIn = t.freshEpoch(p.srcOut)
	p.dstHeard, p.confirmed = 0, false
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
	t.startAgain(p, ErrRestarted)
}

// startAgain starts both directions of p's channels again at sequence
// number 0 and returns each message in flight to p with why. The free
// channels start again first, then each busy one is freed, starts again
// and its message goes back; Returned runs with the channel free and at 0,
// and may call Send: a message it sends takes a free channel, numbered
// anew, and is not among those returned here (the busy ones were noted
// first).
func (t *Transport) startAgain(p *Peer, why error) {
	t.forgetReceived(p)
	var busy [MaxChannels]bool
	for i := range p.send {
		busy[i] = p.send[i].inUse
		if !busy[i] {
			p.send[i].seq = 0
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
