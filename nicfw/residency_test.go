package nicfw

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// lruModel is the obvious reference: resident endpoints ordered from least
// to most recently used, and their outstanding counts.
type lruModel struct {
	r     int
	order []int
	held  map[int]int
}

// touch returns whether ep faults, the endpoint evicted (-1 for none) and
// whether the fault must wait.
func (m *lruModel) touch(ep int) (fault bool, evicted int, wait bool) {
	if i := slices.Index(m.order, ep); i >= 0 {
		m.order = append(slices.Delete(m.order, i, i+1), ep)
		return false, -1, false
	}
	evicted = -1
	if len(m.order) == m.r {
		i := slices.IndexFunc(m.order, func(e int) bool { return m.held[e] == 0 })
		if i < 0 {
			return true, -1, true
		}
		evicted = m.order[i]
		m.order = slices.Delete(m.order, i, i+1)
	}
	m.order = append(m.order, ep)
	return true, evicted, false
}

func newResidency(t *testing.T, r int) *Residency {
	t.Helper()
	res, err := NewResidency(r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkFrames checks that the resident endpoints occupy distinct frames and
// are exactly the model's.
func checkFrames(t *testing.T, res *Residency, m *lruModel) {
	t.Helper()
	if len(res.where) != len(m.order) {
		t.Fatalf("%d resident, model has %d", len(res.where), len(m.order))
	}
	seen := map[int]bool{}
	for _, ep := range m.order {
		f, ok := res.Resident(ep)
		if !ok || seen[f] || res.frames[f].ep != ep {
			t.Fatalf("endpoint %d: frame %d, resident %v (frames %+v)", ep, f, ok, res.frames)
		}
		seen[f] = true
	}
}

func TestResidencyConfig(t *testing.T) {
	if _, err := NewResidency(0); !errors.Is(err, ErrConfig) {
		t.Errorf("NewResidency(0): %v", err)
	}
}

// TestResidencyCyclic touches 4R endpoints round and round: under LRU every
// touch faults and, once the frames are full, evicts the endpoint touched
// R touches earlier.
func TestResidencyCyclic(t *testing.T) {
	const R = 8
	res := newResidency(t, R)
	for i := range 40 * R {
		ep := i % (4 * R)
		got, err := res.Touch(ep)
		if err != nil || !got.Fault || got.DidEvict != (i >= R) || got.DidEvict && got.Evicted != (i-R)%(4*R) {
			t.Fatalf("touch %d of endpoint %d = %+v, %v", i, ep, got, err)
		}
		if f, ok := res.Resident(ep); !ok || f != got.Frame {
			t.Fatalf("endpoint %d not resident after its touch", ep)
		}
	}
	if st := res.Stats(); st != (ResidencyStats{Touches: 40 * R, Faults: 40 * R, Evictions: 39 * R}) {
		t.Errorf("stats %+v", st)
	}
	// A working set that fits faults once per endpoint.
	res = newResidency(t, R)
	for i := range 100 {
		res.Touch(i % R)
	}
	if st := res.Stats(); st.Faults != R || st.Evictions != 0 {
		t.Errorf("working set of R: stats %+v", st)
	}
}

// TestResidencyRandom runs random touches, holds and releases over 4R
// endpoints against the reference model: every touch ends resident (or
// must wait exactly when the model says every frame is pinned), the right
// endpoint is evicted, a pinned endpoint never is, and the counters add up.
func TestResidencyRandom(t *testing.T) {
	const R = 6
	rng := rand.New(rand.NewPCG(3, 4))
	res := newResidency(t, R)
	m := &lruModel{r: R, held: map[int]int{}}
	var want ResidencyStats
	for step := range 100000 {
		ep := rng.IntN(4 * R)
		// Phases of 10000 steps: holds outrun releases (pins pile up until
		// faults must wait), then releases outrun holds.
		holdUpTo := map[bool]int{true: 9, false: 7}[step/10000%2 == 0]
		switch op := rng.IntN(10); {
		case op < 6:
			fault, evicted, wait := m.touch(ep)
			got, err := res.Touch(ep)
			want.Touches++
			switch {
			case wait:
				want.Waits++
				if !errors.Is(err, ErrMustWait) {
					t.Fatalf("step %d: touch %d = %+v, %v; want ErrMustWait", step, ep, got, err)
				}
			case err != nil || got.Fault != fault || got.DidEvict != (evicted >= 0) || got.DidEvict && got.Evicted != evicted:
				t.Fatalf("step %d: touch %d = %+v, %v; want fault %v evicting %d", step, ep, got, err, fault, evicted)
			default:
				if fault {
					want.Faults++
				}
				if evicted >= 0 {
					want.Evictions++
					if m.held[evicted] != 0 {
						t.Fatalf("step %d: pinned endpoint %d evicted", step, evicted)
					}
				}
				if f, ok := res.Resident(ep); !ok || f != got.Frame {
					t.Fatalf("step %d: endpoint %d not resident in frame %d after its touch", step, ep, got.Frame)
				}
			}
		case op < holdUpTo:
			err := res.Hold(ep)
			if resident := slices.Contains(m.order, ep); resident != (err == nil) || !resident && !errors.Is(err, ErrNotResident) {
				t.Fatalf("step %d: hold %d: %v (resident %v)", step, ep, err, resident)
			}
			if err == nil {
				m.held[ep]++
			}
		default:
			// Release an endpoint that has outstanding messages, if any.
			for e, n := range m.held {
				if n > 0 {
					ep = e
					break
				}
			}
			err := res.Release(ep)
			if m.held[ep] > 0 {
				if err != nil {
					t.Fatalf("step %d: release %d: %v", step, ep, err)
				}
				m.held[ep]--
			} else if err == nil {
				t.Fatalf("step %d: release %d without a hold succeeded", step, ep)
			}
		}
		checkFrames(t, res, m)
		for e, n := range m.held {
			if res.Outstanding(e) != n {
				t.Fatalf("step %d: endpoint %d has %d outstanding, want %d", step, e, res.Outstanding(e), n)
			}
		}
	}
	if res.Stats() != want {
		t.Errorf("stats %+v, want %+v", res.Stats(), want)
	}
	t.Logf("stats %+v", want)
	if want.Waits == 0 || want.Evictions == 0 {
		t.Errorf("the random run never had to wait or never evicted: %+v", want)
	}
}

func TestResidencyAllPinned(t *testing.T) {
	const R = 3
	res := newResidency(t, R)
	for ep := range R {
		if _, err := res.Touch(ep); err != nil {
			t.Fatal(err)
		}
		if err := res.Hold(ep); err != nil {
			t.Fatal(err)
		}
	}
	if err := res.Unload(1); !errors.Is(err, ErrPinned) {
		t.Errorf("unloading a pinned endpoint: %v", err)
	}
	for range 3 {
		if got, err := res.Touch(R); !errors.Is(err, ErrMustWait) || got != (Touched{}) {
			t.Fatalf("touch with every frame pinned = %+v, %v; want ErrMustWait", got, err)
		}
	}
	if _, ok := res.Resident(R); ok {
		t.Fatal("an endpoint that had to wait became resident")
	}
	// Endpoint 1's acknowledgement arrives: it is the one to go, although
	// endpoint 0 was used less recently.
	if err := res.Release(1); err != nil {
		t.Fatal(err)
	}
	if err := res.Release(1); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second release: %v", err)
	}
	got, err := res.Touch(R)
	if err != nil || !got.DidEvict || got.Evicted != 1 {
		t.Fatalf("touch after the release = %+v, %v; want endpoint 1 evicted", got, err)
	}
	if err := res.Hold(1); !errors.Is(err, ErrNotResident) {
		t.Errorf("hold of an evicted endpoint: %v", err)
	}
	if err := res.Unload(R); err != nil {
		t.Fatal(err)
	}
	if err := res.Unload(R); !errors.Is(err, ErrNotResident) {
		t.Errorf("second unload: %v", err)
	}
	if got, err := res.Touch(7); err != nil || !got.Fault || got.DidEvict {
		t.Errorf("touch into the unloaded frame = %+v, %v", got, err)
	}
	want := ResidencyStats{Touches: R + 3 + 2, Faults: R + 2, Evictions: 1, Waits: 3}
	if res.Stats() != want {
		t.Errorf("stats %+v, want %+v", res.Stats(), want)
	}
}
