package amii

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// The receive side: Poll runs the engine (inline) and the handlers of
// what arrived, answers requests their handlers did not, and hands what
// came back, or went unanswered past the reply timeout, to the error
// handler.

// Poll runs the engine once (inline mode), then the handlers of the
// messages in the request and reply receive queues (at most a queue's worth
// of each), and returns the number of handlers run (error handler
// included). In inline mode, when request handlers ran, it runs the engine
// once more, so that their replies leave before Poll returns (unless they
// all left by the express path, with the acknowledgements owed); when
// messages wait already as it starts (a Wait has just run the engine), it
// runs their handlers first and the engine after them. Inline, every few
// Polls that run nothing yield the processor when another goroutine of the
// process waits for one, so a loop of Polls does not hold it against the
// goroutine it waits for. It may not be called from a handler.
func (ep *Endpoint) Poll() (int, error) {
	if ep.cfg.Shared {
		return ep.pollShared()
	}
	n, err := ep.pollLocked()
	if n == 0 && ep.poll != nil {
		ep.idle()
	}
	return n, err
}

// pollShared is Poll on a Shared endpoint: the lock held while it polls.
func (ep *Endpoint) pollShared() (int, error) {
	if err := ep.enter(); err != nil {
		return 0, err
	}
	defer ep.exit()
	n, err := ep.pollLocked()
	if n == 0 && ep.poll != nil {
		ep.idle()
	}
	return n, err
}

// idle counts an inline Poll that ran nothing. An application that polls
// in a loop holds its processor: now and then, when another goroutine
// waits for one, it lets it in (a host of the same process, say, that
// this one waits for).
func (ep *Endpoint) idle() {
	if ep.idlePolls++; ep.idlePolls%idleYieldEvery == 0 {
		endpoint.Gosched()
	}
}

// pollLocked is Poll, the lock (if Shared) held.
func (ep *Endpoint) pollLocked() (int, error) {
	ran, took, err := ep.pollRun()
	if took > 0 && ep.changed != nil {
		close(ep.changed) // wake the goroutines waiting for credits or messages
		ep.changed = make(chan struct{})
	}
	return ran, err
}

// pollRun is pollLocked but for the wake-up of the goroutines that wait:
// it also returns the number of messages taken from the receive queues
// (took).
func (ep *Endpoint) pollRun() (ran, took int, err error) {
	if err := ep.usable(); err != nil {
		return 0, 0, err
	}
	if ep.depth > 0 {
		return 0, 0, fmt.Errorf("%w: a handler may not poll", ErrDiscipline)
	}
	// The engine runs first unless messages wait already (a Wait just ran
	// it): the replies their handlers send then leave in the run at the
	// end with the acknowledgements owed, where a run before the handlers
	// would flush those in an ACK frame of their own.
	engineRan := false
	if ep.poll != nil && ep.view.Waiting(endpoint.ReplyReceive) == 0 && ep.view.Waiting(endpoint.RequestReceive) == 0 {
		if _, err := ep.runEngine(); err != nil {
			return 0, 0, err
		}
		engineRan = true
	}
	if ep.polls++; ep.polls%replyCheckPolls == 0 && ep.pending.Len() > 0 && ep.cfg.ReplyTimeout > 0 {
		n := ep.expire()
		ran, took = n, n
	}
	dispatched := 0 // requests dispatched: each queued a reply, explicit or implicit
	// Replies first, then requests.
	for q := endpoint.ReplyReceive; q >= endpoint.RequestReceive; q-- {
		if q == endpoint.RequestReceive && ep.express != nil {
			ep.batch = ep.view.Waiting(q) > 1
		}
		// At most a queue's worth, as many Peeks as wait, then the count
		// again: an empty queue costs no Peek (Peek reports an invalid
		// index).
		for budget := ep.entries; budget > 0; {
			k := min(ep.view.Waiting(q), uint32(budget))
			if k == 0 {
				break
			}
			budget -= int(k)
			for ; k > 0; k-- {
				// Peek, run, Release: a medium message's bytes stay in
				// place while its handler runs.
				ok, err := ep.view.Peek(q, &ep.d)
				if err != nil {
					return ran, took, err
				}
				if !ok {
					budget = 0
					break
				}
				n, err := ep.dispatch(q)
				ran += n
				took++
				if q == endpoint.RequestReceive {
					dispatched++
				}
				if rerr := ep.view.Release(q); err == nil {
					err = rerr
				}
				if err != nil {
					return ran, took, err
				}
			}
		}
	}
	if len(ep.owedList) > 0 {
		err = ep.sendNullReplies()
	}
	ep.batch = false // (an error above leaves it set: messages are queued until the next Poll's end)
	if err != nil {
		return ran, took, err
	}
	if ep.poll != nil && (dispatched > 0 && ep.mustRun() || !engineRan) {
		// The replies leave now, as a request does (sent), not at the
		// next Poll: an application that polls now and then answers at
		// once. Replies sent by the express path left already, with the
		// acknowledgements owed to their hosts.
		if _, err := ep.runEngine(); err != nil {
			return ran, took, err
		}
	}
	return ran, took, nil
}

