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
	// to other hosts, and a bulk message's chunks, fly together up to the
	// window). Without it, messages in flight together may arrive in any
	// order when frames are lost.
	Ordered bool
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
	// ReturnQueue bounds the return messages waiting for a channel to
	// their host; a message to be returned while it is full is NACKed
	// (default DefaultReturnQueue).
	ReturnQueue int
	// SendBudget is the most scheduling decisions per Poll (default the
	// link's batch size).
	SendBudget int
	// Window is the most short and medium messages of one endpoint in
	// flight at once (default 1). With 1, an endpoint's messages leave
	// one after another, each acknowledged before the next, and arrive in
	// the order they were sent. Above 1 they go out on up to Window of the
	// transport's channels at once, so one endpoint can keep a stream of
	// messages in the network (its gap g falls from a round trip to the
	// engine's send overhead); as in AM-II, whose channels are
	// independent, they are then in order per channel only: one lost and
	// retransmitted arrives after those sent after it. Up to Window of a
	// bulk message's chunks are in flight at once (counted with the
	// endpoint's short and medium messages still in flight), and the
	// receiver stores them in whatever order they arrive; a pooled bulk
	// message's first chunk travels alone, and the rest follow once the
	// receiver has found it a block (admission, pool.go).
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
	Acked         uint64 // sent messages (bulk: chunks) acknowledged
	Busy          uint64 // sends put off by ErrBusy (kept pending)
	Delivered     uint64 // messages put into a receive queue
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

	// Residency (engine_residency.go): resident says whether the
	// endpoint is in the scheduler and its table is loaded; weight is its
	// share of the scheduler's sends; evIdx its place in Engine.evicted
	// while not resident, rung whether its doorbell rang (or it was evicted
	// with work) and it waits to be loaded.
	resident bool
	sends    int // messages sent since it was loaded
	weight   int
	ordered  bool                    // VNet.Ordered
	ordTo    map[*transport.Peer]int // ordered: messages in flight per destination host
	evIdx    int
	rung     bool

	state   slotState
	d       endpoint.Descriptor
	q       endpoint.Queue // the send queue d came from
	reason  endpoint.Reason
	blocked uint64 // Poll number in which it could not progress

	// A medium message is built here when it is taken: its bytes are
	// copied out of the staging area once, then, and the application may
	// reuse them. Allocated at the endpoint's first medium message.
	out    []byte
	outLen int

	pool *rxPool // the receive pool's allocator (pool.go), from the first pooled message

	// Bulk (bulk.go): the message's number (from 1, per endpoint); sent,
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
	// aead authenticates the endpoint's messages (VNet.Key; auth.go):
	// nil without a key.
	aead cipher.AEAD
	// admit: a pooled bulk message's admission at its receiver (pool.go),
	// towards admitPeer.
	admit     admitState
	admitPeer *transport.Peer
	// published: a cut-through message's published length when the
	// engine last looked (cutThroughReady), which its next chunk is cut
	// to.
	published uint32

	// flying counts the endpoint's messages in flight, each a flight
	// record of its own (at most Window). A short or medium message
	// leaves the slot when it is sent, and the slot takes the next one; a
	// bulk message keeps the slot until its last chunk is acknowledged.
	flying int

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
	chunk bool   // a bulk chunk: s's slot waits for it
	id    uint32 // a bulk chunk: its message's number
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
	live  int        // open endpoints

	pinned     int      // endpoints with a message in flight (residency Hold per message)
	flights    []flight // by cookie-1: messages in flight, and free records
	freeFl     []uint32 // indices of free records in flights
	acked      int      // acknowledgements taken in since the start of this Poll
	returning  []*epState
	returnedFl []returnedFlight
	returns    []remoteReturn
	down       map[HostID]time.Time           // host -> until when sends to it are returned at once
	bulkRx     map[Name]*bulkRx               // sending endpoint -> its bulk message arriving here
	admits     map[*transport.Peer]*admission // pooled bulk messages under way per host (pool.go)
	closing    []*epState                     // closed endpoints whose id was reused before their slot was done
	closeErr   error                          // the first error of closing an endpoint's memory late
	polls      uint64
	pending    PendingFunc
	maxPL      int           // the transport's MaxPayload
	giveUp     time.Duration // the transport's GiveUpAfter
	buf        []byte        // a message being built: short, or a bulk chunk
	auth       authState     // message authentication (auth.go)
	mods       *modules      // nil: no modules loaded
	evicted    []*epState    // open endpoints not resident (engine_residency.go)
	frames     [][]Name      // the translation tables of the resident endpoints, by frame
	yield      func(ep int) bool
	stats      EngineStats
}

