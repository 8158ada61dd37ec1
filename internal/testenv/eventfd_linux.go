package testenv

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// EventFD is an eventfd for tests of blocking waits, as xam's daemon hands
// them out: an endpoint's notification, the engine's wake descriptor.
type EventFD int

// NewEventFD returns a non-blocking eventfd that t closes when it ends.
func NewEventFD(t testing.TB) EventFD {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return EventFD(fd)
}

// Signal adds 1 to the counter, as the daemon's notify and kick do.
func (f EventFD) Signal() {
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	unix.Write(int(f), one[:])
}

// Wait blocks until the counter is not zero, resets it and reports true;
// false after timeout.
func (f EventFD) Wait(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		ms := int(time.Until(deadline) / time.Millisecond)
		if ms <= 0 {
			return false
		}
		fds := []unix.PollFd{{Fd: int32(f), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n > 0 {
			f.reset()
			return true
		}
	}
}

// Block waits until the counter is not zero or timeout passes (at least a
// millisecond), resets the counter and returns nil either way, as a
// firmware-mode endpoint's blocking wait does.
func (f EventFD) Block(timeout time.Duration) error {
	ms := max(int((timeout+time.Millisecond-1)/time.Millisecond), 1)
	fds := []unix.PollFd{{Fd: int32(f), Events: unix.POLLIN}}
	if _, err := unix.Poll(fds, ms); err != nil && !errors.Is(err, unix.EINTR) {
		return err
	}
	f.reset()
	return nil
}

// reset reads the counter back to zero (EAGAIN when it was).
func (f EventFD) reset() {
	var b [8]byte
	unix.Read(int(f), b[:])
}
