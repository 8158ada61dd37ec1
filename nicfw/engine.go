package nicfw

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/internal/clock"
)

// The engine loop: endpoints, scheduler, residency and transport joined
// into AM-II's NIC processor, run inline by the caller's goroutine (Poll).
// See the package documentation ("Engine") for the design; in short, one
// Poll
//
//  1. sends the return messages queued for remote senders (flushReturns);
//  2. lets the scheduler pick endpoints with sends pending, touches each in
//     the residency, takes a descriptor (replies before requests),
//     translates its destination index and hands the message to the
//     transport, or delivers it locally (sendPhase);
//  3. polls the transport, whose Deliver and Returned callbacks put
//     messages into receive queues or return them to their senders;
//  4. notices acknowledgements (collectAcks) and releases the senders;
//  5. puts returned messages into their senders' reply receive queues
//     (flushReturning).

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
}

// Reason is why a message was returned to its sender.
type Reason uint8

// The reasons of return-to-sender; 0 is not a reason.
const (
	ReasonBadTag      Reason = 1 // the destination's tag differs from the message's
	ReasonNoEndpoint  Reason = 2 // the destination host has no such endpoint
	ReasonUnreachable Reason = 3 // the transport gave up (ErrUnreachable)
	ReasonNoHost      Reason = 4 // the destination host is not in the host table
	ReasonUnsupported Reason = 5 // medium and bulk messages: not built yet
)

func (r Reason) String() string {
	switch r {
	case ReasonBadTag:
		return "bad tag"
	case ReasonNoEndpoint:
		return "no such endpoint"
	case ReasonUnreachable:
		return "host unreachable"
	case ReasonNoHost:
		return "unknown host"
	case ReasonUnsupported:
		return "message class not supported"
	}
	return fmt.Sprintf("reason %d", uint8(r))
}

// ClassReturned is set in the Class of a descriptor the engine puts into a
// reply receive queue for a message returned to its sender. See
// Descriptor.ReturnInfo.
const ClassReturned Class = 0x80

// NoIndex is the Dest of a received descriptor whose sender is not in the
// receiving endpoint's translation table (it cannot be replied to).
const NoIndex = ^uint32(0)

// ReturnInfo reports whether d, taken from a reply receive queue, is a
// returned message, why, and from which send queue it had been sent. The
// rest of d is the original descriptor: Class without ClassReturned,
// NArgs, Args, Handler and Dest (the index it was sent to).
func (d *Descriptor) ReturnInfo() (reason Reason, from Queue, ok bool) {
	if d.Class&ClassReturned == 0 {
		return 0, 0, false
	}
	return Reason(d.Tag), Queue(d.Tag >> 8), true
}

// Engine defaults.
const (
	DefaultResident    = 8
	DefaultReturnQueue = 64
)

// EngineConfig configures an Engine. Zero fields take the defaults.
type EngineConfig struct {
	// Transport configures the engine's transport; its Deliver and
	// Returned must be nil (the engine sets them). Its Clock also drives
	// the engine.
	Transport Config
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
}

// EngineStats counts what an Engine did.
type EngineStats struct {
	Sent        uint64 // messages handed to the transport or delivered locally
	Acked       uint64 // sent messages acknowledged
	Busy        uint64 // sends put off by ErrBusy (kept pending)
	Delivered   uint64 // messages put into a receive queue
	QueueFull   uint64 // deliveries refused for a full receive queue (NACK)
	NotResident uint64 // deliveries refused because no frame could be freed (NACK)
	Returned    uint64 // returned messages put into a sender's reply receive queue
	ReturnsSent uint64 // return messages sent to remote senders
	ReturnsLost uint64 // return messages dropped: undeliverable themselves
	ReturnsFull uint64 // messages NACKed because the return queue was full
	Dropped     uint64 // messages dropped: malformed, or a receive queue with a corrupt index
}

type slotState uint8

const (
	slotEmpty     slotState = iota
	slotPending             // taken, not yet sent (busy, not resident, queue full)
	slotInflight            // sent, waiting for its acknowledgement
	slotReturning           // to be put into the reply receive queue as returned
)

// epState is the engine's state of one endpoint. Each endpoint has at most
// one message taken and not finished (slot): that is what keeps its
// messages in order across the transport's C channels.
type epState struct {
	id    EndpointID
	mem   *EndpointMemory
	tag   uint64
	table []Name
	rev   map[Name]uint32 // sender -> index, for received descriptors

	state   slotState
	d       Descriptor
	q       Queue // the send queue d came from
	reason  Reason
	host    HostID
	ch      int
	cookie  uint64
	blocked uint64 // Poll number in which it could not progress
}

