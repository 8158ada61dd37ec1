package nicfw

import (
	"fmt"
	"math/bits"
)

// Endpoint scheduling: which endpoint the engine sends from next. A
// Scheduler belongs to the engine thread; it holds no lock and starts no
// goroutine. It is pure logic: it learns whether an endpoint has sends
// pending from a Pending the caller passes to Next, and does not look at
// queues itself.
//
// The policy is AM-II's weighted round robin that skips empty endpoints and
// loiters on busy ones, applied at two levels: across owners first (the
// local user an endpoint belongs to, VNet.Owner), then across the owner's
// endpoints. Owners take turns, in the order they came: a turn lasts up to
// Loiter consecutive sends, while the owner has an endpoint with sends
// pending; then the next owner that has one takes its turn. So while several
// owners have work they share the sends equally, however many endpoints each
// has: one user's 64 busy endpoints get as many sends as another user's one.
//
// Within an owner's turns its endpoints are visited in the order they were
// added (one added after another was removed may take its place). In each of
// the owner's rounds an endpoint may send up to its weight; a visit lasts up
// to Loiter consecutive sends, while the endpoint has sends pending and
// weight left in the round; then the scheduler moves on to the owner's next
// endpoint that has both. An endpoint with nothing pending is skipped and
// keeps its weight for the rest of the round. When none of the owner's
// endpoints with sends pending has weight left, the owner's new round starts
// and its weights are restored (not accumulated: an endpoint that was idle
// cannot save up a burst). So while an owner's endpoints stay busy its sends
// are shared among them in proportion to their weights, and no endpoint
// sends more than Loiter in a row while another one with weight left in its
// round waits. With a single owner (an inline engine, whose endpoints all
// have owner 0) this is the one-level round robin.
//
// Idle endpoints cost (almost) nothing per decision. An endpoint found with
// nothing pending is marked idle, and an owner with busy endpoints no more
// is too: turns and visits pass over them by a bitmap, without asking p, so
// an endpoint keeps its place in the order and the round robin its position
// while everybody waits. The scheduler asks the idle endpoints again a few
// at a time (up to schedSweep of them, round the idle list, at each decision
// that ends a visit), and every one before it reports that nothing is
// pending; one that has sends pending is busy again. Next asks p about each
// endpoint at most once, and a decision costs O(1) however many endpoints
// are idle (the bitmaps' words aside: one per 64 endpoints), besides the
// busy endpoints out of weight that the end of a visit passes over, as
// before. An endpoint that becomes busy is noticed at the next visit's end
// while at most schedSweep endpoints are idle (an engine with its default
// frames has fewer), within idle/schedSweep visits otherwise; the guarantees
// above are for the endpoints noticed.

// Parking (SetParkAfter): an idle endpoint asked again and found with
// nothing pending that many times in a row leaves the idle list and is
// asked no more: Next reports it once through TakeParked, and it comes
// back when its owner says so (Unpark, which the engine calls when the
// endpoint's doorbell rings), so that endpoints idle for long cost the
// decisions nothing.

// Pending tells the scheduler whether an endpoint has sends pending.
type Pending interface {
	Pending(ep int) bool
}

// PendingFunc adapts a function to Pending.
type PendingFunc func(ep int) bool

// Pending calls f.
func (f PendingFunc) Pending(ep int) bool { return f(ep) }

// DefaultLoiter is the default number of consecutive sends on one endpoint.
const DefaultLoiter = 4

// schedSweep is the most idle endpoints a decision that ends a visit asks
// about again.
const schedSweep = 8

// Scheduler is a weighted round robin over owners, then over each owner's
// endpoints.
type Scheduler struct {
	loiter  int
	entries []*schedEntry // every endpoint, in no order
	index   map[int]*schedEntry
	owners  []*schedOwner // by place, in the order they came
	byID    map[uint32]*schedOwner
	busy    bitset // the owners with busy endpoints, by place
	nbusy   int
	cur     *schedOwner   // the owner whose turn it is or was; nil for none
	run     int           // consecutive sends of its endpoints
	idle    []*schedEntry // endpoints found with nothing pending
	spare   []*schedEntry // entries of endpoints removed, for reuse
	sweep   int           // the next one of idle to ask about
	calls   uint64        // Next calls, which p's answers are kept for
	rounds  uint64
	// Parking: after how many empty asks in a row (0: never), and the
	// endpoints parked since the last TakeParked.
	parkAfter int
	parkedNew []int
	// full turns the shortcut for a lone busy endpoint (again) off, so
	// that tests can check it against the full search.
	full bool
}

