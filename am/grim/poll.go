package grim

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// Running an endpoint: Poll runs the engine (inline) and then the
// handlers of what arrived on every channel; Wait waits for the next
// message; the layer answers a request its handler did not.

// Wait waits until a message has arrived on one of the endpoint's
// channels or timeout passes, and reports whether one may have (a true
// may be spurious: Poll and wait again). In firmware mode it sleeps on the
// daemon's notifications, leaving the core to the engine and other
// endpoints; in inline mode nothing moves unless the engine runs, so it
// runs the engine (and the reply timer) until a message is there, yielding
// the processor between runs. It may not be called from a handler.
func (ep *Endpoint) Wait(timeout time.Duration) (ready bool, err error) {
	if err := ep.usable(); err != nil {
		return false, err
	}
	if ep.depth > 0 {
		return false, fmt.Errorf("%w: a handler may not wait", ErrDiscipline)
	}
	if ep.block == nil {
		return ep.waitInline(timeout)
	}
	if ep.spin(min(timeout, ep.cfg.Spin)) {
		return true, nil
	}
	for _, c := range ep.chans {
		ready = ready || c.view.Arm(endpoint.EventRequest|endpoint.EventReply) != 0
	}
	if !ready {
		if err = ep.block(timeout); ep.gone != nil {
			err = ep.gone
		}
		for _, c := range ep.chans {
			ready = ready || c.view.Ready()&(endpoint.EventRequest|endpoint.EventReply) != 0
		}
	}
	for _, c := range ep.chans {
		c.view.Arm(0)
	}
	return ready, err
}

// waitInline is Wait in inline mode: the engine runs until a receive
// queue holds a message, the reply timer expires a request (its error
// handler is then due), or timeout passes.
func (ep *Endpoint) waitInline(timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	for n := 0; ; n++ {
		if ep.ready() {
			return true, nil
		}
		if _, err := ep.runEngine(); err != nil {
			return false, err
		}
		if ep.ready() {
			return true, nil
		}
		if n%64 == 63 {
			if ep.expiring(time.Now()) {
				return true, nil
			}
			if time.Now().After(deadline) {
				return false, nil
			}
			// Now and then only, and only when another goroutine
			// waits for the processor (endpoint.Gosched).
			endpoint.Gosched()
		}
	}
}

// idleYieldEvery is how many inline Polls that run nothing pass between
// two looks for goroutines that wait for the processor (endpoint.Gosched):
// a look reads the scheduler's counts, about 100 ns, which a loop of Polls
// waiting for a reply from another host pays every few microseconds.
// Where the hosts of one process outnumber the processors, a message
// between two of them waits for such a yield: a few hundred Polls, not the
// scheduler's 10 ms.
const idleYieldEvery = 256

// spin looks at the channels' receive queues for up to d (Yielder.Spin:
// its yields go on from the last spin's).
func (ep *Endpoint) spin(d time.Duration) bool { return ep.yield.Spin(d, ep.ready, nil) }

// ready reports whether a receive queue of a channel holds a message (or,
// with arrival bits, may: a message already taken leaves its bit set
// until the next Poll).
func (ep *Endpoint) ready() bool {
	if ep.arrivals != nil {
		for i := range ep.arrWords {
			if w := &ep.arrWords[i]; ep.arrivals.Arrivals(w.bit)&w.mask != 0 {
				return true
			}
		}
		return false
	}
	for _, c := range ep.chans {
		if c.view.Ready() != 0 {
			return true
		}
	}
	return false
}

// QueueState describes each channel's queues (descriptors put and taken),
// the requests the engine is done with (endpoint.View.Done), the requests
// outstanding and, where the channels share a page of doorbells, each
// channel's arrival bit: what a wait that timed out found. A timeout
// error of Publish and the other waits ends with it.
func (ep *Endpoint) QueueState() string {
	var b strings.Builder
	for i, c := range ep.chans {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "channel %d:", c.n)
		for _, q := range [...]endpoint.Queue{endpoint.RequestSend, endpoint.ReplySend, endpoint.RequestReceive, endpoint.ReplyReceive} {
			put, taken := c.view.Progress(q)
			fmt.Fprintf(&b, " %v %d/%d,", q, put, taken)
		}
		fmt.Fprintf(&b, " done %d, %d outstanding, %d past their reply timeout", c.view.Done(), c.Outstanding(), c.expired)
		if ep.arrivals != nil {
			fmt.Fprintf(&b, ", arrival bit %d set %v", c.bit, ep.arrived(c))
		}
	}
	return b.String()
}