type inflightRef struct {
	s      *epState
	cookie uint64
}

type remoteReturn struct {
	host HostID
	msg  []byte
}

// Engine is AM-II's NIC processor over one link, run inline: the caller's
// goroutine calls every method, and Poll runs the engine loop once. The
// engine owns its Transport and its endpoints' memory; it does not own the
// link.
type Engine struct {
	cfg   EngineConfig
	clk   clock.Clock
	tr    *Transport
	sched *Scheduler
	res   *Residency
	eps   map[EndpointID]*epState

	pinned     int // endpoints with a message in flight (residency Hold)
	inflight   []inflightRef
	byCookie   map[uint64]*epState
	nextCookie uint64
	returning  []*epState
	returns    []remoteReturn
	down       map[HostID]time.Time // host -> until when sends to it are returned at once
	polls      uint64
	pending    PendingFunc
	buf        [msgMaxLen]byte
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
	if cfg.Transport.Clock == nil {
		cfg.Transport.Clock = clock.System{}
	}
	switch {
	case cfg.Resident < 2:
		return nil, fmt.Errorf("%w: %d resident endpoints, want at least 2", ErrConfig, cfg.Resident)
	case cfg.ReturnQueue < 1 || cfg.SendBudget < 0:
		return nil, fmt.Errorf("%w: return queue %d, send budget %d", ErrConfig, cfg.ReturnQueue, cfg.SendBudget)
	}
	e := &Engine{
		cfg:      cfg,
		clk:      cfg.Transport.Clock,
		eps:      make(map[EndpointID]*epState),
		byCookie: make(map[uint64]*epState),
		down:     make(map[HostID]time.Time),
	}
	var err error
	if e.sched, err = NewScheduler(cfg.Loiter); err != nil {
		return nil, err
	}
	if e.res, err = NewResidency(cfg.Resident); err != nil {
		return nil, err
	}
	tc := cfg.Transport
	tc.Deliver = e.deliver
	tc.Returned = e.returned
	if e.tr, err = New(link, tc); err != nil {
		return nil, err
	}
	if e.cfg.SendBudget == 0 {
		e.cfg.SendBudget = max(link.BatchSize(), 1)
	}
	e.pending = e.isPending
	return e, nil
}

// AddHost enters a peer host in the host table.
func (e *Engine) AddHost(id HostID, mac net.HardwareAddr) error {
	if id == e.cfg.Host {
		return fmt.Errorf("%w: host %d is this host", ErrConfig, id)
	}
	return e.tr.AddPeer(id, mac)
}

// CreateEndpoint creates endpoint id in virtual network vnet and returns
// its memory, whose FD the application maps (MapEndpoint). The memory
// belongs to the engine: Close closes it. cfg.TableSize must be 0 or
// len(vnet.Table).
func (e *Engine) CreateEndpoint(id EndpointID, cfg EndpointConfig, vnet VNet) (*EndpointMemory, error) {
	if _, ok := e.eps[id]; ok {
		return nil, fmt.Errorf("%w: endpoint %d exists", ErrConfig, id)
	}
	if len(vnet.Table) == 0 || cfg.TableSize != 0 && cfg.TableSize != len(vnet.Table) {
		return nil, fmt.Errorf("%w: translation table of %d entries, TableSize %d", ErrConfig, len(vnet.Table), cfg.TableSize)
	}
	cfg.TableSize = len(vnet.Table)
	mem, err := NewEndpointMemory(cfg)
	if err != nil {
		return nil, err
	}
	s := &epState{id: id, mem: mem, tag: vnet.Tag, table: append([]Name(nil), vnet.Table...), rev: make(map[Name]uint32)}
	for i, n := range s.table {
		if _, ok := s.rev[n]; !ok {
			s.rev[n] = uint32(i)
		}
	}
	if err := e.sched.Add(int(id), 1); err != nil {
		mem.Close()
		return nil, err
	}
	e.eps[id] = s
	return mem, nil
}

// Close closes every endpoint's memory. The engine is not usable after.
func (e *Engine) Close() error {
	var err error
	for id, s := range e.eps {
		if cerr := s.mem.Close(); err == nil {
			err = cerr
		}
		delete(e.eps, id)
	}
	return err
}

// Stats returns the engine's counters.
func (e *Engine) Stats() EngineStats { return e.stats }

// TransportStats returns the transport's counters.
func (e *Engine) TransportStats() Stats { return e.tr.Stats() }