// schedOwner is an owner: its endpoints, by place in the order they came,
// in a weighted round robin of their own. An owner stays (without
// endpoints) once it came: there are as many as the users of the engine.
type schedOwner struct {
	id    uint32
	at    int           // its place in Scheduler.owners
	eps   []*schedEntry // by place (nil: a free place)
	free  []int
	busy  bitset // the busy endpoints, by place
	nbusy int
	cur   *schedEntry // the endpoint last chosen; nil for none (or removed since)
	curAt int         // its place, where the round robin goes on from
	run   int         // consecutive sends of it
	round uint64      // its rounds
}

type schedEntry struct {
	ep     int
	weight int
	left   int    // weight left in round
	round  uint64 // the owner's round left belongs to
	owner  *schedOwner
	at     int    // its place in owner.eps
	idleAt int    // its place in Scheduler.idle while idle, else -1
	pos    int    // its place in Scheduler.entries
	asked  uint64 // the Next call that last asked p about it
	pend   bool   // p's answer then
	empty  int    // asks in a row, while idle, that found nothing pending
	parked bool   // off the idle list, asked no more until Unpark
}

// NewScheduler returns an empty scheduler that loiters up to loiter sends
// on an endpoint (0: DefaultLoiter).
func NewScheduler(loiter int) (*Scheduler, error) {
	if loiter == 0 {
		loiter = DefaultLoiter
	}
	if loiter < 0 {
		return nil, fmt.Errorf("%w: loiter %d", ErrConfig, loiter)
	}
	return &Scheduler{loiter: loiter, index: map[int]*schedEntry{}, byID: map[uint32]*schedOwner{}}, nil
}

// Add adds endpoint ep of owner 0 with weight w: AddOwned(ep, 0, w).
func (s *Scheduler) Add(ep, w int) error { return s.AddOwned(ep, 0, w) }

// AddOwned adds endpoint ep of owner with weight w (w >= 1), after the
// owner's endpoints already there (or in the place of one removed), with
// its full weight for the owner's current round. An owner new to the
// scheduler takes its turns after those already there.
func (s *Scheduler) AddOwned(ep int, owner uint32, w int) error {
	if w < 1 {
		return fmt.Errorf("%w: weight %d of endpoint %d", ErrConfig, w, ep)
	}
	if _, ok := s.index[ep]; ok {
		return fmt.Errorf("%w: endpoint %d scheduled twice", ErrConfig, ep)
	}
	o := s.cur // most often the owner of the endpoint added
	if o == nil || o.id != owner {
		o = s.byID[owner]
	}
	if o == nil {
		o = &schedOwner{id: owner, at: len(s.owners), curAt: -1}
		s.owners = append(s.owners, o)
		s.busy.grow(len(s.owners))
		s.byID[owner] = o
	}
	var e *schedEntry
	if n := len(s.spare); n > 0 {
		e, s.spare = s.spare[n-1], s.spare[:n-1]
	} else {
		e = new(schedEntry)
	}
	*e = schedEntry{ep: ep, weight: w, left: w, round: o.round, owner: o, idleAt: -1, pos: len(s.entries)}
	e.at = place(&o.eps, &o.free, &o.busy)
	o.eps[e.at] = e
	s.index[ep] = e
	s.entries = append(s.entries, e)
	s.wake(e)
	return nil
}

// place returns a free place in *l: one of *free, else a new one at the
// end, with a bit for it in *b.
func place[T any](l *[]*T, free *[]int, b *bitset) int {
	if n := len(*free); n > 0 {
		i := (*free)[n-1]
		*free = (*free)[:n-1]
		return i
	}
	*l = append(*l, nil)
	b.grow(len(*l))
	return len(*l) - 1
}

