package nicfw

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// pendingSet is a Pending that counts how often it is asked.
type pendingSet struct {
	set   map[int]bool
	asked int
}

func (p *pendingSet) Pending(ep int) bool { p.asked++; return p.set[ep] }

func newSched(t *testing.T, loiter int, weights ...int) *Scheduler {
	t.Helper()
	s, err := NewScheduler(loiter)
	if err != nil {
		t.Fatal(err)
	}
	for ep, w := range weights {
		if err := s.Add(ep, w); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func all(n int) *pendingSet {
	p := &pendingSet{set: map[int]bool{}}
	for i := range n {
		p.set[i] = true
	}
	return p
}

func sequence(s *Scheduler, p Pending, n int) string {
	var b strings.Builder
	for range n {
		ep, ok := s.Next(p)
		if !ok {
			b.WriteByte('.')
			continue
		}
		b.WriteByte(byte('A' + ep))
	}
	return b.String()
}

func TestSchedulerConfig(t *testing.T) {
	if _, err := NewScheduler(-1); !errors.Is(err, ErrConfig) {
		t.Errorf("NewScheduler(-1): %v", err)
	}
	s := newSched(t, 0, 1)
	if s.loiter != DefaultLoiter {
		t.Errorf("loiter %d, want DefaultLoiter", s.loiter)
	}
	if err := s.Add(0, 1); !errors.Is(err, ErrConfig) {
		t.Errorf("adding endpoint 0 twice: %v", err)
	}
	if err := s.Add(1, 0); !errors.Is(err, ErrConfig) {
		t.Errorf("weight 0: %v", err)
	}
	if s.Len() != 1 {
		t.Errorf("Len() = %d", s.Len())
	}
}

func TestSchedulerSequences(t *testing.T) {
	cases := []struct {
		name    string
		loiter  int
		weights []int
		pending []int
		want    string
	}{
		{"loiter 2, equal weights", 2, []int{4, 4}, []int{0, 1}, "AABBAABBAABB"},
		{"loiter 1 is plain round robin", 1, []int{3, 3, 3}, []int{0, 1, 2}, "ABCABCABC"},
		{"weights by loiter", 2, []int{1, 2, 3}, []int{0, 1, 2}, "ABBCCCABBCCC"},
		{"weight bounds the visit", 8, []int{2, 1}, []int{0, 1}, "AABAAB"},
		{"empties skipped", 1, []int{1, 1, 1, 1}, []int{1, 3}, "BDBDBD"},
		{"alone, loiter does not stop it", 2, []int{1, 1}, []int{1}, "BBBBB"},
		{"nothing pending", 2, []int{1, 1}, nil, "..."},
		{"others out of weight", 2, []int{5, 1}, []int{0, 1}, "AABAAABAAAAA"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSched(t, c.loiter, c.weights...)
			p := &pendingSet{set: map[int]bool{}}
			for _, ep := range c.pending {
				p.set[ep] = true
			}
			if got := sequence(s, p, len(c.want)); got != c.want {
				t.Errorf("sequence %s, want %s", got, c.want)
			}
		})
	}
}

func TestSchedulerFairness(t *testing.T) {
	weights := []int{1, 2, 3, 4}
	s := newSched(t, 2, weights...)
	p := all(len(weights))
	const rounds = 1000
	counts := make([]int, len(weights))
	for range 10 * rounds {
		ep, ok := s.Next(p)
		if !ok {
			t.Fatal("nothing chosen with every endpoint busy")
		}
		counts[ep]++
	}
	for ep, w := range weights {
		if counts[ep] != w*rounds {
			t.Errorf("endpoint %d (weight %d) sent %d, want %d", ep, w, counts[ep], w*rounds)
		}
	}
	if s.Rounds() != rounds-1 {
		t.Errorf("weights restored %d times, want %d", s.Rounds(), rounds-1)
	}
	// Each Next asks about every endpoint at most twice.
	p.asked = 0
	p.set = map[int]bool{}
	s.Next(p)
	if p.asked > 2*len(weights) {
		t.Errorf("Next asked %d times with %d endpoints", p.asked, len(weights))
	}
}

// An endpoint that was idle for many rounds gets no more than its weight
// per round when it becomes busy.
func TestSchedulerNoSavingUp(t *testing.T) {
	s := newSched(t, 8, 2, 2)
	p := &pendingSet{set: map[int]bool{0: true}}
	sequence(s, p, 100)
	p.set[1] = true
	if got := sequence(s, p, 12); got != "BBAABBAABBAA" && got != "AABBAABBAABB" {
		t.Errorf("sequence %s after B woke up, want a 2:2 share", got)
	}
}

func TestSchedulerRemove(t *testing.T) {
	s := newSched(t, 2, 2, 2, 2)
	p := all(3)
	if got := sequence(s, p, 3); got != "AAB" {
		t.Fatalf("sequence %s", got)
	}
	if !s.Remove(1) || s.Remove(1) {
		t.Fatal("Remove(1) twice did not report true, false")
	}
	delete(p.set, 1)
	if got := sequence(s, p, 6); got != "CCAACC" {
		t.Errorf("after removing the current endpoint: %s, want CCAACC", got)
	}
	s.Remove(0)
	s.Remove(2)
	if _, ok := s.Next(p); ok || s.Len() != 0 {
		t.Errorf("an empty scheduler chose an endpoint")
	}
}

// TestSchedulerRandom changes which endpoints are pending at random and
// checks at every step: the chosen endpoint is pending; nothing is chosen
// only when nothing is pending; once another pending endpoint with weight
// left in the round waits, the current one sends at most the loiter limit
// more before it gets its turn.
func TestSchedulerRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n, loiter = 6, 3
	weights := []int{1, 2, 3, 4, 5, 6}
	s := newSched(t, loiter, weights...)
	p := &pendingSet{set: map[int]bool{}}
	last, whileWaiting := -1, 0
	for step := range 50000 {
		if rng.IntN(4) == 0 {
			ep := rng.IntN(n)
			p.set[ep] = !p.set[ep]
		}
		waiting := false
		for _, e := range s.entries {
			waiting = waiting || e.ep != last && e.left > 0 && p.set[e.ep]
		}
		ep, ok := s.Next(p)
		anyPending := false
		for _, v := range p.set {
			anyPending = anyPending || v
		}
		if ok != anyPending || ok && !p.set[ep] {
			t.Fatalf("step %d: Next = %d, %v with pending %v", step, ep, ok, p.set)
		}
		switch {
		case !ok || ep != last || !waiting:
			last, whileWaiting = ep, 0
			if !ok {
				last = -1
			}
		default:
			whileWaiting++
		}
		if whileWaiting >= loiter {
			t.Fatalf("step %d: endpoint %d sent %d more while another waited", step, ep, whileWaiting+1)
		}
	}
}