// mustRun reports whether, requests having run their handlers, the engine
// must run for their replies (or the acknowledgements owed) to leave: some
// reply was queued, or acknowledgements are owed that the express path's
// replies did not carry.
func (ep *Endpoint) mustRun() bool {
	return ep.express == nil || ep.queued || ep.express.OwesAcks()
}

// dispatch handles ep.d, just peeked from receive queue q.
func (ep *Endpoint) dispatch(q endpoint.Queue) (int, error) {
	d := &ep.d
	if d.Incarnation != 0 {
		ep.heard(d.Dest, d.Incarnation)
	}
	if reason, from, ok := d.ReturnInfo(); ok {
		return ep.returned(reason, from == endpoint.RequestSend), nil
	}
	var data []byte
	switch d.Class {
	case endpoint.ClassShort:
	case endpoint.ClassMedium, endpoint.ClassBulk:
		b, err := ep.view.Data(d)
		if err != nil {
			ep.stats.Malformed++
			return 0, nil
		}
		data = b
	default:
		ep.stats.Malformed++
		return 0, nil
	}
	if d.NArgs > MaxArgs {
		ep.stats.Malformed++
		return 0, nil
	}
	request := q == endpoint.RequestReceive
	if !request && HandlerID(d.Handler) == NullReply {
		// An implicit reply answers as many requests as its first
		// argument says (one without arguments).
		n := uint64(1)
		if d.NArgs > 0 {
			n = min(d.Args[0], uint64(ep.cfg.Credits))
		}
		for range n {
			found, outstanding := ep.answered(d.Dest, nil)
			if !outstanding {
				ep.stats.LateReplies++
			}
			if !found {
				break
			}
		}
		return 0, nil
	}
	if !request {
		if _, outstanding := ep.answered(d.Dest, nil); !outstanding {
			ep.stats.LateReplies++
		}
	}
	ep.args = d.Args // the handler sees d.NArgs of them
	ep.tok = Token{a: ep, src: d.Dest, request: request}
	ran := 0
	var h handler
	if int(d.Handler) < len(ep.handlers) {
		h = ep.handlers[d.Handler]
	}
	if h.medium == nil && (h.short == nil || d.Class != endpoint.ClassShort) {
		ep.stats.HandlerErrors++
	} else {
		if request {
			ep.stats.Handled++
		} else {
			ep.stats.ReplyHandled++
		}
		ep.run(h, int(d.NArgs), data)
		ran = 1
	}
	if request && !ep.tok.replied && ep.tok.src != endpoint.NoIndex && ep.tok.src < uint32(len(ep.owed)) {
		if ep.owed[ep.tok.src]++; ep.owed[ep.tok.src] == 1 {
			ep.owedList = append(ep.owedList, ep.tok.src)
		}
		ep.stats.NullReplies++
	}
	ep.tok.a = nil // a token kept past its handler cannot reply
	return ran, nil
}

// sendNullReplies sends the implicit replies owed: one per requester, its
// first argument the number of its requests it answers.
func (ep *Endpoint) sendNullReplies() error {
	for i, src := range ep.owedList {
		ep.nullArg[0] = uint64(ep.owed[src])
		if err := ep.send(endpoint.ReplySend, src, uint32(NullReply), ep.nullArg[:]); err != nil {
			// What is left is owed still: sent by the next poll.
			ep.owedList = ep.owedList[:copy(ep.owedList, ep.owedList[i:])]
			return err
		}
		ep.owed[src] = 0
		ep.stats.NullReplyMessages++
	}
	ep.owedList = ep.owedList[:0]
	return nil
}

