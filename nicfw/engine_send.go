package nicfw

import (
	"errors"

	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// Each endpoint has one slot: the message taken from its send queues
// (replies first) and not sent yet. A message that leaves for a remote
// host frees the slot for the next, and up to EngineConfig.Window of an
// endpoint's messages are in flight at once to each destination endpoint
// (window.go), on as many channels, each kept with its descriptor (a
// flight record, as every message in flight has) so that it can still be
// returned, a medium message with the bytes the transport kept. With a
// window of 1 its messages to one destination arrive in the order sent;
// above 1 they are in order per channel only, as in AM-II: a lost
// message, sent again, arrives after those that left after it. A message
// whose destination's window is full waits in the queue, and those behind
// it with it, unless its destination's host is stalled: then a short or
// medium one steps aside (aside.go). A bulk message holds the slot until
// its last chunk has left, and its chunks share the window (bulk.go). The
// scheduler is asked only about endpoints whose next message could leave
// now (a free channel, a frame to pin), so a blocked endpoint is not
// charged a send. The sender is touched in the Residency before its
// message is taken, held while the message is in flight and released on
// its ACK (the transport's Acked callback) or its return; one frame is
// always left unpinned, so a delivery to a non-resident endpoint can load
// it (R is at least 2), and with several owners each pins at most its
// share of the frames, leaving one that every other owner with an
// endpoint open may pin (mayPin): one user's messages held up by a slow
// receiver cannot keep another user's from leaving.
// Deliveries touch the destination too; its receive queue full means a
// NACK.

// The send path, in the engine thread (Poll's send phase):
//
//  1. The scheduler asks isPending about each resident endpoint: whether
//     its next message (or bulk chunk) could leave now (canSend: a free
//     channel, a frame to pin, the window, admission, modules' gates).
//  2. sendFrom takes the next descriptor (take, begin; replies first),
//     builds the engine message (message), seals it when the virtual
//     network has a key (auth.go) and hands it to the transport, keeping
//     a flight record (newFlight) so that it can still be returned.
//  3. ack and land, the transport's Acked callback, free the record and
//     the residency hold; a bulk message moves on to its next chunk
//     (bulk.go) or finishes.

// isPending is the scheduler's view of an endpoint.
func (e *Engine) isPending(ep int) bool {
	s := e.ep(EndpointID(ep))
	if s == nil || s.closed || s.blocked == e.polls {
		return false
	}
	switch s.state {
	case slotPending:
		if s.d.Class == endpoint.ClassBulk {
			if !e.windowOpen(s, s.d.Dest, true) {
				return false // the window is full of its chunks
			}
		} else if !e.windowOpen(s, s.d.Dest, false) {
			return false // taken (not stepped aside: aside.go) when it could not leave
		}
		return e.canSend(s, s.d.Dest)
	case slotEmpty:
		if len(s.aside) > 0 {
			if i := e.asideReady(s); i >= 0 && e.canSend(s, s.aside[i].d.Dest) {
				return true
			}
		}
		dest, class, ok := e.peek(s)
		if !ok {
			return false
		}
		if class == endpoint.ClassCommand {
			return e.windowOpen(s, dest, false) && e.canSend(s, dest) // as before: not a message
		}
		if e.mustWait(s, dest) {
			// The window to that destination is full, or ordered and not
			// empty, or its messages are aside: wait for acknowledgements,
			// or step aside (aside.go).
			return e.mayAside(s, dest, class)
		}
		return e.canSend(s, dest)
	}
	return false
}

// held reports whether s has a message in flight, pinning its frame.
func (s *epState) held() bool { return s.flying > 0 }

// canSend reports whether a message of s to index dest could leave now. The
// scheduler is asked only about endpoints that can make progress: one it
// chose in vain would be charged a send and the round robin would move past
// it, so that under ErrBusy the endpoint after the last one tried would win
// every time.
func (e *Engine) canSend(s *epState, dest uint32) bool {
	if uint64(dest) >= uint64(len(s.table)) {
		return true // Take refuses it
	}
	h := s.table[dest].Host
	if h == e.cfg.Host {
		return true
	}
	if e.markedDown(h) {
		return true // returned at once (or the mark expires and it is sent)
	}
	if e.gated() && s.state == slotPending && s.d.Class == endpoint.ClassBulk &&
		!e.gateOpen(s.id, h, int(s.d.Length), int(s.d.Length-s.sent)) {
		return false // a module holds it back (sendFrom asks about the others, once built)
	}
	p := e.tr.Peer(h)
	if p != nil && p.Busy() {
		return false // ErrBusy
	}
	if s.state == slotPending && e.admitWaits(s, p) {
		return false // a pooled message waits for its admission (pool.go)
	}
	return s.held() || e.mayPin(s)
}

// mayPin reports whether s, which has no message in flight, may pin its
// frame with one. One frame stays unpinned, so that a delivery to a
// non-resident endpoint can always load it: otherwise two hosts whose
// frames are all pinned by messages to each other would NACK each other
// forever. An owner pins at most its share of the frames while other
// owners have work (Residency.Share), and never the frame that each other
// owner with an endpoint open may always pin, so that one user's messages
// waiting on a slow receiver (a full pool, a host that went away) cannot
// pin every frame, before or after another user starts, and hold that
// user's endpoints back from sending.
func (e *Engine) mayPin(s *epState) bool {
	// With one owner, every frame but the one for deliveries (kept
	// inlinable: the send path asks for each message).
	return e.pinned < e.res.Frames()-1 && (e.owned <= 1 || e.withinShare(s))
}

// withinShare reports whether s's owner pins less than its share of the
// frames (mayPin), among several owners.
func (e *Engine) withinShare(s *epState) bool {
	limit := min(e.res.Share(s.owner.id), e.res.Frames()-e.owned)
	return s.owner.pinned < max(limit, 1)
}

// peek returns the destination index and class of the descriptor that
// take would take next from s, without taking it: the head of the reply
// send queue, else of the request send queue. Both are untrusted; Take
// checks them. A corrupt ring peeks as pending, so that Take gets to
// count it.
func (e *Engine) peek(s *epState) (uint32, endpoint.Class, bool) {
	if dest, class, ok := s.mem.PeekHead(endpoint.ReplySend); ok {
		return dest, class, true
	}
	return s.mem.PeekHead(endpoint.RequestSend)
}

// sendPhase makes up to SendBudget scheduling decisions. Past fullFrames
// of them (if set) it stops where the frame being packed is full
// (transport.PassFull): what is left waits for the next Poll, and a stream
// of one-cell messages leaves 56 per Poll in two full frames of 28 cells,
// not 64 in three, the last of 8.
func (e *Engine) sendPhase() (int, error) {
	if e.sched.quiescent() {
		return 0, nil
	}
	work := 0
	for n := range e.cfg.SendBudget {
		if e.fullFrames > 0 && n >= e.fullFrames && e.tr.PassFull() {
			break
		}
		id, ok := e.sched.Next(e.pending)
		if !ok {
			break
		}
		s := e.eps[id] // the scheduler holds open endpoints only
		progressed, err := e.sendFrom(s)
		if err != nil {
			return work, err
		}
		if progressed {
			work++
		} else {
			s.blocked = e.polls
		}
	}
	return work, nil
}

// sendFrom moves endpoint s's next message (or bulk chunk) on; it reports
// whether it did.
func (e *Engine) sendFrom(s *epState) (bool, error) {
	e.res.Touch(int(s.id)) // resident (scheduled): marks it used, never faults
	if s.state == slotEmpty {
		if ok, stepped := e.fill(s); !ok || stepped {
			return stepped, nil
		}
	}
	if s.d.Class == endpoint.ClassCommand {
		e.command(s)
		return true, nil
	}
	if s.d.Flags&endpoint.CutThrough != 0 && !e.cutThroughReady(s) {
		return false, nil // cut-through: the application is writing the next bytes
	}
	m, reason := e.message(s)
	if reason != 0 {
		e.returnLocal(s, reason)
		return true, nil
	}
	dst := s.table[s.d.Dest] // Take checked Dest against the table's size
	if m == nil && (dst.Host == e.cfg.Host || e.mods != nil || s.aead != nil) {
		m = e.chunkBytes() // a bulk chunk, needed whole before it goes
	}
	if dst.Host == e.cfg.Host {
		e.inc = 1                                         // incarnation: this host's
		ok, reason := e.accept(e.cfg.Host, m, true, true) // this host's own: no envelope
		switch {
		case reason != 0:
			e.returnLocal(s, reason)
		case !ok:
			return false, nil
		default:
			e.stats.Sent++
			s.countLeft()
			s.sends++
			e.advance(s)
		}
		return true, nil
	}
	if len(e.down) > 0 {
		if until, ok := e.down[dst.Host]; ok {
			if e.clk.Now().Before(until) {
				e.countHostReturn(dst.Host, endpoint.ReasonUnreachable, false)
				e.returnLocal(s, endpoint.ReasonUnreachable)
				return true, nil
			}
			delete(e.down, dst.Host)
		}
	}
	if !s.held() && !e.mayPin(s) {
		return false, nil
	}
	if e.mods != nil && !e.gateAllows(s, m, dst.Host) {
		return false, nil // held back: the slot keeps the message
	}
	p := e.tr.Peer(dst.Host)
	if e.admitWaits(s, p) {
		return false, nil // a pooled message waits for its admission (pool.go)
	}
	if s.d.Class == endpoint.ClassBulk && !s.bulkSame(p) {
		e.countHostReturn(dst.Host, endpoint.ReasonRestarted, false)
		e.returnLocal(s, endpoint.ReasonRestarted) // its receiver restarted: what it stored is gone
		return true, nil
	}
	if s.aead != nil {
		m = e.seal(s.aead, dst.Host, m) // auth.go
	}
	cookie := e.newFlight(s, p, dst.Endpoint)
	var err error
	if m == nil {
		err = e.tr.SendToFill(p, e.chunkMsg.size(), (*chunkFill)(e), cookie)
		e.chunkMsg.data = nil
	} else {
		err = e.tr.SendTo(p, m, cookie)
	}
	if err != nil {
		e.freeFlight(cookie)
	}
	switch {
	case err == nil:
	case errors.Is(err, transport.ErrBusy):
		e.stats.Busy++
		return false, nil
	case errors.Is(err, transport.ErrUnknownHost):
		e.returnLocal(s, endpoint.ReasonNoHost)
		return true, nil
	case errors.Is(err, transport.ErrTooLarge):
		e.returnLocal(s, endpoint.ReasonTooLarge) // message checked against MaxPayload: not reached
		return true, nil
	default:
		return false, err
	}
	e.stats.Sent++
	s.countLeft()
	s.sends++
	if e.mods != nil {
		e.gateLeft(s, dst.Host)
	}
	e.hold(s, p, dst.Endpoint)
	if s.d.Class == endpoint.ClassBulk {
		if s.pooledBulk() && s.admit == admitNone {
			e.setAdmit(s, admitProbing, p) // its first chunk travels alone
		}
		s.chunksOut++
		s.sent += s.chunk
		s.started = true
		e.bulkNext(s)
	} else {
		e.vacate(s) // the message left: the slot takes the next
	}
	return true, nil
}

// hold counts a message of s that left for endpoint to at p as in flight:
// the residency holds s's frame (touched when the message was taken, and
// nothing evicts in between), the engine's frames pinned, the window.
func (e *Engine) hold(s *epState, p *transport.Peer, to EndpointID) {
	if err := e.res.Hold(int(s.id)); err != nil {
		panic(err)
	}
	if !s.held() {
		e.pinned++
		s.owner.pinned++
	}
	s.flew(p, to)
}

// markedDown reports whether host h is marked down (returns go at once).
func (e *Engine) markedDown(h HostID) bool {
	if len(e.down) == 0 {
		return false
	}
	_, down := e.down[h]
	return down
}

// fill puts the next message of s into its empty slot: the oldest of its
// messages aside that may leave now, else the head of its send queues
// (take). ok false: it has none to send now; stepped: the one taken
// stepped aside instead (aside.go), and the slot is empty again.
func (e *Engine) fill(s *epState) (ok, stepped bool) {
	if i := e.asideReady(s); i >= 0 {
		e.unAside(s, i)
		return true, false
	}
	if !e.take(s) {
		return false, false
	}
	if s.d.Class == endpoint.ClassBulk || s.d.Class == endpoint.ClassCommand || !e.mustWait(s, s.d.Dest) {
		return true, false
	}
	if e.mayAside(s, s.d.Dest, s.d.Class) || e.asideHas(s, s.d.Dest) {
		e.stepAside(s) // (past maxAside only if isPending disagreed: never ahead of its own)
		return true, true
	}
	return false, false // it waits in the slot for its window
}

// cutThroughReady reports whether the next chunk of s's cut-through
// message may leave: a whole chunk (or the rest of the message) is
// published, or some bytes are and the application published nothing
// more since the engine last looked (it writes slowly: send what there
// is). A fast writer's message thus leaves in whole chunks, a slow one's
// as it is written, and never a byte that is not published.
func (e *Engine) cutThroughReady(s *epState) bool {
	last := s.published
	pub := s.mem.Published(&s.d)
	s.published = pub // what message sends from
	if pub <= s.sent {
		return false
	}
	return pub-s.sent >= min(e.chunkSize(s), s.d.Length-s.sent) || pub == last
}

// newFlight records the message in s's slot as in flight to p and returns
// its cookie; the record is reused once the message is acknowledged or
// returned (freeFlight).
func (e *Engine) newFlight(s *epState, p *transport.Peer, to EndpointID) uint64 {
	f, cookie := e.flightSlot()
	*f = flight{s: s, d: s.d, q: s.q, peer: p, to: to, chunk: s.d.Class == endpoint.ClassBulk, id: s.bulkID}
	return cookie
}

// flightSlot returns a free flight record, to be filled, and its cookie.
func (e *Engine) flightSlot() (*flight, uint64) {
	var i uint32
	if n := len(e.freeFl); n > 0 {
		i, e.freeFl = e.freeFl[n-1], e.freeFl[:n-1]
	} else {
		i = uint32(len(e.flights))
		e.flights = append(e.flights, flight{})
	}
	return &e.flights[i], uint64(i) + 1
}

// flightOf returns the record of the message sent with cookie, or nil for
// a return message (cookie 0) or a cookie that names no message in flight.
func (e *Engine) flightOf(cookie uint64) *flight {
	if cookie == 0 || cookie > uint64(len(e.flights)) {
		return nil
	}
	if f := &e.flights[cookie-1]; f.s != nil {
		return f
	}
	return nil
}

// freeFlight frees the record of cookie.
func (e *Engine) freeFlight(cookie uint64) {
	f := &e.flights[cookie-1]
	f.s, f.peer = nil, nil // free; the rest is overwritten when it is reused
	e.freeFl = append(e.freeFl, uint32(cookie-1))
}

// take takes s's next valid descriptor, replies before requests, into its
// slot. Refused descriptors are counted by Take and dropped.
func (e *Engine) take(s *epState) bool {
	for _, q := range [...]endpoint.Queue{endpoint.ReplySend, endpoint.RequestSend} {
		ok, err := s.mem.Next(q, &s.d)
		if ok && err == nil {
			// The entry goes back once begin has copied what the
			// application may reuse from then on.
			e.begin(s, q)
			s.mem.Commit(q)
			return true
		}
		if err != nil && !errors.Is(err, endpoint.RefusedRing) && errors.Is(err, endpoint.ErrRefused) {
			// Refused (counted, dropped): the next descriptor waits for
			// the next decision, which peeks at it first (isPending).
			return false
		}
	}
	return false
}

// begin puts the message just taken from send queue q into s's slot. A
// medium message is built at once, copying its bytes out of the staging
// area: from now on the application may change them.
func (e *Engine) begin(s *epState, q endpoint.Queue) {
	occupy(s, q)
	d := &s.d
	switch d.Class {
	case endpoint.ClassMedium:
		if s.out == nil {
			s.out = make([]byte, msgMediumMax)
		}
		m := e.header(s)
		m.offset, m.length = d.Offset, d.Length
		m.data = s.mem.Staging()[d.Offset : d.Offset+d.Length] // Take checked the range
		s.outLen = encodeMsg(s.out, &m)
	case endpoint.ClassBulk:
		if e.bulkSeq++; e.bulkSeq == 0 {
			e.bulkSeq++ // 0 is no message (lastReturned)
		}
		s.bulkID = e.bulkSeq
	}
}

// occupy marks s's slot as holding the message in s.d, from send queue q,
// not yet sent, its progress reset.
func occupy(s *epState, q endpoint.Queue) {
	s.q, s.state, s.express = q, slotPending, false
	s.abort, s.started, s.sent, s.chunk, s.chunksOut, s.bulkPeer, s.published = false, false, 0, 0, 0, nil, 0
}

// vacate empties s's slot: the engine is done with its message, counted
// if it came from the request send queue (endpoint.Memory.CountDone), and
// not by the express path (which has no place in the queue to count).
func (e *Engine) vacate(s *epState) {
	e.setAdmit(s, admitNone, nil)
	if s.state != slotEmpty && s.q == endpoint.RequestSend && !s.express {
		s.mem.CountDone()
	}
	s.state = slotEmpty
}

// header returns the message header of the message in s's slot.
func (e *Engine) header(s *epState) msg {
	d := &s.d
	return msg{
		kind: s.q, class: d.Class, nargs: d.NArgs, dst: s.table[d.Dest].Endpoint, src: s.id,
		handler: d.Handler, index: d.Dest, tag: s.tag, args: d.Args,
	}
}

// message returns the engine message to send for s's slot: a short message
// built in e.buf, a medium message as begin built it; for the next chunk
// of a bulk message nil, and the chunk is in e.chunkMsg, its data in the
// staging area (of a cut-through message, the bytes its application has
// published so far), to be built where it goes: into the transport's
// buffer (chunkFill), so that its bytes are copied once, or into e.buf
// (chunkBytes) where the message is needed whole first. A message larger than
// the transport carries is to be returned with ReasonTooLarge.
func (e *Engine) message(s *epState) ([]byte, endpoint.Reason) {
	d := &s.d
	switch d.Class {
	case endpoint.ClassMedium:
		if s.outLen > e.room(s) {
			return nil, endpoint.ReasonTooLarge
		}
		return s.out[:s.outLen], 0
	case endpoint.ClassBulk:
		room := e.chunkSize(s)
		if room == 0 {
			return nil, endpoint.ReasonTooLarge
		}
		s.chunk = min(room, d.Length-s.sent)
		if d.Flags&endpoint.CutThrough != 0 {
			s.chunk = min(room, s.published-s.sent) // cutThroughReady read it: not 0
		}
		m := e.header(s)
		m.offset, m.length, m.remote, m.id, m.chunk = d.Offset, d.Length, d.RemoteOffset, s.bulkID, s.sent
		from := d.Offset + s.sent // Take checked Offset+Length against the staging area
		m.data = s.mem.Staging()[from : from+s.chunk]
		e.chunkMsg = m
		return nil, 0 // built where it goes (chunkBytes, chunkFill)
	}
	if compactable(s.q, d.NArgs, d.Handler) {
		// The compact form (msg.compact), written from the descriptor:
		// the common short message, with no msg built for it.
		return e.buf[:putCompactMsg(e.buf, s.q, s.table[d.Dest].Endpoint, s.id, d.Handler, s.tag, d.Args[:d.NArgs])], 0
	}
	m := e.header(s)
	return e.buf[:encodeMsg(e.buf, &m)], 0
}

// chunkBytes builds the bulk chunk in e.chunkMsg in e.buf.
func (e *Engine) chunkBytes() []byte {
	return e.buf[:encodeMsg(e.buf, &e.chunkMsg)]
}

// chunkFill builds the bulk chunk in e.chunkMsg in the transport's buffer
// (transport.Filler).
type chunkFill Engine

func (c *chunkFill) Fill(b []byte) { encodeMsg(b, &c.chunkMsg) }

// room returns the largest message s may send: the transport's largest
// payload, less an envelope's bytes with a key.
func (e *Engine) room(s *epState) int {
	if s.aead != nil {
		return e.maxPL - authOverhead
	}
	return e.maxPL
}

// chunkSize returns how many data bytes each chunk of s's bulk message
// carries (0: none fits): as many as fill whole frames of the link
// (transport.FrameRoom), so that no chunk leaves a frame nearly empty
// behind it, or the largest payload where that is less than one frame.
func (e *Engine) chunkSize(s *epState) uint32 {
	return e.bulkRoom(e.room(s), s.d.NArgs)
}

// bulkRoom returns the data bytes of a bulk chunk with nargs arguments
// whose message may take room bytes of the transport's payload.
func (e *Engine) bulkRoom(room int, nargs uint8) uint32 {
	if fr := e.frameRoom; fr > 0 && e.maxPL >= fr {
		room -= e.maxPL - e.maxPL/fr*fr // whole frames only
	}
	return chunkRoom(room, nargs)
}

// advance moves s on after its message (or bulk chunk) was delivered on
// this host: to the next chunk, or done.
func (e *Engine) advance(s *epState) {
	if s.d.Class == endpoint.ClassBulk && !s.abort && !s.closed {
		s.sent += s.chunk
		s.started = true
		if s.sent < s.d.Length {
			s.state = slotPending
			return
		}
	}
	e.finish(s)
}

// finish empties s's slot; a closed endpoint's memory is closed then.
func (e *Engine) finish(s *epState) {
	e.vacate(s)
	if s.closed && s.flying == 0 {
		if err := e.release(s); err != nil && e.closeErr == nil {
			e.closeErr = err
		}
	}
}

// ack is the transport's Acked callback: the message sent with cookie
// was delivered. Its sender is released; a bulk chunk moves its message on
// to the next chunk.
func (e *Engine) ack(dst HostID, cookie uint64) {
	if cookie&controlCookie != 0 {
		e.controlDone(dst, true)
		return
	}
	f := e.flightOf(cookie)
	if f == nil {
		return // a return message
	}
	s, chunk, p, to := f.s, f.chunk && e.isCurrentChunk(f), f.peer, f.to
	tail := -1
	if f.chunk && !chunk {
		tail = s.tailOf(f.id)
	}
	e.freeFlight(cookie)
	e.stats.Acked++
	e.acked++
	if tail >= 0 {
		e.tailLanded(s, tail, p, 0)
		e.land(s, p, to)
		return
	}
	if chunk {
		s.chunksOut--
		if s.admit == admitProbing {
			e.setAdmit(s, admitted, p) // the receiver found it a block
		}
	}
	e.land(s, p, to)
	if chunk {
		if !s.bulkSame(p) {
			e.returnLocal(s, endpoint.ReasonRestarted) // acknowledged by another incarnation than the first chunks
			return
		}
		e.bulkNext(s)
	}
}

// land releases the residency hold of a message of s to endpoint to at p
// that left flight (acknowledged or returned). The memory of a closed
// endpoint goes when its last message in flight does and its slot is
// empty.
func (e *Engine) land(s *epState, p *transport.Peer, to EndpointID) {
	if err := e.res.Release(int(s.id)); err != nil {
		panic(err) // pinned endpoints are never evicted
	}
	if s.landed(p, to) {
		e.pinned--
		if s.owner.pinned--; s.owner.pinned == 0 {
			e.forgetOwner(s.owner)
		}
		if s.closed && s.state == slotEmpty {
			if err := e.release(s); err != nil && e.closeErr == nil {
				e.closeErr = err
			}
		}
	}
}
