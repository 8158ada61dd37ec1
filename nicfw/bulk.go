package nicfw

import (
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// Bulk messages in flight. A bulk message holds its endpoint's slot from
// the moment it is taken until its last chunk has left (then it waits
// for its acknowledgements among the endpoint's tails, below), or until it
// is returned and nothing of it is in flight any more. Its chunks leave as
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

//
// Consecutive bulk messages of one endpoint do not wait a round trip for
// each other: once every chunk of a message has left, the message leaves
// the slot for the endpoint's tails (bulkTail), which wait for its
// acknowledgements, and the slot takes the next message. At most
// BulkAhead messages of an endpoint are in flight at once, the slot's
// included, and a receiver keeps a record for as many per sending
// endpoint (bulkRecord), so that their chunks may arrive interleaved. A
// message of a pooled endpoint, or of an engine whose modules gate what
// leaves, keeps the slot until it is acknowledged.

// BulkAhead is the most bulk messages of one endpoint in flight at once:
// the one in its slot and those whose chunks have all left (tails). A
// receiver keeps the records of as many messages per sending endpoint.
const BulkAhead = 4

// bulkTail is a bulk message whose chunks have all left its endpoint's
// slot, some of them not acknowledged yet: what returning it takes, the
// host-table row and incarnation its chunks must reach (as bulkSame), and
// whether it was returned already.
type bulkTail struct {
	id        uint32
	d         endpoint.Descriptor
	q         endpoint.Queue
	chunksOut int
	peer      *transport.Peer
	epoch     uint32
	returned  bool
}

// same is bulkSame for a tail.
func (t *bulkTail) same(p *transport.Peer) bool {
	if p != t.peer {
		return false
	}
	if t.epoch == 0 {
		t.epoch = p.Epoch()
		return true
	}
	return p.Epoch() == t.epoch
}

// tailOf returns the index of s's tail with message number id, or -1.
func (s *epState) tailOf(id uint32) int {
	for i := range s.tails {
		if s.tails[i].id == id {
			return i
		}
	}
	return -1
}

// mayDetach reports whether s's bulk message, every chunk of it gone,
// may leave the slot for the tails.
func (e *Engine) mayDetach(s *epState) bool {
	return len(s.tails) < BulkAhead-1 && !s.pooledBulk() && !e.gated()
}

// detach moves s's bulk message, every chunk of it gone and some in
// flight, from the slot to the tails, and empties the slot.
func (e *Engine) detach(s *epState) {
	s.tails = append(s.tails, bulkTail{id: s.bulkID, d: s.d, q: s.q, chunksOut: s.chunksOut, peer: s.bulkPeer, epoch: s.bulkEpoch})
	s.chunksOut = 0
	e.finish(s)
}

// tailLanded settles the landing of a chunk of s's tail i, sent to p:
// acknowledged (reason 0) or returned with reason. A chunk that another
// incarnation acknowledged, or a chunk returned, returns the message
// once; the tail goes when its last chunk has landed.
func (e *Engine) tailLanded(s *epState, i int, p *transport.Peer, reason endpoint.Reason) {
	t := &s.tails[i]
	t.chunksOut--
	if reason == 0 && !t.same(p) {
		reason = endpoint.ReasonRestarted
	}
	if reason != 0 && !t.returned {
		t.returned = true
		s.lastReturned = t.id
		if !s.closed {
			d := t.d
			d.Class |= endpoint.ClassReturned
			d.Tag = uint64(reason) | uint64(t.q)<<8
			e.returnedFl = append(e.returnedFl, returnedFlight{s: s, d: d})
		}
	}
	if t.chunksOut == 0 {
		s.tails = append(s.tails[:i], s.tails[i+1:]...)
	}
}

// bulkNext sets the state of s's slot, which holds a bulk message, after
// one of its chunks left or landed or the message was returned: the next
// chunk may leave (slotPending), or the slot waits for acknowledgements
// (slotInflight) or gives the message to the tails (detach), or the
// message is done (finish). A slot whose return is queued
// (slotReturning) stays so: flushReturning empties it.
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
	case e.mayDetach(s):
		e.detach(s)
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
// chunk of a message to arrive. A chunk of a recorded message for another
// endpoint than its first gets a record of its own and ReasonIncomplete:
// the endpoint its first chunks went to was closed and replaced by s.
// Messages are numbered per sending engine (bulkSeq), so an endpoint that
// took a closed one's id never continues its message; a sending host that
// restarted begins its records afresh (its epoch). A sending endpoint has
// at most BulkAhead messages in flight, so a new message takes the record
// of a message complete here, or else the oldest: one its sender gave up
// on, never to complete.
func (e *Engine) bulkRecord(src HostID, m *msg, s *epState) (*bulkRx, endpoint.Reason) {
	key := Name{src, m.src}
	list := e.bulkRx[key]
	var epoch uint32 // this host's own messages: 0
	if p := e.tr.Peer(src); p != nil {
		epoch = p.Epoch()
	}
	if len(list) > 0 && list[0].epoch != epoch {
		for _, rx := range list {
			poolDrop(rx)
		}
		list = list[:0]
	}
	for _, rx := range list {
		switch {
		case rx.id != m.id:
		case rx.failed || rx.dst == s:
			return rx, 0
		default:
			poolDrop(rx)
			*rx = bulkRx{id: m.id, dst: s, src: src, epoch: epoch, begun: e.bulkBegun}
			e.bulkBegun++
			return rx, endpoint.ReasonIncomplete
		}
	}
	var rx *bulkRx
	if m.remote == endpoint.PoolOffset {
		// A pooled message keeps its sender's slot until it is
		// acknowledged (mayDetach): an earlier pooled message still
		// incomplete here was given up, and its block goes now.
		for _, r := range list {
			if r.pooled && !r.put {
				rx = r
				break
			}
		}
	}
	switch {
	case rx != nil:
	case len(list) < BulkAhead:
		rx = new(bulkRx)
		list = append(list, rx)
		e.bulkRx[key] = list
	default:
		rx = list[0]
		for _, r := range list[1:] {
			if r.done && !rx.done || r.done == rx.done && r.begun < rx.begun {
				rx = r // complete first, then the oldest
			}
		}
	}
	poolDrop(rx) // a message its sender gave up on, if not complete
	*rx = bulkRx{id: m.id, dst: s, src: src, epoch: epoch, begun: e.bulkBegun}
	e.bulkBegun++
	return rx, 0
}
