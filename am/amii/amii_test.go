//go:build linux

package amii

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/clock"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
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
	a1, b1, b2 *Endpoint
	serveB     bool // poll drives B1's AMII too (its handlers run)
	// restartB replaces host B by a new incarnation: a new engine on its
	// link (a new epoch) with B1 opened again.
	restartB func()
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

func newAMIINet(t testing.TB, cfgA Config) *amiiNet {
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
	open := func(e *nicfw.Engine, id nicfw.EndpointID, vnet nicfw.VNet, poll func() (int, error), cfg Config) *Endpoint {
		m, err := e.CreateEndpoint(id, endpoint.Config{}, vnet)
		if err != nil {
			t.Fatal(err)
		}
		v, err := endpoint.Map(m.FD())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := v.Close(); err != nil {
				t.Error(err)
			}
		})
		a, err := newEndpoint(v, poll, nil, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	n.a1 = open(n.ea, 1, nicfw.VNet{Tag: amiiRed, Table: []nicfw.Name{b1, b2}}, n.poll, cfgA)
	n.b1 = open(n.eb, 1, nicfw.VNet{Tag: amiiRed, Table: []nicfw.Name{a1}}, n.enginesOnly, Config{})
	n.b2 = open(n.eb, 2, nicfw.VNet{Tag: amiiBlue, Table: []nicfw.Name{a1}}, n.enginesOnly, Config{})
	n.restartB = func() {
		if err := n.eb.Close(); err != nil {
			t.Fatal(err)
		}
		n.eb = mk(amiiHostB, lb)
		if err := n.eb.AddHost(amiiHostA, la.HardwareAddr()); err != nil {
			t.Fatal(err)
		}
		n.b1 = open(n.eb, 1, nicfw.VNet{Tag: amiiRed, Table: []nicfw.Name{a1}}, n.enginesOnly, Config{})
		n.b2 = open(n.eb, 2, nicfw.VNet{Tag: amiiBlue, Table: []nicfw.Name{a1}}, n.enginesOnly, Config{})
	}
	return n
}

