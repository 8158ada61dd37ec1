package nicfw

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// TestResidencyOwnerBound: owner 1's 64 endpoints fault round and round,
// through their doorbells (TouchIf) and deliveries (Touch), while owner
// 2's endpoint, with work, holds a frame: owner 1's faults never evict it,
// they evict owner 1's own once it holds its share; owner 2 below its
// share evicts owner 1's least recently used, not owner 3's; only when
// every frame of owner 1's is pinned does a delivery take another's
// (Overdrawn), and a doorbell waits.
func TestResidencyOwnerBound(t *testing.T) {
	const R = 8
	const (
		many  = 1 // the owner with 64 endpoints, 0..63
		lone  = 2 // the owner with endpoints 100, 101
		other = 3 // the owner with endpoint 200
	)
	res := newResidency(t, R)
	for ep := range 64 {
		res.SetOwner(ep, many)
	}
	res.SetOwner(100, lone)
	res.SetOwner(101, lone)
	res.SetOwner(200, other)
	if _, err := res.Touch(100); err != nil {
		t.Fatal(err)
	}
	busy := map[int]bool{100: true} // resident endpoints with sends pending
	work := func(ep int) bool { return busy[ep] }
	for i := range 64 * 20 {
		ep := i % 64
		res.BeginPass(work)
		res.Waiting(ep)
		touch := res.Touch
		if i%3 != 0 {
			touch = func(ep int) (Touched, error) { return res.TouchIf(ep, nil) }
		}
		got, err := touch(ep)
		if err != nil {
			t.Fatalf("touch %d of endpoint %d: %v", i, ep, err)
		}
		if got.DidEvict && got.Evicted == 100 {
			t.Fatalf("touch %d of owner %d's endpoint %d evicted owner %d's endpoint 100", i, many, ep, lone)
		}
	}
	if f, ok := res.Resident(100); !ok || res.Held(lone) != 1 || res.Held(many) != R-1 {
		t.Fatalf("endpoint 100 resident %v (frame %d); owner %d holds %d frames, owner %d %d",
			ok, f, lone, res.Held(lone), many, res.Held(many))
	}
	if st := res.Stats(); st.Bounded == 0 || st.Overdrawn != 0 {
		t.Errorf("stats %+v: want faults bounded, none overdrawn", st)
	}

	// Owner 3 faults in (owner 1's least recently used goes: the last
	// round left 57..63 resident), then owner 2's second endpoint: below
	// its share (8/3), it evicts owner 1's least recently used, not owner
	// 3's endpoint, older.
	res.Waiting(200)
	if got, err := res.TouchIf(200, nil); err != nil || !got.DidEvict || got.Evicted != 57 {
		t.Fatalf("owner %d's fault: %+v, %v; want endpoint 57 evicted", other, got, err)
	}
	if got, err := res.TouchIf(101, nil); err != nil || !got.DidEvict || got.Evicted != 58 {
		t.Fatalf("owner %d's second fault: %+v, %v; want endpoint 58 evicted", lone, got, err)
	}

	// Owner 1 (5 frames, above its share of 8/3) pins all its frames: a
	// doorbell of its waits, a delivery to it takes the least recently
	// used of the others'.
	for ep := 59; ep < 64; ep++ {
		if err := res.Hold(ep); err != nil {
			t.Fatal(err)
		}
	}
	busy[200] = true
	res.BeginPass(work)
	res.Waiting(0)
	if got, err := res.TouchIf(0, nil); !errors.Is(err, ErrMustWait) || got != (Touched{}) {
		t.Fatalf("doorbell of owner %d with its frames pinned: %+v, %v; want ErrMustWait", many, got, err)
	}
	if !res.Stuck(0) || res.Stuck(100) {
		t.Errorf("stuck: owner %d %v, owner %d %v", many, res.Stuck(0), lone, res.Stuck(100))
	}
	got, err := res.Touch(0)
	if err != nil || !got.DidEvict || got.Evicted != 100 {
		t.Fatalf("delivery to owner %d with its frames pinned: %+v, %v; want endpoint 100 evicted", many, got, err)
	}
	if st := res.Stats(); st.Overdrawn != 1 {
		t.Errorf("stats %+v: want 1 overdrawn", st)
	}
}

// TestResidencyOwnersShare: two owners with many endpoints waiting fault,
// one three times as often as the other: each ends up with half the
// frames (plain LRU would give the first three quarters); one alone with
// work takes them all.
func TestResidencyOwnersShare(t *testing.T) {
	const R = 8
	res := newResidency(t, R)
	for ep := range 64 {
		res.SetOwner(ep, uint32(1+ep%2)) // even: owner 1, odd: owner 2
	}
	for i := range 64 * 10 {
		res.BeginPass(nil)
		ep := 2 * (i % 32) // owner 1's
		if i%4 == 3 {
			ep++ // owner 2's
		}
		res.Waiting(ep)
		res.Waiting(ep ^ 1) // the other owner waits too
		if _, err := res.TouchIf(ep, nil); err != nil {
			t.Fatal(err)
		}
	}
	if res.Held(1) != R/2 || res.Held(2) != R/2 {
		t.Errorf("owners hold %d and %d frames, want %d each", res.Held(1), res.Held(2), R/2)
	}
	// Owner 2 stops: after a pass it has no work, and owner 1 takes its
	// frames as it faults.
	for i := range 64 {
		res.BeginPass(nil)
		ep := 2 * (i % 32)
		res.Waiting(ep)
		if _, err := res.TouchIf(ep, nil); err != nil {
			t.Fatal(err)
		}
	}
	if res.Held(1) != R || res.Held(2) != 0 || res.Share(1) != R {
		t.Errorf("owner 1 alone: holds %d frames (share %d), owner 2 %d", res.Held(1), res.Share(1), res.Held(2))
	}
	// A resident endpoint that changes owner moves its frame.
	res.SetOwner(0, 5)
	if _, ok := res.Resident(0); ok && (res.Held(5) != 1 || res.Held(1) != R-1) {
		t.Errorf("after SetOwner: owner 5 holds %d, owner 1 %d", res.Held(5), res.Held(1))
	}
}