// Remove removes endpoint ep; it reports whether ep was there. If ep was
// its owner's current endpoint, the round robin goes on from its place,
// its visit over (and so does the owners' if it was its owner's last).
func (s *Scheduler) Remove(ep int) bool {
	e, ok := s.index[ep]
	if !ok {
		return false
	}
	delete(s.index, ep)
	last := len(s.entries) - 1
	s.entries[e.pos] = s.entries[last]
	s.entries[e.pos].pos = e.pos
	s.entries[last] = nil
	s.entries = s.entries[:last]
	switch {
	case e.parked:
	case e.idleAt >= 0:
		s.unidle(e)
	default:
		s.unbusy(e)
	}
	o := e.owner
	o.eps[e.at] = nil
	o.free = append(o.free, e.at)
	if o.cur == e {
		o.cur = nil // the round robin goes on from curAt
	}
	e.owner = nil
	s.spare = append(s.spare, e)
	return true
}

// Len returns the number of endpoints.
func (s *Scheduler) Len() int { return len(s.entries) }

// Rounds returns how many times an owner's new round began (its weights
// restored).
func (s *Scheduler) Rounds() uint64 { return s.rounds }

// quiescent reports whether Next would find nothing to do at once: no
// endpoint busy or idle, no visit going on. It is small enough to be
// inlined, so that a caller may skip Next's call.
func (s *Scheduler) quiescent() bool {
	return s.nbusy == 0 && len(s.idle) == 0 && (s.cur == nil || s.run >= s.loiter)
}

// Next chooses the endpoint to send one message from and charges it one
// send; ok is false when no endpoint has sends pending. It asks p about
// each endpoint at most once.
func (s *Scheduler) Next(p Pending) (ep int, ok bool) {
	if s.quiescent() {
		return 0, false // what the rest finds
	}
	s.calls++
	// The current owner's turn goes on, and in it the current visit (a
	// visit is over once its endpoint went idle or was removed: unbusy).
	o := s.cur
	if o != nil && s.run < s.loiter {
		if e := o.cur; e != nil && o.run < s.loiter && e.left > 0 && s.ask(p, e) {
			return s.charge(e, o.run+1, s.run+1), true
		}
	}
	// Alone: the current endpoint is the only busy one and none is idle,
	// so the round robin below could only choose it again; it is charged
	// as the round robin would charge it, its owner's new round included.
	if o != nil && s.nbusy == 1 && o.nbusy == 1 && len(s.idle) == 0 && !s.full {
		if e := o.cur; e != nil && o.busy.has(e.at) && s.ask(p, e) {
			return s.again(e), true
		}
	}
	// A visit ends: first a look at some idle endpoints.
	if len(s.idle) > 0 {
		s.sweepIdle(p)
	}
	if o != nil && s.run < s.loiter && o.nbusy > 0 {
		if e, run := s.pick(p, o); e != nil {
			return s.charge(e, run, s.run+1), true
		}
	}
	if e, run := s.turn(p); e != nil {
		return s.charge(e, run, 1), true
	}
	// Nobody busy can send: every idle endpoint, before saying so.
	if s.wakeAll(p) {
		if e, run := s.turn(p); e != nil {
			return s.charge(e, run, 1), true
		}
	}
	return 0, false
}

// turn gives the turn to the first owner after the current one (the
// current one last) that has an endpoint with sends pending, and returns
// that endpoint and its visit's length with this send; nil if none has.
func (s *Scheduler) turn(p Pending) (*schedEntry, int) {
	i := 0
	if s.cur != nil {
		i = s.cur.at + 1
	}
	for range s.nbusy {
		j := s.busy.cyclic(i)
		if j < 0 {
			break
		}
		if e, run := s.pick(p, s.owners[j]); e != nil {
			return e, run
		}
		i = j + 1
	}
	return nil, 0
}

