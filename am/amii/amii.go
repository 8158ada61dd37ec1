package amii

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/internal/clock"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// MaxArgs is the most argument words of an AM-II message.
const MaxArgs = endpoint.MaxShortArgs

// sharedRecheck bounds how long a goroutine of a Shared endpoint waits for
// another one, blocked on the endpoint's notification, to take messages
// before it looks again itself.
const sharedRecheck = 5 * time.Millisecond

// NullReply is the handler index of implicit replies: a reply to it runs no
// handler and only gives back the requester's credit. Register never
// returns it.
const NullReply = ^uint32(0)

// DefaultCredits is K, the outstanding requests per endpoint, when
// Config.Credits is 0.
const DefaultCredits = 8

// DefaultMediumSlots is the number of medium slots when
// Config.MediumSlots is 0, if half of the staging area holds them
// (otherwise as many as half holds).
const DefaultMediumSlots = 4

// DefaultSpin is Config.Spin's default.
const DefaultSpin = 100 * time.Microsecond

// DefaultGiveUp is how long Request and Reply wait for room (a credit, a
// free send queue entry) before they report ErrTimeout.
const DefaultGiveUp = 5 * time.Second

// Errors of the AM-II API.
var (
	// ErrDiscipline: a reply outside a request handler, a second reply to
	// one request, or a request from a reply handler.
	ErrDiscipline = errors.New("amii: request/reply discipline violated")
	// ErrTooLong: a message longer than its class carries.
	ErrTooLong = errors.New("amii: message too long")
	// ErrTimeout: no room (a credit, a send queue entry) within
	// Config.GiveUp, or requests unanswered.
	ErrTimeout = errors.New("amii: peer does not answer")
	// ErrBadIndex: a destination index outside the endpoint's translation
	// table.
	ErrBadIndex = errors.New("amii: destination index outside the translation table")
	// ErrUnknownSender: a reply to a request whose sender is not in this
	// endpoint's translation table.
	ErrUnknownSender = errors.New("amii: the sender is not in this endpoint's translation table")
	// ErrNoMediumSlots: a medium message on an endpoint without medium
	// slots (Config.MediumSlots).
	ErrNoMediumSlots = errors.New("amii: no staging slots for medium messages")
	// ErrBadRegion: a Store whose region is empty or not inside the
	// application's part of the staging area (Staging).
	ErrBadRegion = errors.New("amii: region outside the application's staging area")
)

// Handler is an AM-II short-message handler. args aliases the endpoint's
// buffer and is valid only until the handler returns. A request handler may
// send one reply with t.Reply or t.ReplyMedium; a reply handler sends
// nothing.
type Handler func(t *Token, args []uint64)

// MediumHandler is an AM-II handler of medium and bulk messages: data is a
// medium message's bytes, in the endpoint's receive area, or the region of
// the staging area a bulk message was stored into; a short message sent to
// it gets nil. args and a medium message's data are valid only until the
// handler returns (the slot is then given back to the engine); a bulk
// region is the application's.
type MediumHandler func(t *Token, args []uint64, data []byte)

// handler is an entry of the handler table: one of the two kinds.
type handler struct {
	short  Handler
	medium MediumHandler
}

// Token identifies the message an AM-II handler runs for. It is valid only
// while the handler runs.
type Token struct {
	a       *Endpoint
	src     uint32
	request bool
	replied bool
}

// Source returns the sender's index in this endpoint's translation table,
// endpoint.NoIndex if it is not there.
func (t *Token) Source() uint32 { return t.src }

// IsRequest reports whether the handler runs for a request.
func (t *Token) IsRequest() bool { return t.request }

// Reply sends the reply to the request the handler runs for, naming the
// requester's handler, with up to MaxArgs arguments. It may be called
// once, in a request handler only. While the reply send queue is full it
// drives the engine, for at most the give-up time.
func (t *Token) Reply(handler uint32, args ...uint64) error {
	return t.reply(handler, nil, args)
}

// ReplyMedium is Reply with up to endpoint.MaxMedium bytes of data, which it
// copies into a medium slot (waiting for one as for room in the queue);
// without data it sends a short reply.
func (t *Token) ReplyMedium(handler uint32, data []byte, args ...uint64) error {
	if len(data) > endpoint.MaxMedium {
		return fmt.Errorf("%w: %d bytes, a medium message carries at most %d", ErrTooLong, len(data), endpoint.MaxMedium)
	}
	return t.reply(handler, data, args)
}

