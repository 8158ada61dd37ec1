package amii

import (
	"bytes"
	"fmt"
	"slices"

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
// once more, so that their replies leave before Poll returns. It may not be
// called from a handler.
func (a *Endpoint) Poll() (int, error) {
	if err := a.enter(); err != nil {
		return 0, err
	}
	defer a.exit()
	return a.pollLocked()
}

// pollLocked is Poll, the lock (if Shared) held.
func (a *Endpoint) pollLocked() (int, error) {
	if err := a.usable(); err != nil {
		return 0, err
	}
	if a.depth > 0 {
		return 0, fmt.Errorf("%w: a handler may not poll", ErrDiscipline)
	}
	if a.poll != nil {
		if _, err := a.poll(); err != nil {
			return 0, err
		}
	}
	ran, took := 0, 0
	if a.polls++; a.polls%replyCheckPolls == 0 && a.pending.Len() > 0 && a.cfg.ReplyTimeout > 0 {
		n := a.expire()
		ran, took = n, n
	}
	defer func() {
		if took > 0 && a.changed != nil {
			close(a.changed) // wake the goroutines waiting for credits or messages
			a.changed = make(chan struct{})
		}
	}()
	requests := 0 // requests dispatched: each queued a reply, explicit or implicit
	for _, q := range [...]endpoint.Queue{endpoint.ReplyReceive, endpoint.RequestReceive} {
		for range a.entries {
			// Peek, run, Release: a medium message's bytes stay in place
			// while its handler runs.
			ok, err := a.view.Peek(q, &a.d)
			if err != nil {
				return ran, err
			}
			if !ok {
				break
			}
			n, err := a.dispatch(q)
			ran += n
			took++
			if q == endpoint.RequestReceive {
				requests++
			}
			if rerr := a.view.Release(q); err == nil {
				err = rerr
			}
			if err != nil {
				return ran, err
			}
		}
	}
	if err := a.sendNullReplies(); err != nil {
		return ran, err
	}
	if requests > 0 && a.poll != nil {
		// The replies leave now, as a request does (sent), not at the
		// next Poll: an application that polls now and then answers at
		// once.
		if _, err := a.poll(); err != nil {
			return ran, err
		}
	}
	return ran, nil
}

// dispatch handles a.d, just peeked from receive queue q.
func (a *Endpoint) dispatch(q endpoint.Queue) (int, error) {
	d := &a.d
	if reason, from, ok := d.ReturnInfo(); ok {
		return a.returned(reason, from == endpoint.RequestSend), nil
	}
	var data []byte
	switch d.Class {
	case endpoint.ClassShort:
	case endpoint.ClassMedium, endpoint.ClassBulk:
		b, err := a.view.Data(d)
		if err != nil {
			a.stats.Malformed++
			return 0, nil
		}
		data = b
	default:
		a.stats.Malformed++
		return 0, nil
	}
	if d.NArgs > MaxArgs {
		a.stats.Malformed++
		return 0, nil
	}
	request := q == endpoint.RequestReceive
	if !request && HandlerID(d.Handler) == NullReply {
		// An implicit reply answers as many requests as its first
		// argument says (one without arguments).
		n := uint64(1)
		if d.NArgs > 0 {
			n = min(d.Args[0], uint64(a.cfg.Credits))
		}
		for range n {
			if !a.answered(d.Dest, nil) {
				a.stats.LateReplies++
				break
			}
		}
		return 0, nil
	}
	if !request && !a.answered(d.Dest, nil) {
		a.stats.LateReplies++
	}
	copy(a.args[:], d.Args[:d.NArgs])
	a.tok = Token{a: a, src: d.Dest, request: request}
	ran := 0
	var h handler
	if int(d.Handler) < len(a.handlers) {
		h = a.handlers[d.Handler]
	}
	if h.medium == nil && (h.short == nil || d.Class != endpoint.ClassShort) {
		a.stats.HandlerErrors++
	} else {
		if request {
			a.stats.Handled++
		} else {
			a.stats.ReplyHandled++
		}
		a.run(h, int(d.NArgs), data)
		ran = 1
	}
	if request && !a.tok.replied && a.tok.src != endpoint.NoIndex && a.tok.src < uint32(len(a.owed)) {
		if a.owed[a.tok.src]++; a.owed[a.tok.src] == 1 {
			a.owedList = append(a.owedList, a.tok.src)
		}
		a.stats.NullReplies++
	}
	a.tok.a = nil // a token kept past its handler cannot reply
	return ran, nil
}

// sendNullReplies sends the implicit replies owed: one per requester, its
// first argument the number of its requests it answers.
func (a *Endpoint) sendNullReplies() error {
	for i, src := range a.owedList {
		a.nullArg[0] = uint64(a.owed[src])
		if err := a.send(endpoint.ReplySend, src, uint32(NullReply), a.nullArg[:]); err != nil {
			// What is left is owed still: sent by the next poll.
			a.owedList = a.owedList[:copy(a.owedList, a.owedList[i:])]
			return err
		}
		a.owed[src] = 0
		a.stats.NullReplyMessages++
	}
	a.owedList = a.owedList[:0]
	return nil
}

// answered removes the record of the request an answer (a reply from
// dest, or r, the request's return) ends: the oldest to dest, the one r
// names if r is given and it is found. It reports whether there was one.
func (a *Endpoint) answered(dest uint32, r *Returned) bool {
	at := -1
	for i := range a.pending.Len() {
		p := a.pending.at(i)
		if p.dest != dest {
			continue
		}
		if at < 0 {
			at = i
		}
		if r == nil || p.handler == uint32(r.Handler) && p.class == r.Class && slices.Equal(p.args[:p.nargs], r.Args) {
			at = i
			break
		}
	}
	if at < 0 && dest == endpoint.NoIndex && a.pending.Len() > 0 {
		at = 0 // a reply from outside the table answers the oldest
	}
	if at < 0 {
		return false
	}
	a.pending.remove(at)
	return true
}

// expire returns, to the error handler, the requests whose reply has not
// come within ReplyTimeout of the timers' first seeing them, and reports
// how many error handlers ran.
func (a *Endpoint) expire() int {
	now := a.cfg.Clock.Now()
	ran := 0
	a.pending.keep(func(p *pendingRequest) bool {
		if p.seen.IsZero() {
			p.seen = now
		}
		if now.Sub(p.seen) <= a.cfg.ReplyTimeout {
			return true
		}
		a.stats.Returned++
		a.stats.Unanswered++
		ran += a.handReturn(Returned{Reason: endpoint.ReasonNoReply, Request: true, Class: p.class, Dest: int(p.dest),
			Handler: HandlerID(p.handler), Args: slices.Clone(p.args[:p.nargs])})
		return false
	})
	return ran
}

// returned hands the returned message in a.d to the error handler.
func (a *Endpoint) returned(reason endpoint.Reason, request bool) int {
	d := &a.d
	r := Returned{Reason: reason, Request: request, Class: d.Class &^ endpoint.ClassReturned, Dest: int(d.Dest), Handler: HandlerID(d.Handler),
		Args: append([]uint64(nil), d.Args[:min(int(d.NArgs), MaxArgs)]...)}
	switch r.Class {
	case endpoint.ClassMedium:
		if b, err := a.view.Data(d); err == nil {
			r.Data = bytes.Clone(b)
		}
	case endpoint.ClassBulk:
		r.Offset, r.Length, r.RemoteOffset = d.Offset, d.Length, d.RemoteOffset
	}
	if r.Request {
		a.answered(d.Dest, &r)
	}
	a.stats.Returned++
	return a.handReturn(r)
}

// handReturn hands r to the error handler, if there is one.
func (a *Endpoint) handReturn(r Returned) int {
	if a.onReturn == nil {
		return 0
	}
	a.enterHandler()
	defer a.leave()
	a.onReturn(r)
	return 1
}

// run calls handler h with the discipline flag raised.
func (a *Endpoint) run(h handler, nargs int, data []byte) {
	a.enterHandler()
	defer a.leave()
	if h.medium != nil {
		h.medium(&a.tok, a.args[:nargs:nargs], data)
	} else {
		h.short(&a.tok, a.args[:nargs:nargs])
	}
}

// enterHandler raises the discipline flag (and, Shared, running) before
// a handler runs; leave lowers them after.
func (a *Endpoint) enterHandler() {
	a.depth++
	if a.cfg.Shared {
		a.running.Store(true)
	}
}

func (a *Endpoint) leave() {
	a.depth--
	if a.cfg.Shared {
		a.running.Store(false)
	}
}
