package nicfw

import (
	"encoding/binary"

	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// The compact lane, in the engine. A short message (in the compact form,
// or the long one where it does not fit: engine_msg.go) for an endpoint
// that takes it is the steady state of request/reply traffic. The general
// receive path decodes it into a msg, checks that (accept, refusal), builds
// the receive descriptor from it and puts the descriptor (store):
// laneShort reads its fields straight into the descriptor instead, with the same checks in the same
// order (the form, the endpoint, its key, its tag, a request's handler, its
// residency), and puts it. It declines whatever the general path would
// refuse, return or count (no endpoint, a closed one, one with a key,
// a wrong tag, a handler not taken, a malformed message), before any of
// it takes effect: the general path then handles the message as before,
// and gives the reason.

// laneShort is offer for message p (two bytes at least) from host src, by
// the compact lane (above). ok false: the lane declined, nothing
// happened, and offer's general path is to take the message; otherwise
// taken is offer's result.
func (e *Engine) laneShort(src HostID, p []byte) (taken, ok bool) {
	var d endpoint.Descriptor
	var kind endpoint.Queue
	var dst, from EndpointID
	if p[0]&msgCompact != 0 {
		kind, dst, from, ok = readCompact(p, &d)
	} else {
		kind, dst, from, ok = readShort(p, &d)
	}
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
	d.Incarnation = e.inc
	q := endpoint.RequestReceive
	if kind == endpoint.ReplySend {
		q = endpoint.ReplyReceive
	}
	if err := s.mem.Put(q, &d); err != nil {
		_, taken := e.putOutcome(err)
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
	if len(p) < msgCompactLen || p[0]&^0b1111 != msgCompact {
		return 0, 0, 0, false
	}
	x := (*[msgCompactLen]byte)(p) // checked once, and once for the arguments
	nargs := x[0] >> 1 & 0b111
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
	case 4: // a compact message of two cells
		a := (*[msgCompactLen + 32]byte)(p)
		d.Args[0], d.Args[1] = binary.BigEndian.Uint64(a[msgCompactLen:]), binary.BigEndian.Uint64(a[msgCompactLen+8:])
		d.Args[2], d.Args[3] = binary.BigEndian.Uint64(a[msgCompactLen+16:]), binary.BigEndian.Uint64(a[msgCompactLen+24:])
	case 3:
		a := (*[msgCompactLen + 24]byte)(p)
		d.Args[0], d.Args[1] = binary.BigEndian.Uint64(a[msgCompactLen:]), binary.BigEndian.Uint64(a[msgCompactLen+8:])
		d.Args[2] = binary.BigEndian.Uint64(a[msgCompactLen+16:])
	}
	return endpoint.Queue(x[0] & 1), EndpointID(binary.BigEndian.Uint16(x[1:])), EndpointID(binary.BigEndian.Uint16(x[3:])), true
}

// readShort is readCompact for a short message in the engine's long form
// (engine_msg.go): one that is no return and does not fit the compact form
// (decodeMsg's checks: one encoding per message).
func readShort(p []byte, d *endpoint.Descriptor) (kind endpoint.Queue, dst, src EndpointID, ok bool) {
	if len(p) < msgHeaderLen {
		return 0, 0, 0, false
	}
	x := (*[msgHeaderLen]byte)(p) // checked once
	kind, nargs := endpoint.Queue(x[0]), x[2]
	handler := binary.BigEndian.Uint32(x[8:])
	if kind != endpoint.RequestSend && kind != endpoint.ReplySend || endpoint.Class(x[1]) != endpoint.ClassShort || x[3] != 0 ||
		nargs > endpoint.MaxShortArgs || len(p) != msgHeaderLen+8*int(nargs) || compactable(kind, nargs, handler) {
		return 0, 0, 0, false
	}
	*d = endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: nargs, Dest: endpoint.NoIndex, Handler: handler, Tag: binary.BigEndian.Uint64(x[16:])}
	// The nargs arguments (checked), each bound checked by the loop's test.
	a := p[msgHeaderLen:]
	for i := 0; len(a) >= 8 && i < len(d.Args); i++ {
		d.Args[i], a = binary.BigEndian.Uint64(a), a[8:]
	}
	return kind, EndpointID(binary.BigEndian.Uint16(x[4:])), EndpointID(binary.BigEndian.Uint16(x[6:])), true
}

// The compact lane's send. Express hands over a short message that the
// queued path would put in the endpoint's slot and send from there
// (begin, sendFrom, vacate): the slot's state, the message built in the
// engine's buffer from the slot's copy of the descriptor, and the general
// send's cases (a command, a medium or bulk message, this host, a host
// marked down, modules, a key, an unknown host) each looked at again. A
// short message to another host that is up, from an endpoint without a
// key, goes from the descriptor straight to the transport instead
// (laneSend), which hands it to the link at once (transport.SendNow): the
// same flight record, residency hold, window count and counters, without
// the slot. Express has made the checks the queued path makes (the
// descriptor, the window, canSend).

// laneReady reports whether the short message d from s's queue q, which
// Express has checked, goes by the compact lane, and to which peer.
func (e *Engine) laneReady(s *epState, q endpoint.Queue, d *endpoint.Descriptor) (*transport.Peer, bool) {
	if s.aead != nil || uint64(d.Dest) >= uint64(len(s.table)) {
		return nil, false
	}
	h := s.table[d.Dest].Host
	if h == e.cfg.Host || e.markedDown(h) {
		return nil, false
	}
	p := e.tr.Peer(h)
	return p, p != nil && !p.Gone()
}

// laneSend sends the short message d from s's queue q to p by the compact
// lane. sent false: the transport did not take it, and nothing is left
// behind (the message is for the slot); otherwise err is the link's.
func (e *Engine) laneSend(s *epState, q endpoint.Queue, d *endpoint.Descriptor, p *transport.Peer) (sent bool, err error) {
	if !e.res.hit(int(s.id)) {
		e.res.Touch(int(s.id)) // resident (Express checked): marks it used, never faults
	}
	to := s.table[d.Dest].Endpoint
	var m []byte
	if compactable(q, d.NArgs, d.Handler) {
		m = e.buf[:putCompactMsg(e.buf, q, to, s.id, d.Handler, s.tag, d.Args[:d.NArgs])]
	} else {
		m = e.buf[:putMsgHeader(e.buf, q, endpoint.ClassShort, 0, to, s.id, d.Handler, d.Dest, s.tag, d.Args[:d.NArgs])]
	}
	f, cookie := e.flightSlot()
	// Field by field: the composite literal is built aside and copied.
	f.s, f.d, f.q, f.peer, f.to, f.chunk, f.id = s, *d, q, p, to, false, 0
	sent, err = e.tr.SendNow(p, m, cookie)
	if !sent {
		e.freeFlight(cookie)
		return false, nil
	}
	e.stats.Sent++
	s.countSent(0, true)
	s.sends++
	e.hold(s, p, to)
	return true, err
}
