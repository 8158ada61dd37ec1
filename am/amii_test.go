//go:build linux

package am

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
)

const (
	amiiHostA = nicfw.HostID(1)
	amiiHostB = nicfw.HostID(2)
	amiiRed   = 0x7ed
	amiiBlue  = 0xb1e
)

// amiiNet is two engines on a memlink pair, run inline by the test's
// goroutine, with three endpoints: A1 on host A and B1 on host B in the
// red network, B2 on host B in the blue one. A1's table is [B1, B2] (so
// index 1 is an endpoint of another network), B1's and B2's are [A1].
type amiiNet struct {
	ea, eb     *nicfw.Engine
	a1, b1, b2 *AMII
	serveB     bool // poll drives B1's AMII too (its handlers run)
}

// poll runs both engines once; with serveB, B1's handlers too.
func (n *amiiNet) poll() (int, error) {
	wa, err := n.ea.Poll()
	if err != nil {
		return wa, err
	}
	wb, err := n.eb.Poll()
	if err != nil || !n.serveB {
		return wa + wb, err
	}
	h, err := n.b1.Poll()
	return wa + wb + h, err
}

// enginesOnly runs both engines once.
func (n *amiiNet) enginesOnly() (int, error) {
	wa, err := n.ea.Poll()
	if err != nil {
		return wa, err
	}
	wb, err := n.eb.Poll()
	return wa + wb, err
}

