package grim

import (
	"errors"
	"fmt"
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
	// list to merge (Publish).
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
	// ErrDiscipline: a reply outside a request handler, a second reply to
	// one request, or a handler that polls, waits or closes its endpoint.
	ErrDiscipline = errors.New("grim: request/reply discipline violated")
	// ErrTooLarge: a message larger than it may be (more than ShortArgs
	// integers, more than MaxBulk bytes), or a stream written past its
	// length.
	ErrTooLarge = errors.New("grim: message too large")
	// ErrTimeout: the engine did not make room (a channel's queue, its
	// payload region), or did not answer (the registry, Drain), within
	// Config.GiveUp or Drain's timeout.
	ErrTimeout = errors.New("grim: timed out")
	// ErrBadDest: a destination that is not an index into Config.Peers,
	// or a name whose owner is not one of them (Owner).
	ErrBadDest = errors.New("grim: no such destination")
	// ErrNoHandler: a name the cluster's registry does not hold (Owner).
	ErrNoHandler = errors.New("grim: no such handler")
	// ErrConfig: a configuration out of range.
	ErrConfig = errors.New("grim: invalid configuration")
	// ErrConflict: a handler id or name taken already (Handle,
	// HandleNamed), or refused by the registry (Publish).
	ErrConflict = errors.New("grim: conflicting handler registration")
	// ErrClosed: the endpoint was closed (Endpoint.Close), or its daemon
	// stopped (firmware mode; then the error wraps daemon.ErrClosed too).
	ErrClosed = errors.New("grim: endpoint closed")
	// ErrBusy: a handler (or OnReturn) sent on a channel whose send
	// queue is full; outside handlers a send runs the engine until there
	// is room instead, for at most Config.GiveUp (then ErrTimeout).
	ErrBusy = errors.New("grim: channel full")
	// ErrShort: a stream closed before all its bytes were written.
	ErrShort = errors.New("grim: message not written whole")
	// ErrChannel: no such logical channel (Endpoint.Channel).
	ErrChannel = errors.New("grim: no such channel")
)

// Config configures an endpoint. Zero fields take the defaults.
type Config struct {
	// Peers names every GRIM endpoint of the cluster, this one included,
	// in the same order on every host: a message's destination is an
	// index into it. An endpoint's channels are the MaxChannels endpoint
	// ids from its own on, so peers on one host are at least that far
	// apart. Peers[0] is the central endpoint that keeps the handler
	// registry; it is fixed (it does not follow the mapper's leader).
	Peers []Name
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
	// handler at most once. Replies name no request (a channel's requests
	// to a peer are answered in order), so a request past its timeout is
	// still awaited, no longer counted outstanding (Outstanding, Drain),
	// for its late answer to end it and not the next request's: until
	// the answer comes, or its peer's host restarts, its endpoint
	// closes or it leaves the host table (Stats.Forgotten). One limit: a host that took requests and
	// restarted before this endpoint heard from it at all is not told
	// from its new incarnation, and the new one's replies are taken for
	// those requests' late ones.
	ReplyTimeout time.Duration
	// Bind binds registry names to the peers (indices in Peers) that alone
	// may register them: a key ending in "." binds every name it starts
	// (Bind{"disk.": 2}: "disk.read", "disk.write" are peer 2's). The
	// central endpoint refuses a bound name from any other peer
	// (ErrConflict at that peer's Publish), and every endpoint ignores a
	// table that gives one to another (Stats.BadTables). Give every
	// endpoint the same Bind.
	Bind map[string]int
	// CutThrough makes Bulk and Write inject cut-through: the engine
	// starts sending a message once its first Segment bytes are in the
	// payload region, while the rest is still being copied there, instead
	// of once all of it is (store-and-forward, the default). Stream is
	// cut-through whatever this says.
	CutThrough bool
	// Spin, in firmware mode, is how long Wait looks at the channels'
	// receive queues, yielding the processor between looks, before it
	// blocks on the daemon's notifications: a message that comes within
	// it spares the wake-up. Default DefaultSpin; negative: block at once.
	Spin time.Duration
}

// DefaultSpin is Config.Spin's default: longer than a round trip between
// two hosts' daemons.
const DefaultSpin = 100 * time.Microsecond

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

// Source returns the sending endpoint's index in Config.Peers (the
// destination that a send takes to reach it) and the logical channel it
// sent on.
func (t *Token) Source() (peer, channel int) {
	return int(t.src) / MaxChannels, int(t.src) % MaxChannels
}

// IsRequest reports whether the handler runs for a request.
func (t *Token) IsRequest() bool { return t.request }

