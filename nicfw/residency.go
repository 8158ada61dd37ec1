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
//
// Frames are shared among owners (SetOwner: the local user an endpoint
// belongs to) before endpoints, so that one owner's endpoints cannot keep
// evicting everyone else's. The caller's passes (BeginPass) say which
// owners have work: those with an endpoint waiting for a frame (Waiting)
// or a resident endpoint with something to send or in flight. An owner's
// share is R divided by the owners with work (it among them), at least 1.
// A fault of an owner below its share evicts the least recently used
// endpoint of the owners above their share or without work if there is
// one, else the least recently used of all. A fault of an owner at or
// above its share evicts its own least recently used endpoint, else one of
// an owner without work: so the endpoints of an owner with work keep its
// share of the frames, whatever another's many endpoints do. If none may
// go, TouchIf (the engine's doorbells) waits (ErrMustWait); Touch
// (deliveries, which must not wait while a frame is unpinned: two hosts
// could NACK each other forever) takes another's, as if the owner were
// below its share (counted: Overdrawn). Until the first pass, and with one
// owner (an inline engine's, 0), this is plain LRU.

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
	// Bounded counts faults of an owner at its share of the frames that
	// evicted one of its own endpoints (or one of an owner without work),
	// or waited, where another owner's would have been the least recently
	// used.
	Bounded uint64
	// Overdrawn counts faults of deliveries (Touch) to an owner at its
	// share whose own frames were all pinned, which took another owner's.
	Overdrawn uint64
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
	owner  map[int]uint32        // endpoint -> owner, where not 0
	books  map[uint32]*ownerBook // owners holding frames or waiting for one in this pass
	pass   uint64                // the caller's pass (BeginPass), from 1
	active int                   // owners with work in this pass
	spare  []*ownerBook          // books of owners forgotten, for reuse
	// waiting counts the books of owners holding no frame (waiting in
	// this pass).
	waiting int
}

// ownerBook is an owner's account: the frames it holds, the last pass in
// which it had work, and the last in which a fault of its through TouchIf
// waited (stuck).
type ownerBook struct {
	owner  uint32
	frames int
	pass   uint64
	stuck  uint64
}

type frame struct {
	ep          int
	used        bool
	last        uint64 // tick of the last touch
	outstanding int
	book        *ownerBook // its endpoint's owner's
}

