package endpoint

import (
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// Spin looks for up to d whether ready reports true, and reports whether
// it did: the adaptive wait of an application whose engine runs in a
// daemon, which spares a message that comes soon the eventfd's wake-up.
// Between looks it yields the processor to other threads (as often as
// other threads take it, or every YieldEvery while none does) and, when
// one waits for it, to other goroutines (Gosched), calling between (if
// set) first: the daemon's engine may need this core. The yields go on
// from those of y's earlier spins: where they found no other thread
// wanting the core, the spin's first yield comes YieldEvery after it
// starts, not at its first look. A message that comes during a yield
// waits for it (about half a microsecond), and a wait's first looks are
// those most likely to find the answer it waits for.
func (y *Yielder) Spin(d time.Duration, ready func() bool, between func()) bool {
	if d <= 0 {
		return false
	}
	start := time.Now()
	y.Restart(start)
	for i := 0; ; i++ {
		if ready() {
			return true
		}
		if y.gap > 0 && i&15 != 15 {
			continue // no thread wanted the core at the last yield: look again
		}
		now := time.Now()
		if now.Sub(start) >= d {
			return false
		}
		if !y.Due(now) {
			continue
		}
		if between != nil {
			between()
		}
		Gosched()
		y.Yield(now)
	}
}

// Gosched yields the goroutine's processor to the process's other
// goroutines (runtime.Gosched) when one of them is runnable and waits for
// one, and otherwise returns at once. A runtime.Gosched that nobody waits
// for is not free: with a processor idle, the runtime wakes a thread to
// run the yielding goroutine there (a futex wake-up, and a thread spinning
// on another core, which a daemon's engine may need), and from a goroutine
// locked to its thread (runtime.LockOSThread) it hands the processor to
// another thread and back, microseconds each time; a firmware-mode wait
// that yielded so between its looks took 25 µs a round trip where it
// takes 3 without (BenchmarkAMIIRoundTripFirmware/group,wait, two CPUs).
// The runnable goroutines are counted by runtime/metrics (about 100 ns,
// under the scheduler's lock); while another goroutine counts, this one
// does not yield.
func Gosched() {
	if !runnable.mu.TryLock() {
		return
	}
	metrics.Read(runnable.s[:])
	n := runnable.s[0].Value.Uint64()
	runnable.mu.Unlock()
	if n > 0 {
		runtime.Gosched()
	}
}

// runnable is Gosched's sample of the runnable goroutines, one for the
// process: its goroutines take turns reading it.
var runnable = struct {
	mu sync.Mutex
	s  [1]metrics.Sample
}{s: [1]metrics.Sample{{Name: "/sched/goroutines/runnable:goroutines"}}}

// YieldEvery is how often a spinning wait yields the processor while no
// other thread takes it when it does (Yielder).
const YieldEvery = 2 * time.Microsecond

// Yielder yields the processor from a loop that spins, as often as the
// core is wanted. A yield is a system call (about half a microsecond in a
// virtual machine), and what the loop waits for waits meanwhile: between
// every two looks it made a message wait a quarter of a microsecond on
// average. So a yield that returns at once (no other thread ran) makes
// the next one wait YieldEvery; one that took longer (another thread ran
// on this core: an engine, another application) makes the next one come
// at the next look, as on a machine with fewer cores than busy threads.
// The zero value is ready.
type Yielder struct {
	last time.Time     // when the last yield returned
	gap  time.Duration // the next yield's distance from it
}

// Restart tells y that a wait begins now (a spin, an engine's first turn
// without work): where its last yields found the core free, the next is
// due YieldEvery from now, not at once, since what the wait is for comes
// soonest at its start, and a yield then would make it wait.
func (y *Yielder) Restart(now time.Time) {
	if y.gap > 0 {
		y.last = now
	}
}

// Due reports whether the loop should yield now (now: the caller's clock).
func (y *Yielder) Due(now time.Time) bool { return y.gap == 0 || now.Sub(y.last) >= y.gap }

// Yield yields the processor (Yield) and sets when the next yield is due;
// now is the caller's clock read just before.
func (y *Yielder) Yield(now time.Time) {
	Yield()
	y.yielded(now, time.Now())
}

// yielded sets when the next yield is due after one from start to end.
func (y *Yielder) yielded(start, end time.Time) {
	y.last = end
	took := end.Sub(start)
	if took <= 2*fastestYield(took)+yieldSlack {
		y.gap = YieldEvery // nobody else ran meanwhile
	} else {
		y.gap = 0
	}
}

// yieldSlack is what a yield may take beyond twice the fastest one seen
// and still count as one in which no other thread ran.
const yieldSlack = 500 * time.Nanosecond

// fastest is the fastest yield seen in this process (nanoseconds; 0: none).
var fastest atomic.Int64

// fastestYield records a yield that took took, and returns the fastest
// one seen: the cost of the system call when no other thread runs.
func fastestYield(took time.Duration) time.Duration {
	for {
		f := fastest.Load()
		if f != 0 && f <= int64(took) {
			return time.Duration(f)
		}
		if fastest.CompareAndSwap(f, int64(took)) {
			return took
		}
	}
}

// Backoff is the sleep of a firmware-mode wait between its looks at
// something that notifies nothing (the daemon taking a descriptor, or
// done with one): MinBackoff at first, twice the last each time up to
// MaxBackoff, so that a short wait stays short and a long one sleeps
// instead of holding a core the daemon needs. The zero value is ready.
type Backoff struct{ pause time.Duration }

// The bounds of a Backoff's sleeps.
const (
	MinBackoff = 50 * time.Microsecond
	MaxBackoff = 20 * time.Millisecond
)

// Next returns the next sleep, at most left (0 at a deadline: a last look).
func (b *Backoff) Next(left time.Duration) time.Duration {
	b.pause = min(max(2*b.pause, MinBackoff), MaxBackoff, left)
	return b.pause
}

// Reset starts the sleeps again from MinBackoff: the wait found work.
func (b *Backoff) Reset() { b.pause = 0 }
