package nicfw

import (
	"crypto/cipher"
	"errors"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// A message whose fields disagree (a length that does not match, a medium
// message longer than MaxMedium or with c other than L, a chunk past its
// message's end) is dropped and counted. Refused descriptors are counted
// and dropped, not returned.

// The receive path, in the engine thread: the transport's Deliver
// callback (deliver) opens an envelope if there is one (auth.go), hands
// control messages to their modules, and offers every other message to
// its endpoint (accept): checked against the virtual network's tag, the
// bulk region or the receive pool (pool.go), the residency and the
// receive queue, and delivered, refused for now (a NACK) or returned with
// a reason (engine_return.go).

// deliver is the transport's Deliver callback. A request stored for an
// application that answers every request (View.SetAnswers) keeps its
// acknowledgement for the reply to carry; a reply keeps it a little while
// (Transport.AckSoon: its application's next request to that host
// carries it, in a ping-pong); every other message has it sent at the next
// Poll (Transport.AckNow, whatever the AckDelay).
func (e *Engine) deliver(src HostID, _ int, p []byte) bool {
	e.answering, e.replyIn = false, false
	e.inc = 0 // a host out of the table: unknown
	if p := e.tr.Peer(src); p != nil {
		e.inc = p.Incarnation()
	}
	if len(e.down) > 0 {
		delete(e.down, src)
	}
	taken, ok := false, false
	if len(p) > 1 && (p[0]&msgCompact != 0 || endpoint.Class(p[1]) == endpoint.ClassShort) {
		taken, ok = e.laneShort(src, p)
	}
	if !ok {
		taken = e.offer(src, p)
	}
	switch {
	case e.answering:
	case e.replyIn:
		e.tr.AckSoon()
	default:
		e.tr.AckNow()
	}
	return taken
}

// offer is deliver's general path, for a message that the compact lane
// did not take (accept), with its envelope opened and its return made;
// it returns whether the message is taken.
func (e *Engine) offer(src HostID, p []byte) (taken bool) {
	if len(p) > 0 && p[0] == msgControl {
		e.acceptControl(src, p)
		return true
	}
	// An envelope (auth.go) is opened with the key of the endpoint its
	// message names; the message is taken only if it opens.
	var aead cipher.AEAD
	var ctr uint64
	if len(p) > 0 && p[0] == msgAuth {
		inner, ok := envelope(p)
		m, valid := decodeMsg(inner)
		if !ok || !valid {
			e.stats.Dropped++
			return true
		}
		peer := e.tr.Peer(src)
		if s := e.ep(m.dst); s != nil && s.aead != nil {
			if ctr, ok = e.open(s.aead, src, peer, p); !ok {
				return true // forged, altered or replayed: counted
			}
			aead = s.aead
		}
		p = inner
		defer func() {
			if aead != nil && taken {
				e.noteOpened(src, peer, ctr)
			}
		}()
	}
	ok, reason := e.accept(src, p, len(e.returns) < e.cfg.ReturnQueue, aead != nil)
	if reason == 0 {
		return ok
	}
	// The return message: the message with the reason set, addressed back
	// to its sender, a medium message's bytes included, a bulk chunk's not;
	// in an envelope if the message came in one.
	m, _ := decodeMsg(p)
	m.reason = reason
	m.src, m.dst = m.dst, m.src
	if m.class == endpoint.ClassBulk {
		m.data = nil
	}
	e.countHostReturn(src, reason, true)
	b := make([]byte, m.size())
	encodeMsg(b, &m)
	e.returns = append(e.returns, remoteReturn{e.tr.Peer(src), b, aead})
	return true
}

// accept offers message p from host src to its endpoint. ok false refuses
// it for now (NACK); a reason means it must go back to its sender. Only if
// canReturn (there is room to queue the return) does accept give a reason;
// otherwise it refuses the message, which is offered again later.
func (e *Engine) accept(src HostID, p []byte, canReturn, authed bool) (ok bool, reason endpoint.Reason) {
	var m msg
	if !decodeMsgInto(p, &m) {
		e.stats.Dropped++
		return true, 0
	}
	s := e.ep(m.dst)
	if s != nil && s.aead != nil && !authed {
		e.stats.AuthFailed++ // an endpoint with a key takes envelopes only (auth.go)
		return true, 0
	}
	if m.reason != 0 {
		if m.index == endpoint.NoIndex && s != nil {
			// A compact message's return (engine_msg.go): its index is
			// that of the endpoint that returned it in s's table.
			if i, ok := s.index(Name{src, m.src}); ok {
				m.index = i
			}
		}
		return e.acceptReturn(src, s, &m), 0
	}
	var rx *bulkRx
	if m.class == endpoint.ClassBulk {
		rx, reason = e.bulkRecord(src, &m, s)
		if rx.failed {
			e.stats.ChunksDropped++
			return true, 0
		}
	}
	if reason == 0 {
		reason = e.refusal(s, &m, rx)
	}
	if reason == 0 && m.class == endpoint.ClassBulk && m.remote == endpoint.PoolOffset {
		// A message for the receive pool (pool.go): its first chunk to
		// arrive finds it a block.
		if rx.put {
			e.stats.ChunksDropped++ // a chunk of a message stored whole already
			return true, 0
		}
		if !rx.pooled {
			if ok, reason = e.poolAlloc(s, rx, m.length, src); !ok && reason == 0 {
				e.stats.PoolFull++
				return false, 0
			}
		}
	}
	if reason != 0 {
		if !canReturn {
			e.stats.ReturnsFull++
			return false, 0
		}
		if rx != nil {
			rx.failed = true // returned once; the rest of it is dropped
			poolDrop(rx)
		}
		return true, reason
	}
	return e.store(src, s, &m, rx), 0
}

// refusal returns why message m, not a return, may not go to endpoint s
// (nil: there is none), or 0 if it may: the checks of the endpoint, its
// virtual network's tag, a bulk message's range in the store region and a
// request's handler, in that order; the first that fails gives the
// reason. rx is a bulk message's record (nil for the others).
func (e *Engine) refusal(s *epState, m *msg, rx *bulkRx) endpoint.Reason {
	switch {
	case rx != nil && rx.expired:
		return endpoint.ReasonIncomplete // its block was taken back (pool.go)
	case s == nil:
		return endpoint.ReasonNoEndpoint
	case s.closed:
		return endpoint.ReasonClosed
	case s.tag != m.tag && !e.cfg.Unprotected:
		return endpoint.ReasonBadTag
	case m.class == endpoint.ClassBulk && m.remote != endpoint.PoolOffset && uint64(m.remote)+uint64(m.length) > s.mem.StoreRegion():
		return endpoint.ReasonRange
	case m.kind == endpoint.RequestSend && !s.mem.AcceptsHandler(m.handler):
		return endpoint.ReasonNoHandler
	}
	return 0
}

// store puts message m from host src, checked (accept), into its receive
// queue at endpoint s: a short message's descriptor, a medium message's
// with its bytes, a bulk chunk's bytes into the staging area and, with its
// last chunk, the message's descriptor. false refuses it for now (NACK).
func (e *Engine) store(src HostID, s *epState, m *msg, rx *bulkRx) bool {
	if !e.touch(s) {
		e.stats.NotResident++
		return false
	}
	d := endpoint.Descriptor{Class: m.class, NArgs: m.nargs, Incarnation: e.inc, Handler: m.handler, Dest: endpoint.NoIndex, Tag: m.tag, Args: m.args}
	if i, ok := s.index(Name{src, m.src}); ok {
		d.Dest = i
	}
	q := endpoint.RequestReceive
	if m.kind == endpoint.ReplySend {
		q = endpoint.ReplyReceive
	}
	var err error
	switch m.class {
	case endpoint.ClassMedium:
		err = s.mem.PutData(q, &d, m.data)
	case endpoint.ClassBulk:
		var whole bool
		if whole, err = e.storeChunk(s, m, rx, q, &d); !whole {
			return true
		}
	default:
		err = s.mem.Put(q, &d)
	}
	if put, taken := e.putOutcome(err); !put {
		return taken
	}
	if rx != nil {
		rx.got, rx.done = m.length, true
	}
	e.countStored(s, m.kind, m.class, m.length)
	return true
}

// putOutcome says what became of a message whose receive queue entry Put
// returned err: put, or not put and taken (dropped) or refused for now.
func (e *Engine) putOutcome(err error) (put, taken bool) {
	switch {
	case err == nil:
		return true, true
	case errors.Is(err, endpoint.ErrQueueFull):
		e.stats.QueueFull++
		return false, false
	default:
		// A corrupt consumer index: NACKing would keep the sender retrying
		// forever, so the message is dropped; the application hurt only
		// itself.
		e.stats.Dropped++
		return false, true
	}
}

// countStored counts a message of kind and class, length bytes, put into
// a receive queue of s, and notes how its acknowledgement is to go
// (deliver).
func (e *Engine) countStored(s *epState, kind endpoint.Queue, class endpoint.Class, length uint32) {
	e.stats.Delivered++
	if kind == endpoint.RequestSend && class != endpoint.ClassBulk && s.mem.Answers() {
		e.answering = true
	}
	e.replyIn = kind == endpoint.ReplySend && class != endpoint.ClassBulk
	s.counts.Received++
	s.counts.ReceivedBytes += uint64(dataBytes(class, length))
}

// storeChunk copies bulk chunk m into s's staging area, where its message
// goes (rx: its record): at the offset the sender chose, or in its block
// of the receive pool. whole false: more of the message is to come (the
// chunk is counted); true: it was the last to arrive, and the message's
// descriptor d is put into queue q, with err the outcome.
func (e *Engine) storeChunk(s *epState, m *msg, rx *bulkRx, q endpoint.Queue, d *endpoint.Descriptor) (whole bool, err error) {
	// The range was checked by refusal, in 64 bits: remote+length is
	// inside the store region (so the staging area), and chunk+len(data)
	// at most length.
	at := m.remote
	if rx.pooled {
		at = s.pool.base(rx.block) // the pool lies inside the staging area (Pool)
	}
	copy(s.mem.Staging()[at+m.chunk:], m.data)
	if got := uint64(rx.got) + uint64(len(m.data)); got < uint64(m.length) {
		rx.got = uint32(got)
		e.stats.Chunks++
		return false, nil
	}
	// The last chunk to arrive: the message is complete. Refused (queue
	// full), it comes again and is stored again, which changes nothing.
	d.Offset, d.Length = at, m.length
	if rx.pooled {
		d.RemoteOffset = endpoint.PoolOffset
		rx.block.q, rx.block.pos = q, s.mem.Produced(q)
	}
	if err = s.mem.Put(q, d); err == nil && rx.pooled {
		rx.put = true
		s.pool.held = append(s.pool.held, rx.block)
		s.pool.arrived(rx)
	}
	return true, err
}

// acceptReturn puts the return message m from host src, for endpoint s,
// into s's reply receive queue; false refuses it for now (NACK).
func (e *Engine) acceptReturn(src HostID, s *epState, m *msg) bool {
	// A return is never returned again.
	if s == nil || s.closed || s.tag != m.tag {
		e.stats.ReturnsLost++
		return true
	}
	if m.class == endpoint.ClassBulk && s.lastReturned == m.id && s.lastReturned != 0 {
		e.stats.ReturnsLost++ // returned by this engine already (unreachable, say)
		return true
	}
	if i := s.tailOf(m.id); m.class == endpoint.ClassBulk && i >= 0 && s.tails[i].returned {
		e.stats.ReturnsLost++ // returned by this engine already
		return true
	}
	if !e.touch(s) {
		e.stats.NotResident++
		return false
	}
	if m.class == endpoint.ClassBulk && s.d.Class == endpoint.ClassBulk && s.bulkID == m.id {
		// The receiver refused one of its chunks: send no more of them,
		// and do not return it a second time.
		switch s.state {
		case slotPending, slotInflight:
			e.abortBulk(s)
			e.bulkNext(s)
		}
	}
	d := endpoint.Descriptor{
		Class: m.class | endpoint.ClassReturned, NArgs: m.nargs, Incarnation: e.inc, Handler: m.handler, Args: m.args,
		Dest: m.index, Tag: uint64(m.reason) | uint64(m.kind)<<8,
	}
	var err error
	if m.class == endpoint.ClassMedium {
		err = s.mem.PutData(endpoint.ReplyReceive, &d, m.data)
	} else {
		d.Offset, d.Length, d.RemoteOffset = m.offset, m.length, m.remote
		err = s.mem.Put(endpoint.ReplyReceive, &d)
	}
	switch {
	case err == nil:
		if i := s.tailOf(m.id); m.class == endpoint.ClassBulk && i >= 0 {
			s.tails[i].returned = true // its receiver returned it: not a second time from here
		}
		e.stats.Returned++
		s.countReturn(m.reason)
		if src != e.cfg.Host {
			e.countHostReturn(src, m.reason, false)
		}
	case errors.Is(err, endpoint.ErrQueueFull):
		e.stats.QueueFull++
		return false
	default:
		e.stats.Dropped++
	}
	return true
}

// index is the index of sender n in s's translation table (rev), through
// the one-entry cache of the last sender asked about.
func (s *epState) index(n Name) (uint32, bool) {
	if n != s.revLast {
		s.revIdx, s.revOK = s.rev[n]
		s.revLast = n
	}
	return s.revIdx, s.revOK
}
