package grim

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// MaxChannels is the most outbound logical channels an endpoint has. An
// endpoint with id E uses the engine's endpoint ids E .. E+Channels-1, so
// the ids of two GRIM endpoints of one host lie at least MaxChannels
// apart.
const MaxChannels = 16

// MaxBulk is the most bytes of a bulk message.
const MaxBulk = 48 << 10

// ShortArgs is the number of 32-bit integers a message carries.
const ShortArgs = 4

// HandlerID names a handler on every endpoint of the cluster.
type HandlerID uint32

// The predefined handlers, on every endpoint. Handlers an application
// registers take ids from FirstUserHandler.
const (
	// HandlerRegister, at the central endpoint: an endpoint's handler
	// list to merge (Synch).
	HandlerRegister HandlerID = 1
	// HandlerTable: the merged table, from the central endpoint, in
	// reply to a HandlerRegister or pushed when it changed.
	HandlerTable HandlerID = 2
	// HandlerMemory: a memory message (Write), stored by the engine; no
	// handler runs, its completion comes back to the writer.
	HandlerMemory HandlerID = 3
	// HandlerNull answers a request whose handler did not reply.
	HandlerNull HandlerID = 4
	// HandlerNoHandler answers a request for a handler id the receiver
	// has not registered; the requester hands the request to its error
	// handler (OnReturn) with ReasonNoHandler. (The engine returns
	// requests for ids above every registered one itself.)
	HandlerNoHandler HandlerID = 5
	// FirstUserHandler is the first id an application may register.
	FirstUserHandler HandlerID = 16
)

// Errors of the package. Test for them with errors.Is.
var (
	ErrConfig    = errors.New("grim: invalid configuration")
	ErrConflict  = errors.New("grim: conflicting handler registration")
	ErrNoHandler = errors.New("grim: no such handler")
	ErrDest      = errors.New("grim: no such destination")
	ErrTooLarge  = errors.New("grim: message too large")
	// ErrArgs: more than ShortArgs integers for a message.
	ErrArgs = errors.New("grim: too many arguments")
	// ErrBusy: a handler (or OnReturn) sent on a channel whose send
	// queue is full; outside handlers a send runs the engine until there
	// is room instead, for at most Config.GiveUp (then ErrTimeout).
	ErrBusy       = errors.New("grim: channel full")
	ErrTimeout    = errors.New("grim: timed out")
	ErrDiscipline = errors.New("grim: request/reply discipline violated")
	ErrShort      = errors.New("grim: message not written whole")
	// ErrClosed: the endpoint was closed (Endpoint.Close).
	ErrClosed = errors.New("grim: endpoint closed")
	// ErrChannel: no such logical channel (Endpoint.Channel).
	ErrChannel = errors.New("grim: no such channel")
)

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
	Peer    int  // the peer it was sent to (index in Config.Peers)
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
	return fmt.Sprintf("%s %s to peer %d (channel %d), handler %d: %v", kind, dir, r.Peer, r.Channel, r.Handler, r.Reason)
}

// Config configures an endpoint. Zero fields take the defaults.
type Config struct {
	// Peers names every GRIM endpoint of the cluster, this one included,
	// in the same order on every host: a message's destination is an
	// index into it. Peers[0] is the central endpoint that keeps the
	// handler registry; it is fixed (it does not follow the mapper's
	// leader).
	Peers []nicfw.Name
	// Self is this endpoint's index in Peers.
	Self int
	// Channels is the number of outbound logical channels (1..MaxChannels;
	// default 1). Weights, if set, gives each its share of the engine's
	// sends (QoS; 1..64).
	Channels int
	Weights  []int
	// PoolSize is the receive pool that bulk messages land in, shared by
	// every sender (default 256 KB); MemorySize the region memory messages
	// write, at the start of the staging area (default 64 KB); PayloadSize
	// each channel's payload region, which bulk and memory messages are
	// sent from (default 4*MaxBulk: a message being sent while the next ones
	// are written).
	PoolSize, MemorySize, PayloadSize int
	// Tag is the engine tag of the cluster's GRIM traffic (default
	// DefaultTag).
	Tag uint64
	// Key, if set (16 or 32 bytes; nicfw.NewKey), authenticates every
	// channel's messages between hosts (nicfw.VNet.Key): the same key on
	// every endpoint of the cluster.
	Key []byte
	// GiveUp bounds how long a call waits for the engine (a free entry in
	// a channel, the registry's answer); default 10 s.
	GiveUp time.Duration
	// ReplyTimeout is how long a request waits for its reply (or a
	// memory message for its completion) once the engine has sent it:
	// past it, the request is presumed lost (its receiver took it and then
	// closed or died) and comes back to the error handler with
	// ReasonNoReply. A request still queued (behind others to a dead host,
	// say) is not timed. Keep it above the transport's give-up time (the
	// default is twice the default one), so that a request to a host that
	// does not answer comes back ReasonUnreachable instead. Default
	// DefaultReplyTimeout; negative: never. A reply that comes later
	// still runs its handler, and a return that comes later is only
	// counted (Stats.LateReplies): a request is handed to the error
	// handler at most once.
	ReplyTimeout time.Duration
	// Bind binds registry names to the peers (indices in Peers) that alone
	// may register them: a key ending in "." binds every name it starts
	// (Bind{"disk.": 2}: "disk.read", "disk.write" are peer 2's). The
	// central endpoint refuses a bound name from any other peer
	// (ErrConflict at that peer's Synch), and every endpoint ignores a
	// table that gives one to another (Stats.BadTables). Give every
	// endpoint the same Bind.
	Bind map[string]int
	// CutThrough makes Bulk and Write inject cut-through: the engine
	// starts sending a message once its first Segment bytes are in the
	// payload region, while the rest is still being copied there, instead
	// of once all of it is (store-and-forward, the default). Stream is
	// cut-through whatever this says.
	CutThrough bool
}