// Reply answers a request with a short message to handler h of the
// requester's channel, with up to ShortArgs integers. A request handler
// replies at most once; a reply handler not at all.
func (t *Token) Reply(h HandlerID, args ...uint32) error {
	switch {
	case !t.request:
		return fmt.Errorf("%w: a reply handler may not send", ErrDiscipline)
	case t.replied:
		return fmt.Errorf("%w: a request handler sends at most one reply", ErrDiscipline)
	}
	if err := t.send(h, args); err != nil {
		return err
	}
	t.ep.stats.Replies++
	return nil
}

// send sends the reply to handler h: a handler's (Reply) or the layer's
// for it (Endpoint.run).
func (t *Token) send(h HandlerID, args []uint32) error {
	var d endpoint.Descriptor
	if len(args) > ShortArgs {
		return shortDesc(&d, t.src, h, args) // the error
	}
	putShort(&d, t.src, h, args)
	t.replied = true
	return t.ch.send(endpoint.ReplySend, &d)
}

// Endpoint is a GRIM endpoint: its logical channels, its handlers, and its
// copy of the cluster's handler registry.
type Endpoint struct {
	eng    *nicfw.Engine // inline mode: the engine Poll runs; nil in firmware mode
	queued bool          // inline: a message went into a send queue since the engine last ran
	// expressReply: inline, Poll is running the handler of its only
	// request, whose short reply may take the express path.
	expressReply bool
	block        func(time.Duration) error // firmware mode: sleeps on the channels' notifications
	closeAll     func() error
	cfg          Config
	name         nicfw.Name
	chans        []*Channel
	incs         []uint8          // by peer: the incarnation of its host last heard (heard)
	yield        endpoint.Yielder // firmware mode: the waits' yields (spin)
	arrivals     *endpoint.Bells  // the channels' page of doorbells, if they share one (useArrivals)
	arrWords     []arrivalWord    // with arrivals: the words that hold the channels' bits
	// deferred counts the channels with replies deferred (Channel.replies):
	// Poll looks at none of them while it is 0.
	deferred int
	handlers map[HandlerID]Handler
	byID     []Handler            // handlers[id] for ids below denseHandlers, indexed (setHandler)
	names    map[string]HandlerID // this endpoint's registrations
	registry *registry            // the central endpoint's (Peers[0])
	table    Table                // the last table the central sent
	tableGen uint32
	push     bool // the central's table changed: send it (pushTable)
	// Publish: waiting for the central's answer, and the answer.
	publishing                bool
	publishStatus, publishGen uint32
	depth                     int
	tok                       Token               // the message the handler running is for (run)
	d                         endpoint.Descriptor // the message dispatch took (handlers do not nest)
	stats                     Stats
	onReturn                  func(Returned)
	closed                    bool
	gone                      error     // firmware mode: the daemon stopped (ErrClosed wrapped)
	polls                     uint64    // Polls run, for the reply timer's period
	idles                     uint      // inline Polls that ran nothing, for their yields
	handlerCap                HandlerID // the engine accepts requests for ids below it
}

