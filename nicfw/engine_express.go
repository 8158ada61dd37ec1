package nicfw

import "github.com/xam-project/xam/nicfw/endpoint"

// The express path: a short message handed straight to an inline engine.
//
// On the queued path a short message crosses the endpoint's send queue:
// the application encodes its descriptor into the ring and runs the
// engine, whose Poll receives, asks the scheduler which endpoint sends,
// peeks at the ring, decodes and checks the descriptor, and only then
// builds the message. An inline engine runs in its application's
// goroutine, so when nothing else could go first the application may hand
// the descriptor over directly (Express): it is checked as Take checks a
// queued one, put in the endpoint's slot as if taken, and sent, in one
// call that does nothing else. What the message is owed is unchanged: the
// same checks (the descriptor's fields, the table's index, the tag the
// engine adds), the same flight record, window and residency hold, the
// same return to sender. Having no place in the queue, it is not counted
// in the queue's counters (endpoint.View.Progress, View.Done).
//
// Express declines, and the caller queues the message as before, whenever
// the queued path could order things otherwise or needs the engine's
// turn: another endpoint of the engine is busy (the scheduler shares the
// sends among the busy ones; an idle endpoint's message that the scheduler
// has not noticed yet waits for the next Poll, as it would), modules are
// loaded (their gates), the endpoint's slot or either of its send queues
// holds a message, or messages of it are aside (aside.go) (order), it is
// not resident, its window to that destination is full (window.go; on an
// ordered virtual network, its last message to that host is
// unacknowledged), or the message could not leave now (canSend: a busy
// host, no frame to pin). An endpoint parked behind its doorbell stays
// parked: its express messages leave without the scheduler.

// Express sends d, a short message from endpoint id's send queue q, at
// once, without queueing it: the inline fast path (above). It reports
// whether it did; false means nothing happened, and the message is to be
// queued as usual. A message the engine refuses or returns (a host that
// is down, unknown or too small a payload) is handled as on the queued
// path: Express reports true, and the return arrives in the receive
// queue. It may be called only where Poll may be, and never during one.
func (e *Engine) Express(id EndpointID, q endpoint.Queue, d *endpoint.Descriptor) (bool, error) {
	s := e.ep(id)
	if s == nil || e.mods != nil || s.closed || !s.resident || e.live != 1 && !e.sched.Quiet(int(id)) ||
		s.state != slotEmpty || len(s.aside) > 0 || !e.windowOpen(s, d.Dest, false) ||
		d.Class != endpoint.ClassShort || (q != endpoint.RequestSend && q != endpoint.ReplySend) {
		return false, nil
	}
	if s.mem.Pending() || !e.canSend(s, d.Dest) ||
		!s.mem.Express(d) { // last: it counts the descriptor taken
		return false, nil
	}
	if p, ok := e.laneReady(s, q, d); ok {
		if sent, err := e.laneSend(s, q, d, p); sent {
			e.stats.Express++
			return true, err
		}
		// The transport did not take it: the general path below tries
		// again, and keeps it in the slot as the queued path keeps a
		// message it could not send.
	}
	s.d = *d
	e.begin(s, q)
	s.express = true
	e.tr.BeginPass()
	sent, err := e.sendFrom(s)
	if eerr := e.tr.EndPass(); err == nil {
		err = eerr
	}
	if len(e.returning) > 0 {
		e.flushReturning() // returned at once (a host marked down): in the receive queue now, as at a Poll's end
	}
	if s.parked && s.state == slotPending {
		// It could not leave after all: back in the scheduler's rotation,
		// as its doorbell would put it. One that left stays parked: it has
		// nothing more to send, and its next message rings or comes here.
		e.unpark(s)
	}
	if sent {
		e.stats.Express++
	}
	// Not sent (canSend said it could leave): it waits in the slot, taken,
	// for the next Poll, as a queued message that could not leave does.
	return true, err
}

// OwesAcks reports whether the engine's transport owes acknowledgements
// that have not left yet: an application that sent its replies by the
// express path runs the engine for them.
func (e *Engine) OwesAcks() bool { return e.tr.AcksOwed() }