// arrived reports whether c's arrival bit is set.
func (ep *Endpoint) arrived(c *Channel) bool {
	return ep.arrivals.Arrivals(c.bit)&(1<<(c.bit%64)) != 0
}

// replyCheckPolls is how often (in Polls) the reply timer looks at the
// requests outstanding.
const replyCheckPolls = 64

// Poll runs the engine and the handlers of what arrived on every channel
// (and the error handler for what came back, or went unanswered past
// Config.ReplyTimeout), and returns how many ran. Inline, the engine runs
// before the handlers (unless messages wait already) and after them if
// they answered requests, so that the replies leave in this Poll; and
// every few Polls that run nothing yield the processor when another
// goroutine of the process waits for one, so a loop of Polls does not hold
// it against the goroutine it waits for.
func (ep *Endpoint) Poll() (int, error) {
	if err := ep.usable(); err != nil {
		return 0, err
	}
	if ep.depth > 0 {
		return 0, fmt.Errorf("%w: a handler may not poll", ErrDiscipline)
	}
	// The engine runs first unless messages wait already (a Wait just ran
	// it): their handlers' replies then leave in the run at the end,
	// carrying the acknowledgements owed, where a run before them would
	// flush those in an ACK frame of their own.
	ran := false
	if ep.eng != nil && !ep.ready() {
		if _, err := ep.runEngine(); err != nil {
			return 0, err
		}
		ran = true
	}
	if ep.deferred > 0 {
		for _, c := range ep.chans {
			if len(c.replies) > 0 {
				if err := c.flushReplies(); err != nil {
					return 0, err
				}
			}
		}
	}
	n, requests := 0, 0
	if ep.arrivals == nil {
		for _, c := range ep.chans {
			if err := ep.pollChannel(c, &n, &requests); err != nil {
				return n, err
			}
		}
	}
	for i := range ep.arrWords {
		// The channels whose bits are set, in order; the word is read
		// again after each, so that what a handler's message made arrive
		// on a later channel is taken in this Poll too. A bit is cleared
		// before its channel's queues are taken: an arrival meanwhile
		// sets it again.
		w := &ep.arrWords[i]
		var seen uint64 // the bits visited, and those below them
		for {
			v := ep.arrivals.Arrivals(w.bit) & w.mask &^ seen
			if v == 0 {
				break
			}
			b := bits.TrailingZeros64(v)
			seen |= uint64(2)<<b - 1
			c := ep.chans[w.chanAt[b]]
			ep.arrivals.ClearArrival(c.bit)
			if err := ep.pollChannel(c, &n, &requests); err != nil {
				ep.arrivals.Arrive(c.bit) // what is left is looked at again
				return n, err
			}
		}
	}
	if ep.polls++; ep.polls%replyCheckPolls == 0 && ep.cfg.ReplyTimeout > 0 {
		n += ep.expire(time.Now())
	}
	if ep.push {
		if err := ep.pushTable(); err != nil {
			return n, err
		}
	}
	if ep.eng != nil && (requests > 0 && (ep.queued || ep.eng.OwesAcks()) || !ran) {
		// The replies leave now, not at the next Poll (as AM-II's do): a
		// server that polls now and then answers at once. Those that left
		// by the express path went with the acknowledgements owed to
		// their hosts.
		if _, err := ep.runEngine(); err != nil {
			return n, err
		}
	}
	if n == 0 && ep.eng != nil {
		// An application that polls in a loop holds its processor: now
		// and then, when another goroutine waits for one, it lets it in
		// (a host of the same process, say, that this one waits for).
		if ep.idles++; ep.idles%idleYieldEvery == 0 {
			endpoint.Gosched()
		}
	}
	return n, nil
}

