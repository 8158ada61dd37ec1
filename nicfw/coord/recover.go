package coord

import (
	"slices"

	"github.com/xam-project/xam/nicfw"
)

// Recovering the token of a dead holder. The engine tells the module when
// it gives up on a host (nicfw.HostWatcher): one that stayed silent for
// the transport's GiveUpAfter is taken to be dead, and a token it held, or
// that was on its way to it, is gone with it. A host that waits for a
// token and learns of a death asks the link's coordinator (the lowest host
// id other than the link's, among those not known dead) to recover it
// (SUSPECT); the coordinator does it itself.
//
// A recovery proposes a new generation of the token, above every
// generation seen and unique to its coordinator (a count in the high 16
// bits, the coordinator's id in the low 16). It sends QUERY to every host
// not known dead; a host that receives it fences the link at the proposed
// generation (it takes no token of a lower one any more) and ANSWERs
// whether it holds the token; a holder raises its token to the proposed
// generation. If a host holds it, the recovery ends there. If every host
// answers that it does not (or dies meanwhile), and no higher proposal has
// come, the coordinator makes the token anew at the proposed generation
// and holds it, with the requests it has registered as its queue.
//
// Why at most one token results: a token can only move in GRANT_LINK; one
// of a generation below a host's fence is not taken but sent on to the
// recovery's coordinator (rescue), which takes it if its recovery is still
// open (ending it) and drops it if it made the token anew. A token that
// was travelling when the QUERYs went out therefore either reaches a host
// before its QUERY does (that host answers that it holds it) or after (it
// goes to the coordinator): it is never taken behind a fence.

// HostDown learns that the engine gave up on host h (nicfw.HostWatcher).
func (m *Module) HostDown(h nicfw.HostID) {
	m.renumber()
	if m.down[h] {
		return // known already: each message given up on tells again
	}
	m.down[h] = true
	for _, l := range m.links {
		if l.recovering && l.awaiting[h] {
			delete(l.awaiting, h)
			m.tryRegenerate(l)
		}
		if l.waiting && !l.have {
			if c := m.coordinator(l); c == m.self {
				m.recover(l)
			} else {
				m.send(c, m.short(typeSuspect, l, l.gen))
			}
		}
	}
}

// coordinator returns the host that recovers l's token: the lowest id
// other than l's destination among the hosts not known dead.
func (m *Module) coordinator(l *link) nicfw.HostID {
	c := m.self
	for _, h := range m.bp.Hosts() {
		if h != l.dst && !m.down[h] && h < c {
			c = h
		}
	}
	return c
}

// recover starts a recovery of l's token, unless one is under way here or
// this host holds the token.
func (m *Module) recover(l *link) {
	if l.recovering || l.have {
		return
	}
	l.proposal = (max(l.fence, l.gen)>>16+1)<<16 | uint32(m.self)
	l.fence, l.fenceBy = l.proposal, m.self
	l.recovering = true
	l.awaiting = make(map[nicfw.HostID]bool)
	m.stats.Recoveries++
	body := m.short(typeQuery, l, l.proposal)
	for _, h := range m.bp.Hosts() {
		if h != l.dst && !m.down[h] {
			l.awaiting[h] = true
			m.send(h, body)
		}
	}
	m.tryRegenerate(l)
}

// tryRegenerate makes l's token anew once every host queried has answered
// that it does not hold it, or died, if no higher proposal has come.
func (m *Module) tryRegenerate(l *link) {
	switch {
	case !l.recovering || len(l.awaiting) > 0:
		return
	case l.fence != l.proposal || l.have:
		l.recovering = false // a higher recovery decides, or the token came
		return
	}
	l.recovering = false
	m.stats.Regenerated++
	m.take(l, &ctl{typ: typeGrant, link: l.dst, gen: l.proposal, ln: make(map[nicfw.HostID]uint32)})
	m.broadcast(l, m.hint(l), 0) // every host learns the holder and the generation
}

// recoveryControl handles QUERY, ANSWER and SUSPECT about l.
func (m *Module) recoveryControl(l *link, c *ctl) {
	switch c.typ {
	case typeSuspect:
		if m.coordinator(l) == m.self {
			m.recover(l)
		}
	case typeQuery:
		if c.gen > l.fence {
			l.fence, l.fenceBy = c.gen, c.from
		}
		if l.have && c.gen > l.gen {
			l.gen = c.gen // the holder's token passes every fence of this recovery
		}
		m.send(c.from, m.short(typeAnswer, l, c.gen, l.have))
	case typeAnswer:
		if !l.recovering || c.gen != l.proposal {
			return
		}
		delete(l.awaiting, c.from)
		if c.holds {
			l.recovering = false
			return
		}
		m.tryRegenerate(l)
	}
}

// rescue handles GRANT_LINK c, whose token is of a generation below l's
// fence: it goes to the recovery's coordinator; the coordinator takes it
// while its recovery is open, and drops it once it made the token anew.
func (m *Module) rescue(l *link, c *ctl, body []byte) {
	m.stats.Rescued++
	if l.fenceBy != m.self {
		m.send(l.fenceBy, body)
		return
	}
	if l.recovering {
		l.recovering = false
		c.queue = slices.DeleteFunc(c.queue, func(h nicfw.HostID) bool { return m.down[h] })
		m.take(l, c)
		return
	}
	m.stats.Dropped++ // the token was made anew
}
