package grim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
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
	// FirstUserHandler is the first id an application may register.
	FirstUserHandler HandlerID = 16
)

// Errors of the package. Test for them with errors.Is.
var (
	ErrConfig     = errors.New("grim: invalid configuration")
	ErrConflict   = errors.New("grim: conflicting handler registration")
	ErrNoHandler  = errors.New("grim: no such handler")
	ErrDest       = errors.New("grim: no such destination")
	ErrTooLarge   = errors.New("grim: message too large")
	ErrBusy       = errors.New("grim: channel full")
	ErrTimeout    = errors.New("grim: timed out")
	ErrDiscipline = errors.New("grim: request/reply discipline violated")
)

// Config configures an endpoint. Zero fields take the defaults.
type Config struct {
	// Peers names every GRIM endpoint of the cluster, this one included,
	// in the same order on every host: a message's destination is an
	// index into it. Peers[0] is the central endpoint that keeps the
	// handler registry (the mapper's leader's, or host 1's).
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
	// sent from (default 2*MaxBulk).
	PoolSize, MemorySize, PayloadSize int
	// Tag is the engine tag of the cluster's GRIM traffic (default
	// DefaultTag).
	Tag uint64
	// GiveUp bounds how long a call waits for the engine (a free entry in
	// a channel, the registry's answer); default 10 s.
	GiveUp time.Duration
}

// DefaultTag is Config.Tag's default.
const DefaultTag = 0x6772696d

// Handler runs a message: its four integers, and a bulk message's bytes
// (in place in the receive pool, valid while it runs; nil for a short
// message).
type Handler func(t *Token, args [ShortArgs]uint32, data []byte)

// Token is the message a handler runs for: its sender, and the reply.
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
	return t.ch.send(endpoint.ReplySend, &d)
}

// Channel is an outbound logical channel: an engine endpoint of its own
// (a header ring, a payload region, the rings' indices as its status
// registers), which one goroutine injects into without a lock.
type Channel struct {
	ep      *Endpoint
	id      nicfw.EndpointID
	n       int
	view    *endpoint.View
	payload int // offset of the payload region in the staging area
	next    int // the payload region's next free byte (a ring)
	// writes: memory messages sent and not yet completed.
	writes int
}

// Endpoint is a GRIM endpoint: its logical channels, its handlers, and its
// copy of the cluster's handler registry.
type Endpoint struct {
	eng      *nicfw.Engine
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
	stats                 Stats
}

// Stats counts what an endpoint did.
type Stats struct {
	Shorts, Bulks, Writes uint64 // messages sent
	Replies               uint64
	Handled               uint64 // handlers run
	Completed             uint64 // memory messages completed
	Returned              uint64 // messages the engine returned
	Unknown               uint64 // messages for a handler not registered here
	BadTables             uint64 // registry tables that did not parse
	RepliesLost           uint64 // implicit replies not sent: the reply queue was full
}

// New makes a GRIM endpoint on eng, which the caller owns and polls (Poll
// runs it): its channels are engine endpoints Peers[Self].Endpoint + i.
func New(eng *nicfw.Engine, cfg Config) (*Endpoint, error) {
	if eng == nil {
		return nil, fmt.Errorf("%w: no engine", ErrConfig)
	}
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
		cfg.PayloadSize = 2 * MaxBulk
	}
	if cfg.Tag == 0 {
		cfg.Tag = DefaultTag
	}
	if cfg.GiveUp == 0 {
		cfg.GiveUp = 10 * time.Second
	}
	switch {
	case cfg.Self < 0 || cfg.Self >= len(cfg.Peers):
		return nil, fmt.Errorf("%w: Self %d, %d peers", ErrConfig, cfg.Self, len(cfg.Peers))
	case cfg.Channels < 1 || cfg.Channels > MaxChannels:
		return nil, fmt.Errorf("%w: %d channels, want 1..%d", ErrConfig, cfg.Channels, MaxChannels)
	case cfg.Weights != nil && len(cfg.Weights) != cfg.Channels:
		return nil, fmt.Errorf("%w: %d weights for %d channels", ErrConfig, len(cfg.Weights), cfg.Channels)
	case cfg.PoolSize < MaxBulk || cfg.MemorySize < 0 || cfg.PayloadSize < MaxBulk:
		return nil, fmt.Errorf("%w: pool %d (want >= %d), memory %d, payload %d (want >= %d)", ErrConfig, cfg.PoolSize, MaxBulk, cfg.MemorySize, cfg.PayloadSize, MaxBulk)
	case cfg.Peers[cfg.Self].Host != eng.Host():
		return nil, fmt.Errorf("%w: Peers[%d] is on host %d, the engine is host %d", ErrConfig, cfg.Self, cfg.Peers[cfg.Self].Host, eng.Host())
	}
	if len(cfg.Peers)*MaxChannels > 1<<20 {
		return nil, fmt.Errorf("%w: %d peers", ErrConfig, len(cfg.Peers))
	}
	// The table: every peer's every possible channel, so that a message
	// names its sender's channel (Token.Source) and a reply goes back to it.
	table := make([]nicfw.Name, 0, len(cfg.Peers)*MaxChannels)
	for _, p := range cfg.Peers {
		for c := range MaxChannels {
			table = append(table, nicfw.Name{Host: p.Host, Endpoint: p.Endpoint + nicfw.EndpointID(c)})
		}
	}
	ep := &Endpoint{eng: eng, cfg: cfg, name: cfg.Peers[cfg.Self], handlers: map[HandlerID]Handler{}, names: map[string]HandlerID{}}
	if cfg.Self == 0 {
		ep.registry = newRegistry()
	}
	staging := cfg.MemorySize + cfg.PoolSize + cfg.PayloadSize
	for i := range cfg.Channels {
		id := ep.name.Endpoint + nicfw.EndpointID(i)
		w := 1
		if cfg.Weights != nil {
			w = cfg.Weights[i]
		}
		mem, err := eng.CreateEndpoint(id, endpoint.Config{StagingSize: staging, TableSize: len(table)},
			nicfw.VNet{Tag: cfg.Tag, Table: table, Weight: w})
		if err != nil {
			ep.Close()
			return nil, err
		}
		v, err := endpoint.Map(mem.FD())
		if err != nil {
			eng.CloseEndpoint(id)
			ep.Close()
			return nil, err
		}
		v.SetStoreRegion(uint32(cfg.MemorySize))
		v.SetPool(uint32(cfg.MemorySize), uint32(cfg.PoolSize))
		ep.chans = append(ep.chans, &Channel{ep: ep, id: id, n: i, view: v, payload: cfg.MemorySize + cfg.PoolSize})
	}
	return ep, nil
}

