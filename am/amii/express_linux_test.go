//go:build linux

package amii

import (
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/clock"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// expressPair opens A1 (with cfgA) and B1 (with cfgB) inline, each on an
// engine of its own on its link (la, lb), A1's table naming B1 and B1's A1.
func expressPair(t *testing.T, la, lb afxdp.Link, cfgA, cfgB Config, ec nicfw.EngineConfig) (a, b *Endpoint) {
	t.Helper()
	mk := func(id HostID, l afxdp.Link, peer HostID, pl afxdp.Link, cfg Config) *Endpoint {
		e, err := Open(l, Inline{Host: id, Hosts: map[HostID]net.HardwareAddr{peer: pl.HardwareAddr()}, Engine: ec},
			VNet{ID: 1, Tag: amiiRed, Table: []Name{{Host: peer, Endpoint: 1}}}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	return mk(amiiHostA, la, amiiHostB, lb, cfgA), mk(amiiHostB, lb, amiiHostA, la, cfgB)
}

// memLinks returns the two ends of a memlink hub, closed when t ends.
func memLinks(t *testing.T) (la, lb afxdp.Link) {
	l := xdptest.Hub(t, 2, memlink.Options{})
	return l[0], l[1]
}

// vethLinks returns AF_XDP sockets on the two ends of a veth pair, xam's
// XDP program on each dropping the fraction drop of the frames.
func vethLinks(t *testing.T, drop float64, seed uint64) (la, lb afxdp.Link) {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	_, a := xdptest.OpenHost(t, v.A, drop, seed)
	_, b := xdptest.OpenHost(t, v.B, drop, seed+1)
	return a, b
}

// pollUntil polls a until done reports true, for at most a minute.
func pollUntil(t *testing.T, a *Endpoint, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatal("not done after a minute")
		}
		if n, err := a.Poll(); err != nil {
			t.Fatal(err)
		} else if n == 0 {
			endpoint.Gosched() // with one processor (-cpu 1), the other host's goroutine
		}
	}
}

// serve polls b in a goroutine of its own, as its host would, until the
// function it returns is called.
func serve(t *testing.T, b *Endpoint) (stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			if n, err := b.Poll(); err != nil {
				t.Error(err)
				return
			} else if n == 0 {
				endpoint.Gosched()
			}
		}
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			done.Store(true)
			wg.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}

