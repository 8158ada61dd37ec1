package amii

import (
	"errors"
	"fmt"
	"time"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// The send side: requests (short, medium, bulk Stores) within the
// endpoint's credits, replies, the medium slots their bytes are staged
// in, and the wait for room in the send queues.

// Request sends a request with up to MaxArgs arguments to handler h at the
// endpoint of index dest in the translation table; in inline mode it leaves
// before Request returns (by the express path, or queued, the engine then
// running once: see the package documentation). With no credit left it polls (running handlers) until a
// reply or a return gives one back, for at most the give-up time. It may
// not be called from a handler.
func (ep *Endpoint) Request(dest int, h HandlerID, args ...uint64) error {
	if ep.cfg.Shared { // (only then: a defer that does nothing still costs)
		if err := ep.enter(); err != nil {
			return err
		}
		defer ep.exit()
	}
	if err := ep.checkRequest(dest, args); err != nil {
		return err
	}
	if err := ep.waitCredit(); err != nil {
		return err
	}
	if err := ep.send(endpoint.RequestSend, uint32(dest), uint32(h), args); err != nil {
		return err
	}
	return ep.sent(endpoint.ClassShort, uint32(dest), uint32(h), args)
}

// RequestMedium is Request with up to endpoint.MaxMedium bytes of data, which
// it copies into a medium slot (waiting for one, as for a credit); the
// caller may reuse data at once. Without data it sends a short request.
func (ep *Endpoint) RequestMedium(dest int, h HandlerID, data []byte, args ...uint64) error {
	if err := ep.enter(); err != nil {
		return err
	}
	defer ep.exit()
	if err := ep.checkRequest(dest, args); err != nil {
		return err
	}
	if len(data) > endpoint.MaxMedium {
		return fmt.Errorf("%w: %d bytes, a medium message carries at most %d", ErrTooLarge, len(data), endpoint.MaxMedium)
	}
	if err := ep.waitCredit(); err != nil {
		return err
	}
	var err error
	if len(data) > 0 {
		err = ep.sendMedium(endpoint.RequestSend, uint32(dest), uint32(h), data, args)
	} else {
		err = ep.send(endpoint.RequestSend, uint32(dest), uint32(h), args)
	}
	if err != nil {
		return err
	}
	class := endpoint.ClassShort
	if len(data) > 0 {
		class = endpoint.ClassMedium
	}
	return ep.sent(class, uint32(dest), uint32(h), args)
}

// Bulk is a bulk request (Store): Length bytes at Local in the sender's
// part of the staging area (Staging), stored at Remote in the staging area
// of the endpoint of index Dest, whose Handler (a MediumHandler) then runs
// with them and Args.
type Bulk struct {
	Dest                  int
	Local, Remote, Length uint32
	Handler               HandlerID
	Args                  []uint64
}

// Store sends bulk request b: its bytes are stored at the receiver, and
// then its handler runs there with them and its arguments. The region must
// stay unchanged until the request is answered or returned. A region that
// does not fit at the receiver comes back with ReasonRange. Otherwise
// Store is Request.
func (ep *Endpoint) Store(b Bulk) error {
	return ep.store(b.Dest, b.Local, b.Remote, b.Length, uint32(b.Handler), b.Args...)
}

func (ep *Endpoint) store(dest int, localOffset, remoteOffset, length uint32, handler uint32, args ...uint64) error {
	if err := ep.enter(); err != nil {
		return err
	}
	defer ep.exit()
	if err := ep.checkRequest(dest, args); err != nil {
		return err
	}
	if length == 0 || uint64(localOffset)+uint64(length) > uint64(ep.slotBase) {
		return fmt.Errorf("%w: %d bytes at %d, the application's part holds %d", ErrBadRegion, length, localOffset, ep.slotBase)
	}
	if err := ep.waitCredit(); err != nil {
		return err
	}
	d := endpoint.Descriptor{Class: endpoint.ClassBulk, NArgs: uint8(len(args)), Dest: uint32(dest), Handler: handler,
		Offset: localOffset, Length: length, RemoteOffset: remoteOffset}
	putArgs(&d.Args, args)
	if err := ep.sendDescriptor(endpoint.RequestSend, &d); err != nil {
		return err
	}
	ep.stats.Stores++
	return ep.sent(endpoint.ClassBulk, uint32(dest), handler, args)
}

// checkRequest checks what every request checks.
func (ep *Endpoint) checkRequest(dest int, args []uint64) error {
	if err := ep.usable(); err != nil {
		return err
	}
	switch {
	case ep.depth > 0:
		return fmt.Errorf("%w: a handler may not send a request", ErrDiscipline)
	case len(args) > MaxArgs:
		return fmt.Errorf("%w: %d arguments, a message carries at most %d", ErrTooLarge, len(args), MaxArgs)
	case dest < 0 || dest >= int(ep.table):
		return fmt.Errorf("%w: %d (the table has %d entries)", ErrBadDest, dest, ep.table)
	}
	return nil
}

// waitCredit polls, running handlers, until a credit is free, for at most
// the give-up time; in firmware mode it blocks (Wait) while nothing comes.
func (ep *Endpoint) waitCredit() error {
	if ep.outstanding() < ep.cfg.Credits {
		return nil
	}
	start := ep.cfg.Clock.Now()
	for {
		n, err := ep.pollLocked()
		if err != nil {
			return err
		}
		if ep.outstanding() < ep.cfg.Credits {
			return nil
		}
		now := ep.cfg.Clock.Now()
		left := ep.cfg.GiveUp - now.Sub(start)
		if left < 0 {
			// Past the default GiveUp, the reply timer still gives a
			// credit back within ReplyTimeout (a request unanswered
			// comes back): wait for it.
			due, until := false, time.Duration(0)
			if ep.creditWait {
				due, until = ep.expiring(now)
			}
			if !due && until <= 0 {
				return fmt.Errorf("%w: %d requests unanswered for %v", ErrTimeout, ep.outstanding(), ep.cfg.GiveUp)
			}
			left = until + time.Millisecond
		}
		if n == 0 && ep.poll == nil {
			if err := ep.waitLocked(left); err != nil && !errors.Is(err, ErrTimeout) {
				return err
			}
		} else if n == 0 {
			ep.letOthersIn()
		}
	}
}

// sent counts a request just sent (its record, for an answer or a return
// to find) and, in inline mode, runs the engine once if it was queued, so
// that it leaves at once.
func (ep *Endpoint) sent(class endpoint.Class, dest, handler uint32, args []uint64) error {
	p := pendingRequest{class: class, dest: dest, handler: handler, nargs: uint8(len(args))}
	putArgs(&p.args, args)
	if i := ep.canonical(dest); uint64(i) < uint64(len(ep.incs)) {
		p.inc = ep.incs[i]
	}
	ep.pending.push(p)
	ep.stats.Requests++
	if ep.poll == nil || ep.cfg.Coalesce || !ep.queued {
		return nil // firmware mode, coalescing, or it left by the express path
	}
	_, err := ep.runEngine()
	return err
}

// runEngine runs the inline engine once.
func (ep *Endpoint) runEngine() (int, error) {
	ep.queued = false
	if ep.express != nil {
		return ep.express.Poll() // the engine's own Poll: a direct call
	}
	return ep.poll()
}

// send sends a short message from send queue q: by the express path when
// the engine takes it (inline mode), else into the queue.
func (ep *Endpoint) send(q endpoint.Queue, dest, handler uint32, args []uint64) error {
	d := endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: uint8(len(args)), Dest: dest, Handler: handler}
	putArgs(&d.Args, args)
	if ep.express != nil && !ep.queued && !ep.batch {
		if ok, err := ep.express.Express(ep.expressID, q, &d); ok || err != nil {
			if ok {
				ep.stats.Express++
			}
			return err
		}
	}
	return ep.sendDescriptor(q, &d)
}