// DefaultReplyTimeout is Config.ReplyTimeout's default: twice the
// transport's default give-up time.
const DefaultReplyTimeout = 2 * transport.DefaultGiveUpAfter

// Segment is the first segment of a cut-through message: the bytes
// written and published before its descriptor is sent.
const Segment = 32

// maxSegment bounds the growing segments Bulk writes a cut-through
// message in after its first.
const maxSegment = 8 << 10

// DefaultTag is Config.Tag's default.
const DefaultTag = 0x6772696d

// Handler runs a message: its four integers, and a bulk message's bytes
// (in place in the receive pool, valid while it runs; nil for a short
// message).
type Handler func(t *Token, args [ShortArgs]uint32, data []byte)

// Token is the message a handler runs for: its sender, and the reply. It
// is valid while the handler runs (the endpoint reuses it for the next
// message).
type Token struct {
	ep      *Endpoint
	ch      *Channel // the channel it came in on
	src     uint32   // the sender's engine table index
	request bool
	replied bool
}

// Source returns the sending endpoint's index in Config.Peers and the
// logical channel it sent on.
func (t *Token) Source() (peer, channel int) {
	return int(t.src) / MaxChannels, int(t.src) % MaxChannels
}

// Reply answers a request with a short message to handler h of the
// requester's channel. A request handler replies at most once; a reply
// handler not at all.
func (t *Token) Reply(h HandlerID, args ...uint32) error {
	if !t.request || t.replied {
		return ErrDiscipline
	}
	d, err := shortDesc(t.src, h, args)
	if err != nil {
		return err
	}
	t.replied = true
	if err := t.ch.send(endpoint.ReplySend, &d); err != nil {
		return err
	}
	t.ep.stats.Replies++
	return nil
}

// Channel is an outbound logical channel: an engine endpoint of its own
// (a header ring, a payload region, the rings' indices as its status
// registers), which one goroutine injects into without a lock.
type Channel struct {
	ep      *Endpoint
	id      nicfw.EndpointID
	n       int
	view    *endpoint.View
	close   func() error
	payload int // offset of the payload region in the staging area
	next    int // the payload region's next free byte (a ring)
	// writes: memory messages sent and not yet completed; pending: the
	// requests sent whose reply (or return) has not come back, oldest
	// first (a channel's requests to one peer are answered in order).
	writes  int
	pending []pendingRequest
	// replies: replies handlers sent while the reply queue was full, in
	// order, for the next Poll to send.
	replies []endpoint.Descriptor
	// live: the payload regions of requests in flight, oldest first.
	live []region
}

// pendingRequest is a request sent on a channel and not yet answered:
// what identifies it, and when the reply timer first saw it (zero: not
// yet).
type pendingRequest struct {
	dest    uint32 // engine table index
	handler HandlerID
	args    [ShortArgs]uint32
	length  uint32
	at      uint32 // a memory message's offset
	write   bool
	// seq is its index in the request send queue; seen when the reply
	// timer first saw it sent (the queue's done count past seq), zero
	// before.
	seq  uint32
	seen time.Time
}

// flushReplies sends the replies deferred while the reply queue was full,
// as far as it has room.
func (c *Channel) flushReplies() error {
	for len(c.replies) > 0 {
		err := c.view.Send(endpoint.ReplySend, &c.replies[0])
		if errors.Is(err, endpoint.ErrQueueFull) {
			return nil
		}
		if err != nil {
			return err
		}
		c.replies = c.replies[1:]
	}
	c.replies = nil
	return nil
}

// Endpoint is a GRIM endpoint: its logical channels, its handlers, and its
// copy of the cluster's handler registry.
type Endpoint struct {
	eng      *nicfw.Engine             // inline mode: the engine Poll runs; nil in firmware mode
	block    func(time.Duration) error // firmware mode: sleeps on the channels' notifications
	closeAll func() error
	cfg      Config
	name     nicfw.Name
	chans    []*Channel
	handlers map[HandlerID]Handler
	names    map[string]HandlerID // this endpoint's registrations
	registry *registry            // the central endpoint's (Peers[0])
	table    Table                // the last table the central sent
	tableGen uint32
	push     bool // the central's table changed: send it (pushTable)
	// Synch: waiting for the central's answer, and the answer.
	synching              bool
	synchStatus, synchGen uint32
	depth                 int
	tok                   Token // the message the handler running is for (run)
	stats                 Stats
	onReturn              func(Returned)
	closed                bool
	gone                  error     // firmware mode: the daemon stopped (ErrClosed wrapped)
	polls                 uint64    // Polls run, for the reply timer's period
	handlerCap            HandlerID // the engine accepts requests for ids below it
}

