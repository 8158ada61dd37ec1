package coord

import (
	"slices"

	"github.com/xam-project/xam/nicfw"
)

// Generations and recovering a token. Every control message carries a
// generation of its link's token. A link's token is born at generation 0
// (where link() puts it) and gets a new generation only from a recovery;
// a host's current generation of a link is the newest it knows of: its
// token's, the last it heard of in a grant or an OWN_LINK_HINT, or a
// recovery's proposal it was fenced at (QUERY). Generations compare as
// serial numbers (RFC 1982's arithmetic on 32 bits), so that they may
// wrap.
//
// A token is recovered when it is gone: its holder died (the engine gave
// up on it: nicfw.HostWatcher), or it was lost on its way (dropped, or
// refused by the host it went to: coord.go's rules), which a sender that
// waits for it sees as Config.LostAfter with no sign of it. Such a sender
// asks the link's coordinator (the lowest host id other than the link's,
// among those not known dead) to recover it (SUSPECT); the coordinator
// does it itself. A host asked recovers the token even if it takes
// another host for the coordinator (views of who is dead differ): two
// recoveries at once propose different generations, and the newer one
// decides.
//
// A recovery proposes a new generation of the token, above every
// generation seen and unique to its coordinator (a count in the high 16
// bits, the coordinator's id in the low 16). It sends QUERY to every host
// not known dead; a host that receives it fences the link at the proposed
// generation (it takes no token of an older one any more) and ANSWERs
// whether it holds the token, its current generation, and its own last
// request and whether it waits; a holder raises its token to the proposed
// generation. If a host holds it, the recovery ends there. If one
// answers with a newer generation than the proposal, the coordinator was
// behind: it learns that generation and a later recovery proposes above
// it. If every host answers that it does not hold the token (or dies
// meanwhile), and no newer proposal has come, the coordinator makes the
// token anew at the proposed generation and holds it: it has served of
// each answerer what the answerer says was served, and its queue is the
// requests the coordinator has registered.
//
// Why at most one token results: a token can only move in GRANT_LINK; one
// of a generation older than the receiver's fence is dropped. A token
// that was travelling when the QUERYs went out therefore either reaches a
// host before its QUERY does (that host answers that it holds it, and the
// recovery makes no token) or after (it is dropped): it is never taken
// behind a fence. A token of the proposed generation exists only once the
// recovery is over: raised by the holder that answered, or made by the
// coordinator after every answer said none holds it.

// newer reports whether generation a is newer than b (serial arithmetic).
func newer(a, b uint32) bool { return int32(a-b) > 0 }

// proposer returns the host whose recovery proposed generation g.
func proposer(g uint32) nicfw.HostID { return nicfw.HostID(g & 0xffff) }

// cur returns l's current generation: the newer of its token's and its
// fence.
func (l *link) cur() uint32 {
	if newer(l.fence, l.gen) {
		return l.fence
	}
	return l.gen
}

// current reports whether a request or a REDIRECT of generation g is of
// l's: its current generation, or the next one (nextGen).
func (m *Module) current(l *link, g uint32, hosts []nicfw.HostID) bool {
	return g == l.cur() || m.nextGen(l, g, hosts)
}

// nextGen reports whether g is a generation the next recovery of l may
// have proposed, that this host has not heard of yet: one count above its
// current generation, proposed by another member of l. A sender may know
// it first: a holder raises its token to a recovery's QUERY, and its next
// GRANT_LINK, or a request of a host that received the QUERY, may reach
// this host before this host's own QUERY does.
func (m *Module) nextGen(l *link, g uint32, hosts []nicfw.HostID) bool {
	p := proposer(g)
	return g>>16 == (l.cur()>>16+1)&0xffff && p != l.dst && p != m.self && slices.Contains(hosts, p)
}

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
			m.suspect(l)
		}
	}
}

// suspect has l's coordinator recover l's token: this host, or the
// coordinator told by SUSPECT.
func (m *Module) suspect(l *link) {
	if c := m.coordinator(l); c == m.self {
		m.recover(l, l.cur())
	} else {
		m.send(c, m.short(typeSuspect, l, l.cur()))
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
// this host holds the token. Its proposal is above l's current generation
// and seen, the generation of the SUSPECT that asked for it.
func (m *Module) recover(l *link, seen uint32) {
	if l.recovering || l.have {
		return
	}
	base := l.cur()
	if newer(seen, base) {
		base = seen
	}
	l.proposal = (base>>16+1)<<16 | uint32(m.self)
	l.fence = l.proposal
	l.recovering, l.recoverAt = true, m.bp.Now()
	l.awaiting = make(map[nicfw.HostID]bool)
	l.served = make(map[nicfw.HostID]uint32)
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
// that it does not hold it, or died, if no newer proposal has come. The
// token has served of each answerer the requests it says were served, and
// of this host its last.
func (m *Module) tryRegenerate(l *link) {
	switch {
	case !l.recovering || len(l.awaiting) > 0:
		return
	case l.fence != l.proposal || l.have:
		l.recovering = false // a newer recovery decides, or the token came
		return
	}
	l.recovering = false
	m.stats.Regenerated++
	ln := l.served
	ln[m.self] = l.seq
	l.gen = l.proposal
	m.broadcast(l, m.hint(l)) // every host learns the holder and the generation
	m.take(l, &ctl{typ: typeGrant, link: l.dst, gen: l.proposal, ln: ln})
}

// recoveryControl handles QUERY, ANSWER and SUSPECT c about l from src
// (speaks has checked that each speaks for src).
func (m *Module) recoveryControl(l *link, src nicfw.HostID, c *ctl) {
	switch c.typ {
	case typeSuspect:
		// Asked, this host recovers even if it takes another for the
		// coordinator: the hosts' views of who is dead may differ, and
		// recoveries of several hosts at once make one token still.
		m.recover(l, c.gen)
	case typeQuery:
		if newer(c.gen, l.fence) {
			l.fence = c.gen
		}
		if l.have && newer(c.gen, l.gen) {
			l.gen = c.gen // the holder's token passes every fence of this recovery
		}
		if l.waiting {
			l.heard = m.bp.Now()
		}
		m.send(src, m.answer(l, c.gen))
	case typeAnswer:
		if !l.recovering || c.gen != l.proposal || !l.awaiting[src] {
			return // late, or not asked for
		}
		delete(l.awaiting, src)
		// The answerer's word on its own requests replaces what this host
		// registered of them.
		l.rn[src] = c.seq
		l.served[src] = c.seq
		if c.waits && c.seq > 0 {
			l.served[src] = c.seq - 1
		}
		switch {
		case newer(c.cur, l.proposal):
			l.fence = c.cur // this host was behind: a later recovery proposes above
			l.recovering = false
		case c.holds:
			l.recovering = false
		default:
			m.tryRegenerate(l)
		}
	}
}
