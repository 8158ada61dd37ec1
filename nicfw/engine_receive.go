package nicfw

import (
	"bytes"
	"crypto/cipher"
	"errors"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// The receive path, in the engine thread: the transport's Deliver
// callback (deliver) opens an envelope if there is one (auth.go), hands
// control messages to their modules, and offers every other message to
// its endpoint (accept): checked against the virtual network's tag, the
// bulk region or the receive pool (pool.go), the residency and the
// receive queue, and delivered, refused for now (a NACK) or returned with
// a reason (engine_return.go).

// deliver is the transport's Deliver callback.
func (e *Engine) deliver(src HostID, _ int, p []byte) (taken bool) {
	if len(e.down) > 0 {
		delete(e.down, src)
	}
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
	b := make([]byte, m.size())
	encodeMsg(b, &m)
	if aead != nil {
		b = bytes.Clone(e.seal(aead, src, b))
	}
	e.returns = append(e.returns, remoteReturn{e.tr.Peer(src), b})
	return true
}

// accept offers message p from host src to its endpoint. ok false refuses
// it for now (NACK); a reason means it must go back to its sender. Only if
// canReturn (there is room to queue the return) does accept give a reason;
// otherwise it refuses the message, which is offered again later.
func (e *Engine) accept(src HostID, p []byte, canReturn, authed bool) (ok bool, reason endpoint.Reason) {
	m, valid := decodeMsg(p)
	if !valid {
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
			if i, ok := s.rev[Name{src, m.src}]; ok {
				m.index = i
			}
		}
		return e.acceptReturn(s, &m), 0
	}
	var rx *bulkRx
	if m.class == endpoint.ClassBulk {
		rx, reason = e.bulkRecord(src, &m, s)
		if rx.failed {
			e.stats.ChunksDropped++
			return true, 0
		}
	}
	switch {
	case reason != 0:
	case rx != nil && rx.expired:
		reason = endpoint.ReasonIncomplete // its block was taken back (pool.go)
	case s == nil:
		reason = endpoint.ReasonNoEndpoint
	case s.closed:
		reason = endpoint.ReasonClosed
	case s.tag != m.tag && !e.cfg.Unprotected:
		reason = endpoint.ReasonBadTag
	case m.class == endpoint.ClassBulk && m.remote != endpoint.PoolOffset && uint64(m.remote)+uint64(m.length) > s.mem.StoreRegion():
		reason = endpoint.ReasonRange
	case m.kind == endpoint.RequestSend && !s.mem.AcceptsHandler(m.handler):
		reason = endpoint.ReasonNoHandler
	case m.class == endpoint.ClassBulk && m.remote == endpoint.PoolOffset && rx.put:
		e.stats.ChunksDropped++ // a chunk of a message stored whole already
		return true, 0
	case m.class == endpoint.ClassBulk && m.remote == endpoint.PoolOffset && !rx.pooled:
		var ok bool
		if ok, reason = e.poolAlloc(s, rx, m.length, src); !ok && reason == 0 {
			e.stats.PoolFull++
			return false, 0
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
	if !e.touch(s) {
		e.stats.NotResident++
		return false, 0
	}
	d := endpoint.Descriptor{Class: m.class, NArgs: m.nargs, Handler: m.handler, Dest: endpoint.NoIndex, Tag: m.tag, Args: m.args}
	if i, ok := s.rev[Name{src, m.src}]; ok {
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
		// The range was checked above, in 64 bits: remote+length is inside
		// the store region (so the staging area), and chunk+len(data) at
		// most length.
		at := m.remote
		if rx.pooled {
			at = s.pool.base(rx.block) // the pool lies inside the staging area (Pool)
		}
		copy(s.mem.Staging()[at+m.chunk:], m.data)
		if got := uint64(rx.got) + uint64(len(m.data)); got < uint64(m.length) {
			rx.got = uint32(got)
			e.stats.Chunks++
			return true, 0
		}
		// The last chunk to arrive: the message is complete. Refused
		// (queue full), it comes again and is stored again, which changes
		// nothing.
		d.Offset, d.Length = at, m.length
		if rx.pooled {
			d.RemoteOffset = endpoint.PoolOffset
			rx.block.q, rx.block.pos = q, s.mem.Produced(q)
		}
		if err = s.mem.Put(q, &d); err == nil && rx.pooled {
			rx.put = true
			s.pool.held = append(s.pool.held, rx.block)
			s.pool.arrived(rx)
		}
	default:
		err = s.mem.Put(q, &d)
	}
	switch {
	case err == nil:
	case errors.Is(err, endpoint.ErrQueueFull):
		e.stats.QueueFull++
		return false, 0
	default:
		// A corrupt consumer index: NACKing would keep the sender retrying
		// forever, so the message is dropped; the application hurt only
		// itself.
		e.stats.Dropped++
		return true, 0
	}
	if rx != nil {
		rx.got = m.length
	}
	e.stats.Delivered++
	return true, 0
}

// acceptReturn puts the return message m, for endpoint s, into s's reply
// receive queue; false refuses it for now (NACK).
func (e *Engine) acceptReturn(s *epState, m *msg) bool {
	// A return is never returned again.
	if s == nil || s.closed || s.tag != m.tag {
		e.stats.ReturnsLost++
		return true
	}
	if m.class == endpoint.ClassBulk && s.lastReturned == m.id && s.lastReturned != 0 {
		e.stats.ReturnsLost++ // returned by this engine already (unreachable, say)
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
		Class: m.class | endpoint.ClassReturned, NArgs: m.nargs, Handler: m.handler, Args: m.args,
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
		e.stats.Returned++
	case errors.Is(err, endpoint.ErrQueueFull):
		e.stats.QueueFull++
		return false
	default:
		e.stats.Dropped++
	}
	return true
}