// NewEngine returns an engine on link with a transport of its own.
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
		cfg:    cfg,
		clk:    cfg.Transport.Clock,
		down:   make(map[HostID]time.Time),
		bulkRx: make(map[Name]*bulkRx),
		admits: make(map[*transport.Peer]*admission),
	}
	var err error
	if e.sched, err = NewScheduler(cfg.Loiter); err != nil {
		return nil, err
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
	}
	e.maxPL = e.tr.MaxPayload()
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
	if s.ordered {
		s.ordTo = map[*transport.Peer]int{}
	}
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
	e.res.SetOwner(int(id), vnet.Owner)
	e.evict(s) // it starts out of the fast tables: its first send rings its doorbell
	return nil
}

// Close closes every endpoint's memory. The engine is not usable after.
// It returns the first error of closing memory, including that of an
// endpoint closed earlier whose memory was closed late.
func (e *Engine) Close() error {
	err := errors.Join(e.closeErr, e.closeModules())
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
	return err
}

// Stats returns the engine's counters.
func (e *Engine) Stats() EngineStats { return e.stats }

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
	defer func() {
		if ferr := e.tr.EndPass(); err == nil {
			err = ferr
		}
	}()
	e.acked = 0
	work, err = e.flushReturns()
	if err != nil {
		return work, err
	}
	if len(e.evicted) > 0 {
		work += e.doorbells() // before the sends: a rung endpoint sends in this Poll
	}
	n, err := e.sendPhase()
	work += n
	if err != nil {
		return work, err
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
	work += e.flushReturning()
	return work, nil
}

// ep returns endpoint id's state (an open endpoint or a tombstone), or nil.
func (e *Engine) ep(id EndpointID) *epState {
	if int(id) < len(e.eps) {
		return e.eps[id]
	}
	return nil
}

// isPending is the scheduler's view of an endpoint.
func (e *Engine) isPending(ep int) bool {
	s := e.ep(EndpointID(ep))
	if s == nil || s.closed || s.blocked == e.polls {
		return false
	}
	switch s.state {
	case slotPending:
		if s.d.Class == endpoint.ClassBulk && s.flying >= e.cfg.Window {
			return false // the window is full of its chunks
		}
		return e.canSend(s, s.d.Dest)
	case slotEmpty:
		if s.flying >= e.cfg.Window {
			return false // the window is full: wait for acknowledgements
		}
		dest, ok := e.peek(s)
		if ok && s.ordered && len(s.ordTo) > 0 && e.inFlightTo(s, dest) {
			return false // ordered: the last message to that host is unacknowledged
		}
		return ok && e.canSend(s, dest)
	}
	return false
}

// inFlightTo reports whether ordered endpoint s has a message in flight to
// the host of its table's index dest.
func (e *Engine) inFlightTo(s *epState, dest uint32) bool {
	if uint64(dest) >= uint64(len(s.table)) {
		return false // Take refuses it
	}
	p := e.tr.Peer(s.table[dest].Host)
	return p != nil && s.ordTo[p] > 0
}

// held reports whether s has a message in flight, pinning its frame.
func (s *epState) held() bool { return s.flying > 0 }

// canSend reports whether a message of s to index dest could leave now. The
// scheduler is asked only about endpoints that can make progress: one it
// chose in vain would be charged a send and the round robin would move past
// it, so that under ErrBusy the endpoint after the last one tried would win
// every time.
func (e *Engine) canSend(s *epState, dest uint32) bool {
	if uint64(dest) >= uint64(len(s.table)) {
		return true // Take refuses it
	}
	h := s.table[dest].Host
	if h == e.cfg.Host {
		return true
	}
	if len(e.down) > 0 {
		if _, down := e.down[h]; down {
			return true // returned at once (or the mark expires and it is sent)
		}
	}
	if e.gated() && s.state == slotPending && s.d.Class == endpoint.ClassBulk &&
		!e.gateOpen(s.id, h, int(s.d.Length), int(s.d.Length-s.sent)) {
		return false // a module holds it back (sendFrom asks about the others, once built)
	}
	p := e.tr.Peer(h)
	if p != nil && p.Busy() {
		return false // ErrBusy
	}
	if s.state == slotPending && e.admitWaits(s, p) {
		return false // a pooled message waits for its admission (pool.go)
	}
	return s.held() || e.pinned < e.res.Frames()-1
}

