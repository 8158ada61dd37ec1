package nicfw

import (
	"encoding/binary"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// The compact lane, in the engine. A short message in the compact form
// (engine_msg.go) for an endpoint that takes it is the steady state of
// request/reply traffic. The general receive path decodes it into a msg,
// checks that (accept, refusal), builds the receive descriptor from it and
// puts the descriptor (store): laneShort reads the compact form's fields
// straight into the descriptor instead, with the same checks in the same
// order (the form, the endpoint, its key, its tag, a request's handler, its
// residency), and puts it. It declines whatever the general path would
// refuse, return or count (no endpoint, a closed one, one with a key,
// a wrong tag, a handler not taken, a malformed message), before any of
// it takes effect: the general path then handles the message as before,
// and gives the reason.

// laneShort is offer for message p in the compact form from host src, by
// the compact lane (above). ok false: the lane declined, nothing
// happened, and offer's general path is to take the message; otherwise
// taken is offer's result.
func (e *Engine) laneShort(src HostID, p []byte) (taken, ok bool) {
	var d endpoint.Descriptor
	kind, dst, from, ok := readCompact(p, &d)
	if !ok {
		return false, false
	}
	s := e.ep(dst)
	if s == nil || s.aead != nil || s.closed || s.tag != d.Tag && !e.cfg.Unprotected ||
		kind == endpoint.RequestSend && !s.mem.AcceptsHandler(d.Handler) {
		return false, false
	}
	if !e.touch(s) {
		e.stats.NotResident++
		return false, true
	}
	if i, ok := s.index(Name{src, from}); ok {
		d.Dest = i
	}
	q := endpoint.RequestReceive
	if kind == endpoint.ReplySend {
		q = endpoint.ReplyReceive
	}
	if put, taken := e.putOutcome(s.mem.Put(q, &d)); !put {
		return taken, true
	}
	e.stats.Lane++
	e.countStored(s, kind, endpoint.ClassShort, 0)
	return true, true
}

// readCompact reads message p in the compact form into d, the receive
// descriptor it stands for (Dest NoIndex), and returns the queue it was
// sent from and its endpoints; ok false if p is not a well-formed compact
// message (decodeCompact's checks).
func readCompact(p []byte, d *endpoint.Descriptor) (kind endpoint.Queue, dst, src EndpointID, ok bool) {
	if len(p) < msgCompactLen || p[0]&^0b111 != msgCompact {
		return 0, 0, 0, false
	}
	x := (*[msgCompactLen]byte)(p) // checked once, and once for the arguments
	nargs := x[0] >> 1 & 0b11
	if nargs > msgCompactArgs || len(p) != msgCompactLen+8*int(nargs) {
		return 0, 0, 0, false
	}
	*d = endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: nargs, Dest: endpoint.NoIndex,
		Handler: uint32(binary.BigEndian.Uint16(x[5:])), Tag: binary.BigEndian.Uint64(x[7:])}
	switch nargs {
	case 2:
		a := (*[msgCompactLen + 16]byte)(p)
		d.Args[0], d.Args[1] = binary.BigEndian.Uint64(a[msgCompactLen:]), binary.BigEndian.Uint64(a[msgCompactLen+8:])
	case 1:
		d.Args[0] = binary.BigEndian.Uint64((*[msgCompactLen + 8]byte)(p)[msgCompactLen:])
	}
	return endpoint.Queue(x[0] & 1), EndpointID(binary.BigEndian.Uint16(x[1:])), EndpointID(binary.BigEndian.Uint16(x[3:])), true
}