// ResidencyStats returns the residency's counters (endpoint faults).
func (e *Engine) ResidencyStats() ResidencyStats { return e.res.Stats() }

// MaxPayload returns the transport's largest payload.
func (e *Engine) MaxPayload() int { return e.tr.MaxPayload() }

// Poll runs the engine loop once and returns how much it did (messages
// sent, returned or acknowledged, frames received): 0 means it found
// nothing to do. It returns the link's errors.
func (e *Engine) Poll() (int, error) {
	e.polls++
	work, err := e.flushReturns()
	if err != nil {
		return work, err
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
	work += e.collectAcks()
	work += e.flushReturning()
	return work, nil
}

// isPending is the scheduler's view of an endpoint.
func (e *Engine) isPending(ep int) bool {
	s := e.eps[EndpointID(ep)]
	if s == nil || s.blocked == e.polls {
		return false
	}
	switch s.state {
	case slotPending:
		return e.canSend(s, s.d.Dest)
	case slotEmpty:
		dest, ok := e.peek(s)
		return ok && e.canSend(s, dest)
	}
	return false
}

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
	if _, down := e.down[h]; down {
		return true // returned at once (or the mark expires and it is sent)
	}
	if p := e.tr.peers[h]; p != nil && p.unacked == len(p.send) {
		return false // ErrBusy
	}
	return e.pinned < e.res.Frames()-1
}

// peek returns the destination index of the descriptor that take would
// take next from s, without taking it: the head of the reply send queue,
// else of the request send queue. The index is untrusted; Take checks it.
// A corrupt ring peeks as pending, so that Take gets to count it.
func (e *Engine) peek(s *epState) (uint32, bool) {
	for _, q := range [...]Queue{ReplySend, RequestSend} {
		r := &s.mem.rings[q]
		n, err := r.available()
		if err != nil {
			return NoIndex, true
		}
		if n > 0 {
			var d Descriptor
			d.decode(r.slot(r.own))
			return d.Dest, true
		}
	}
	return 0, false
}