// Name returns the endpoint's global name (its channel 0's).
func (ep *Endpoint) Name() nicfw.Name { return ep.name }

// Channel returns outbound logical channel i.
func (ep *Endpoint) Channel(i int) *Channel { return ep.chans[i] }

// Channels returns the number of logical channels.
func (ep *Endpoint) Channels() int { return len(ep.chans) }

// Stats returns the endpoint's counters.
func (ep *Endpoint) Stats() Stats { return ep.stats }

// Memory returns the region memory messages from peers write into (the
// start of channel 0's staging area).
func (ep *Endpoint) Memory() []byte { return ep.chans[0].view.Staging()[:ep.cfg.MemorySize] }

// Close closes the endpoint's channels at the engine.
func (ep *Endpoint) Close() error {
	var errs []error
	for _, c := range ep.chans {
		errs = append(errs, c.view.Close(), ep.eng.CloseEndpoint(c.id))
	}
	ep.chans = nil
	return errors.Join(errs...)
}

// Handle registers h under id on this endpoint only (no name): for
// handlers every endpoint agrees on by number.
func (ep *Endpoint) Handle(id HandlerID, h Handler) error {
	if id < FirstUserHandler {
		return fmt.Errorf("%w: handler %d is predefined", ErrConflict, id)
	}
	ep.handlers[id] = h
	return nil
}

// index returns the engine table index of peer dest's channel 0.
func (ep *Endpoint) index(dest int) (uint32, error) {
	if dest < 0 || dest >= len(ep.cfg.Peers) {
		return 0, fmt.Errorf("%w: peer %d of %d", ErrDest, dest, len(ep.cfg.Peers))
	}
	return uint32(dest * MaxChannels), nil
}

// Short sends a short message on c: handler h of peer dest runs with args.
func (c *Channel) Short(dest int, h HandlerID, args ...uint32) error {
	d, err := c.header(dest, h, args)
	if err != nil {
		return err
	}
	if err := c.send(endpoint.RequestSend, &d); err != nil {
		return err
	}
	c.ep.stats.Shorts++
	return nil
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
		return endpoint.Descriptor{}, fmt.Errorf("%w: %d integers, at most %d", ErrConfig, len(args), ShortArgs)
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
// c's payload region first; data may be reused at once.
func (c *Channel) Bulk(dest int, h HandlerID, data []byte, args ...uint32) error {
	if len(data) > MaxBulk {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(data), MaxBulk)
	}
	d, err := c.header(dest, h, args)
	if err != nil {
		return err
	}
	if len(data) == 0 { // no bytes: a short message
		if err := c.send(endpoint.RequestSend, &d); err != nil {
			return err
		}
		c.ep.stats.Bulks++
		return nil
	}
	off, err := c.stage(data)
	if err != nil {
		return err
	}
	d.Class, d.Offset, d.Length, d.RemoteOffset = endpoint.ClassBulk, off, uint32(len(data)), endpoint.PoolOffset
	if err := c.send(endpoint.RequestSend, &d); err != nil {
		return err
	}
	c.ep.stats.Bulks++
	return nil
}

