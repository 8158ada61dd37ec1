package netnstest

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/vishvananda/netns"
)

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
	return onLockedThread(func() error {
		if err := netns.Set(h.Handle); err != nil {
			return fmt.Errorf("entering namespace %s: %w", h.NS, err)
		}
		return fn()
	})
}

// errGoexit is returned by onLockedThread when fn did not return.
var errGoexit = errors.New("netnstest: function called runtime.Goexit (t.FailNow or t.SkipNow outside the test goroutine?)")

// onLockedThread runs fn on a new goroutine locked to its OS thread and then
// returns the thread to the network namespace it started in. fn may switch
// the thread to other namespaces. If the thread cannot be returned, the
// goroutine exits still locked, which makes the runtime end the thread.
func onLockedThread(fn func() error) error {
	type result struct {
		err      error // fn's
		restore  error // returning the thread
		returned bool  // fn returned (did not panic or Goexit)
		panicked any
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread() // not switched yet
			done <- result{err: fmt.Errorf("getting the thread's namespace: %w", err), returned: true}
			return
		}
		var r result
		defer func() {
			if !r.returned {
				if p := recover(); p != nil {
					r.panicked = fmt.Sprintf("%v\n\ngoroutine of netnstest.Do:\n%s", p, debug.Stack())
				}
			}
			r.restore = restore(orig)
			if r.restore == nil {
				runtime.UnlockOSThread()
			} // else: exit locked, and the thread goes with the goroutine
			orig.Close()
			done <- r
		}()
		r.err = fn()
		r.returned = true
	}()
	r := <-done
	if r.panicked != nil {
		panic(r.panicked)
	}
	if !r.returned {
		return errors.Join(errGoexit, r.restore)
	}
	return errors.Join(r.err, r.restore)
}

// restore switches the calling thread to orig and checks that it got there.
func restore(orig netns.NsHandle) error {
	if err := netns.Set(orig); err != nil {
		return fmt.Errorf("netnstest: returning thread to its namespace: %w", err)
	}
	cur, err := netns.Get()
	if err != nil {
		return fmt.Errorf("netnstest: checking the thread's namespace: %w", err)
	}
	defer cur.Close()
	if !cur.Equal(orig) {
		return fmt.Errorf("netnstest: thread in namespace %v after returning to %v", cur, orig)
	}
	return nil
}