// sendPhase makes up to SendBudget scheduling decisions.
func (e *Engine) sendPhase() (int, error) {
	work := 0
	for range e.cfg.SendBudget {
		id, ok := e.sched.Next(e.pending)
		if !ok {
			break
		}
		s := e.eps[EndpointID(id)]
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

// sendFrom moves endpoint s's next message on; it reports whether it did.
func (e *Engine) sendFrom(s *epState) (bool, error) {
	if _, err := e.res.Touch(int(s.id)); err != nil {
		return false, nil // ErrMustWait: retry after acknowledgements
	}
	if s.state == slotEmpty && !e.take(s) {
		return false, nil
	}
	d := &s.d
	if d.Class != ClassShort {
		e.returnLocal(s, ReasonUnsupported)
		return true, nil
	}
	dst := s.table[d.Dest] // Take checked Dest against the table's size
	m := e.buf[:encodeMsg(e.buf[:], msg{
		kind: s.q, class: d.Class, nargs: d.NArgs, dst: dst.Endpoint, src: s.id,
		handler: d.Handler, index: d.Dest, tag: s.tag, args: d.Args,
	})]
	if dst.Host == e.cfg.Host {
		ok, reason := e.accept(e.cfg.Host, m)
		switch {
		case reason != 0:
			e.returnLocal(s, reason)
		case !ok:
			return false, nil
		default:
			s.state = slotEmpty
			e.stats.Sent++
		}
		return true, nil
	}
	if until, ok := e.down[dst.Host]; ok {
		if e.clk.Now().Before(until) {
			e.returnLocal(s, ReasonUnreachable)
			return true, nil
		}
		delete(e.down, dst.Host)
	}
	// One frame stays unpinned, so that a delivery to a non-resident
	// endpoint can always load it: otherwise two hosts whose frames are all
	// pinned by messages to each other would NACK each other forever.
	if e.pinned >= e.res.Frames()-1 {
		return false, nil
	}
	e.nextCookie++
	cookie := e.nextCookie
	err := e.tr.Send(dst.Host, m, cookie)
	switch {
	case err == nil:
	case errors.Is(err, ErrBusy):
		e.stats.Busy++
		return false, nil
	case errors.Is(err, ErrUnknownHost):
		e.returnLocal(s, ReasonNoHost)
		return true, nil
	default:
		return false, err
	}
	e.stats.Sent++
	if err := e.res.Hold(int(s.id)); err != nil {
		panic(err) // touched above, and nothing evicts in between
	}
	e.pinned++
	s.state, s.host, s.ch, s.cookie = slotInflight, dst.Host, e.tr.channelHolding(dst.Host, cookie), cookie
	e.byCookie[cookie] = s
	e.inflight = append(e.inflight, inflightRef{s, cookie})
	return true, nil
}

// take takes s's next valid descriptor, replies before requests, into its
// slot. Refused descriptors are counted by Take and dropped.
func (e *Engine) take(s *epState) bool {
	for _, q := range [...]Queue{ReplySend, RequestSend} {
		for {
			ok, err := s.mem.Take(q, &s.d)
			if ok && err == nil {
				s.q, s.state = q, slotPending
				return true
			}
			if err == nil || errors.Is(err, RefusedRing) || !errors.Is(err, ErrRefused) {
				break // empty, corrupt ring, or closed
			}
		}
	}
	return false
}

// returnLocal finishes s's message by returning it to s with reason.
func (e *Engine) returnLocal(s *epState, reason Reason) {
	s.state, s.reason = slotReturning, reason
	e.returning = append(e.returning, s)
}

// flushReturning puts returned messages into their senders' reply receive
// queues; those whose queue is full wait for the next Poll.
func (e *Engine) flushReturning() int {
	work, j := 0, 0
	for _, s := range e.returning {
		d := s.d
		d.Class |= ClassReturned
		d.Tag = uint64(s.reason) | uint64(s.q)<<8
		d.Offset, d.Length = 0, 0
		if err := s.mem.Put(ReplyReceive, &d); err != nil {
			e.returning[j] = s
			j++
			continue
		}
		s.state = slotEmpty
		e.stats.Returned++
		work++
	}
	clear(e.returning[j:])
	e.returning = e.returning[:j]
	return work
}

// collectAcks releases the senders whose messages were acknowledged: the
// transport has freed their channel without returning them.
func (e *Engine) collectAcks() int {
	work, j := 0, 0
	for _, r := range e.inflight {
		s := r.s
		if s.state != slotInflight || s.cookie != r.cookie {
			continue // returned meanwhile
		}
		if e.tr.holds(s.host, s.ch, s.cookie) {
			e.inflight[j] = r
			j++
			continue
		}
		delete(e.byCookie, s.cookie)
		e.unpin(s)
		s.state = slotEmpty
		e.stats.Acked++
		work++
	}
	clear(e.inflight[j:])
	e.inflight = e.inflight[:j]
	return work
}

func (e *Engine) unpin(s *epState) {
	if err := e.res.Release(int(s.id)); err != nil {
		panic(err) // pinned endpoints are never evicted
	}
	e.pinned--
}

// returned is the transport's Returned callback.
func (e *Engine) returned(dst HostID, cookie uint64, _ []byte, _ error) {
	s := e.byCookie[cookie]
	if s == nil {
		e.stats.ReturnsLost++ // a return message (cookie 0) is not returned again
		return
	}
	delete(e.byCookie, cookie)
	e.unpin(s)
	e.down[dst] = e.clk.Now().Add(e.tr.cfg.GiveUpAfter)
	e.returnLocal(s, ReasonUnreachable)
}

// deliver is the transport's Deliver callback.
func (e *Engine) deliver(src HostID, _ int, p []byte) bool {
	delete(e.down, src)
	ok, reason := e.accept(src, p)
	if reason == 0 {
		return ok
	}
	if len(e.returns) >= e.cfg.ReturnQueue {
		e.stats.ReturnsFull++
		return false
	}
	m, _ := decodeMsg(p)
	m.reason = reason
	m.src, m.dst = m.dst, m.src
	b := make([]byte, msgHeaderLen+8*int(m.nargs))
	encodeMsg(b, m)
	e.returns = append(e.returns, remoteReturn{src, b})
	return true
}

// flushReturns sends the queued return messages that find a channel.
func (e *Engine) flushReturns() (int, error) {
	work, j := 0, 0
	for i, r := range e.returns {
		err := e.tr.Send(r.host, r.msg, 0)
		switch {
		case err == nil:
			e.stats.ReturnsSent++
			work++
		case errors.Is(err, ErrBusy):
			e.returns[j] = r
			j++
		case errors.Is(err, ErrUnknownHost):
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
// it for now (NACK); a reason means it must go back to its sender.
func (e *Engine) accept(src HostID, p []byte) (ok bool, reason Reason) {
	m, valid := decodeMsg(p)
	if !valid {
		e.stats.Dropped++
		return true, 0
	}
	s := e.eps[m.dst]
	if m.reason != 0 {
		// A return for one of our senders; never returned again.
		if s == nil || s.tag != m.tag {
			e.stats.ReturnsLost++
			return true, 0
		}
	} else if s == nil {
		return true, ReasonNoEndpoint
	} else if s.tag != m.tag {
		return true, ReasonBadTag
	}
	if _, err := e.res.Touch(int(s.id)); err != nil {
		e.stats.NotResident++
		return false, 0
	}
	d := Descriptor{Class: m.class, NArgs: m.nargs, Handler: m.handler, Args: m.args}
	q := RequestReceive
	if m.reason != 0 {
		d.Class |= ClassReturned
		d.Dest = m.index
		d.Tag = uint64(m.reason) | uint64(m.kind)<<8
		q = ReplyReceive
	} else {
		d.Dest, d.Tag = NoIndex, m.tag
		if i, ok := s.rev[Name{src, m.src}]; ok {
			d.Dest = i
		}
		if m.kind == ReplySend {
			q = ReplyReceive
		}
	}
	switch err := s.mem.Put(q, &d); {
	case err == nil:
	case errors.Is(err, ErrQueueFull):
		e.stats.QueueFull++
		return false, 0
	default:
		// A corrupt consumer index: NACKing would keep the sender retrying
		// forever, so the message is dropped; the application hurt only
		// itself.
		e.stats.Dropped++
		return true, 0
	}
	if m.reason != 0 {
		e.stats.Returned++
	} else {
		e.stats.Delivered++
	}
	return true, 0
}

// The engine's message header, the transport payload of every message,
// big-endian (see the package documentation).
const (
	msgHeaderLen = 24
	msgMaxLen    = msgHeaderLen + 8*MaxShortArgs
)

type msg struct {
	kind     Queue // RequestSend or ReplySend
	class    Class
	nargs    uint8
	reason   Reason
	dst, src EndpointID
	handler  uint32
	index    uint32 // the destination's index in the sender's table
	tag      uint64
	args     [MaxShortArgs]uint64
}

// encodeMsg writes m into b and returns its length.
func encodeMsg(b []byte, m msg) int {
	b[0], b[1], b[2], b[3] = byte(m.kind), byte(m.class), m.nargs, byte(m.reason)
	binary.BigEndian.PutUint16(b[4:], uint16(m.dst))
	binary.BigEndian.PutUint16(b[6:], uint16(m.src))
	binary.BigEndian.PutUint32(b[8:], m.handler)
	binary.BigEndian.PutUint32(b[12:], m.index)
	binary.BigEndian.PutUint64(b[16:], m.tag)
	for i := range int(m.nargs) {
		binary.BigEndian.PutUint64(b[msgHeaderLen+8*i:], m.args[i])
	}
	return msgHeaderLen + 8*int(m.nargs)
}

// decodeMsg reads and checks a message.
func decodeMsg(b []byte) (m msg, ok bool) {
	if len(b) < msgHeaderLen {
		return m, false
	}
	m = msg{
		kind: Queue(b[0]), class: Class(b[1]), nargs: b[2], reason: Reason(b[3]),
		dst:     EndpointID(binary.BigEndian.Uint16(b[4:])),
		src:     EndpointID(binary.BigEndian.Uint16(b[6:])),
		handler: binary.BigEndian.Uint32(b[8:]),
		index:   binary.BigEndian.Uint32(b[12:]),
		tag:     binary.BigEndian.Uint64(b[16:]),
	}
	if !m.kind.isSend() || m.class != ClassShort || m.nargs > MaxShortArgs || len(b) != msgHeaderLen+8*int(m.nargs) {
		return m, false
	}
	for i := range int(m.nargs) {
		m.args[i] = binary.BigEndian.Uint64(b[msgHeaderLen+8*i:])
	}
	return m, true
}

// channelHolding returns the channel to dst that holds the message sent
// with cookie, or -1. The engine uses it and holds, in place of an
// acknowledgement callback, to learn when a message was acknowledged.
func (t *Transport) channelHolding(dst HostID, cookie uint64) int {
	if p := t.peers[dst]; p != nil {
		for i := range p.send {
			if p.send[i].inUse && p.send[i].cookie == cookie {
				return i
			}
		}
	}
	return -1
}

// holds reports whether channel ch to dst still holds the message sent with
// cookie (cookies are unique per engine).
func (t *Transport) holds(dst HostID, ch int, cookie uint64) bool {
	p := t.peers[dst]
	if p == nil || ch < 0 || ch >= len(p.send) {
		return false
	}
	c := &p.send[ch]
	return c.inUse && c.cookie == cookie
}
