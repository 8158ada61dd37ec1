package coord

import (
	"math"
	"slices"
	"time"

	"github.com/xam-project/xam/nicfw"
)

// ModuleID is the coordination module's number among an engine's modules.
const ModuleID = 2

// Defaults.
const (
	// DefaultThreshold is Config.Threshold's default: messages of up to
	// 4 KB bypass coordination, a switch port's buffer holding several.
	DefaultThreshold = 4096
	// DefaultRetry is Config.Retry's default.
	DefaultRetry = 50 * time.Millisecond
	// DefaultLostAfter is Config.LostAfter's default, in Retry periods.
	DefaultLostAfter = 20
)

// Config configures the module. Zero fields take the defaults.
type Config struct {
	// Threshold: a message of at most this many bytes is not coordinated
	// (default DefaultThreshold; negative: every message is).
	Threshold int
	// EarlyRelease: the token passes on once this many bytes of the
	// holder's message are left to send (0: once all have left). Its
	// engine sends a bulk message in chunks, so the release happens as the
	// chunk that brings the rest to EarlyRelease or below leaves; with
	// LinkRate, the time of EarlyRelease bytes on the link before the
	// message has crossed it.
	EarlyRelease int
	// Retry: a sender that has waited this long for a token asks again,
	// by broadcast (default DefaultRetry).
	Retry time.Duration
	// LostAfter: a sender that has waited this long for a token with no
	// sign of it (no grant, no OWN_LINK_HINT from its holder, which
	// answers every request it cannot serve at once with one, no
	// recovery's QUERY) takes the token for lost and has the link's
	// coordinator recover it; a recovery that has not ended after as long
	// starts again (default DefaultLostAfter times Retry).
	LostAfter time.Duration
	// LinkRate, in bits per second, is the rate of the links the tokens
	// govern (the switch's ports), if it is below the senders' own: a
	// holder then keeps the token until its message has had the time to
	// cross the link at that rate since it began to leave, not merely
	// until it has left its host (which a fast host does long before the
	// switch has passed it on). 0: the hosts' links are as fast as the
	// switch's.
	LinkRate uint64
	// PortBuffer, in bytes, is what a switch port queues, if known. With
	// LinkRate, a holder then paces its message: it keeps what it
	// estimates the port to queue (what it sent, less what the link has
	// carried since its message began, plus what the last holder may have
	// left there) at most three quarters of the buffer, so that a message
	// larger than the buffer does not overflow it from one sender; and
	// Early Token Release passes the token on only once the port queues
	// no more than leaves room for the next holder's first chunk.
	PortBuffer int
	// Trace, if set, is told every time this host takes or gives up a
	// link's token, in the engine thread (for tests that check that at
	// most one host holds a token at any moment).
	Trace func(link nicfw.HostID, holds bool)
}

// Stats counts what the module did.
type Stats struct {
	Bypassed    uint64 // messages at most Threshold bytes, not coordinated
	Held        uint64 // send decisions held back for want of a token
	Paced       uint64 // send decisions of a holder held back to the link's rate (PortBuffer)
	Requests    uint64 // requests sent: unicast, broadcast (each once), retries
	Forwarded   uint64 // unicast requests answered with REDIRECT (the requester asks every host), the token being gone
	GrantsSent  uint64 // tokens passed on
	GrantsRecv  uint64 // tokens received
	Early       uint64 // tokens released before their message's last byte left (EarlyRelease)
	Hints       uint64 // OWN_LINK_HINT broadcasts sent
	Bad         uint64 // control messages that did not parse, named this host's link or one not in the host table, or granted a token this host holds
	Refused     uint64 // control messages refused for who sent them or whom they name, and grants this host did not ask for (coord.go's rules)
	Stale       uint64 // control messages refused for their generation: not the link's current one (stale, replayed or forged)
	Lost        uint64 // tokens this host took for lost (Config.LostAfter without a sign of them) and had recovered
	Recoveries  uint64 // recoveries of a token this host coordinated (a host died, or the token was lost)
	Regenerated uint64 // tokens this host made anew, no host holding one
	Dropped     uint64 // tokens of a generation a recovery fenced off, dropped (the recovery makes the token anew)
	Waiting     int    // links whose token a sender of this host waits for, now
	Holding     int    // links whose token this host holds, now
}

