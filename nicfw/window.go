package nicfw

import (
	"unsafe"

	"github.com/xam-project/xam/nicfw/transport"
)

// The window. An endpoint keeps up to EngineConfig.Window of its messages
// (and bulk chunks) in flight to each destination endpoint, each on a
// transport channel of its own, so that what it sends to one destination
// stays in order with Window 1, while a server's replies to many clients
// do not wait for one another's acknowledgements. The send queues are
// still taken in order: a message whose destination's window is full
// holds up those behind it (isPending, Express), unless its destination
// is stalled and it steps aside (aside.go). An ordered virtual
// network (VNet.Ordered) keeps one message in flight to each host
// instead, whatever the window: the transport's channels to a host are
// independent, and a retransmitted message would arrive after those sent
// after it on other channels. Its bulk message's chunks still fly
// together up to the window.
//
// The counts live in each endpoint's flyingTo, one entry per destination
// it has sent to since it last had nothing in flight: an endpoint sends to
// few destinations at a time, so a slice scanned in order costs less than
// a map's hashing, and an endpoint with fewer messages in flight in all
// than the window allows (the common case of request and reply) looks at
// none of it. An entry whose count falls to 0 stays, to be counted up
// again or taken by another destination, and the slice empties when the
// endpoint's last message lands: a request/reply exchange adds one entry
// and empties it again, and nothing in it holds a pointer for the
// collector to track. Entries are keyed by the transport's peer, not its
// host id (the host table may give a peer another id while its messages
// are in flight), by its address: the peer lives while a count of it is
// above 0 (its messages' flight records point to it), and an entry at 0
// may be taken over by any peer, so an address reused after it is gone
// names nothing that is still counted.

// destCount is an endpoint's count of messages in flight to one
// destination endpoint, ep at the peer whose address is p.
type destCount struct {
	p  uintptr
	ep EndpointID
	n  int
}

// peerKey is p's key in flyingTo.
func peerKey(p *transport.Peer) uintptr { return uintptr(unsafe.Pointer(p)) }

// windowOpen reports whether a message of s to its table's index dest may
// go in flight now, as far as the window is concerned: fewer than Window
// of s's messages are in flight to that endpoint, and on an ordered
// virtual network none to its host; chunk asks instead about the next
// chunk of the bulk message in s's slot (the window alone). An index
// outside the table, or to a host the transport does not know, is open:
// the message is refused or returned when it is taken or sent.
func (e *Engine) windowOpen(s *epState, dest uint32, chunk bool) bool {
	ordered := s.ordered && !chunk
	if s.flying == 0 || !ordered && s.flying < e.cfg.Window {
		return true
	}
	if uint64(dest) >= uint64(len(s.table)) {
		return true
	}
	to := s.table[dest]
	p := e.tr.Peer(to.Host)
	if p == nil {
		return true
	}
	key := peerKey(p)
	for _, c := range s.flyingTo {
		if c.p == key && (ordered && c.n > 0 || c.ep == to.Endpoint && c.n >= e.cfg.Window) {
			return false
		}
	}
	return true
}

// flew counts a message of s to endpoint ep at p as in flight: the first
// of none needs no look at the others.
func (s *epState) flew(p *transport.Peer, ep EndpointID) {
	if s.flying == 0 {
		s.flyingTo = append(s.flyingTo[:0], destCount{peerKey(p), ep, 1})
	} else {
		s.addFlying(peerKey(p), ep, 1)
	}
	s.flying++
}

// landed counts a message of s to endpoint ep at p out of flight, and
// reports whether none is left: the last empties the counts.
func (s *epState) landed(p *transport.Peer, ep EndpointID) bool {
	if s.flying--; s.flying == 0 {
		s.flyingTo = s.flyingTo[:0]
		return true
	}
	s.addFlying(peerKey(p), ep, -1)
	return false
}

// addFlying adds d to the count of s's messages in flight to endpoint ep
// at the peer whose key is key.
func (s *epState) addFlying(key uintptr, ep EndpointID, d int) {
	free := -1
	for i := range s.flyingTo {
		c := &s.flyingTo[i]
		if c.p == key && c.ep == ep {
			c.n += d
			return
		}
		if c.n == 0 && free < 0 {
			free = i
		}
	}
	switch {
	case d <= 0:
	case free >= 0:
		s.flyingTo[free] = destCount{key, ep, d}
	default:
		s.flyingTo = append(s.flyingTo, destCount{key, ep, d})
	}
}
