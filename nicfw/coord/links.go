package coord

import (
	"slices"
	"time"

	"github.com/xam-project/xam/nicfw"
)

// Moving the tokens: this host's state of each link's token, and the
// requests, grants and hints that carry a token from host to host in turn
// (the package documentation's Model). What a control message must pass
// before it is believed is in coord.go (Control); bringing back a token
// that is gone, in recover.go.

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
		m.broadcast(l, m.request(typeBcastReq, l))
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
			m.broadcast(l, m.request(typeBcastReq, l))
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
			m.broadcast(l, m.hint(l))
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

// broadcast sends body to every host but this one and l's destination,
// host 0 included.
func (m *Module) broadcast(l *link, body []byte) {
	for _, h := range m.bp.Hosts() {
		if h != l.dst && h != m.self {
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
