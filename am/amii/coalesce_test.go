package amii

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/nicfw"
)

// coalescePair is two endpoints on engines of their own over la and lb
// (window and channels 16); A coalesces its requests.
func coalescePair(t *testing.T, la, lb afxdp.Link) (a, b *Endpoint, ea *nicfw.Engine) {
	t.Helper()
	testenv.NoMemfdLeaks(t, "xam-endpoint")
	mk := func(self HostID, l afxdp.Link, peer HostID, mac net.HardwareAddr, cfg Config) (*Endpoint, *nicfw.Engine) {
		ec := nicfw.EngineConfig{Host: self, Window: 16}
		ec.Transport.Channels = 16
		ec.Transport.RetransmitAfter = 2 * time.Millisecond
		e, err := nicfw.NewEngine(l, ec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		if err := e.AddHost(peer, mac); err != nil {
			t.Fatal(err)
		}
		ep, err := New(e, VNet{ID: 5, Tag: amiiRed, Table: []Name{{Host: peer, Endpoint: 5}}}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		return ep, e
	}
	a, ea = mk(amiiHostA, la, amiiHostB, lb.HardwareAddr(), Config{Credits: 16, Coalesce: true})
	b, eb := mk(amiiHostB, lb, amiiHostA, la.HardwareAddr(), Config{Credits: 16})
	// The transports' handshake (the RESETs that AddHost sends) before
	// any request, so that the first poll's frames are the requests'.
	for range 3 {
		for _, e := range []*nicfw.Engine{ea, eb} {
			if _, err := e.Poll(); err != nil {
				t.Fatal(err)
			}
		}
	}
	return a, b, ea
}

// coalesceBody: requests of a coalescing endpoint wait for its next poll,
// which sends them in one engine run, packed; a stream of them arrives
// exactly once, in order on a lossless link (per channel under loss).
func coalesceBody(t *testing.T, a, b *Endpoint, ea *nicfw.Engine, count int) {
	t.Helper()
	var got []uint64
	if err := b.Handle(3, func(_ *Token, args []uint64) { got = append(got, args[0]) }); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(10) {
		if err := a.Request(0, 3, i); err != nil {
			t.Fatal(err)
		}
	}
	before := ea.TransportStats()
	if before.Sent != 0 {
		t.Fatalf("%d messages sent before the endpoint polled", before.Sent)
	}
	if _, err := a.Poll(); err != nil {
		t.Fatal(err)
	}
	if st := ea.TransportStats(); st.Sent != 10 || st.Packed != 10 || st.BatchFrames-before.BatchFrames != 1 {
		t.Fatalf("one poll: %d sent in %d frames, %d packed; want 10 in 1 frame", st.Sent, st.BatchFrames-before.BatchFrames, st.Packed)
	}
	// A stream, B served by a goroutine of its own as another host's
	// application would be: the requests between two polls of A leave
	// together.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var serveErr error
	wg.Go(func() {
		for !stop.Load() {
			if _, err := b.Poll(); err != nil {
				serveErr = err
				return
			}
		}
	})
	var err error
	for i := uint64(10); i < uint64(count) && err == nil; i++ {
		err = a.Request(0, 3, i)
	}
	if err == nil {
		err = a.Drain(30 * time.Second)
	}
	stop.Store(true)
	wg.Wait()
	if err != nil || serveErr != nil {
		t.Fatalf("stream: %v, serving: %v; A %+v, B %+v", err, serveErr, a.Stats(), b.Stats())
	}
	if len(got) != count {
		t.Fatalf("%d of %d delivered; A %+v, B %+v", len(got), count, a.Stats(), b.Stats())
	}
	seen := make(map[uint64]bool, count)
	for _, v := range got {
		if seen[v] {
			t.Fatalf("request %d delivered twice", v)
		}
		seen[v] = true
	}
	if len(seen) != count {
		t.Fatalf("%d distinct requests delivered, want %d", len(seen), count)
	}
}

// TestCoalesce runs coalesceBody over memlink with 5% loss and
// duplication.
func TestCoalesce(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{Loss: 0.05, Duplicate: 0.05, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	a, b, ea := coalescePair(t, la, lb)
	coalesceBody(t, a, b, ea, 3000)
}

// TestCoalesceAllocs: a burst of eight coalesced requests, sent packed,
// handled, answered packed and taken back, allocates nothing.
func TestCoalesceAllocs(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	a, b, ea := coalescePair(t, la, lb)
	handled := 0
	if err := b.Handle(3, func(*Token, []uint64) { handled++ }); err != nil {
		t.Fatal(err)
	}
	var runErr error
	burst := func() {
		for i := range uint64(8) {
			if runErr = a.Request(0, 3, i); runErr != nil {
				return
			}
		}
		for a.Outstanding() > 0 {
			if _, runErr = a.Poll(); runErr != nil {
				return
			}
			if _, runErr = b.Poll(); runErr != nil {
				return
			}
		}
	}
	burst() // warm up: buffers grow to their size
	allocs := testing.AllocsPerRun(100, burst)
	if runErr != nil {
		t.Fatal(runErr)
	}
	if allocs != 0 {
		t.Errorf("a burst of 8 coalesced requests: %.1f allocations", allocs)
	}
	if st := ea.TransportStats(); st.Packed == 0 {
		t.Errorf("nothing packed: %+v", st)
	}
	if handled != 8*102 {
		t.Errorf("%d handled, want %d", handled, 8*102)
	}
}

// The implicit replies one poll owes a requester leave as one reply that
// answers them all: ten requests handled in one poll, five answered by
// their handlers and five not, cost five replies and one implicit reply,
// and every credit comes back.
func TestImplicitRepliesTogether(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	a, b, _ := coalescePair(t, la, lb)
	if err := b.Handle(3, func(tok *Token, args []uint64) {
		if args[0]%2 == 0 {
			if err := tok.Reply(4, args[0]); err != nil {
				t.Error(err)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	var replies []uint64
	if err := a.Handle(4, func(_ *Token, args []uint64) { replies = append(replies, args[0]) }); err != nil {
		t.Fatal(err)
	}
	for i := range uint64(10) {
		if err := a.Request(0, 3, i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Poll(); err != nil { // the ten leave in one frame
		t.Fatal(err)
	}
	if n, err := b.Poll(); err != nil || n != 10 {
		t.Fatalf("B's poll ran %d handlers, %v; want 10", n, err)
	}
	for range 100 {
		if a.Outstanding() == 0 {
			break
		}
		if _, err := a.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	sa, sb := a.Stats(), b.Stats()
	if a.Outstanding() != 0 || len(replies) != 5 || sa.LateReplies != 0 {
		t.Fatalf("A: %d outstanding, replies %v, stats %+v", a.Outstanding(), replies, sa)
	}
	if sb.Replies != 5 || sb.NullReplies != 5 || sb.NullReplyMessages != 1 {
		t.Errorf("B stats %+v: want 5 replies, 5 requests answered implicitly by 1 message", sb)
	}
}