// TestResidencyOwnersRandom runs random passes, waits, touches, holds,
// releases, unloads and changes of owner over 24 endpoints of three
// owners and checks the books after every step: every owner's frames are
// counted, the owners with work are those marked in the pass, a pinned
// endpoint is never evicted, and a fault of an owner at its share takes
// another's frame only from an owner without work, or (a delivery) when
// none of its own may go (Overdrawn).
func TestResidencyOwnersRandom(t *testing.T) {
	const R = 6
	rng := rand.New(rand.NewPCG(7, 8))
	res := newResidency(t, R)
	for ep := range 24 {
		res.SetOwner(ep, uint32(ep%3))
	}
	busy := map[int]bool{}
	work := func(ep int) bool { return busy[ep] }
	var faults, bounded uint64
	for step := range 200000 {
		ep := rng.IntN(24)
		switch op := rng.IntN(20); {
		case op < 2:
			for e := range 24 {
				busy[e] = rng.IntN(3) == 0
			}
			res.BeginPass(work)
		case op < 5:
			res.Waiting(ep)
		case op < 12:
			o := res.Owner(ep)
			held, share := res.Held(o), res.Share(o)
			_, wasResident := res.Resident(ep)
			ownFree := false // an endpoint of o's own that could go
			for i := range res.frames {
				f := &res.frames[i]
				ownFree = ownFree || f.used && f.book.owner == o && f.outstanding == 0
			}
			before := res.Stats()
			strict := op < 9
			var got Touched
			var err error
			if strict {
				got, err = res.TouchIf(ep, nil)
			} else {
				got, err = res.Touch(ep)
			}
			after := res.Stats()
			if err != nil {
				if !errors.Is(err, ErrMustWait) || !strict && after.Overdrawn != before.Overdrawn {
					t.Fatalf("step %d: touch %d: %v", step, ep, err)
				}
				break
			}
			if !got.Fault {
				if !wasResident {
					t.Fatalf("step %d: endpoint %d was not resident and did not fault", step, ep)
				}
				break
			}
			faults++
			if got.DidEvict && held >= share {
				victim := res.Owner(got.Evicted)
				idle := !res.working(res.books[victim])
				if victim != o && !idle && (ownFree || strict) {
					t.Fatalf("step %d: owner %d at its share (%d of %d) evicted owner %d's endpoint %d, with work",
						step, o, held, share, victim, got.Evicted)
				}
				if victim != o && !idle && after.Overdrawn != before.Overdrawn+1 {
					t.Fatalf("step %d: owner %d overdrew, not counted", step, o)
				}
			}
			bounded += after.Bounded - before.Bounded
		case op < 14:
			if _, ok := res.Resident(ep); ok {
				if err := res.Hold(ep); err != nil {
					t.Fatal(err)
				}
			}
		case op < 18:
			if res.Outstanding(ep) > 0 {
				if err := res.Release(ep); err != nil {
					t.Fatal(err)
				}
			}
		case op < 19:
			if _, ok := res.Resident(ep); ok && res.Outstanding(ep) == 0 {
				if err := res.Unload(ep); err != nil {
					t.Fatal(err)
				}
			}
		default:
			res.SetOwner(ep, uint32(rng.IntN(3)))
		}
		checkBooks(t, step, res)
	}
	t.Logf("stats %+v", res.Stats())
	if faults == 0 || bounded == 0 || res.Stats().Overdrawn == 0 {
		t.Errorf("the random run never faulted, was never bounded or never overdrew: %+v", res.Stats())
	}
}

// checkBooks checks res's owner books against its frames.
func checkBooks(t *testing.T, step int, res *Residency) {
	t.Helper()
	held := map[uint32]int{}
	for i := range res.frames {
		f := &res.frames[i]
		if !f.used {
			continue
		}
		if f.book == nil || f.book.owner != res.Owner(f.ep) || res.books[f.book.owner] != f.book {
			t.Fatalf("step %d: frame %d (endpoint %d of owner %d) has book %+v", step, i, f.ep, res.Owner(f.ep), f.book)
		}
		held[f.book.owner]++
	}
	waiting, active := 0, 0
	for o, b := range res.books {
		if b.frames != held[o] {
			t.Fatalf("step %d: owner %d holds %d frames, its book says %d", step, o, held[o], b.frames)
		}
		if b.frames == 0 {
			waiting++
			if !res.working(b) {
				t.Fatalf("step %d: owner %d has a book, no frame and no work", step, o)
			}
		}
		if res.working(b) {
			active++
		}
	}
	if waiting != res.waiting || active != res.active {
		t.Fatalf("step %d: %d owners waiting without frames (counted %d), %d with work (counted %d)", step, waiting, res.waiting, active, res.active)
	}
}