func (t *Token) reply(handler uint32, data []byte, args []uint64) error {
	switch {
	case t.a == nil:
		return fmt.Errorf("%w: not a handler's token", ErrDiscipline)
	case !t.request:
		return fmt.Errorf("%w: a reply handler may not send", ErrDiscipline)
	case t.replied:
		return fmt.Errorf("%w: a request handler sends at most one reply", ErrDiscipline)
	case len(args) > MaxArgs:
		return fmt.Errorf("%w: %d arguments, a message carries at most %d", ErrTooLong, len(args), MaxArgs)
	case t.src == endpoint.NoIndex:
		return ErrUnknownSender
	}
	var err error
	if len(data) > 0 {
		err = t.a.sendMedium(endpoint.ReplySend, t.src, handler, data, args)
	} else {
		err = t.a.send(endpoint.ReplySend, t.src, handler, args)
	}
	if err != nil {
		return err
	}
	t.replied = true
	t.a.stats.Replies++
	return nil
}

// Returned is a message the engine returned to its sender.
type Returned struct {
	Reason  Reason // why it was not delivered
	Request bool   // a request (its credit was given back); else a reply
	Class   Class  // short, medium or bulk
	Dest    uint32 // the destination index it was sent to
	Handler uint32
	Args    []uint64 // a copy, the application's to keep
	Data    []byte   // a medium message's bytes, a copy
	// A bulk message's region in the sender's staging area and the offset
	// it was to be stored at.
	Offset, Length, RemoteOffset uint32
}

// String describes r for logs: "request to 1, handler 3, medium of 100
// bytes: endpoint closed".
func (r Returned) String() string {
	kind := "reply"
	if r.Request {
		kind = "request"
	}
	what := ""
	switch r.Class {
	case endpoint.ClassMedium:
		what = fmt.Sprintf(", medium of %d bytes", len(r.Data))
	case endpoint.ClassBulk:
		what = fmt.Sprintf(", bulk of %d bytes to offset %d", r.Length, r.RemoteOffset)
	}
	return fmt.Sprintf("%s to %d, handler %d%s: %v", kind, r.Dest, r.Handler, what, r.Reason)
}

// Config configures an AM-II endpoint. Zero fields take the defaults.
type Config struct {
	Credits int           // K, outstanding requests; default DefaultCredits, at most the queue entries
	GiveUp  time.Duration // how long Request and Reply wait for room; default DefaultGiveUp
	// ReplyTimeout is how long a request waits for its reply: past it, the
	// request is presumed lost (its receiver took it and died, or
	// restarted) and comes back to the error handler with
	// endpoint.ReasonNoReply, its credit given back. Default
	// DefaultReplyTimeout; negative: never. A reply that comes later still
	// runs its handler (counted in Stats.LateReplies).
	ReplyTimeout time.Duration
	Clock        clock.Clock // default the system clock
	// MediumSlots is the number of endpoint.MaxMedium-byte slots, at the end
	// of the staging area, for medium messages (default DefaultMediumSlots,
	// or as many as half the staging area holds if fewer; negative: none,
	// and medium messages report ErrNoMediumSlots).
	MediumSlots int
	// Spin, in firmware mode, is how long a wait (Wait, and Request or
	// Drain waiting for a credit) looks at the receive queues before it
	// blocks on the daemon's notification: a message that comes within it
	// spares the wake-up. Default DefaultSpin; negative: block at once.
	Spin time.Duration
	// Coalesce, in inline mode, lets Request and Store only queue their
	// message: the engine runs when the endpoint polls (Poll, Wait, Drain)
	// or must wait for room (a credit, a queue entry), so the messages
	// sent between two polls leave in one engine run, packed into frames
	// (with EngineConfig.Window at least the credits, all of them at
	// once). Without it (the default) each send runs the engine once and
	// its message leaves before the call returns. Firmware mode's engine
	// runs by itself either way.
	Coalesce bool
	// RunEngine, in inline mode (New, Open), is what runs the engine once
	// when the endpoint drives it: default the engine's Poll. A benchmark
	// wraps it to time the engine's runs; a test that plays several hosts
	// in one goroutine makes it poll all their engines.
	RunEngine func() (int, error)
	// QueueEntries and StagingSize size the endpoint's memory (0: the
	// defaults, endpoint.DefaultQueueEntries and
	// endpoint.DefaultStagingSize). New, Open and Dial make the endpoint
	// with them.
	QueueEntries, StagingSize int
	// Shared makes the endpoint safe for several goroutines (see
	// "Threads" in the package documentation): its methods take a lock.
	Shared bool
}

