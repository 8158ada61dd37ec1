//go:build linux

package grim

import (
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// inlinePair returns two inline endpoints of channels logical channels on
// a memlink pair, peers 0 and 1.
func inlinePair(t *testing.T, channels int) [2]*Endpoint {
	t.Helper()
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	peers := []nicfw.Name{{Host: 1, Endpoint: 16}, {Host: 2, Endpoint: 16}}
	var eps [2]*Endpoint
	for i, l := range []*memlink.Link{la, lb} {
		eng, err := nicfw.NewEngine(l, engineConfig(nicfw.HostID(i+1), 1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		other := []*memlink.Link{lb, la}[i]
		if err := eng.AddHost(nicfw.HostID(2-i), other.HardwareAddr()); err != nil {
			t.Fatal(err)
		}
		if eps[i], err = New(eng, Config{Peers: peers, Self: i, Channels: channels}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eps[i].Close() })
	}
	return eps
}

// A reply that a handler sends while its channel's reply queue is full
// waits (Stats.RepliesDeferred) and leaves at a later Poll, after those
// before it: none is lost, and once they have left Poll looks at no
// channel's deferred replies.
func TestGRIMDeferredReplies(t *testing.T) {
	eps := inlinePair(t, 2)
	b, c := eps[1], eps[1].ch(1)
	const n = endpoint.DefaultQueueEntries + 10
	// As a handler would: the engine does not run, and the replies past
	// the queue's room wait in the channel.
	b.depth++
	for i := range n {
		d := endpoint.Descriptor{}
		if err := c.header(&d, 0, HandlerNull, []uint32{uint32(i)}); err != nil {
			t.Fatal(err)
		}
		if err := c.send(endpoint.ReplySend, &d); err != nil {
			t.Fatal(err)
		}
	}
	b.depth--
	if got := b.Stats().RepliesDeferred; got == 0 || b.deferred != 1 || len(c.replies) == 0 {
		t.Fatalf("%d replies deferred, %d channels with some (%d waiting), want some, on one channel", got, b.deferred, len(c.replies))
	}
	for range 1000 {
		if b.deferred == 0 && eps[0].Stats().LateReplies == n {
			break
		}
		if _, err := b.Poll(); err != nil {
			t.Fatal(err)
		}
		if _, err := eps[0].Poll(); err != nil {
			t.Fatal(err)
		}
	}
	if b.deferred != 0 || len(c.replies) != 0 || eps[0].Stats().LateReplies != n {
		t.Fatalf("after the Polls: %d channels with deferred replies (%d waiting), A counted %d of %d replies", b.deferred, len(c.replies), eps[0].Stats().LateReplies, n)
	}
}