// sendMedium copies data into a medium slot and puts the medium message
// into send queue q.
func (ep *Endpoint) sendMedium(q endpoint.Queue, dest, handler uint32, data []byte, args []uint64) error {
	slot, err := ep.slot(q)
	if err != nil {
		return err
	}
	off := ep.slotBase + slot*endpoint.MaxMedium
	copy(ep.view.Staging()[off:off+endpoint.MaxMedium], data)
	d := endpoint.Descriptor{Class: endpoint.ClassMedium, NArgs: uint8(len(args)), Dest: dest, Handler: handler,
		Offset: uint32(off), Length: uint32(len(data))}
	putArgs(&d.Args, args)
	if err := ep.sendDescriptor(q, &d); err != nil {
		ep.free = append(ep.free, slot)
		return err
	}
	put, _ := ep.view.Progress(q)
	ep.used = append(ep.used, slotUse{slot: slot, q: q, pos: put - 1})
	ep.stats.Mediums++
	return nil
}

// slot returns a free medium slot for a message into send queue q, waiting
// for the engine to take a message out of one, for at most the give-up
// time. Requests hold at most all slots but one.
func (ep *Endpoint) slot(q endpoint.Queue) (int, error) {
	if ep.cfg.MediumSlots == 0 {
		return 0, ErrNoMediumSlots
	}
	var start time.Time
	var pause endpoint.Backoff
	for {
		ep.reclaim()
		if len(ep.free) > 0 && (q == endpoint.ReplySend || ep.requestSlots() < max(1, ep.cfg.MediumSlots-1)) {
			s := ep.free[len(ep.free)-1]
			ep.free = ep.free[:len(ep.free)-1]
			return s, nil
		}
		now := ep.cfg.Clock.Now()
		if start.IsZero() {
			start = now
		} else if now.Sub(start) > ep.cfg.GiveUp {
			return 0, fmt.Errorf("%w: no medium slot free for %v", ErrTimeout, ep.cfg.GiveUp)
		}
		if err := ep.step(now.Sub(start), &pause); err != nil {
			return 0, err
		}
	}
}

