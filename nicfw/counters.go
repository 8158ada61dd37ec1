package nicfw

import (
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// What the engine counts per endpoint and per peer host, for a daemon's
// statistics and metrics. Counting costs an add to a field the engine
// owns, in the engine thread, where the message is handled anyway: no
// lock, no allocation. The counts per host of returns are kept in a map
// that is written only on the return path, which is not the fast one,
// and that allocates once per host.

// EndpointCounters counts the messages of one endpoint. Bytes are the
// data a message carries (a medium message's, a bulk message's, every
// chunk's), not its arguments and headers: a short message adds none.
type EndpointCounters struct {
	// Sent counts the messages that left: handed to the transport or
	// delivered on this host (a bulk message once, when its first chunk
	// leaves); SentBytes their data, a bulk message's as its chunks
	// leave.
	Sent      uint64 `json:"sent"`
	SentBytes uint64 `json:"sent_bytes"`
	// Received counts the messages put into its receive queues (a bulk
	// message once it is whole), returns not included; ReceivedBytes
	// their data.
	Received      uint64 `json:"received"`
	ReceivedBytes uint64 `json:"received_bytes"`
	// Returned counts its messages that came back to it, by reason
	// (endpoint.Reason; 0 a reason out of range).
	Returned [endpoint.NumReasons]uint64 `json:"returned"`
}

// countSent counts a message (or bulk chunk) of s that left, with its
// data bytes; first says whether it is its message's first part.
func (s *epState) countSent(bytes uint32, first bool) {
	if first {
		s.counts.Sent++
	}
	s.counts.SentBytes += uint64(bytes)
}

// countLeft counts the message (or bulk chunk) in s's slot, which just
// left.
func (s *epState) countLeft() {
	switch s.d.Class {
	case endpoint.ClassBulk:
		s.countSent(s.chunk, !s.started)
	case endpoint.ClassMedium:
		s.countSent(s.d.Length, true)
	default:
		s.countSent(0, true)
	}
}

// countReturn counts a message returned to s with reason.
func (s *epState) countReturn(reason endpoint.Reason) {
	if reason >= endpoint.NumReasons {
		reason = 0
	}
	s.counts.Returned[reason]++
}

// dataBytes returns the data a message of class c and length n carries.
func dataBytes(c endpoint.Class, n uint32) uint32 {
	if c == endpoint.ClassMedium || c == endpoint.ClassBulk {
		return n
	}
	return 0
}

// hostReturns counts, for one peer host, the messages returned by reason
// (index 0: a reason out of range): Sent are those from the host that
// this engine returned to their senders there, Received those of this
// host's endpoints that came back from it or were given up on (the host
// unreachable or restarted).
type hostReturns struct {
	Sent, Received [endpoint.NumReasons]uint64
}

// countHostReturn counts a return to (sent) or from (received) host h.
func (e *Engine) countHostReturn(h HostID, reason endpoint.Reason, sent bool) {
	if reason >= endpoint.NumReasons {
		reason = 0
	}
	r := e.hostRet[h]
	if r == nil {
		r = &hostReturns{}
		e.hostRet[h] = r
	}
	if sent {
		r.Sent[reason]++
	} else {
		r.Received[reason]++
	}
}

// PeerInfo describes a peer host in the host table: what the transport
// did with it (its messages are the engine's, a bulk message's chunks
// each, returns and modules' control messages included; its bytes are
// theirs, headers included) and the messages returned between it and
// this host.
type PeerInfo struct {
	Host      HostID              `json:"host"`
	Transport transport.PeerStats `json:"transport"`
	// ReturnsSent counts the messages from the host that this engine
	// returned to their senders there, by reason (endpoint.Reason; 0 a
	// reason out of range); Returned those of this host's endpoints to
	// the host that came back, returned by it or given up on (the host
	// unreachable, or restarted).
	ReturnsSent [endpoint.NumReasons]uint64 `json:"returns_sent"`
	Returned    [endpoint.NumReasons]uint64 `json:"returned"`
}

// PeerList returns the peer hosts of the host table, by id. The counts of
// returns start again for every host when the table changes (SetHosts),
// the transport's stay with their host.
func (e *Engine) PeerList() []PeerInfo {
	var l []PeerInfo
	for _, h := range e.tr.Hosts() { // by id
		ps, _ := e.tr.PeerStats(h)
		pi := PeerInfo{Host: h, Transport: ps}
		if r := e.hostRet[h]; r != nil {
			pi.ReturnsSent, pi.Returned = r.Sent, r.Received
		}
		l = append(l, pi)
	}
	return l
}