// pick chooses owner o's endpoint to send from: its current one while its
// visit lasts; else the next busy one with sends pending and weight left
// (the current one last); else, if one has sends pending, the first of
// them, in a new round of o's. Endpoints found with nothing pending go
// idle. It returns nil if none of o's busy endpoints has sends pending.
func (s *Scheduler) pick(p Pending, o *schedOwner) (*schedEntry, int) {
	if c := o.cur; c != nil && o.run < s.loiter && c.left > 0 && s.ask(p, c) {
		return c, o.run + 1
	}
	var anyPend *schedEntry
	i := o.curAt + 1
	for range o.nbusy {
		j := o.busy.cyclic(i)
		if j < 0 {
			break
		}
		e := o.eps[j]
		switch {
		case anyPend != nil && e.left <= 0:
			// not a candidate, and anyPend is known
		case !s.ask(p, e):
			s.rest(e)
		case e.left > 0:
			return e, 1
		case anyPend == nil:
			anyPend = e
		}
		i = j + 1
	}
	if anyPend == nil {
		return nil, 0
	}
	// None of o's pending has weight left: o's new round.
	s.rounds++
	o.round++
	for j := o.busy.next(0); j >= 0; j = o.busy.next(j + 1) {
		e := o.eps[j]
		e.left, e.round = e.weight, o.round
	}
	return anyPend, 1
}

// again chooses e, its owner's current endpoint and the only busy one,
// once more: what pick and turn would do, without their search. The visit
// goes on if it may, else a new one starts; so does the owner's turn; if e
// has no weight left, its owner's new round starts.
func (s *Scheduler) again(e *schedEntry) int {
	o := e.owner
	run, orun := 1, 1
	if o.run < s.loiter && e.left > 0 {
		run = o.run + 1
	}
	if s.run < s.loiter {
		orun = s.run + 1
	}
	if e.left <= 0 {
		s.rounds++
		o.round++
		e.left, e.round = e.weight, o.round
	}
	return s.charge(e, run, orun)
}

// charge makes e current, in its visit's run-th send and its owner's
// turn's orun-th, and charges it one send.
func (s *Scheduler) charge(e *schedEntry, run, orun int) int {
	o := e.owner
	s.cur, s.run = o, orun
	o.cur, o.curAt, o.run = e, e.at, run
	e.left--
	return e.ep
}

// ask asks p whether e has sends pending, once per Next.
func (s *Scheduler) ask(p Pending, e *schedEntry) bool {
	if e.asked != s.calls {
		e.asked, e.pend = s.calls, p.Pending(e.ep)
	}
	return e.pend
}

// sweepIdle asks up to schedSweep idle endpoints, from where the last
// sweep stopped, and wakes those with sends pending.
func (s *Scheduler) sweepIdle(p Pending) {
	for range min(schedSweep, len(s.idle)) {
		if len(s.idle) == 0 {
			return
		}
		if s.sweep >= len(s.idle) {
			s.sweep = 0
		}
		e := s.idle[s.sweep]
		switch {
		case e.asked == s.calls:
			s.sweep++
		case s.ask(p, e):
			s.unidle(e) // another takes its place in the list
			s.wake(e)
		case s.stillIdle(e):
			s.sweep++
		}
	}
}

// stillIdle counts an ask of idle endpoint e that found nothing pending,
// and parks e once it has been found so parkAfter times in a row; it
// reports whether e is still on the idle list.
func (s *Scheduler) stillIdle(e *schedEntry) bool {
	if e.empty++; s.parkAfter == 0 || e.empty < s.parkAfter {
		return true
	}
	s.unidle(e) // another takes its place in the list
	e.parked = true
	s.parkedNew = append(s.parkedNew, e.ep)
	return false
}

// Quiet reports whether no endpoint but ep is busy (has had sends pending
// since the scheduler last found it with none): a send from ep outside
// the rotation then takes no busy endpoint's turn.
func (s *Scheduler) Quiet(ep int) bool {
	switch s.nbusy {
	case 0:
		return true
	case 1:
		e, ok := s.index[ep]
		return ok && e.owner.nbusy == 1 && e.owner.busy.has(e.at)
	}
	return false
}

