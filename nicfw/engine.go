package nicfw

import (
	"bytes"
	"crypto/cipher"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/internal/clock"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// The engine loop: endpoints, scheduler, residency and transport joined
// into AM-II's NIC processor, run inline by the caller's goroutine (Poll).
// See the package documentation ("Engine") for the design; in short, one
// Poll
//
//  1. sends the return messages queued for remote senders (flushReturns);
//  2. lets the scheduler pick endpoints with sends pending, touches each in
//     the residency, takes a descriptor (replies before requests), or
//     moves on to the next chunk of a bulk message, translates its
//     destination index and hands the message to the transport, or
//     delivers it locally (sendPhase);
//  3. polls the transport, whose Deliver and Returned callbacks put
//     messages into receive queues (and their data into receive or staging
//     areas) or return them to their senders;
//  4. notices acknowledgements (collectAcks) and releases the senders;
//  5. puts returned messages into their senders' reply receive queues
//     (flushReturning).
//
// Endpoints are closed by CloseEndpoint (endpoint_close.go), which also
// holds what the daemon needs for sleeping (setIdle, busy).

// EndpointID names an endpoint within its host.
type EndpointID uint16

// Name is an endpoint's global name: its host and its id there.
type Name struct {
	Host     HostID
	Endpoint EndpointID
}

// VNet is an endpoint's view of its virtual network: its tag and its
// translation table. Table[i] is the endpoint that a send descriptor with
// Dest i goes to. The tag is stamped by the engine on every message the
// endpoint sends (the Tag field of send descriptors is ignored, so an
// application cannot forge it) and a message is delivered to the endpoint
// only if it carries the same tag.
type VNet struct {
	Tag   uint64
	Table []Name
	// Weight is the endpoint's share of the engine's sends when several
	// endpoints have work: the scheduler's weighted round robin lets it
	// send up to Weight messages per round (1..MaxWeight; default 1).
	Weight int
	// Owner is the local user the endpoint belongs to: the uid of the
	// application that opened it, in firmware mode (the daemon sets it);
	// 0 inline. The engine shares its sends, then its frames, among the
	// owners with work first and among an owner's endpoints second
	// (sched.go, residency.go), so that one user's many endpoints cannot
	// crowd out another user's few.
	Owner uint32
	// Ordered delivers the endpoint's messages to each host in the order
	// it sent them, whatever the window: a message leaves only once the
	// endpoint's last message to the same host is acknowledged (messages
	// to other hosts fly together, and a bulk message's chunks up to the
	// window). Without it, messages in flight together may arrive in any
	// order when frames are lost.
	Ordered bool
	// Group names the application the endpoint belongs to (a daemon's
	// connection; 0 inline): the endpoints of a group share a page of
	// doorbells (engine_bells.go; Engine.BellsFD).
	Group uint64
	// Key, if set (16 or 32 bytes; NewKey), authenticates the endpoint's
	// messages between hosts (auth.go): what it sends travels in an
	// envelope with an AES-GMAC tag, and it takes from other hosts only
	// messages and returns in envelopes made with the same key. Give every
	// endpoint of the virtual network the same key.
	Key []byte
}

// MaxWeight bounds VNet.Weight.
const MaxWeight = 64

// ErrNoEndpoint: CloseEndpoint was given an id that names no open
// endpoint.
var ErrNoEndpoint = errors.New("nicfw: no such endpoint")

// Engine defaults.
const (
	DefaultResident    = 8
	DefaultReturnQueue = 64
	// MaxWindow bounds EngineConfig.Window.
	MaxWindow = 256
)

// EngineConfig configures an Engine. Zero fields take the defaults.
type EngineConfig struct {
	// Transport configures the engine's transport; its Deliver and
	// Returned must be nil (the engine sets them). Its Clock also drives
	// the engine.
	Transport transport.Config
	// Host is this host's id: translation entries naming it are delivered
	// locally, without the transport.
	Host HostID
	// Resident is R, the endpoints resident at once (default
	// DefaultResident, at least 2: one frame is kept for receiving).
	Resident int
	// Loiter is the scheduler's k (default DefaultLoiter).
	Loiter int
	// ParkAfter is how many times in a row the scheduler finds an idle
	// endpoint with nothing to send before it parks it, to be woken by
	// its doorbell (engine_bells.go; default 64, negative: never).
	ParkAfter int
	// ReturnQueue bounds the return messages waiting for a channel to
	// their host; a message to be returned while it is full is NACKed
	// (default DefaultReturnQueue).
	ReturnQueue int
	// SendBudget is the most scheduling decisions per Poll (default the
	// link's batch size, past half of which a Poll stops at a full frame).
	SendBudget int
	// Window is the most short and medium messages of one endpoint in
	// flight at once to one destination endpoint (default 1). With 1, an
	// endpoint's messages to one destination leave one after another,
	// each acknowledged before the next, and arrive in the order they were
	// sent; its messages to other destinations need not wait for them (a
	// server's replies to several clients are in flight together, each on
	// a channel of its own), and a message to one destination may arrive
	// before one sent earlier to another. The send queues are still taken
	// in order: a message whose destination's window is full waits at the
	// head of its queue, and those behind it wait with it, while its
	// destination answers. Once the destination's host is stalled (a
	// message to it sent again, unacknowledged), short and medium
	// messages to it step aside (aside.go) and those behind them go on:
	// a burst of replies to a client that died holds the endpoint's other
	// messages up for a retransmission time, not until the transport gives
	// up (GiveUpAfter). A bulk message to it still waits at the head, and
	// holds them up. Above 1 they go out
	// on up to Window of the transport's channels to each destination at
	// once, so one endpoint can keep a stream of messages in the network
	// (its gap g falls from a round trip to the engine's send overhead);
	// as in AM-II, whose channels are independent, they are then in order
	// per channel only: one lost and retransmitted arrives after those
	// sent after it. Up to Window of a bulk message's chunks are in flight
	// at once (counted with the endpoint's short and medium messages still
	// in flight to the same destination), and the receiver stores them in
	// whatever order they arrive; a pooled bulk message's first chunk
	// travels alone, and the rest follow once the receiver has found it a
	// block (admission, pool.go). What bounds an endpoint's messages in
	// flight to all destinations together is the transport's channels to
	// each host and the scheduler's share (Weight).
	Window int
	// Modules extend the engine (module.go): the same modules, with the
	// same IDs, on every host. None by default: AM-II's service alone.
	Modules []Module
	// PoolHold bounds how long a pooled bulk message may hold its block
	// of a receive pool without progress (no chunk arrives) while others
	// wait for the pool: past it the block is taken back and the message
	// returned with ReasonIncomplete when its next chunk comes (pool.go).
	// Default the transport's GiveUpAfter.
	PoolHold time.Duration
	// Unprotected turns the virtual networks' protection off, for
	// measuring what it costs (the LogP baseline of AM-II): a message is
	// delivered to its endpoint whatever its tag. Descriptors are still
	// copied out of shared memory and checked before use: the engine's own
	// memory safety depends on that, so it is not part of what this turns
	// off.
	Unprotected bool
}

// EngineStats counts what an Engine did. A bulk message counts as one
// message in Delivered and Returned, and each of its chunks as one in Sent
// and Acked.
type EngineStats struct {
	Sent          uint64 // messages (bulk: chunks) handed to the transport or delivered locally
	Express       uint64 // of those, short messages handed over directly (Express), not through a send queue
	Aside         uint64 // messages that stepped aside for a stalled destination, letting those behind them go (aside.go)
	Acked         uint64 // sent messages (bulk: chunks) acknowledged
	Busy          uint64 // sends put off by ErrBusy (kept pending)
	Delivered     uint64 // messages put into a receive queue
	Lane          uint64 // of those, short messages that the compact lane put (engine_lane.go)
	Chunks        uint64 // bulk chunks stored that were not their message's last
	ChunksDropped uint64 // bulk chunks dropped because their message was returned already
	PoolFull      uint64 // pooled bulk chunks refused for now (NACK): no block of the receive pool free
	PoolShare     uint64 // of those, refused because their sending host held its share of the pool while others waited
	PoolExpired   uint64 // blocks taken back from messages that made no progress for PoolHold while others waited
	AuthFailed    uint64 // messages dropped: no envelope, or one whose tag or sender incarnation is wrong, for an endpoint with a key (auth.go)
	AuthReplayed  uint64 // envelopes dropped: their counter was seen already
	QueueFull     uint64 // deliveries refused for a full receive queue (NACK)
	NotResident   uint64 // deliveries refused because no frame could be freed (NACK)
	Returned      uint64 // returned messages put into a sender's reply receive queue
	ReturnsSent   uint64 // return messages sent to remote senders
	ReturnsLost   uint64 // return messages dropped: undeliverable themselves, or a bulk message returned twice
	ReturnsFull   uint64 // messages NACKed because the return queue was full
	Dropped       uint64 // messages dropped: malformed, or a receive queue with a corrupt index
	// Polls counts the engine loops run (Poll), BusyPolls those that
	// found work: BusyPolls/Polls is the share of its loops in which a
	// busy-polling engine was busy.
	Polls     uint64
	BusyPolls uint64
	// Parks counts endpoints parked (idle ParkAfter times in a row), and
	// Rings the doorbells the pages rang (engine_bells.go): a parked
	// endpoint's that woke it, or an evicted one's.
	Parks uint64
	Rings uint64
}

type slotState uint8

const (
	slotEmpty     slotState = iota
	slotPending             // taken, not yet sent (busy, not resident, queue full); bulk: the next chunk
	slotInflight            // sent, waiting for its acknowledgement
	slotReturning           // to be put into the reply receive queue as returned
)

// epState is the engine's state of one endpoint. Each endpoint has at most
// one message taken and not finished (slot): that is what keeps its
// messages in order across the transport's C channels, and a bulk
// message's chunks in order too.
type epState struct {
	id    EndpointID
	mem   *endpoint.Memory
	tag   uint64
	vnet  []Name          // the translation table, as created (the endpoint's memory, "host side")
	table []Name          // its copy in the engine's fast tables: nil while not resident
	rev   map[Name]uint32 // sender -> index, for received descriptors
	// The last sender looked up in rev and what rev says of it (from the
	// start: of the zero Name): a conversation finds its peer here
	// without hashing.
	revLast Name
	revIdx  uint32
	revOK   bool

	// Residency (engine_residency.go): resident says whether the
	// endpoint is in the scheduler and its table is loaded; weight is its
	// share of the scheduler's sends; evIdx its place in Engine.evicted
	// while not resident, rung whether its doorbell rang (or it was evicted
	// with work) and it waits to be loaded.
	resident bool
	sends    int // messages sent since it was loaded
	weight   int
	ordered  bool        // VNet.Ordered
	flyingTo []destCount // messages in flight per destination endpoint, those with any (window.go)
	evIdx    int
	rung     bool
	// Doorbells (engine_bells.go): its page and bit (nil: none), whether
	// it is parked, and its place in Engine.parked while it is.
	bellPage *bellPage
	bellBit  int
	pageOK   bool // while evicted: its sends ring its page (ringsPage)
	parked   bool
	parkIdx  int

	state   slotState
	d       endpoint.Descriptor
	q       endpoint.Queue // the send queue d came from
	express bool           // d came by the express path (Express), not through q
	aside   []asideMsg     // messages taken off the send queues to wait for a stalled destination (aside.go)
	reason  endpoint.Reason
	blocked uint64 // Poll number in which it could not progress

	// A medium message is built here when it is taken: its bytes are
	// copied out of the staging area once, then, and the application may
	// reuse them. Allocated at the endpoint's first medium message.
	out    []byte
	outLen int

	pool *rxPool // the receive pool's allocator (pool.go), from the first pooled message

	// Bulk (bulk.go): the message's number (Engine.bulkSeq); sent,
	// the bytes of it handed to the transport so far, chunk the length of
	// the chunk being built; chunksOut its chunks in flight, started once
	// its first chunk left, to the host-table row bulkPeer and the
	// incarnation bulkEpoch (0: not known yet); abort when it was returned
	// (by its receiver, or here: no more chunks are sent, and it is not
	// returned again); lastReturned, the number of the last bulk message
	// this engine returned itself, so that a return of it from its
	// receiver is not handed over a second time.
	bulkID       uint32
	sent         uint32
	chunk        uint32
	chunksOut    int
	started      bool
	bulkPeer     *transport.Peer
	bulkEpoch    uint32
	abort        bool
	lastReturned uint32
	// tails are the endpoint's earlier bulk messages whose chunks have
	// all left and some are not acknowledged yet: the slot moved on to
	// the next message without waiting a round trip (bulk.go). At most
	// BulkAhead-1.
	tails []bulkTail
	// aead authenticates the endpoint's messages (VNet.Key; auth.go):
	// nil without a key.
	aead cipher.AEAD
	// admit: a pooled bulk message's admission at its receiver (pool.go),
	// towards admitPeer.
	admit     admitState
	admitPeer *transport.Peer
	// published: a cut-through message's published length when the
	// engine last looked (cutThroughReady), to which its next chunk is cut.
	published uint32

	// flying counts the endpoint's messages in flight, each a flight
	// record of its own (at most Window to each destination, flyingTo). A
	// short or medium message leaves the slot when it is sent, and the
	// slot takes the next one; a bulk message keeps the slot until its
	// last chunk has left (bulk.go).
	flying int

	// owner is what the engine counts of the endpoint's owner
	// (VNet.Owner): its endpoints open and pinned (Engine.owners).
	owner *ownerCount

	counts EndpointCounters // counters.go

	// closed: CloseEndpoint was called. The state stays in Engine.eps as a
	// tombstone (arrivals are returned with ReasonClosed) until the id is
	// reused; its memory is closed once its slot is empty.
	closed bool
}

// bulkRx is a receiver's record of the bulk message in progress from one
// sending endpoint (bulk.go): its first chunk arrives alone, the others in
// any order.
type bulkRx struct {
	id     uint32   // the message's number at its sender
	dst    *epState // the endpoint its first chunk was for (nil: none)
	got    uint32   // the bytes of it stored so far
	failed bool     // returned to its sender: its remaining chunks are dropped
	// A pooled message (pool.go): its block of dst's receive pool, once
	// found; put once its descriptor is in a receive queue (the block is
	// then the pool's books', not the record's).
	pooled, put bool
	block       poolBlock
	// src is the sending host; swept the bytes stored when the pool was
	// last swept for stale blocks, and expired that the sweep took the
	// block back (the next chunk returns the message).
	src     HostID
	swept   uint32
	expired bool
	// epoch is the sending host's incarnation (transport.Peer.Epoch) when
	// the record began: a restarted sender numbers its messages afresh.
	epoch uint32
	// begun orders a sending endpoint's records (Engine.bulkBegun when
	// each began); done: the message is complete here.
	begun uint64
	done  bool
}

// flight is the engine's one record of a message in flight, whatever the
// window: what returning it takes (its descriptor and send queue) and the
// host table row it went to. Records live in Engine.flights and are
// reused; a message's cookie at the transport is its record's index plus
// one (0 is a return message, which is not tracked).
type flight struct {
	s     *epState
	d     endpoint.Descriptor
	q     endpoint.Queue
	peer  *transport.Peer
	to    EndpointID // the destination endpoint at peer (window.go)
	chunk bool       // a bulk chunk: s's slot waits for it
	id    uint32     // a bulk chunk: its message's number
}

// returnedFlight is a message that left its slot, returned to its sender
// (or a command's completion, module.go) and waiting for room in the
// sender's reply receive queue: d is the
// descriptor to put (ClassReturned set), data a medium message's bytes.
type returnedFlight struct {
	s    *epState
	d    endpoint.Descriptor
	data []byte
}

type remoteReturn struct {
	peer *transport.Peer
	msg  []byte
	// aead, if not nil, seals msg when it is sent (flushReturns): the
	// epoch it names is the one toward the peer then.
	aead cipher.AEAD
}

// Engine is AM-II's NIC processor over one link, run inline: the caller's
// goroutine calls every method, and Poll runs the engine loop once. The
// engine owns its Transport and its endpoints' memory; it does not own the
// link.
type Engine struct {
	cfg   EngineConfig
	clk   clock.Clock
	tr    *transport.Transport
	sched *Scheduler
	res   *Residency
	eps   []*epState // by id: open endpoints and tombstones (nil: none)

	// bulkSeq numbers the engine's bulk messages, across its endpoints: an
	// endpoint that reuses a closed one's id never gives a message the
	// number of one its predecessor sent, which a receiver's record of the
	// sending endpoint (bulkRx, keyed by its name) may still hold.
	bulkSeq uint32
	live    int // open endpoints
	// answering: the message deliver is storing is a request that its
	// application will answer (its acknowledgement may wait for the reply).
	answering bool
	// replyIn: it is a reply (short or medium), whose application will likely
	// send its next request soon (its acknowledgement may wait AckSoonDelay).
	replyIn bool
	inc     uint8 // the Descriptor.Incarnation of the host whose message deliver stores (transport.Peer.Incarnation)

	pinned int // endpoints with a message in flight (residency Hold per message)
	// owners counts, by owner, the endpoints open and pinned: an owner
	// may pin no more than its share of the frames (mayPin). owned is the
	// owners with endpoints open.
	owners      map[uint32]*ownerCount
	owned       int
	flights     []flight // by cookie-1: messages in flight, and free records
	freeFl      []uint32 // indices of free records in flights
	acked       int      // acknowledgements taken in since the start of this Poll
	returning   []*epState
	returnedFl  []returnedFlight
	returns     []remoteReturn
	down        map[HostID]time.Time           // host -> until when sends to it are returned at once
	bulkRx      map[Name][]*bulkRx             // sending endpoint -> its bulk messages arriving here (at most BulkAhead)
	bulkBegun   uint64                         // bulk records begun (bulkRx.begun)
	admits      map[*transport.Peer]*admission // pooled bulk messages under way per host (pool.go)
	closing     []*epState                     // closed endpoints whose id was reused before their slot was done
	closeErr    error                          // the first error of closing an endpoint's memory late
	polls       uint64
	pending     PendingFunc
	maxPL       int           // the transport's MaxPayload
	chunkMsg    msg           // the bulk chunk being sent (message)
	frameRoom   int           // the transport's FrameRoom
	fullFrames  int           // with a default SendBudget, its half: past it a send phase stops at a full frame (sendPhase)
	giveUp      time.Duration // the transport's GiveUpAfter
	buf         []byte        // a message being built: short, or a bulk chunk
	auth        authState     // message authentication (auth.go)
	mods        *modules      // nil: no modules loaded
	evicted     []*epState    // open endpoints not resident (engine_residency.go)
	parked      []*epState    // resident endpoints parked (engine_bells.go)
	unbelled    int           // open endpoints without a doorbell bit
	evictedRung bool          // an evicted endpoint may have rung: doorbells looks
	bellPages   map[uint64]*bellPage
	bellList    []*bellPage
	frames      [][]Name // the translation tables of the resident endpoints, by frame
	yield       func(ep int) bool
	stats       EngineStats
	hostRet     map[HostID]*hostReturns // returns to and from each host (counters.go)
}

// NewEngine returns an engine on link with a transport of its own. The
// engine knows no other host yet: cfg.Host names this one, and AddHost (or
// SetHosts) enters each peer's id and MAC address before endpoints send to
// it (amii.Open and grim.Open take them from their configurations; with
// amii.New and grim.New on an engine of one's own, the caller does).
func NewEngine(link afxdp.Link, cfg EngineConfig) (*Engine, error) {
	if cfg.Transport.Deliver != nil || cfg.Transport.Returned != nil {
		return nil, fmt.Errorf("%w: the engine sets the transport's callbacks", ErrConfig)
	}
	if cfg.Resident == 0 {
		cfg.Resident = DefaultResident
	}
	if cfg.ReturnQueue == 0 {
		cfg.ReturnQueue = DefaultReturnQueue
	}
	if cfg.Window == 0 {
		cfg.Window = 1
	}
	if cfg.Transport.Clock == nil {
		cfg.Transport.Clock = clock.System{}
	}
	switch {
	case cfg.Resident < 2:
		return nil, fmt.Errorf("%w: %d resident endpoints, want at least 2", ErrConfig, cfg.Resident)
	case cfg.ReturnQueue < 1 || cfg.SendBudget < 0:
		return nil, fmt.Errorf("%w: return queue %d, send budget %d", ErrConfig, cfg.ReturnQueue, cfg.SendBudget)
	case cfg.Window < 1 || cfg.Window > MaxWindow:
		return nil, fmt.Errorf("%w: window %d, want 1..%d", ErrConfig, cfg.Window, MaxWindow)
	}
	e := &Engine{
		cfg:     cfg,
		clk:     cfg.Transport.Clock,
		down:    make(map[HostID]time.Time),
		bulkRx:  make(map[Name][]*bulkRx),
		admits:  make(map[*transport.Peer]*admission),
		owners:  make(map[uint32]*ownerCount),
		hostRet: make(map[HostID]*hostReturns),
	}
	var err error
	if e.sched, err = NewScheduler(cfg.Loiter); err != nil {
		return nil, err
	}
	switch {
	case cfg.ParkAfter == 0:
		e.sched.SetParkAfter(parkAfter)
	case cfg.ParkAfter > 0:
		e.sched.SetParkAfter(cfg.ParkAfter)
	}
	if e.res, err = NewResidency(cfg.Resident); err != nil {
		return nil, err
	}
	tlink, err := e.initModules(link)
	if err != nil {
		return nil, err
	}
	tc := cfg.Transport
	tc.Deliver = e.deliver
	tc.Acked = e.ack
	tc.Returned = e.returned
	if e.tr, err = transport.New(tlink, tc); err != nil {
		return nil, err
	}
	if e.cfg.SendBudget == 0 {
		e.cfg.SendBudget = max(link.BatchSize(), 1)
		e.fullFrames = e.cfg.SendBudget / 2
	}
	e.maxPL = e.tr.MaxPayload()
	e.frameRoom = e.tr.FrameRoom()
	e.giveUp = e.tr.Config().GiveUpAfter
	if e.cfg.PoolHold <= 0 {
		e.cfg.PoolHold = e.giveUp
	}
	e.buf = make([]byte, max(e.maxPL, msgMaxLen))
	if err := e.initAuth(); err != nil {
		return nil, err
	}
	e.pending = e.isPending
	e.yield = e.mayYield
	if err := e.startModules(); err != nil {
		return nil, err
	}
	return e, nil
}

// AddHost enters a peer host in the host table.
func (e *Engine) AddHost(id HostID, mac net.HardwareAddr) error {
	if id == e.cfg.Host {
		return fmt.Errorf("%w: host %d is this host", ErrConfig, id)
	}
	return e.tr.AddPeer(id, mac)
}

// SetHosts replaces the host table and this host's id, as when a mapper
// distributes a new table (hosts lists every host, this one included if
// the table does; an entry with this host's MAC must be self). Hosts that
// stay keep their transport state under their new ids (Transport.SetPeers);
// messages in flight to hosts that left return to their senders as
// unreachable. Endpoints' translation tables are not rewritten: they name
// hosts by id, so an application whose peers' ids moved opens its
// endpoints again with the new ids. A bulk message arriving when the table
// changes is returned to its sender as incomplete.
func (e *Engine) SetHosts(self HostID, hosts map[HostID]net.HardwareAddr) error {
	for id, mac := range hosts {
		if bytes.Equal(mac, e.tr.HardwareAddr()) && id != self {
			return fmt.Errorf("%w: the table gives this host id %d, not %d", ErrConfig, id, self)
		}
	}
	if err := e.tr.SetPeers(hosts); err != nil {
		return err
	}
	e.cfg.Host = self
	clear(e.down) // marked under the old ids (the give-ups above too)
	clear(e.bulkRx)
	clear(e.hostRet)
	return nil
}

// Host returns this host's id.
func (e *Engine) Host() HostID { return e.cfg.Host }

// CreateEndpoint creates endpoint id in virtual network vnet and returns
// its memory, whose FD the application maps (MapEndpoint). The memory
// belongs to the engine: CloseEndpoint and Close close it. cfg.TableSize
// must be 0 or len(vnet.Table). The id may be that of a closed endpoint,
// whose tombstone the new endpoint replaces.
func (e *Engine) CreateEndpoint(id EndpointID, cfg endpoint.Config, vnet VNet) (*endpoint.Memory, error) {
	if err := e.checkEndpoint(id, cfg, vnet); err != nil {
		return nil, err
	}
	cfg.TableSize = len(vnet.Table)
	mem, err := endpoint.NewMemory(cfg)
	if err != nil {
		return nil, err
	}
	if err := e.AddEndpoint(id, mem, vnet); err != nil {
		mem.Close()
		return nil, err
	}
	return mem, nil
}

// checkEndpoint checks an endpoint to be created: a free id, and a table
// of cfg's size.
func (e *Engine) checkEndpoint(id EndpointID, cfg endpoint.Config, vnet VNet) error {
	if old := e.ep(id); old != nil && !old.closed {
		return fmt.Errorf("%w: endpoint %d", ErrEndpointInUse, id)
	}
	if len(vnet.Table) == 0 || cfg.TableSize != 0 && cfg.TableSize != len(vnet.Table) {
		return fmt.Errorf("%w: translation table of %d entries, TableSize %d", ErrConfig, len(vnet.Table), cfg.TableSize)
	}
	return nil
}

// AddEndpoint is CreateEndpoint with memory made beforehand
// (NewEndpointMemory, whose TableSize must be len(vnet.Table)): making a
// large endpoint's memory takes long (it is zeroed and populated), so the
// daemon makes it outside the engine thread and only adds it here. The
// engine owns mem from then on; on an error the caller still does.
func (e *Engine) AddEndpoint(id EndpointID, mem *endpoint.Memory, vnet VNet) error {
	if err := e.checkEndpoint(id, mem.Config(), vnet); err != nil {
		return err
	}
	old := e.ep(id)
	w := vnet.Weight
	if w == 0 {
		w = 1
	}
	if w < 1 || w > MaxWeight {
		return fmt.Errorf("%w: weight %d, want 1..%d", ErrConfig, vnet.Weight, MaxWeight)
	}
	s := &epState{id: id, mem: mem, tag: vnet.Tag, vnet: slices.Clone(vnet.Table), rev: make(map[Name]uint32), weight: w, ordered: vnet.Ordered}
	s.flyingTo = make([]destCount, 0, 4)
	if vnet.Key != nil {
		aead, err := newAEAD(vnet.Key)
		if err != nil {
			return err
		}
		s.aead = aead
	}
	for i, n := range s.vnet {
		if _, ok := s.rev[n]; !ok {
			s.rev[n] = uint32(i)
		}
	}
	s.revIdx, s.revOK = s.rev[s.revLast]
	if old != nil && (old.state != slotEmpty || old.flying > 0) {
		// Its message is still in flight: it finishes, then its memory
		// is closed (finish).
		e.closing = append(e.closing, old)
	}
	if int(id) >= len(e.eps) {
		e.eps = append(e.eps, make([]*epState, int(id)+1-len(e.eps))...)
	}
	e.eps[id] = s
	e.live++
	s.owner = e.owners[vnet.Owner]
	if s.owner == nil {
		s.owner = &ownerCount{id: vnet.Owner}
		e.owners[vnet.Owner] = s.owner
	}
	if s.owner.open++; s.owner.open == 1 {
		e.owned++
	}
	e.res.SetOwner(int(id), vnet.Owner)
	e.bell(s, vnet.Group)
	e.evict(s) // it starts out of the fast tables: its first send rings its doorbell
	return nil
}

// ownerCount is what the engine counts of an owner (VNet.Owner).
type ownerCount struct {
	id     uint32
	open   int // endpoints open
	pinned int // endpoints with a message in flight
}

// Close sends the acknowledgements the engine owes (those of the messages
// its last Polls took, which would have ridden on its next frames: left
// unsent, their senders would retransmit them until they gave up, and
// return them unreachable though they were delivered), then closes every
// endpoint's memory. The engine is not usable after. It returns the first
// error of closing memory, including that of an endpoint closed earlier
// whose memory was closed late, and that of sending, unless the link was
// closed first (net.ErrClosed: nothing could be sent).
func (e *Engine) Close() error {
	err := errors.Join(e.closeErr, e.closeModules())
	if e.eps != nil && e.tr.AcksOwed() { // eps nil: closed already
		if ferr := e.tr.FlushAcks(); ferr != nil && !errors.Is(ferr, net.ErrClosed) {
			err = errors.Join(err, ferr)
		}
	}
	for _, s := range e.eps {
		if s == nil {
			continue
		}
		if cerr := s.mem.Close(); err == nil {
			err = cerr
		}
	}
	e.eps = nil
	for _, s := range e.closing {
		if cerr := s.mem.Close(); err == nil {
			err = cerr
		}
	}
	e.closing, e.live = nil, 0
	for _, pg := range e.bellList {
		if cerr := pg.b.Close(); err == nil {
			err = cerr
		}
	}
	e.bellList, e.bellPages, e.parked = nil, nil, nil
	return err
}

// Stats returns the engine's counters.
func (e *Engine) Stats() EngineStats {
	s := e.stats
	s.Polls = e.polls
	return s
}

// TransportStats returns the transport's counters.
func (e *Engine) TransportStats() transport.Stats { return e.tr.Stats() }

// ResidencyStats returns the residency's counters (endpoint faults).
func (e *Engine) ResidencyStats() ResidencyStats { return e.res.Stats() }

// TimerPeriod returns how often a busy engine (Busy) must Poll for its
// transport's timers: the transport's scan interval.
func (e *Engine) TimerPeriod() time.Duration { return e.tr.Config().ScanInterval }

// MaxPayload returns the transport's largest payload: a medium message
// must fit in it with the engine's header, arguments and extension
// (ReasonTooLarge otherwise), and bulk messages travel in chunks of it.
func (e *Engine) MaxPayload() int { return e.tr.MaxPayload() }

// Poll runs the engine loop once and returns how much it did (messages
// sent, returned or acknowledged, frames received): 0 means it found
// nothing to do. It returns the link's errors.
func (e *Engine) Poll() (work int, err error) {
	e.polls++
	// One pass of the transport: the clock read at most once, and every
	// frame the run sends handed to the link in one batch (the transport
	// sends what the run queued before it receives, and the rest when the
	// pass ends).
	e.tr.BeginPass()
	work, err = e.poll()
	if ferr := e.tr.EndPass(); err == nil {
		err = ferr
	}
	if work > 0 {
		e.stats.BusyPolls++
	}
	return work, err
}

// poll is Poll's run, inside the transport's pass.
func (e *Engine) poll() (work int, err error) {
	e.acked = 0
	if len(e.returns) > 0 {
		if work, err = e.flushReturns(); err != nil {
			return work, err
		}
	}
	if len(e.bellList) > 0 && (len(e.bellList) > 1 || e.bellList[0].b.Rung()) { // (one page unrung: no call)
		work += e.ringBells()
	}
	if len(e.evicted) > 0 {
		work += e.doorbells() // before the sends: a rung endpoint sends in this Poll
	}
	n, err := e.sendPhase()
	work += n
	if err != nil {
		return work, err
	}
	if e.sched.Parked() {
		e.parkIdle()
	}
	n, err = e.tr.Poll()
	work += n
	if err != nil {
		return work, err
	}
	work += e.acked
	if e.mods != nil {
		n, err = e.pollModules()
		work += n
		if err != nil {
			return work, err
		}
	}
	if len(e.returning) > 0 || len(e.returnedFl) > 0 {
		work += e.flushReturning()
	}
	return work, nil
}

// ep returns endpoint id's state (an open endpoint or a tombstone), or nil.
func (e *Engine) ep(id EndpointID) *epState {
	if int(id) < len(e.eps) {
		return e.eps[id]
	}
	return nil
}
