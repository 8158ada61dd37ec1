package nicfw

import (
	"errors"
	"fmt"
)

// Endpoint residency: which endpoints are loaded in the engine's fast
// tables, AM-II's endpoint frames in NIC memory. A Residency belongs to the
// engine thread; it holds no lock and starts no goroutine. It is the
// bookkeeping only: the caller moves an endpoint's state in or out when
// Touch reports a load or an eviction.
//
// At most R endpoints (frames) are resident. Touching a resident endpoint
// marks it used. Touching one that is not resident is an endpoint fault: it
// is loaded into a free frame or, when there is none, into the frame of the
// least recently used endpoint that is not pinned, which is evicted. An
// endpoint is pinned while it has outstanding messages (Hold when one is
// sent, Release when it is acknowledged or returned): unloading must wait
// for its acknowledgements, so a fault that finds every frame pinned loads
// nothing and reports ErrMustWait; the caller retries after
// acknowledgements arrive (the transport NACKs a message for a
// non-resident endpoint meanwhile). Touch, Hold and Release are O(R).

// Errors of residency. Test for them with errors.Is.
var (
	// ErrMustWait: every frame holds a pinned endpoint, so a fault cannot
	// evict any; retry after an acknowledgement.
	ErrMustWait = errors.New("nicfw: every resident endpoint is pinned")
	// ErrNotResident: the endpoint is not resident.
	ErrNotResident = errors.New("nicfw: endpoint not resident")
	// ErrPinned: the endpoint has outstanding messages.
	ErrPinned = errors.New("nicfw: endpoint has outstanding messages")
	// ErrNotHeld: Release without a matching Hold.
	ErrNotHeld = errors.New("nicfw: endpoint has no outstanding message")
)

// ResidencyStats counts what a Residency did.
type ResidencyStats struct {
	Touches   uint64 // Touch calls
	Faults    uint64 // touches of non-resident endpoints that loaded them
	Evictions uint64 // endpoints evicted to make room
	Waits     uint64 // faults refused with ErrMustWait
}

// Touched is what Touch did: the endpoint's frame, whether it faulted
// (and was loaded), and the endpoint evicted to make room, if any.
type Touched struct {
	Frame    int
	Fault    bool
	Evicted  int
	DidEvict bool
}

// Residency tracks which endpoints occupy the engine's R frames.
type Residency struct {
	frames []frame
	where  map[int]int // resident endpoint -> frame
	hint   int         // the frame last looked up
	tick   uint64
	stats  ResidencyStats
}

type frame struct {
	ep          int
	used        bool
	last        uint64 // tick of the last touch
	outstanding int
}

// NewResidency returns a residency with r frames, all free.
func NewResidency(r int) (*Residency, error) {
	if r < 1 {
		return nil, fmt.Errorf("%w: %d resident endpoints", ErrConfig, r)
	}
	return &Residency{frames: make([]frame, r), where: make(map[int]int, r)}, nil
}

// Frames returns R.
func (r *Residency) Frames() int { return len(r.frames) }

// Stats returns the counters.
func (r *Residency) Stats() ResidencyStats { return r.stats }

// Resident reports whether ep is resident, and in which frame.
func (r *Residency) Resident(ep int) (frame int, ok bool) { return r.lookup(ep) }

// lookup finds ep's frame: the one last looked up (an engine with one busy
// endpoint asks about it again and again), else through the map.
func (r *Residency) lookup(ep int) (int, bool) {
	if f := &r.frames[r.hint]; f.used && f.ep == ep {
		return r.hint, true
	}
	i, ok := r.where[ep]
	if ok {
		r.hint = i
	}
	return i, ok
}

// Outstanding returns ep's outstanding messages (0 when not resident).
func (r *Residency) Outstanding(ep int) int {
	if f, ok := r.lookup(ep); ok {
		return r.frames[f].outstanding
	}
	return 0
}

// Touch makes ep resident and marks it most recently used. It returns
// ErrMustWait, having changed nothing, when ep is not resident and every
// frame is pinned.
func (r *Residency) Touch(ep int) (Touched, error) { return r.TouchIf(ep, nil) }

// TouchIf is Touch with the victims of a fault restricted to the
// endpoints may accepts (nil: any that is not pinned). It returns
// ErrMustWait when no frame is free and may accepts no unpinned endpoint.
func (r *Residency) TouchIf(ep int, may func(ep int) bool) (Touched, error) {
	r.stats.Touches++
	r.tick++
	if f, ok := r.lookup(ep); ok {
		r.frames[f].last = r.tick
		return Touched{Frame: f}, nil
	}
	victim := -1
	for i := range r.frames {
		f := &r.frames[i]
		if !f.used {
			victim = i
			break
		}
		if f.outstanding == 0 && (victim < 0 || f.last < r.frames[victim].last) && (may == nil || may(f.ep)) {
			victim = i
		}
	}
	if victim < 0 {
		r.stats.Waits++
		return Touched{}, ErrMustWait
	}
	t := Touched{Frame: victim, Fault: true}
	if f := &r.frames[victim]; f.used {
		t.Evicted, t.DidEvict = f.ep, true
		delete(r.where, f.ep)
		r.stats.Evictions++
	}
	r.stats.Faults++
	r.frames[victim] = frame{ep: ep, used: true, last: r.tick}
	r.where[ep] = victim
	return t, nil
}

// Hold records an outstanding message of ep, which pins it; ep must be
// resident (touch it first).
func (r *Residency) Hold(ep int) error {
	f, ok := r.lookup(ep)
	if !ok {
		return fmt.Errorf("hold endpoint %d: %w", ep, ErrNotResident)
	}
	r.frames[f].outstanding++
	return nil
}

// Release records that one outstanding message of ep was acknowledged (or
// returned to its sender); with none left, ep may be evicted again.
func (r *Residency) Release(ep int) error {
	f, ok := r.lookup(ep)
	if !ok {
		return fmt.Errorf("release endpoint %d: %w", ep, ErrNotResident)
	}
	if r.frames[f].outstanding == 0 {
		return fmt.Errorf("release endpoint %d: %w", ep, ErrNotHeld)
	}
	r.frames[f].outstanding--
	return nil
}

// Unload frees ep's frame, as when its endpoint is closed. It returns
// ErrPinned while ep has outstanding messages, and ErrNotResident.
func (r *Residency) Unload(ep int) error {
	f, ok := r.lookup(ep)
	if !ok {
		return fmt.Errorf("unload endpoint %d: %w", ep, ErrNotResident)
	}
	if r.frames[f].outstanding > 0 {
		return fmt.Errorf("unload endpoint %d: %w", ep, ErrPinned)
	}
	delete(r.where, ep)
	r.frames[f] = frame{}
	return nil
}