// peek returns the destination index of the descriptor that take would
// take next from s, without taking it: the head of the reply send queue,
// else of the request send queue. The index is untrusted; Take checks it.
// A corrupt ring peeks as pending, so that Take gets to count it.
func (e *Engine) peek(s *epState) (uint32, bool) {
	if dest, ok := s.mem.PeekDest(endpoint.ReplySend); ok {
		return dest, true
	}
	return s.mem.PeekDest(endpoint.RequestSend)
}

// sendPhase makes up to SendBudget scheduling decisions.
func (e *Engine) sendPhase() (int, error) {
	work := 0
	for range e.cfg.SendBudget {
		id, ok := e.sched.Next(e.pending)
		if !ok {
			break
		}
		s := e.eps[id] // the scheduler holds open endpoints only
		progressed, err := e.sendFrom(s)
		if err != nil {
			return work, err
		}
		if progressed {
			work++
		} else {
			s.blocked = e.polls
		}
	}
	return work, nil
}

// sendFrom moves endpoint s's next message (or bulk chunk) on; it reports
// whether it did.
func (e *Engine) sendFrom(s *epState) (bool, error) {
	e.res.Touch(int(s.id)) // resident (scheduled): marks it used, never faults
	if s.state == slotEmpty && !e.take(s) {
		return false, nil
	}
	if s.d.Class == endpoint.ClassCommand {
		e.command(s)
		return true, nil
	}
	if s.d.Flags&endpoint.CutThrough != 0 && !e.cutThroughReady(s) {
		return false, nil // cut-through: the application is writing the next bytes
	}
	m, reason := e.message(s)
	if reason != 0 {
		e.returnLocal(s, reason)
		return true, nil
	}
	dst := s.table[s.d.Dest] // Take checked Dest against the table's size
	if dst.Host == e.cfg.Host {
		ok, reason := e.accept(e.cfg.Host, m, true, true) // this host's own: no envelope
		switch {
		case reason != 0:
			e.returnLocal(s, reason)
		case !ok:
			return false, nil
		default:
			e.stats.Sent++
			s.sends++
			e.advance(s)
		}
		return true, nil
	}
	if len(e.down) > 0 {
		if until, ok := e.down[dst.Host]; ok {
			if e.clk.Now().Before(until) {
				e.returnLocal(s, endpoint.ReasonUnreachable)
				return true, nil
			}
			delete(e.down, dst.Host)
		}
	}
	// One frame stays unpinned, so that a delivery to a non-resident
	// endpoint can always load it: otherwise two hosts whose frames are all
	// pinned by messages to each other would NACK each other forever.
	if !s.held() && e.pinned >= e.res.Frames()-1 {
		return false, nil
	}
	if e.mods != nil && !e.gateAllows(s, m, dst.Host) {
		return false, nil // held back: the slot keeps the message
	}
	p := e.tr.Peer(dst.Host)
	if e.admitWaits(s, p) {
		return false, nil // a pooled message waits for its admission (pool.go)
	}
	if s.d.Class == endpoint.ClassBulk && !s.bulkSame(p) {
		e.returnLocal(s, endpoint.ReasonRestarted) // its receiver restarted: what it stored is gone
		return true, nil
	}
	if s.aead != nil {
		m = e.seal(s.aead, dst.Host, m) // auth.go
	}
	cookie := e.newFlight(s, p)
	err := e.tr.SendTo(p, m, cookie)
	if err != nil {
		e.freeFlight(cookie)
	}
	switch {
	case err == nil:
	case errors.Is(err, transport.ErrBusy):
		e.stats.Busy++
		return false, nil
	case errors.Is(err, transport.ErrUnknownHost):
		e.returnLocal(s, endpoint.ReasonNoHost)
		return true, nil
	case errors.Is(err, transport.ErrTooLarge):
		e.returnLocal(s, endpoint.ReasonTooLarge) // message checked against MaxPayload: not reached
		return true, nil
	default:
		return false, err
	}
	e.stats.Sent++
	s.sends++
	if e.mods != nil {
		e.gateLeft(s, dst.Host)
	}
	if err := e.res.Hold(int(s.id)); err != nil {
		panic(err) // touched above, and nothing evicts in between
	}
	if !s.held() {
		e.pinned++
	}
	s.flying++
	if s.ordered {
		s.ordTo[p]++
	}
	if s.d.Class == endpoint.ClassBulk {
		if s.pooledBulk() && s.admit == admitNone {
			e.setAdmit(s, admitProbing, p) // its first chunk travels alone
		}
		s.chunksOut++
		s.sent += s.chunk
		s.started = true
		e.bulkNext(s)
	} else {
		e.vacate(s) // the message left: the slot takes the next
	}
	return true, nil
}