// Stats counts what an AM-II endpoint did.
type Stats struct {
	Requests    uint64 // requests sent (short, medium and bulk)
	Replies     uint64 // explicit replies sent (short and medium)
	NullReplies uint64 // requests answered implicitly (their handlers did not reply)
	// NullReplyMessages counts the implicit replies sent: one per
	// requester and poll, answering all its requests of that poll.
	NullReplyMessages uint64
	Mediums           uint64 // medium messages sent (requests and replies)
	Stores            uint64 // bulk messages sent (Store)
	Handled           uint64 // request handlers run
	ReplyHandled      uint64 // reply handlers run (implicit replies not counted)
	Returned          uint64 // returned messages handed to the error handler (or dropped without one)
	Unanswered        uint64 // requests returned for want of a reply (ReplyTimeout), counted in Returned too
	LateReplies       uint64 // replies that came for no request outstanding (after their ReplyTimeout)
	HandlerErrors     uint64 // messages naming no registered handler, or one of the other kind
	Malformed         uint64 // received descriptors of an unknown class, or naming bytes outside their area
}

// DefaultReplyTimeout is Config.ReplyTimeout's default: twice the
// transport's give-up time, by which a request to a live peer is answered
// or returned by the engine.
const DefaultReplyTimeout = 2 * transport.DefaultGiveUpAfter

// pendingRequest is a request sent and neither answered nor returned: what
// it was, for its return, and when the timers first saw it.
type pendingRequest struct {
	class   endpoint.Class
	nargs   uint8
	dest    uint32
	handler uint32
	args    [MaxArgs]uint64
	seen    time.Time // zero until expire stamps it
}

// replyCheckPolls is how often Poll looks at the reply timers: every so
// many calls, because reading the clock costs more than an empty poll. A
// timeout is late by at most that many polls.
const replyCheckPolls = 64

// slotUse is a medium slot holding a message the engine has not taken yet:
// the one at position pos of send queue q.
type slotUse struct {
	slot int
	q    endpoint.Queue
	pos  uint32
}

// Endpoint is an AM-II endpoint (see the package documentation). Open,
// New and Dial return one.
type Endpoint struct {
	view     *endpoint.View
	poll     func() (int, error)       // nil: firmware mode
	block    func(time.Duration) error // firmware mode's wait (newEndpoint)
	closer   func() error              // what Close releases besides the view
	name     Name
	cfg      Config
	table    uint32 // the translation table's size
	entries  int    // entries per queue
	handlers []handler
	onReturn func(Returned)
	pending  pendingRing   // requests sent and not answered, in the order sent
	polls    uint          // pollLocked calls, for the reply timers
	depth    int           // handlers running (handlers do not nest)
	mu       sync.Mutex    // Shared: held by the goroutine in a method
	running  atomic.Bool   // Shared: a handler runs (in the lock's holder)
	blocking int           // Shared, firmware mode: goroutines blocked in the blocking wait
	changed  chan struct{} // Shared: closed (and replaced) when a Poll took messages
	tok      Token
	// Implicit replies owed: per source index, the requests dispatched in
	// this poll that their handlers did not answer, and the indices owed
	// any (sendNullReplies).
	owed     []uint32
	owedList []uint32
	d        endpoint.Descriptor
	args     [MaxArgs]uint64
	nullArg  [1]uint64 // an implicit reply's argument
	slotBase int       // offset of the first medium slot: the end of the application's part
	free     []int     // free medium slots
	used     []slotUse // medium slots whose message the engine has not taken
	stats    Stats
}

