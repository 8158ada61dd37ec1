//go:build linux

package grim

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// TestGRIMLateRepliesKeepTheirPlace: replies that come after their
// requests' reply timeout answer those requests, not the next ones
// outstanding on the channel to the same peer. A channel's requests to a
// peer are answered in order and replies name no request, so each reply
// ends the oldest record to its sender: the record of a request past its
// timeout stays, handed to the error handler and no longer outstanding,
// until its late reply takes it. Before, the late replies took the
// records of the requests sent after them, which counted answered before
// their own replies came (Drain returned with replies still to come);
// with thousands queued behind a slow receiver, requests went neither
// answered nor returned. Over memlink and over AF_XDP.
func TestGRIMLateRepliesKeepTheirPlace(t *testing.T) {
	t.Run("memlink", func(t *testing.T) { lateReplies(t, xdptest.Hub(t, 2, memlink.Options{Seed: 41})) })
	t.Run("afxdp", func(t *testing.T) { lateReplies(t, xdptest.Star(t, "glate", 2, 0)) })
}

func lateReplies(t *testing.T, links []afxdp.Link) {
	// The reply timeout is long enough that the requests sent after the
	// first ones expired are answered within it on a loaded machine; if
	// some expire all the same, the checks below still hold.
	const timeout = 2 * time.Second
	hosts := cluster(t, links, clusterConfig{channels: 1, window: 8, replyTimeout: timeout})
	const early, later = 6, 3
	type answer struct{ id, outstanding int }
	var mu sync.Mutex
	var answers []answer
	returned := map[int]bool{}
	a, b := hosts[0], hosts[1]
	if err := b.ep.Handle(16, func(tok *Token, args [ShortArgs]uint32, _ []byte) {
		if err := tok.Reply(17, args[0]); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	// The reply handler notes how many requests were outstanding as it
	// ran, and which had come back: both are read in A's goroutine, where
	// the records change.
	var expect []int // what outstanding should be, as each reply ran
	if err := a.ep.Handle(17, func(_ *Token, args [ShortArgs]uint32, _ []byte) {
		id := int(args[0])
		live := 0
		for j := id + 1; j < early+later; j++ {
			if !returned[j] {
				live++
			}
		}
		mu.Lock()
		answers = append(answers, answer{id, a.ep.ch(0).Outstanding()})
		expect = append(expect, live)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	a.ep.OnReturn(func(r Returned) {
		if r.Reason != ReasonNoReply {
			t.Errorf("returned %v", r)
		}
		returned[int(r.Args[0])] = true
	})
	// B's engine runs, and takes the requests into B's receive queue (a
	// request not yet sent is not timed); its handlers do not yet: a
	// receiver that stopped polling.
	a.start()
	stop := b.engineOnly(t)
	send := func(from, to int) {
		var err error
		a.do(func(ep *Endpoint) {
			for i := from; i < to; i++ {
				err = errors.Join(err, ep.ch(0).Short(1, 16, uint32(i)))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	send(0, early)
	settle(t, a, "the first requests past their reply timeout", func(ep *Endpoint) bool { return ep.Stats().Unanswered == early },
		func(ep *Endpoint) string { return ep.QueueState() })
	send(early, early+later)
	stop()
	b.start()
	settle(t, a, "every reply run", func(ep *Endpoint) bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answers) == early+later
	})
	var st Stats
	var drained error
	a.do(func(ep *Endpoint) { st, drained = ep.Stats(), ep.Drain(time.Second) })
	mu.Lock()
	defer mu.Unlock()
	ids := make([]int, len(answers))
	for i, x := range answers {
		ids[i] = x.id
		if x.outstanding != expect[i] {
			t.Errorf("the reply to request %d ran with %d outstanding, want %d (answers %v)", x.id, x.outstanding, expect[i], answers)
		}
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8}; !slices.Equal(ids, want) {
		t.Errorf("replies to %v, want %v", ids, want)
	}
	for i := range early {
		if !returned[i] {
			t.Errorf("request %d not returned", i)
		}
	}
	if st.LateReplies != uint64(len(returned)) || st.Unanswered != uint64(len(returned)) || st.Returned != uint64(len(returned)) || drained != nil {
		t.Errorf("%d returned; stats %+v; Drain: %v", len(returned), st, drained)
	}
	t.Logf("%d requests returned past the reply timeout, all answered late in place; %d answered in time", len(returned), early+later-len(returned))
}

// TestGRIMIncarnationForgets: a message from another incarnation of a
// peer's host than the one last heard drops the records of the requests
// past their reply timeout sent to it, on every channel (their answers
// will not come), and only those; a first message does not (such a
// request sent before any message came may yet be answered); and a
// request that comes back ReasonRestarted drops them too.
func TestGRIMIncarnationForgets(t *testing.T) {
	eps, _ := inlinePair(t, 2, nil)
	ep := eps[0]
	add := func(ch int, peer uint32, expired bool) {
		c := ep.ch(ch)
		c.pending = append(c.pending, pendingRequest{dest: peer*MaxChannels + uint32(ch), expired: expired})
		if expired {
			c.expired++
		}
	}
	add(0, 1, true)
	add(1, 1, true)
	add(0, 1, false)
	add(1, 0, true)
	ep.heard(1*MaxChannels, 3) // first heard
	if ep.stats.Forgotten != 0 {
		t.Fatalf("first heard: %d forgotten", ep.stats.Forgotten)
	}
	ep.heard(1*MaxChannels+1, 3) // the same host, another channel
	if ep.stats.Forgotten != 0 {
		t.Fatalf("same incarnation: %d forgotten", ep.stats.Forgotten)
	}
	ep.heard(1*MaxChannels+1, 4) // restarted
	if got := ep.stats.Forgotten; got != 2 || ep.ch(0).Outstanding() != 1 || len(ep.ch(0).pending) != 1 || ep.ch(1).expired != 1 || len(ep.ch(1).pending) != 1 {
		t.Fatalf("after a restart: %d forgotten, channel 0 %d records (%d outstanding), channel 1 %d (%d expired)",
			got, len(ep.ch(0).pending), ep.ch(0).Outstanding(), len(ep.ch(1).pending), ep.ch(1).expired)
	}
	ep.forget(0) // as a request to peer 0 come back ReasonRestarted does
	if ep.stats.Forgotten != 3 || ep.ch(1).expired != 0 || ep.ch(0).Outstanding() != 1 {
		t.Fatalf("after forget: %d forgotten, %d expired", ep.stats.Forgotten, ep.ch(1).expired)
	}
}