// Module is the coordination module.
type Module struct {
	cfg   Config
	bp    *nicfw.Backplane
	self  nicfw.HostID
	links map[nicfw.HostID]*link
	down  map[nicfw.HostID]bool // hosts the engine gave up on, until heard from again
	buf   []byte
	stats Stats
}

// New returns the coordination module with cfg.
func New(cfg Config) *Module {
	if cfg.Threshold == 0 {
		cfg.Threshold = DefaultThreshold
	}
	if cfg.Retry <= 0 {
		cfg.Retry = DefaultRetry
	}
	if cfg.LostAfter <= 0 {
		cfg.LostAfter = DefaultLostAfter * cfg.Retry
	}
	return &Module{cfg: cfg, links: make(map[nicfw.HostID]*link), down: make(map[nicfw.HostID]bool)}
}

// Name returns "coord".
func (m *Module) Name() string { return "coord" }

// ID returns ModuleID.
func (m *Module) ID() uint8 { return ModuleID }

// Init takes the module's handle on the engine.
func (m *Module) Init(bp *nicfw.Backplane) error {
	m.bp, m.self = bp, bp.Self()
	return nil
}

// renumber follows this host's id in the engine's host table: a new table
// (the mapper's, `xam fw --map`, whose first one comes after Init) may give
// the host another id, and what the module knew of the links under the
// old one no longer holds, so it is forgotten. The table is to be in place
// before coordinated traffic begins (the package documentation), so what
// is forgotten is normally nothing.
func (m *Module) renumber() {
	if s := m.bp.Self(); s != m.self {
		m.self = s
		clear(m.links)
		clear(m.down)
	}
}

// Stats returns what the module did.
func (m *Module) Stats() Stats {
	s := m.stats
	for _, l := range m.links {
		if l.waiting {
			s.Waiting++
		}
		if l.have {
			s.Holding++
		}
	}
	return s
}

// Config returns the module's configuration, defaults filled in.
func (m *Module) Config() Config { return m.cfg }

// ReportStats returns the module's settings and counters as named values
// (nicfw.StatsReporter), for the daemon's stats: the settings first, so
// that a reader sees whether the module paces, then Stats.
func (m *Module) ReportStats() []nicfw.ModuleCounter {
	s := m.Stats()
	return []nicfw.ModuleCounter{
		{Name: "threshold_bytes", Value: int64(m.cfg.Threshold)},
		{Name: "early_release_bytes", Value: int64(m.cfg.EarlyRelease)},
		{Name: "link_rate_bps", Value: int64(min(m.cfg.LinkRate, math.MaxInt64))},
		{Name: "port_buffer_bytes", Value: int64(m.cfg.PortBuffer)},
		{Name: "bypassed", Value: int64(s.Bypassed)},
		{Name: "held", Value: int64(s.Held)},
		{Name: "paced", Value: int64(s.Paced)},
		{Name: "requests", Value: int64(s.Requests)},
		{Name: "forwarded", Value: int64(s.Forwarded)},
		{Name: "grants_sent", Value: int64(s.GrantsSent)},
		{Name: "grants_received", Value: int64(s.GrantsRecv)},
		{Name: "early_releases", Value: int64(s.Early)},
		{Name: "hints", Value: int64(s.Hints)},
		{Name: "bad", Value: int64(s.Bad)},
		{Name: "refused", Value: int64(s.Refused)},
		{Name: "stale", Value: int64(s.Stale)},
		{Name: "lost", Value: int64(s.Lost)},
		{Name: "recoveries", Value: int64(s.Recoveries)},
		{Name: "regenerated", Value: int64(s.Regenerated)},
		{Name: "dropped", Value: int64(s.Dropped)},
		{Name: "waiting", Value: int64(s.Waiting)},
		{Name: "holding", Value: int64(s.Holding)},
	}
}

// Holds reports whether this host holds the token of link dst.
func (m *Module) Holds(dst nicfw.HostID) bool {
	l := m.links[dst]
	return l != nil && l.have
}

