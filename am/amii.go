package am

import (
	"errors"
	"fmt"
	"time"

	"github.com/xam-project/xam/internal/clock"
	"github.com/xam-project/xam/nicfw"
)

// AM-II's Active Messages (Mainwaring and Culler's AM-II API, as Chun et
// al. run it over Myrinet) on an endpoint of xam's NIC firmware engine
// (package nicfw), short messages only.
//
// The endpoint. An AMII is the application's side of one nicfw endpoint:
// the mapping of its memory (nicfw.EndpointView) with AM-II's four queues.
// The endpoint belongs to a virtual network: the engine holds its tag and
// its translation table, and a request names its destination by an index
// into that table, never by a global name. A received message names its
// sender by the sender's index in the receiver's table (Token2.Source);
// nicfw.NoIndex when the sender is not in it, and then it cannot be
// answered.
//
// Inline mode. The engine runs in the application's goroutine: NewAMII is
// given a function that runs the engine loop once (nicfw.Engine.Poll, or a
// function that polls several engines, as the tests do). Poll calls it and
// then runs the handlers of what the engine put into the request and reply
// receive queues; Request calls it after queuing the request, so the
// message leaves at once. Firmware mode (an engine on its own cores,
// reached through the daemon's socket) is not built; this API makes no
// assumption about what poll does beyond running the engine's side.
//
// Messages. A short message carries up to 8 64-bit words (MaxArgs2) and
// names a handler by its index (Register). Request sends into the request
// send queue, Token2.Reply into the reply send queue; the engine sends
// replies first. The request/reply discipline is SSAM's and its violations
// report the same ErrDiscipline: a request handler sends at most one reply
// and no request, a reply handler and the error handler send nothing, and
// no handler polls.
//
// Implicit replies. A request handler that returns without replying gets
// an empty reply sent on its behalf to NullReply, a handler index that runs
// nothing at the requester: every delivered request is answered, which is
// what makes user credits work (below). A request from a sender outside the
// receiver's translation table cannot be answered and is not.
//
// User credits. An endpoint has at most K requests outstanding
// (AMIIConfig.Credits): a request takes a credit, and its reply (explicit
// or implicit) or its return to sender gives it back. Request, with no
// credit left, polls until one comes back, for at most AMIIConfig.GiveUp,
// and then reports ErrTimeout. The engine's stop-and-wait channels and its
// NACKs of full receive queues do the rest of the flow control.
//
// Return to sender. A message the engine cannot deliver (bad tag, no such
// endpoint, unknown or unreachable host, unsupported class) comes back into
// the sender's reply receive queue marked returned (nicfw's
// Descriptor.ReturnInfo); Poll hands it to the error handler set with
// OnReturn, as a Returned with the reason and the original message. A
// returned request gives back its credit. A reply that comes back means
// its requester keeps a credit it will never get back: the requester sees
// nothing of it (the reply was lost on the way back to it), which is the
// one case where a credit is lost; an application that must survive its
// peers' failures uses Outstanding and its own timeout.
//
// Threads. An AMII, like the engine it drives in inline mode, belongs to one
// goroutine: every method, and every handler, runs in it.

// MaxArgs2 is the most argument words of an AM-II short message.
const MaxArgs2 = nicfw.MaxShortArgs

// NullReply is the handler index of implicit replies: a reply to it runs no
// handler and only gives back the requester's credit. Register never
// returns it.
const NullReply = ^uint32(0)

// DefaultCredits is K, the outstanding requests per endpoint, when
// AMIIConfig.Credits is 0.
const DefaultCredits = 8

// Errors of the AM-II API besides ErrDiscipline, ErrTooLong and ErrTimeout.
var (
	// ErrBadIndex: a destination index outside the endpoint's translation
	// table.
	ErrBadIndex = errors.New("am: destination index outside the translation table")
	// ErrUnknownSender: a reply to a request whose sender is not in this
	// endpoint's translation table.
	ErrUnknownSender = errors.New("am: the sender is not in this endpoint's translation table")
)

// Handler2 is an AM-II short-message handler. args aliases the endpoint's
// buffer and is valid only until the handler returns. A request handler may
// send one reply with t.Reply; a reply handler sends nothing.
type Handler2 func(t *Token2, args []uint64)

// Token2 identifies the message an AM-II handler runs for. It is valid only
// while the handler runs.
type Token2 struct {
	a       *AMII
	src     uint32
	request bool
	replied bool
}

// Source returns the sender's index in this endpoint's translation table,
// nicfw.NoIndex if it is not there.
func (t *Token2) Source() uint32 { return t.src }

// IsRequest reports whether the handler runs for a request.
func (t *Token2) IsRequest() bool { return t.request }

