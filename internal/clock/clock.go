// Package clock gives protocol code a time source it can be handed, so that
// timers (reassembly timeouts, retransmission, leases) run on the real clock
// in production and on a manual clock in tests, which advance time instead of
// sleeping.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time. Implementations are safe for concurrent use.
type Clock interface {
	Now() time.Time
}

// System is the real clock. Its readings are monotonic: the wall-clock
// time when the process started plus the monotonic time since, so they
// do not follow steps of the wall clock, and they compare with time.Now's
// by their monotonic readings as usual.
type System struct{}

// epoch is the process's first reading of the wall and monotonic clocks.
var epoch = time.Now()

// Now returns the current time. It reads only the monotonic clock (one
// vDSO call; time.Now makes two), which matters to engines that read the
// clock on every turn of their loop.
func (System) Now() time.Time { return epoch.Add(time.Since(epoch)) }

// Manual is a clock that moves only when told to. The zero value starts at
// the Unix epoch; use NewManual for another start.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// NewManual returns a manual clock reading start.
func NewManual(start time.Time) *Manual { return &Manual{now: start} }

// Now returns the clock's current reading.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.now.IsZero() {
		m.now = time.Unix(0, 0)
	}
	return m.now
}

// Advance moves the clock forward by d (d < 0 is ignored: clocks do not run
// backwards) and returns the new reading.
func (m *Manual) Advance(d time.Duration) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.now.IsZero() {
		m.now = time.Unix(0, 0)
	}
	if d > 0 {
		m.now = m.now.Add(d)
	}
	return m.now
}
