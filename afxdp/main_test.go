//go:build linux

package afxdp_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/xam-project/xam/internal/testenv"
)

// TestMain fails the run if the tests leave AF_XDP sockets, eventfds, BPF
// objects, socket mappings (rings) or UMEM mappings behind.
func TestMain(m *testing.M) { testenv.MainWithLeakCheck(m) }

// checkGoroutines fails the test if, after its cleanups, more goroutines run
// than at its start (wireguard-go's goroutineLeakCheck).
func checkGoroutines(t *testing.T) {
	start := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > start {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("%d goroutines at the end, %d at the start:\n%s", runtime.NumGoroutine(), start, buf)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}
