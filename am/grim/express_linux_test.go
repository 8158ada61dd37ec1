package grim

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// expressHosts makes a GRIM endpoint of channels channels on an inline
// engine per link (host i+1, endpoint 16), all peers of one another.
func expressHosts(t *testing.T, links []afxdp.Link, channels int) []*Endpoint {
	t.Helper()
	var peers []nicfw.Name
	for i := range links {
		peers = append(peers, nicfw.Name{Host: nicfw.HostID(i + 1), Endpoint: 16})
	}
	eps := make([]*Endpoint, len(links))
	for i, l := range links {
		eng, err := nicfw.NewEngine(l, engineConfig(nicfw.HostID(i+1), 8))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		for j, other := range links {
			if j != i {
				if err := eng.AddHost(nicfw.HostID(j+1), other.HardwareAddr()); err != nil {
					t.Fatal(err)
				}
			}
		}
		if eps[i], err = New(eng, Config{Peers: peers, Self: i, Channels: channels}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eps[i].Close() })
	}
	return eps
}

// expressBody: A sends n requests, one at a time, each answered before the
// next, on its channels by turns, then bursts of n requests spread over
// the channels. B's handler replies to each. The one-at-a-time requests
// and their replies leave by the express path (A's and B's Stats.Express);
// a burst's requests after the first on each channel, and the replies to
// a burst, several in one Poll, are queued to leave together, all but the
// first of a Poll. Every request is answered once, in order per channel
// (the requests carry their channel and their number on it).
func expressBody(t *testing.T, a, b *Endpoint, n int) {
	t.Helper()
	got := map[uint32][]uint32{} // A's channel -> the requests answered, in order
	replies := 0
	if err := a.Handle(FirstUserHandler+1, func(tok *Token, args [ShortArgs]uint32, _ []byte) {
		got[args[0]] = append(got[args[0]], args[1])
		replies++
	}); err != nil {
		t.Fatal(err)
	}
	if err := b.Handle(FirstUserHandler, func(tok *Token, args [ShortArgs]uint32, _ []byte) {
		if err := tok.Reply(FirstUserHandler+1, args[0], args[1]); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	chans := a.Channels()
	await := func(want int) {
		t.Helper()
		for replies < want {
			if _, err := b.Poll(); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Poll(); err != nil {
				t.Fatal(err)
			}
		}
	}
	sent := make([]uint32, chans)
	send := func(i int) {
		t.Helper()
		c := i % chans
		if err := a.ch(c).Short(1, FirstUserHandler, uint32(c), sent[c]); err != nil {
			t.Fatal(err)
		}
		sent[c]++
	}
	for i := range n {
		send(i)
		await(i + 1)
	}
	one := b.Stats().Express
	if one < uint64(n)/2 {
		t.Errorf("%d of %d replies to lone requests by the express path", one, n)
	}
	lone := a.Stats().Express // requests on channels with none outstanding
	if lone < uint64(n)/2 {
		t.Errorf("%d of %d lone requests by the express path", lone, n)
	}
	const burst = 8
	for k := 0; k < n; k += burst {
		for i := range burst {
			send(i)
		}
		if _, err := a.Poll(); err != nil { // the burst leaves in one engine run
			t.Fatal(err)
		}
		await(n + k + burst)
	}
	if more := b.Stats().Express - one; more > uint64(n/burst) {
		t.Errorf("%d replies to bursts of %d by the express path, want at most one a burst (%d)", more, burst, n/burst)
	}
	// A burst's requests after the first on each channel find one
	// outstanding there, and are queued.
	if more := a.Stats().Express - lone; more > uint64(n/burst*min(chans, burst)) {
		t.Errorf("%d requests of bursts of %d by the express path, want at most one a channel a burst (%d)", more, burst, n/burst*min(chans, burst))
	}
	for c, s := range got {
		for k, v := range s {
			if v != uint32(k) {
				t.Fatalf("channel %d: reply %d is to request %d", c, k, v)
			}
		}
	}
	t.Logf("express replies: %d of %d lone, %d of %d in bursts; express requests: %d of %d lone, %d of %d in bursts",
		one, n, b.Stats().Express-one, n, lone, n, a.Stats().Express-lone, n)
}

func TestGRIMExpressReplies(t *testing.T) {
	eps := expressHosts(t, xdptest.Hub(t, 2, memlink.Options{}), 4)
	expressBody(t, eps[0], eps[1], 400)
}

func TestGRIMExpressRepliesOverAFXDP(t *testing.T) {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	_, la := xdptest.OpenHost(t, v.A, 0, 51)
	_, lb := xdptest.OpenHost(t, v.B, 0, 52)
	eps := expressHosts(t, []afxdp.Link{la, lb}, 4)
	expressBody(t, eps[0], eps[1], 400)
}

// Two hosts' requests found together by one Poll of the server: their
// replies wait for the engine run that ends the Poll, to leave together
// (by the express path each would cost a system call of its own); both
// are answered.
func TestGRIMExpressOnePerPoll(t *testing.T) {
	eps := expressHosts(t, xdptest.Hub(t, 3, memlink.Options{}), 1)
	server := eps[2]
	if err := server.Handle(FirstUserHandler, func(tok *Token, args [ShortArgs]uint32, _ []byte) {
		if err := tok.Reply(FirstUserHandler+1, args[0]); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	replies := 0
	for _, c := range eps[:2] {
		if err := c.Handle(FirstUserHandler+1, func(*Token, [ShortArgs]uint32, []byte) { replies++ }); err != nil {
			t.Fatal(err)
		}
	}
	round := func() uint64 {
		t.Helper()
		before := server.Stats().Express
		want := replies + 2
		for i, c := range eps[:2] {
			if err := c.ch(0).Short(2, FirstUserHandler, uint32(i)); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Poll(); err != nil { // sends it
				t.Fatal(err)
			}
		}
		for replies < want {
			for _, e := range []*Endpoint{server, eps[0], eps[1]} {
				if _, err := e.Poll(); err != nil {
					t.Fatal(err)
				}
			}
		}
		return server.Stats().Express - before
	}
	round() // loads the endpoints
	for range 10 {
		if got := round(); got != 0 {
			t.Fatalf("%d replies by the express path to two requests found by one Poll, want 0", got)
		}
	}
}

// A request to a second host, sent while the channel's first is
// outstanding, is queued: only the first leaves by the express path, and
// the fan-out's others leave together in the next engine run. Both are
// answered.
func TestGRIMExpressFanOutQueued(t *testing.T) {
	eps := expressHosts(t, xdptest.Hub(t, 3, memlink.Options{}), 1)
	a := eps[0]
	answered := 0
	if err := a.Handle(FirstUserHandler+1, func(*Token, [ShortArgs]uint32, []byte) { answered++ }); err != nil {
		t.Fatal(err)
	}
	for _, b := range eps[1:] {
		if err := b.Handle(FirstUserHandler, func(tok *Token, args [ShortArgs]uint32, _ []byte) {
			if err := tok.Reply(FirstUserHandler+1, args[0]); err != nil {
				t.Error(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	fanOut := func() uint64 {
		t.Helper()
		before, want := a.Stats().Express, answered+2
		for dest := 1; dest <= 2; dest++ {
			if err := a.ch(0).Short(dest, FirstUserHandler, uint32(dest)); err != nil {
				t.Fatal(err)
			}
		}
		express := a.Stats().Express - before
		for answered < want {
			for _, ep := range eps {
				if _, err := ep.Poll(); err != nil {
					t.Fatal(err)
				}
			}
		}
		return express
	}
	fanOut() // the first: the channel's engine endpoint becomes resident
	if got := fanOut(); got != 1 {
		t.Errorf("%d requests of a fan-out by the express path, want the first only", got)
	}
}

// A wait that times out says what it found: Publish to a central
// endpoint that never runs fails with ErrTimeout, and its error ends with
// QueueState, the request taken and outstanding.
func TestGRIMTimeoutQueueState(t *testing.T) {
	links := xdptest.Hub(t, 2, memlink.Options{})
	peers := []nicfw.Name{{Host: 1, Endpoint: 16}, {Host: 2, Endpoint: 16}}
	var eps []*Endpoint
	for i, l := range links {
		eng, err := nicfw.NewEngine(l, engineConfig(nicfw.HostID(i+1), 8))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		if err := eng.AddHost(nicfw.HostID(2-i), links[1-i].HardwareAddr()); err != nil {
			t.Fatal(err)
		}
		ep, err := New(eng, Config{Peers: peers, Self: i, GiveUp: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		eps = append(eps, ep)
	}
	err := eps[1].Publish() // the central endpoint, eps[0], never polls
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Publish: %v, want ErrTimeout", err)
	}
	if want := "channel 0: request send 1/1,"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "done 1, 1 outstanding") {
		t.Errorf("Publish: %v\nwant the queues' state (%q, 1 outstanding) at its end", err, want)
	}
	if s := eps[1].QueueState(); !strings.Contains(s, "request receive 0/0") {
		t.Errorf("QueueState %q: want nothing received", s)
	}
}