// An idle endpoint asked and found with nothing pending ParkAfter times in
// a row is parked: reported once by TakeParked, asked no more, and back in
// the rotation after Unpark; an ask that finds it busy starts its count
// over; Remove takes a parked endpoint out.
func TestSchedParks(t *testing.T) {
	s, err := NewScheduler(0)
	if err != nil {
		t.Fatal(err)
	}
	s.SetParkAfter(3)
	for ep := range 2 {
		if err := s.Add(ep, 1); err != nil {
			t.Fatal(err)
		}
	}
	pending := []bool{false, false}
	asked := []int{0, 0}
	p := PendingFunc(func(ep int) bool { asked[ep]++; return pending[ep] })
	var parked []int
	take := func() { s.TakeParked(func(ep int) { parked = append(parked, ep) }) }
	for range 10 {
		if _, ok := s.Next(p); ok {
			t.Fatal("chose an endpoint with nothing pending")
		}
		take()
	}
	if len(parked) != 2 || s.Parked() {
		t.Fatalf("parked %v", parked)
	}
	before := asked[0] + asked[1]
	for range 10 {
		s.Next(p)
	}
	if asked[0]+asked[1] != before {
		t.Fatalf("parked endpoints asked %d times", asked[0]+asked[1]-before)
	}
	// Pending while parked: chosen only once unparked.
	pending[1] = true
	if _, ok := s.Next(p); ok {
		t.Fatal("a parked endpoint chosen")
	}
	if !s.Unpark(1) || s.Unpark(1) {
		t.Fatal("Unpark: not parked, or twice")
	}
	if ep, ok := s.Next(p); !ok || ep != 1 {
		t.Fatalf("after Unpark: %d, %v", ep, ok)
	}
	if !s.Remove(0) || s.Len() != 1 {
		t.Fatal("Remove of a parked endpoint")
	}
	// A busy spell starts the count over: two empty asks, busy, two
	// empty asks again do not park it.
	pending[1] = false
	parked = parked[:0]
	for round := range 2 {
		for range 2 {
			s.Next(p)
		}
		if round == 0 {
			pending[1] = true
			if ep, ok := s.Next(p); !ok || ep != 1 {
				t.Fatalf("busy again: %d, %v", ep, ok)
			}
			pending[1] = false
		}
	}
	take()
	if len(parked) != 0 {
		t.Fatalf("parked %v after a busy spell", parked)
	}
}

