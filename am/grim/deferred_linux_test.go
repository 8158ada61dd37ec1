//go:build linux

package grim

import (
	"testing"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// A reply that a handler sends while its channel's reply queue is full
// waits (Stats.RepliesDeferred) and leaves at a later Poll, after those
// before it: none is lost, and once they have left Poll looks at no
// channel's deferred replies.
func TestGRIMDeferredReplies(t *testing.T) {
	eps, _ := inlinePair(t, 2, nil)
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
