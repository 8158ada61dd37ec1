package nicfw

import (
	"container/heap"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// Modules: the engine as DVCM's "active backplane" (docs/modules.md
// writes one, step by step; examples/counter is the smallest). A Module
// is chosen when the engine starts (EngineConfig.Modules) and extends it
// through the capabilities it implements, found by type assertion as
// afxdp.Link's are:
//
//   - Commander: operations an application issues through its own
//     endpoint, as descriptors of class endpoint.ClassCommand in its
//     request send queue. The engine checks each (endpoint.Memory.Next),
//     hands the module a copy of its operands, and puts the completion
//     into the endpoint's reply receive queue.
//   - ControlReceiver: engine-to-engine control messages of the module's
//     own kind (up to MaxControl bytes), which Backplane.SendControl
//     carries reliably and in order per destination host, apart from the
//     application's messages.
//   - Ticker: a coarse timer, run every tickEvery Polls or when the
//     module's frames wait; and Backplane.After, an accurate one-shot
//     timer on the engine's clock, checked every Poll while one is set.
//   - SendGate: consulted before any application message, or bulk chunk,
//     leaves for a remote host, with the message's size and what is left
//     of it, and told when each has left; a closed gate keeps the message
//     in its endpoint (the scheduler passes it by) until the gate opens.
//     Sender coordination (DVCM's token per link) is one.
//   - LinkUser: a module that speaks a protocol of its own in broadcast
//     frames on the engine's link (the mapper): the engine's transport
//     then receives through a split link that sets broadcast frames aside
//     for the module (maplink.go).
//   - HostWatcher: told when the engine gives up on a host (a message
//     or control message to it unanswered for the transport's
//     GiveUpAfter).
//   - Deactivator: called by Engine.Close.
//   - StatsReporter: counters of the module's own, which the daemon's
//     stats show by the module's name.
//
// A module runs in the engine thread, inside Poll, like everything in the
// engine; it reaches the engine only through its Backplane, never an
// endpoint's memory. An engine with no modules pays one nil check per
// Poll and one per send decision.

// Module is an extension of the engine.
type Module interface {
	// Name names the module in logs and errors.
	Name() string
	// ID is the module's number on the wire (control messages) and in
	// command operations (the high 16 bits of Handler): 1..255, unique
	// per engine, the same on every host.
	ID() uint8
	// Init is called once by NewEngine, in the order of
	// EngineConfig.Modules, with the module's handle on the engine.
	Init(bp *Backplane) error
}

// Commander is a module with commands: Command runs operation op (the
// low 16 bits of the descriptor's Handler) for endpoint ep with the
// descriptor's arguments, and returns the results to put into the
// completion (at most endpoint.MaxShortArgs) or an error (CommandFailed).
type Commander interface {
	Command(ep EndpointID, op uint16, args []uint64) (results []uint64, err error)
}

// ControlReceiver is a module that receives control messages: body, from
// host src's module of the same ID, valid only during the call.
type ControlReceiver interface {
	Control(src HostID, body []byte)
}

// Ticker is a module with a coarse timer: Tick runs every tickEvery Polls,
// and at once when frames wait for a LinkUser. It returns when it next
// needs to run at the latest (a sleeping daemon wakes for it).
type Ticker interface {
	Tick(now time.Time) (next time.Time)
}

// SendGate is a module that may hold messages back. Before a message of
// endpoint src leaves for remote host dst, or a chunk of a bulk message,
// MaySend is asked with the message's length in bytes (a bulk message's
// whole length; a short or medium message's engine encoding) and the
// bytes of it not yet sent, this unit's included; false keeps the message
// in its endpoint, asked again at later Polls, until the gate opens. Once
// the unit has left, Sent tells the gate how many bytes of the message are
// left after it: 0 when the message is done, or was given up (returned)
// with bytes still unsent. The gate sees each unit once, as it first
// leaves: the transport's retransmissions of it (no acknowledgement in
// time, or a NACK) leave without asking.
type SendGate interface {
	MaySend(src EndpointID, dst HostID, size, left int) bool
	Sent(src EndpointID, dst HostID, left int)
}

// LinkUser is a module with a protocol of its own in broadcast frames:
// UseLink, called before Init, gives it the link it sends and receives
// them on (the engine's, without the transport's frames).
type LinkUser interface {
	UseLink(l afxdp.Link)
}

// HostWatcher is a module told when the engine gives up on a host: a
// message or control message to it went unanswered for the transport's
// GiveUpAfter (the host is taken to be dead). HostDown runs in the engine
// thread, once per message given up.
type HostWatcher interface {
	HostDown(h HostID)
}

// Deactivator is a module with something to release when the engine
// closes.
type Deactivator interface {
	Deactivate() error
}

// StatsReporter is a module that counts what it does: ReportStats returns
// its counters, and the settings that explain them, as named values in a
// fixed order. It runs in the engine thread, like every module call. The
// daemon's stats (`xam fw stats`) show them under the module's name.
type StatsReporter interface {
	ReportStats() []ModuleCounter
}

// ModuleCounter is a named value a module reports (StatsReporter).
type ModuleCounter struct {
	Name  string `json:"name"`
	Value int64  `json:"value"`
}

// CommandStatus is the Tag of a command's completion.
type CommandStatus uint64

// The statuses of commands.
const (
	CommandOK        CommandStatus = 0
	CommandUnknown   CommandStatus = 1 // no loaded module has that operation
	CommandFailed    CommandStatus = 2 // the module refused it (its error is logged nowhere: the status is all)
	CommandBadResult CommandStatus = 3 // the module returned more results than a descriptor holds
)

// MaxControl is the largest body of a control message.
const MaxControl = 256

// msgControl is the first byte of an engine message that is a module's
// control message (the queue byte of the others is 0 or 1): byte 1 the
// module's ID, then the body.
const msgControl = 2

// Errors of modules.
var (
	// ErrControlFull: too many control messages wait for their
	// destination; try again after Poll.
	ErrControlFull = errors.New("nicfw: control queue full")
	// ErrControlSize: a control message's body is larger than MaxControl.
	ErrControlSize = errors.New("nicfw: control message too large")
)

// controlQueue bounds the control messages waiting per destination.
const controlQueue = 64

// tickEvery is how many Polls run Tickers once (the coarse timer).
const tickEvery = 64

// controlCookie marks a control message's cookie at the transport (the
// low bits: the destination host).
const controlCookie = 1 << 62

// ModuleStats counts what the engine did for its modules.
type ModuleStats struct {
	Commands     uint64 // commands run
	CommandsBad  uint64 // commands for no loaded module
	ControlSent  uint64 // control messages handed to the transport
	ControlRecv  uint64 // control messages delivered to a module
	ControlLost  uint64 // control messages given up on (unreachable host) or for no loaded module
	Timeouts     uint64 // Backplane.After functions run
	Ticks        uint64 // Ticker runs
	GateHeld     uint64 // send decisions a SendGate held back
	FramesForMod uint64 // broadcast frames set aside for LinkUsers
}

// modules is the engine's state of its modules (nil: none loaded).
type modules struct {
	list     []Module
	byID     [256]Module
	tickers  []Ticker
	gates    []SendGate
	split    *splitLink
	nextTick time.Time
	polls    uint64
	timers   timerHeap
	ctl      map[HostID]*ctlQueue
	ctlBusy  int // destinations whose head control message is in flight
	watchers []HostWatcher
	stats    ModuleStats
}

// ctlQueue is the control messages waiting for one destination: sent one
// at a time, each after the one before is acknowledged, so they arrive in
// order.
type ctlQueue struct {
	msgs     [][]byte
	inFlight bool
}

// Backplane is a module's handle on its engine.
type Backplane struct {
	e *Engine
	m Module
}

// Self returns this host's id.
func (b *Backplane) Self() HostID { return b.e.cfg.Host }

// MaxUnit returns the most bytes of a message the engine sends at once: a
// bulk message leaves in chunks of up to this many bytes of data.
func (b *Backplane) MaxUnit() int { return b.e.maxPL }

// Now returns the time on the engine's clock.
func (b *Backplane) Now() time.Time { return b.e.clk.Now() }

// After runs f in the engine thread, inside Poll, once d has passed on the
// engine's clock (the accurate timer: checked every Poll while set).
func (b *Backplane) After(d time.Duration, f func()) {
	heap.Push(&b.e.mods.timers, timer{at: b.e.clk.Now().Add(d), f: f})
}

// SendControl queues body as a control message to host dst's module of
// the same ID: delivered once, in order with this module's other control
// messages to dst, unless dst is unreachable. The body is copied.
func (b *Backplane) SendControl(dst HostID, body []byte) error {
	if len(body) > MaxControl {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrControlSize, len(body), MaxControl)
	}
	if dst == b.e.cfg.Host || b.e.tr.Peer(dst) == nil {
		return fmt.Errorf("%w: %d", transport.ErrUnknownHost, dst)
	}
	ms := b.e.mods
	q := ms.ctl[dst]
	if q == nil {
		q = new(ctlQueue)
		ms.ctl[dst] = q
	}
	if len(q.msgs) >= controlQueue {
		return ErrControlFull
	}
	m := make([]byte, 2+len(body))
	m[0], m[1] = msgControl, b.m.ID()
	copy(m[2:], body)
	q.msgs = append(q.msgs, m)
	return nil
}