// until polls a (and, through the net's poll, the engines) until done, for
// at most five seconds.
func until(t *testing.T, a *Endpoint, done func() bool) {
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
	n := newAMIINet(t, Config{})
	n.serveB = true
	var got [][]uint64
	var replySources []int
	reply := n.a1.Register(func(tok *Token, args []uint64) {
		if tok.IsRequest() {
			t.Error("reply handler runs for a request")
		}
		replySources = append(replySources, tok.Source())
		got = append(got, slices.Clone(args))
	})
	var sources []int
	echo := n.b1.Register(func(tok *Token, args []uint64) {
		sources = append(sources, tok.Source())
		r := slices.Clone(args)
		slices.Reverse(r)
		if err := tok.Reply(reply, r...); err != nil {
			t.Error(err)
		}
	})
	silent := n.b1.Register(func(*Token, []uint64) {})
	for k := 0; k <= MaxArgs; k++ {
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
	if len(got) != MaxArgs+1 {
		t.Errorf("%d reply handlers ran, want %d (implicit replies run none)", len(got), MaxArgs+1)
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
	t.Run("one goroutine", func(t *testing.T) { disciplineBody(t, Config{}) })
	// Shared: A1's reply handler calling A1 waits for the give-up time.
	t.Run("shared", func(t *testing.T) { disciplineBody(t, Config{Shared: true, GiveUp: 50 * time.Millisecond}) })
}

func disciplineBody(t *testing.T, cfgA Config) {
	n := newAMIINet(t, cfgA)
	n.serveB = true
	var errs []error
	var replyErr error
	reply := n.a1.Register(func(tok *Token, args []uint64) {
		replyErr = tok.Reply(0)
		errs = append(errs, n.a1.Request(0, 0), func() error { _, err := n.a1.Poll(); return err }())
	})
	var first, second, inner, poll, tooLong error
	req := n.b1.Register(func(tok *Token, args []uint64) {
		tooLong = tok.Reply(reply, make([]uint64, MaxArgs+1)...)
		first = tok.Reply(reply)
		second = tok.Reply(reply)
		inner = n.b1.Request(0, 0)
		_, poll = n.b1.Poll()
	})
	if err := n.a1.Request(0, req); err != nil {
		t.Fatal(err)
	}
	until(t, n.a1, func() bool { return n.a1.Outstanding() == 0 })
	if first != nil || !errors.Is(tooLong, ErrTooLarge) {
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
	if err := n.a1.Request(0, req, make([]uint64, MaxArgs+1)...); !errors.Is(err, ErrTooLarge) {
		t.Errorf("request of nine arguments: %v, want ErrTooLarge", err)
	}
	if err := n.a1.Request(2, req); !errors.Is(err, ErrBadDest) {
		t.Errorf("request to index 2 of a 2-entry table: %v, want ErrBadDest", err)
	}
	if n.a1.Outstanding() != 0 {
		t.Errorf("%d outstanding after refused requests", n.a1.Outstanding())
	}
	if _, err := newEndpoint(nil, n.poll, nil, Config{}); err == nil {
		t.Error("newEndpoint without a view succeeded")
	}
}

// TestAMIIReturnBadTag sends a request to B2, an endpoint of another
// virtual network: it is never delivered and comes back to A1's error
// handler with ReasonBadTag, giving back its credit.
func TestAMIIReturnBadTag(t *testing.T) {
	n := newAMIINet(t, Config{})
	n.serveB = true
	var ran bool
	n.b2.Register(func(*Token, []uint64) { ran = true })
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
	if r.Reason != endpoint.ReasonBadTag || !r.Request || r.Dest != 1 || r.Handler != 0 || !slices.Equal(r.Args, []uint64{3, 1, 4}) {
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
	n := newAMIINet(t, Config{Credits: k, GiveUp: 30 * time.Millisecond})
	replies := 0
	reply := n.a1.Register(func(*Token, []uint64) { replies++ })
	maxSeen := 0
	handled := 0
	echo := n.b1.Register(func(tok *Token, args []uint64) {
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
	if _, err := newEndpoint(nil, nil, nil, Config{}); err == nil {
		t.Error("newEndpoint without arguments succeeded")
	}
}

// mediumFits returns the largest medium message with nargs arguments that
// the engine's transport carries.
func mediumFits(e *nicfw.Engine, nargs int) int {
	const header, ext = 24, 24 // the engine message's header and extension
	return min(endpoint.MaxMedium, e.MaxPayload()-header-8*nargs-ext)
}

func patterned(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13) ^ seed
	}
	return b
}

// TestAMIIMedium sends medium requests of many sizes from A1 to B1, more
// at once than there are medium slots and credits; B1's handler replies
// with the bytes reversed, as a medium reply. A medium message to a short
// handler is a handler error; a short one to a medium handler gets no
// data.
func TestAMIIMedium(t *testing.T) {
	n := newAMIINet(t, Config{})
	n.serveB = true
	top := mediumFits(n.ea, 2)
	var got [][]byte
	var gotArgs [][]uint64
	reply := n.a1.RegisterMedium(func(tok *Token, args []uint64, data []byte) {
		got = append(got, slices.Clone(data))
		gotArgs = append(gotArgs, slices.Clone(args))
	})
	var shortData []byte
	shortSeen := false
	echo := n.b1.RegisterMedium(func(tok *Token, args []uint64, data []byte) {
		if data == nil {
			shortSeen, shortData = true, data
			return
		}
		r := slices.Clone(data)
		slices.Reverse(r)
		if err := tok.ReplyMedium(reply, r, args[0], uint64(len(data))); err != nil {
			t.Error(err)
		}
	})
	short := n.b1.Register(func(*Token, []uint64) { t.Error("a short handler ran for a medium message") })
	sizes := []int{1, 2, 100, 1000, 3000, top - 1, top}
	const rounds = 3
	for i := range rounds * len(sizes) {
		if err := n.a1.RequestMedium(0, echo, patterned(sizes[i%len(sizes)], byte(i)), uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.a1.Drain(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if len(got) != rounds*len(sizes) {
		t.Fatalf("%d replies, want %d", len(got), rounds*len(sizes))
	}
	for i, g := range got {
		want := patterned(sizes[i%len(sizes)], byte(i))
		slices.Reverse(want)
		if !slices.Equal(g, want) || !slices.Equal(gotArgs[i], []uint64{uint64(i), uint64(len(want))}) {
			t.Fatalf("reply %d: %d bytes, args %v", i, len(g), gotArgs[i])
		}
	}
	if err := n.a1.RequestMedium(0, short, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := n.a1.Request(0, echo, 1); err != nil {
		t.Fatal(err)
	}
	if err := n.a1.Drain(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !shortSeen || shortData != nil || n.b1.Stats().HandlerErrors != 1 {
		t.Errorf("short message to a medium handler: ran %v with %v; B1 stats %+v", shortSeen, shortData, n.b1.Stats())
	}
	if err := n.a1.RequestMedium(0, echo, make([]byte, endpoint.MaxMedium+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a medium request of MaxMedium+1 bytes: %v", err)
	}
	sa, sb := n.a1.Stats(), n.b1.Stats()
	if sa.Mediums != rounds*uint64(len(sizes))+1 || sb.Mediums != rounds*uint64(len(sizes)) || sa.ReplyHandled != rounds*uint64(len(sizes)) {
		t.Errorf("stats A1 %+v, B1 %+v", sa, sb)
	}
}

// TestAMIIStore stores a bulk region from A1's staging area into B1's,
// whose handler gets the stored bytes; a region that does not fit at B1
// comes back with its reason; a region outside A1's own part is refused.
func TestAMIIStore(t *testing.T) {
	n := newAMIINet(t, Config{})
	n.serveB = true
	const length, remote = 20000, 3000
	data := patterned(length, 7)
	copy(n.a1.Staging()[100:], data)
	var stored []byte
	var storedArgs []uint64
	sink := n.b1.RegisterMedium(func(tok *Token, args []uint64, d []byte) {
		stored, storedArgs = slices.Clone(d), slices.Clone(args)
	})
	if err := n.a1.Store(Bulk{Dest: 0, Local: 100, Remote: remote, Length: length, Handler: sink, Args: []uint64{5, 6}}); err != nil {
		t.Fatal(err)
	}
	if err := n.a1.Drain(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored, data) || !slices.Equal(n.b1.Staging()[remote:remote+length], data) || !slices.Equal(storedArgs, []uint64{5, 6}) {
		t.Errorf("B1's handler got %d bytes, args %v", len(stored), storedArgs)
	}
	var returned []Returned
	n.a1.OnReturn(func(r Returned) { returned = append(returned, r) })
	far := uint32(len(n.b1.view.Staging())) - length/2
	if err := n.a1.Store(Bulk{Dest: 0, Local: 100, Remote: far, Length: length, Handler: sink}); err != nil {
		t.Fatal(err)
	}
	until(t, n.a1, func() bool { return len(returned) > 0 })
	r := returned[0]
	if r.Reason != endpoint.ReasonRange || r.Class != endpoint.ClassBulk || r.Offset != 100 || r.Length != length || r.RemoteOffset != far || !r.Request {
		t.Errorf("returned %+v", r)
	}
	if s := r.String(); s != fmt.Sprintf("request to 0, handler %d, bulk of %d bytes to offset %d: outside the receiver's store region", sink, length, far) {
		t.Errorf("Returned.String() = %q", s)
	}
	for _, c := range []struct{ off, length uint32 }{{0, 0}, {uint32(len(n.a1.Staging())) - 10, 11}} {
		if err := n.a1.Store(Bulk{Dest: 0, Local: c.off, Remote: 0, Length: c.length, Handler: sink}); !errors.Is(err, ErrBadRegion) {
			t.Errorf("Store of %d bytes at %d: %v, want ErrBadRegion", c.length, c.off, err)
		}
	}
	if n.a1.Outstanding() != 0 || n.a1.Stats().Stores != 2 {
		t.Errorf("outstanding %d, stats %+v", n.a1.Outstanding(), n.a1.Stats())
	}
}

// TestAMIIStoreRegion: a Store may write only the part of the receiver's
// staging area that the receiver exposes (its Staging, which ends where
// its medium slots begin). A Store whose region reaches into the medium
// slots comes back with ReasonRange, its handler does not run, and the
// slots keep their bytes; one that ends exactly at Staging's end is stored.
func TestAMIIStoreRegion(t *testing.T) {
	n := newAMIINet(t, Config{})
	n.serveB = true
	ran := 0
	sink := n.b1.RegisterMedium(func(*Token, []uint64, []byte) { ran++ })
	var returned []Returned
	n.a1.OnReturn(func(r Returned) { returned = append(returned, r) })
	exposed := uint32(len(n.b1.Staging()))
	whole := n.b1.view.Staging()
	if uint32(len(whole)) <= exposed+200 {
		t.Fatalf("staging %d bytes, exposed %d: no medium slots", len(whole), exposed)
	}
	slots := slices.Clone(whole[exposed:])
	const length = 64
	copy(n.a1.Staging()[0:], patterned(length, 3))
	for _, remote := range []uint32{exposed + 100, exposed - length/2} {
		returned = returned[:0]
		if err := n.a1.Store(Bulk{Dest: 0, Local: 0, Remote: remote, Length: length, Handler: sink}); err != nil {
			t.Fatal(err)
		}
		until(t, n.a1, func() bool { return len(returned) > 0 })
		if r := returned[0]; r.Reason != endpoint.ReasonRange || r.RemoteOffset != remote {
			t.Errorf("Store to %d (exposed %d): returned %+v", remote, exposed, r)
		}
	}
	if ran != 0 || !slices.Equal(whole[exposed:], slots) {
		t.Errorf("handler ran %d times; medium slots changed: %v", ran, !slices.Equal(whole[exposed:], slots))
	}
	if err := n.a1.Store(Bulk{Dest: 0, Local: 0, Remote: exposed - length, Length: length, Handler: sink}); err != nil {
		t.Fatal(err)
	}
	if err := n.a1.Drain(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if ran != 1 || !slices.Equal(n.b1.Staging()[exposed-length:], patterned(length, 3)) {
		t.Errorf("a Store that ends at Staging's end: handler ran %d times", ran)
	}
}

// TestAMIINoSuchHandler: a request naming a handler index the receiver
// never registered comes back to its sender with ReasonNoHandler (its
// credit given back), instead of a null reply the sender cannot tell from
// an answer; the receiver runs nothing. A reply to an unregistered handler
// is the requester's own mistake: counted there as a handler error.
func TestAMIINoSuchHandler(t *testing.T) {
	n := newAMIINet(t, Config{})
	n.serveB = true
	var got []uint64
	echo := n.b1.Register(func(tok *Token, args []uint64) {
		got = append(got, args[0])
		if err := tok.Reply(7, args[0]); err != nil { // A1 has no handler 7
			t.Error(err)
		}
	})
	var returned []Returned
	n.a1.OnReturn(func(r Returned) { returned = append(returned, r) })
	if err := n.a1.Request(0, echo+1, 42, 43); err != nil {
		t.Fatal(err)
	}
	if err := n.a1.RequestMedium(0, echo+5, []byte("medium"), 43); err != nil {
		t.Fatal(err)
	}
	until(t, n.a1, func() bool { return len(returned) == 2 })
	for i, r := range returned {
		if r.Reason != endpoint.ReasonNoHandler || !r.Request || r.Args[0] != 42+uint64(i) {
			t.Errorf("returned %d: %+v", i, r)
		}
		if !strings.HasSuffix(r.String(), ": no such handler") {
			t.Errorf("returned %d: %q", i, r.String())
		}
	}
	if string(returned[1].Data) != "medium" || returned[1].Handler != echo+5 {
		t.Errorf("returned medium: handler %d, data %q", returned[1].Handler, returned[1].Data)
	}
	if err := n.a1.Request(0, echo, 9); err != nil {
		t.Fatal(err)
	}
	if err := n.a1.Drain(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, []uint64{9}) || n.a1.Outstanding() != 0 || n.a1.Stats().HandlerErrors != 1 || n.b1.Stats().HandlerErrors != 0 {
		t.Errorf("handled %v, outstanding %d, A1 %+v, B1 %+v", got, n.a1.Outstanding(), n.a1.Stats(), n.b1.Stats())
	}
}

// TestAMIIReturnedMedium: a medium request to B2 (another network) comes
// back with its bytes; one to a closed B1 comes back as "endpoint closed".
func TestAMIIReturnedMedium(t *testing.T) {
	n := newAMIINet(t, Config{})
	n.serveB = true
	var returned []Returned
	n.a1.OnReturn(func(r Returned) { returned = append(returned, r) })
	data := patterned(500, 3)
	if err := n.a1.RequestMedium(1, 4, data, 9); err != nil {
		t.Fatal(err)
	}
	until(t, n.a1, func() bool { return len(returned) == 1 })
	if r := returned[0]; r.Reason != endpoint.ReasonBadTag || r.Class != endpoint.ClassMedium || !slices.Equal(r.Data, data) || !slices.Equal(r.Args, []uint64{9}) {
		t.Errorf("returned %+v", r)
	}
	if err := n.eb.CloseEndpoint(1); err != nil {
		t.Fatal(err)
	}
	n.serveB = false
	if err := n.a1.RequestMedium(0, 4, data); err != nil {
		t.Fatal(err)
	}
	until(t, n.a1, func() bool { return len(returned) == 2 })
	if r := returned[1]; r.Reason != endpoint.ReasonClosed || r.Reason.String() != "endpoint closed" || !slices.Equal(r.Data, data) {
		t.Errorf("returned %+v (%v)", r, r.Reason)
	}
	if n.a1.Outstanding() != 0 {
		t.Errorf("%d outstanding", n.a1.Outstanding())
	}
}

// TestAMIIWaitInline: Wait runs the engines until a message is there, or
// times out.
func TestAMIIWaitInline(t *testing.T) {
	n := newAMIINet(t, Config{})
	if ready, err := n.a1.Wait(20 * time.Millisecond); ready || err != nil {
		t.Fatalf("Wait with nothing coming: %v, %v; want false and no error", ready, err)
	}
	got := 0
	h := n.a1.Register(func(*Token, []uint64) { got++ })
	// B1 sends a request to A1 without running the engines: A1's Wait
	// runs them.
	if err := n.b1.view.Send(endpoint.RequestSend, &endpoint.Descriptor{Class: endpoint.ClassShort, Handler: uint32(h)}); err != nil {
		t.Fatal(err)
	}
	if ready, err := n.a1.Wait(5 * time.Second); !ready || err != nil {
		t.Fatalf("Wait with a message coming: %v, %v", ready, err)
	}
	if ran, err := n.a1.Poll(); ran != 1 || err != nil || got != 1 {
		t.Fatalf("Poll after Wait ran %d handlers (%v)", ran, err)
	}
	var inner error
	h = n.a1.Register(func(*Token, []uint64) { _, inner = n.a1.Wait(time.Millisecond) })
	if err := n.b1.view.Send(endpoint.RequestSend, &endpoint.Descriptor{Class: endpoint.ClassShort, Handler: uint32(h)}); err != nil {
		t.Fatal(err)
	}
	until(t, n.a1, func() bool { return inner != nil })
	if !errors.Is(inner, ErrDiscipline) {
		t.Errorf("Wait in a handler: %v", inner)
	}
}

// TestAMIIFirmware runs AM-II in firmware mode: the two engines in a
// goroutine of their own (a small daemon: it busy-polls, and when idle
// marks the endpoints idle, looks once more and sleeps on its wake eventfd
// until a kick or a millisecond for the timers), B1's server in another,
// blocking in Wait on its notification eventfd, and A1 in the test's,
// sending short and medium requests and blocking for credits and in Drain.
// Run it with -race.
func TestAMIIFirmware(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	cfg := nicfw.EngineConfig{Transport: transport.Config{RetransmitAfter: time.Millisecond}}
	cfg.Host = amiiHostA
	ea, err := nicfw.NewEngine(la, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ea.Close()
	cfg.Host = amiiHostB
	eb, err := nicfw.NewEngine(lb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eb.Close()
	if err := ea.AddHost(amiiHostB, lb.HardwareAddr()); err != nil {
		t.Fatal(err)
	}
	if err := eb.AddHost(amiiHostA, la.HardwareAddr()); err != nil {
		t.Fatal(err)
	}
	wake := testenv.NewEventFD(t)
	open := func(e *nicfw.Engine, peer nicfw.HostID) (*endpoint.Memory, *Endpoint, *atomic.Int64) {
		m, err := e.CreateEndpoint(1, endpoint.Config{QueueEntries: 16},
			nicfw.VNet{Tag: amiiRed, Table: []nicfw.Name{{Host: peer, Endpoint: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		v, err := endpoint.Map(m.FD())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Close() })
		notify := testenv.NewEventFD(t)
		m.SetNotify(notify.Signal)
		v.SetKick(wake.Signal)
		blocks := new(atomic.Int64)
		a, err := newEndpoint(v, nil, func(d time.Duration) error {
			blocks.Add(1)
			return notify.Block(d)
		}, Config{Spin: -1}) // always block: the blocking path is what is tested
		if err != nil {
			t.Fatal(err)
		}
		return m, a, blocks
	}
	ma, a1, blocksA := open(ea, amiiHostB)
	mb, b1, blocksB := open(eb, amiiHostA)

	// A1's reply handlers and B1's request handlers, registered before
	// their goroutines start.
	var replies []uint64
	var mediumReplies [][]byte
	reply := a1.Register(func(_ *Token, args []uint64) { replies = append(replies, args[0]) })
	mreply := a1.RegisterMedium(func(_ *Token, _ []uint64, data []byte) { mediumReplies = append(mediumReplies, slices.Clone(data)) })
	var handlerErr atomic.Value
	echo := b1.Register(func(tok *Token, args []uint64) {
		if err := tok.Reply(reply, args[0]+1); err != nil {
			handlerErr.Store(err)
		}
	})
	mecho := b1.RegisterMedium(func(tok *Token, _ []uint64, data []byte) {
		r := slices.Clone(data)
		slices.Reverse(r)
		if err := tok.ReplyMedium(mreply, r); err != nil {
			handlerErr.Store(err)
		}
	})

	top := mediumFits(ea, 0)
	stop := make(chan struct{})
	engineDone, serverDone := make(chan error, 1), make(chan error, 1)
	var sleeps atomic.Int64
	go func() { // the daemon
		idle := 0
		for {
			select {
			case <-stop:
				engineDone <- nil
				return
			default:
			}
			wa, err := ea.Poll()
			if err != nil {
				engineDone <- err
				return
			}
			wb, err := eb.Poll()
			if err != nil {
				engineDone <- err
				return
			}
			if wa+wb > 0 {
				idle = 0
				continue
			}
			if idle++; idle < 50 {
				runtime.Gosched()
				continue
			}
			ma.SetIdle(true)
			mb.SetIdle(true)
			if !ma.Pending() && !mb.Pending() {
				sleeps.Add(1)
				wake.Block(time.Millisecond)
			}
			ma.SetIdle(false)
			mb.SetIdle(false)
			idle = 0
		}
	}()
	go func() { // B1's server
		for {
			select {
			case <-stop:
				serverDone <- nil
				return
			default:
			}
			if _, err := b1.Wait(20 * time.Millisecond); err != nil {
				serverDone <- err
				return
			}
			if _, err := b1.Poll(); err != nil {
				serverDone <- err
				return
			}
		}
	}()

	const count = 1000
	var runErr error
	for i := range count {
		if i%10 == 9 {
			runErr = a1.RequestMedium(0, mecho, patterned(1+i*37%top, byte(i)))
		} else {
			runErr = a1.Request(0, echo, uint64(i))
		}
		if runErr != nil {
			break
		}
	}
	if runErr == nil {
		runErr = a1.Drain(10 * time.Second)
	}
	close(stop)
	if err := <-engineDone; err != nil {
		t.Error(err)
	}
	if err := <-serverDone; err != nil {
		t.Error(err)
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	if err, _ := handlerErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	k := 0
	for i := range count {
		if i%10 == 9 {
			want := patterned(1+i*37%top, byte(i))
			slices.Reverse(want)
			if !slices.Equal(mediumReplies[i/10], want) {
				t.Fatalf("medium reply to request %d: %d bytes", i, len(mediumReplies[i/10]))
			}
			continue
		}
		if replies[k] != uint64(i)+1 {
			t.Fatalf("reply %d: %d, want %d", k, replies[k], i+1)
		}
		k++
	}
	if len(replies) != count-count/10 || len(mediumReplies) != count/10 {
		t.Fatalf("%d short and %d medium replies", len(replies), len(mediumReplies))
	}
	if blocksA.Load() == 0 || blocksB.Load() == 0 {
		t.Errorf("A1 blocked %d times, B1 %d: the test did not wait", blocksA.Load(), blocksB.Load())
	}
	t.Logf("A1 blocked %d times, B1 %d; the engine slept %d times", blocksA.Load(), blocksB.Load(), sleeps.Load())
}

// TestAMIIShortAllocs: a short request and its reply, through both AM-II
// endpoints and both engines, allocate nothing.
func TestAMIIShortAllocs(t *testing.T) {
	n := newAMIINet(t, Config{})
	n.serveB = true
	replies := 0
	reply := n.a1.Register(func(*Token, []uint64) { replies++ })
	echo := n.b1.Register(func(tok *Token, args []uint64) { tok.Reply(reply, args[0], args[1]) })
	var err error
	round := func() {
		want := replies + 1
		if err = n.a1.Request(0, echo, 1, 2); err != nil {
			return
		}
		for i := 0; replies < want; i++ {
			if i == 10000 {
				err = errors.New("no reply")
				return
			}
			if _, err = n.a1.Poll(); err != nil {
				return
			}
		}
	}
	for range 100 {
		round()
	}
	allocs := testing.AllocsPerRun(500, round)
	if err != nil {
		t.Fatal(err)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per round trip", allocs)
	}
}

// In inline mode a reply leaves in the Poll whose handler sent it: B1
// polls once, and A1 gets the reply without B1 polling again.
func TestAMIIReplyLeavesInPoll(t *testing.T) {
	ha, hb := ownEnginePair(t)
	hb.Register(func(tok *Token, args []uint64) {
		if err := tok.Reply(0, args[0]+1); err != nil {
			t.Error(err)
		}
	})
	var got []uint64
	ha.Register(func(_ *Token, args []uint64) { got = append(got, args[0]) })
	for i := range uint64(3) {
		if err := ha.Request(0, 0, 10*i); err != nil {
			t.Fatal(err)
		}
		if n, err := hb.Poll(); err != nil || n != 1 {
			t.Fatalf("B1's Poll ran %d handlers: %v", n, err)
		}
		for range 100 {
			if _, err := ha.Poll(); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) != int(i)+1 || got[i] != 10*i+1 {
			t.Fatalf("after request %d, replies %v", i, got)
		}
	}
}

// TestAMIILateRepliesKeepTheirPlace: a reply that comes after its
// request's reply timeout answers that request, not the next one
// outstanding to the same endpoint. Replies name no request, so each ends
// the oldest record to its sender: the record of a request past its
// timeout stays (handed to the error handler, no longer counted
// outstanding) until its late reply takes it. Before, the late replies
// took the records of the requests sent after them, which were then
// counted answered before their own replies came, and a Drain returned
// with replies still to come. Over memlink (TestAMIILateRepliesOverAFXDP:
// over AF_XDP).
func TestAMIILateRepliesKeepTheirPlace(t *testing.T) {
	clk := clock.NewManual(time.Unix(1000, 0))
	n := newAMIINet(t, Config{Clock: clk, ReplyTimeout: time.Second, Credits: 8})
	lateReplies(t, clk, n.a1, n.b1, func(done func() bool) { until(t, n.a1, done) }, func() { n.serveB = true })
}

// lateReplies is the body of TestAMIILateRepliesKeepTheirPlace: a (its
// Config.Clock clk, ReplyTimeout a second) sends requests to b, the
// endpoint at its index 0, whose engine runs and whose application does
// not poll until serveB is called; until polls a (and what else its net
// needs) until done.
func lateReplies(t *testing.T, clk *clock.Manual, a, b *Endpoint, until func(done func() bool), serveB func()) {
	type answer struct {
		id          uint64
		outstanding int // when its reply ran
	}
	var answers []answer
	var returned []uint64
	b.Register(func(tok *Token, args []uint64) {
		if err := tok.Reply(0, args...); err != nil {
			t.Error(err)
		}
	})
	a.Register(func(_ *Token, args []uint64) { answers = append(answers, answer{args[0], a.outstanding()}) })
	a.OnReturn(func(r Returned) { returned = append(returned, r.Args[0]) })
	for i := range uint64(3) {
		if err := a.Request(0, 0, i); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 * replyCheckPolls { // the reply timers see them
		if _, err := a.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Second)
	until(func() bool { return len(returned) == 3 })
	for i := range uint64(2) { // outstanding behind the three past their timeout
		if err := a.Request(0, 0, 3+i); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.Outstanding(); got != 2 {
		t.Fatalf("%d outstanding, want 2", got)
	}
	serveB()
	until(func() bool { return len(answers) == 5 })
	want := []answer{{0, 2}, {1, 2}, {2, 2}, {3, 1}, {4, 0}}
	if !slices.Equal(answers, want) || !slices.Equal(returned, []uint64{0, 1, 2}) {
		t.Errorf("replies (id, outstanding as it ran) %v, want %v; returned %v", answers, want, returned)
	}
	if s := a.Stats(); s.LateReplies != 3 || s.Unanswered != 3 || s.Returned != 3 || a.Outstanding() != 0 || a.expired != 0 {
		t.Errorf("stats %+v, outstanding %d, %d records past their timeout", s, a.Outstanding(), a.expired)
	}
}

// TestAMIIRestartForgets: the requests past their reply timeout that a
// host took before it restarted will never be answered: the first message
// of its new incarnation (endpoint.Descriptor.Incarnation) drops their
// records, so the new incarnation's replies answer the requests sent to
// it, not those.
func TestAMIIRestartForgets(t *testing.T) {
	clk := clock.NewManual(time.Unix(1000, 0))
	n := newAMIINet(t, Config{Clock: clk, ReplyTimeout: time.Second, Credits: 8})
	type answer struct {
		id          uint64
		outstanding int
	}
	var answers []answer
	var returned, restarted []uint64
	reply := n.a1.Register(func(_ *Token, args []uint64) { answers = append(answers, answer{args[0], n.a1.outstanding()}) })
	serve := func(b *Endpoint) {
		b.Register(func(tok *Token, args []uint64) {
			if err := tok.Reply(reply, args...); err != nil {
				t.Error(err)
			}
		})
	}
	serve(n.b1)
	n.a1.OnReturn(func(r Returned) {
		if r.Reason == endpoint.ReasonRestarted {
			restarted = append(restarted, r.Args[0])
			return
		}
		returned = append(returned, r.Args[0])
	})
	n.serveB = true // A hears B's first incarnation
	if err := n.a1.Request(0, 0, 100); err != nil {
		t.Fatal(err)
	}
	until(t, n.a1, func() bool { return len(answers) == 1 })
	n.serveB = false
	for i := range uint64(3) {
		if err := n.a1.Request(0, 0, i); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 * replyCheckPolls {
		if _, err := n.a1.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Second)
	until(t, n.a1, func() bool { return len(returned) == 3 })
	// B restarts holding the three: they are lost with it.
	n.restartB()
	serve(n.b1)
	n.serveB = true
	// The first request to B after its restart may come back
	// ReasonRestarted (A's transport learns the new epoch from B's answer
	// to it): it is sent again.
	for i := uint64(10); i < 12; {
		if err := n.a1.Request(0, 0, i); err != nil {
			t.Fatal(err)
		}
		until(t, n.a1, func() bool { return len(answers) == int(i)-8 || len(restarted) > 0 })
		if len(restarted) > 0 {
			restarted = restarted[:0]
			continue
		}
		i++
	}
	want := []answer{{100, 0}, {10, 0}, {11, 0}}
	if !slices.Equal(answers, want) || !slices.Equal(returned, []uint64{0, 1, 2}) {
		t.Errorf("replies (id, outstanding as it ran) %v, want %v; returned %v", answers, want, returned)
	}
	if s := n.a1.Stats(); s.LateReplies != 0 || s.Forgotten != 3 || n.a1.Outstanding() != 0 || n.a1.expired != 0 {
		t.Errorf("stats %+v, outstanding %d, %d records past their timeout", s, n.a1.Outstanding(), n.a1.expired)
	}
	if len(n.a1.incs) == 0 || n.a1.incs[0] != 2 {
		t.Errorf("incarnations heard %v, want B's second (2) at index 0", n.a1.incs)
	}
}

// TestAMIIIncarnationForgets: a message from another incarnation of a
// destination's host than the one last heard drops the records of the
// requests past their reply timeout sent to it (their answers will not
// come), and only those; a first message does not (a request past its
// timeout sent before any message came may yet be answered).
func TestAMIIIncarnationForgets(t *testing.T) {
	n := newAMIINet(t, Config{Credits: 8})
	a := n.a1
	add := func(dest uint32, expired bool, inc uint8) {
		a.pending.push(pendingRequest{dest: dest, expired: expired, inc: inc})
		if expired {
			a.expired++
		}
	}
	add(0, true, 0)
	add(1, true, 0)
	add(0, false, 0)
	a.heard(0, 5) // first heard: nothing forgotten
	if a.pending.Len() != 3 || a.stats.Forgotten != 0 {
		t.Fatalf("first heard: %d records, %d forgotten", a.pending.Len(), a.stats.Forgotten)
	}
	add(0, true, 5)
	a.heard(0, 5)
	if a.pending.Len() != 4 {
		t.Fatalf("same incarnation: %d records", a.pending.Len())
	}
	a.heard(0, 6) // restarted: index 0's two expired records go, index 1's and the outstanding one stay
	if a.pending.Len() != 2 || a.stats.Forgotten != 2 || a.expired != 1 || a.outstanding() != 1 {
		t.Fatalf("after a restart: %d records, %d forgotten, %d expired, %d outstanding", a.pending.Len(), a.stats.Forgotten, a.expired, a.outstanding())
	}
	if p := a.pending.at(0); p.dest != 1 || !p.expired {
		t.Errorf("kept %+v first", *p)
	}
}

// TestAMIIReplyTimeout: requests that their receiver took and never
// answered (its application stopped polling, as one that died would) come
// back to the error handler with ReasonNoReply once the reply timeout has
// passed, their credits given back, with what they carried; replies that
// come later still run their handler, counted as late, and leave no
// credit owed. Before, such requests stayed outstanding for good, and K of
// them took every credit.
func TestAMIIReplyTimeout(t *testing.T) {
	clk := clock.NewManual(time.Unix(1000, 0))
	n := newAMIINet(t, Config{Clock: clk, ReplyTimeout: time.Second, Credits: 3})
	var replies []uint64
	reply := n.a1.Register(func(_ *Token, args []uint64) { replies = append(replies, args[0]) })
	n.b1.Register(func(tok *Token, args []uint64) {
		if err := tok.Reply(reply, args...); err != nil {
			t.Error(err)
		}
	})
	var returned []Returned
	n.a1.OnReturn(func(r Returned) { returned = append(returned, r) })
	for i := range uint64(3) {
		if err := n.a1.Request(0, 0, 40+i, 7); err != nil {
			t.Fatal(err)
		}
	}
	// B's engine takes them (its transport acknowledges them); B's
	// application never polls.
	for range 2 * replyCheckPolls {
		if _, err := n.a1.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	if len(returned) != 0 || n.a1.Outstanding() != 3 {
		t.Fatalf("before the timeout: %d returned, %d outstanding", len(returned), n.a1.Outstanding())
	}
	clk.Advance(2 * time.Second)
	until(t, n.a1, func() bool { return len(returned) == 3 })
	for i, r := range returned {
		if r.Reason != endpoint.ReasonNoReply || !r.Request || r.Dest != 0 || !slices.Equal(r.Args, []uint64{40 + uint64(i), 7}) {
			t.Errorf("returned %d: %+v", i, r)
		}
	}
	if n.a1.Outstanding() != 0 {
		t.Errorf("%d outstanding after the returns", n.a1.Outstanding())
	}
	// B's application comes back and answers: the replies run, late.
	n.serveB = true
	until(t, n.a1, func() bool { return len(replies) == 3 })
	if s := n.a1.Stats(); s.LateReplies != 3 || s.Unanswered != 3 || n.a1.Outstanding() != 0 {
		t.Errorf("stats %+v, outstanding %d", s, n.a1.Outstanding())
	}
	// The credits are all there again.
	for i := range uint64(3) {
		if err := n.a1.Request(0, 0, 50+i, 7); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.a1.Drain(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestAMIIWaitRunsReplyTimer: an application that waits in Wait, not in a
// loop of Polls, hears of a request its receiver took and never answered
// once ReplyTimeout has passed. Wait ends ready (the return is due) and
// the next Poll hands it to the error handler. Before, Wait ran the engine
// but not the reply timer, which Poll runs every few dozen calls, so a
// waiting application heard of it many timeouts late, or never.
func TestAMIIWaitRunsReplyTimer(t *testing.T) {
	clk := clock.NewManual(time.Unix(1000, 0))
	n := newAMIINet(t, Config{Clock: clk, ReplyTimeout: time.Second})
	n.b1.Register(func(*Token, []uint64) {})
	var returned []Returned
	n.a1.OnReturn(func(r Returned) { returned = append(returned, r) })
	if err := n.a1.Request(0, 0, 41, 7); err != nil {
		t.Fatal(err)
	}
	// B's engine takes it; B's application never polls. A's Polls start
	// the request's reply timer.
	for range 2 * replyCheckPolls {
		if _, err := n.a1.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	if len(returned) != 0 || n.a1.Outstanding() != 1 {
		t.Fatalf("before the timeout: %+v, %d outstanding", returned, n.a1.Outstanding())
	}
	// The manual clock stands still after this: a Wait that ran no reply
	// timer would never end.
	clk.Advance(2 * time.Second)
	done := make(chan error, 1)
	go func() {
		ready, err := n.a1.Wait(time.Hour)
		if err == nil && !ready {
			err = errors.New("not ready")
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait past the reply timeout: %v", err)
		}
	case <-time.After(time.Minute):
		clk.Advance(2 * time.Hour) // Wait's own timeout ends it
		<-done
		t.Fatal("Wait did not end when the request's reply timeout passed")
	}
	if len(returned) != 0 {
		t.Fatalf("returned in Wait: %+v", returned)
	}
	if _, err := n.a1.Poll(); err != nil {
		t.Fatal(err)
	}
	if len(returned) != 1 || returned[0].Reason != endpoint.ReasonNoReply || !slices.Equal(returned[0].Args, []uint64{41, 7}) {
		t.Fatalf("after the Poll: %+v", returned)
	}
}

// tickingClock reads step later at each reading: time passes as fast as
// the code under test looks at it, whatever the machine's load.
type tickingClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *tickingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

// TestAMIICreditWaitsForReplyTimer: every credit is held by requests whose
// receiver took them and never answers. With the default GiveUp, shorter
// than the default ReplyTimeout, a further Request waits past GiveUp until
// the reply timer returns one of them, then leaves; it does not fail with
// ErrTimeout while a credit is on its way back. Before, it failed at
// GiveUp. A GiveUp the application sets still bounds the wait
// (TestAMIICredits).
func TestAMIICreditWaitsForReplyTimer(t *testing.T) {
	clk := &tickingClock{now: time.Unix(1000, 0), step: time.Millisecond}
	n := newAMIINet(t, Config{Clock: clk, Credits: 2})
	n.b1.Register(func(*Token, []uint64) {})
	var returned []Returned
	n.a1.OnReturn(func(r Returned) { returned = append(returned, r) })
	for i := range uint64(2) {
		if err := n.a1.Request(0, 0, i); err != nil {
			t.Fatal(err)
		}
	}
	start := clk.Now()
	if err := n.a1.Request(0, 0, 2); err != nil {
		t.Fatalf("Request with the credits held, after %v: %v", clk.Now().Sub(start), err)
	}
	if waited := clk.Now().Sub(start); waited < DefaultGiveUp || len(returned) == 0 || returned[0].Reason != endpoint.ReasonNoReply {
		t.Errorf("waited %v; returned %+v", waited, returned)
	}
	// With no reply timer, nothing comes back: GiveUp ends the wait.
	n.a1.cfg.ReplyTimeout = -1
	for n.a1.Outstanding() < 2 {
		if err := n.a1.Request(0, 0, 3); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.a1.Request(0, 0, 4); !errors.Is(err, ErrTimeout) {
		t.Errorf("Request without a reply timer: %v, want ErrTimeout", err)
	}
}

// TestAMIIReturnOfForgottenRequest: a request past its reply timeout was
// handed to the error handler, and its record forgotten when its
// destination restarted; its return, if it still comes, finds no record
// and is counted late, not handed over a second time.
func TestAMIIReturnOfForgottenRequest(t *testing.T) {
	n := newAMIINet(t, Config{Credits: 8})
	a := n.a1
	handed := 0
	a.OnReturn(func(Returned) { handed++ })
	a.pending.push(pendingRequest{dest: 0, expired: true, inc: 5})
	a.expired++
	a.heard(0, 5)
	a.heard(0, 6) // restarted: the expired record goes
	if a.pending.Len() != 0 || a.stats.Forgotten != 1 {
		t.Fatalf("after a restart: %d records, %d forgotten", a.pending.Len(), a.stats.Forgotten)
	}
	a.d = endpoint.Descriptor{Class: endpoint.ClassShort | endpoint.ClassReturned, Dest: 0, Handler: 3, NArgs: 1}
	if ran := a.returned(endpoint.ReasonUnreachable, true); ran != 0 || handed != 0 {
		t.Fatalf("the forgotten request's return ran %d error handlers (%d)", ran, handed)
	}
	if a.stats.LateReplies != 1 || a.stats.Returned != 0 {
		t.Fatalf("LateReplies %d, Returned %d; want 1, 0", a.stats.LateReplies, a.stats.Returned)
	}
}