// cutThroughReady reports whether the next chunk of s's cut-through
// message may leave: a whole chunk (or the rest of the message) is
// published, or some bytes are and the application published nothing
// more since the engine last looked (it writes slowly: send what there
// is). A fast writer's message thus leaves in whole chunks, a slow one's
// as it is written, and never a byte that is not published.
func (e *Engine) cutThroughReady(s *epState) bool {
	last := s.published
	pub := s.mem.Published(&s.d)
	s.published = pub // what message sends from
	if pub <= s.sent {
		return false
	}
	return pub-s.sent >= min(chunkRoom(e.room(s), s.d.NArgs), s.d.Length-s.sent) || pub == last
}

// newFlight records the message in s's slot as in flight to p and returns
// its cookie; the record is reused once the message is acknowledged or
// returned (freeFlight).
func (e *Engine) newFlight(s *epState, p *transport.Peer) uint64 {
	var i uint32
	if n := len(e.freeFl); n > 0 {
		i, e.freeFl = e.freeFl[n-1], e.freeFl[:n-1]
	} else {
		i = uint32(len(e.flights))
		e.flights = append(e.flights, flight{})
	}
	e.flights[i] = flight{s: s, d: s.d, q: s.q, peer: p, chunk: s.d.Class == endpoint.ClassBulk, id: s.bulkID}
	return uint64(i) + 1
}

// flightOf returns the record of the message sent with cookie, or nil for
// a return message (cookie 0) or a cookie that names no message in flight.
func (e *Engine) flightOf(cookie uint64) *flight {
	if cookie == 0 || cookie > uint64(len(e.flights)) {
		return nil
	}
	if f := &e.flights[cookie-1]; f.s != nil {
		return f
	}
	return nil
}

// freeFlight frees the record of cookie.
func (e *Engine) freeFlight(cookie uint64) {
	f := &e.flights[cookie-1]
	f.s, f.peer = nil, nil // free; the rest is overwritten when it is reused
	e.freeFl = append(e.freeFl, uint32(cookie-1))
}

// take takes s's next valid descriptor, replies before requests, into its
// slot. Refused descriptors are counted by Take and dropped.
func (e *Engine) take(s *epState) bool {
	for _, q := range [...]endpoint.Queue{endpoint.ReplySend, endpoint.RequestSend} {
		for {
			ok, err := s.mem.Next(q, &s.d)
			if ok && err == nil {
				// The entry goes back once begin has copied what the
				// application may reuse from then on.
				e.begin(s, q)
				s.mem.Commit(q)
				return true
			}
			if err == nil || errors.Is(err, endpoint.RefusedRing) || !errors.Is(err, endpoint.ErrRefused) {
				break // empty, corrupt ring, or closed
			}
		}
	}
	return false
}

// begin puts the message just taken from send queue q into s's slot. A
// medium message is built at once, copying its bytes out of the staging
// area: from now on the application may change them.
func (e *Engine) begin(s *epState, q endpoint.Queue) {
	s.q, s.state = q, slotPending
	s.abort, s.started, s.sent, s.chunk, s.chunksOut, s.bulkPeer, s.published = false, false, 0, 0, 0, nil, 0
	d := &s.d
	switch d.Class {
	case endpoint.ClassMedium:
		if s.out == nil {
			s.out = make([]byte, msgMediumMax)
		}
		m := e.header(s)
		m.offset, m.length = d.Offset, d.Length
		m.data = s.mem.Staging()[d.Offset : d.Offset+d.Length] // Take checked the range
		s.outLen = encodeMsg(s.out, &m)
	case endpoint.ClassBulk:
		s.bulkID++
	}
}

// vacate empties s's slot: the engine is done with its message, counted
// if it came from the request send queue (endpoint.Memory.CountDone).
func (e *Engine) vacate(s *epState) {
	e.setAdmit(s, admitNone, nil)
	if s.state != slotEmpty && s.q == endpoint.RequestSend {
		s.mem.CountDone()
	}
	s.state = slotEmpty
}

// header returns the message header of the message in s's slot.
func (e *Engine) header(s *epState) msg {
	d := &s.d
	return msg{
		kind: s.q, class: d.Class, nargs: d.NArgs, dst: s.table[d.Dest].Endpoint, src: s.id,
		handler: d.Handler, index: d.Dest, tag: s.tag, args: d.Args,
	}
}