// SetHosts replaces the engine's host table (Engine.SetHosts): for a module
// that maps the network.
func (b *Backplane) SetHosts(self HostID, hosts map[HostID]net.HardwareAddr) error {
	return b.e.SetHosts(self, hosts)
}

// Hosts returns the ids of the hosts in the engine's table, this one
// excluded.
func (b *Backplane) Hosts() []HostID { return b.e.tr.Hosts() }

// initModules sets up cfg's modules before the transport is made: a split
// link if one uses the link. It returns the link the transport uses.
func (e *Engine) initModules(link afxdp.Link) (afxdp.Link, error) {
	if len(e.cfg.Modules) == 0 {
		return link, nil
	}
	ms := &modules{ctl: make(map[HostID]*ctlQueue)}
	for _, m := range e.cfg.Modules {
		id := m.ID()
		if id == 0 || ms.byID[id] != nil {
			return nil, fmt.Errorf("%w: module %q: id %d is 0 or taken", ErrConfig, m.Name(), id)
		}
		ms.byID[id] = m
		ms.list = append(ms.list, m)
		if t, ok := m.(Ticker); ok {
			ms.tickers = append(ms.tickers, t)
		}
		if g, ok := m.(SendGate); ok {
			ms.gates = append(ms.gates, g)
		}
		if w, ok := m.(HostWatcher); ok {
			ms.watchers = append(ms.watchers, w)
		}
		if u, ok := m.(LinkUser); ok {
			if ms.split == nil {
				ms.split = &splitLink{Link: link}
			}
			u.UseLink(ms.split.mapSide())
		}
	}
	e.mods = ms
	if ms.split != nil {
		return ms.split, nil
	}
	return link, nil
}

