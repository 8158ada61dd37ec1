package endpoint

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// A Yielder yields at every look while its yields take long (another
// thread ran on the core), and every YieldEvery once one returns at once.
func TestYielder(t *testing.T) {
	saved := fastest.Load()
	t.Cleanup(func() { fastest.Store(saved) })
	fastest.Store(0)
	var y Yielder
	t0 := time.Unix(1000, 0)
	if !y.Due(t0) {
		t.Fatal("a new Yielder is not due")
	}
	y.yielded(t0, t0.Add(500*time.Nanosecond)) // the fastest yet: nobody else ran
	end := t0.Add(500 * time.Nanosecond)
	if y.Due(end.Add(YieldEvery / 2)) {
		t.Fatal("due again within YieldEvery after a fast yield")
	}
	if !y.Due(end.Add(YieldEvery)) {
		t.Fatal("not due YieldEvery after a fast yield")
	}
	// A yield of 10 µs: another thread had the core meanwhile.
	y.yielded(end, end.Add(10*time.Microsecond))
	if !y.Due(end.Add(10 * time.Microsecond)) {
		t.Fatal("not due at once after a slow yield")
	}
	// A wait that begins after a slow yield yields at once.
	later := t0.Add(time.Hour)
	if y.Restart(later); !y.Due(later) {
		t.Fatal("not due at once on a restart after a slow yield")
	}
	// Back to fast: spaced again.
	y.yielded(t0, t0.Add(700*time.Nanosecond))
	if y.Due(t0.Add(time.Microsecond)) {
		t.Fatal("due at once after a fast yield")
	}
	// A wait that begins long after a fast yield yields YieldEvery later.
	if y.Restart(later); y.Due(later) || !y.Due(later.Add(YieldEvery)) {
		t.Fatal("a restart after a fast yield is not due YieldEvery later")
	}
}

// Spin reports true as soon as ready does, and false after d.
func TestSpin(t *testing.T) {
	var y Yielder
	n := 0
	if !y.Spin(time.Hour, func() bool { n++; return n == 1000 }, nil) || n != 1000 {
		t.Fatalf("Spin returned after %d looks, want 1000", n)
	}
	between := 0
	start := time.Now()
	if y.Spin(20*time.Millisecond, func() bool { return false }, func() { between++ }) {
		t.Fatal("Spin reported ready")
	}
	if time.Since(start) < 20*time.Millisecond || between == 0 {
		t.Fatalf("Spin gave up after %v, %d yields", time.Since(start), between)
	}
	if y.Spin(0, func() bool { return true }, nil) {
		t.Fatal("Spin(0) looked")
	}
}

// A Yielder whose last yields found the core free spins YieldEvery before
// it first yields, however long ago those yields were: a wait's first
// looks, the likeliest to find its answer, come without a yield between.
func TestYielderSpinCarriesOn(t *testing.T) {
	const trials = 20
	quiet := 0
	for range trials {
		var y Yielder
		t0 := time.Unix(1000, 0)
		y.yielded(t0, t0.Add(100*time.Nanosecond)) // long ago, and fast
		looks, yields := 0, 0
		if !y.Spin(time.Hour, func() bool { looks++; return looks == 20 }, func() { yields++ }) {
			t.Fatal("Spin reported not ready")
		}
		if yields == 0 {
			quiet++
		}
	}
	// 20 looks take well under YieldEvery, unless the test is preempted.
	if quiet < trials/2 {
		t.Fatalf("Spin yielded within its first 20 looks in %d of %d trials", trials-quiet, trials)
	}
	// A new Yielder knows nothing of the core: it yields at once.
	var y Yielder
	looks, yields := 0, 0
	y.Spin(time.Hour, func() bool { looks++; return looks == 2 }, func() { yields++ })
	if yields != 1 {
		t.Fatalf("a new Yielder's Spin yielded %d times before its second look, want 1", yields)
	}
}

// Gosched lets a goroutine that waits for the processor run: with one
// processor, one made runnable just before has mostly run when it returns
// (the scheduler takes the yielding goroutine first one time in 61).
func TestGoschedLetsWaitingRun(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const trials = 100
	first := 0
	for range trials {
		var ran atomic.Bool
		go ran.Store(true) // runnable, and waiting: the only processor is this goroutine's
		if Gosched(); ran.Load() {
			first++
		}
		for !ran.Load() {
			runtime.Gosched()
		}
	}
	if first < trials/2 {
		t.Fatalf("the waiting goroutine had run after %d of %d Gosched calls", first, trials)
	}
}
