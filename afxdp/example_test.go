//go:build linux

package afxdp_test

import (
	"errors"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/xam-project/xam/afxdp"
)

// An engine's loop over a Link: poll with Recv while busy, sleep in Wait
// when idle, stop when the link is closed.
func Example() {
	// In the namespace of the device (as root), on queue 0; the loader then
	// registers s.FD() in its XSKMAP.
	s, err := afxdp.Open(2, afxdp.Options{Queue: 0})
	if err != nil {
		log.Fatal(err)
	}
	if info := s.Info(); !info.ZeroCopy {
		log.Printf("copy mode (zero-copy: %v)", info.ZeroCopyErr)
	}
	var l afxdp.Link = s
	frames := make([][]byte, l.BatchSize())
	idle := 0
	for {
		n, err := l.Recv(frames)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		for _, f := range frames[:n] {
			fmt.Printf("%d bytes from %x\n", len(f), f[6:12]) // valid until the next Recv
		}
		if n > 0 {
			idle = 0
			continue
		}
		if idle++; idle > 1000 {
			l.Wait(10 * time.Millisecond) // spins Options.Spin, then poll(2)
		}
	}
}