// Reply sends the reply to the request the handler runs for, naming the
// requester's handler, with up to MaxArgs2 arguments. It may be called
// once, in a request handler only. While the reply send queue is full it
// drives the engine, for at most the give-up time.
func (t *Token2) Reply(handler uint32, args ...uint64) error {
	switch {
	case t.a == nil:
		return fmt.Errorf("%w: not a handler's token", ErrDiscipline)
	case !t.request:
		return fmt.Errorf("%w: a reply handler may not send", ErrDiscipline)
	case t.replied:
		return fmt.Errorf("%w: a request handler sends at most one reply", ErrDiscipline)
	case len(args) > MaxArgs2:
		return fmt.Errorf("%w: %d arguments, a short message carries at most %d", ErrTooLong, len(args), MaxArgs2)
	case t.src == nicfw.NoIndex:
		return ErrUnknownSender
	}
	if err := t.a.send(nicfw.ReplySend, t.src, handler, args); err != nil {
		return err
	}
	t.replied = true
	t.a.stats.Replies++
	return nil
}

// Returned is a message the engine returned to its sender.
type Returned struct {
	Reason  nicfw.Reason // why it was not delivered
	Request bool         // a request (its credit was given back); else a reply
	Dest    uint32       // the destination index it was sent to
	Handler uint32
	Args    []uint64 // a copy, the application's to keep
}

// AMIIConfig configures an AM-II endpoint. Zero fields take the defaults.
type AMIIConfig struct {
	Credits int           // K, outstanding requests; default DefaultCredits, at most the queue entries
	GiveUp  time.Duration // how long Request and Reply wait for room; default DefaultGiveUp
	Clock   clock.Clock   // default the system clock
}

// AMIIStats counts what an AM-II endpoint did.
type AMIIStats struct {
	Requests      uint64 // requests sent
	Replies       uint64 // explicit replies sent
	NullReplies   uint64 // implicit replies sent for handlers that did not reply
	Handled       uint64 // request handlers run
	ReplyHandled  uint64 // reply handlers run (implicit replies not counted)
	Returned      uint64 // returned messages handed to the error handler (or dropped without one)
	HandlerErrors uint64 // messages naming no registered handler
	Malformed     uint64 // received descriptors of a class this API does not take
}

// AMII is an AM-II endpoint in inline mode. See the top of amii.go.
type AMII struct {
	view        *nicfw.EndpointView
	poll        func() (int, error)
	cfg         AMIIConfig
	table       uint32 // the translation table's size
	entries     int    // entries per queue
	handlers    []Handler2
	onReturn    func(Returned)
	outstanding int
	depth       int // handlers running (handlers do not nest)
	tok         Token2
	d           nicfw.Descriptor
	args        [MaxArgs2]uint64
	stats       AMIIStats
}

