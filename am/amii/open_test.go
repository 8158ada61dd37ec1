package amii

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/clock"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/nicfw"
)

// openPair opens A and B with Open, each on an engine of its own over a
// memlink pair, each table naming the other's endpoint once.
func openPair(t *testing.T) (a, b *Endpoint) {
	t.Helper()
	return openPairWith(t, []Name{{Host: amiiHostB, Endpoint: 3}}, Config{})
}

// openPairWith is openPair with A's translation table and configuration.
func openPairWith(t *testing.T, tableA []Name, cfgA Config) (a, b *Endpoint) {
	t.Helper()
	testenv.NoMemfdLeaks(t, "xam-endpoint")
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	open := func(self HostID, l *memlink.Link, peer HostID, mac net.HardwareAddr, table []Name, cfg Config) *Endpoint {
		e, err := Open(l, Inline{Host: self, Hosts: map[HostID]net.HardwareAddr{peer: mac}},
			VNet{ID: 3, Tag: amiiRed, Table: table}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := e.Close(); err != nil {
				t.Error(err)
			}
		})
		return e
	}
	return open(amiiHostA, la, amiiHostB, lb.HardwareAddr(), tableA, cfgA),
		open(amiiHostB, lb, amiiHostA, la.HardwareAddr(), []Name{{Host: amiiHostA, Endpoint: 3}}, Config{})
}