// Stats counts what an endpoint did.
type Stats struct {
	Requests              uint64 // requests sent (short, bulk and memory messages)
	Shorts, Bulks, Writes uint64 // requests sent, by class
	Replies               uint64 // replies handlers sent (Token.Reply)
	NullReplies           uint64 // requests the layer answered for their handlers (HandlerNull, HandlerNoHandler, memory completions)
	Handled               uint64 // request handlers run
	ReplyHandled          uint64 // reply handlers run
	Completed             uint64 // memory messages completed
	Returned              uint64 // messages returned (to OnReturn, or dropped without one), ReasonNoReply included
	Unanswered            uint64 // requests returned for want of a reply (ReplyTimeout), counted in Returned too
	LateReplies           uint64 // replies and returns that came for no request outstanding (after their ReplyTimeout)
	Forgotten             uint64 // requests past their ReplyTimeout whose answer will not come (their peer restarted or closed): no longer awaited
	HandlerErrors         uint64 // requests for a handler not registered here (answered HandlerNoHandler)
	Strangers             uint64 // messages from endpoints outside Config.Peers, dropped: no handler runs
	Refused               uint64 // registry messages refused: a table or a Publish answer not from the central endpoint, a generation that jumps
	BadTables             uint64 // registry tables that did not parse
	RepliesDeferred       uint64 // replies that found the reply queue full and waited for the next Poll
	Express               uint64 // short messages handed to the inline engine directly (nicfw.Engine.Express), not queued: replies, and requests on idle channels
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
		if err == nil {
			if err = v.MapBells(eng.BellsFD(id)); err != nil {
				v.Close()
			}
		}
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
	if cfg.Spin == 0 {
		cfg.Spin = DefaultSpin
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
	if i, j, ok := overlapping(cfg.Peers); ok {
		return fmt.Errorf("%w: Peers[%d] (%v) and Peers[%d] (%v) share endpoints: the channels of peers on one host are %d endpoint ids each", ErrConfig, i, cfg.Peers[i], j, cfg.Peers[j], MaxChannels)
	}
	for name, peer := range cfg.Bind {
		if name == "" || len(name) > maxName || peer < 0 || peer >= len(cfg.Peers) {
			return fmt.Errorf("%w: Bind %q to peer %d of %d", ErrConfig, name, peer, len(cfg.Peers))
		}
	}
	return nil
}

// overlapping finds two peers whose channels would share endpoints: on
// one host, less than MaxChannels endpoint ids apart (the table names
// every peer's every possible channel, and a message from an endpoint
// named twice could not say which peer's channel sent it).
func overlapping(peers []Name) (i, j int, ok bool) {
	byHost := map[nicfw.HostID][]int{}
	for k, p := range peers {
		if int(p.Endpoint) > 0xffff-(MaxChannels-1) {
			return k, k, true // its channels would wrap round to ids 0 and up
		}
		byHost[p.Host] = append(byHost[p.Host], k)
	}
	for _, ks := range byHost {
		slices.SortFunc(ks, func(a, b int) int { return int(peers[a].Endpoint) - int(peers[b].Endpoint) })
		for n := 1; n < len(ks); n++ {
			if int(peers[ks[n]].Endpoint)-int(peers[ks[n-1]].Endpoint) < MaxChannels {
				return min(ks[n-1], ks[n]), max(ks[n-1], ks[n]), true
			}
		}
	}
	return 0, 0, false
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
	ep.useArrivals()
	return nil
}

// useArrivals makes Poll and Wait look at the channels' arrival bits
// (endpoint.Bells.Arrivals) instead of each channel's receive queues, when
// every channel has a bit in one page of doorbells: then a Poll with
// nothing arrived reads one word (the channels' bits lie in one or two
// words), however many channels there are, and a Poll visits only the
// channels whose bits are set.
func (ep *Endpoint) useArrivals() {
	page, _ := ep.chans[0].view.Bells()
	var words []arrivalWord
	for _, c := range ep.chans {
		b, bit := c.view.Bells()
		if bit == 0 || !b.SamePage(page) {
			return
		}
		c.bit = bit
		i := slices.IndexFunc(words, func(w arrivalWord) bool { return w.bit/64 == bit/64 })
		if i < 0 {
			i = len(words)
			words = append(words, arrivalWord{bit: bit})
		}
		words[i].mask |= 1 << (bit % 64)
		words[i].chanAt[bit%64] = uint8(c.n)
	}
	ep.arrivals, ep.arrWords = page, words
}

// arrivalWord is a word of arrival bits that holds some of an endpoint's
// channels' bits: a bit in it (for endpoint.Bells.Arrivals), their mask,
// and the channel each bit stands for.
type arrivalWord struct {
	bit    int
	mask   uint64
	chanAt [64]uint8
}

// Name returns the endpoint's global name (its channel 0's).
func (ep *Endpoint) Name() Name { return ep.name }

// Config returns the endpoint's configuration, defaults filled in.
func (ep *Endpoint) Config() Config { return ep.cfg }

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

// Handle makes h the handler of id on this endpoint only (no name in the
// registry): for handlers every endpoint agrees on by number. An id below
// FirstUserHandler or one that has a handler already is ErrConflict, a nil
// h ErrConfig.
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
	ep.setHandler(id, h)
	return nil
}

// denseHandlers bounds the handler ids that Endpoint.byID holds: ids are
// taken from FirstUserHandler up, so the handlers of an application sit
// at the front, found by index where a map lookup costs a hash.
const denseHandlers = 1024

// setHandler makes h the handler of id.
func (ep *Endpoint) setHandler(id HandlerID, h Handler) {
	ep.handlers[id] = h
	if id < denseHandlers {
		if int(id) >= len(ep.byID) {
			ep.byID = append(ep.byID, make([]Handler, int(id)+1-len(ep.byID))...)
		}
		ep.byID[id] = h
	}
	ep.accept(id)
}

// handler returns the handler of id, nil if it has none.
func (ep *Endpoint) handler(id HandlerID) Handler {
	if int(id) < len(ep.byID) {
		return ep.byID[id]
	}
	return ep.handlers[id]
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
		return 0, ep.badDest(dest) // (the error apart: index is inlined)
	}
	return uint32(dest * MaxChannels), nil
}

// badDest is index's error for dest.
func (ep *Endpoint) badDest(dest int) error {
	return fmt.Errorf("%w: peer %d of %d", ErrBadDest, dest, len(ep.cfg.Peers))
}