// message returns the engine message to send for s's slot: a short message
// built in e.buf, a medium message as begin built it, the next chunk of a
// bulk message built in e.buf from the staging area (of a cut-through
// message, of the bytes its application has published so far). A message larger than
// the transport carries is to be returned with ReasonTooLarge.
func (e *Engine) message(s *epState) ([]byte, endpoint.Reason) {
	d := &s.d
	switch d.Class {
	case endpoint.ClassMedium:
		if s.outLen > e.room(s) {
			return nil, endpoint.ReasonTooLarge
		}
		return s.out[:s.outLen], 0
	case endpoint.ClassBulk:
		room := chunkRoom(e.room(s), d.NArgs)
		if room == 0 {
			return nil, endpoint.ReasonTooLarge
		}
		s.chunk = min(room, d.Length-s.sent)
		if d.Flags&endpoint.CutThrough != 0 {
			s.chunk = min(room, s.published-s.sent) // cutThroughReady read it: not 0
		}
		m := e.header(s)
		m.offset, m.length, m.remote, m.id, m.chunk = d.Offset, d.Length, d.RemoteOffset, s.bulkID, s.sent
		from := d.Offset + s.sent // Take checked Offset+Length against the staging area
		m.data = s.mem.Staging()[from : from+s.chunk]
		return e.buf[:encodeMsg(e.buf, &m)], 0
	}
	m := e.header(s)
	return e.buf[:encodeMsg(e.buf, &m)], 0
}

// room returns the largest message s may send: the transport's largest
// payload, less an envelope's bytes with a key.
func (e *Engine) room(s *epState) int {
	if s.aead != nil {
		return e.maxPL - authOverhead
	}
	return e.maxPL
}

// advance moves s on after its message (or bulk chunk) was delivered on
// this host: to the next chunk, or done.
func (e *Engine) advance(s *epState) {
	if s.d.Class == endpoint.ClassBulk && !s.abort && !s.closed {
		s.sent += s.chunk
		s.started = true
		if s.sent < s.d.Length {
			s.state = slotPending
			return
		}
	}
	e.finish(s)
}

// finish empties s's slot; a closed endpoint's memory is closed then.
func (e *Engine) finish(s *epState) {
	e.vacate(s)
	if s.closed && s.flying == 0 {
		if err := e.release(s); err != nil && e.closeErr == nil {
			e.closeErr = err
		}
	}
}

// returnLocal finishes s's message by returning it to s with reason. A
// bulk message returned already is not returned again (its slot waits for
// its chunks in flight), and nothing is returned to a closed endpoint.
func (e *Engine) returnLocal(s *epState, reason endpoint.Reason) {
	if s.d.Class == endpoint.ClassBulk {
		if s.closed || s.abort {
			e.abortBulk(s)
			e.bulkNext(s)
			return
		}
		e.abortBulk(s)
		s.lastReturned = s.bulkID
	} else if s.closed {
		e.finish(s)
		return
	}
	s.state, s.reason = slotReturning, reason
	e.returning = append(e.returning, s)
}

// flushReturning puts returned messages into their senders' reply receive
// queues; those whose queue is full wait for the next Poll. A returned
// medium message takes its bytes along (the copy begin made) into the
// receive area.
func (e *Engine) flushReturning() int {
	work, j := 0, 0
	for _, s := range e.returning {
		d := s.d
		d.Class |= endpoint.ClassReturned
		d.Tag = uint64(s.reason) | uint64(s.q)<<8
		var err error
		if s.d.Class == endpoint.ClassMedium {
			err = s.mem.PutData(endpoint.ReplyReceive, &d, s.out[s.outLen-int(s.d.Length):s.outLen])
		} else {
			err = s.mem.Put(endpoint.ReplyReceive, &d)
		}
		if err != nil {
			e.returning[j] = s
			j++
			continue
		}
		if s.d.Class == endpoint.ClassBulk && s.chunksOut > 0 {
			s.state = slotInflight // returned: the slot waits for its chunks in flight
		} else {
			e.vacate(s)
		}
		e.stats.Returned++
		work++
	}
	clear(e.returning[j:])
	e.returning = e.returning[:j]
	j = 0
	for _, r := range e.returnedFl {
		var err error
		if r.d.Class&^endpoint.ClassReturned == endpoint.ClassMedium {
			err = r.s.mem.PutData(endpoint.ReplyReceive, &r.d, r.data)
		} else {
			err = r.s.mem.Put(endpoint.ReplyReceive, &r.d)
		}
		if err != nil {
			e.returnedFl[j] = r
			j++
			continue
		}
		if r.d.Class != endpoint.ClassCommand { // a command's completion is not a return
			e.stats.Returned++
		}
		work++
	}
	clear(e.returnedFl[j:])
	e.returnedFl = e.returnedFl[:j]
	return work
}