// pollChannel runs the handlers of what c's receive queues hold, requests
// first, adding them to *n and the requests among them to *requests.
func (ep *Endpoint) pollChannel(c *Channel, n, requests *int) error {
	// The first request of this Poll, alone in its queue: its reply may
	// leave at once by the express path. The replies to several leave
	// together at the end. A queue found empty costs no dispatch.
	if w := c.view.Waiting(endpoint.RequestReceive); w > 0 {
		ep.expressReply = ep.eng != nil && *requests == 0 && w == 1
		k, err := ep.dispatch(c, endpoint.RequestReceive, w)
		ep.expressReply = false
		*n, *requests = *n+k, *requests+k
		if err != nil {
			return err
		}
	}
	w := c.view.Waiting(endpoint.ReplyReceive)
	if w == 0 {
		return nil
	}
	k, err := ep.dispatch(c, endpoint.ReplyReceive, w)
	*n += k
	return err
}

// runEngine runs the inline engine once.
func (ep *Endpoint) runEngine() (int, error) {
	ep.queued = false
	return ep.eng.Poll()
}

// dispatch runs the handlers of what receive queue q of c holds, where
// k wait (the caller's count).
func (ep *Endpoint) dispatch(c *Channel, q endpoint.Queue, k uint32) (int, error) {
	n := 0
	d := &ep.d // Peek writes all of it
	for {
		// As many Peeks as wait, then the count again: an empty queue
		// costs no Peek (Peek reports an invalid index). Poll found the
		// endpoint open, and its channels close with it.
		if n > 0 {
			k = c.view.Waiting(q)
		}
		if k == 0 {
			return n, nil
		}
		for ; k > 0; k-- {
			ok, err := c.view.Peek(q, d)
			if err != nil || !ok {
				return n, err
			}
			if d.Incarnation != 0 {
				ep.heard(d.Dest, d.Incarnation)
			}
			if reason, from, returned := d.ReturnInfo(); returned {
				ep.returned(c, d, reason, from == endpoint.RequestSend)
				n++
			} else {
				var data []byte
				if d.Class == endpoint.ClassBulk {
					if data, err = c.view.Data(d); err != nil {
						return n, err
					}
				}
				ep.run(c, q, d, data)
				n++
			}
			if err := c.view.Release(q); err != nil {
				return n, err
			}
		}
	}
}

// run runs the handler d names, and answers a request its handler did not.
func (ep *Endpoint) run(c *Channel, q endpoint.Queue, d *endpoint.Descriptor, data []byte) {
	args := unpackArgs(d)
	h := HandlerID(d.Handler)
	if d.Dest == endpoint.NoIndex {
		// Not one of Config.Peers (its tag let it reach the engine
		// endpoint): no handler runs for it, nothing answers it.
		ep.stats.Strangers++
		return
	}
	wrote := false // the reply answers a memory write
	if q == endpoint.ReplyReceive {
		if h == HandlerNoHandler {
			if req, answered := c.answered(d.Dest, nil); !answered || req.expired {
				ep.stats.LateReplies++
			} else {
				ep.giveBack(c, req, endpoint.ReasonNoHandler, true)
			}
			return
		}
		answered := false
		if answered, wrote = c.replied(d.Dest); !answered {
			ep.stats.LateReplies++
		}
	}
	// Handlers do not nest (Poll refuses to run inside one), so one Token
	// serves every message.
	tok := &ep.tok
	tok.ep, tok.ch, tok.src, tok.request, tok.replied = ep, c, d.Dest, q == endpoint.RequestReceive, false // (field by field: no literal built aside)
	ep.depth++
	switch h {
	case HandlerRegister:
		switch {
		case !tok.request && d.Dest/MaxChannels != 0:
			ep.stats.Refused++ // only the central endpoint answers a Publish
		case !tok.request:
			ep.publishAnswered(args)
		case ep.registry != nil:
			ep.registry.merge(ep, tok, data)
		default:
			ep.stats.Refused++ // a registration for an endpoint that keeps no registry
		}
	case HandlerTable:
		if d.Dest/MaxChannels != 0 {
			ep.stats.Refused++ // only the central endpoint sends tables
			break
		}
		ep.tableArrived(args, data)
	case HandlerMemory:
		if !tok.request {
			if wrote {
				ep.stats.Completed++
			}
			tok.replied = true
		}
	case HandlerNull, HandlerNoHandler:
	default:
		if f := ep.handler(h); f != nil {
			f(tok, args, data)
			if tok.request {
				ep.stats.Handled++
			} else {
				ep.stats.ReplyHandled++
			}
		} else if tok.request {
			ep.stats.HandlerErrors++
			h = HandlerNoHandler // answered so: the requester's error handler hears of it
		}
	}
	if tok.request && !tok.replied && d.Dest != endpoint.NoIndex {
		// Memory messages' completions, and the null reply that keeps
		// request/reply: HandlerMemory answers HandlerMemory, a request
		// for a handler not registered here HandlerNoHandler. Still at
		// handler depth: a full reply queue does not run the engine (and
		// this message's handler again) from here, the reply waits for
		// the next Poll.
		r := HandlerNull
		switch h {
		case HandlerMemory, HandlerNoHandler:
			r = h
		}
		if tok.send(r, nil) == nil { // a lost one times the requester out
			ep.stats.NullReplies++
		}
	}
	ep.depth--
}

