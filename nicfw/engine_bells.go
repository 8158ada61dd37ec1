package nicfw

import (
	"github.com/xam-project/xam/nicfw/endpoint"
)

// Doorbells: how the engine's work per Poll stays independent of the
// endpoints that have nothing to send. Each application's endpoints share
// a page of doorbells with the engine (endpoint.Bells; VNet.Group names the
// application: a daemon's connection, 0 inline), one bit each. An
// endpoint that the engine does not poll rings its bit when the
// application sends: a non-resident one (engine_residency.go), and a
// resident one the scheduler parked after finding it idle parkAfter times
// in a row (Scheduler.SetParkAfter). A Poll reads each page's summary word
// (ringBells): one load per application when nothing rang, whatever the
// number of endpoints, idle or evicted. A rung parked endpoint is
// unparked (back in the scheduler's rotation); a rung evicted one waits
// to be loaded (doorbells).
//
// An endpoint that rings its header's doorbell only (its page is full:
// BellsMax endpoints in one application; or its application did not map
// the page, endpoint.View.MapBells) has that doorbell read every Poll while
// it is evicted, as before pages, and is never parked: the engine looks at
// whether the application rings the page each time it evicts or parks the
// endpoint (endpoint.Memory.RingsBells; Engine.unbelled counts the others
// evicted).

// parkAfter is how many times in a row the scheduler finds an idle
// endpoint with nothing pending before it parks it.
const parkAfter = 64

// bellPage is an application's page of doorbells and the endpoints that
// ring its bits.
type bellPage struct {
	group uint64
	b     *endpoint.Bells
	eps   map[int]*epState // by bit
}

// bell gives s a bit in its application's page (making the page for the
// application's first endpoint), written into s's header; s keeps none
// when the page is full or cannot be made.
func (e *Engine) bell(s *epState, group uint64) {
	pg := e.bellPages[group]
	if pg == nil {
		b, err := endpoint.NewBells()
		if err != nil {
			return
		}
		pg = &bellPage{group: group, b: b, eps: map[int]*epState{}}
		if e.bellPages == nil {
			e.bellPages = map[uint64]*bellPage{}
		}
		e.bellPages[group] = pg
		e.bellList = append(e.bellList, pg)
	}
	bit, ok := pg.b.Alloc()
	if !ok {
		return
	}
	pg.eps[bit] = s
	s.bellPage, s.bellBit = pg, bit
	s.mem.SetBell(pg.b, bit)
}

// unbell takes s's bit back, and closes its page when it was the last.
func (e *Engine) unbell(s *epState) {
	pg := s.bellPage
	if pg == nil {
		return
	}
	delete(pg.eps, s.bellBit)
	pg.b.Free(s.bellBit)
	s.mem.SetBell(nil, 0)
	s.bellPage, s.bellBit = nil, 0
	if len(pg.eps) > 0 {
		return
	}
	delete(e.bellPages, pg.group)
	for i, p := range e.bellList {
		if p == pg {
			e.bellList = append(e.bellList[:i], e.bellList[i+1:]...)
			break
		}
	}
	pg.b.Close()
}

// BellsFD returns the memfd of the page of doorbells that endpoint id
// rings, for the application to map (endpoint.View.MapBells); -1 if it
// has none. The page stays the engine's: the application maps it while
// the endpoint is open.
func (e *Engine) BellsFD(id EndpointID) int {
	if s := e.ep(id); s != nil && !s.closed && s.bellPage != nil {
		return s.bellPage.b.FD()
	}
	return -1
}

// ringBells takes the bits rung on every page: a parked endpoint is
// unparked, an evicted one marked to be loaded. It returns the endpoints
// unparked.
func (e *Engine) ringBells() int {
	n := 0
	for _, pg := range e.bellList {
		if !pg.b.Rung() {
			continue
		}
		pg.b.Take(func(bit int) {
			s := pg.eps[bit]
			e.stats.Rings++
			switch {
			case s == nil || s.closed:
			case s.parked:
				e.unpark(s)
				n++
			case !s.resident:
				s.rung, e.evictedRung = true, true
			}
		})
	}
	return n
}

// ringsPage reports whether s's sends ring its page of doorbells.
func ringsPage(s *epState) bool { return s.bellPage != nil && s.mem.RingsBells() }

// parkIdle parks the endpoints the scheduler found idle long enough: the
// mark that makes their sends ring (endpoint.Memory.SetEvicted), then a
// last look at their queues, as evict does. Endpoints that do not ring
// their page stay in the scheduler's rotation.
func (e *Engine) parkIdle() {
	e.sched.TakeParked(func(ep int) {
		s := e.ep(EndpointID(ep))
		if s == nil || s.closed || !s.resident || !ringsPage(s) {
			e.sched.Unpark(ep)
			return
		}
		e.stats.Parks++
		s.parked = true
		s.parkIdx = len(e.parked)
		e.parked = append(e.parked, s)
		s.mem.SetEvicted(true)
		if s.state != slotEmpty || len(s.aside) > 0 || s.mem.Pending() {
			e.unpark(s)
		}
	})
}

// unpark puts parked endpoint s back into the scheduler's rotation.
func (e *Engine) unpark(s *epState) {
	e.unlistParked(s)
	s.mem.SetEvicted(false)
	s.mem.Doorbell() // rung while parked: nothing to look at later
	e.sched.Unpark(int(s.id))
}

// unlistParked takes s off the list of parked endpoints, if it is on it.
func (e *Engine) unlistParked(s *epState) {
	if !s.parked {
		return
	}
	s.parked = false
	i, last := s.parkIdx, len(e.parked)-1
	e.parked[i] = e.parked[last]
	e.parked[i].parkIdx = i
	e.parked[last] = nil
	e.parked = e.parked[:last]
}