// ack is the transport's Acked callback: the message sent with cookie
// was delivered. Its sender is released; a bulk chunk moves its message on
// to the next chunk.
func (e *Engine) ack(dst HostID, cookie uint64) {
	if cookie&controlCookie != 0 {
		e.controlDone(dst, true)
		return
	}
	f := e.flightOf(cookie)
	if f == nil {
		return // a return message
	}
	s, chunk, p := f.s, f.chunk && e.isCurrentChunk(f), f.peer
	e.freeFlight(cookie)
	e.stats.Acked++
	e.acked++
	if chunk {
		s.chunksOut--
		if s.admit == admitProbing {
			e.setAdmit(s, admitted, p) // the receiver found it a block
		}
	}
	e.land(s, p)
	if chunk {
		if !s.bulkSame(p) {
			e.returnLocal(s, endpoint.ReasonRestarted) // acknowledged by another incarnation than the first chunks
			return
		}
		e.bulkNext(s)
	}
}

// land releases the residency hold of a message of s to p that left
// flight (acknowledged or returned). The memory of a closed endpoint goes
// when its last message in flight does and its slot is empty.
func (e *Engine) land(s *epState, p *transport.Peer) {
	if err := e.res.Release(int(s.id)); err != nil {
		panic(err) // pinned endpoints are never evicted
	}
	if s.ordered {
		if s.ordTo[p]--; s.ordTo[p] <= 0 {
			delete(s.ordTo, p)
		}
	}
	if s.flying--; s.flying == 0 {
		e.pinned--
		if s.closed && s.state == slotEmpty {
			if err := e.release(s); err != nil && e.closeErr == nil {
				e.closeErr = err
			}
		}
	}
}

// returned is the transport's Returned callback.
func (e *Engine) returned(dst HostID, cookie uint64, payload []byte, why error) {
	if cookie&controlCookie != 0 {
		e.controlDone(dst, false)
		return
	}
	f := e.flightOf(cookie)
	if f == nil { // a return message (cookie 0) is not returned again
		e.stats.ReturnsLost++
		return
	}
	reason := endpoint.ReasonRestarted // the host is back: not marked down
	if !errors.Is(why, transport.ErrRestarted) {
		reason = endpoint.ReasonUnreachable
		e.down[dst] = e.clk.Now().Add(e.giveUp)
		defer e.hostDown(dst)
	}
	fl := *f
	e.freeFlight(cookie)
	if fl.chunk {
		current := e.isCurrentChunk(&fl)
		if current {
			fl.s.chunksOut--
		}
		e.land(fl.s, fl.peer)
		if current {
			e.returnLocal(fl.s, reason)
		}
		return
	}
	if inner, ok := envelope(payload); ok {
		payload = inner // as sent: in an envelope (auth.go)
	}
	e.returnFlight(fl.s, &fl, payload, reason)
	e.land(fl.s, fl.peer)
}

// returnFlight queues message f of s, returned with reason, for s's reply
// receive queue; payload is the message as the transport carried it,
// where a medium message's bytes are. Nothing is returned to a closed
// endpoint.
func (e *Engine) returnFlight(s *epState, f *flight, payload []byte, reason endpoint.Reason) {
	if s.closed {
		return
	}
	r := returnedFlight{s: s, d: f.d}
	r.d.Class |= endpoint.ClassReturned
	r.d.Tag = uint64(reason) | uint64(f.q)<<8
	if f.d.Class == endpoint.ClassMedium {
		if m, ok := decodeMsg(payload); ok {
			r.data = append([]byte(nil), m.data...)
		}
	}
	e.returnedFl = append(e.returnedFl, r)
}

