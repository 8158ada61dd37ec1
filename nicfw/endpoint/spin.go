package endpoint

import (
	"runtime"
	"time"
)

// Spin looks for up to d whether ready reports true, and reports whether
// it did: the adaptive wait of an application whose engine runs in a
// daemon, which spares a message that comes soon the eventfd's wake-up.
// Between looks it calls between (if set), then yields the processor to
// other goroutines and other threads (Yield): the daemon's engine may
// need this core.
func Spin(d time.Duration, ready func() bool, between func()) bool {
	if d <= 0 {
		return false
	}
	start := time.Now()
	for i := 0; ; i++ {
		if ready() {
			return true
		}
		if i&15 == 15 && time.Since(start) >= d {
			return false
		}
		if between != nil {
			between()
		}
		runtime.Gosched()
		Yield()
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
