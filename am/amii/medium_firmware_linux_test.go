//go:build linux

package amii

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// mediumPattern is the bytes of medium request i: its length varies with i
// and every byte depends on i and its position, so a message that carries
// another one's bytes, or part of them, is told apart.
func mediumPattern(buf []byte, i uint64) []byte {
	n := 1 + int(i*7919%2048)
	b := buf[:n]
	for j := range b {
		b[j] = byte(i>>(8*(j%3))) ^ byte(j*131)
	}
	return b
}

// Overlapping medium requests in firmware mode: four goroutines share one
// client endpoint and its 8 credits, so up to 8 medium requests are in
// flight and the endpoint's medium slots are reused as soon as the engine
// has taken their messages. The server echoes every request's bytes in a
// medium reply; every byte of every request (at the server) and of every
// reply (at the client) is checked. Before the engine released a send
// descriptor only after copying its bytes, a slot was reused while the
// engine was still to copy it, and about one message in a thousand carried
// another's bytes.
func TestAMIIMediumOverlapFirmware(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	mediumOverlapBody(t, la, lb, 4, 2500)
}

// TestAMIIMediumOverlapFirmwareOverAFXDP is the same body with the daemons
// on a veth pair, over AF_XDP.
func TestAMIIMediumOverlapFirmwareOverAFXDP(t *testing.T) {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	var links [2]afxdp.Link
	for i, h := range []*netnstest.Host{v.A, v.B} {
		_, links[i] = xdptest.Open(t, h.Do, h.Index, h.MAC, 0, uint64(7+i))
	}
	mediumOverlapBody(t, links[0], links[1], 4, 1000)
}

func mediumOverlapBody(t *testing.T, la, lb afxdp.Link, senders, per uint64) {
	server, client := sharedPair(t, la, lb)

	var bad atomic.Int64
	report := func(what string, i uint64, got, want []byte) {
		if bad.Add(1) <= 5 {
			t.Errorf("%s %d: %d bytes, want %d; first difference at %s", what, i, len(got), len(want), firstDiff(got, want))
		}
	}
	seen := make([]atomic.Int32, senders*per)
	var replies atomic.Int64
	var cbuf [2048]byte
	reply := client.RegisterMedium(func(_ *Token, args []uint64, data []byte) {
		i := args[0]
		if want := mediumPattern(cbuf[:], i); !bytes.Equal(data, want) {
			report("reply", i, data, want)
		}
		seen[i].Add(1)
		replies.Add(1)
	})
	var sbuf [2048]byte
	server.RegisterMedium(func(tok *Token, args []uint64, data []byte) {
		if want := mediumPattern(sbuf[:], args[0]); !bytes.Equal(data, want) {
			report("request", args[0], data, want)
		}
		if err := tok.ReplyMedium(reply, data, args[0]); err != nil {
			t.Errorf("reply: %v", err)
		}
	})

	var mu sync.Mutex
	var returns []endpoint.Reason
	client.OnReturn(func(r Returned) {
		mu.Lock()
		returns = append(returns, r.Reason)
		mu.Unlock()
	})

	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() { serveUntil(t, server, &stop) })
	wg.Go(func() { serveUntil(t, client, &stop) })
	var sends sync.WaitGroup
	for g := range senders {
		sends.Go(func() {
			var buf [2048]byte
			for i := range per {
				n := g*per + i
				// The sender rewrites its buffer at once: RequestMedium has
				// copied it.
				if err := client.RequestMedium(0, 0, mediumPattern(buf[:], n), n); err != nil {
					t.Errorf("sender %d, request %d: %v", g, i, err)
					return
				}
			}
		})
	}
	sends.Wait()
	// A request to a handler the server never registered, and a Store into
	// the server's medium slots, come back to the sender.
	if err := client.Request(0, 99, 1); err != nil {
		t.Error(err)
	}
	if err := client.Store(Bulk{Remote: uint32(len(server.Staging())) + 8, Length: 64}); err != nil {
		t.Error(err)
	}
	if err := client.Drain(30 * time.Second); err != nil {
		t.Error(err)
	}
	stop.Store(true)
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d of %d medium messages carried wrong bytes", n, 2*senders*per)
	}
	mu.Lock()
	if !slices.Equal(returns, []endpoint.Reason{endpoint.ReasonNoHandler, endpoint.ReasonRange}) {
		t.Errorf("returned %v, want [no such handler, range]", returns)
	}
	mu.Unlock()
	if got := replies.Load(); got != int64(senders*per) {
		t.Fatalf("%d replies to %d requests", got, senders*per)
	}
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Fatalf("request %d answered %d times", i, n)
		}
	}
}

// firstDiff returns the first index at which a and b differ.
func firstDiff(a, b []byte) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprint(i)
		}
	}
	return fmt.Sprint(min(len(a), len(b)))
}

// TestCoalesceOverAFXDP is TestCoalesce's body over AF_XDP on a veth pair,
// xam's XDP program dropping 5% of the frames.
func TestCoalesceOverAFXDP(t *testing.T) {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	_, la := xdptest.Open(t, v.A.Do, v.A.Index, v.A.MAC, 0.05, 31)
	_, lb := xdptest.Open(t, v.B.Do, v.B.Index, v.B.MAC, 0.05, 32)
	a, b, ea := coalescePair(t, la, lb)
	coalesceBody(t, a, b, ea, 3000)
}