// startModules calls every module's Init, once the engine is made.
func (e *Engine) startModules() error {
	if e.mods == nil {
		return nil
	}
	for _, m := range e.mods.list {
		if err := m.Init(&Backplane{e: e, m: m}); err != nil {
			return fmt.Errorf("nicfw: module %s: %w", m.Name(), err)
		}
	}
	return nil
}

// pollModules runs the modules' timers and sends their control messages.
func (e *Engine) pollModules() (int, error) {
	ms := e.mods
	work := 0
	ms.polls++
	waiting := ms.split != nil && len(ms.split.inbox) > 0
	if len(ms.timers) > 0 || waiting || ms.polls%tickEvery == 0 {
		now := e.clk.Now()
		for len(ms.timers) > 0 && !ms.timers[0].at.After(now) {
			t := heap.Pop(&ms.timers).(timer)
			ms.stats.Timeouts++
			t.f()
			work++
		}
		if waiting || !now.Before(ms.nextTick) {
			ms.nextTick = now.Add(time.Hour)
			for _, t := range ms.tickers {
				ms.stats.Ticks++
				if next := t.Tick(now); next.Before(ms.nextTick) {
					ms.nextTick = next
				}
			}
			work++
		}
	}
	if len(ms.ctl) > 0 {
		n, err := e.flushControl()
		work += n
		if err != nil {
			return work, err
		}
	}
	return work, nil
}

// flushControl sends the head control message of every destination whose
// previous one was acknowledged.
func (e *Engine) flushControl() (int, error) {
	work := 0
	for dst, q := range e.mods.ctl {
		if q.inFlight || len(q.msgs) == 0 {
			continue
		}
		err := e.tr.Send(dst, q.msgs[0], controlCookie|uint64(dst))
		switch {
		case err == nil:
			q.inFlight = true
			e.mods.stats.ControlSent++
			work++
		case errors.Is(err, transport.ErrBusy):
		case errors.Is(err, transport.ErrUnknownHost):
			e.mods.stats.ControlLost += uint64(len(q.msgs))
			delete(e.mods.ctl, dst)
		default:
			return work, err
		}
	}
	return work, nil
}

// controlDone finishes the head control message to dst: acknowledged, or
// given up on (then the rest to dst are dropped too: the host is
// unreachable).
func (e *Engine) controlDone(dst HostID, delivered bool) {
	q := e.mods.ctl[dst]
	if q == nil || !q.inFlight {
		return
	}
	q.inFlight = false
	if delivered {
		clear(q.msgs[:1])
		q.msgs = q.msgs[1:]
	} else {
		e.mods.stats.ControlLost += uint64(len(q.msgs))
		q.msgs = nil
	}
	if !delivered {
		defer e.hostDown(dst)
	}
	if len(q.msgs) == 0 {
		delete(e.mods.ctl, dst)
	}
}

// hostDown tells the HostWatchers that the engine gave up on h.
func (e *Engine) hostDown(h HostID) {
	if e.mods == nil {
		return
	}
	for _, w := range e.mods.watchers {
		w.HostDown(h)
	}
}

