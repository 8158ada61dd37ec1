package amii

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// The send side: requests (short, medium, bulk Stores) within the
// endpoint's credits, replies, the medium slots their bytes are staged
// in, and the wait for room in the send queues.

// Request sends a request with up to MaxArgs arguments to handler h at the
// endpoint of index dest in the translation table, then (inline mode) runs
// the engine once. With no credit left it polls (running handlers) until a
// reply or a return gives one back, for at most the give-up time. It may
// not be called from a handler.
func (a *Endpoint) Request(dest int, h HandlerID, args ...uint64) error {
	if err := a.enter(); err != nil {
		return err
	}
	defer a.exit()
	if err := a.checkRequest(dest, args); err != nil {
		return err
	}
	if err := a.waitCredit(); err != nil {
		return err
	}
	if err := a.send(endpoint.RequestSend, uint32(dest), uint32(h), args); err != nil {
		return err
	}
	return a.sent(endpoint.ClassShort, uint32(dest), uint32(h), args)
}

// RequestMedium is Request with up to endpoint.MaxMedium bytes of data, which
// it copies into a medium slot (waiting for one, as for a credit); the
// caller may reuse data at once. Without data it sends a short request.
func (a *Endpoint) RequestMedium(dest int, h HandlerID, data []byte, args ...uint64) error {
	if err := a.enter(); err != nil {
		return err
	}
	defer a.exit()
	if err := a.checkRequest(dest, args); err != nil {
		return err
	}
	if len(data) > endpoint.MaxMedium {
		return fmt.Errorf("%w: %d bytes, a medium message carries at most %d", ErrTooLarge, len(data), endpoint.MaxMedium)
	}
	if err := a.waitCredit(); err != nil {
		return err
	}
	var err error
	if len(data) > 0 {
		err = a.sendMedium(endpoint.RequestSend, uint32(dest), uint32(h), data, args)
	} else {
		err = a.send(endpoint.RequestSend, uint32(dest), uint32(h), args)
	}
	if err != nil {
		return err
	}
	class := endpoint.ClassShort
	if len(data) > 0 {
		class = endpoint.ClassMedium
	}
	return a.sent(class, uint32(dest), uint32(h), args)
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
func (a *Endpoint) Store(b Bulk) error {
	return a.store(b.Dest, b.Local, b.Remote, b.Length, uint32(b.Handler), b.Args...)
}

func (a *Endpoint) store(dest int, localOffset, remoteOffset, length uint32, handler uint32, args ...uint64) error {
	if err := a.enter(); err != nil {
		return err
	}
	defer a.exit()
	if err := a.checkRequest(dest, args); err != nil {
		return err
	}
	if length == 0 || uint64(localOffset)+uint64(length) > uint64(a.slotBase) {
		return fmt.Errorf("%w: %d bytes at %d, the application's part holds %d", ErrBadRegion, length, localOffset, a.slotBase)
	}
	if err := a.waitCredit(); err != nil {
		return err
	}
	d := endpoint.Descriptor{Class: endpoint.ClassBulk, NArgs: uint8(len(args)), Dest: uint32(dest), Handler: handler,
		Offset: localOffset, Length: length, RemoteOffset: remoteOffset}
	copy(d.Args[:], args)
	if err := a.sendDescriptor(endpoint.RequestSend, &d); err != nil {
		return err
	}
	a.stats.Stores++
	return a.sent(endpoint.ClassBulk, uint32(dest), handler, args)
}

// checkRequest checks what every request checks.
func (a *Endpoint) checkRequest(dest int, args []uint64) error {
	if err := a.usable(); err != nil {
		return err
	}
	switch {
	case a.depth > 0:
		return fmt.Errorf("%w: a handler may not send a request", ErrDiscipline)
	case len(args) > MaxArgs:
		return fmt.Errorf("%w: %d arguments, a message carries at most %d", ErrTooLarge, len(args), MaxArgs)
	case dest < 0 || dest >= int(a.table):
		return fmt.Errorf("%w: %d (the table has %d entries)", ErrBadDest, dest, a.table)
	}
	return nil
}

// waitCredit polls, running handlers, until a credit is free, for at most
// the give-up time; in firmware mode it blocks (Wait) while nothing comes.
func (a *Endpoint) waitCredit() error {
	if a.pending.Len() < a.cfg.Credits {
		return nil
	}
	start := a.cfg.Clock.Now()
	for {
		n, err := a.pollLocked()
		if err != nil {
			return err
		}
		if a.pending.Len() < a.cfg.Credits {
			return nil
		}
		left := a.cfg.GiveUp - a.cfg.Clock.Now().Sub(start)
		if left < 0 {
			return fmt.Errorf("%w: %d requests unanswered for %v", ErrTimeout, a.pending.Len(), a.cfg.GiveUp)
		}
		if n == 0 && a.poll == nil {
			if err := a.waitLocked(left); err != nil && !errors.Is(err, ErrTimeout) {
				return err
			}
		} else if n == 0 {
			a.letOthersIn()
		}
	}
}

// sent counts a request just queued (its record, for an answer or a
// return to find) and, in inline mode, runs the engine once so that it
// leaves at once.
func (a *Endpoint) sent(class endpoint.Class, dest, handler uint32, args []uint64) error {
	p := pendingRequest{class: class, dest: dest, handler: handler, nargs: uint8(len(args))}
	copy(p.args[:], args)
	a.pending.push(p)
	a.stats.Requests++
	if a.poll == nil || a.cfg.Coalesce {
		return nil
	}
	_, err := a.poll()
	return err
}

// send puts a short message into send queue q.
func (a *Endpoint) send(q endpoint.Queue, dest, handler uint32, args []uint64) error {
	d := endpoint.Descriptor{Class: endpoint.ClassShort, NArgs: uint8(len(args)), Dest: dest, Handler: handler}
	copy(d.Args[:], args)
	return a.sendDescriptor(q, &d)
}

// sendMedium copies data into a medium slot and puts the medium message
// into send queue q.
func (a *Endpoint) sendMedium(q endpoint.Queue, dest, handler uint32, data []byte, args []uint64) error {
	slot, err := a.slot(q)
	if err != nil {
		return err
	}
	off := a.slotBase + slot*endpoint.MaxMedium
	copy(a.view.Staging()[off:off+endpoint.MaxMedium], data)
	d := endpoint.Descriptor{Class: endpoint.ClassMedium, NArgs: uint8(len(args)), Dest: dest, Handler: handler,
		Offset: uint32(off), Length: uint32(len(data))}
	copy(d.Args[:], args)
	if err := a.sendDescriptor(q, &d); err != nil {
		a.free = append(a.free, slot)
		return err
	}
	put, _ := a.view.Progress(q)
	a.used = append(a.used, slotUse{slot: slot, q: q, pos: put - 1})
	a.stats.Mediums++
	return nil
}

// slot returns a free medium slot for a message into send queue q, waiting
// for the engine to take a message out of one, for at most the give-up
// time. Requests hold at most all slots but one.
func (a *Endpoint) slot(q endpoint.Queue) (int, error) {
	if a.cfg.MediumSlots == 0 {
		return 0, ErrNoMediumSlots
	}
	var start time.Time
	for {
		a.reclaim()
		if len(a.free) > 0 && (q == endpoint.ReplySend || a.requestSlots() < max(1, a.cfg.MediumSlots-1)) {
			s := a.free[len(a.free)-1]
			a.free = a.free[:len(a.free)-1]
			return s, nil
		}
		if start.IsZero() {
			start = a.cfg.Clock.Now()
		} else if a.cfg.Clock.Now().Sub(start) > a.cfg.GiveUp {
			return 0, fmt.Errorf("%w: no medium slot free for %v", ErrTimeout, a.cfg.GiveUp)
		}
		if err := a.step(); err != nil {
			return 0, err
		}
	}
}

// reclaim frees the medium slots whose messages the engine has taken.
func (a *Endpoint) reclaim() {
	j := 0
	for _, u := range a.used {
		if _, taken := a.view.Progress(u.q); int32(taken-u.pos) > 0 {
			a.free = append(a.free, u.slot)
			continue
		}
		a.used[j] = u
		j++
	}
	a.used = a.used[:j]
}

// requestSlots returns the medium slots held by requests.
func (a *Endpoint) requestSlots() int {
	n := 0
	for _, u := range a.used {
		if u.q == endpoint.RequestSend {
			n++
		}
	}
	return n
}

// sendDescriptor puts d into send queue q, letting the engine run while
// the queue is full, for at most the give-up time.
func (a *Endpoint) sendDescriptor(q endpoint.Queue, d *endpoint.Descriptor) error {
	var start time.Time
	for {
		err := a.view.Send(q, d)
		if !errors.Is(err, endpoint.ErrQueueFull) {
			return err
		}
		if start.IsZero() {
			start = a.cfg.Clock.Now()
		} else if a.cfg.Clock.Now().Sub(start) > a.cfg.GiveUp {
			return fmt.Errorf("%w: %v queue full for %v", ErrTimeout, q, a.cfg.GiveUp)
		}
		if err := a.step(); err != nil {
			return err
		}
	}
}

// step lets the engine move on: in inline mode it runs it once, in
// firmware mode it yields the processor.
func (a *Endpoint) step() error {
	if a.poll == nil {
		a.unlocked(runtime.Gosched)
		return nil
	}
	_, err := a.poll()
	return err
}
