package grim

import (
	"fmt"
	"slices"
	"time"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// Return to sender and the reply timeout: each request a channel sends
// is recorded (pendingRequest) until its reply, its return or its reply
// timeout, and a message that comes back goes to the error handler
// (OnReturn) once, with its identity and the reason.

// Reason is why a message came back to its sender (Returned.Reason).
type Reason = endpoint.Reason

// The reasons of return to sender (docs/wire.md), and ReasonNoReply for a
// request whose reply did not come within Config.ReplyTimeout.
const (
	ReasonBadTag      = endpoint.ReasonBadTag
	ReasonNoEndpoint  = endpoint.ReasonNoEndpoint
	ReasonUnreachable = endpoint.ReasonUnreachable
	ReasonNoHost      = endpoint.ReasonNoHost
	ReasonTooLarge    = endpoint.ReasonTooLarge
	ReasonClosed      = endpoint.ReasonClosed
	ReasonRange       = endpoint.ReasonRange
	ReasonIncomplete  = endpoint.ReasonIncomplete
	ReasonRestarted   = endpoint.ReasonRestarted
	ReasonNoHandler   = endpoint.ReasonNoHandler
	ReasonNoReply     = endpoint.ReasonNoReply
)

// Returned is a message that came back to its sender undelivered, or a
// request whose reply did not come (ReasonNoReply): what the error handler
// (Endpoint.OnReturn) gets. Args and the other fields identify the
// message as it was sent.
type Returned struct {
	Reason  Reason
	Request bool // a request (Short, Bulk, Write); else a reply
	Dest    int  // the peer it was sent to (index in Config.Peers)
	Channel int  // the channel it was sent on
	Handler HandlerID
	Args    [ShortArgs]uint32
	// Length is a bulk or memory message's length (0: a short message);
	// Write marks a memory message, At its offset.
	Length int
	Write  bool
	At     uint32
}

// String describes r for logs: "bulk request to peer 2 (channel 1),
// handler 40, 49152 bytes: no such handler".
func (r Returned) String() string {
	kind := "short"
	switch {
	case r.Write:
		kind = fmt.Sprintf("memory message of %d bytes at %d,", r.Length, r.At)
	case r.Length > 0:
		kind = fmt.Sprintf("bulk message of %d bytes,", r.Length)
	}
	dir := "request"
	if !r.Request {
		dir = "reply"
	}
	return fmt.Sprintf("%s %s to peer %d (channel %d), handler %d: %v", kind, dir, r.Dest, r.Channel, r.Handler, r.Reason)
}

// pendingRequest is a request sent on a channel and not yet answered:
// what identifies it, and when the reply timer first saw it (zero: not
// yet).
//
// A request past its reply timeout goes to the error handler and its
// record stays, marked expired, until the answer it still may get comes:
// its late reply or return, which would otherwise be taken for the
// answer of the next request to the same peer (replies name no request:
// a channel's requests to one peer are answered in order). The record
// goes without an answer when the peer's host restarted (its
// incarnation, which every message carries, changed, or a request came
// back ReasonRestarted), its endpoint closed (ReasonClosed,
// ReasonNoEndpoint) or it left the host table (ReasonNoHost): that
// answer will never come. (A host that stops for good and stays in the
// table leaves such records for good: a few, those it held when it
// stopped.)
type pendingRequest struct {
	dest    uint32 // engine table index
	handler HandlerID
	args    [ShortArgs]uint32
	length  uint32
	at      uint32 // a memory message's offset
	write   bool
	expired bool  // handed to the error handler (ReplyTimeout); kept for its late answer
	inc     uint8 // the peer's incarnation when it was sent (0: none heard yet)
	// seq is its index in the request send queue; seen when the reply
	// timer first saw it sent (the queue's done count past seq), zero
	// before.
	seq  uint32
	seen int64 // a stamp (stamp): without pointers the record is copied and cleared cheaply
}

// clockBase is the origin of the reply timer's stamps.
var clockBase = time.Now()

// stamp returns t as a reply timer's stamp: nanoseconds since clockBase
// (monotonic, as time.Now reads it), at least 1, so that 0 is "not yet".
func stamp(t time.Time) int64 { return max(1, int64(t.Sub(clockBase))) }

// waited returns how long before now the reply timer first saw p sent.
func (p *pendingRequest) waited(now time.Time) time.Duration {
	return time.Duration(stamp(now) - p.seen)
}

// sentRequest records request d, just queued on c, as outstanding.
func (c *Channel) sentRequest(d *endpoint.Descriptor) {
	r := pendingRequest{dest: d.Dest, handler: HandlerID(d.Handler), args: unpackArgs(d)}
	if d.Class == endpoint.ClassBulk {
		r.length = d.Length
		if r.handler == HandlerMemory {
			r.write, r.at = true, d.RemoteOffset
		}
	}
	put, _ := c.view.Progress(endpoint.RequestSend)
	r.seq = put - 1
	if d.Dest < uint32(len(c.ep.incs)) {
		r.inc = c.ep.incs[d.Dest]
	}
	c.pending = append(c.pending, r)
}

// answered removes the record of the request that an answer from dest
// ends (a reply: the oldest to dest; a return, like: the one it names,
// else the oldest to dest), and returns it.
func (c *Channel) answered(dest uint32, like *pendingRequest) (pendingRequest, bool) {
	at := -1
	for i := range c.pending {
		p := &c.pending[i]
		if p.dest != dest && dest != endpoint.NoIndex {
			continue
		}
		if at < 0 {
			at = i
		}
		if like == nil || p.handler == like.handler && p.args == like.args && p.length == like.length {
			at = i
			break
		}
	}
	if at < 0 {
		return pendingRequest{}, false
	}
	r := c.pending[at]
	c.drop(at)
	return r, true
}

// replied is answered for a reply from dest that runs its handler: it
// removes the record of the oldest request to dest and reports whether
// there was one outstanding (not one past its reply timeout), and whether
// it was a memory write.
func (c *Channel) replied(dest uint32) (found, write bool) {
	for i := range c.pending {
		if p := &c.pending[i]; p.dest == dest || dest == endpoint.NoIndex {
			found, write = !p.expired, p.write && !p.expired
			c.drop(i)
			return found, write
		}
	}
	return false, false
}

// drop removes the record at of c.pending; an outstanding memory write's
// is counted done (Writes).
func (c *Channel) drop(at int) {
	switch p := &c.pending[at]; {
	case p.expired:
		c.expired--
	case p.write:
		c.writes--
	}
	if at == len(c.pending)-1 {
		// The last (with one outstanding, the only): cut off, with no
		// copy of the rest.
		c.pending[at] = pendingRequest{}
		c.pending = c.pending[:at]
	} else {
		c.pending = slices.Delete(c.pending, at, at+1)
	}
}

// returned hands the message d describes, which came back to c with
// reason, to the error handler.
func (ep *Endpoint) returned(c *Channel, d *endpoint.Descriptor, reason endpoint.Reason, request bool) {
	r := pendingRequest{dest: d.Dest, handler: HandlerID(d.Handler), args: unpackArgs(d)}
	if d.Class&^endpoint.ClassReturned == endpoint.ClassBulk {
		r.length = d.Length
		if r.handler == HandlerMemory {
			r.write, r.at = true, d.RemoteOffset
		}
	}
	if request {
		p, ok := c.answered(d.Dest, &r)
		switch reason {
		case endpoint.ReasonRestarted, endpoint.ReasonClosed, endpoint.ReasonNoEndpoint, endpoint.ReasonNoHost:
			// What the peer took before will never be answered.
			ep.forget(d.Dest / MaxChannels)
		}
		if !ok || p.expired {
			ep.stats.LateReplies++ // handed over already (ReplyTimeout)
			return
		}
		r.seen = p.seen
	}
	ep.giveBack(c, r, reason, request)
}

// heard notes the incarnation of the host of dest, which a message from
// dest carried (endpoint.Descriptor.Incarnation; 0: a return of this
// host's engine, which says nothing of it).
func (ep *Endpoint) heard(dest uint32, inc uint8) {
	if dest < uint32(len(ep.incs)) && ep.incs[dest] == inc {
		return
	}
	ep.incarnation(dest, inc)
}

// incarnation is heard for a peer first heard or heard in another
// incarnation: a restart, after which the requests past their reply
// timeout that the old one took will never be answered. ep.incs holds a
// peer's at each of its channels' indices (each looked up where the
// index is at hand).
func (ep *Endpoint) incarnation(dest uint32, inc uint8) {
	peer := dest / MaxChannels
	if inc == 0 || dest == endpoint.NoIndex || int(peer) >= len(ep.cfg.Peers) {
		return
	}
	if len(ep.incs) == 0 {
		ep.incs = make([]uint8, len(ep.cfg.Peers)*MaxChannels)
	}
	old := ep.incs[dest]
	for ch := range uint32(MaxChannels) {
		ep.incs[peer*MaxChannels+ch] = inc
	}
	if old != 0 {
		ep.forget(peer)
	}
}

// forget drops the records of requests to peer past their reply timeout
// (handed to the error handler already), whose answers will not come:
// the peer restarted or its endpoint closed.
func (ep *Endpoint) forget(peer uint32) {
	for _, c := range ep.chans {
		if c.expired == 0 {
			continue
		}
		// One pass: the records kept slide down over those dropped.
		c.pending = slices.DeleteFunc(c.pending, func(p pendingRequest) bool {
			if !p.expired || p.dest/MaxChannels != peer || p.dest == endpoint.NoIndex {
				return false
			}
			c.expired--
			ep.stats.Forgotten++
			return true
		})
	}
}

// giveBack counts r, a message of c that came back with reason, and hands
// it to the error handler if there is one.
func (ep *Endpoint) giveBack(c *Channel, r pendingRequest, reason endpoint.Reason, request bool) {
	ep.stats.Returned++
	if ep.onReturn == nil {
		return
	}
	ret := Returned{Reason: reason, Request: request, Dest: int(r.dest) / MaxChannels, Channel: c.n,
		Handler: r.handler, Args: r.args, Length: int(r.length), Write: r.write, At: r.at}
	if r.dest == endpoint.NoIndex {
		ret.Dest = -1
	}
	ep.depth++
	ep.onReturn(ret)
	ep.depth--
}

// expiring reports whether a request has waited past Config.ReplyTimeout
// (the next Poll's reply timer returns it).
func (ep *Endpoint) expiring(now time.Time) bool {
	if ep.cfg.ReplyTimeout <= 0 {
		return false
	}
	for _, c := range ep.chans {
		done := c.view.Done()
		for i := range c.pending {
			p := &c.pending[i]
			if p.expired {
				continue
			}
			if p.seen == 0 {
				if int32(done-p.seq) > 0 {
					p.seen = stamp(now) // sent: its reply may come from now on
				}
			} else if p.waited(now) > ep.cfg.ReplyTimeout {
				ep.polls = replyCheckPolls - 1 // the next Poll looks
				return true
			}
		}
	}
	return false
}

// expire returns, to the error handler, the requests whose answer has not
// come within ReplyTimeout of the reply timer's first seeing them sent (a
// request still queued, behind others to a dead host say, is not timed),
// and returns how many.
func (ep *Endpoint) expire(now time.Time) int {
	n := 0
	for _, c := range ep.chans {
		done := c.view.Done()
		for i := 0; i < len(c.pending); i++ {
			p := &c.pending[i]
			if p.seen == 0 && int32(done-p.seq) > 0 {
				p.seen = stamp(now) // sent: its reply may come from now on
			}
			if p.expired || p.seen == 0 || p.waited(now) <= ep.cfg.ReplyTimeout {
				continue
			}
			// Handed over, and kept for its late answer (pendingRequest),
			// unless the peer restarted since it was sent: then none will
			// come.
			r := *p
			if p.write {
				c.writes--
			}
			p.expired = true
			c.expired++
			if p.inc != 0 && p.dest < uint32(len(ep.incs)) && ep.incs[p.dest] != p.inc {
				c.drop(i)
				i--
				ep.stats.Forgotten++
			}
			ep.stats.Unanswered++
			ep.giveBack(c, r, endpoint.ReasonNoReply, true)
			n++
		}
	}
	return n
}
