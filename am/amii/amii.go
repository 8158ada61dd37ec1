package amii

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/internal/clock"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// MaxArgs is the most argument words of an AM-II message.
const MaxArgs = endpoint.MaxShortArgs

// sharedRecheck bounds how long a goroutine of a Shared endpoint waits for
// another one, blocked on the endpoint's notification, to take messages
// before it looks again itself.
const sharedRecheck = 5 * time.Millisecond

// HandlerID names a handler of an endpoint: the id a message carries,
// which the receiver chose (Handle) or was given (Register).
type HandlerID uint32

// NullReply is the handler id of implicit replies: a reply to it runs no
// handler and only gives back the requester's credit. Register never
// returns it.
const NullReply = ^HandlerID(0)

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

// Errors of the package. Test for them with errors.Is.
var (
	// ErrDiscipline: a reply outside a request handler, a second reply to
	// one request, a request from a reply handler, or a handler that
	// polls, waits or closes its endpoint.
	ErrDiscipline = errors.New("amii: request/reply discipline violated")
	// ErrTooLarge: a message larger than its class carries (more than
	// MaxArgs arguments, more than endpoint.MaxMedium bytes).
	ErrTooLarge = errors.New("amii: message too large")
	// ErrTimeout: no room (a credit, a send queue entry) within
	// Config.GiveUp, or requests unanswered.
	ErrTimeout = errors.New("amii: peer does not answer")
	// ErrBadDest: a destination index outside the endpoint's translation
	// table.
	ErrBadDest = errors.New("amii: no such destination")
	// ErrUnknownSender: a reply to a request whose sender is not in this
	// endpoint's translation table.
	ErrUnknownSender = errors.New("amii: the sender is not in this endpoint's translation table")
	// ErrNoMediumSlots: a medium message on an endpoint without medium
	// slots (Config.MediumSlots).
	ErrNoMediumSlots = errors.New("amii: no staging slots for medium messages")
	// ErrBadRegion: a Store whose region is empty or not inside the
	// application's part of the staging area (Staging).
	ErrBadRegion = errors.New("amii: region outside the application's staging area")
	// ErrNoHandler: a handler id of MaxHandlers or more (Handle).
	ErrNoHandler = errors.New("amii: no such handler")
	// ErrConfig: a configuration out of range.
	ErrConfig = errors.New("amii: invalid configuration")
	// ErrConflict: Handle at an id that has a handler already.
	ErrConflict = errors.New("amii: conflicting handler registration")
	// ErrClosed: the endpoint was closed (Endpoint.Close).
	ErrClosed = errors.New("amii: endpoint closed")
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

// Source returns the sender's index in this endpoint's translation table
// (the destination that Request takes to reach it), NoIndex if it is not
// there.
func (t *Token) Source() int {
	if t.src == endpoint.NoIndex {
		return NoIndex
	}
	return int(t.src)
}

// IsRequest reports whether the handler runs for a request.
func (t *Token) IsRequest() bool { return t.request }

// Reply sends the reply to the request the handler runs for, naming the
// requester's handler, with up to MaxArgs arguments. It may be called
// once, in a request handler only. While the reply send queue is full it
// drives the engine, for at most the give-up time.
func (t *Token) Reply(h HandlerID, args ...uint64) error {
	return t.reply(h, nil, args)
}

// ReplyMedium is Reply with up to endpoint.MaxMedium bytes of data, which it
// copies into a medium slot (waiting for one as for room in the queue);
// without data it sends a short reply.
func (t *Token) ReplyMedium(h HandlerID, data []byte, args ...uint64) error {
	if len(data) > endpoint.MaxMedium {
		return fmt.Errorf("%w: %d bytes, a medium message carries at most %d", ErrTooLarge, len(data), endpoint.MaxMedium)
	}
	return t.reply(h, data, args)
}

func (t *Token) reply(h HandlerID, data []byte, args []uint64) error {
	switch {
	case t.a == nil:
		return fmt.Errorf("%w: not a handler's token", ErrDiscipline)
	case !t.request:
		return fmt.Errorf("%w: a reply handler may not send", ErrDiscipline)
	case t.replied:
		return fmt.Errorf("%w: a request handler sends at most one reply", ErrDiscipline)
	case len(args) > MaxArgs:
		return fmt.Errorf("%w: %d arguments, a message carries at most %d", ErrTooLarge, len(args), MaxArgs)
	case t.src == endpoint.NoIndex:
		return ErrUnknownSender
	}
	var err error
	if len(data) > 0 {
		err = t.a.sendMedium(endpoint.ReplySend, t.src, uint32(h), data, args)
	} else {
		err = t.a.send(endpoint.ReplySend, t.src, uint32(h), args)
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
	Dest    int    // the destination index it was sent to
	Handler HandlerID
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
	Credits int // K, outstanding requests; default DefaultCredits, at most the queue entries
	// GiveUp is how long Request and Reply wait for room; default
	// DefaultGiveUp. With the default, a request that waits for a credit
	// held by requests unanswered waits past it, for the reply timer to
	// give one back (ReplyTimeout, longer by default).
	GiveUp time.Duration
	// ReplyTimeout is how long a request waits for its reply: past it, the
	// request is presumed lost (its receiver took it and died, or
	// restarted) and comes back to the error handler with
	// endpoint.ReasonNoReply, its credit given back. Default
	// DefaultReplyTimeout; negative: never. A reply that comes later still
	// runs its handler (counted in Stats.LateReplies), and a return that
	// comes later is only counted: a request goes to the error handler at
	// most once. See the package documentation for how late replies are
	// told from the next requests' replies.
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
	// A send that waits for room (a full send queue, no free medium slot)
	// yields the processor for Spin, then sleeps between its looks.
	Spin time.Duration
	// Coalesce, in inline mode, lets Request and Store only queue their
	// message: the engine runs when the endpoint polls (Poll, Wait, Drain)
	// or must wait for room (a credit, a queue entry), so the messages
	// sent between two polls leave in one engine run, packed into frames
	// (with EngineConfig.Window at least the credits, all of them at
	// once). Without it (the default) each message leaves before the call
	// that sends it returns: by the express path, or queued and the engine
	// run once. Firmware mode's engine runs by itself either way.
	Coalesce bool
	// RunEngine, in inline mode (New, Open), is what runs the engine once
	// when the endpoint drives it: default the engine's Poll. A benchmark
	// wraps it to time the engine's runs; a test that plays several hosts
	// in one goroutine makes it poll all their engines. With it set, no
	// message takes the express path (the engine may be run elsewhere).
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
	Express           uint64 // short messages handed to the inline engine directly (the express path, nicfw.Engine.Express), not queued
	Handled           uint64 // request handlers run
	ReplyHandled      uint64 // reply handlers run (implicit replies not counted)
	Returned          uint64 // returned messages handed to the error handler (or dropped without one)
	Unanswered        uint64 // requests returned for want of a reply (ReplyTimeout), counted in Returned too
	LateReplies       uint64 // replies and returns that came for no request outstanding (after their ReplyTimeout)
	Forgotten         uint64 // requests past their ReplyTimeout whose answer will not come (their destination restarted or closed): no longer awaited
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
	// expired: handed to the error handler past its reply timeout, and
	// kept for its late answer, which would otherwise be taken for the
	// next request's (replies name no request); inc: its destination's
	// incarnation when it was sent (0: none heard yet). The record goes
	// without an answer when that host restarts or the endpoint closes
	// (forget): then none will come.
	expired bool
	inc     uint8
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
	view *endpoint.View
	poll func() (int, error) // nil: firmware mode
	// express is the inline engine that short messages may be handed to
	// directly (nicfw.Engine.Express), as endpoint expressID: nil but in
	// inline mode with the engine's own Poll and without Coalesce. queued
	// says whether a message went into a send queue since the engine
	// last ran.
	express   *nicfw.Engine
	expressID nicfw.EndpointID
	queued    bool
	// batch: the requests this Poll dispatches are several, and their
	// replies are queued, to leave together in the engine run at its end
	// (one system call), not by the express path one at a time.
	batch  bool
	block  func(time.Duration) error // firmware mode's wait (newEndpoint)
	closer func() error              // what Close releases besides the view
	name   Name
	cfg    Config
	// creditWait: GiveUp is the default, and a request that waits for a
	// credit waits past it for the reply timer (waitCredit).
	creditWait bool
	idlePolls  uint   // inline Polls that ran nothing, for their yields
	table      uint32 // the translation table's size
	entries    int    // entries per queue
	handlers   []handler
	onReturn   func(Returned)
	pending    pendingRing      // requests sent and not answered, in the order sent
	expired    int              // of them, past their reply timeout (pendingRequest.expired)
	incs       []uint8          // by canonical index: the incarnation of its host last heard (heard)
	polls      uint             // pollLocked calls, for the reply timers
	yield      endpoint.Yielder // firmware mode: the waits' yields (spin)
	idles      uint             // letOthersIn calls
	depth      int              // handlers running (handlers do not nest)
	mu         sync.Mutex       // Shared: held by the goroutine in a method
	running    atomic.Bool      // Shared: a handler runs (in the lock's holder)
	blocking   int              // Shared, firmware mode: goroutines blocked in the blocking wait
	changed    chan struct{}    // Shared: closed (and replaced) when a Poll took messages
	tok        Token
	// Implicit replies owed: per source index, the requests dispatched in
	// this poll that their handlers did not answer, and the indices owed
	// any (sendNullReplies).
	owed     []uint32
	canon    []uint32 // each index's endpoint's first (noteTable); nil: every endpoint once
	owedList []uint32
	d        endpoint.Descriptor
	args     [MaxArgs]uint64
	nullArg  [1]uint64 // an implicit reply's argument
	slotBase int       // offset of the first medium slot: the end of the application's part
	free     []int     // free medium slots
	used     []slotUse // medium slots whose message the engine has not taken
	stats    Stats
	closed   bool
	gone     error // firmware mode: the daemon stopped (ErrClosed and daemon.ErrClosed wrapped)
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
		return nil, fmt.Errorf("%w: %d credits out of range [1, %d] (the endpoint's queue entries)", ErrConfig, cfg.Credits, ec.QueueEntries)
	}
	creditWait := cfg.GiveUp == 0
	if creditWait {
		cfg.GiveUp = DefaultGiveUp
	}
	if cfg.GiveUp < 0 {
		return nil, fmt.Errorf("%w: negative give-up time %v", ErrConfig, cfg.GiveUp)
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
		return nil, fmt.Errorf("%w: %d medium slots of %d bytes in a staging area of %d", ErrConfig, cfg.MediumSlots, endpoint.MaxMedium, ec.StagingSize)
	}
	a := &Endpoint{view: view, poll: poll, block: block, cfg: cfg, creditWait: creditWait, table: uint32(ec.TableSize), entries: ec.QueueEntries,
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
	// Every request is answered (a handler's reply, or the implicit
	// one): a daemon's engine may hold a request's acknowledgement for
	// the reply to carry.
	view.SetAnswers()
	if cfg.Shared {
		a.changed = make(chan struct{})
	}
	return a, nil
}

// MaxHandlers bounds the handlers of an endpoint: ids run from 0 to
// MaxHandlers-1.
const MaxHandlers = 4096

// Handle makes h the short-message handler of id, which senders name in
// their messages: an id the application chooses, so that senders need not
// know the order in which it registers its handlers. Requests for an id
// above the highest handled come back to their senders with
// ReasonNoHandler; one for a lower id without a handler gets an implicit
// reply and is counted in Stats.HandlerErrors. An id of MaxHandlers or
// more is ErrNoHandler, one that has a handler already ErrConflict, a nil h
// ErrConfig. Handle is to be called before messages for id arrive (and,
// with Config.Shared, before the endpoint is shared).
func (ep *Endpoint) Handle(id HandlerID, h Handler) error {
	if h == nil {
		return fmt.Errorf("%w: no handler", ErrConfig)
	}
	return ep.handle(id, handler{short: h})
}

// HandleMedium is Handle for a handler of medium and bulk messages; the
// two kinds share the ids.
func (ep *Endpoint) HandleMedium(id HandlerID, h MediumHandler) error {
	if h == nil {
		return fmt.Errorf("%w: no handler", ErrConfig)
	}
	return ep.handle(id, handler{medium: h})
}

func (ep *Endpoint) handle(id HandlerID, h handler) error {
	if err := ep.usable(); err != nil {
		return err
	}
	switch {
	case id >= MaxHandlers:
		return fmt.Errorf("%w: handler id %d (ids run to %d)", ErrNoHandler, id, MaxHandlers-1)
	case int(id) < len(ep.handlers) && (ep.handlers[id].short != nil || ep.handlers[id].medium != nil):
		return fmt.Errorf("%w: handler id %d is taken", ErrConflict, id)
	}
	if int(id) >= len(ep.handlers) {
		ep.handlers = append(ep.handlers, make([]handler, int(id)+1-len(ep.handlers))...)
		ep.view.SetHandlers(uint32(len(ep.handlers)))
	}
	ep.handlers[id] = h
	return nil
}

// Register adds a short-message handler at the lowest id above every id in
// use and returns it. Senders must then know the order of registration;
// Handle, with ids the application chooses, spares them that. An endpoint
// holds at most MaxHandlers handlers: past them, Register adds nothing and
// returns MaxHandlers, an id whose requests come back ReasonNoHandler.
func (ep *Endpoint) Register(h Handler) HandlerID {
	return ep.register(handler{short: h})
}

// RegisterMedium is Register for a handler of medium and bulk messages;
// the two kinds share the ids.
func (ep *Endpoint) RegisterMedium(h MediumHandler) HandlerID {
	return ep.register(handler{medium: h})
}

// register adds h to the handler table and tells the engine, which
// returns requests to unregistered handlers to their senders
// (endpoint.ReasonNoHandler).
func (ep *Endpoint) register(h handler) HandlerID {
	if len(ep.handlers) >= MaxHandlers {
		return MaxHandlers
	}
	ep.handlers = append(ep.handlers, h)
	if !ep.closed {
		ep.view.SetHandlers(uint32(len(ep.handlers)))
	}
	return HandlerID(len(ep.handlers) - 1)
}

// OnReturn sets the endpoint's error handler, which Poll calls for each
// returned message. It runs as a reply handler does: it may not send or
// poll (to send the message again, note it and send after Poll returns).
// Without one, returned messages are counted and dropped.
func (ep *Endpoint) OnReturn(f func(Returned)) { ep.onReturn = f }

// usable reports ErrClosed once the endpoint is closed, or its daemon
// stopped.
func (ep *Endpoint) usable() error {
	switch {
	case ep.closed:
		return ErrClosed
	case ep.gone != nil:
		return ep.gone
	}
	return nil
}

// Config returns the endpoint's configuration, defaults filled in.
func (ep *Endpoint) Config() Config { return ep.cfg }

// Stats returns the endpoint's counters.
func (ep *Endpoint) Stats() Stats {
	if ep.enter() != nil {
		return Stats{}
	}
	defer ep.exit()
	return ep.stats
}

// Outstanding returns the requests sent and not yet answered or returned:
// the credits in use.
func (ep *Endpoint) Outstanding() int {
	if ep.enter() != nil {
		return 0
	}
	defer ep.exit()
	return ep.outstanding()
}

// outstanding returns the requests sent and neither answered, returned
// nor past their reply timeout: the credits in use.
func (ep *Endpoint) outstanding() int { return ep.pending.Len() - ep.expired }

// Staging returns the application's part of the endpoint's staging area
// (the medium slots after it excluded): the bulk data it sends from
// (Bulk.Local) and where peers' Stores land (their Bulk.Remote); nil once
// the endpoint is closed.
func (ep *Endpoint) Staging() []byte {
	if ep.closed {
		return nil
	}
	return ep.view.Staging()[:ep.slotBase:ep.slotBase]
}