// SetParkAfter makes the scheduler park an idle endpoint once it has been
// asked n times in a row and found with nothing pending (0: never).
func (s *Scheduler) SetParkAfter(n int) { s.parkAfter = max(n, 0) }

// TakeParked calls f with each endpoint parked since the last call.
func (s *Scheduler) TakeParked(f func(ep int)) {
	for _, ep := range s.parkedNew {
		f(ep)
	}
	s.parkedNew = s.parkedNew[:0]
}

// Parked reports whether there are endpoints parked since the last
// TakeParked.
func (s *Scheduler) Parked() bool { return len(s.parkedNew) > 0 }

// Unpark brings parked endpoint ep back: busy, asked at its next turn. It
// reports whether ep was parked.
func (s *Scheduler) Unpark(ep int) bool {
	e, ok := s.index[ep]
	if !ok || !e.parked {
		return false
	}
	e.parked, e.empty = false, 0
	s.wake(e)
	return true
}

// wakeAll asks every idle endpoint not asked in this Next and wakes those
// with sends pending; it reports whether any woke.
func (s *Scheduler) wakeAll(p Pending) bool {
	woke := false
	for i := 0; i < len(s.idle); {
		e := s.idle[i]
		switch {
		case e.asked == s.calls:
			i++
		case s.ask(p, e):
			s.unidle(e) // the last takes its place, not asked yet
			s.wake(e)
			woke = true
		case s.stillIdle(e):
			i++
		}
	}
	return woke
}

// rest makes busy endpoint e idle.
func (s *Scheduler) rest(e *schedEntry) {
	s.unbusy(e)
	e.empty = 0
	e.idleAt = len(s.idle)
	s.idle = append(s.idle, e)
}

// unidle takes e off the idle list.
func (s *Scheduler) unidle(e *schedEntry) {
	last := len(s.idle) - 1
	s.idle[e.idleAt] = s.idle[last]
	s.idle[e.idleAt].idleAt = e.idleAt
	s.idle[last] = nil
	s.idle = s.idle[:last]
	e.idleAt = -1
}

// wake makes e busy, with its full weight if its owner's round changed
// meanwhile, and its owner busy if it was not.
func (s *Scheduler) wake(e *schedEntry) {
	o := e.owner
	if e.round != o.round {
		e.left, e.round = e.weight, o.round
	}
	o.busy.set(e.at)
	if o.nbusy++; o.nbusy == 1 {
		s.busy.set(o.at)
		s.nbusy++
	}
}

// unbusy clears e's busy mark, and its owner's if e was its last busy
// endpoint; the visit of either, if current, is over.
func (s *Scheduler) unbusy(e *schedEntry) {
	o := e.owner
	o.busy.clear(e.at)
	if o.cur == e {
		o.run = s.loiter
	}
	if o.nbusy--; o.nbusy > 0 {
		return
	}
	s.busy.clear(o.at)
	s.nbusy--
	if s.cur == o {
		s.run = s.loiter
	}
}

// bitset is a set of small integers.
type bitset []uint64

// grow makes room for n members.
func (b *bitset) grow(n int) {
	for len(*b)*64 < n {
		*b = append(*b, 0)
	}
}

func (b bitset) set(i int)      { b[i>>6] |= 1 << (i & 63) }
func (b bitset) clear(i int)    { b[i>>6] &^= 1 << (i & 63) }
func (b bitset) has(i int) bool { return b[i>>6]&(1<<(i&63)) != 0 }

// next returns the least member at or above i, or -1.
func (b bitset) next(i int) int {
	w := i >> 6
	if w >= len(b) {
		return -1
	}
	if m := b[w] >> (i & 63); m != 0 {
		return i + bits.TrailingZeros64(m)
	}
	for w++; w < len(b); w++ {
		if b[w] != 0 {
			return w<<6 + bits.TrailingZeros64(b[w])
		}
	}
	return -1
}

// cyclic returns the least member at or above i, else the least, else -1.
func (b bitset) cyclic(i int) int {
	if j := b.next(i); j >= 0 {
		return j
	}
	return b.next(0)
}
