package nicfw

import (
	"fmt"
	"slices"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// Closing (endpoint_close.go): CloseEndpoint stops an endpoint at once (it
// leaves the scheduler; what it has not sent is dropped, nothing is
// returned to it), keeps its id as a tombstone that answers ReasonClosed,
// and closes its memory once its message in flight, if any, is finished;
// CreateEndpoint may reuse the id. A return for the old endpoint that
// arrives after the id was reused goes to the new one if it has the same
// tag.

// Closing endpoints, and what a daemon needs to put the engine to sleep.
// All of it runs in the engine thread, like the rest of the Engine.
//
// An endpoint is closed in two steps. CloseEndpoint marks it closed at
// once: it leaves the scheduler (nothing more is taken from its send
// queues), a message taken and not sent is dropped, a returned message not
// yet handed over is dropped, and from then on messages arriving for it are
// returned with ReasonClosed and returns for it are dropped. Its memory is
// released (release) when its slot is empty: at once, or when the message
// it has in flight is acknowledged or given up on (finish), or the last of
// them with a Window above 1 (land). Until then it
// stays pinned in the residency, as any endpoint with a message in flight.
// Its state stays in Engine.eps as a tombstone, so that its id keeps
// answering ReasonClosed rather than ReasonNoEndpoint, until CreateEndpoint
// reuses the id; if that happens while its message is still in flight, the
// old state waits in Engine.closing for its release.

// CloseEndpoint closes endpoint id: the engine sends nothing more from it
// (descriptors not yet taken are dropped, and so is a message taken and not
// yet sent; one in flight is finished but not returned), and messages that
// arrive for it afterwards are returned to their senders with ReasonClosed.
// Its memory is closed once nothing of it is in flight, at once if nothing
// is; the application's own mapping stays valid until it unmaps it. The
// error is ErrNoEndpoint for an id that names no open endpoint, or that of
// closing the memory when it was closed at once (a later one is reported
// by Close).
func (e *Engine) CloseEndpoint(id EndpointID) error {
	s := e.ep(id)
	if s == nil || s.closed {
		return fmt.Errorf("%w: %d", ErrNoEndpoint, id)
	}
	s.closed = true
	e.live--
	if s.owner.open--; s.owner.open == 0 {
		e.owned--
		e.forgetOwner(s.owner)
	}
	e.unlistParked(s)
	e.sched.Remove(int(id))
	if !s.resident {
		e.unlistEvicted(s)
	}
	e.unbell(s)
	e.returnedFl = slices.DeleteFunc(e.returnedFl, func(r returnedFlight) bool { return r.s == s })
	s.aside = nil // discarded, as the messages still in its send queues are
	if s.d.Class == endpoint.ClassBulk && s.state != slotEmpty {
		e.abortBulk(s) // a SendGate that saw part of it leave hears it is done
	}
	switch s.state {
	case slotInflight:
		return nil // released when acknowledged or returned (finish)
	case slotReturning:
		e.returning = slices.DeleteFunc(e.returning, func(r *epState) bool { return r == s })
	}
	e.vacate(s)
	if s.flying > 0 {
		return nil // released when the last is acknowledged or returned (land)
	}
	return e.release(s)
}

// forgetOwner forgets o once it has no endpoint open and none pinned.
func (e *Engine) forgetOwner(o *ownerCount) {
	if o.open == 0 && o.pinned == 0 && e.owners[o.id] == o {
		delete(e.owners, o.id)
	}
}

// release closes the memory of closed endpoint s, whose slot is empty. If
// its id is still its own (not reused by CreateEndpoint), it also frees
// the id's residency frame and forgets a bulk message it was sending to an
// endpoint of this host. The frame stays if a message of an earlier
// endpoint of the same id, closed and replaced, still pins it (ErrPinned);
// it is then evicted like any other once free.
func (e *Engine) release(s *epState) error {
	if e.ep(s.id) == s {
		if _, ok := e.res.Resident(int(s.id)); ok {
			e.res.Unload(int(s.id))
		}
		s.resident, s.table = false, nil
		delete(e.bulkRx, Name{e.cfg.Host, s.id})
	} else {
		e.closing = slices.DeleteFunc(e.closing, func(r *epState) bool { return r == s })
	}
	return s.mem.Close()
}

// Endpoints returns the number of open endpoints (closed ones whose
// message is still in flight not counted).
func (e *Engine) Endpoints() int { return e.live }

// EndpointInfo describes an open endpoint: its virtual network, what the
// engine did with its queues and its messages, and the descriptors in its
// queues now, by queue (endpoint.Memory.Queued: RequestSend, ReplySend,
// RequestReceive, ReplyReceive).
type EndpointInfo struct {
	ID       EndpointID       `json:"id"`
	Tag      uint64           `json:"tag"`
	Table    int              `json:"table"` // translation table entries
	Queues   endpoint.Stats   `json:"queues"`
	Messages EndpointCounters `json:"messages"`
	Queued   [4]uint32        `json:"queued"`
}

// EndpointList returns the open endpoints, by id. It belongs to the engine
// thread, as every method does.
func (e *Engine) EndpointList() []EndpointInfo {
	var l []EndpointInfo
	for id, s := range e.eps {
		if s == nil || s.closed {
			continue
		}
		info := EndpointInfo{ID: EndpointID(id), Tag: s.tag, Table: len(s.vnet), Queues: s.mem.Stats(), Messages: s.counts}
		for q := range info.Queued {
			info.Queued[q] = s.mem.Queued(endpoint.Queue(q))
		}
		l = append(l, info)
	}
	return l
}

// HasEndpoint reports whether endpoint id is open.
func (e *Engine) HasEndpoint(id EndpointID) bool {
	s := e.ep(id)
	return s != nil && !s.closed
}

// SetIdle writes the idle word of every open endpoint
// (endpoint.Memory.SetIdle). An engine going to sleep calls SetIdle(true),
// then Polls once more and sleeps only if that found nothing to do: a
// descriptor published before the word was visible did not kick, and that
// Poll takes it. Going idle also sends the acknowledgements still owed,
// which would otherwise wait for the next Poll.
func (e *Engine) SetIdle(idle bool) error {
	if idle {
		if err := e.tr.FlushAcks(); err != nil {
			return err
		}
	}
	for _, s := range e.eps {
		if s != nil && !s.closed {
			s.mem.SetIdle(idle)
		}
	}
	return nil
}

// Busy reports whether the engine has work that only time moves on:
// messages in flight (retransmissions, giving up), return messages waiting
// for a channel, returned messages waiting for room in a reply receive
// queue, messages waiting for a channel or a frame. A sleeping engine wakes
// for its timer scan while it is busy.
func (e *Engine) Busy() bool {
	if e.tr.InFlight() || len(e.returns) > 0 || len(e.returning) > 0 || len(e.returnedFl) > 0 {
		return true
	}
	for _, s := range e.eps {
		if s != nil && (s.state == slotPending || len(s.aside) > 0) {
			return true
		}
	}
	return false
}