// TestSchedulerAloneMatchesSearch runs two schedulers side by side through
// the same random changes, one with the shortcut for a lone busy endpoint
// and one with the full search only, and checks that they choose alike,
// ask Pending alike and count the same rounds.
func TestSchedulerAloneMatchesSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const n, loiter = 4, 3
	owners := []uint32{0, 0, 1, 1}
	weights := []int{1, 3, 1, 2}
	mk := func(full bool) *Scheduler {
		s, err := NewScheduler(loiter)
		if err != nil {
			t.Fatal(err)
		}
		s.full = full
		s.SetParkAfter(5)
		for ep := range n {
			if err := s.AddOwned(ep, owners[ep], weights[ep]); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	fast, full := mk(false), mk(true)
	set := map[int]bool{}
	pf, pl := &pendingSet{set: set}, &pendingSet{set: set}
	in := []bool{true, true, true, true}
	alone := 0
	for step := range 200000 {
		// Mostly one endpoint pending for a stretch, so that the shortcut
		// has its chance; now and then another, a removal or an Unpark.
		switch r := rng.IntN(100); {
		case r < 4:
			ep := rng.IntN(n)
			set[ep] = !set[ep]
		case r == 4:
			ep := rng.IntN(n)
			if in[ep] {
				fast.Remove(ep)
				full.Remove(ep)
			} else {
				w := 1 + rng.IntN(3)
				if err := fast.AddOwned(ep, owners[ep], w); err != nil {
					t.Fatal(err)
				}
				if err := full.AddOwned(ep, owners[ep], w); err != nil {
					t.Fatal(err)
				}
			}
			in[ep] = !in[ep]
		case r < 8:
			var a, b []int
			fast.TakeParked(func(ep int) { a = append(a, ep) })
			full.TakeParked(func(ep int) { b = append(b, ep) })
			if !slices.Equal(a, b) {
				t.Fatalf("step %d: parked %v and %v", step, a, b)
			}
			for _, ep := range a {
				if set[ep] {
					fast.Unpark(ep)
					full.Unpark(ep)
				}
			}
		}
		if fast.cur != nil && fast.nbusy == 1 && fast.cur.nbusy == 1 && len(fast.idle) == 0 {
			alone++
		}
		e1, ok1 := fast.Next(pf)
		e2, ok2 := full.Next(pl)
		if e1 != e2 || ok1 != ok2 || pf.asked != pl.asked || fast.Rounds() != full.Rounds() {
			t.Fatalf("step %d: shortcut %d %v (asked %d, rounds %d), search %d %v (asked %d, rounds %d)",
				step, e1, ok1, pf.asked, fast.Rounds(), e2, ok2, pl.asked, full.Rounds())
		}
	}
	if alone < 10000 {
		t.Fatalf("the shortcut's case came up %d times", alone)
	}
}
