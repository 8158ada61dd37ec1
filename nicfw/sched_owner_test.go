package nicfw

import (
	"math/rand/v2"
	"testing"
)

// TestSchedulerOwners: owner 1 has 64 busy endpoints, owner 2 one: the
// one gets half the sends, and owner 1's are shared evenly among its 64.
func TestSchedulerOwners(t *testing.T) {
	for _, loiter := range []int{1, 2, 4} {
		s, err := NewScheduler(loiter)
		if err != nil {
			t.Fatal(err)
		}
		const many, lone = 64, 64
		for ep := range many {
			if err := s.AddOwned(ep, 1, 1); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.AddOwned(lone, 2, 1); err != nil {
			t.Fatal(err)
		}
		p := all(many + 1)
		const n = 100 * many
		counts := make([]int, many+1)
		for range n {
			ep, ok := s.Next(p)
			if !ok {
				t.Fatal("nothing chosen with every endpoint busy")
			}
			counts[ep]++
		}
		if counts[lone] < n/2-loiter || counts[lone] > n/2+loiter {
			t.Errorf("loiter %d: the lone endpoint of owner 2 sent %d of %d, want half", loiter, counts[lone], n)
		}
		for ep := range many {
			if want := n / 2 / many; counts[ep] < want-1 || counts[ep] > want+1 {
				t.Errorf("loiter %d: endpoint %d of owner 1 sent %d, want %d", loiter, ep, counts[ep], want)
			}
		}
	}
}

// TestSchedulerOwnersWeights: within an owner the weights share its sends;
// across owners they do not count.
func TestSchedulerOwnersWeights(t *testing.T) {
	s, err := NewScheduler(2)
	if err != nil {
		t.Fatal(err)
	}
	for ep, w := range []int{1, 3} {
		if err := s.AddOwned(ep, 7, w); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddOwned(2, 9, MaxWeight); err != nil {
		t.Fatal(err)
	}
	p := all(3)
	counts := make([]int, 3)
	for range 8000 {
		ep, _ := s.Next(p)
		counts[ep]++
	}
	if counts[2] != 4000 || counts[0] != 1000 || counts[1] != 3000 {
		t.Errorf("sends %v, want [1000 3000 4000]: owners equal, weights 1:3 within owner 7", counts)
	}
}

// TestSchedulerOwnersRandom changes which endpoints of three owners are
// pending at random and checks at every step: the chosen endpoint is
// pending; nothing is chosen only when nothing is pending; an owner with
// an endpoint pending throughout sends within (owners-1)*loiter decisions
// of the others; an endpoint sends at most loiter in a row while one of
// another owner is pending; and removing and adding endpoints keeps these.
func TestSchedulerOwnersRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const loiter = 3
	owners := []uint32{10, 20, 30}
	s, err := NewScheduler(loiter)
	if err != nil {
		t.Fatal(err)
	}
	// 8 endpoints (at most schedSweep idle, so a busy one is noticed at
	// the next visit's end): owner 10 has 1, owner 20 3, owner 30 4.
	ownerOf := map[int]uint32{0: 10, 1: 20, 2: 20, 3: 20, 4: 30, 5: 30, 6: 30, 7: 30}
	in := map[int]bool{}
	for ep := range 8 {
		if err := s.AddOwned(ep, ownerOf[ep], 1+rng.IntN(4)); err != nil {
			t.Fatal(err)
		}
		in[ep] = true
	}
	p := &pendingSet{set: map[int]bool{}}
	waited := map[uint32]int{} // decisions since the owner last sent, while it had an endpoint pending
	last, row := -1, 0
	for step := range 100000 {
		switch r := rng.IntN(40); {
		case r < 10:
			ep := rng.IntN(8)
			p.set[ep] = !p.set[ep]
		case r == 10:
			// An endpoint leaves (eviction) and comes back later.
			ep := rng.IntN(8)
			if in[ep] {
				s.Remove(ep)
			} else if err := s.AddOwned(ep, ownerOf[ep], 1+rng.IntN(4)); err != nil {
				t.Fatal(err)
			}
			in[ep] = !in[ep]
		}
		pendingOf := map[uint32]bool{}
		anyPending := false
		for ep := range 8 {
			if in[ep] && p.set[ep] {
				pendingOf[ownerOf[ep]] = true
				anyPending = true
			}
		}
		otherWaits := false
		if last >= 0 {
			for _, o := range owners {
				otherWaits = otherWaits || o != ownerOf[last] && pendingOf[o]
			}
		}
		ep, ok := s.Next(p)
		if ok != anyPending || ok && (!p.set[ep] || !in[ep]) {
			t.Fatalf("step %d: Next = %d, %v with pending %v", step, ep, ok, p.set)
		}
		for _, o := range owners {
			switch {
			case !pendingOf[o] || ok && ownerOf[ep] == o:
				waited[o] = 0
			default:
				if waited[o]++; waited[o] > (len(owners)-1)*loiter {
					t.Fatalf("step %d: owner %d waited %d decisions with an endpoint pending", step, o, waited[o])
				}
			}
		}
		switch {
		case ok && ep == last && otherWaits:
			if row++; row > loiter {
				t.Fatalf("step %d: endpoint %d sent %d in a row while another owner's waited", step, ep, row)
			}
		case ok:
			last, row = ep, 1
		default:
			last, row = -1, 0
		}
	}
}

// TestSchedulerIdleCost: a decision among many idle endpoints asks about
// a bounded number of them, and an idle endpoint that becomes busy is
// chosen soon, and keeps its place.
func TestSchedulerIdleCost(t *testing.T) {
	const n = 1000
	s := newSched(t, 2, make1s(n)...)
	p := &pendingSet{set: map[int]bool{10: true, 500: true}}
	s.Next(p) // finds them (and asks about everybody once)
	p.asked = 0
	const decisions = 1000
	for range decisions {
		if ep, ok := s.Next(p); !ok || ep != 10 && ep != 500 {
			t.Fatalf("Next = %d, %v", ep, ok)
		}
	}
	if p.asked > decisions*(schedSweep+3) {
		t.Errorf("%d decisions asked %d times about %d endpoints", decisions, p.asked, n)
	}
	// Endpoint 700 becomes busy: noticed within n/schedSweep visits.
	p.set[700] = true
	for i := range n {
		if ep, _ := s.Next(p); ep == 700 {
			t.Logf("endpoint 700 chosen after %d decisions", i+1)
			return
		}
	}
	t.Errorf("endpoint 700 not chosen in %d decisions", n)
}

func make1s(n int) []int {
	w := make([]int, n)
	for i := range w {
		w[i] = 1
	}
	return w
}
