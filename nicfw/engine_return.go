package nicfw

import (
	"errors"

	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// Return to sender: a message for an unknown or closed endpoint, with a
// wrong tag, a bulk region that does not fit, or a request to a handler the
// receiver has not registered (endpoint.View.SetHandlers) is accepted (ACKed) and
// answered with a return message carrying the reason, queued
// (EngineConfig.ReturnQueue; full: NACK) until a channel is free; a return
// is never returned. The transport's ErrUnreachable returns a message
// locally and marks the host down for GiveUpAfter, during which messages
// to it are returned at once. A returned message arrives in the sender's
// reply receive queue as its original descriptor with ClassReturned set in
// Class and Tag = reason | sending queue<<8 (Descriptor.ReturnInfo); Dest
// is the index it was sent to. A returned medium message carries its bytes
// back (the return message includes them, a local return takes the copy
// made at take) into the receive area, where Offset and Length then name
// them; a returned bulk message keeps the Offset, Length and RemoteOffset
// it was sent with. A received descriptor's Dest is the sender's index in
// the receiver's table (NoIndex if absent) and its Tag the message's.

// In short: a message that
// cannot be delivered comes back to its sender's reply receive queue with
// a reason, returned here (returnLocal, returned: the transport gave up)
// or by its receiver (flushReturns sends those this engine makes for
// others; accept puts those that come back, engine_receive.go).

// returnLocal finishes s's message by returning it to s with reason. A
// bulk message returned already is not returned again (its slot waits for
// its chunks in flight), and nothing is returned to a closed endpoint.
func (e *Engine) returnLocal(s *epState, reason endpoint.Reason) {
	if s.d.Class == endpoint.ClassBulk {
		if s.closed || s.abort {
			e.abortBulk(s)
			e.bulkNext(s)
			return
		}
		e.abortBulk(s)
		s.lastReturned = s.bulkID
	} else if s.closed {
		e.finish(s)
		return
	}
	s.state, s.reason = slotReturning, reason
	e.returning = append(e.returning, s)
}

// flushReturning puts returned messages into their senders' reply receive
// queues; those whose queue is full wait for the next Poll. A returned
// medium message takes its bytes along (the copy begin made) into the
// receive area.
func (e *Engine) flushReturning() int {
	work, j := 0, 0
	for _, s := range e.returning {
		d := s.d
		d.Class, d.Incarnation = d.Class|endpoint.ClassReturned, 0 // returned here: no host's incarnation
		d.Tag = uint64(s.reason) | uint64(s.q)<<8
		var err error
		if s.d.Class == endpoint.ClassMedium {
			err = s.mem.PutData(endpoint.ReplyReceive, &d, s.out[s.outLen-int(s.d.Length):s.outLen])
		} else {
			err = s.mem.Put(endpoint.ReplyReceive, &d)
		}
		if err != nil {
			e.returning[j] = s
			j++
			continue
		}
		if s.d.Class == endpoint.ClassBulk && s.chunksOut > 0 {
			s.state = slotInflight // returned: the slot waits for its chunks in flight
		} else {
			e.vacate(s)
		}
		e.stats.Returned++
		s.countReturn(s.reason)
		work++
	}
	clear(e.returning[j:])
	e.returning = e.returning[:j]
	j = 0
	for _, r := range e.returnedFl {
		var err error
		if r.d.Class&^endpoint.ClassReturned == endpoint.ClassMedium {
			err = r.s.mem.PutData(endpoint.ReplyReceive, &r.d, r.data)
		} else {
			err = r.s.mem.Put(endpoint.ReplyReceive, &r.d)
		}
		if err != nil {
			e.returnedFl[j] = r
			j++
			continue
		}
		if r.d.Class != endpoint.ClassCommand { // a command's completion is not a return
			e.stats.Returned++
			reason, _, _ := r.d.ReturnInfo()
			r.s.countReturn(reason)
		}
		work++
	}
	clear(e.returnedFl[j:])
	e.returnedFl = e.returnedFl[:j]
	return work
}

// returned is the transport's Returned callback.
func (e *Engine) returned(dst HostID, cookie uint64, payload []byte, why error) {
	if cookie&controlCookie != 0 {
		e.controlDone(dst, false)
		return
	}
	f := e.flightOf(cookie)
	if f == nil { // a return message (cookie 0) is not returned again
		e.stats.ReturnsLost++
		return
	}
	reason := endpoint.ReasonRestarted // the host is back: not marked down
	if !errors.Is(why, transport.ErrRestarted) {
		reason = endpoint.ReasonUnreachable
		e.down[dst] = e.clk.Now().Add(e.giveUp)
		defer e.hostDown(dst)
	}
	e.countHostReturn(dst, reason, false)
	fl := *f
	e.freeFlight(cookie)
	if fl.chunk {
		current := e.isCurrentChunk(&fl)
		if current {
			fl.s.chunksOut--
		} else if i := fl.s.tailOf(fl.id); i >= 0 {
			e.tailLanded(fl.s, i, fl.peer, reason)
		}
		e.land(fl.s, fl.peer, fl.to)
		if current {
			e.returnLocal(fl.s, reason)
		}
		return
	}
	if inner, ok := envelope(payload); ok {
		payload = inner // as sent: in an envelope (auth.go)
	}
	e.returnFlight(fl.s, &fl, payload, reason)
	e.land(fl.s, fl.peer, fl.to)
}

// returnFlight queues message f of s, returned with reason, for s's reply
// receive queue; payload is the message as the transport carried it,
// where a medium message's bytes are. Nothing is returned to a closed
// endpoint.
func (e *Engine) returnFlight(s *epState, f *flight, payload []byte, reason endpoint.Reason) {
	if s.closed {
		return
	}
	r := returnedFlight{s: s, d: f.d}
	r.d.Class, r.d.Incarnation = r.d.Class|endpoint.ClassReturned, 0
	r.d.Tag = uint64(reason) | uint64(f.q)<<8
	if f.d.Class == endpoint.ClassMedium {
		if m, ok := decodeMsg(payload); ok {
			r.data = append([]byte(nil), m.data...)
		}
	}
	e.returnedFl = append(e.returnedFl, r)
}

// flushReturns sends the queued return messages that find a channel.
func (e *Engine) flushReturns() (int, error) {
	work, j := 0, 0
	for i, r := range e.returns {
		m := r.msg
		if r.aead != nil {
			m = e.seal(r.aead, r.peer.ID(), m)
		}
		err := e.tr.SendTo(r.peer, m, 0)
		switch {
		case err == nil:
			e.stats.ReturnsSent++
			work++
		case errors.Is(err, transport.ErrBusy):
			e.returns[j] = r
			j++
		case errors.Is(err, transport.ErrUnknownHost), errors.Is(err, transport.ErrTooLarge):
			e.stats.ReturnsLost++
		default:
			j += copy(e.returns[j:], e.returns[i:])
			clear(e.returns[j:])
			e.returns = e.returns[:j]
			return work, err
		}
	}
	clear(e.returns[j:])
	e.returns = e.returns[:j]
	return work, nil
}