// Stats counts what an endpoint did.
type Stats struct {
	Shorts, Bulks, Writes uint64 // messages sent
	Replies               uint64 // replies sent: by handlers (Token.Reply) and by the layer for them
	Handled               uint64 // handlers run
	Completed             uint64 // memory messages completed
	Returned              uint64 // messages returned (to OnReturn, or dropped without one), ReasonNoReply included
	Unanswered            uint64 // requests returned for want of a reply (ReplyTimeout), counted in Returned too
	LateReplies           uint64 // replies and returns that came for no request outstanding (after their ReplyTimeout)
	Unknown               uint64 // requests for a handler not registered here (answered HandlerNoHandler)
	Strangers             uint64 // messages from endpoints outside Config.Peers, dropped: no handler runs
	Refused               uint64 // registry messages refused: a table or a synch answer not from the central endpoint, a generation that jumps
	BadTables             uint64 // registry tables that did not parse
	RepliesDeferred       uint64 // replies that found the reply queue full and waited for the next Poll
}

// New makes a GRIM endpoint in inline mode on eng, which the caller owns
// and polls (Poll runs it): its channels are engine endpoints
// Peers[Self].Endpoint + i.
func New(eng *nicfw.Engine, cfg Config) (*Endpoint, error) {
	if eng == nil {
		return nil, fmt.Errorf("%w: no engine", ErrConfig)
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if cfg.Peers[cfg.Self].Host != eng.Host() {
		return nil, fmt.Errorf("%w: Peers[%d] is on host %d, the engine is host %d", ErrConfig, cfg.Self, cfg.Peers[cfg.Self].Host, eng.Host())
	}
	ep := newEndpoint(cfg)
	ep.eng = eng
	err := ep.open(func(id nicfw.EndpointID, ec endpoint.Config, vn nicfw.VNet) (*endpoint.View, func() error, error) {
		mem, err := eng.CreateEndpoint(id, ec, vn)
		if err != nil {
			return nil, nil, err
		}
		v, err := endpoint.Map(mem.FD())
		if err != nil {
			eng.CloseEndpoint(id)
			return nil, nil, err
		}
		return v, func() error { return errors.Join(v.Close(), eng.CloseEndpoint(id)) }, nil
	})
	if err != nil {
		return nil, err
	}
	return ep, nil
}

// opener opens a channel: an engine endpoint and the application's view of
// its memory, and what closes both.
type opener func(id nicfw.EndpointID, ec endpoint.Config, vn nicfw.VNet) (*endpoint.View, func() error, error)

// fill checks cfg and sets its defaults.
func (cfg *Config) fill() error {
	if cfg.Channels == 0 {
		cfg.Channels = 1
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 256 << 10
	}
	if cfg.MemorySize == 0 {
		cfg.MemorySize = 64 << 10
	}
	if cfg.PayloadSize == 0 {
		cfg.PayloadSize = 4 * MaxBulk
	}
	if cfg.Tag == 0 {
		cfg.Tag = DefaultTag
	}
	if cfg.GiveUp == 0 {
		cfg.GiveUp = 10 * time.Second
	}
	if cfg.ReplyTimeout == 0 {
		cfg.ReplyTimeout = DefaultReplyTimeout
	}
	switch {
	case cfg.Self < 0 || cfg.Self >= len(cfg.Peers):
		return fmt.Errorf("%w: Self %d, %d peers", ErrConfig, cfg.Self, len(cfg.Peers))
	case cfg.Channels < 1 || cfg.Channels > MaxChannels:
		return fmt.Errorf("%w: %d channels, want 1..%d", ErrConfig, cfg.Channels, MaxChannels)
	case cfg.Weights != nil && len(cfg.Weights) != cfg.Channels:
		return fmt.Errorf("%w: %d weights for %d channels", ErrConfig, len(cfg.Weights), cfg.Channels)
	case slices.ContainsFunc(cfg.Weights, func(w int) bool { return w < 1 || w > nicfw.MaxWeight }):
		return fmt.Errorf("%w: weights %v, want 1..%d", ErrConfig, cfg.Weights, nicfw.MaxWeight)
	case cfg.PoolSize < MaxBulk || cfg.MemorySize < 0 || cfg.PayloadSize < MaxBulk+8:
		return fmt.Errorf("%w: pool %d (want >= %d), memory %d, payload %d (want >= %d)", ErrConfig, cfg.PoolSize, MaxBulk, cfg.MemorySize, cfg.PayloadSize, MaxBulk+8)
	case len(cfg.Peers)*MaxChannels > 1<<20:
		return fmt.Errorf("%w: %d peers", ErrConfig, len(cfg.Peers))
	}
	for name, peer := range cfg.Bind {
		if name == "" || len(name) > maxName || peer < 0 || peer >= len(cfg.Peers) {
			return fmt.Errorf("%w: Bind %q to peer %d of %d", ErrConfig, name, peer, len(cfg.Peers))
		}
	}
	return nil
}

func newEndpoint(cfg Config) *Endpoint {
	ep := &Endpoint{cfg: cfg, name: cfg.Peers[cfg.Self], handlers: map[HandlerID]Handler{}, names: map[string]HandlerID{},
		handlerCap: FirstUserHandler}
	ep.closeAll = ep.closeChannels
	if cfg.Self == 0 {
		ep.registry = newRegistry()
	}
	return ep
}

// open opens the endpoint's channels with open.
func (ep *Endpoint) open(open opener) error {
	cfg := ep.cfg
	// The table: every peer's every possible channel, so that a message
	// names its sender's channel (Token.Source) and a reply goes back to it.
	table := make([]nicfw.Name, 0, len(cfg.Peers)*MaxChannels)
	for _, p := range cfg.Peers {
		for c := range MaxChannels {
			table = append(table, nicfw.Name{Host: p.Host, Endpoint: p.Endpoint + nicfw.EndpointID(c)})
		}
	}
	// The payload region, 8-byte aligned: a cut-through message's status
	// register is the word before its bytes.
	payload := (cfg.MemorySize + cfg.PoolSize + 7) &^ 7
	staging := payload + cfg.PayloadSize
	for i := range cfg.Channels {
		id := ep.name.Endpoint + nicfw.EndpointID(i)
		w := 1
		if cfg.Weights != nil {
			w = cfg.Weights[i]
		}
		v, closer, err := open(id, endpoint.Config{StagingSize: staging, TableSize: len(table)},
			nicfw.VNet{Tag: cfg.Tag, Table: table, Weight: w, Ordered: true, Key: cfg.Key})
		if err != nil {
			ep.closeChannels()
			return err
		}
		v.SetStoreRegion(uint32(cfg.MemorySize))
		v.SetPool(uint32(cfg.MemorySize), uint32(cfg.PoolSize))
		v.SetHandlers(uint32(ep.handlerCap))
		ep.chans = append(ep.chans, &Channel{ep: ep, id: id, n: i, view: v, close: closer, payload: payload})
	}
	return nil
}

// Name returns the endpoint's global name (its channel 0's).
func (ep *Endpoint) Name() nicfw.Name { return ep.name }

// Channel returns outbound logical channel i (0..Channels()-1): ErrChannel
// for another i, ErrClosed once the endpoint is closed.
func (ep *Endpoint) Channel(i int) (*Channel, error) {
	switch {
	case ep.closed:
		return nil, ErrClosed
	case i < 0 || i >= len(ep.chans):
		return nil, fmt.Errorf("%w: %d, the endpoint has %d", ErrChannel, i, len(ep.chans))
	}
	return ep.chans[i], nil
}

// OnReturn sets the endpoint's error handler: Poll calls it for each
// message that comes back undelivered (the engine's return to sender, a
// request for a handler its receiver does not have) and for each request
// whose reply does not come within Config.ReplyTimeout, with the message's
// identity and the reason. It runs as handlers do: it may send, at most
// without waiting (ErrBusy), and may not Poll. Without one, returned
// messages are only counted (Stats.Returned).
func (ep *Endpoint) OnReturn(f func(Returned)) { ep.onReturn = f }

// Channels returns the number of logical channels.
func (ep *Endpoint) Channels() int { return len(ep.chans) }

// Stats returns the endpoint's counters.
func (ep *Endpoint) Stats() Stats { return ep.stats }

// Memory returns the region memory messages from peers write into (the
// start of channel 0's staging area); nil once the endpoint is closed.
func (ep *Endpoint) Memory() []byte {
	if ep.closed {
		return nil
	}
	return ep.chans[0].view.Staging()[:ep.cfg.MemorySize]
}

// Close closes the endpoint's channels at the engine (and, in firmware
// mode, the connection to the daemon). Afterwards every call on the
// endpoint or its channels returns ErrClosed. It may not be called from a
// handler.
func (ep *Endpoint) Close() error {
	if ep.closeAll == nil {
		return nil
	}
	if ep.depth > 0 {
		return fmt.Errorf("%w: Close from a handler", ErrDiscipline)
	}
	ep.closed = true
	err := ep.closeAll()
	ep.closeAll = nil
	if ep.gone != nil {
		return nil // the daemon stopped: its side is gone already
	}
	return err
}

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

// alive, in firmware mode, looks (without sleeping) whether the daemon
// has stopped, for the loops that wait for it: then they end with
// ErrClosed rather than at their give-up time.
func (ep *Endpoint) alive() error {
	if ep.block != nil && ep.gone == nil {
		ep.block(0) //nolint:errcheck // block notes a stopped daemon in ep.gone
	}
	return ep.usable()
}

// closeChannels closes the channels.
func (ep *Endpoint) closeChannels() error {
	var errs []error
	for _, c := range ep.chans {
		errs = append(errs, c.close())
	}
	ep.chans = nil
	return errors.Join(errs...)
}

// Handle registers h under id on this endpoint only (no name): for
// handlers every endpoint agrees on by number.
func (ep *Endpoint) Handle(id HandlerID, h Handler) error {
	switch {
	case ep.closed:
		return ErrClosed
	case id < FirstUserHandler:
		return fmt.Errorf("%w: handler %d is predefined", ErrConflict, id)
	case h == nil:
		return fmt.Errorf("%w: no handler", ErrConfig)
	case ep.handlers[id] != nil:
		return fmt.Errorf("%w: handler %d has a handler here already", ErrConflict, id)
	}
	ep.handlers[id] = h
	ep.accept(id)
	return nil
}

// accept lets the engine deliver requests for handler id: it returns
// those for ids above every handler registered (ReasonNoHandler) itself.
func (ep *Endpoint) accept(id HandlerID) {
	if id < ep.handlerCap || id == ^HandlerID(0) {
		return
	}
	ep.handlerCap = id + 1
	for _, c := range ep.chans {
		c.view.SetHandlers(uint32(ep.handlerCap))
	}
}

// index returns the engine table index of peer dest's channel 0.
func (ep *Endpoint) index(dest int) (uint32, error) {
	if dest < 0 || dest >= len(ep.cfg.Peers) {
		return 0, fmt.Errorf("%w: peer %d of %d", ErrDest, dest, len(ep.cfg.Peers))
	}
	return uint32(dest * MaxChannels), nil
}

// Short sends a short message on c: handler h of peer dest runs with args
// (at most ShortArgs; more is ErrArgs). It returns once the message is in
// c's send queue: while the queue is full it runs the engine and the
// handlers (inline) or waits for the daemon's engine (firmware mode), for
// at most Config.GiveUp (then ErrTimeout); from inside a handler, which
// may not run the engine, a full queue is ErrBusy. The message is a
// request: its handler's reply, or the layer's, answers it; if it comes
// back undelivered, or unanswered within Config.ReplyTimeout, the error
// handler (OnReturn) hears of it.
func (c *Channel) Short(dest int, h HandlerID, args ...uint32) error {
	if err := c.short(dest, h, args); err != nil {
		return err
	}
	c.ep.stats.Shorts++
	return nil
}

func (c *Channel) short(dest int, h HandlerID, args []uint32) error {
	if err := c.ep.usable(); err != nil {
		return err
	}
	d, err := c.header(dest, h, args)
	if err != nil {
		return err
	}
	return c.send(endpoint.RequestSend, &d)
}

// header returns the descriptor of a message to dest's handler h.
func (c *Channel) header(dest int, h HandlerID, args []uint32) (endpoint.Descriptor, error) {
	idx, err := c.ep.index(dest)
	if err != nil {
		return endpoint.Descriptor{}, err
	}
	return shortDesc(idx, h, args)
}

// shortDesc returns the descriptor of a short message to table index idx,
// handler h, with args.
func shortDesc(idx uint32, h HandlerID, args []uint32) (endpoint.Descriptor, error) {
	if len(args) > ShortArgs {
		return endpoint.Descriptor{}, fmt.Errorf("%w: %d integers, at most %d", ErrArgs, len(args), ShortArgs)
	}
	d := endpoint.Descriptor{Class: endpoint.ClassShort, Dest: idx, Handler: uint32(h), NArgs: ShortArgs}
	for i, a := range args {
		d.Args[i] = uint64(a)
	}
	return d, nil
}

// Bulk sends data (up to MaxBulk bytes) on c to handler h of peer dest,
// which runs with the bytes once all have arrived: the engine fragments
// the message, and the receiving engine reassembles it in a block of the
// receiver's pool that it finds as the first fragment arrives (or refuses
// the message for now: optimistic flow control). The bytes are copied into
// c's payload region first (cut-through: while the engine sends them;
// Config.CutThrough); data may be reused at once. It waits for room as
// Short does, and for the bytes of the payload region it needs (those of
// earlier messages the engine is done with), and like Short's its message
// is answered or comes back to the error handler (OnReturn).
func (c *Channel) Bulk(dest int, h HandlerID, data []byte, args ...uint32) error {
	var err error
	if len(data) == 0 { // no bytes: a short message
		err = c.short(dest, h, args)
	} else {
		err = c.inject(dest, h, endpoint.PoolOffset, data, args)
	}
	if err != nil {
		return err
	}
	c.ep.stats.Bulks++
	return nil
}

// Write sends a memory message: data copied into peer dest's memory
// region (Endpoint.Memory) at offset at. No handler runs; Completed counts
// it once the receiver has it (WaitWrites waits for all).
func (c *Channel) Write(dest int, at uint32, data []byte) error {
	if at == endpoint.PoolOffset {
		return fmt.Errorf("%w: offset %#x", ErrTooLarge, at)
	}
	if err := c.inject(dest, HandlerMemory, at, data, nil); err != nil {
		return err
	}
	c.writes++
	c.ep.stats.Writes++
	return nil
}

// inject sends a bulk message of data to handler h of dest, stored at
// remote (PoolOffset: in the receiver's pool), store-and-forward or
// cut-through as configured.
func (c *Channel) inject(dest int, h HandlerID, remote uint32, data []byte, args []uint32) error {
	if err := c.ep.usable(); err != nil {
		return err
	}
	if !c.ep.cfg.CutThrough {
		if len(data) == 0 || len(data) > MaxBulk {
			return fmt.Errorf("%w: %d bytes, want 1..%d", ErrTooLarge, len(data), MaxBulk)
		}
		d, err := c.header(dest, h, args)
		if err != nil {
			return err
		}
		off, err := c.reserve(len(data))
		if err != nil {
			return err
		}
		copy(c.view.Staging()[off:], data)
		d.Class, d.Offset, d.Length, d.RemoteOffset = endpoint.ClassBulk, off, uint32(len(data)), remote
		if err := c.send(endpoint.RequestSend, &d); err != nil {
			return err
		}
		c.sentLive()
		return nil
	}
	var st Stream
	if err := c.stream(&st, dest, h, remote, len(data), args); err != nil {
		return err
	}
	for seg := Segment; len(data) > 0; seg = min(2*seg, maxSegment) {
		n := min(seg, len(data))
		if _, err := st.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// Stream is a cut-through bulk message being written: the engine sends
// its bytes as Write publishes them.
type Stream struct {
	c       *Channel
	d       endpoint.Descriptor
	written uint32
	sent    bool // the descriptor is in the send queue
}

// Stream begins a cut-through bulk message of n bytes (1..MaxBulk) on c to
// handler h of peer dest, and returns it to be written: the descriptor
// leaves with the first Segment bytes written, and the engine sends each
// further Write's bytes as they are published, while the application
// writes the next. Every byte must be written (Close fills what was not
// with zeros, and says so); the channel sends nothing else before the
// message is whole.
func (c *Channel) Stream(dest int, h HandlerID, n int, args ...uint32) (*Stream, error) {
	st := new(Stream)
	if err := c.stream(st, dest, h, endpoint.PoolOffset, n, args); err != nil {
		return nil, err
	}
	c.ep.stats.Bulks++
	return st, nil
}

// stream begins st, a cut-through message of n bytes to handler h of
// dest, stored at remote.
func (c *Channel) stream(st *Stream, dest int, h HandlerID, remote uint32, n int, args []uint32) error {
	if err := c.ep.usable(); err != nil {
		return err
	}
	if n <= 0 || n > MaxBulk {
		return fmt.Errorf("%w: %d bytes, want 1..%d", ErrTooLarge, n, MaxBulk)
	}
	d, err := c.header(dest, h, args)
	if err != nil {
		return err
	}
	off, err := c.reserve(n)
	if err != nil {
		return err
	}
	if err := c.view.Publish(off, 0); err != nil {
		return err
	}
	d.Class, d.Flags, d.Offset, d.Length, d.RemoteOffset = endpoint.ClassBulk, endpoint.CutThrough, off, uint32(n), remote
	*st = Stream{c: c, d: d}
	return nil
}

// Write appends p to the message and publishes it to the engine, which
// runs once (in inline mode) to send what it can.
func (st *Stream) Write(p []byte) (int, error) {
	if err := st.c.ep.usable(); err != nil {
		return 0, err
	}
	if len(p) > int(st.d.Length-st.written) {
		return 0, fmt.Errorf("%w: %d bytes more than the %d-byte message holds", ErrTooLarge, len(p)-int(st.d.Length-st.written), st.d.Length)
	}
	c := st.c
	at := st.d.Offset + st.written
	copy(c.view.Staging()[at:at+uint32(len(p))], p)
	st.written += uint32(len(p))
	if !st.sent && st.written < min(Segment, st.d.Length) {
		return len(p), nil // the first segment is not complete yet
	}
	if err := c.view.Publish(st.d.Offset, st.written); err != nil {
		return 0, err
	}
	if !st.sent {
		if err := c.send(endpoint.RequestSend, &st.d); err != nil {
			return 0, err
		}
		c.sentLive()
		st.sent = true
	}
	if c.ep.eng != nil && c.ep.depth == 0 && st.written < st.d.Length {
		if _, err := c.ep.Poll(); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

// Close ends the message. One not written whole is completed with zeros,
// so that the channel moves on, and Close says how much was missing.
func (st *Stream) Close() error {
	missing := int(st.d.Length - st.written)
	if missing == 0 {
		return nil
	}
	if _, err := st.Write(make([]byte, missing)); err != nil {
		return err
	}
	return fmt.Errorf("%w: stream closed with %d of %d bytes not written (sent as zeros)", ErrShort, missing, st.d.Length)
}

// Pending returns c's requests not yet answered (or returned).
func (c *Channel) Pending() int { return len(c.pending) }

// Writes returns c's memory messages not yet completed.
func (c *Channel) Writes() int { return c.writes }

// reserve returns the offset in the staging area of n bytes of the
// payload region, the word before them free for a cut-through message's
// status register. The region is a ring of the bytes of requests in
// flight (live): a request's bytes are free again once the engine is done
// with it (endpoint.View.Done: sent whole and acknowledged, or returned),
// whether or not it is answered; reserve runs the engine until the bytes
// it hands out are free.
func (c *Channel) reserve(n int) (uint32, error) {
	at := (c.next + 4 + 7) &^ 7
	if at+n > c.ep.cfg.PayloadSize {
		at = 8
	}
	lo, hi := at-4, at+n
	if err := c.ep.runUntil(func() bool { return !c.overlaps(lo, hi) }, func() string {
		return fmt.Sprintf("channel %d: payload region still in use", c.n)
	}); err != nil {
		return 0, err
	}
	c.next = hi
	c.live = append(c.live, region{start: lo, end: hi})
	return uint32(c.payload + at), nil
}

// region is the bytes of a request in the payload region, and the
// request's index in the request send queue once sent.
type region struct {
	start, end int
	seq        uint32
	sent       bool
}

// overlaps drops the live regions the engine is done with and reports
// whether [lo, hi) overlaps one still live.
func (c *Channel) overlaps(lo, hi int) bool {
	done := c.view.Done()
	k := 0
	for k < len(c.live) && c.live[k].sent && int32(done-c.live[k].seq) > 0 {
		k++
	}
	if k > 0 { // keep one backing array: the ring's regions are few
		c.live = c.live[:copy(c.live, c.live[k:])]
	}
	for _, r := range c.live {
		if r.start < hi && lo < r.end {
			return true
		}
	}
	return false
}

// sentLive notes that the request just queued is the one whose bytes the
// last live region holds.
func (c *Channel) sentLive() {
	if n := len(c.live); n > 0 && !c.live[n-1].sent {
		put, _ := c.view.Progress(endpoint.RequestSend)
		c.live[n-1].seq, c.live[n-1].sent = put-1, true
	}
}

// send queues d on queue q of c, running the engine while the queue is
// full.
func (c *Channel) send(q endpoint.Queue, d *endpoint.Descriptor) error {
	if q == endpoint.ReplySend && len(c.replies) > 0 {
		c.replies = append(c.replies, *d) // after those waiting
		return nil
	}
	if err := c.ep.usable(); err != nil {
		return err
	}
	deadline := time.Now().Add(c.ep.cfg.GiveUp)
	for {
		err := c.view.Send(q, d)
		if err == nil && q == endpoint.RequestSend {
			c.sentRequest(d)
		}
		if !errors.Is(err, endpoint.ErrQueueFull) {
			return err
		}
		if c.ep.depth > 0 {
			if q == endpoint.ReplySend {
				// A handler must not run the engine, and a reply must
				// not be lost: it waits for the next Poll.
				c.replies = append(c.replies, *d)
				c.ep.stats.RepliesDeferred++
				return nil
			}
			return ErrBusy
		}
		// Run the engine and the handlers: replies that fill the receive
		// queues would otherwise hold up the peer's engine.
		if _, err := c.ep.Poll(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: channel %d full", ErrTimeout, c.n)
		}
		if err := c.ep.alive(); err != nil {
			return err
		}
		c.ep.yield()
	}
}

// Wait waits until a message has arrived on one of the endpoint's
// channels or timeout passes, and reports whether one may have (a true
// may be spurious: Poll and wait again). In firmware mode it sleeps on the
// daemon's notifications, leaving the core to the engine and other
// endpoints; in inline mode nothing moves unless the engine runs, so it
// runs the engine (and the reply timer) until a message is there, yielding
// the processor between runs. It may not be called from a handler.
func (ep *Endpoint) Wait(timeout time.Duration) (bool, error) {
	if err := ep.usable(); err != nil {
		return false, err
	}
	if ep.depth > 0 {
		return false, fmt.Errorf("%w: a handler may not wait", ErrDiscipline)
	}
	if ep.block == nil {
		return ep.waitInline(timeout)
	}
	ready := false
	for _, c := range ep.chans {
		ready = ready || c.view.Arm(endpoint.EventRequest|endpoint.EventReply) != 0
	}
	var err error
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
		if _, err := ep.eng.Poll(); err != nil {
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
		}
		runtime.Gosched()
	}
}

// yield, in a wait, lets the firmware's engine thread run where it shares
// the application's core.
func (ep *Endpoint) yield() {
	if ep.eng == nil {
		runtime.Gosched()
	}
}

// ready reports whether a receive queue of a channel holds a message.
func (ep *Endpoint) ready() bool {
	for _, c := range ep.chans {
		if c.view.Ready() != 0 {
			return true
		}
	}
	return false
}

// A channel's send and receive queues.
var (
	sendQueues    = [...]endpoint.Queue{endpoint.RequestSend, endpoint.ReplySend}
	receiveQueues = [...]endpoint.Queue{endpoint.RequestReceive, endpoint.ReplyReceive}
)

// replyCheckPolls is how often (in Polls) the reply timer looks at the
// requests outstanding.
const replyCheckPolls = 64

// Poll runs the engine once and then the handlers of what arrived on
// every channel (and the error handler for what came back, or went
// unanswered past Config.ReplyTimeout), and returns how many ran.
func (ep *Endpoint) Poll() (int, error) {
	if err := ep.usable(); err != nil {
		return 0, err
	}
	if ep.depth > 0 {
		return 0, ErrDiscipline
	}
	if ep.eng != nil {
		if _, err := ep.eng.Poll(); err != nil {
			return 0, err
		}
	}
	n := 0
	for _, c := range ep.chans {
		if err := c.flushReplies(); err != nil {
			return 0, err
		}
		for _, q := range receiveQueues {
			k, err := ep.dispatch(c, q)
			n += k
			if err != nil {
				return n, err
			}
		}
	}
	if ep.polls++; ep.polls%replyCheckPolls == 0 && ep.cfg.ReplyTimeout > 0 {
		n += ep.expire(time.Now())
	}
	return n, ep.pushTable()
}

// dispatch runs the handlers of what receive queue q of c holds.
func (ep *Endpoint) dispatch(c *Channel, q endpoint.Queue) (int, error) {
	n := 0
	for {
		var d endpoint.Descriptor
		ok, err := c.view.Peek(q, &d)
		if err != nil || !ok {
			return n, err
		}
		if reason, from, returned := d.ReturnInfo(); returned {
			ep.returned(c, &d, reason, from == endpoint.RequestSend)
			n++
		} else {
			var data []byte
			if d.Class == endpoint.ClassBulk {
				if data, err = c.view.Data(&d); err != nil {
					return n, err
				}
			}
			ep.run(c, q, &d, data)
			n++
		}
		if err := c.view.Release(q); err != nil {
			return n, err
		}
	}
}

// run runs the handler d names, and answers a request its handler did not.
func (ep *Endpoint) run(c *Channel, q endpoint.Queue, d *endpoint.Descriptor, data []byte) {
	var args [ShortArgs]uint32
	for i := range args {
		args[i] = uint32(d.Args[i])
	}
	h := HandlerID(d.Handler)
	if d.Dest == endpoint.NoIndex {
		// Not one of Config.Peers (its tag let it reach the engine
		// endpoint): no handler runs for it, nothing answers it.
		ep.stats.Strangers++
		return
	}
	var req pendingRequest
	answered := false
	if q == endpoint.ReplyReceive {
		if req, answered = c.answered(d.Dest, nil); !answered {
			ep.stats.LateReplies++
		} else if req.write {
			c.writes--
		}
		if h == HandlerNoHandler {
			if answered {
				ep.giveBack(c, req, endpoint.ReasonNoHandler, true)
			}
			return
		}
	}
	// Handlers do not nest (Poll refuses to run inside one), so one Token
	// serves every message.
	tok := &ep.tok
	*tok = Token{ep: ep, ch: c, src: d.Dest, request: q == endpoint.RequestReceive}
	ep.depth++
	switch h {
	case HandlerRegister:
		switch {
		case !tok.request && d.Dest/MaxChannels != 0:
			ep.stats.Refused++ // only the central endpoint answers a synch
		case !tok.request:
			ep.synchAnswered(args)
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
			if answered && req.write {
				ep.stats.Completed++
			}
			tok.replied = true
		}
	case HandlerNull, HandlerNoHandler:
	default:
		if f := ep.handlers[h]; f != nil {
			f(tok, args, data)
			ep.stats.Handled++
		} else if tok.request {
			ep.stats.Unknown++
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
		tok.Reply(r) //nolint:errcheck // counted by Reply; a lost one times the requester out
	}
	ep.depth--
}

// sentRequest records request d, just queued on c, as outstanding.
func (c *Channel) sentRequest(d *endpoint.Descriptor) {
	r := pendingRequest{dest: d.Dest, handler: HandlerID(d.Handler)}
	for i := range r.args {
		r.args[i] = uint32(d.Args[i])
	}
	if d.Class == endpoint.ClassBulk {
		r.length = d.Length
		if r.handler == HandlerMemory {
			r.write, r.at = true, d.RemoteOffset
		}
	}
	put, _ := c.view.Progress(endpoint.RequestSend)
	r.seq = put - 1
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
	c.pending = slices.Delete(c.pending, at, at+1)
	return r, true
}

// returned hands the message d describes, which came back to c with
// reason, to the error handler.
func (ep *Endpoint) returned(c *Channel, d *endpoint.Descriptor, reason endpoint.Reason, request bool) {
	r := pendingRequest{dest: d.Dest, handler: HandlerID(d.Handler)}
	for i := range r.args {
		r.args[i] = uint32(d.Args[i])
	}
	if d.Class&^endpoint.ClassReturned == endpoint.ClassBulk {
		r.length = d.Length
		if r.handler == HandlerMemory {
			r.write, r.at = true, d.RemoteOffset
		}
	}
	if request {
		p, ok := c.answered(d.Dest, &r)
		if !ok {
			ep.stats.LateReplies++ // handed over already (ReplyTimeout)
			return
		}
		r.seen = p.seen
		if p.write {
			c.writes--
		}
	}
	ep.giveBack(c, r, reason, request)
}

// giveBack counts r, a message of c that came back with reason, and hands
// it to the error handler if there is one.
func (ep *Endpoint) giveBack(c *Channel, r pendingRequest, reason endpoint.Reason, request bool) {
	ep.stats.Returned++
	if ep.onReturn == nil {
		return
	}
	ret := Returned{Reason: reason, Request: request, Peer: int(r.dest) / MaxChannels, Channel: c.n,
		Handler: r.handler, Args: r.args, Length: int(r.length), Write: r.write, At: r.at}
	if r.dest == endpoint.NoIndex {
		ret.Peer = -1
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
			if p.seen.IsZero() {
				if int32(done-p.seq) > 0 {
					p.seen = now // sent: its reply may come from now on
				}
			} else if now.Sub(p.seen) > ep.cfg.ReplyTimeout {
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
		for i := 0; i < len(c.pending); {
			p := &c.pending[i]
			if p.seen.IsZero() && int32(done-p.seq) > 0 {
				p.seen = now // sent: its reply may come from now on
			}
			if p.seen.IsZero() || now.Sub(p.seen) <= ep.cfg.ReplyTimeout {
				i++
				continue
			}
			r := *p
			c.pending = slices.Delete(c.pending, i, i+1)
			if r.write {
				c.writes--
			}
			ep.stats.Unanswered++
			ep.giveBack(c, r, endpoint.ReasonNoReply, true)
			n++
		}
	}
	return n
}

// WaitWrites runs the engine until every memory message of every channel
// is complete.
func (ep *Endpoint) WaitWrites() error {
	return ep.runUntil(func() bool { return !slices.ContainsFunc(ep.chans, func(c *Channel) bool { return c.writes > 0 }) },
		func() string { return "memory messages not completed" })
}

// runUntil runs the engine and the handlers until done holds, for at most
// Config.GiveUp (then ErrTimeout, with what). A handler must not run the
// engine: from one it is ErrBusy unless done already holds.
func (ep *Endpoint) runUntil(done func() bool, what func() string) error {
	if err := ep.usable(); err != nil {
		return err
	}
	deadline := time.Now().Add(ep.cfg.GiveUp)
	for !done() {
		if ep.depth > 0 {
			return ErrBusy
		}
		if _, err := ep.Poll(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s", ErrTimeout, what())
		}
		if err := ep.alive(); err != nil {
			return err
		}
		ep.yield()
	}
	return nil
}