// newEndpoint returns the AM-II endpoint of view. In inline mode poll runs the
// engine once; in firmware mode poll is nil and cfg.Block blocks.
//
// block is firmware mode's wait: it blocks until the engine notifies the
// endpoint (endpoint.Memory.SetNotify: the eventfd the daemon handed over)
// or timeout passes, and returns nil either way, or an error that Wait
// passes on. The endpoint calls it only after arming its events found no
// message. Required without a poll function; unused with one.
func newEndpoint(view *endpoint.View, poll func() (int, error), block func(time.Duration) error, cfg Config) (*Endpoint, error) {
	if view == nil || poll == nil && block == nil {
		return nil, errors.New("amii: an endpoint needs its view, and a poll function (inline mode) or a blocking wait (firmware mode)")
	}
	ec := view.Config()
	if cfg.Credits == 0 {
		cfg.Credits = DefaultCredits
	}
	if cfg.Credits < 1 || cfg.Credits > ec.QueueEntries {
		return nil, fmt.Errorf("amii: %d credits out of range [1, %d] (the endpoint's queue entries)", cfg.Credits, ec.QueueEntries)
	}
	if cfg.GiveUp == 0 {
		cfg.GiveUp = DefaultGiveUp
	}
	if cfg.GiveUp < 0 {
		return nil, fmt.Errorf("amii: negative give-up time %v", cfg.GiveUp)
	}
	if cfg.ReplyTimeout == 0 {
		cfg.ReplyTimeout = DefaultReplyTimeout
	}
	if cfg.Spin == 0 {
		cfg.Spin = DefaultSpin
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	fit := ec.StagingSize / endpoint.MaxMedium
	switch {
	case cfg.MediumSlots == 0:
		cfg.MediumSlots = min(DefaultMediumSlots, fit/2)
	case cfg.MediumSlots < 0:
		cfg.MediumSlots = 0
	case cfg.MediumSlots > fit:
		return nil, fmt.Errorf("amii: %d medium slots of %d bytes in a staging area of %d", cfg.MediumSlots, endpoint.MaxMedium, ec.StagingSize)
	}
	a := &Endpoint{view: view, poll: poll, block: block, cfg: cfg, table: uint32(ec.TableSize), entries: ec.QueueEntries,
		slotBase: ec.StagingSize - cfg.MediumSlots*endpoint.MaxMedium,
		free:     make([]int, 0, cfg.MediumSlots), used: make([]slotUse, 0, cfg.MediumSlots), pending: newPendingRing(cfg.Credits),
		owed: make([]uint32, ec.TableSize)}
	for i := range cfg.MediumSlots {
		a.free = append(a.free, cfg.MediumSlots-1-i)
	}
	// Peers' Stores may write the application's part only, never the
	// medium slots; requests may name registered handlers only.
	view.SetStoreRegion(uint32(a.slotBase))
	view.SetHandlers(0)
	if cfg.Shared {
		a.changed = make(chan struct{})
	}
	return a, nil
}

// MaxHandler bounds the ids of Handle and HandleMedium.
const MaxHandler = 4095

// Handle makes h the short-message handler of id, which senders name in
// their messages: an id the application chooses, so that senders need not
// know the order in which it registers its handlers. Requests for an id
// above the highest handled come back to their senders with
// ReasonNoHandler; one for a lower id without a handler gets an implicit
// reply and is counted in Stats.HandlerErrors. Handle is to be called
// before messages for id arrive (and, with Config.Shared, before the
// endpoint is shared).
func (a *Endpoint) Handle(id uint32, h Handler) error {
	return a.handle(id, handler{short: h})
}

// HandleMedium is Handle for a handler of medium and bulk messages; the
// two kinds share the ids.
func (a *Endpoint) HandleMedium(id uint32, h MediumHandler) error {
	return a.handle(id, handler{medium: h})
}

func (a *Endpoint) handle(id uint32, h handler) error {
	switch {
	case id > MaxHandler:
		return fmt.Errorf("amii: handler id %d above %d", id, MaxHandler)
	case int(id) < len(a.handlers) && (a.handlers[id].short != nil || a.handlers[id].medium != nil):
		return fmt.Errorf("amii: handler id %d is taken", id)
	}
	if int(id) >= len(a.handlers) {
		a.handlers = append(a.handlers, make([]handler, int(id)+1-len(a.handlers))...)
		a.view.SetHandlers(uint32(len(a.handlers)))
	}
	a.handlers[id] = h
	return nil
}

// Register adds a short-message handler at the lowest id above every id in
// use and returns it. Senders must then know the order of registration;
// Handle, with ids the application chooses, spares them that.
func (a *Endpoint) Register(h Handler) uint32 {
	return a.register(handler{short: h})
}

// RegisterMedium is Register for a handler of medium and bulk messages;
// the two kinds share the ids.
func (a *Endpoint) RegisterMedium(h MediumHandler) uint32 {
	return a.register(handler{medium: h})
}

// register adds h to the handler table and tells the engine, which
// returns requests to unregistered handlers to their senders
// (endpoint.ReasonNoHandler).
func (a *Endpoint) register(h handler) uint32 {
	a.handlers = append(a.handlers, h)
	a.view.SetHandlers(uint32(len(a.handlers)))
	return uint32(len(a.handlers) - 1)
}

// OnReturn sets the endpoint's error handler, which Poll calls for each
// returned message. It runs as a reply handler does: it may not send or
// poll (to send the message again, note it and send after Poll returns).
// Without one, returned messages are counted and dropped.
func (a *Endpoint) OnReturn(f func(Returned)) { a.onReturn = f }

// Config returns the endpoint's configuration, defaults filled in.
func (a *Endpoint) Config() Config { return a.cfg }

// Stats returns the endpoint's counters.
func (a *Endpoint) Stats() Stats {
	if a.enter() != nil {
		return Stats{}
	}
	defer a.exit()
	return a.stats
}

// Outstanding returns the requests sent and not yet answered or returned:
// the credits in use.
func (a *Endpoint) Outstanding() int {
	if a.enter() != nil {
		return 0
	}
	defer a.exit()
	return a.pending.Len()
}

// enter takes the lock of a Shared endpoint for a method. A handler runs
// holding it: if one runs, the lock's holder may be another goroutine
// (wait for it) or this one (a handler calling its endpoint, which must
// not wait forever), so enter then waits for at most the give-up time.
func (a *Endpoint) enter() error {
	if !a.cfg.Shared || a.mu.TryLock() {
		return nil
	}
	start, nap := time.Now(), time.Microsecond
	for {
		if !a.running.Load() {
			// No handler runs, so this goroutine is not in one: the
			// holder is another goroutine, which lets go soon.
			a.mu.Lock()
			return nil
		}
		if time.Since(start) > a.cfg.GiveUp {
			return fmt.Errorf("%w: a handler held the endpoint for %v (a handler may call only its Token)", ErrDiscipline, a.cfg.GiveUp)
		}
		time.Sleep(nap)
		nap = min(2*nap, time.Millisecond)
		if a.mu.TryLock() {
			return nil
		}
	}
}

// exit lets go of the lock enter took.
func (a *Endpoint) exit() {
	if a.cfg.Shared {
		a.mu.Unlock()
	}
}

// letOthersIn lets go of a Shared endpoint's lock for a moment, between
// runs of a loop that holds it.
func (a *Endpoint) letOthersIn() { a.unlocked(func() {}) }

// unlocked runs f (a blocking wait) without the lock of a Shared endpoint,
// when no handler is running in this goroutine; otherwise with it.
func (a *Endpoint) unlocked(f func()) {
	if !a.cfg.Shared || a.depth > 0 {
		f()
		return
	}
	a.mu.Unlock()
	defer a.mu.Lock()
	f()
}

// Staging returns the application's part of the endpoint's staging area
// (the medium slots after it excluded): the bulk data it sends from
// (Store's localOffset) and where peers' Stores land (their remoteOffset).
func (a *Endpoint) Staging() []byte { return a.view.Staging()[:a.slotBase:a.slotBase] }

// Request sends a request with up to MaxArgs arguments to handler at the
// endpoint of index dest in the translation table, then (inline mode) runs
// the engine once. With no credit left it polls (running handlers) until a
// reply or a return gives one back, for at most the give-up time. It may
// not be called from a handler.
func (a *Endpoint) Request(dest uint32, handler uint32, args ...uint64) error {
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
	if err := a.send(endpoint.RequestSend, dest, handler, args); err != nil {
		return err
	}
	return a.sent(endpoint.ClassShort, dest, handler, args)
}

// RequestMedium is Request with up to endpoint.MaxMedium bytes of data, which
// it copies into a medium slot (waiting for one, as for a credit); the
// caller may reuse data at once. Without data it sends a short request.
func (a *Endpoint) RequestMedium(dest uint32, handler uint32, data []byte, args ...uint64) error {
	if err := a.enter(); err != nil {
		return err
	}
	defer a.exit()
	if err := a.checkRequest(dest, args); err != nil {
		return err
	}
	if len(data) > endpoint.MaxMedium {
		return fmt.Errorf("%w: %d bytes, a medium message carries at most %d", ErrTooLong, len(data), endpoint.MaxMedium)
	}
	if err := a.waitCredit(); err != nil {
		return err
	}
	var err error
	if len(data) > 0 {
		err = a.sendMedium(endpoint.RequestSend, dest, handler, data, args)
	} else {
		err = a.send(endpoint.RequestSend, dest, handler, args)
	}
	if err != nil {
		return err
	}
	class := endpoint.ClassShort
	if len(data) > 0 {
		class = endpoint.ClassMedium
	}
	return a.sent(class, dest, handler, args)
}

// Bulk is a bulk request (Store): Length bytes at Local in the sender's
// part of the staging area (Staging), stored at Remote in the staging area
// of the endpoint of index Dest, whose Handler (a MediumHandler) then runs
// with them and Args.
type Bulk struct {
	Dest                  uint32
	Local, Remote, Length uint32
	Handler               uint32
	Args                  []uint64
}

// Store sends bulk request b: its bytes are stored at the receiver, and
// then its handler runs there with them and its arguments. The region must
// stay unchanged until the request is answered or returned. A region that
// does not fit at the receiver comes back with ReasonRange. Otherwise
// Store is Request.
func (a *Endpoint) Store(b Bulk) error {
	return a.store(b.Dest, b.Local, b.Remote, b.Length, b.Handler, b.Args...)
}

func (a *Endpoint) store(dest uint32, localOffset, remoteOffset, length uint32, handler uint32, args ...uint64) error {
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
	d := endpoint.Descriptor{Class: endpoint.ClassBulk, NArgs: uint8(len(args)), Dest: dest, Handler: handler,
		Offset: localOffset, Length: length, RemoteOffset: remoteOffset}
	copy(d.Args[:], args)
	if err := a.sendDescriptor(endpoint.RequestSend, &d); err != nil {
		return err
	}
	a.stats.Stores++
	return a.sent(endpoint.ClassBulk, dest, handler, args)
}

// checkRequest checks what every request checks.
func (a *Endpoint) checkRequest(dest uint32, args []uint64) error {
	switch {
	case a.depth > 0:
		return fmt.Errorf("%w: a handler may not send a request", ErrDiscipline)
	case len(args) > MaxArgs:
		return fmt.Errorf("%w: %d arguments, a message carries at most %d", ErrTooLong, len(args), MaxArgs)
	case dest >= a.table:
		return fmt.Errorf("%w: %d (the table has %d entries)", ErrBadIndex, dest, a.table)
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

// Wait waits until a message is in one of the endpoint's receive queues,
// for at most timeout. ready true: Poll has handlers to run (with
// Config.Shared, another goroutine may have run them first); ready false
// and no error: nothing arrived within timeout. An error is a failure: a
// handler called Wait, or firmware mode's daemon went away. In inline mode
// it runs the engine meanwhile; in firmware mode it arms the endpoint's
// events and blocks on the daemon's notification. It may not be called
// from a handler.
func (a *Endpoint) Wait(timeout time.Duration) (ready bool, err error) {
	if err := a.enter(); err != nil {
		return false, err
	}
	defer a.exit()
	err = a.waitLocked(timeout)
	if errors.Is(err, errNothing) {
		return false, nil
	}
	return err == nil, err
}

// errNothing is waitLocked's "no message within the timeout", which Wait
// reports as ready false and no error; it wraps ErrTimeout for the callers
// that wait for room.
var errNothing = fmt.Errorf("%w: no message", ErrTimeout)

// waitLocked is Wait, the lock (if Shared) held.
func (a *Endpoint) waitLocked(timeout time.Duration) error {
	if a.depth > 0 {
		return fmt.Errorf("%w: a handler may not wait", ErrDiscipline)
	}
	const all = endpoint.EventRequest | endpoint.EventReply
	start := a.cfg.Clock.Now()
	for {
		if a.view.Ready() != 0 {
			return nil
		}
		left := timeout - a.cfg.Clock.Now().Sub(start)
		if left <= 0 {
			if a.poll == nil {
				a.view.Arm(0)
			}
			return errNothing
		}
		if a.poll != nil {
			if _, err := a.poll(); err != nil {
				return err
			}
			a.letOthersIn()
			continue
		}
		if a.spin(min(left, a.cfg.Spin)) {
			return nil
		}
		if a.view.Arm(all) != 0 {
			return nil
		}
		if a.cfg.Shared && a.blocking > 0 {
			// Another goroutine blocks on the endpoint's notification,
			// which wakes one of us only: wait for a Poll to take
			// messages (then return: what this goroutine waited for, a
			// credit say, may have come), or a little while, and look
			// again.
			ch := a.changed
			took := false
			a.unlocked(func() {
				t := time.NewTimer(min(left, sharedRecheck))
				defer t.Stop()
				select {
				case <-ch:
					took = true
				case <-t.C:
				}
			})
			if took {
				return nil
			}
			continue
		}
		var err error
		block := left
		if a.cfg.Shared {
			// Another goroutine's Poll may take the messages this one
			// was woken for, or Arm and find them there (then nobody
			// is notified): block briefly and let the caller look.
			block = min(left, sharedRecheck)
		}
		a.blocking++
		a.unlocked(func() { err = a.block(block) })
		a.blocking--
		if err != nil {
			a.view.Arm(0)
			return err
		}
		if a.cfg.Shared {
			return nil
		}
	}
}

// spin looks at the receive queues for up to d, yielding the processor
// between looks, and reports whether a message came: firmware mode's
// adaptive wait, which spares a message that comes soon the eventfd's
// wake-up. With Shared, others take the lock meanwhile.
func (a *Endpoint) spin(d time.Duration) bool {
	if d <= 0 {
		return false
	}
	start := time.Now()
	for i := 0; ; i++ {
		if a.view.Ready() != 0 {
			return true
		}
		if i&15 == 15 && time.Since(start) >= d {
			return false
		}
		a.letOthersIn()
		runtime.Gosched()
	}
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
	if !request && d.Handler == NullReply {
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
		if err := a.send(endpoint.ReplySend, src, NullReply, a.nullArg[:]); err != nil {
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
		if r == nil || p.handler == r.Handler && p.class == r.Class && slices.Equal(p.args[:p.nargs], r.Args) {
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
		ran += a.handReturn(Returned{Reason: endpoint.ReasonNoReply, Request: true, Class: p.class, Dest: p.dest,
			Handler: p.handler, Args: slices.Clone(p.args[:p.nargs])})
		return false
	})
	return ran
}

// returned hands the returned message in a.d to the error handler.
func (a *Endpoint) returned(reason endpoint.Reason, request bool) int {
	d := &a.d
	r := Returned{Reason: reason, Request: request, Class: d.Class &^ endpoint.ClassReturned, Dest: d.Dest, Handler: d.Handler,
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
		a.answered(r.Dest, &r)
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

// Drain polls until every request has been answered or returned, or until
// timeout; in firmware mode it blocks (Wait) while nothing comes.
func (a *Endpoint) Drain(timeout time.Duration) error {
	if err := a.enter(); err != nil {
		return err
	}
	defer a.exit()
	start := a.cfg.Clock.Now()
	for a.pending.Len() > 0 {
		left := timeout - a.cfg.Clock.Now().Sub(start)
		if left < 0 {
			return fmt.Errorf("%w: %d requests still unanswered after %v", ErrTimeout, a.pending.Len(), timeout)
		}
		n, err := a.pollLocked()
		if err != nil {
			return err
		}
		if n == 0 && a.poll == nil && a.pending.Len() > 0 {
			if err := a.waitLocked(left); err != nil && !errors.Is(err, ErrTimeout) {
				return err
			}
		} else if n == 0 {
			a.letOthersIn()
		}
	}
	return nil
}