// Drain polls (running the engine inline, handlers in both modes) until
// every request of every channel has been answered or returned, memory
// messages completed included, or until timeout (then ErrTimeout). It may
// not be called from a handler.
func (ep *Endpoint) Drain(timeout time.Duration) error {
	if ep.depth > 0 && ep.usable() == nil {
		return fmt.Errorf("%w: a handler may not drain", ErrDiscipline)
	}
	return ep.runFor(timeout, func() bool {
		return !slices.ContainsFunc(ep.chans, func(c *Channel) bool { return c.Outstanding() > 0 })
	},
		func() string { return "requests unanswered" })
}

// runUntil runs the engine and the handlers until done holds, for at most
// Config.GiveUp (then ErrTimeout, with what). A handler must not run the
// engine: from one it is ErrBusy unless done already holds.
func (ep *Endpoint) runUntil(done func() bool, what func() string) error {
	return ep.runFor(ep.cfg.GiveUp, done, what)
}

// runFor is runUntil for at most timeout.
func (ep *Endpoint) runFor(timeout time.Duration, done func() bool, what func() string) error {
	if err := ep.usable(); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	var pause endpoint.Backoff
	for !done() {
		if ep.depth > 0 {
			return ErrBusy
		}
		n, err := ep.Poll()
		if err != nil {
			return err
		}
		now := time.Now()
		if now.After(deadline) {
			return fmt.Errorf("%w: %s (%s)", ErrTimeout, what(), ep.QueueState())
		}
		if err := ep.alive(); err != nil {
			return err
		}
		if err := ep.rest(n, &pause, deadline.Sub(now)); err != nil {
			return err
		}
	}
	return nil
}

// rest is what a long wait (runFor, a full queue in Channel.send) does
// after a Poll that did n things, with left until its deadline. Inline,
// nothing: Poll ran the engine. In firmware mode a Poll that found nothing
// is followed by a sleep on the channels' notifications (after Wait's
// spin) of pause's next length, and pause starts again once a Poll finds
// work: what a wait waits for mostly arrives (a reply, a table), and what
// does not notify (the engine done with a request, for reserve; a
// descriptor taken, for a full queue) is looked at again after the pause.
// A spinning wait would hold a core for as long as the wait lasts, which
// on a loaded machine starves the daemon it waits for.
func (ep *Endpoint) rest(n int, pause *endpoint.Backoff, left time.Duration) error {
	if ep.block == nil {
		return nil
	}
	if n > 0 {
		pause.Reset()
		return nil
	}
	_, err := ep.Wait(pause.Next(left))
	return err
}
