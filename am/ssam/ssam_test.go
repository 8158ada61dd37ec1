package ssam

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/driver"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/loader"
)

// testVCI is the VCI of the test connections' short cells (the bulk VC is
// testVCI+1), the same at both ends.
const testVCI = 32

// pair is two SSAM endpoints joined by one connection (number 0 at each
// end) over a link, and how to inject loss into it.
type pair struct {
	a, b    *Endpoint
	setLoss func(t *testing.T, p float64)
	// macA and macB are the ends' MAC addresses; inject sends raw frames
	// onto the wire beside the endpoints, from A's side towards B (toB)
	// or from B's side towards A, whatever their source address says.
	macA, macB net.HardwareAddr
	inject     func(toB bool, frames [][]byte) error
}

// linkPairs are the links every test body runs over: the in-memory link
// and real AF_XDP sockets on a veth pair, with xam's XDP program admitting
// only the connection's VCIs.
var linkPairs = []struct {
	name string
	new  func(t *testing.T, cfg Config) *pair
}{
	{"memlink", newMemPair},
	{"afxdp", newXDPPair},
}

func deviceConfig(peer net.HardwareAddr, cfg Config) driver.Config {
	c := cfg
	c.fill()
	return driver.Config{
		Conns:     []driver.ConnSpec{{Peer: peer, SendVCI: testVCI, RecvVCI: testVCI}},
		SendSlots: SendSlots(c.Window, c.MaxMessage),
		RecvSlots: 4096,
	}
}

func endpoints(t testing.TB, la, lb afxdp.Link, cfg Config) (*Endpoint, *Endpoint) {
	t.Helper()
	var eps [2]*Endpoint
	for i, l := range []afxdp.Link{la, lb} {
		peer := lb.HardwareAddr()
		if i == 1 {
			peer = la.HardwareAddr()
		}
		d, err := driver.Open(l, deviceConfig(peer, cfg))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if eps[i], err = New(d, cfg); err != nil {
			t.Fatal(err)
		}
	}
	return eps[0], eps[1]
}

func newMemPair(t *testing.T, cfg Config) *pair {
	p := &pair{}
	var a, b *memlink.Link
	p.setLoss = func(t *testing.T, loss float64) {
		t.Helper()
		var err error
		a, b, err = memlink.NewPair(memlink.Options{Loss: loss, Seed: 1, Depth: 8192})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close(); b.Close() })
		p.a, p.b = endpoints(t, a, b, cfg)
		p.macA, p.macB = a.HardwareAddr(), b.HardwareAddr()
		la, lb := a, b
		p.inject = func(toB bool, frames [][]byte) error {
			from := lb
			if toB {
				from = la
			}
			_, err := from.Send(frames) // safe beside the device's own sends
			return err
		}
	}
	p.setLoss(t, 0)
	return p
}