func newAMIINet(t *testing.T, cfgA AMIIConfig) *amiiNet {
	t.Helper()
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	n := &amiiNet{}
	mk := func(id nicfw.HostID, l *memlink.Link) *nicfw.Engine {
		e, err := nicfw.NewEngine(l, nicfw.EngineConfig{Host: id})
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
	n.ea, n.eb = mk(amiiHostA, la), mk(amiiHostB, lb)
	if err := n.ea.AddHost(amiiHostB, lb.HardwareAddr()); err != nil {
		t.Fatal(err)
	}
	if err := n.eb.AddHost(amiiHostA, la.HardwareAddr()); err != nil {
		t.Fatal(err)
	}
	a1 := nicfw.Name{Host: amiiHostA, Endpoint: 1}
	b1 := nicfw.Name{Host: amiiHostB, Endpoint: 1}
	b2 := nicfw.Name{Host: amiiHostB, Endpoint: 2}
	open := func(e *nicfw.Engine, id nicfw.EndpointID, vnet nicfw.VNet, poll func() (int, error), cfg AMIIConfig) *AMII {
		m, err := e.CreateEndpoint(id, nicfw.EndpointConfig{}, vnet)
		if err != nil {
			t.Fatal(err)
		}
		v, err := nicfw.MapEndpoint(m.FD())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := v.Close(); err != nil {
				t.Error(err)
			}
		})
		a, err := NewAMII(v, poll, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	n.a1 = open(n.ea, 1, nicfw.VNet{Tag: amiiRed, Table: []nicfw.Name{b1, b2}}, n.poll, cfgA)
	n.b1 = open(n.eb, 1, nicfw.VNet{Tag: amiiRed, Table: []nicfw.Name{a1}}, n.enginesOnly, AMIIConfig{})
	n.b2 = open(n.eb, 2, nicfw.VNet{Tag: amiiBlue, Table: []nicfw.Name{a1}}, n.enginesOnly, AMIIConfig{})
	return n
}

// until polls a (and, through the net's poll, the engines) until done, for
// at most five seconds.
func until(t *testing.T, a *AMII, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatal("not done after 5 s")
		}
		if _, err := a.Poll(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAMIIRoundTrip sends requests of 0..8 arguments from A1 to B1, whose
// handler replies with the arguments reversed; and requests to a handler
// that does not reply, which come back as implicit replies running nothing.
func TestAMIIRoundTrip(t *testing.T) {
	n := newAMIINet(t, AMIIConfig{})
	n.serveB = true
	var got [][]uint64
	var replySources []uint32
	reply := n.a1.Register(func(tok *Token2, args []uint64) {
		if tok.IsRequest() {
			t.Error("reply handler runs for a request")
		}
		replySources = append(replySources, tok.Source())
		got = append(got, slices.Clone(args))
	})
	var sources []uint32
	echo := n.b1.Register(func(tok *Token2, args []uint64) {
		sources = append(sources, tok.Source())
		r := slices.Clone(args)
		slices.Reverse(r)
		if err := tok.Reply(reply, r...); err != nil {
			t.Error(err)
		}
	})
	silent := n.b1.Register(func(*Token2, []uint64) {})
	for k := 0; k <= MaxArgs2; k++ {
		args := make([]uint64, k)
		for i := range args {
			args[i] = uint64(k)<<32 | uint64(i) | 1<<63
		}
		if err := n.a1.Request(0, echo, args...); err != nil {
			t.Fatal(err)
		}
		until(t, n.a1, func() bool { return len(got) == k+1 })
		want := slices.Clone(args)
		slices.Reverse(want)
		if !slices.Equal(got[k], want) {
			t.Errorf("%d arguments: reply carries %x, want %x", k, got[k], want)
		}
	}
	for range 3 {
		if err := n.a1.Request(0, silent, 7); err != nil {
			t.Fatal(err)
		}
	}
	until(t, n.a1, func() bool { return n.a1.Outstanding() == 0 })
	if len(got) != MaxArgs2+1 {
		t.Errorf("%d reply handlers ran, want %d (implicit replies run none)", len(got), MaxArgs2+1)
	}
	for _, s := range append(sources, replySources...) {
		if s != 0 {
			t.Errorf("source index %d, want 0 (the peer's index in the receiver's table)", s)
		}
	}
	sa, sb := n.a1.Stats(), n.b1.Stats()
	if sa.Requests != 12 || sa.ReplyHandled != 9 || sb.Handled != 12 || sb.Replies != 9 || sb.NullReplies != 3 {
		t.Errorf("stats A1 %+v, B1 %+v", sa, sb)
	}
}

// TestAMIIDiscipline checks the request/reply discipline and the API's
// argument checks.
func TestAMIIDiscipline(t *testing.T) {
	n := newAMIINet(t, AMIIConfig{})
	n.serveB = true
	var errs []error
	var replyErr error
	reply := n.a1.Register(func(tok *Token2, args []uint64) {
		replyErr = tok.Reply(0)
		errs = append(errs, n.a1.Request(0, 0), func() error { _, err := n.a1.Poll(); return err }())
	})
	var first, second, inner, poll, tooLong error
	req := n.b1.Register(func(tok *Token2, args []uint64) {
		tooLong = tok.Reply(reply, make([]uint64, MaxArgs2+1)...)
		first = tok.Reply(reply)
		second = tok.Reply(reply)
		inner = n.b1.Request(0, 0)
		_, poll = n.b1.Poll()
	})
	if err := n.a1.Request(0, req); err != nil {
		t.Fatal(err)
	}
	until(t, n.a1, func() bool { return n.a1.Outstanding() == 0 })
	if first != nil || !errors.Is(tooLong, ErrTooLong) {
		t.Errorf("first reply: %v; nine arguments: %v", first, tooLong)
	}
	for what, err := range map[string]error{"second reply": second, "request in a request handler": inner,
		"poll in a request handler": poll, "reply in a reply handler": replyErr} {
		if !errors.Is(err, ErrDiscipline) {
			t.Errorf("%s: %v, want ErrDiscipline", what, err)
		}
	}
	if len(errs) != 2 || !errors.Is(errs[0], ErrDiscipline) || !errors.Is(errs[1], ErrDiscipline) {
		t.Errorf("request and poll in a reply handler: %v, want ErrDiscipline", errs)
	}
	if err := n.a1.Request(0, req, make([]uint64, MaxArgs2+1)...); !errors.Is(err, ErrTooLong) {
		t.Errorf("request of nine arguments: %v, want ErrTooLong", err)
	}
	if err := n.a1.Request(2, req); !errors.Is(err, ErrBadIndex) {
		t.Errorf("request to index 2 of a 2-entry table: %v, want ErrBadIndex", err)
	}
	if n.a1.Outstanding() != 0 {
		t.Errorf("%d outstanding after refused requests", n.a1.Outstanding())
	}
	if _, err := NewAMII(nil, n.poll, AMIIConfig{}); err == nil {
		t.Error("NewAMII without a view succeeded")
	}
}

// TestAMIIReturnBadTag sends a request to B2, an endpoint of another
// virtual network: it is never delivered and comes back to A1's error
// handler with ReasonBadTag, giving back its credit.
func TestAMIIReturnBadTag(t *testing.T) {
	n := newAMIINet(t, AMIIConfig{})
	n.serveB = true
	var ran bool
	n.b2.Register(func(*Token2, []uint64) { ran = true })
	var returned []Returned
	n.a1.OnReturn(func(r Returned) { returned = append(returned, r) })
	if err := n.a1.Request(1, 0, 3, 1, 4); err != nil {
		t.Fatal(err)
	}
	until(t, n.a1, func() bool { return len(returned) > 0 })
	if _, err := n.b2.Poll(); err != nil {
		t.Fatal(err)
	}
	r := returned[0]
	if r.Reason != nicfw.ReasonBadTag || !r.Request || r.Dest != 1 || r.Handler != 0 || !slices.Equal(r.Args, []uint64{3, 1, 4}) {
		t.Errorf("returned %+v, want the request (1, 0, [3 1 4]) with reason bad tag", r)
	}
	if ran || n.b2.Stats().Handled != 0 {
		t.Error("a message with another network's tag was delivered")
	}
	if n.a1.Outstanding() != 0 || n.a1.Stats().Returned != 1 {
		t.Errorf("outstanding %d, stats %+v: the return did not give back the credit", n.a1.Outstanding(), n.a1.Stats())
	}
}

// TestAMIICredits: with K = 3 and B not running its handlers, A1 gets
// three requests out and the fourth gives up; once B answers, every request
// gets through and never more than K are outstanding.
func TestAMIICredits(t *testing.T) {
	const k = 3
	n := newAMIINet(t, AMIIConfig{Credits: k, GiveUp: 30 * time.Millisecond})
	replies := 0
	reply := n.a1.Register(func(*Token2, []uint64) { replies++ })
	maxSeen := 0
	handled := 0
	echo := n.b1.Register(func(tok *Token2, args []uint64) {
		handled++
		maxSeen = max(maxSeen, n.a1.Outstanding())
		if err := tok.Reply(reply, args...); err != nil {
			t.Error(err)
		}
	})
	for i := range k {
		if err := n.a1.Request(0, echo, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.a1.Request(0, echo, k); !errors.Is(err, ErrTimeout) {
		t.Fatalf("request %d with %d credits in use: %v, want ErrTimeout", k+1, k, err)
	}
	if n.a1.Outstanding() != k || handled != 0 {
		t.Fatalf("outstanding %d, handled %d; want %d, 0", n.a1.Outstanding(), handled, k)
	}
	n.serveB = true
	const more = 50
	for i := range more {
		if err := n.a1.Request(0, echo, uint64(i)); err != nil {
			t.Fatal(err)
		}
		if o := n.a1.Outstanding(); o > k {
			t.Fatalf("%d requests outstanding, K is %d", o, k)
		}
	}
	if err := n.a1.Drain(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if handled != k+more || replies != k+more || maxSeen > k {
		t.Errorf("handled %d, replies %d, want %d; most outstanding seen by B %d, K %d", handled, replies, k+more, maxSeen, k)
	}
	if _, err := NewAMII(nil, nil, AMIIConfig{}); err == nil {
		t.Error("NewAMII without arguments succeeded")
	}
}
