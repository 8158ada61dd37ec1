package nicfw

import (
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// Bulk messages in flight. A bulk message holds its endpoint's slot from
// the moment it is taken until its last chunk is acknowledged or it is
// returned and nothing of it is in flight any more. Its chunks leave as
// fast as the window allows (EngineConfig.Window, shared with the
// endpoint's short and medium messages still in flight), each on a
// transport channel of its own, so that they may arrive in any order; the
// receiver stores each at its offset and counts the bytes, and the chunk
// that completes the count puts the message's descriptor.
//
// All of a message's chunks must reach one incarnation of the receiving
// engine, or none may count: a receiver that restarted has lost what the
// earlier one stored. The transport delivers a chunk only to the
// incarnation its sender knows (epochs), so the sender watches that one:
// the incarnation of the message's destination (transport.Peer.Epoch, the
// first heard if it was not known when the message began) must stay the
// same, on the same host-table row, from the first chunk to the last
// acknowledgement, or the message is returned with ReasonRestarted
// (bulkSame). The receiver keeps a record of the message in progress per
// sending endpoint (bulkRecord); a chunk of it that comes for another
// endpoint than its first (the endpoint was closed and replaced meanwhile)
// is returned with ReasonIncomplete.

// bulkNext sets the state of s's slot, which holds a bulk message, after
// one of its chunks left or landed or the message was returned: the next
// chunk may leave (slotPending), or the slot waits for acknowledgements
// (slotInflight), or the message is done (finish). A slot whose return is
// queued (slotReturning) stays so: flushReturning empties it.
func (e *Engine) bulkNext(s *epState) {
	switch {
	case s.state == slotReturning:
	case s.abort || s.closed:
		if s.chunksOut == 0 {
			e.finish(s)
		} else {
			s.state = slotInflight
		}
	case s.started && s.chunksOut == 0 && s.sent >= s.d.Length:
		e.finish(s) // every chunk acknowledged
	case !s.started || s.sent < s.d.Length:
		s.state = slotPending // isPending applies the window
	default:
		s.state = slotInflight
	}
}

// abortBulk marks s's bulk message given up: no more of its chunks leave.
// SendGates that saw part of it leave hear that it is done.
func (e *Engine) abortBulk(s *epState) {
	if !s.abort && s.started && s.sent < s.d.Length && e.gated() && uint64(s.d.Dest) < uint64(len(s.table)) {
		e.gateSent(s.id, s.table[s.d.Dest].Host, 0)
	}
	s.abort = true
	e.setAdmit(s, admitNone, nil) // no more of its chunks need a channel
}

// bulkSame reports whether p, the host-table row a chunk of s's bulk
// message goes to or came back from, still holds the incarnation the
// message began with; at the first chunk it notes them.
func (s *epState) bulkSame(p *transport.Peer) bool {
	if !s.started {
		s.bulkPeer, s.bulkEpoch = p, p.Epoch()
		return true
	}
	if p != s.bulkPeer {
		return false
	}
	if s.bulkEpoch == 0 {
		s.bulkEpoch = p.Epoch() // first contact: the first incarnation heard
		return true
	}
	return p.Epoch() == s.bulkEpoch
}

// isCurrentChunk reports whether f, a bulk chunk's flight record, belongs
// to the message its endpoint's slot holds: not to one the slot gave up
// (the endpoint was closed, and its slot emptied).
func (e *Engine) isCurrentChunk(f *flight) bool {
	s := f.s
	return s.state != slotEmpty && s.d.Class == endpoint.ClassBulk && s.bulkID == f.id
}

// bulkRecord returns the record of the bulk message that chunk m, from
// host src for endpoint s (nil: none), belongs to: a new one for the first
// chunk of a message to arrive. A chunk of the recorded message for
// another endpoint than its first gets a record of its own and
// ReasonIncomplete: the endpoint its first chunks went to was closed and
// replaced by s. Messages are numbered per sending engine (bulkSeq), so
// an endpoint that took a closed one's id never continues its message; a
// sending host that restarted begins a new record (its epoch).
func (e *Engine) bulkRecord(src HostID, m *msg, s *epState) (*bulkRx, endpoint.Reason) {
	key := Name{src, m.src}
	rx := e.bulkRx[key]
	var epoch uint32 // this host's own messages: 0
	if p := e.tr.Peer(src); p != nil {
		epoch = p.Epoch()
	}
	switch {
	case rx == nil:
		rx = new(bulkRx)
		e.bulkRx[key] = rx
	case rx.epoch != epoch:
	case rx.id == m.id && (rx.failed || rx.dst == s):
		return rx, 0
	case rx.id == m.id:
		poolDrop(rx)
		*rx = bulkRx{id: m.id, dst: s, src: src, epoch: epoch}
		return rx, endpoint.ReasonIncomplete
	}
	poolDrop(rx) // a message its sender gave up on, if not complete
	*rx = bulkRx{id: m.id, dst: s, src: src, epoch: epoch}
	return rx, 0
}