// NewAMII returns the AM-II endpoint of view, whose engine poll runs once.
func NewAMII(view *nicfw.EndpointView, poll func() (int, error), cfg AMIIConfig) (*AMII, error) {
	if view == nil || poll == nil {
		return nil, errors.New("am: NewAMII needs an endpoint view and a poll function")
	}
	ec := view.Config()
	if cfg.Credits == 0 {
		cfg.Credits = DefaultCredits
	}
	if cfg.Credits < 1 || cfg.Credits > ec.QueueEntries {
		return nil, fmt.Errorf("am: %d credits out of range [1, %d] (the endpoint's queue entries)", cfg.Credits, ec.QueueEntries)
	}
	if cfg.GiveUp == 0 {
		cfg.GiveUp = DefaultGiveUp
	}
	if cfg.GiveUp < 0 {
		return nil, fmt.Errorf("am: negative give-up time %v", cfg.GiveUp)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	return &AMII{view: view, poll: poll, cfg: cfg, table: uint32(ec.TableSize), entries: ec.QueueEntries}, nil
}

// Register adds a handler and returns its index, the number that names it
// in messages.
func (a *AMII) Register(h Handler2) uint32 {
	a.handlers = append(a.handlers, h)
	return uint32(len(a.handlers) - 1)
}

// OnReturn sets the endpoint's error handler, which Poll calls for each
// returned message. It runs as a reply handler does: it may not send or
// poll (to send the message again, note it and send after Poll returns).
// Without one, returned messages are counted and dropped.
func (a *AMII) OnReturn(f func(Returned)) { a.onReturn = f }

// Config returns the endpoint's configuration, defaults filled in.
func (a *AMII) Config() AMIIConfig { return a.cfg }

// Stats returns the endpoint's counters.
func (a *AMII) Stats() AMIIStats { return a.stats }

// Outstanding returns the requests sent and not yet answered or returned:
// the credits in use.
func (a *AMII) Outstanding() int { return a.outstanding }

// Request sends a request with up to MaxArgs2 arguments to handler at the
// endpoint of index dest in the translation table, then runs the engine
// once. With no credit left it polls (running handlers) until a reply or a
// return gives one back, for at most the give-up time. It may not be
// called from a handler.
func (a *AMII) Request(dest uint32, handler uint32, args ...uint64) error {
	switch {
	case a.depth > 0:
		return fmt.Errorf("%w: a handler may not send a request", ErrDiscipline)
	case len(args) > MaxArgs2:
		return fmt.Errorf("%w: %d arguments, a short message carries at most %d", ErrTooLong, len(args), MaxArgs2)
	case dest >= a.table:
		return fmt.Errorf("%w: %d (the table has %d entries)", ErrBadIndex, dest, a.table)
	}
	if a.outstanding >= a.cfg.Credits {
		start := a.cfg.Clock.Now()
		for a.outstanding >= a.cfg.Credits {
			if _, err := a.Poll(); err != nil {
				return err
			}
			if a.outstanding >= a.cfg.Credits && a.cfg.Clock.Now().Sub(start) > a.cfg.GiveUp {
				return fmt.Errorf("%w: %d requests unanswered for %v", ErrTimeout, a.outstanding, a.cfg.GiveUp)
			}
		}
	}
	if err := a.send(nicfw.RequestSend, dest, handler, args); err != nil {
		return err
	}
	a.outstanding++
	a.stats.Requests++
	_, err := a.poll()
	return err
}

// send puts a short message into send queue q, running the engine while
// the queue is full, for at most the give-up time.
func (a *AMII) send(q nicfw.Queue, dest, handler uint32, args []uint64) error {
	d := nicfw.Descriptor{Class: nicfw.ClassShort, NArgs: uint8(len(args)), Dest: dest, Handler: handler}
	copy(d.Args[:], args)
	var start time.Time
	for {
		err := a.view.Send(q, &d)
		if !errors.Is(err, nicfw.ErrQueueFull) {
			return err
		}
		if start.IsZero() {
			start = a.cfg.Clock.Now()
		} else if a.cfg.Clock.Now().Sub(start) > a.cfg.GiveUp {
			return fmt.Errorf("%w: %v queue full for %v", ErrTimeout, q, a.cfg.GiveUp)
		}
		if _, err := a.poll(); err != nil {
			return err
		}
	}
}

// Poll runs the engine once, then the handlers of the messages in the
// request and reply receive queues (at most a queue's worth of each), and
// returns the number of handlers run (error handler included). It may not
// be called from a handler.
func (a *AMII) Poll() (int, error) {
	if a.depth > 0 {
		return 0, fmt.Errorf("%w: a handler may not poll", ErrDiscipline)
	}
	if _, err := a.poll(); err != nil {
		return 0, err
	}
	ran := 0
	for _, q := range [...]nicfw.Queue{nicfw.ReplyReceive, nicfw.RequestReceive} {
		for range a.entries {
			ok, err := a.view.Receive(q, &a.d)
			if err != nil {
				return ran, err
			}
			if !ok {
				break
			}
			n, err := a.dispatch(q)
			ran += n
			if err != nil {
				return ran, err
			}
		}
	}
	return ran, nil
}

// dispatch handles a.d, just taken from receive queue q.
func (a *AMII) dispatch(q nicfw.Queue) (int, error) {
	d := &a.d
	if reason, from, ok := d.ReturnInfo(); ok {
		r := Returned{Reason: reason, Request: from == nicfw.RequestSend, Dest: d.Dest, Handler: d.Handler,
			Args: append([]uint64(nil), d.Args[:min(int(d.NArgs), MaxArgs2)]...)}
		if r.Request && a.outstanding > 0 {
			a.outstanding--
		}
		a.stats.Returned++
		if a.onReturn == nil {
			return 0, nil
		}
		a.depth++
		defer a.leave()
		a.onReturn(r)
		return 1, nil
	}
	if d.Class != nicfw.ClassShort || d.NArgs > MaxArgs2 {
		a.stats.Malformed++
		return 0, nil
	}
	request := q == nicfw.RequestReceive
	if !request && a.outstanding > 0 {
		a.outstanding--
	}
	if !request && d.Handler == NullReply {
		return 0, nil
	}
	copy(a.args[:], d.Args[:d.NArgs])
	a.tok = Token2{a: a, src: d.Dest, request: request}
	ran := 0
	if int(d.Handler) >= len(a.handlers) || a.handlers[d.Handler] == nil {
		a.stats.HandlerErrors++
	} else {
		if request {
			a.stats.Handled++
		} else {
			a.stats.ReplyHandled++
		}
		a.run(d.Handler, int(d.NArgs))
		ran = 1
	}
	if request && !a.tok.replied && a.tok.src != nicfw.NoIndex {
		if err := a.send(nicfw.ReplySend, a.tok.src, NullReply, nil); err != nil {
			return ran, err
		}
		a.stats.NullReplies++
	}
	a.tok.a = nil // a token kept past its handler cannot reply
	return ran, nil
}

// run calls handler h with the discipline flag raised.
func (a *AMII) run(h uint32, nargs int) {
	a.depth++
	defer a.leave()
	a.handlers[h](&a.tok, a.args[:nargs:nargs])
}

func (a *AMII) leave() { a.depth-- }

// Drain polls until every request has been answered or returned, or until
// timeout.
func (a *AMII) Drain(timeout time.Duration) error {
	start := a.cfg.Clock.Now()
	for a.outstanding > 0 {
		if a.cfg.Clock.Now().Sub(start) > timeout {
			return fmt.Errorf("%w: %d requests still unanswered after %v", ErrTimeout, a.outstanding, timeout)
		}
		if _, err := a.Poll(); err != nil {
			return err
		}
	}
	return nil
}