// acceptControl hands control message p from src to its module.
func (e *Engine) acceptControl(src HostID, p []byte) {
	var m Module
	if e.mods != nil && len(p) >= 2 {
		m = e.mods.byID[p[1]]
	}
	r, ok := m.(ControlReceiver)
	if !ok {
		if e.mods != nil {
			e.mods.stats.ControlLost++
		}
		e.stats.Dropped++
		return
	}
	e.mods.stats.ControlRecv++
	r.Control(src, p[2:])
}

// command runs the command in s's slot and queues its completion.
func (e *Engine) command(s *epState) {
	d := s.d
	status := CommandUnknown
	var results []uint64
	if e.mods != nil {
		if c, ok := e.mods.byID[uint8(d.Handler>>16)].(Commander); ok && d.Handler>>24 == 0 {
			args := d.Args // a copy: the module sees the engine's, never the endpoint's memory
			var err error
			results, err = c.Command(s.id, uint16(d.Handler), args[:d.NArgs])
			switch {
			case err != nil:
				status = CommandFailed
			case len(results) > endpoint.MaxShortArgs:
				status = CommandBadResult
			default:
				status = CommandOK
			}
			e.mods.stats.Commands++
		}
	}
	if status == CommandUnknown && e.mods != nil {
		e.mods.stats.CommandsBad++
	}
	done := endpoint.Descriptor{Class: endpoint.ClassCommand, Handler: d.Handler, Tag: uint64(status)}
	if status == CommandOK {
		done.NArgs = uint8(copy(done.Args[:], results))
	}
	e.vacate(s)
	e.returnedFl = append(e.returnedFl, returnedFlight{s: s, d: done})
}

// gateOpen reports whether every SendGate lets endpoint id send the next
// unit of a message of size bytes, left of them unsent, to dst.
func (e *Engine) gateOpen(id EndpointID, dst HostID, size, left int) bool {
	for _, g := range e.mods.gates {
		if !g.MaySend(id, dst, size, left) {
			e.mods.stats.GateHeld++
			return false
		}
	}
	return true
}

// gateSent tells every SendGate that a unit of a message of endpoint id
// to dst left, left bytes of the message after it.
func (e *Engine) gateSent(id EndpointID, dst HostID, left int) {
	for _, g := range e.mods.gates {
		g.Sent(id, dst, left)
	}
}

// gateAllows asks the SendGates, if any, whether the unit of s's message
// built in m may leave for dst.
func (e *Engine) gateAllows(s *epState, m []byte, dst HostID) bool {
	if len(e.mods.gates) == 0 {
		return true
	}
	size, left := unitSize(s, m)
	return e.gateOpen(s.id, dst, size, left)
}

// gateLeft tells the SendGates, if any, that the unit of s's message just
// sent to dst left.
func (e *Engine) gateLeft(s *epState, dst HostID) {
	if len(e.mods.gates) == 0 {
		return
	}
	left := 0
	if s.d.Class == endpoint.ClassBulk {
		left = int(s.d.Length - s.sent - s.chunk)
	}
	e.gateSent(s.id, dst, left)
}

// gated reports whether SendGates are loaded.
func (e *Engine) gated() bool { return e.mods != nil && len(e.mods.gates) > 0 }

// unitSize returns the length and the unsent bytes of the message in s's
// slot as SendGates see them (for a short or medium message, m is its
// engine encoding).
func unitSize(s *epState, m []byte) (size, left int) {
	if s.d.Class == endpoint.ClassBulk {
		return int(s.d.Length), int(s.d.Length - s.sent)
	}
	return len(m), len(m)
}

// ModuleStats returns what the engine did for its modules.
func (e *Engine) ModuleStats() ModuleStats {
	if e.mods == nil {
		return ModuleStats{}
	}
	s := e.mods.stats
	if e.mods.split != nil {
		s.FramesForMod = e.mods.split.kept
	}
	return s
}

// NextTimer returns when the engine's modules next need a Poll (their
// timers), for a daemon going to sleep; ok false: never.
func (e *Engine) NextTimer() (at time.Time, ok bool) {
	ms := e.mods
	if ms == nil || len(ms.tickers) == 0 && len(ms.timers) == 0 {
		return time.Time{}, false
	}
	at = ms.nextTick
	if len(ms.timers) > 0 && (len(ms.tickers) == 0 || ms.timers[0].at.Before(at)) {
		at = ms.timers[0].at
	}
	return at, true
}

// closeModules deactivates the modules.
func (e *Engine) closeModules() error {
	if e.mods == nil {
		return nil
	}
	var errs []error
	for _, m := range e.mods.list {
		if d, ok := m.(Deactivator); ok {
			if err := d.Deactivate(); err != nil {
				errs = append(errs, fmt.Errorf("nicfw: module %s: %w", m.Name(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// timer is a Backplane.After function and its time.
type timer struct {
	at time.Time
	f  func()
}

// timerHeap orders timers by time (container/heap).
type timerHeap []timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = timer{}
	*h = old[:len(old)-1]
	return t
}
