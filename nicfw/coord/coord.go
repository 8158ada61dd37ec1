package coord

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
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

// link is this host's state of one link's token.
type link struct {
	dst    nicfw.HostID
	have   bool
	using  bool
	hinted bool             // an OWN_LINK_HINT went out for this holding
	user   nicfw.EndpointID // the endpoint whose message holds the token
	size   int              // its size
	left   int              // its bytes not yet sent
	// With LinkRate: the wire bytes the port toward dst is estimated to
	// queue (at least what it holds of this host's message), as of qAt.
	queued float64
	qAt    time.Time
	// draining: the message has left its host and is still crossing the
	// link (Config.LinkRate); the token passes on when it has.
	draining bool
	holder   nicfw.HostID // the host suspected to hold it (any id, 0 included: the mapper numbers from 0)

	// This host's requests: the number of the last, whether it waits
	// (asked and not yet served) and since when (asked last, and heard a
	// sign of the token last: Config.LostAfter), and whether its unicast
	// request may still be redirected (REDIRECT).
	seq     uint32
	waiting bool
	since   time.Time
	heard   time.Time
	uni     bool

	rn map[nicfw.HostID]uint32 // the last request number heard of each host

	// The token's contents, while this host holds it: the last request
	// served of each host, and the hosts waiting, in order.
	ln    map[nicfw.HostID]uint32
	queue []nicfw.HostID

	// Generations (recover.go): gen is the token's generation (held, or
	// last heard of); fence the newest generation a recovery proposed;
	// the link's current generation is the newer of the two (cur). A
	// coordinator's own recovery: its proposal, since when, the hosts whose
	// answers it awaits, and the last request each answerer says the
	// token has served of it.
	gen        uint32
	fence      uint32
	recovering bool
	proposal   uint32
	recoverAt  time.Time
	awaiting   map[nicfw.HostID]bool
	served     map[nicfw.HostID]uint32
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

// link returns the state of link dst, made on first use: its token starts
// at the lowest host id other than dst, this host's included (0 is an id
// like any other).
func (m *Module) link(dst nicfw.HostID) *link {
	if l := m.links[dst]; l != nil {
		return l
	}
	l := &link{dst: dst, rn: make(map[nicfw.HostID]uint32)}
	first := m.self // dst is never this host: the engine gates remote messages only
	for _, h := range m.bp.Hosts() {
		if h != dst && h < first {
			first = h
		}
	}
	l.holder = first
	if first == m.self {
		l.have, l.ln = true, make(map[nicfw.HostID]uint32)
		m.trace(l, true)
	}
	m.links[dst] = l
	return l
}

// MaySend is the gate (nicfw.SendGate): a message above Threshold leaves
// only while this host holds dst's token for src.
func (m *Module) MaySend(src nicfw.EndpointID, dst nicfw.HostID, size, left int) bool {
	m.renumber()
	if size <= m.cfg.Threshold {
		if size == left {
			m.stats.Bypassed++
		}
		return true
	}
	if m.cfg.LinkRate == 0 && left < size && left <= m.cfg.EarlyRelease {
		return true // the tail of a message that released its token early
	}
	l := m.link(dst)
	switch {
	case l.have && l.using:
		if l.user == src && !l.draining {
			if m.ahead(l, left) {
				m.stats.Paced++
				return false
			}
			return true // the rest of its message
		}
	case l.have:
		// What the last holder may have left queued at the port: as much
		// as it released the token early by.
		l.using, l.user, l.size, l.left = true, src, size, size
		l.queued, l.qAt = float64(m.early(size)), m.bp.Now()
		if !m.ahead(l, left) {
			return true
		}
		m.stats.Paced++
		return false
	default:
		m.want(l)
	}
	m.stats.Held++
	return false
}

// Sent is the gate's news that a unit of src's message to dst left, left
// bytes of it after it: the token passes on when the message is done, or
// is down to EarlyRelease bytes.
func (m *Module) Sent(src nicfw.EndpointID, dst nicfw.HostID, left int) {
	l := m.links[dst]
	if l == nil || !l.using || l.draining || l.user != src {
		return
	}
	if m.cfg.LinkRate > 0 {
		// The token passes on once the port is down to the early bytes
		// (Early Token Release) of what it queued.
		m.drain(l)
		l.queued += float64(wireBytes(max(0, l.left-left)))
		l.left = left
		if left > 0 {
			return
		}
		early := m.early(l.size)
		if early > 0 {
			m.stats.Early++
		}
		if wait := time.Duration((l.queued - float64(early)) * 8 / float64(m.cfg.LinkRate) * float64(time.Second)); wait > 0 {
			l.draining = true
			m.bp.After(wait, func() {
				if m.links[l.dst] != l {
					return // forgotten meanwhile (renumber)
				}
				l.draining, l.using = false, false
				m.passOn(l)
			})
			return
		}
	} else if left > m.cfg.EarlyRelease {
		return
	} else if left > 0 {
		m.stats.Early++
	}
	l.using = false
	m.passOn(l)
}

// early returns the wire bytes of a message of size bytes that may still
// queue at the port when its token passes on (LinkRate): EarlyRelease, and
// when paced (PortBuffer) no more than the pacing's bound. The next holder
// takes the port to queue that much when it takes the token, and paces
// its own first chunk accordingly.
func (m *Module) early(size int) int {
	e := min(m.cfg.EarlyRelease, wireBytes(size))
	if m.cfg.PortBuffer > 0 {
		e = min(e, m.paceBound())
	}
	return e
}

// paceBound is the wire bytes a paced holder lets the port queue at most.
func (m *Module) paceBound() int { return m.cfg.PortBuffer * 3 / 4 }

// ahead reports whether the next unit of the message holding l's token,
// left bytes of it still to send, would make the port queue more than the
// pacing's bound (LinkRate and PortBuffer; without them never). A unit
// larger than the bound waits for an empty queue.
func (m *Module) ahead(l *link, left int) bool {
	if m.cfg.LinkRate == 0 || m.cfg.PortBuffer == 0 {
		return false
	}
	m.drain(l)
	next := wireBytes(min(left, m.bp.MaxUnit()))
	return l.queued > 0 && l.queued+float64(next) > float64(m.paceBound())
}

// drain brings l's estimate of the port's queue to now: the link has
// carried LinkRate's worth since, and a queue does not go below empty (a
// sender that could not send meanwhile earns no credit).
func (m *Module) drain(l *link) {
	now := m.bp.Now()
	l.queued = max(0, l.queued-now.Sub(l.qAt).Seconds()*float64(m.cfg.LinkRate)/8)
	l.qAt = now
}

// unitOverhead is what a unit of a message adds to its bytes before they
// are cut into cells, at most: the engine's message header and extension
// with every argument (24 + 24 + 8 x 8), the transport's header (20), the
// acknowledgements it carries for the destination (4 bytes each; room for
// 16, a transport's channels to one host by default and in the
// benchmarks) and the AAL5 trailer (8).
const unitOverhead = 24 + 24 + 8*endpoint.MaxShortArgs + 20 + 16*4 + cells.TrailerSize

// framedCells is how many cells a frame of a 1500-byte MTU carries; a
// larger MTU carries more, so the estimate errs on the safe side there.
var framedCells = cells.CellsPerFrame(1500)

// wireBytes returns at least how many bytes a unit of n bytes of a message
// takes on the wire: its bytes and headers (unitOverhead) in 53-byte cells
// of 48, the cells in frames of a 1500-byte MTU, each with its Ethernet
// and frame header. It must not be low: the pacing's estimate of the
// port's queue adds it up over a whole stream, and the port keeps what the
// estimate misses for as long as it stays busy, holder after holder (an
// estimate 0.3% low, as a flat 2% for headers was, let the real queue
// grow by about 75 bytes a 48 KB message until it overflowed a 16 KB port
// after some 70 messages: TestPacingEstimate).
func wireBytes(n int) int {
	if n <= 0 {
		return 0
	}
	c := (n + unitOverhead + cells.PayloadSize - 1) / cells.PayloadSize
	frames := (c + framedCells - 1) / framedCells
	return c*cells.CellSize + frames*(cells.EthernetHeaderSize+cells.FrameHeaderSize)
}

// want asks for l's token, unless a request of this host waits already.
func (m *Module) want(l *link) {
	if l.waiting {
		return
	}
	l.seq++
	l.rn[m.self] = l.seq
	now := m.bp.Now()
	l.waiting, l.since, l.heard = true, now, now
	l.uni = l.holder != m.self
	if l.uni {
		m.send(l.holder, m.request(typeUniReq, l))
	} else {
		m.broadcast(l, m.request(typeBcastReq, l), 0)
	}
	m.stats.Requests++
}

// Tick asks again for the tokens waited for longer than Retry, passes on
// tokens that sit idle with requests waiting, takes a token waited for
// with no sign of it for LostAfter for lost, and starts again a recovery
// that has not ended within LostAfter (an answer went missing).
func (m *Module) Tick(now time.Time) time.Time {
	m.renumber()
	for _, l := range m.links {
		switch {
		case l.waiting && now.Sub(l.since) >= m.cfg.Retry:
			l.since, l.uni = now, false
			m.broadcast(l, m.request(typeBcastReq, l), 0)
			m.stats.Requests++
		case l.have && !l.using:
			m.passOn(l)
		}
		switch {
		case l.recovering && now.Sub(l.recoverAt) >= m.cfg.LostAfter:
			l.recovering = false
			m.recover(l, l.cur())
		case l.waiting && !l.have && now.Sub(l.heard) >= m.cfg.LostAfter:
			m.stats.Lost++
			l.heard = now
			m.suspect(l)
		}
	}
	return now.Add(m.cfg.Retry / 2)
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
			m.broadcast(l, m.request(typeBcastReq, l), 0)
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

// take makes the token in GRANT_LINK c this host's.
// (A token made anew by a recovery comes this way too.) Hosts known dead
// leave its queue.
func (m *Module) take(l *link, c *ctl) {
	m.stats.GrantsRecv++
	l.have, l.hinted, l.holder, l.ln, l.queue, l.gen = true, false, m.self, c.ln, c.queue, c.gen
	l.heard = m.bp.Now()
	m.trace(l, true)
	l.queue = slices.DeleteFunc(l.queue, func(h nicfw.HostID) bool { return h == m.self || m.down[h] })
	for h := range l.rn {
		if !m.down[h] {
			m.enqueue(l, h)
		}
	}
	if !l.waiting {
		m.passOn(l) // a token made anew by a recovery: on to the first waiting
		return
	}
	// Served: the gate lets the waiting message go at the next Poll (or
	// Tick passes the token on if it has gone meanwhile).
	l.waiting, l.uni = false, false
	l.ln[m.self] = l.seq
}

// rnWaits reports whether host h has a request the token has not served.
func (l *link) rnWaits(h nicfw.HostID) bool { return l.rn[h] > l.ln[h] }

// enqueue adds h to the token's queue if it has a request the token has
// not served and is not queued already.
func (m *Module) enqueue(l *link, h nicfw.HostID) {
	if h != m.self && h != l.dst && l.rnWaits(h) && !slices.Contains(l.queue, h) {
		l.queue = append(l.queue, h)
	}
}

// passOn passes l's token, if held and not in use, to the first host
// waiting for it; with none, it tells every host, once per holding, that
// this one holds it.
func (m *Module) passOn(l *link) {
	if !l.have || l.using {
		return
	}
	for len(l.queue) > 0 && (!l.rnWaits(l.queue[0]) || m.down[l.queue[0]] || l.queue[0] == l.dst) {
		l.queue = l.queue[1:] // served meanwhile, or dead
	}
	if len(l.queue) == 0 {
		if !l.hinted && l.seq > 0 { // the initial holder that never used it has nothing to announce
			l.hinted = true
			m.broadcast(l, m.hint(l), 0)
			m.stats.Hints++
		}
		return
	}
	next := l.queue[0]
	l.ln[next] = l.rn[next]
	body, err := m.grant(l, l.queue[1:])
	if err != nil {
		return // too many hosts for one control message: the token stays
	}
	if err := m.bp.SendControl(next, body); err != nil {
		return // the control queue is full: Tick tries again
	}
	l.have, l.holder, l.queue, l.ln = false, next, nil, nil
	m.stats.GrantsSent++
	m.trace(l, false)
}

// broadcast sends body to every host but this one, l's destination and
// except.
func (m *Module) broadcast(l *link, body []byte, except nicfw.HostID) {
	for _, h := range m.bp.Hosts() {
		if h != l.dst && h != except && h != m.self {
			m.send(h, body)
		}
	}
}

// send sends a control message; one that finds the queue full is lost,
// and the sender's retry (Tick) makes up for a lost request.
func (m *Module) send(h nicfw.HostID, body []byte) {
	_ = m.bp.SendControl(h, body)
}

func (m *Module) trace(l *link, holds bool) {
	if m.cfg.Trace != nil {
		m.cfg.Trace(l.dst, holds)
	}
}

// Control messages (docs/wire.md), big-endian: type, link (the
// destination host whose port the token governs), a generation (4: the
// token's, as its sender knows it; QUERY, ANSWER: the one a recovery
// proposes), then by type:
//
//	UNI_REQ_LINK, BCAST_REQ_LINK: requester (2), request number (4)
//	OWN_LINK_HINT, QUERY, SUSPECT, REDIRECT: sender (2)
//	GRANT_LINK: n (1), n x (host (2), last request served (4)), q (1), q x host (2)
//	ANSWER: sender (2), holds (1: 0 or 1), the sender's current generation (4),
//	        its last request number (4), waits (1: 0 or 1)
const (
	typeGrant    = 1
	typeUniReq   = 2
	typeBcastReq = 3
	typeHint     = 4
	typeQuery    = 5 // recovery: the coordinator asks who holds the token
	typeAnswer   = 6
	typeSuspect  = 7 // a waiting host asks the coordinator to recover the token
	typeRedirect = 8 // a host that does not hold the token answers a UNI_REQ_LINK: ask every host
)

// ctl is a control message, parsed.
type ctl struct {
	typ   uint8
	link  nicfw.HostID
	gen   uint32       // the token's generation (QUERY, ANSWER: the one proposed)
	holds bool         // ANSWER: the answerer holds the token
	cur   uint32       // ANSWER: the answerer's current generation
	waits bool         // ANSWER: the answerer waits for the token
	from  nicfw.HostID // requester, holder or sender
	seq   uint32       // request number (ANSWER: the answerer's last)
	ln    map[nicfw.HostID]uint32
	queue []nicfw.HostID
}

var errBadControl = errors.New("coord: bad control message")

// parse parses a control message's body.
func parse(b []byte) (c ctl, err error) {
	if len(b) < 7 {
		return c, errBadControl
	}
	c.typ, c.link, c.gen = b[0], nicfw.HostID(binary.BigEndian.Uint16(b[1:])), binary.BigEndian.Uint32(b[3:])
	b = b[7:]
	switch c.typ {
	case typeUniReq, typeBcastReq:
		if len(b) != 6 {
			return c, errBadControl
		}
		c.from, c.seq = nicfw.HostID(binary.BigEndian.Uint16(b)), binary.BigEndian.Uint32(b[2:])
	case typeHint, typeQuery, typeSuspect, typeRedirect:
		if len(b) != 2 {
			return c, errBadControl
		}
		c.from = nicfw.HostID(binary.BigEndian.Uint16(b))
	case typeAnswer:
		if len(b) != 12 || b[2] > 1 || b[11] > 1 {
			return c, errBadControl
		}
		c.from, c.holds = nicfw.HostID(binary.BigEndian.Uint16(b)), b[2] == 1
		c.cur, c.seq, c.waits = binary.BigEndian.Uint32(b[3:]), binary.BigEndian.Uint32(b[7:]), b[11] == 1
	case typeGrant:
		if len(b) < 1 {
			return c, errBadControl
		}
		n := int(b[0])
		b = b[1:]
		if len(b) < 6*n+1 {
			return c, errBadControl
		}
		c.ln = make(map[nicfw.HostID]uint32, n)
		for i := range n {
			c.ln[nicfw.HostID(binary.BigEndian.Uint16(b[6*i:]))] = binary.BigEndian.Uint32(b[6*i+2:])
		}
		b = b[6*n:]
		q := int(b[0])
		b = b[1:]
		if len(b) != 2*q {
			return c, errBadControl
		}
		for i := range q {
			h := nicfw.HostID(binary.BigEndian.Uint16(b[2*i:]))
			if slices.Contains(c.queue, h) {
				return c, errBadControl
			}
			c.queue = append(c.queue, h)
		}
	default:
		return c, errBadControl
	}
	return c, nil
}

// request encodes this host's request for l's token, at its current
// generation.
func (m *Module) request(typ uint8, l *link) []byte {
	b := m.head(typ, l.dst, l.cur())
	b = binary.BigEndian.AppendUint16(b, uint16(m.self))
	return binary.BigEndian.AppendUint32(b, l.seq)
}

func (m *Module) hint(l *link) []byte {
	return binary.BigEndian.AppendUint16(m.head(typeHint, l.dst, l.gen), uint16(m.self))
}

// short encodes a message of type typ about l whose only field after the
// generation is this host (QUERY with gen, SUSPECT, REDIRECT), or this
// host and holds (the start of an ANSWER).
func (m *Module) short(typ uint8, l *link, gen uint32, holds ...bool) []byte {
	b := binary.BigEndian.AppendUint16(m.head(typ, l.dst, gen), uint16(m.self))
	if len(holds) > 0 {
		b = append(b, flag(holds[0]))
	}
	return b
}

// answer encodes this host's ANSWER to a QUERY for proposal gen.
func (m *Module) answer(l *link, gen uint32) []byte {
	b := m.short(typeAnswer, l, gen, l.have)
	b = binary.BigEndian.AppendUint32(b, l.cur())
	b = binary.BigEndian.AppendUint32(b, l.seq)
	return append(b, flag(l.waiting))
}

func flag(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// grant encodes l's token for its next holder, with queue.
func (m *Module) grant(l *link, queue []nicfw.HostID) ([]byte, error) {
	if len(l.ln) > 255 || len(queue) > 255 || 7+1+6*len(l.ln)+1+2*len(queue) > nicfw.MaxControl {
		return nil, fmt.Errorf("coord: a token for %d hosts does not fit a control message", len(l.ln))
	}
	b := append(m.head(typeGrant, l.dst, l.gen), uint8(len(l.ln)))
	hosts := make([]nicfw.HostID, 0, len(l.ln))
	for h := range l.ln {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		b = binary.BigEndian.AppendUint16(b, uint16(h))
		b = binary.BigEndian.AppendUint32(b, l.ln[h])
	}
	b = append(b, uint8(len(queue)))
	for _, h := range queue {
		b = binary.BigEndian.AppendUint16(b, uint16(h))
	}
	return b, nil
}

func (m *Module) head(typ uint8, dst nicfw.HostID, gen uint32) []byte {
	b := append(m.buf[:0], typ)
	b = binary.BigEndian.AppendUint16(b, uint16(dst))
	return binary.BigEndian.AppendUint32(b, gen)
}

// Interfaces the module implements.
var (
	_ nicfw.SendGate        = (*Module)(nil)
	_ nicfw.ControlReceiver = (*Module)(nil)
	_ nicfw.Ticker          = (*Module)(nil)
	_ nicfw.HostWatcher     = (*Module)(nil)
	_ nicfw.StatsReporter   = (*Module)(nil)
)