// NewResidency returns a residency with r frames, all free.
func NewResidency(r int) (*Residency, error) {
	if r < 1 {
		return nil, fmt.Errorf("%w: %d resident endpoints", ErrConfig, r)
	}
	return &Residency{
		frames: make([]frame, r),
		where:  make(map[int]int, r),
		owner:  map[int]uint32{},
		books:  map[uint32]*ownerBook{},
		pass:   1,
	}, nil
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

// SetOwner records that ep belongs to owner (every endpoint belongs to
// owner 0 until then). A resident ep's frame counts for its new owner
// from then on.
func (r *Residency) SetOwner(ep int, owner uint32) {
	if owner == 0 {
		delete(r.owner, ep)
	} else {
		r.owner[ep] = owner
	}
	if f, ok := r.lookup(ep); ok && r.frames[f].book.owner != owner {
		r.drop(r.frames[f].book)
		r.frames[f].book = r.take(owner, r.books[owner])
	}
}

// Owner returns ep's owner.
func (r *Residency) Owner(ep int) uint32 { return r.owner[ep] }

// Held returns the frames owner holds.
func (r *Residency) Held(owner uint32) int {
	if b := r.books[owner]; b != nil {
		return b.frames
	}
	return 0
}

// Share returns owner's share of the frames: R divided by the owners with
// work (it among them), at least 1.
func (r *Residency) Share(owner uint32) int {
	n := r.active
	if !r.working(r.books[owner]) {
		n++
	}
	return max(len(r.frames)/n, 1)
}

// working reports whether b's owner has work in this pass.
func (r *Residency) working(b *ownerBook) bool { return b != nil && b.pass == r.pass }

// BeginPass begins a pass of the caller's over the endpoints waiting for a
// frame (Waiting). The owners with work are, until the next pass, those of
// the resident endpoints that are pinned or that work accepts, and those
// of the endpoints waiting.
func (r *Residency) BeginPass(work func(ep int) bool) {
	r.pass++
	r.active = 0
	if r.waiting > 0 {
		for _, b := range r.books {
			if b.frames == 0 {
				r.forget(b)
			}
		}
		r.waiting = 0
	}
	for i := range r.frames {
		f := &r.frames[i]
		if f.used && !r.working(f.book) && (f.outstanding > 0 || work != nil && work(f.ep)) {
			r.mark(f.book)
		}
	}
}

// mark records that b's owner has work in this pass.
func (r *Residency) mark(b *ownerBook) {
	if b.pass != r.pass {
		b.pass = r.pass
		r.active++
	}
}

// Waiting records that ep waits for a frame in this pass: its owner has
// work.
func (r *Residency) Waiting(ep int) {
	o := r.owner[ep]
	b := r.books[o]
	if b == nil {
		b = r.book(o)
		r.waiting++
	}
	r.mark(b)
}

// book opens owner's book.
func (r *Residency) book(owner uint32) *ownerBook {
	var b *ownerBook
	if n := len(r.spare); n > 0 {
		b, r.spare = r.spare[n-1], r.spare[:n-1]
	} else {
		b = new(ownerBook)
	}
	*b = ownerBook{owner: owner}
	r.books[owner] = b
	return b
}

// forget closes b.
func (r *Residency) forget(b *ownerBook) {
	delete(r.books, b.owner)
	r.spare = append(r.spare, b)
}

// UnderShare reports whether ep's owner holds fewer frames than its
// share.
func (r *Residency) UnderShare(ep int) bool {
	o := r.owner[ep]
	return r.Held(o) < r.Share(o)
}

// Stuck reports whether a fault of ep's owner through TouchIf waited
// (ErrMustWait) in this pass: no other of its faults can load before
// sends and acknowledgements.
func (r *Residency) Stuck(ep int) bool {
	b := r.books[r.owner[ep]]
	return b != nil && b.stuck == r.pass
}

// take counts a frame for owner, whose book is b (nil: none yet).
func (r *Residency) take(owner uint32, b *ownerBook) *ownerBook {
	switch {
	case b == nil:
		b = r.book(owner)
	case b.frames == 0:
		r.waiting--
	}
	b.frames++
	return b
}

// drop uncounts a frame of b's owner, and forgets the owner if it holds no
// frame and did not wait in this pass.
func (r *Residency) drop(b *ownerBook) {
	if b.frames--; b.frames > 0 {
		return
	}
	if b.pass == r.pass {
		r.waiting++
		return
	}
	r.forget(b)
}

// Touch makes ep resident and marks it most recently used. It returns
// ErrMustWait, having changed nothing, when ep is not resident and every
// frame is pinned. A fault of an owner at its share of the frames evicts
// one of its own endpoints, or one of an owner without work; when none is
// unpinned, another owner's (Overdrawn).
func (r *Residency) Touch(ep int) (Touched, error) {
	if r.hit(ep) {
		return Touched{Frame: r.hint}, nil
	}
	return r.touch(ep, nil, false)
}

// hit is Touch's common case, small enough to be inlined where it is
// called: when ep is in the frame last looked up, it counts the touch as
// Touch does and reports true; otherwise it does nothing and reports
// false, and Touch is to be called.
func (r *Residency) hit(ep int) bool {
	f := &r.frames[r.hint]
	if !f.used || f.ep != ep {
		return false
	}
	r.stats.Touches++
	r.tick++
	f.last = r.tick
	return true
}

// TouchIf is Touch with the victims of a fault restricted to the
// endpoints may accepts (nil: any that is not pinned), and an owner at its
// share of the frames limited to its own endpoints and those of owners
// without work. It returns ErrMustWait when no frame is free and no
// endpoint may go, and the owner is Stuck for the rest of the pass.
func (r *Residency) TouchIf(ep int, may func(ep int) bool) (Touched, error) {
	return r.touch(ep, may, true)
}

func (r *Residency) touch(ep int, may func(ep int) bool, strict bool) (Touched, error) {
	r.stats.Touches++
	r.tick++
	if f, ok := r.lookup(ep); ok {
		r.frames[f].last = r.tick
		return Touched{Frame: f}, nil
	}
	o := r.owner[ep]
	own := r.books[o]
	var victim int
	if own != nil && len(r.books) == 1 {
		victim = r.lru(may) // one owner holds every frame in use
	} else {
		victim = r.shared(o, own, may, strict)
	}
	if victim < 0 {
		if strict && own != nil {
			own.stuck = r.pass
		}
		r.stats.Waits++
		return Touched{}, ErrMustWait
	}
	t := Touched{Frame: victim, Fault: true}
	if f := &r.frames[victim]; f.used {
		t.Evicted, t.DidEvict = f.ep, true
		delete(r.where, f.ep)
		r.drop(f.book)
		r.stats.Evictions++
	}
	r.stats.Faults++
	if own != nil && own.frames == 0 && own.pass != r.pass {
		own = nil // forgotten by drop just now
	}
	r.frames[victim] = frame{ep: ep, used: true, last: r.tick, book: r.take(o, own)}
	r.where[ep] = victim
	return t, nil
}

// lru returns a free frame, else the least recently used unpinned frame
// that may accepts; -1 if none.
func (r *Residency) lru(may func(ep int) bool) int {
	victim := -1
	for i := range r.frames {
		f := &r.frames[i]
		if !f.used {
			return i
		}
		if f.outstanding == 0 && (victim < 0 || f.last < r.frames[victim].last) && (may == nil || may(f.ep)) {
			victim = i
		}
	}
	return victim
}

// shared chooses the frame for a fault of owner o (whose book is own, nil
// if it has none) among several owners, as the file's comment says.
func (r *Residency) shared(o uint32, own *ownerBook, may func(ep int) bool, strict bool) int {
	share := r.Share(o)
	held := 0
	if own != nil {
		held = own.frames
	}
	// One pass: a free frame, or the least recently used that may go of
	// the owner's own (mine), of owners without work (idle), of those
	// and the owners above their share (prey), of all.
	mine, idle, prey, all := -1, -1, -1, -1
	older := func(i, than int) bool { return than < 0 || r.frames[i].last < r.frames[than].last }
	for i := range r.frames {
		f := &r.frames[i]
		if !f.used {
			return i
		}
		if f.outstanding != 0 {
			continue
		}
		isMine := f.book == own
		isIdle := !isMine && !r.working(f.book)
		isPrey := isIdle || !isMine && f.book.frames > share
		if !older(i, all) && !(isMine && older(i, mine)) && !(isIdle && older(i, idle)) && !(isPrey && older(i, prey)) {
			continue
		}
		if may != nil && !may(f.ep) {
			continue
		}
		if older(i, all) {
			all = i
		}
		if isMine && older(i, mine) {
			mine = i
		}
		if isIdle && older(i, idle) {
			idle = i
		}
		if isPrey && older(i, prey) {
			prey = i
		}
	}
	if held < share {
		if prey >= 0 {
			return prey
		}
		return all
	}
	victim := mine
	if victim < 0 {
		victim = idle
	}
	switch {
	case victim < 0 && all >= 0 && !strict:
		r.stats.Overdrawn++
		victim = prey
		if victim < 0 {
			victim = all
		}
	case victim != all:
		r.stats.Bounded++ // its own (or an idle owner's) where another's was least recently used, or none
	}
	return victim
}

// Hold records an outstanding message of ep, which pins it; ep must be
// resident (touch it first).
func (r *Residency) Hold(ep int) error {
	if f := &r.frames[r.hint]; f.used && f.ep == ep { // the frame last looked up
		f.outstanding++
		return nil
	}
	return r.hold(ep)
}

// hold is Hold past the frame last looked up.
func (r *Residency) hold(ep int) error {
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
	if f := &r.frames[r.hint]; f.used && f.ep == ep && f.outstanding > 0 { // the frame last looked up
		f.outstanding--
		return nil
	}
	return r.release(ep)
}

// release is Release past the frame last looked up, and its errors.
func (r *Residency) release(ep int) error {
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
	r.drop(r.frames[f].book)
	r.frames[f] = frame{}
	return nil
}
