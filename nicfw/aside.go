package nicfw

import (
	"slices"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// Stepping aside. The send queues are taken in order, and a message whose
// destination's window is full waits at the head of its queue (window.go):
// while the destination answers, for a round trip or so. When it does not
// (the host is gone, or refuses), the message would hold up everything
// behind it, messages to other destinations too, until the transport
// gives up on what is in flight to it (GiveUpAfter, seconds). So a short
// or medium message at the head whose destination's window is full, and
// whose host is stalled (transport.Peer.Stalled: a message to it was sent
// again since it last acknowledged one), is taken off its queue into the
// endpoint's aside list, and the queue moves on. A later message to a
// destination with messages aside follows them there, whatever its
// window, so that each destination's messages still leave in the order
// they were sent; once a destination's window opens, its oldest message
// aside leaves before anything else of the endpoint. A medium message's
// bytes, copied out of the staging area when it was taken (begin), go
// with it. Bulk messages never step aside: one at the head waits, as
// before, and so does any message once maxAside of the endpoint's are
// aside. The count of the request queue's messages done (View.Done)
// counts a message when it leaves: a message sent after one aside is
// counted done late, never early. A healthy destination's full window
// (an acknowledgement on its way) does not make its messages step aside:
// they wait at the head as before, without a copy.

// asideMsg is a message taken off a send queue to wait for its
// destination's window: its descriptor, the queue it came from, and a
// medium message's built bytes.
type asideMsg struct {
	d    endpoint.Descriptor
	q    endpoint.Queue
	data []byte
}

// maxAside bounds the messages an endpoint has aside.
const maxAside = 64

// asideReady returns the index in s.aside of the oldest message that may
// leave now as far as order and the window are concerned (the oldest
// aside for its destination, whose window is open), or -1.
func (e *Engine) asideReady(s *epState) int {
	for i := range s.aside {
		d := s.aside[i].d.Dest
		if e.windowOpen(s, d, false) && !e.asideBefore(s, i, d) { // a stalled destination's closed window first: cheaper
			return i
		}
	}
	return -1
}

// asideBefore reports whether one of the first n messages aside goes to
// the destination that table index dest names.
func (e *Engine) asideBefore(s *epState, n int, dest uint32) bool {
	if uint64(dest) >= uint64(len(s.table)) {
		return false
	}
	to := s.table[dest]
	for _, a := range s.aside[:n] {
		if uint64(a.d.Dest) < uint64(len(s.table)) && s.table[a.d.Dest] == to {
			return true
		}
	}
	return false
}

// asideHas reports whether a message to the destination of table index
// dest is aside.
func (e *Engine) asideHas(s *epState, dest uint32) bool {
	return len(s.aside) > 0 && e.asideBefore(s, len(s.aside), dest)
}

// mayAside reports whether a message of class to table index dest, which
// may not leave now (its window is full, or messages to its destination
// are aside), may step aside.
func (e *Engine) mayAside(s *epState, dest uint32, class endpoint.Class) bool {
	if class != endpoint.ClassShort && class != endpoint.ClassMedium || len(s.aside) >= maxAside {
		return false
	}
	if e.asideHas(s, dest) {
		return true
	}
	if uint64(dest) >= uint64(len(s.table)) {
		return false
	}
	p := e.tr.Peer(s.table[dest].Host)
	return p != nil && p.Stalled()
}

// mustWait reports whether a message of s to table index dest may not
// leave now: its destination's window is full, or messages to it are
// aside (they go first).
func (e *Engine) mustWait(s *epState, dest uint32) bool {
	return !e.windowOpen(s, dest, false) || e.asideHas(s, dest)
}

// stepAside moves the message just taken into s's slot to the aside list
// and empties the slot (without counting it done).
func (e *Engine) stepAside(s *epState) {
	a := asideMsg{d: s.d, q: s.q}
	if s.d.Class == endpoint.ClassMedium {
		a.data = slices.Clone(s.out[:s.outLen])
	}
	s.aside = append(s.aside, a)
	s.state = slotEmpty
	e.stats.Aside++
}

// unAside puts message i of the aside list back into s's empty slot, as
// if just taken.
func (e *Engine) unAside(s *epState, i int) {
	a := s.aside[i]
	s.aside = slices.Delete(s.aside, i, i+1)
	s.d = a.d
	occupy(s, a.q) // not begin: a medium message is not built again from the staging area, which the application may have reused
	if a.d.Class == endpoint.ClassMedium {
		s.outLen = copy(s.out, a.data) // its bytes as taken
	}
}
