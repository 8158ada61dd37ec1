package nicfw

import "fmt"

// Endpoint scheduling: which endpoint the engine sends from next. A
// Scheduler belongs to the engine thread; it holds no lock and starts no
// goroutine. It is pure logic: it learns whether an endpoint has sends
// pending from a Pending the caller passes to Next, and does not look at
// queues itself.
//
// The policy is AM-II's weighted round robin that skips empty endpoints and
// loiters on busy ones. Endpoints are visited in the order they were added.
// In each round an endpoint may send up to its weight; a visit lasts up to
// Loiter consecutive sends, while the endpoint has sends pending and weight
// left in the round; then the scheduler moves on to the next endpoint that
// has both. An endpoint with nothing pending is skipped and keeps its weight
// for the rest of the round. When no endpoint with sends pending has weight
// left, a new round starts and every weight is restored (not accumulated:
// an endpoint that was idle cannot save up a burst). So while every
// endpoint stays busy, sends are shared in proportion to the weights, and
// no endpoint sends more than Loiter in a row while another one with weight
// left in the round waits. Next costs O(endpoints) in the worst case (a scan
// for the next one with work), which suits tens of endpoints per engine.

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

// Scheduler is a weighted round robin over endpoints.
type Scheduler struct {
	loiter  int
	entries []schedEntry
	index   map[int]int // endpoint -> position in entries
	cur     int         // position of the endpoint last chosen, -1 for none
	run     int         // consecutive sends of entries[cur]
	rounds  uint64
}

type schedEntry struct {
	ep     int
	weight int
	left   int // weight left in this round
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
	return &Scheduler{loiter: loiter, index: map[int]int{}, cur: -1}, nil
}

// Add adds endpoint ep with weight w (w >= 1), after the endpoints already
// there, with its full weight for the current round.
func (s *Scheduler) Add(ep, w int) error {
	if w < 1 {
		return fmt.Errorf("%w: weight %d of endpoint %d", ErrConfig, w, ep)
	}
	if _, ok := s.index[ep]; ok {
		return fmt.Errorf("%w: endpoint %d scheduled twice", ErrConfig, ep)
	}
	s.index[ep] = len(s.entries)
	s.entries = append(s.entries, schedEntry{ep: ep, weight: w, left: w})
	return nil
}

// Remove removes endpoint ep; it reports whether ep was there.
func (s *Scheduler) Remove(ep int) bool {
	i, ok := s.index[ep]
	if !ok {
		return false
	}
	delete(s.index, ep)
	s.entries = append(s.entries[:i], s.entries[i+1:]...)
	for j := i; j < len(s.entries); j++ {
		s.index[s.entries[j].ep] = j
	}
	switch {
	case s.cur == i:
		// Continue with the endpoint that took its place: the one before
		// it becomes current, with its visit over.
		s.cur, s.run = i-1, s.loiter
	case s.cur > i:
		s.cur--
	}
	return true
}

// Len returns the number of endpoints.
func (s *Scheduler) Len() int { return len(s.entries) }

// Rounds returns how many times a new round began (weights restored).
func (s *Scheduler) Rounds() uint64 { return s.rounds }

// Next chooses the endpoint to send one message from and charges it one
// send; ok is false when no endpoint has sends pending. It asks p about at
// most every endpoint once, and the current one twice.
func (s *Scheduler) Next(p Pending) (ep int, ok bool) {
	if s.cur >= 0 && s.run < s.loiter {
		e := &s.entries[s.cur]
		if e.left > 0 && p.Pending(e.ep) {
			return s.charge(s.cur, s.run+1), true
		}
	}
	i, anyPend := s.find(p)
	if i >= 0 {
		return s.charge(i, 1), true
	}
	// Nobody pending has weight left: a new round, if anybody is pending.
	if anyPend >= 0 {
		s.rounds++
		for j := range s.entries {
			s.entries[j].left = s.entries[j].weight
		}
		return s.charge(anyPend, 1), true
	}
	return 0, false
}

// find returns the first endpoint after the current one (the current one
// last) that has sends pending and weight left, or -1; and anyPend, the first
// one in that order that has sends pending, or -1. It asks p about each
// endpoint at most once.
func (s *Scheduler) find(p Pending) (i, anyPend int) {
	n := len(s.entries)
	anyPend = -1
	for k := 1; k <= n; k++ {
		i := (s.cur + k) % n
		if s.cur < 0 {
			i = k - 1
		}
		e := &s.entries[i]
		if anyPend >= 0 && e.left <= 0 {
			continue // not a candidate, and anyPend is known
		}
		if !p.Pending(e.ep) {
			continue
		}
		if e.left > 0 {
			return i, anyPend
		}
		anyPend = i
	}
	return -1, anyPend
}

func (s *Scheduler) charge(i, run int) int {
	s.cur, s.run = i, run
	s.entries[i].left--
	return s.entries[i].ep
}
