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

// Sockets on four queues of one device sharing one UMEM: each has its own
// rings and its own chunks, and the memory goes with the last socket.
func ExampleOpenShared() {
	socks, err := afxdp.OpenShared(2, []int{0, 1, 2, 3}, afxdp.Options{FillSize: 1024, TxSize: 1024})
	if err != nil {
		log.Fatal(err) // errors.Is(err, afxdp.ErrNotSupported) before Linux 5.10
	}
	for _, s := range socks {
		// The loader registers each socket at the key of its queue.
		fmt.Printf("queue %d: fd %d, chunks from UMEM address %#x\n", s.Info().Queue, s.FD(), s.Info().ChunkBase)
		defer s.Close()
	}
	// ... one receive loop per socket, as in the package example.
}