// deliver is the transport's Deliver callback.
func (e *Engine) deliver(src HostID, _ int, p []byte) (taken bool) {
	if len(e.down) > 0 {
		delete(e.down, src)
	}
	if len(p) > 0 && p[0] == msgControl {
		e.acceptControl(src, p)
		return true
	}
	// An envelope (auth.go) is opened with the key of the endpoint its
	// message names; the message is taken only if it opens.
	var aead cipher.AEAD
	var ctr uint64
	if len(p) > 0 && p[0] == msgAuth {
		inner, ok := envelope(p)
		m, valid := decodeMsg(inner)
		if !ok || !valid {
			e.stats.Dropped++
			return true
		}
		peer := e.tr.Peer(src)
		if s := e.ep(m.dst); s != nil && s.aead != nil {
			if ctr, ok = e.open(s.aead, src, peer, p); !ok {
				return true // forged, altered or replayed: counted
			}
			aead = s.aead
		}
		p = inner
		defer func() {
			if aead != nil && taken {
				e.noteOpened(src, peer, ctr)
			}
		}()
	}
	ok, reason := e.accept(src, p, len(e.returns) < e.cfg.ReturnQueue, aead != nil)
	if reason == 0 {
		return ok
	}
	// The return message: the message with the reason set, addressed back
	// to its sender, a medium message's bytes included, a bulk chunk's not;
	// in an envelope if the message came in one.
	m, _ := decodeMsg(p)
	m.reason = reason
	m.src, m.dst = m.dst, m.src
	if m.class == endpoint.ClassBulk {
		m.data = nil
	}
	b := make([]byte, m.size())
	encodeMsg(b, &m)
	if aead != nil {
		b = bytes.Clone(e.seal(aead, src, b))
	}
	e.returns = append(e.returns, remoteReturn{e.tr.Peer(src), b})
	return true
}

// flushReturns sends the queued return messages that find a channel.
func (e *Engine) flushReturns() (int, error) {
	work, j := 0, 0
	for i, r := range e.returns {
		err := e.tr.SendTo(r.peer, r.msg, 0)
		switch {
		case err == nil:
			e.stats.ReturnsSent++
			work++
		case errors.Is(err, transport.ErrBusy):
			e.returns[j] = r
			j++
		case errors.Is(err, transport.ErrUnknownHost), errors.Is(err, transport.ErrTooLarge):
			e.stats.ReturnsLost++
		default:
			j += copy(e.returns[j:], e.returns[i:])
			clear(e.returns[j:])
			e.returns = e.returns[:j]
			return work, err
		}
	}
	clear(e.returns[j:])
	e.returns = e.returns[:j]
	return work, nil
}