// Write sends a memory message: data copied into peer dest's memory
// region (Endpoint.Memory) at offset at. No handler runs; Completed counts
// it once the receiver has it (WaitWrites waits for all).
func (c *Channel) Write(dest int, at uint32, data []byte) error {
	if len(data) > MaxBulk {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(data), MaxBulk)
	}
	d, err := c.header(dest, HandlerMemory, nil)
	if err != nil {
		return err
	}
	off, err := c.stage(data)
	if err != nil {
		return err
	}
	d.Class, d.Offset, d.Length, d.RemoteOffset = endpoint.ClassBulk, off, uint32(len(data)), at
	if err := c.send(endpoint.RequestSend, &d); err != nil {
		return err
	}
	c.writes++
	c.ep.stats.Writes++
	return nil
}

// Writes returns c's memory messages not yet completed.
func (c *Channel) Writes() int { return c.writes }

// stage copies data into the payload region, where the engine reads it
// from when it sends; a slot is reused after the ring has gone round, by
// which time the engine has sent what was there (the channel waits for
// its header ring to drain first).
func (c *Channel) stage(data []byte) (uint32, error) {
	size := c.ep.cfg.PayloadSize
	if c.next+len(data) > size {
		c.next = 0
	}
	if c.next == 0 {
		// Going round: what the ring held must have left.
		if err := c.drain(); err != nil {
			return 0, err
		}
	}
	off := c.payload + c.next
	copy(c.view.Staging()[off:], data)
	c.next += len(data)
	return uint32(off), nil
}

// drain runs the engine until c's send queues are empty and its bulk
// messages finished.
func (c *Channel) drain() error {
	deadline := time.Now().Add(c.ep.cfg.GiveUp)
	for {
		busy := false
		for _, q := range sendQueues {
			if put, taken := c.view.Progress(q); put != taken {
				busy = true
			}
		}
		if !busy && !c.ep.eng.Busy() {
			return nil
		}
		if _, err := c.ep.Poll(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: channel %d did not drain", ErrTimeout, c.n)
		}
	}
}

// send queues d on queue q of c, running the engine while the queue is
// full.
func (c *Channel) send(q endpoint.Queue, d *endpoint.Descriptor) error {
	deadline := time.Now().Add(c.ep.cfg.GiveUp)
	for {
		err := c.view.Send(q, d)
		if !errors.Is(err, endpoint.ErrQueueFull) {
			return err
		}
		if c.ep.depth > 0 {
			return ErrBusy // a handler must not run the engine
		}
		// Run the engine and the handlers: replies that fill the receive
		// queues would otherwise hold up the peer's engine.
		if _, err := c.ep.Poll(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: channel %d full", ErrTimeout, c.n)
		}
	}
}

// A channel's send and receive queues.
var (
	sendQueues    = [...]endpoint.Queue{endpoint.RequestSend, endpoint.ReplySend}
	receiveQueues = [...]endpoint.Queue{endpoint.RequestReceive, endpoint.ReplyReceive}
)

// Poll runs the engine once and then the handlers of what arrived on
// every channel, and returns how many ran.
func (ep *Endpoint) Poll() (int, error) {
	if ep.depth > 0 {
		return 0, ErrDiscipline
	}
	if _, err := ep.eng.Poll(); err != nil {
		return 0, err
	}
	n := 0
	for _, c := range ep.chans {
		for _, q := range receiveQueues {
			k, err := ep.dispatch(c, q)
			n += k
			if err != nil {
				return n, err
			}
		}
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
		if d.Class&endpoint.ClassReturned != 0 {
			ep.stats.Returned++
			if d.Handler == uint32(HandlerMemory) {
				c.writes--
			}
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
	tok := Token{ep: ep, ch: c, src: d.Dest, request: q == endpoint.RequestReceive}
	h := HandlerID(d.Handler)
	ep.depth++
	switch h {
	case HandlerRegister:
		switch {
		case !tok.request:
			ep.synchAnswered(args)
		case ep.registry != nil:
			ep.registry.merge(ep, &tok, data)
		}
	case HandlerTable:
		ep.tableArrived(args, data)
	case HandlerMemory:
		if !tok.request {
			c.writes--
			ep.stats.Completed++
			tok.replied = true
		}
	case HandlerNull:
	default:
		if f := ep.handlers[h]; f != nil {
			f(&tok, args, data)
			ep.stats.Handled++
		} else {
			ep.stats.Unknown++
		}
	}
	if tok.request && !tok.replied && d.Dest != endpoint.NoIndex {
		// Memory messages' completions, and the null reply that keeps
		// request/reply: HandlerMemory answers HandlerMemory. Still at
		// handler depth: a full reply queue does not run the engine (and
		// this message's handler again) from here.
		r := HandlerNull
		if h == HandlerMemory {
			r = HandlerMemory
		}
		if tok.Reply(r) == nil {
			ep.stats.Replies++
		} else {
			ep.stats.RepliesLost++
		}
	}
	ep.depth--
}

// WaitWrites runs the engine until every memory message of every channel
// is complete.
func (ep *Endpoint) WaitWrites() error {
	deadline := time.Now().Add(ep.cfg.GiveUp)
	for slices.ContainsFunc(ep.chans, func(c *Channel) bool { return c.writes > 0 }) {
		if _, err := ep.Poll(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: memory messages not completed", ErrTimeout)
		}
	}
	return nil
}
