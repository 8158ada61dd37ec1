package nicfw

// Residency made real: which endpoints are in the engine's fast tables,
// AM-II's endpoint frames in NIC memory. The Residency (residency.go) keeps
// the books; this file moves the state.
//
// A resident endpoint is in the scheduler, so the engine polls its send
// queues, and its translation table is loaded: a copy of it in the engine's
// own memory (epState.table), which sends read. A non-resident endpoint is
// in neither: the engine does not look at its queues at all. Its memory
// carries the mark (endpoint.Memory.SetEvicted) that makes the application's
// Send ring its doorbell, a word in the endpoint's header; every Poll reads
// the doorbells of the non-resident endpoints (one load each) and faults
// those that rang into a frame, evicting the least recently used endpoint
// with nothing in flight (its messages in flight pin it, as before): one of
// its owner's own once the owner holds its share of the frames (VNet.Owner;
// doorbells). A delivery to a non-resident endpoint faults it in too.
// Loading copies the translation table into the fast tables and adds the
// endpoint to the scheduler; evicting drops both: a fault costs in
// proportion to the table (BenchmarkEndpointFault).
//
// An endpoint starts out of the fast tables (AddEndpoint): its first send
// rings its doorbell.

// touch makes s resident, faulting it in (and evicting another) if it is
// not; false when every frame is pinned (ErrMustWait). Deliveries touch:
// an owner at its share of the frames evicts its own endpoints first
// (Residency.Touch).
func (e *Engine) touch(s *epState) bool {
	if s.resident && e.res.hit(int(s.id)) {
		return true // resident, in the frame last looked up: nothing moves
	}
	t, err := e.res.Touch(int(s.id))
	return err == nil && e.moved(s, t)
}

// touchIf is touch with the victims restricted as Residency.TouchIf does,
// and an owner at its share of the frames limited to its own endpoints.
func (e *Engine) touchIf(s *epState, may func(ep int) bool) bool {
	t, err := e.res.TouchIf(int(s.id), may)
	return err == nil && e.moved(s, t)
}

// moved moves the state as the residency's books say after a touch of s.
func (e *Engine) moved(s *epState, t Touched) bool {
	if t.DidEvict {
		if v := e.ep(EndpointID(t.Evicted)); v != nil && v.resident {
			e.evict(v)
		}
	}
	if !s.resident {
		// A fault; or the frame of an earlier endpoint of the same id,
		// closed and replaced while its message was in flight.
		e.load(s, t.Frame)
	}
	return true
}

// load moves s into the fast tables, its table into frame's.
func (e *Engine) load(s *epState, frame int) {
	e.unlistEvicted(s)
	if e.frames == nil {
		e.frames = make([][]Name, e.res.Frames())
	}
	e.frames[frame] = append(e.frames[frame][:0], s.vnet...)
	s.table = e.frames[frame]
	if err := e.sched.AddOwned(int(s.id), e.res.Owner(int(s.id)), s.weight); err != nil {
		panic(err) // not resident, so not in the scheduler
	}
	s.resident, s.rung, s.sends = true, false, 0
	s.mem.SetEvicted(false)
}

// evict moves open endpoint s out of the fast tables. Its slot may hold a
// message taken and not yet sent (or waiting to be returned to it): it
// then asks to come back, as it does if it has descriptors waiting.
func (e *Engine) evict(s *epState) {
	e.unlistParked(s)
	e.sched.Remove(int(s.id))
	s.resident, s.table = false, nil
	s.evIdx = len(e.evicted)
	e.evicted = append(e.evicted, s)
	if s.pageOK = ringsPage(s); !s.pageOK {
		e.unbelled++
	}
	s.mem.SetEvicted(true)
	// A descriptor published before the mark was visible rang no bell:
	// look once more now that it is (endpoint.Memory.SetEvicted).
	s.rung = s.state != slotEmpty || len(s.aside) > 0 || s.mem.Pending()
	e.evictedRung = e.evictedRung || s.rung
}