// expressBody has A1 send n requests to B1, short ones of 1 to MaxArgs
// arguments with a medium one every seventh, by turns a hundred one at a
// time (each answered before the next leaves: an idle endpoint, the
// express path) and a hundred as fast as its credits allow (the send
// queue, mostly); B1, served by a goroutine of its own, records them and
// replies with the arguments reversed. Every request arrives once, in the
// order sent, and every reply comes back; short messages of both took the
// express path (Stats.Express), and no other.
func expressBody(t *testing.T, a, b *Endpoint, n int) {
	t.Helper()
	var seen []uint64
	var replies int
	reply := a.Register(func(tok *Token, args []uint64) { replies++ })
	replyMedium := a.RegisterMedium(func(tok *Token, args []uint64, data []byte) { replies++ })
	echo := b.Register(func(tok *Token, args []uint64) {
		seen = append(seen, args[0])
		r := slices.Clone(args)
		slices.Reverse(r)
		if err := tok.Reply(reply, r...); err != nil {
			t.Error(err)
		}
	})
	echoMedium := b.RegisterMedium(func(tok *Token, args []uint64, data []byte) {
		seen = append(seen, args[0])
		if err := tok.ReplyMedium(replyMedium, data, args...); err != nil {
			t.Error(err)
		}
	})
	mediums := 0
	var stop func()
	for i := range n {
		args := make([]uint64, 1+i%MaxArgs)
		args[0] = uint64(i)
		var err error
		if i%7 == 6 {
			mediums++
			err = a.RequestMedium(0, echoMedium, []byte("medium bytes"), args...)
		} else {
			err = a.Request(0, echo, args...)
		}
		if i == 0 {
			stop = serve(t, b)
		}
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if (i/100)%2 == 0 {
			pollUntil(t, a, func() bool { return replies == i+1 })
		}
	}
	pollUntil(t, a, func() bool { return replies == n })
	stop()
	for i, v := range seen {
		if v != uint64(i) {
			t.Fatalf("B1 received request %d as the %dth (order: %v...)", v, i, seen[:min(len(seen), i+5)])
		}
	}
	if len(seen) != n {
		t.Fatalf("B1 received %d requests, want %d", len(seen), n)
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.Express == 0 || sb.Express == 0 {
		t.Errorf("express sends: A1 %d, B1 %d; want some on each", sa.Express, sb.Express)
	}
	if max := uint64(n - mediums); sa.Express > max || sb.Express > max {
		t.Errorf("express sends: A1 %d, B1 %d; at most %d were short", sa.Express, sb.Express, max)
	}
	// The request/reply traffic took the compact lane both ways: sent by
	// SendNow, put by the engine's lane, taken off the wire by the
	// transport's.
	for _, e := range []*Endpoint{a, b} {
		es, ts := e.express.Stats(), e.express.TransportStats()
		if es.Lane == 0 || ts.LaneSends == 0 || ts.LaneCells == 0 {
			t.Errorf("host %d: the compact lane put %d messages, sent %d, received %d cells; want some of each",
				e.express.Host(), es.Lane, ts.LaneSends, ts.LaneCells)
		}
	}
	t.Logf("express sends: A1 %d of %d requests, B1 %d of %d replies", sa.Express, sa.Requests, sb.Express, sb.Replies)
}

// Short messages of an inline endpoint alone on its engine leave by the
// express path, in order with the queued ones, on a memlink pair and over
// AF_XDP.
func TestExpressInline(t *testing.T) {
	la, lb := memLinks(t)
	a, b := expressPair(t, la, lb, Config{Credits: 8}, Config{Credits: 8}, nicfw.EngineConfig{})
	expressBody(t, a, b, 2000)
}

func TestExpressOverAFXDP(t *testing.T) {
	la, lb := vethLinks(t, 0, 41)
	a, b := expressPair(t, la, lb, Config{Credits: 8}, Config{Credits: 8}, nicfw.EngineConfig{})
	expressBody(t, a, b, 2000)
}

// Under loss, messages sent by the express path are retransmitted as
// queued ones are: all arrive, once, in order.
func TestExpressLossOverAFXDP(t *testing.T) {
	la, lb := vethLinks(t, 0.05, 43)
	a, b := expressPair(t, la, lb, Config{Credits: 8}, Config{Credits: 8},
		nicfw.EngineConfig{Transport: transport.Config{RetransmitAfter: time.Millisecond}})
	expressBody(t, a, b, 1000)
}

// With Coalesce the messages wait for the endpoint's poll, packed into
// frames: none takes the express path.
func TestExpressNotWithCoalesce(t *testing.T) {
	la, lb := memLinks(t)
	a, b := expressPair(t, la, lb, Config{Credits: 8, Coalesce: true}, Config{Credits: 8, Coalesce: true}, nicfw.EngineConfig{Window: 8})
	var replies int
	reply := a.Register(func(*Token, []uint64) { replies++ })
	echo := b.Register(func(tok *Token, args []uint64) {
		if err := tok.Reply(reply, args...); err != nil {
			t.Error(err)
		}
	})
	serve(t, b)
	for i := range 100 {
		if err := a.Request(0, echo, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	pollUntil(t, a, func() bool { return replies == 100 })
	if sa, sb := a.Stats(), b.Stats(); sa.Express != 0 || sb.Express != 0 {
		t.Errorf("express sends with Coalesce: A1 %d, B1 %d", sa.Express, sb.Express)
	}
}

// A peer that disappears: the request in flight by the express path is
// returned once the transport gives up, and the next, to a host now known
// down, is returned at once; the error handler sees each, with the
// request's arguments.
func TestExpressPeerGone(t *testing.T) {
	la, lb := memLinks(t)
	a, b := expressPair(t, la, lb, Config{}, Config{}, nicfw.EngineConfig{
		Transport: transport.Config{RetransmitAfter: time.Millisecond, GiveUpAfter: 100 * time.Millisecond}})
	var replies int
	reply := a.Register(func(*Token, []uint64) { replies++ })
	echo := b.Register(func(tok *Token, args []uint64) {
		if err := tok.Reply(reply, args...); err != nil {
			t.Error(err)
		}
	})
	var returned []Returned
	a.OnReturn(func(r Returned) { returned = append(returned, r) })
	stop := serve(t, b)
	if err := a.Request(0, echo, 1); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, a, func() bool { return replies == 1 })
	stop()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	before := a.Stats().Express
	for i := uint64(2); i <= 3; i++ {
		if err := a.Request(0, echo, i, 7); err != nil {
			t.Fatal(err)
		}
		pollUntil(t, a, func() bool { return len(returned) == int(i-1) })
	}
	if got := a.Stats().Express - before; got != 2 {
		t.Errorf("%d of the 2 requests to the gone peer took the express path", got)
	}
	for i, r := range returned {
		if !r.Request || !slices.Equal(r.Args, []uint64{uint64(i + 2), 7}) ||
			r.Reason != endpoint.ReasonUnreachable {
			t.Errorf("returned %d: %+v, want request %d with ReasonUnreachable", i, r, i+2)
		}
	}
}

// The replies of a Poll that finds several requests waiting are queued,
// to leave together in its last engine run, not one system call each by
// the express path; a Poll that finds one answers it by the express path.
func TestExpressRepliesBatched(t *testing.T) {
	la, lb := memLinks(t)
	a, b := expressPair(t, la, lb, Config{Credits: 8, Coalesce: true}, Config{Credits: 8}, nicfw.EngineConfig{Window: 8})
	var replies int
	reply := a.Register(func(*Token, []uint64) { replies++ })
	echo := b.Register(func(tok *Token, args []uint64) {
		if err := tok.Reply(reply, args...); err != nil {
			t.Error(err)
		}
	})
	round := func(n int) (express uint64) {
		t.Helper()
		before := b.Stats().Express
		for i := range n {
			if err := a.Request(0, echo, uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := a.Poll(); err != nil { // the coalesced requests leave together
			t.Fatal(err)
		}
		want := replies + n
		for replies < want {
			if _, err := b.Poll(); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Poll(); err != nil {
				t.Fatal(err)
			}
		}
		return b.Stats().Express - before
	}
	round(1) // loads both endpoints
	if got := round(1); got != 1 {
		t.Errorf("one request in a Poll: %d replies by the express path, want 1", got)
	}
	if got := round(6); got != 0 {
		t.Errorf("six requests in a Poll: %d replies by the express path, want 0 (queued together)", got)
	}
}

// TestAMIILateRepliesOverAFXDP is TestAMIILateRepliesKeepTheirPlace over
// AF_XDP: B's engine runs in a goroutine of its own, its application not
// at first (a receiver that stopped polling), then B is served.
func TestAMIILateRepliesOverAFXDP(t *testing.T) {
	la, lb := vethLinks(t, 0, 23)
	clk := clock.NewManual(time.Unix(1000, 0))
	a, b := expressPair(t, la, lb, Config{Clock: clk, ReplyTimeout: time.Second, Credits: 8}, Config{}, nicfw.EngineConfig{})
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			if n, err := b.poll(); err != nil { // the engine alone
				t.Error(err)
				return
			} else if n == 0 {
				endpoint.Gosched()
			}
		}
	})
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	lateReplies(t, clk, a, b, func(done func() bool) { pollUntil(t, a, done) }, func() {
		stop.Store(true)
		wg.Wait()
		serve(t, b)
	})
}