// answered removes the record of the request an answer (a reply from
// dest, or r, the request's return) ends: the oldest to dest, the one r
// names if r is given and it is found. It reports whether there was one,
// and whether it was outstanding (not past its reply timeout: handed to
// the error handler already).
func (ep *Endpoint) answered(dest uint32, r *Returned) (found, outstanding bool) {
	at, exact := -1, false
	sent := dest // a return names the index it was sent to (long form) or the first
	dest = ep.canonical(dest)
	for i := range ep.pending.Len() {
		p := ep.pending.at(i)
		if ep.canonical(p.dest) != dest {
			continue
		}
		if at < 0 || r != nil && p.dest == sent && ep.pending.at(at).dest != sent {
			at = i // the oldest, preferring one sent to the index named
		}
		if r == nil || p.handler == uint32(r.Handler) && p.class == r.Class && slices.Equal(p.args[:p.nargs], r.Args) {
			at, exact = i, true
			break
		}
	}
	if at < 0 && dest == endpoint.NoIndex && ep.pending.Len() > 0 {
		at = 0 // a reply from outside the table answers the oldest
	}
	if at < 0 {
		return false, false
	}
	p := ep.pending.at(at)
	if r != nil && exact && dest != endpoint.NoIndex {
		r.Dest = int(p.dest) // the index it was sent to
	}
	if outstanding = !p.expired; !outstanding {
		ep.expired--
	}
	ep.pending.remove(at)
	return true, outstanding
}

// heard notes the incarnation of the host of index dest, which a message
// from it carried (endpoint.Descriptor.Incarnation; 0: a return of this
// host's engine, which says nothing of it).
func (ep *Endpoint) heard(dest uint32, inc uint8) {
	if uint64(dest) >= uint64(len(ep.incs)) || ep.incs[dest] != inc {
		ep.incarnation(dest, inc)
	}
}

// incarnation is heard for an index first heard, or heard in another
// incarnation: a restart, after which the requests past their reply
// timeout that the old one took will never be answered.
func (ep *Endpoint) incarnation(dest uint32, inc uint8) {
	i := ep.canonical(dest)
	if i == endpoint.NoIndex || i >= ep.table {
		return
	}
	if len(ep.incs) == 0 {
		ep.incs = make([]uint8, ep.table)
	}
	old := ep.incs[i]
	ep.incs[i] = inc
	if old != 0 {
		ep.forget(i)
	}
}

// forget drops the records of requests to canonical index i past their
// reply timeout (handed to the error handler already), whose answers
// will not come: its host restarted or its endpoint closed.
func (ep *Endpoint) forget(i uint32) {
	if ep.expired == 0 {
		return
	}
	ep.pending.keep(func(p *pendingRequest) bool {
		if p.expired && ep.canonical(p.dest) == i {
			ep.expired--
			ep.stats.Forgotten++
			return false
		}
		return true
	})
}

// canonical returns the first index of the translation table that names
// the endpoint index i names. A table may name an endpoint more than once:
// a message from it, or one of ours coming back in the compact form
// (docs/wire.md), names its first index, and a request sent to another is
// answered by it all the same.
func (ep *Endpoint) canonical(i uint32) uint32 {
	if ep.canon != nil && uint64(i) < uint64(len(ep.canon)) {
		return ep.canon[i]
	}
	return i
}

// noteTable notes the endpoint's translation table: canon maps each index
// to its endpoint's first, where some endpoint is named twice (nil where
// none is).
func (ep *Endpoint) noteTable(table []Name) {
	first := make(map[Name]uint32, len(table))
	canon := make([]uint32, len(table))
	twice := false
	for i, n := range table {
		f, ok := first[n]
		if !ok {
			f = uint32(i)
			first[n] = f
		}
		canon[i], twice = f, twice || ok
	}
	if twice {
		ep.canon = canon
	}
}