// accept offers message p from host src to its endpoint. ok false refuses
// it for now (NACK); a reason means it must go back to its sender. Only if
// canReturn (there is room to queue the return) does accept give a reason;
// otherwise it refuses the message, which is offered again later.
func (e *Engine) accept(src HostID, p []byte, canReturn, authed bool) (ok bool, reason endpoint.Reason) {
	m, valid := decodeMsg(p)
	if !valid {
		e.stats.Dropped++
		return true, 0
	}
	s := e.ep(m.dst)
	if s != nil && s.aead != nil && !authed {
		e.stats.AuthFailed++ // an endpoint with a key takes envelopes only (auth.go)
		return true, 0
	}
	if m.reason != 0 {
		if m.index == endpoint.NoIndex && s != nil {
			// A compact message's return (engine_msg.go): its index is
			// that of the endpoint that returned it in s's table.
			if i, ok := s.rev[Name{src, m.src}]; ok {
				m.index = i
			}
		}
		return e.acceptReturn(s, &m), 0
	}
	var rx *bulkRx
	if m.class == endpoint.ClassBulk {
		rx, reason = e.bulkRecord(src, &m, s)
		if rx.failed {
			e.stats.ChunksDropped++
			return true, 0
		}
	}
	switch {
	case reason != 0:
	case rx != nil && rx.expired:
		reason = endpoint.ReasonIncomplete // its block was taken back (pool.go)
	case s == nil:
		reason = endpoint.ReasonNoEndpoint
	case s.closed:
		reason = endpoint.ReasonClosed
	case s.tag != m.tag && !e.cfg.Unprotected:
		reason = endpoint.ReasonBadTag
	case m.class == endpoint.ClassBulk && m.remote != endpoint.PoolOffset && uint64(m.remote)+uint64(m.length) > s.mem.StoreRegion():
		reason = endpoint.ReasonRange
	case m.kind == endpoint.RequestSend && !s.mem.AcceptsHandler(m.handler):
		reason = endpoint.ReasonNoHandler
	case m.class == endpoint.ClassBulk && m.remote == endpoint.PoolOffset && rx.put:
		e.stats.ChunksDropped++ // a chunk of a message stored whole already
		return true, 0
	case m.class == endpoint.ClassBulk && m.remote == endpoint.PoolOffset && !rx.pooled:
		var ok bool
		if ok, reason = e.poolAlloc(s, rx, m.length, src); !ok && reason == 0 {
			e.stats.PoolFull++
			return false, 0
		}
	}
	if reason != 0 {
		if !canReturn {
			e.stats.ReturnsFull++
			return false, 0
		}
		if rx != nil {
			rx.failed = true // returned once; the rest of it is dropped
			poolDrop(rx)
		}
		return true, reason
	}
	if !e.touch(s) {
		e.stats.NotResident++
		return false, 0
	}
	d := endpoint.Descriptor{Class: m.class, NArgs: m.nargs, Handler: m.handler, Dest: endpoint.NoIndex, Tag: m.tag, Args: m.args}
	if i, ok := s.rev[Name{src, m.src}]; ok {
		d.Dest = i
	}
	q := endpoint.RequestReceive
	if m.kind == endpoint.ReplySend {
		q = endpoint.ReplyReceive
	}
	var err error
	switch m.class {
	case endpoint.ClassMedium:
		err = s.mem.PutData(q, &d, m.data)
	case endpoint.ClassBulk:
		// The range was checked above, in 64 bits: remote+length is inside
		// the store region (so the staging area), and chunk+len(data) at
		// most length.
		at := m.remote
		if rx.pooled {
			at = s.pool.base(rx.block) // the pool lies inside the staging area (Pool)
		}
		copy(s.mem.Staging()[at+m.chunk:], m.data)
		if got := uint64(rx.got) + uint64(len(m.data)); got < uint64(m.length) {
			rx.got = uint32(got)
			e.stats.Chunks++
			return true, 0
		}
		// The last chunk to arrive: the message is complete. Refused
		// (queue full), it comes again and is stored again, which changes
		// nothing.
		d.Offset, d.Length = at, m.length
		if rx.pooled {
			d.RemoteOffset = endpoint.PoolOffset
			rx.block.q, rx.block.pos = q, s.mem.Produced(q)
		}
		if err = s.mem.Put(q, &d); err == nil && rx.pooled {
			rx.put = true
			s.pool.held = append(s.pool.held, rx.block)
			s.pool.arrived(rx)
		}
	default:
		err = s.mem.Put(q, &d)
	}
	switch {
	case err == nil:
	case errors.Is(err, endpoint.ErrQueueFull):
		e.stats.QueueFull++
		return false, 0
	default:
		// A corrupt consumer index: NACKing would keep the sender retrying
		// forever, so the message is dropped; the application hurt only
		// itself.
		e.stats.Dropped++
		return true, 0
	}
	if rx != nil {
		rx.got = m.length
	}
	e.stats.Delivered++
	return true, 0
}

// acceptReturn puts the return message m, for endpoint s, into s's reply
// receive queue; false refuses it for now (NACK).
func (e *Engine) acceptReturn(s *epState, m *msg) bool {
	// A return is never returned again.
	if s == nil || s.closed || s.tag != m.tag {
		e.stats.ReturnsLost++
		return true
	}
	if m.class == endpoint.ClassBulk && s.lastReturned == m.id && s.lastReturned != 0 {
		e.stats.ReturnsLost++ // returned by this engine already (unreachable, say)
		return true
	}
	if !e.touch(s) {
		e.stats.NotResident++
		return false
	}
	if m.class == endpoint.ClassBulk && s.d.Class == endpoint.ClassBulk && s.bulkID == m.id {
		// The receiver refused one of its chunks: send no more of them,
		// and do not return it a second time.
		switch s.state {
		case slotPending, slotInflight:
			e.abortBulk(s)
			e.bulkNext(s)
		}
	}
	d := endpoint.Descriptor{
		Class: m.class | endpoint.ClassReturned, NArgs: m.nargs, Handler: m.handler, Args: m.args,
		Dest: m.index, Tag: uint64(m.reason) | uint64(m.kind)<<8,
	}
	var err error
	if m.class == endpoint.ClassMedium {
		err = s.mem.PutData(endpoint.ReplyReceive, &d, m.data)
	} else {
		d.Offset, d.Length, d.RemoteOffset = m.offset, m.length, m.remote
		err = s.mem.Put(endpoint.ReplyReceive, &d)
	}
	switch {
	case err == nil:
		e.stats.Returned++
	case errors.Is(err, endpoint.ErrQueueFull):
		e.stats.QueueFull++
		return false
	default:
		e.stats.Dropped++
	}
	return true
}
