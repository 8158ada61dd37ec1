//go:build linux

package ssam

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/internal/netnstest"
)

// rawInjector returns a pair's inject function over a veth pair: a packet
// socket in each host's namespace sends whole frames out of its veth end,
// beside the host's AF_XDP socket, towards the other host.
func rawInjector(t *testing.T, v *netnstest.Pair) func(toB bool, frames [][]byte) error {
	t.Helper()
	var fds [2]int
	for i, h := range []*netnstest.Host{v.A, v.B} {
		err := h.Do(func() (err error) {
			fds[i], err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0) // protocol 0: send only
			return err
		})
		if err != nil {
			t.Fatalf("packet socket in %s: %v", h.NS, err)
		}
		fd := fds[i]
		t.Cleanup(func() { unix.Close(fd) })
	}
	return func(toB bool, frames [][]byte) error {
		fd, h := fds[1], v.B
		if toB {
			fd, h = fds[0], v.A
		}
		for _, f := range frames {
			sa := &unix.SockaddrLinklayer{Ifindex: h.Index, Halen: 6}
			copy(sa.Addr[:], f[:6])
			if err := unix.Sendto(fd, f, 0, sa); err != nil {
				return fmt.Errorf("sending a %d-byte frame from %s: %w", len(f), h, err)
			}
		}
		return nil
	}
}
