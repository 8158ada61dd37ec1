package netnstest

import "github.com/xam-project/xam/lab"

// Do runs fn on a goroutine locked to its own OS thread, which is switched
// into h's namespace, and returns fn's error. Sockets and other per-namespace
// objects that fn creates stay in that namespace and may be used from any
// goroutine afterwards. fn must not call t.FailNow, t.Fatal or t.Skip (they
// may only be called from the test's goroutine); Do reports an error if fn
// calls runtime.Goexit, and re-panics on the caller's goroutine if fn panics.
//
// The thread is switched back afterwards; if that fails, the goroutine exits
// without unlocking and the runtime ends the thread, and Do reports the error.
// Do may be called concurrently, until the pair's cleanup.
func (h *Host) Do(fn func() error) error {
	return (&lab.Namespace{Name: h.NS, Handle: h.Handle}).Do(fn)
}
