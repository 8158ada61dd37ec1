package nicfw

import "github.com/xam-project/xam/nicfw/endpoint"

// Bulk messages in flight. A bulk message holds its endpoint's slot from
// the moment it is taken until its last chunk is acknowledged or it is
// returned and nothing of it is in flight any more.
//
// Its first chunk travels alone. Once that one is acknowledged the
// receiver holds a record of the message (bulkRecord), and the rest of its
// chunks leave as fast as the window allows (EngineConfig.Window, shared
// with the endpoint's short and medium messages still in flight), each on
// a transport channel of its own, so that they may arrive in any order;
// the receiver stores each at its offset and counts the bytes, and the
// chunk that completes the count puts the message's descriptor.
//
// Sending the first chunk alone is what lets a receiver tell a chunk whose
// message began in an earlier incarnation of itself (it restarted, or the
// endpoint was closed and replaced) from one whose first chunk is merely
// late: no chunk but the first ever arrives before its record exists, so
// one that finds no record, or the record of another message or
// endpoint, is returned with ReasonIncomplete.

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
	case s.sent < s.d.Length && s.started || s.chunksOut == 0 && !s.started:
		s.state = slotPending // isPending applies the window
	default:
		s.state = slotInflight
	}
}

// isCurrentChunk reports whether f, a bulk chunk's flight record, belongs
// to the message its endpoint's slot holds: not to one the slot gave up
// (the endpoint was closed, and its slot emptied).
func (e *Engine) isCurrentChunk(f *flight) bool {
	s := f.s
	return s.state != slotEmpty && s.d.Class == endpoint.ClassBulk && s.bulkID == f.id
}

// bulkRecord returns the record of the bulk message that chunk m, from
// host src for endpoint s (nil: none), belongs to: a new one for a first
// chunk. A later chunk that does not belong to the recorded message for
// the same endpoint gets a record of its own and ReasonIncomplete: its
// beginning went to an endpoint since closed and replaced by s, or never
// arrived here (this engine restarted).
func (e *Engine) bulkRecord(src HostID, m *msg, s *epState) (*bulkRx, endpoint.Reason) {
	key := Name{src, m.src}
	rx := e.bulkRx[key]
	switch {
	case rx == nil:
		rx = new(bulkRx)
		e.bulkRx[key] = rx
	case m.chunk != 0 && rx.id == m.id && (rx.failed || rx.dst == s):
		return rx, 0
	}
	*rx = bulkRx{id: m.id, dst: s}
	if m.chunk != 0 {
		return rx, endpoint.ReasonIncomplete
	}
	return rx, 0
}
