//go:build linux

package amii

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon/daemontest"
	"github.com/xam-project/xam/nicfw/transport"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// A Shared endpoint in firmware mode, used by six goroutines at once: four
// send requests (sharing its K credits), one blocks in Wait and runs the
// handlers, and the test's goroutine drains. Every request is answered
// exactly once; the server endpoint is served by a goroutine of its own.
// The daemons run on a memlink pair that loses 2% of the frames;
// TestAMIISharedOverAFXDP runs the same body over AF_XDP.
func TestAMIIShared(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{Loss: 0.02, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	sharedBody(t, la, lb)
}

// TestAMIISharedOverAFXDP is TestAMIIShared's body with the daemons on a
// veth pair, over AF_XDP, xam's XDP program dropping 2% of the frames.
func TestAMIISharedOverAFXDP(t *testing.T) {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	var links [2]afxdp.Link
	for i, h := range []*netnstest.Host{v.A, v.B} {
		_, links[i] = xdptest.Open(t, h.Do, h.Index, h.MAC, 0.02, uint64(7+i))
	}
	sharedBody(t, links[0], links[1])
}

// startDaemons runs a firmware daemon on each link (hosts amiiHostA and
// amiiHostB), retransmitting after a millisecond, and returns their
// sockets.
func startDaemons(t *testing.T, la, lb afxdp.Link) (pa, pb string) {
	t.Helper()
	s := daemontest.Start(t, []afxdp.Link{la, lb}, func(nicfw.HostID) nicfw.EngineConfig {
		return nicfw.EngineConfig{Transport: transport.Config{RetransmitAfter: time.Millisecond}}
	})
	return s[0], s[1]
}

// serveUntil runs a's handlers, waiting between messages, until stop is
// set.
func serveUntil(t *testing.T, a *Endpoint, stop *atomic.Bool) {
	for !stop.Load() {
		if _, err := a.Wait(20 * time.Millisecond); err != nil {
			t.Errorf("wait: %v", err)
			return
		}
		if _, err := a.Poll(); err != nil {
			t.Errorf("poll: %v", err)
			return
		}
	}
}

// sharedPair runs the daemons (startDaemons) and opens endpoint 20 on host
// B, the server, and endpoint 21 on host A, the client, Shared with 8
// credits, in one virtual network; both close when the test ends.
func sharedPair(t *testing.T, la, lb afxdp.Link) (server, client *Endpoint) {
	t.Helper()
	pa, pb := startDaemons(t, la, lb)
	server, err := Dial(pb, VNet{ID: 20, Tag: amiiRed, Table: []Name{{Host: amiiHostA, Endpoint: 21}}}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	client, err = Dial(pa, VNet{ID: 21, Tag: amiiRed, Table: []Name{{Host: amiiHostB, Endpoint: 20}}},
		Config{Shared: true, Credits: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return server, client
}

func sharedBody(t *testing.T, la, lb afxdp.Link) {
	server, client := sharedPair(t, la, lb)

	const senders, per = 4, 500
	var seen [senders * per]atomic.Int32
	var replies atomic.Int64
	reply := client.Register(func(_ *Token, args []uint64) {
		seen[args[0]-1].Add(1) // the server adds 1
		replies.Add(1)
	})
	echo := server.Register(func(tok *Token, args []uint64) {
		if err := tok.Reply(reply, args[0]+1); err != nil {
			t.Errorf("reply: %v", err)
		}
	})
	if echo != 0 {
		t.Fatalf("echo handler %d", echo)
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() { serveUntil(t, server, &stop) })
	wg.Go(func() { serveUntil(t, client, &stop) }) // the thread blocked in Wait
	var sends sync.WaitGroup
	for g := range uint64(senders) {
		sends.Go(func() {
			for i := range uint64(per) {
				if err := client.Request(0, 0, g*per+i); err != nil {
					t.Errorf("sender %d, request %d: %v", g, i, err)
					return
				}
			}
		})
	}
	sends.Wait()
	if err := client.Drain(10 * time.Second); err != nil {
		t.Error(err)
	}
	stop.Store(true)
	wg.Wait()
	if got := replies.Load(); got != senders*per {
		t.Fatalf("%d replies to %d requests", got, senders*per)
	}
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Fatalf("request %d answered %d times", i, n)
		}
	}
	if s := client.Stats(); s.Requests != senders*per || s.ReplyHandled != senders*per || client.Outstanding() != 0 {
		t.Errorf("client stats %+v, outstanding %d", s, client.Outstanding())
	}
}