// expiring is the reply timer's look from Wait: it stamps the requests it
// sees first, as expire does, and reports whether one has waited past
// ReplyTimeout (the next Poll's timer then returns it), else how long
// until the first will have (wait <= 0: none will).
func (ep *Endpoint) expiring(now time.Time) (due bool, wait time.Duration) {
	if ep.cfg.ReplyTimeout <= 0 {
		return false, 0
	}
	for i := range ep.pending.Len() {
		p := ep.pending.at(i)
		if p.expired {
			continue
		}
		if p.seen.IsZero() {
			p.seen = now
		}
		left := ep.cfg.ReplyTimeout - now.Sub(p.seen) + 1 // past it: expire's test
		if left <= 0 {
			ep.polls = replyCheckPolls - 1 // the next Poll looks
			return true, 0
		}
		if wait <= 0 || left < wait {
			wait = left
		}
	}
	return false, wait
}

// expire returns, to the error handler, the requests whose reply has not
// come within ReplyTimeout of the timers' first seeing them, and reports
// how many error handlers ran.
func (ep *Endpoint) expire() int {
	now := ep.cfg.Clock.Now()
	ran := 0
	var late []Returned // handed over once the records are kept: a handler may send
	ep.pending.keep(func(p *pendingRequest) bool {
		if p.expired {
			return true
		}
		if p.seen.IsZero() {
			p.seen = now
		}
		if now.Sub(p.seen) <= ep.cfg.ReplyTimeout {
			return true
		}
		ep.stats.Returned++
		ep.stats.Unanswered++
		late = append(late, Returned{Reason: endpoint.ReasonNoReply, Request: true, Class: p.class, Dest: int(p.dest),
			Handler: HandlerID(p.handler), Args: slices.Clone(p.args[:p.nargs])})
		// Kept for its late answer, unless its destination restarted
		// since it was sent: then none will come.
		if i := ep.canonical(p.dest); p.inc != 0 && uint64(i) < uint64(len(ep.incs)) && ep.incs[i] != p.inc {
			ep.stats.Forgotten++
			return false
		}
		p.expired = true
		ep.expired++
		return true
	})
	for _, r := range late {
		ran += ep.handReturn(r)
	}
	return ran
}

// returned hands the returned message in ep.d to the error handler.
func (ep *Endpoint) returned(reason endpoint.Reason, request bool) int {
	d := &ep.d
	r := Returned{Reason: reason, Request: request, Class: d.Class &^ endpoint.ClassReturned, Dest: int(d.Dest), Handler: HandlerID(d.Handler),
		Args: append([]uint64(nil), d.Args[:min(int(d.NArgs), MaxArgs)]...)}
	switch r.Class {
	case endpoint.ClassMedium:
		if b, err := ep.view.Data(d); err == nil {
			r.Data = bytes.Clone(b)
		}
	case endpoint.ClassBulk:
		r.Offset, r.Length, r.RemoteOffset = d.Offset, d.Length, d.RemoteOffset
	}
	if r.Request {
		_, outstanding := ep.answered(d.Dest, &r)
		switch reason {
		case endpoint.ReasonRestarted, endpoint.ReasonClosed, endpoint.ReasonNoEndpoint, endpoint.ReasonNoHost:
			// What the destination took before will never be answered.
			ep.forget(ep.canonical(d.Dest))
		}
		if !outstanding {
			// Handed to the error handler already, past its reply
			// timeout (its record kept, or forgotten since: none left
			// for it): a request comes back at most once.
			ep.stats.LateReplies++
			return 0
		}
	}
	ep.stats.Returned++
	return ep.handReturn(r)
}

// handReturn hands r to the error handler, if there is one.
func (ep *Endpoint) handReturn(r Returned) int {
	if ep.onReturn == nil {
		return 0
	}
	ep.enterHandler()
	defer ep.leave()
	ep.onReturn(r)
	return 1
}

// run calls handler h with the discipline flag raised.
func (ep *Endpoint) run(h handler, nargs int, data []byte) {
	ep.enterHandler()
	defer ep.leave()
	if h.medium != nil {
		h.medium(&ep.tok, ep.args[:nargs:nargs], data)
	} else {
		h.short(&ep.tok, ep.args[:nargs:nargs])
	}
}

// enterHandler raises the discipline flag (and, Shared, running) before
// a handler runs; leave lowers them after.
func (ep *Endpoint) enterHandler() {
	ep.depth++
	if ep.cfg.Shared {
		ep.running.Store(true)
	}
}

func (ep *Endpoint) leave() {
	ep.depth--
	if ep.cfg.Shared {
		ep.running.Store(false)
	}
}