// reclaim frees the medium slots whose messages the engine has taken.
func (ep *Endpoint) reclaim() {
	j := 0
	for _, u := range ep.used {
		if _, taken := ep.view.Progress(u.q); int32(taken-u.pos) > 0 {
			ep.free = append(ep.free, u.slot)
			continue
		}
		ep.used[j] = u
		j++
	}
	ep.used = ep.used[:j]
}

// requestSlots returns the medium slots held by requests.
func (ep *Endpoint) requestSlots() int {
	n := 0
	for _, u := range ep.used {
		if u.q == endpoint.RequestSend {
			n++
		}
	}
	return n
}

// sendDescriptor puts d into send queue q, letting the engine run while
// the queue is full, for at most the give-up time.
func (ep *Endpoint) sendDescriptor(q endpoint.Queue, d *endpoint.Descriptor) error {
	var start time.Time
	var pause endpoint.Backoff
	for {
		err := ep.view.Send(q, d)
		if err == nil {
			ep.queued = true
		}
		if !errors.Is(err, endpoint.ErrQueueFull) {
			return err
		}
		now := ep.cfg.Clock.Now()
		if start.IsZero() {
			start = now
		} else if now.Sub(start) > ep.cfg.GiveUp {
			return fmt.Errorf("%w: %v queue full for %v", ErrTimeout, q, ep.cfg.GiveUp)
		}
		if err := ep.step(now.Sub(start), &pause); err != nil {
			return err
		}
	}
}

// step lets the engine move on while a send waits for room (a medium
// slot, a queue entry), waited so far, pause the wait's sleeps: in inline
// mode it runs the engine once. In firmware mode it yields the processor
// for the wait's first Config.Spin, then sleeps as pause says
// (endpoint.Backoff), never past Config.GiveUp: room comes when the
// daemon takes a descriptor, which notifies nothing and which a window
// full of messages to a slow peer can hold up for long, and a wait that
// yielded for all of Config.GiveUp would hold a core that the daemon, on
// a loaded machine, needs to make the room.
func (ep *Endpoint) step(waited time.Duration, pause *endpoint.Backoff) error {
	if ep.poll != nil {
		_, err := ep.runEngine()
		ep.letOthersIn()
		return err
	}
	if waited < ep.cfg.Spin {
		ep.unlocked(func() {
			endpoint.Gosched()
			endpoint.Yield()
		})
		return nil
	}
	d := pause.Next(ep.cfg.GiveUp - waited)
	ep.unlocked(func() { time.Sleep(d) })
	return nil
}

// putArgs puts args, at most MaxArgs (checked), at the start of a. A loop:
// a copy of two or four arguments is a call of its own.
func putArgs(a *[MaxArgs]uint64, args []uint64) {
	for i, x := range args {
		a[i] = x
	}
}