// Control handles a control message from host src (nicfw.ControlReceiver).
// Every message is checked before it has any effect: it must name a link
// of the host table other than this host's own, come from a member of
// that link (speaks) and carry the link's current generation (or, for
// the token and requests, the one the next recovery proposes); a
// GRANT_LINK must also answer this host's waiting request.
func (m *Module) Control(src nicfw.HostID, body []byte) {
	m.renumber()
	hosts := m.bp.Hosts()
	c, err := parse(body)
	if err != nil || c.link == m.self || !slices.Contains(hosts, c.link) {
		m.stats.Bad++
		return
	}
	l := m.link(c.link)
	if !m.speaks(l, src, &c, hosts) {
		m.stats.Refused++
		return
	}
	delete(m.down, src)
	switch c.typ {
	case typeQuery, typeAnswer, typeSuspect:
		m.recoveryControl(l, src, &c)
	case typeUniReq, typeBcastReq:
		if !m.current(l, c.gen, hosts) {
			m.stats.Stale++
			return
		}
		if c.seq > l.rn[src] {
			l.rn[src] = c.seq
		}
		switch {
		case l.have:
			m.enqueue(l, src)
			if !l.using {
				m.passOn(l)
			}
			if l.have && slices.Contains(l.queue, src) {
				// Still in use: the requester hears that its token lives.
				m.send(src, m.hint(l))
			}
		case c.typ == typeUniReq:
			// No longer the holder: the requester asks every host.
			m.send(src, m.short(typeRedirect, l, l.cur()))
			m.stats.Forwarded++
		}
	case typeRedirect:
		if !m.current(l, c.gen, hosts) {
			m.stats.Stale++
			return
		}
		if l.waiting && l.uni {
			l.uni, l.holder = false, m.self
			m.broadcast(l, m.request(typeBcastReq, l))
			m.stats.Requests++
		}
	case typeHint:
		if c.gen != l.cur() {
			m.stats.Stale++
			return
		}
		if !l.have {
			l.holder, l.gen = src, c.gen
			if l.waiting {
				l.heard = m.bp.Now()
			}
		}
	case typeGrant:
		m.granted(l, &c, hosts)
	}
}

// speaks reports whether src may send c about l: src is a member of l (a
// host of the table other than l's destination and this host); a message
// speaks for its sender alone (the requester, holder or sender it names is
// src, and a recovery's proposal carries its proposer's id, the QUERY's
// sender); a token's queue names members of l other than this host, and
// its served requests none of l's destination. A request for l's
// destination, or for a host the table does not know, is refused here:
// the token would go where no module takes it, and be lost.
func (m *Module) speaks(l *link, src nicfw.HostID, c *ctl, hosts []nicfw.HostID) bool {
	if src == l.dst || src == m.self || !slices.Contains(hosts, src) {
		return false
	}
	switch c.typ {
	case typeGrant:
		if _, ok := c.ln[l.dst]; ok {
			return false
		}
		for _, h := range c.queue {
			if h == l.dst || h == m.self || !slices.Contains(hosts, h) {
				return false
			}
		}
		return true
	case typeQuery:
		if proposer(c.gen) != src {
			return false
		}
	}
	return c.from == src
}

// granted handles GRANT_LINK c: the token is taken only if this host does
// not hold it already, it is of l's current generation (or of the one the
// next recovery proposes: a holder raised its token to a QUERY this host
// has not yet received), and it answers this host's waiting request (it
// says it served the request this host is waiting on). Every other token
// is refused and dropped: a second one, a stale, replayed or forged one,
// or one the host did not ask for. A genuine token dropped so is lost,
// and recovered (LostAfter); a second token never comes to be.
func (m *Module) granted(l *link, c *ctl, hosts []nicfw.HostID) {
	if l.have {
		m.stats.Bad++ // a second token cannot be: the message is not believed
		return
	}
	next := false
	switch {
	case c.gen == l.cur():
	case m.nextGen(l, c.gen, hosts):
		next = true
	case newer(l.fence, c.gen) && !newer(l.gen, c.gen):
		m.stats.Dropped++ // a token a recovery fenced off: the recovery makes it anew
		return
	default:
		m.stats.Stale++
		return
	}
	if !l.waiting || c.ln[m.self] != l.seq {
		m.stats.Refused++
		return
	}
	if next {
		l.fence = c.gen
	}
	m.take(l, c)
}

// Interfaces the module implements.
var (
	_ nicfw.SendGate        = (*Module)(nil)
	_ nicfw.ControlReceiver = (*Module)(nil)
	_ nicfw.Ticker          = (*Module)(nil)
	_ nicfw.HostWatcher     = (*Module)(nil)
	_ nicfw.StatsReporter   = (*Module)(nil)
)