func newXDPPair(t *testing.T, cfg Config) *pair {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	var progs []*loader.Program
	var socks []*afxdp.Socket
	for _, h := range []*netnstest.Host{v.A, v.B} {
		var prog *loader.Program
		var sock *afxdp.Socket
		err := h.Do(func() (err error) {
			if prog, err = loader.Load(loader.Config{DstMAC: h.MAC, Admission: true}); err != nil {
				return err
			}
			if _, err = prog.Attach(h.Index, loader.ModeAuto); err != nil {
				return err
			}
			for _, vci := range []uint16{testVCI, testVCI + 1} {
				if err := prog.Admit(0, vci); err != nil {
					return err
				}
			}
			if sock, err = afxdp.Open(h.Index, afxdp.Options{}); err != nil {
				return err
			}
			return prog.Register(0, sock.FD())
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sock.Close(); sock.Recv(nil); prog.Close() })
		progs = append(progs, prog)
		socks = append(socks, sock)
	}
	p := &pair{macA: v.A.MAC, macB: v.B.MAC}
	p.a, p.b = endpoints(t, socks[0], socks[1], cfg)
	p.inject = rawInjector(t, v)
	p.setLoss = func(t *testing.T, loss float64) {
		t.Helper()
		for i, prog := range progs {
			if err := prog.SetFaults(loader.Faults{DropRate: loss, Seed: uint64(7 + i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return p
}

// exchange runs n requests from a to b, each carrying its number and size
// bytes of data, answered by b with a reply carrying the same. It checks
// that every request handler and every reply handler runs exactly once, in
// order, with the data intact.
func exchange(t *testing.T, p *pair, n int, size func(i int) int) {
	t.Helper()
	payload := func(i int) []byte {
		d := make([]byte, max(size(i), 8))
		binary.BigEndian.PutUint64(d, uint64(i))
		for j := 8; j < len(d); j++ {
			d[j] = byte(i + j)
		}
		return d[:size(i)]
	}
	check := func(what string, want int, data []byte) error {
		if exp := payload(want); !bytes.Equal(data, exp) {
			return fmt.Errorf("%s %d: %d bytes %x..., want %d bytes", what, want, len(data), data[:min(len(data), 16)], len(exp))
		}
		return nil
	}
	// The responder's state is touched only by its goroutine, the
	// requester's only by this one, until the responder has stopped.
	var got, replies int
	var failA, failB error
	var replyH HandlerID
	reqH := p.b.Register(func(tk *Token, data []byte) {
		if err := check("request", got, data); err != nil && failB == nil {
			failB = err
		}
		got++
		if err := tk.Reply(replyH, data); err != nil && failB == nil {
			failB = err
		}
	})
	replyH = p.a.Register(func(tk *Token, data []byte) {
		if err := check("reply", replies, data); err != nil && failA == nil {
			failA = err
		}
		replies++
	})
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := p.b.Poll(); err != nil && failB == nil {
				failB = err
				return
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
			<-stopped
		}
	}()
	for i := range n {
		if err := p.a.Request(0, reqH, payload(i)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	err := p.a.Drain(20 * time.Second)
	close(stop)
	<-stopped
	if err != nil {
		t.Fatalf("%v (%d of %d replies; requester %+v; responder %+v)", err, replies, n, p.a.Stats(), p.b.Stats())
	}
	if failA != nil || failB != nil {
		t.Fatal(errors.Join(failA, failB))
	}
	if got != n || replies != n {
		t.Fatalf("%d request handlers and %d reply handlers ran for %d requests", got, replies, n)
	}
	if s := p.b.Stats(); s.Handled != uint64(n) {
		t.Fatalf("responder stats %+v", s)
	}
}

func TestRoundTrips(t *testing.T) {
	for _, lp := range linkPairs {
		t.Run(lp.name, func(t *testing.T) {
			p := lp.new(t, Config{MaxMessage: MaxBulk})
			// Every single-cell size, then multi-cell sizes up to 64 KB.
			sizes := []int{}
			for n := 0; n <= MaxShort; n++ {
				sizes = append(sizes, n)
			}
			sizes = append(sizes, 41, 48, 88, 89, 1000, 1500, 8192, 30000, MaxBulk)
			exchange(t, p, len(sizes), func(i int) int { return sizes[i] })
		})
	}
}

func TestLoss(t *testing.T) {
	for _, lp := range linkPairs {
		for _, loss := range []float64{0.05, 0.20} {
			t.Run(fmt.Sprintf("%s/%.0f%%", lp.name, 100*loss), func(t *testing.T) {
				p := lp.new(t, Config{Window: 8, Timeout: time.Millisecond, MaxMessage: 2000})
				p.setLoss(t, loss)
				rng := rand.New(rand.NewPCG(3, 4))
				sizes := make([]int, 2000)
				for i := range sizes {
					if rng.IntN(4) == 0 {
						sizes[i] = 41 + rng.IntN(1900)
					} else {
						sizes[i] = rng.IntN(MaxShort + 1)
					}
				}
				exchange(t, p, len(sizes), func(i int) int { return sizes[i] })
				sa, sb := p.a.Stats(), p.b.Stats()
				if sa.Retransmits == 0 {
					t.Errorf("no retransmissions under %.0f%% loss: %+v", 100*loss, sa)
				}
				t.Logf("requester %+v", sa)
				t.Logf("responder %+v", sb)
			})
		}
	}
}

func TestDiscipline(t *testing.T) {
	p := newMemPair(t, Config{})
	var errs []error
	var replyH HandlerID
	replyH = p.a.Register(func(tk *Token, data []byte) {
		errs = append(errs, tk.Reply(replyH, nil))  // a reply handler may not reply
		errs = append(errs, p.a.Request(0, 0, nil)) // nor request
		_, err := p.a.Poll()                        // nor poll
		errs = append(errs, err)
	})
	reqH := p.b.Register(func(tk *Token, data []byte) {
		errs = append(errs, tk.Reply(replyH, []byte("one")))
		errs = append(errs, tk.Reply(replyH, []byte("two")))  // a second reply
		errs = append(errs, p.b.Request(0, 0, []byte("req"))) // a request from a handler
	})
	if err := p.a.Request(0, reqH, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.a.Outstanding(0) > 0 && time.Now().Before(deadline) {
		p.b.Poll()
		p.a.Poll()
	}
	if len(errs) != 6 || errs[0] != nil {
		t.Fatalf("errors %v", errs)
	}
	for i, err := range errs[1:] {
		if !errors.Is(err, ErrDiscipline) {
			t.Errorf("violation %d: %v, want ErrDiscipline", i+1, err)
		}
	}
	if err := p.a.Request(0, reqH, make([]byte, 9000)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("9000-byte request on an 8192-byte endpoint: %v", err)
	}
	if err := p.a.Request(5, reqH, nil); !errors.Is(err, ErrBadDest) {
		t.Errorf("request on connection 5: %v", err)
	}
}

// A request to a handler nobody answers is acknowledged explicitly, and a
// duplicate request is answered from the saved answer without running the
// handler again.
func TestExplicitAckAndDuplicates(t *testing.T) {
	p := newMemPair(t, Config{Timeout: time.Hour})
	runs := 0
	h := p.b.Register(func(tk *Token, data []byte) { runs++ })
	if err := p.a.Request(0, h, []byte("no reply")); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the session's sync and its answer, then the request
		p.b.Poll()
		p.a.Poll()
	}
	if p.a.Outstanding(0) != 0 || p.b.Stats().Acks != 1 || runs != 1 {
		t.Fatalf("after an unanswered request: outstanding %d, responder %+v, runs %d", p.a.Outstanding(0), p.b.Stats(), runs)
	}
	// Replay the request by hand: the responder recognises it.
	p.b.message(0, flowWord(kindRequest, 0, uint8(p.a.tag&tagLoMask)), handlerField(p.a.tag, uint32(h)), []byte("no reply"))
	if runs != 1 || p.b.Stats().DupRequests != 1 || p.b.Stats().Resent != 1 {
		t.Fatalf("duplicate request: runs %d, stats %+v", runs, p.b.Stats())
	}
	p.a.Poll()
	if p.a.Stats().DupAnswers != 1 {
		t.Fatalf("the resent ack was not dropped as a duplicate: %+v", p.a.Stats())
	}
}

func TestBuffer(t *testing.T) {
	p := newMemPair(t, Config{})
	var got string
	h := p.b.Register(func(tk *Token, data []byte) { got = string(data) })
	buf := p.a.Buffer(0)
	n := copy(buf, "written in place")
	if err := p.a.RequestBuffered(0, h, n); err != nil {
		t.Fatal(err)
	}
	p.b.Poll() // the session's sync
	p.a.Poll() // its answer: the request leaves
	p.b.Poll()
	if got != "written in place" {
		t.Fatalf("handler got %q", got)
	}
}

// A request/reply round trip allocates nothing (garbage collection pauses
// would show as latency spikes and spurious retransmissions).
func TestRoundTripAllocs(t *testing.T) {
	p := newMemPair(t, Config{Timeout: time.Hour})
	var replyH HandlerID
	reqH := p.b.Register(func(tk *Token, data []byte) { tk.Reply(replyH, data) })
	replyH = p.a.Register(func(tk *Token, data []byte) {})
	msg := make([]byte, 32)
	bulk := make([]byte, 1000)
	for _, m := range [][]byte{msg, bulk} {
		allocs := testing.AllocsPerRun(200, func() {
			if err := p.a.Request(0, reqH, m); err != nil {
				t.Fatal(err)
			}
			for p.a.Outstanding(0) > 0 {
				p.b.Poll()
				p.a.Poll()
			}
		})
		if allocs != 0 {
			t.Errorf("%d-byte round trip: %.1f allocations", len(m), allocs)
		}
	}
}

// With batching, single-cell requests and their answers travel many to a
// frame, and every guarantee still holds: exactly once, in order, under
// loss, across the wrap of the 7-bit sequence numbers with a window that
// does not divide 128.
func TestBatching(t *testing.T) {
	for _, lp := range linkPairs {
		for _, loss := range []float64{0, 0.05} {
			t.Run(fmt.Sprintf("%s/%.0f%%", lp.name, 100*loss), func(t *testing.T) {
				cfg := Config{Window: 63, Batch: 28, Timeout: time.Millisecond, MaxMessage: 1000}
				if loss == 0 {
					// No retransmission may blur the count of the
					// requester's frames, however slow the machine.
					cfg.Timeout = time.Hour
				}
				p := lp.new(t, cfg)
				p.setLoss(t, loss)
				const n = 3000
				exchange(t, p, n, func(i int) int {
					if i%50 == 49 {
						return 500 // now and then a bulk message in between
					}
					return 16
				})
				frames := p.a.dev.Stats().FramesSent // the requester's frames
				t.Logf("%d requests in %d frames; requester %+v", n, frames, p.a.Stats())
				if loss == 0 && frames > n/4 {
					t.Errorf("%d requests took %d frames: not batched", n, frames)
				}
			})
		}
	}
}

func TestBatchConfig(t *testing.T) {
	for _, cfg := range []Config{{Window: 8, Batch: 9}, {Batch: -1}} {
		if err := cfg.fill(); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

// A responder serves one requester after another on the same connection:
// each new endpoint at the requesting end begins a session of its own, and
// its requests are answered by running the handler, never by an answer
// saved for the requester before it (whose sequence numbers were the
// same), nor dropped as out of order. Before sessions, the second
// requester got the first one's saved replies for its first requests.
func TestSuccessiveRequesters(t *testing.T) {
	for _, lp := range linkPairs {
		t.Run(lp.name, func(t *testing.T) {
			p := lp.new(t, Config{})
			var replyH HandlerID
			echo := p.b.Register(func(tk *Token, data []byte) { tk.Reply(replyH, data) })
			requester := p.a
			for round := range 3 {
				if round > 0 {
					// A new requester on the same device and connection.
					var err error
					if requester, err = New(p.a.dev, Config{}); err != nil {
						t.Fatal(err)
					}
				}
				var got []string
				replyH = requester.Register(func(tk *Token, data []byte) { got = append(got, string(data)) })
				n := 5 + 10*round // within the last one's window, then beyond it
				for i := range n {
					if err := requester.Request(0, echo, fmt.Appendf(nil, "round %d request %d", round, i)); err != nil {
						t.Fatal(err)
					}
					for j := 0; len(got) <= i; j++ {
						if j > 1e6 {
							t.Fatalf("round %d: request %d unanswered; responder %+v", round, i, p.b.Stats())
						}
						p.b.Poll()
						requester.Poll()
					}
					if want := fmt.Sprintf("round %d request %d", round, i); got[i] != want {
						t.Fatalf("round %d: reply %q, want %q", round, got[i], want)
					}
				}
			}
			if s := p.b.Stats(); s.Sessions != 3 || s.Handled != 5+15+25 || s.Resent != 0 {
				t.Errorf("responder %+v", s)
			}
		})
	}
}

// A request naming a handler the responder does not have runs nothing and
// is answered with an ack that says so: the requester counts it returned
// and its error handler (OnReturn) runs, and the window moves on. Before, it got a plain
// ack, as if it had been handled.
func TestNoHandlerRejected(t *testing.T) {
	for _, lp := range linkPairs {
		t.Run(lp.name, func(t *testing.T) {
			p := lp.new(t, Config{})
			h := p.b.Register(func(*Token, []byte) {})
			var rejected []uint8
			var handlers []HandlerID
			p.a.OnReturn(func(r Returned) {
				rejected, handlers = append(rejected, r.Seq), append(handlers, r.Handler)
				if r.Dest != 0 || r.String() == "" {
					t.Errorf("returned %+v", r)
				}
			})
			for _, handler := range []HandlerID{h + 1, h, 99} {
				if err := p.a.Request(0, handler, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; p.a.Outstanding(0) > 0; i++ {
				if i > 1e6 {
					t.Fatalf("outstanding %d; A %+v; B %+v", p.a.Outstanding(0), p.a.Stats(), p.b.Stats())
				}
				p.b.Poll()
				p.a.Poll()
			}
			if !slices.Equal(rejected, []uint8{0, 2}) || !slices.Equal(handlers, []HandlerID{h + 1, 99}) || p.a.Stats().Returned != 2 || p.b.Stats().Handled != 1 || p.b.Stats().HandlerErrors != 2 {
				t.Errorf("rejected %v; A %+v; B %+v", rejected, p.a.Stats(), p.b.Stats())
			}
		})
	}
}

// TestOpenClose: Open makes the device and the endpoint on a link, and
// Close closes both, once; an endpoint made by New leaves its device to
// the caller.
func TestOpenClose(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	a, err := Open(la, lb.HardwareAddr(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(lb, la.HardwareAddr(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	h := b.Register(func(tk *Token, data []byte) { got++ })
	if err := a.Request(0, h, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		if got > 0 {
			break
		}
		a.Poll()
		b.Poll()
	}
	if got != 1 {
		t.Fatalf("the request ran its handler %d times", got)
	}
	if err := errors.Join(a.Close(), b.Close(), a.Close()); err != nil {
		t.Fatal(err)
	}
	if err := a.Device().Send(0, 0, 0); err == nil {
		t.Error("the device of a closed endpoint that Open made still sends")
	}
}

// TestFamily: what SSAM shares with amii and grim (package am). Handle
// puts a handler at an index the application chooses, refusing a taken or
// out-of-range one; Token.Source is the connection a request came on;
// Close from a handler is ErrDiscipline; after Close every call that
// sends, polls or waits is ErrClosed.
func TestFamily(t *testing.T) {
	p := newMemPair(t, Config{})
	var from []int
	var closeErr error
	const id HandlerID = 40
	if err := p.b.Handle(id, func(tk *Token, data []byte) {
		from = append(from, tk.Source())
		closeErr = p.b.Close()
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.b.Handle(id, func(*Token, []byte) {}); !errors.Is(err, ErrConflict) {
		t.Errorf("Handle at a taken index: %v, want ErrConflict", err)
	}
	if err := p.b.Handle(MaxHandlers, func(*Token, []byte) {}); !errors.Is(err, ErrNoHandler) {
		t.Errorf("Handle at MaxHandlers: %v, want ErrNoHandler", err)
	}
	if err := p.b.Handle(1, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("Handle of nil: %v, want ErrConfig", err)
	}
	if h := p.b.Register(func(*Token, []byte) {}); h != id+1 {
		t.Errorf("Register after Handle(%d): %d, want %d", id, h, id+1)
	}
	if err := p.a.Request(0, id, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := p.a.Request(-1, id, nil); !errors.Is(err, ErrBadDest) {
		t.Errorf("request on connection -1: %v, want ErrBadDest", err)
	}
	for i := 0; len(from) == 0 && i < 1000; i++ {
		p.b.Poll()
		p.a.Poll()
	}
	if !slices.Equal(from, []int{0}) || !errors.Is(closeErr, ErrDiscipline) {
		t.Fatalf("sources %v, Close from a handler: %v", from, closeErr)
	}
	if err := p.a.Drain(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(p.a.Close(), p.a.Close()); err != nil {
		t.Fatal(err)
	}
	_, pollErr := p.a.Poll()
	for name, err := range map[string]error{
		"Request": p.a.Request(0, id, nil), "RequestBuffered": p.a.RequestBuffered(0, id, 1),
		"Poll": pollErr, "Drain": p.a.Drain(time.Second), "Flush": p.a.Flush(), "Sync": p.a.Sync(0),
		"Handle": p.a.Handle(3, func(*Token, []byte) {}),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if p.a.Buffer(0) != nil {
		t.Error("Buffer after Close is not nil")
	}
}