// unlistEvicted takes s off the list of non-resident endpoints.
func (e *Engine) unlistEvicted(s *epState) {
	i := s.evIdx
	if i < 0 || i >= len(e.evicted) || e.evicted[i] != s {
		return
	}
	if !s.pageOK {
		e.unbelled--
	}
	last := len(e.evicted) - 1
	e.evicted[i] = e.evicted[last]
	e.evicted[i].evIdx = i
	e.evicted[last] = nil
	e.evicted = e.evicted[:last]
	s.evIdx = -1
}

// doorbells reads the doorbells of the non-resident endpoints and faults
// in those that rang, into free frames or the frames of endpoints that
// have had their turn: that have nothing to send, or have sent since they
// were loaded (mayYield). So an endpoint loaded to send keeps its frame
// until it sent once, however many others ring meanwhile (no thrashing
// while a channel is busy), and endpoints with work take turns. Deliveries
// fault endpoints in without that restriction.
//
// The frames are shared among the owners with work first (Residency):
// the endpoints of owners below their share of the frames are loaded
// first, each evicting an endpoint of an owner above its share or without
// work if there is one; then the others, an owner at its share evicting
// one of its own (or an idle owner's), none once one of its faults found
// nothing it may take (Stuck). So one owner's many endpoints ringing
// cannot keep another's few out, nor evict them.
func (e *Engine) doorbells() int {
	// The pages tell of the rings of the endpoints that ring them
	// (ringBells); the others' doorbells are read here.
	if !e.evictedRung && e.unbelled == 0 {
		return 0
	}
	rung := false
	for _, s := range e.evicted {
		if !s.pageOK {
			// An endpoint starts evicted, before its application maps
			// the page: from then on the page tells of its rings. The
			// mark is read first: a ring before the mapping rang the
			// doorbell, which is read after it.
			ok := ringsPage(s)
			if s.mem.Doorbell() {
				s.rung = true
			}
			if s.pageOK = ok; ok {
				e.unbelled--
			}
		}
		rung = rung || s.rung
	}
	e.evictedRung = rung
	if !rung {
		return 0
	}
	room := max(e.res.Frames()-1-e.pinned, 1)
	e.res.BeginPass(e.hasWork)
	for _, s := range e.evicted {
		if s.rung {
			e.res.Waiting(int(s.id)) // its owner has work
		}
	}
	loaded := 0
	for _, under := range [2]bool{true, false} {
		for i := 0; i < len(e.evicted) && loaded < room; {
			s := e.evicted[i]
			ep := int(s.id)
			if !s.rung || under && !e.res.UnderShare(ep) || e.res.Stuck(ep) {
				i++
				continue
			}
			if !e.touchIf(s, e.yield) {
				if under {
					return loaded // no frame to take: after sends and acknowledgements
				}
				i++ // none its owner may take (Stuck)
				continue
			}
			loaded++ // s left the list: e.evicted[i] is another now
		}
	}
	return loaded
}

// hasWork reports whether resident endpoint ep has something to send:
// its owner has work (Residency.BeginPass; pinned endpoints count
// without asking).
func (e *Engine) hasWork(ep int) bool {
	s := e.ep(EndpointID(ep))
	return s != nil && !s.closed && (s.state != slotEmpty || len(s.aside) > 0 || s.mem.Pending())
}

// mayYield reports whether resident endpoint ep may give its frame to an
// endpoint whose doorbell rang: it has nothing to send, or sent since it
// was loaded, or could not send now if it had its turn (its owner pins
// its share of the frames already: mayPin).
func (e *Engine) mayYield(ep int) bool {
	s := e.ep(EndpointID(ep))
	if s == nil || s.closed || s.sends > 0 {
		return true
	}
	return s.state == slotEmpty && len(s.aside) == 0 && !s.mem.Pending() || !s.held() && !e.mayPin(s)
}