// settlePair polls b and a until a has no request outstanding, for at
// most ten seconds.
func settlePair(t *testing.T, a, b *Endpoint) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for a.Outstanding() > 0 && time.Now().Before(deadline) {
		if _, err := b.Poll(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Poll(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHandleIDs: handlers at ids the receiver chooses, whatever the order
// it puts them there; a request above the highest comes back with
// ReasonNoHandler; an id taken or out of range is an error.
func TestHandleIDs(t *testing.T) {
	a, b := openPair(t)
	if a.Name() != (Name{Host: amiiHostA, Endpoint: 3}) {
		t.Errorf("Name %v", a.Name())
	}
	var got []uint64
	for _, id := range []HandlerID{40, 7} { // not in order, with gaps
		if err := b.Handle(id, func(tok *Token, args []uint64) { got = append(got, uint64(id)*1000+args[0]) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Handle(7, func(*Token, []uint64) {}); !errors.Is(err, ErrConflict) {
		t.Errorf("a second handler at id 7: %v, want ErrConflict", err)
	}
	if err := b.HandleMedium(MaxHandlers, func(*Token, []uint64, []byte) {}); !errors.Is(err, ErrNoHandler) {
		t.Errorf("a handler at MaxHandlers: %v, want ErrNoHandler", err)
	}
	var returned []Returned
	a.OnReturn(func(r Returned) { returned = append(returned, r) })
	for _, id := range []HandlerID{7, 40, 41} {
		if err := a.Request(0, id, 1); err != nil {
			t.Fatal(err)
		}
	}
	settlePair(t, a, b)
	if len(got) != 2 || got[0] != 7001 || got[1] != 40001 {
		t.Errorf("handlers ran for %v, want [7001 40001]", got)
	}
	if len(returned) != 1 || returned[0].Reason != ReasonNoHandler || returned[0].Handler != 41 {
		t.Errorf("returned %v, want the request to 41 with ReasonNoHandler", returned)
	}
}

// TestOpenErrors: a refused endpoint is the engine's typed error, and Open
// leaves nothing behind.
func TestOpenErrors(t *testing.T) {
	testenv.NoMemfdLeaks(t, "xam-endpoint")
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	if _, err := Open(la, Inline{Host: 1}, VNet{ID: 3, Tag: 1}, Config{}); !errors.Is(err, nicfw.ErrConfig) {
		t.Errorf("an empty table: %v, want nicfw.ErrConfig", err)
	}
	if _, err := Open(la, Inline{Host: 1}, VNet{ID: 3, Tag: 1, Table: []Name{{Host: 2, Endpoint: 3}}}, Config{QueueEntries: 3}); !errors.Is(err, nicfw.ErrConfig) {
		t.Errorf("3 queue entries: %v, want nicfw.ErrConfig", err)
	}
}

// TestFamily: what AM-II shares with ssam and grim (package am).
// Token.Source is the sender's index, an int Request takes; a destination
// outside the table is ErrBadDest; Close from a handler is ErrDiscipline;
// after Close every call that sends, polls or waits is ErrClosed, and
// Staging is nil.
func TestFamily(t *testing.T) {
	a, b := openPair(t)
	var from []int
	var closeErr error
	h := b.Register(func(tok *Token, args []uint64) {
		from = append(from, tok.Source())
		closeErr = b.Close()
	})
	if err := a.Request(-1, h); !errors.Is(err, ErrBadDest) {
		t.Errorf("a request to -1: %v, want ErrBadDest", err)
	}
	if err := a.Request(0, h, 1); err != nil {
		t.Fatal(err)
	}
	for i := 0; len(from) == 0 && i < 10000; i++ {
		b.Poll()
		a.Poll()
	}
	if len(from) != 1 || from[0] != 0 || !errors.Is(closeErr, ErrDiscipline) {
		t.Fatalf("sources %v, Close from a handler: %v", from, closeErr)
	}
	if err := a.Drain(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	_, pollErr := a.Poll()
	_, waitErr := a.Wait(time.Millisecond)
	for name, err := range map[string]error{
		"Request": a.Request(0, h), "RequestMedium": a.RequestMedium(0, h, []byte("x")),
		"Store": a.Store(Bulk{Dest: 0, Length: 1, Handler: h}), "Poll": pollErr, "Wait": waitErr,
		"Drain": a.Drain(time.Second), "Handle": a.Handle(9, func(*Token, []uint64) {}),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if a.Staging() != nil {
		t.Error("Staging after Close is not nil")
	}
	a.Register(func(*Token, []uint64) {}) // harmless
}

// TestTableNamesEndpointTwice: A's translation table names B's endpoint at
// indices 0 and 1. Requests sent to either, in both message forms, are
// answered once each: none is reported unanswered or late when the reply
// timeout passes. A request to a handler B lacks, sent to index 1, comes
// back once, naming index 1, its credit given back; in the compact form
// its return names B by B's first index. Before, a request sent to index
// 1 was never matched by its reply (which names index 0) and came back a
// second time unanswered, and the compact return named index 0.
func TestTableNamesEndpointTwice(t *testing.T) {
	clk := clock.NewManual(time.Unix(1000, 0))
	bName := Name{Host: amiiHostB, Endpoint: 3}
	a, b := openPairWith(t, []Name{bName, bName}, Config{Clock: clk, ReplyTimeout: time.Second})
	var replies []uint64
	reply := a.Register(func(_ *Token, args []uint64) { replies = append(replies, args[0]) })
	echo := b.Register(func(tok *Token, args []uint64) {
		if err := tok.Reply(reply, args...); err != nil {
			t.Error(err)
		}
	})
	var returned []Returned
	a.OnReturn(func(r Returned) { returned = append(returned, r) })
	settle := func() { t.Helper(); settlePair(t, a, b) }
	want := 0
	for _, nargs := range []int{1, 3} { // the compact form, the long one
		for i := range 20 {
			args := make([]uint64, nargs)
			args[0] = uint64(100*nargs + i)
			if err := a.Request(i%2, echo, args...); err != nil {
				t.Fatal(err)
			}
			want++
			if i%4 == 3 {
				settle()
			}
		}
		settle()
	}
	if len(replies) != want || a.Outstanding() != 0 {
		t.Fatalf("%d replies of %d, %d outstanding", len(replies), want, a.Outstanding())
	}
	for _, nargs := range []uint64{1, 3} {
		if err := a.Request(1, 100, make([]uint64, nargs)...); err != nil { // no handler 100 at B
			t.Fatal(err)
		}
		settle()
	}
	// The reply timeout passes, with A's timer running.
	clk.Advance(10 * time.Second)
	for range 4 * replyCheckPolls {
		if _, err := a.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	if len(returned) != 2 {
		t.Fatalf("returned %+v, want the two requests to handler 100", returned)
	}
	for _, r := range returned {
		if r.Reason != ReasonNoHandler || r.Dest != 1 || r.Handler != 100 {
			t.Errorf("returned %+v, want handler 100 at index 1, ReasonNoHandler", r)
		}
	}
	if s := a.Stats(); s.Unanswered != 0 || s.LateReplies != 0 || a.Outstanding() != 0 {
		t.Errorf("stats %+v, %d outstanding", s, a.Outstanding())
	}
}

// TestAMIIPollLetsOthersIn: on one processor, a client that polls in a
// loop for its reply, from a server in another goroutine of the same
// process, lets that goroutine run within a few empty Polls (when it waits
// for the processor) instead of holding the processor until the Go
// scheduler preempts it. It counts the client's Polls per round trip.
func TestAMIIPollLetsOthersIn(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	a, b := openPair(t)
	replies := 0
	reply := a.Register(func(*Token, []uint64) { replies++ })
	echo := b.Register(func(tok *Token, args []uint64) {
		if err := tok.Reply(reply, args...); err != nil {
			t.Error(err)
		}
	})
	var stop atomic.Bool
	var wg sync.WaitGroup
	defer func() { stop.Store(true); wg.Wait() }()
	wg.Go(func() {
		for !stop.Load() {
			if _, err := b.Poll(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	const rounds = 50
	polls := 0
	for i := range rounds {
		if err := a.Request(0, echo, uint64(i)); err != nil {
			t.Fatal(err)
		}
		for replies <= i {
			if _, err := a.Poll(); err != nil {
				t.Fatal(err)
			}
			polls++
		}
	}
	if per := polls / rounds; per > 8*idleYieldEvery {
		t.Errorf("%d Polls per round trip", per)
	}
	t.Logf("%d Polls per round trip", polls/rounds)
}
