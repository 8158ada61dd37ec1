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
