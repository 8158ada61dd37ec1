//go:build linux

package grim

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// TestGRIMReturns: what does not arrive comes back to the sender's error
// handler with its identity and a reason, inline and in firmware mode —
// a short, bulk or memory message for a handler id the receiver has not
// registered (above every registered id: the engine returns it; between
// two: the receiver's layer answers so), a memory message outside the
// receiver's region, and a request its receiver took and never answered
// (it stopped running its endpoint, then closed it): ReasonNoReply after
// Config.ReplyTimeout. Nothing stays pending.
func TestGRIMReturns(t *testing.T) {
	for _, firmware := range []bool{false, true} {
		t.Run(fmt.Sprintf("firmware=%v", firmware), func(t *testing.T) {
			hosts := cluster(t, xdptest.Hub(t, 2, memlink.Options{Seed: 31}),
				clusterConfig{channels: 2, window: 8, firmware: firmware, replyTimeout: 300 * time.Millisecond})
			recv := hosts[1]
			var mu sync.Mutex
			var handled int
			var got []Returned
			h := func(*Token, [ShortArgs]uint32, []byte) { mu.Lock(); handled++; mu.Unlock() }
			if err := errors.Join(recv.ep.Handle(16, h), recv.ep.Handle(18, h)); err != nil {
				t.Fatal(err)
			}
			hosts[0].ep.OnReturn(func(r Returned) { mu.Lock(); got = append(got, r); mu.Unlock() })
			for _, h := range hosts {
				h.start()
			}
			var err error
			hosts[0].do(func(ep *Endpoint) {
				c0, c1 := ep.ch(0), ep.ch(1)
				err = errors.Join(
					c0.Short(1, 200, 1, 2, 3, 4),
					c1.Short(1, 17, 5),
					c0.Bulk(1, 201, make([]byte, 10_000), 9),
					c1.Write(1, uint32(ep.cfg.MemorySize-10), make([]byte, 100)),
					c0.Short(1, 16, 6), // handled
				)
			})
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, &mu, "four messages returned", func() bool { return len(got) == 4 && handled == 1 })
			mu.Lock()
			slices.SortFunc(got, func(a, b Returned) int { return int(a.Handler) - int(b.Handler) })
			want := []Returned{
				{Reason: ReasonNoHandler, Request: true, Dest: 1, Channel: 1, Handler: 17, Args: [ShortArgs]uint32{5}},
				{Reason: ReasonNoHandler, Request: true, Dest: 1, Channel: 0, Handler: 200, Args: [ShortArgs]uint32{1, 2, 3, 4}},
				{Reason: ReasonNoHandler, Request: true, Dest: 1, Channel: 0, Handler: 201, Args: [ShortArgs]uint32{9}, Length: 10_000},
				{Reason: ReasonRange, Request: true, Dest: 1, Channel: 1, Handler: HandlerMemory, Length: 100, Write: true, At: uint32(hosts[0].ep.cfg.MemorySize - 10)},
			}
			want[3].Handler = HandlerMemory
			slices.SortFunc(want, func(a, b Returned) int { return int(a.Handler) - int(b.Handler) })
			if !slices.Equal(got, want) {
				t.Errorf("returned:\n%v\nwant:\n%v", got, want)
			}
			got = nil
			mu.Unlock()
			var st Stats
			var pending, writes int
			settle(t, hosts[0], "every request answered", func(ep *Endpoint) bool {
				st, pending, writes = ep.Stats(), 0, 0
				for i := range ep.Channels() {
					pending += ep.ch(i).Outstanding()
					writes += ep.ch(i).Writes()
				}
				return pending == 0
			})
			if st.Returned != 4 || pending != 0 || writes != 0 {
				t.Errorf("after the returns: %+v, %d pending, %d writes", st, pending, writes)
			}
			recv.do(func(ep *Endpoint) { st = ep.Stats() })
			if st.HandlerErrors != 1 {
				t.Errorf("receiver: %+v, want one request for an unknown handler", st)
			}

			// The receiver stops running its endpoint (its engine still
			// delivers: the daemon's, or inline its own run here) and
			// closes it: the request is taken and never answered.
			recv.halt()
			stop := recv.engineOnly(t)
			hosts[0].do(func(ep *Endpoint) { err = ep.ch(1).Short(1, 16, 77) })
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, &mu, "the unanswered request returned", func() bool { return len(got) == 1 })
			stop()
			if err := recv.ep.Close(); err != nil {
				t.Error(err)
			}
			mu.Lock()
			if w := (Returned{Reason: ReasonNoReply, Request: true, Dest: 1, Channel: 1, Handler: 16, Args: [ShortArgs]uint32{77}}); got[0] != w {
				t.Errorf("returned %v, want %v", got[0], w)
			}
			mu.Unlock()
			hosts[0].do(func(ep *Endpoint) { st, pending = ep.Stats(), ep.ch(1).Outstanding() })
			if st.Unanswered != 1 || pending != 0 {
				t.Errorf("after the reply timeout: %+v, %d pending", st, pending)
			}
		})
	}
}

// engineOnly runs h's inline engine, not its handlers, in a goroutine of
// its own until stop is called (a firmware-mode host's daemon runs
// anyway): a receiver whose application stopped polling.
func (h *host) engineOnly(t *testing.T) (stop func()) {
	var halt atomic.Bool
	var wg sync.WaitGroup
	if h.eng != nil {
		wg.Go(func() {
			for !halt.Load() {
				if _, err := h.eng.Poll(); err != nil {
					t.Error(err)
					return
				}
				runtime.Gosched()
			}
		})
	}
	stop = func() { halt.Store(true); wg.Wait() }
	t.Cleanup(stop)
	return stop
}

// settle runs cond in h's goroutine until it holds, for at most a minute.
func settle(t *testing.T, h *host, what string, cond func(*Endpoint) bool, report ...func(*Endpoint) string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		ok := false
		h.do(func(ep *Endpoint) { ok = cond(ep) })
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for _, r := range report {
				h.do(func(ep *Endpoint) { what += "; " + r(ep) })
			}
			t.Fatalf("%s: not after a minute", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGRIMMisuse: misuse is an error, never a panic, in both modes: a
// channel that does not exist, five integers, a name registered twice, a
// nil handler, and every call on an endpoint, or a channel of it, once it
// is closed.
func TestGRIMMisuse(t *testing.T) {
	for _, firmware := range []bool{false, true} {
		t.Run(fmt.Sprintf("firmware=%v", firmware), func(t *testing.T) {
			hosts := cluster(t, xdptest.Hub(t, 2, memlink.Options{}), clusterConfig{channels: 2, window: 1, firmware: firmware})
			ep := hosts[0].ep
			for _, i := range []int{-1, 2, 1 << 30} {
				if _, err := ep.Channel(i); !errors.Is(err, ErrChannel) {
					t.Errorf("Channel(%d): %v, want ErrChannel", i, err)
				}
			}
			c := ep.ch(1)
			if err := c.Short(1, 16, 1, 2, 3, 4, 5); !errors.Is(err, ErrTooLarge) {
				t.Errorf("five integers: %v, want ErrTooLarge", err)
			}
			h := func(*Token, [ShortArgs]uint32, []byte) {}
			if err := ep.HandleNamed("twice", 20, h); err != nil {
				t.Fatal(err)
			}
			if err := ep.HandleNamed("twice", 20, h); !errors.Is(err, ErrConflict) {
				t.Errorf("the same name and id twice: %v, want ErrConflict", err)
			}
			if err := ep.Handle(21, nil); !errors.Is(err, ErrConfig) {
				t.Errorf("a nil handler: %v, want ErrConfig", err)
			}
			for _, dest := range []int{-1, 2} {
				if err := c.Short(dest, 16); !errors.Is(err, ErrBadDest) {
					t.Errorf("a short message to %d: %v, want ErrBadDest", dest, err)
				}
			}
			if cfg := ep.Config(); cfg.Channels != 2 || cfg.GiveUp == 0 || cfg.Tag == 0 {
				t.Errorf("Config %+v: want 2 channels, defaults filled in", cfg)
			}
			if err := ep.Close(); err != nil {
				t.Fatal(err)
			}
			_, werr := ep.Wait(time.Millisecond)
			_, perr := ep.Poll()
			_, cerr := ep.Channel(0)
			_, serr := c.Stream(1, 16, 100)
			for what, err := range map[string]error{
				"Short": c.Short(1, 16), "Bulk": c.Bulk(1, 16, []byte{1}), "Write": c.Write(1, 0, []byte{1}),
				"Stream": serr, "Wait": werr, "Poll": perr, "Channel": cerr, "Handle": ep.Handle(22, h),
				"HandleNamed": ep.HandleNamed("late", 23, h), "Publish": ep.Publish(), "Drain": ep.Drain(time.Second),
			} {
				if !errors.Is(err, ErrClosed) {
					t.Errorf("%s after Close: %v, want ErrClosed", what, err)
				}
			}
			if ep.Memory() != nil {
				t.Error("Memory after Close is not nil")
			}
			if err := ep.Close(); err != nil {
				t.Errorf("a second Close: %v", err)
			}
		})
	}
}

// TestGRIMOpenWait: Open builds an inline endpoint with its engine; an
// inline Wait runs the engine until a message is there (true) or its
// timeout has passed (false), instead of returning at once.
func TestGRIMOpenWait(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	defer lb.Close()
	peers := []nicfw.Name{{Host: 1, Endpoint: 16}, {Host: 2, Endpoint: 16}}
	if _, err := Open(la, Inline{}, Config{Peers: peers}); !errors.Is(err, ErrConfig) {
		t.Errorf("Open without the peer's address: %v, want ErrConfig", err)
	}
	// Peers whose channels would share endpoints: the same one twice, or
	// two on one host less than MaxChannels ids apart.
	hosts := Inline{Hosts: map[nicfw.HostID]net.HardwareAddr{2: lb.HardwareAddr()}}
	for _, ps := range [][]nicfw.Name{
		{{Host: 1, Endpoint: 16}, {Host: 2, Endpoint: 16}, {Host: 2, Endpoint: 16}},
		{{Host: 1, Endpoint: 16}, {Host: 2, Endpoint: 40}, {Host: 2, Endpoint: 16 + MaxChannels + 9}},
	} {
		if _, err := Open(la, hosts, Config{Peers: ps}); !errors.Is(err, ErrConfig) {
			t.Errorf("Open with peers %v: %v, want ErrConfig", ps, err)
		}
	}
	a, err := Open(la, Inline{Hosts: map[nicfw.HostID]net.HardwareAddr{2: lb.HardwareAddr()}}, Config{Peers: peers})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(lb, Inline{Hosts: map[nicfw.HostID]net.HardwareAddr{1: la.HardwareAddr()}}, Config{Peers: peers, Self: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var n int
	if err := b.Handle(16, func(*Token, [ShortArgs]uint32, []byte) { n++ }); err != nil {
		t.Fatal(err)
	}
	const idle = 50 * time.Millisecond
	start := time.Now()
	if ready, err := b.Wait(idle); ready || err != nil {
		t.Errorf("Wait with nothing sent: %v, %v", ready, err)
	}
	if d := time.Since(start); d < idle {
		t.Errorf("Wait returned after %v, before its timeout %v", d, idle)
	}
	if err := a.ch(0).Short(1, 16); err != nil {
		t.Fatal(err)
	}
	for n == 0 {
		// a runs its engine (sends, and takes the acknowledgement); b
		// waits for the message, then runs its handler.
		if _, err := a.Poll(); err != nil {
			t.Fatal(err)
		}
		ready, err := b.Wait(time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if ready {
			if _, err := b.Poll(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestGRIMReplyTimerStartsWhenSent: a request queued behind one to a dead
// host is not timed while it waits. The dead host's request, sent at once,
// comes back once: ReasonNoReply after the 2 s reply timeout (the
// transport's give-up, 3 s, comes later and is only counted); the other,
// queued behind it for 3 s, longer than the reply timeout, is handled and
// answered once, never returned.
func TestGRIMReplyTimerStartsWhenSent(t *testing.T) {
	hosts := cluster(t, xdptest.Hub(t, 3, memlink.Options{Seed: 37}),
		clusterConfig{channels: 1, window: 1, deployed: true, replyTimeout: 2 * time.Second})
	var mu sync.Mutex
	var got []Returned
	handled := 0
	if err := hosts[1].ep.Handle(16, func(*Token, [ShortArgs]uint32, []byte) { mu.Lock(); handled++; mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	hosts[0].ep.OnReturn(func(r Returned) { mu.Lock(); got = append(got, r); mu.Unlock() })
	hosts[0].start()
	hosts[1].start() // host 3 never runs: a dead host
	var err error
	hosts[0].do(func(ep *Endpoint) { err = errors.Join(ep.ch(0).Short(2, 16, 1), ep.ch(0).Short(1, 16, 2)) })
	if err != nil {
		t.Fatal(err)
	}
	var st Stats
	settle(t, hosts[0], "both requests answered or returned, the give-up counted", func(ep *Endpoint) bool {
		st = ep.Stats()
		return ep.ch(0).Outstanding() == 0 && st.LateReplies == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Reason != ReasonNoReply || got[0].Dest != 2 || handled != 1 {
		t.Errorf("returned %v, %d handled: want the dead host's request back once, the other handled", got, handled)
	}
	if st.Unanswered != 1 || st.Returned != 1 {
		t.Errorf("%+v", st)
	}
}

// A firmware-mode send that finds its channel's queue full sleeps between
// its Polls as a long wait does (TestGRIMFirmwareWaitSleeps): with the
// receiver's endpoint never running, the sender's requests fill the
// receiver's queues, the engine's window and then the channel's send
// queue, and the send that finds it full times out after Config.GiveUp
// (a second here) having polled a few hundred times at most, where the
// spinning loop it replaces polled thousands of times.
func TestGRIMFirmwareFullQueueSleeps(t *testing.T) {
	hosts := cluster(t, xdptest.Hub(t, 2, memlink.Options{}), clusterConfig{channels: 1, window: 8, firmware: true})
	if err := hosts[1].ep.Handle(16, func(*Token, [ShortArgs]uint32, []byte) {}); err != nil {
		t.Fatal(err)
	}
	hosts[0].start()
	var err error
	var sent int
	var polls uint64
	hosts[0].do(func(ep *Endpoint) {
		ep.cfg.GiveUp = time.Second
		for ; sent < 1<<16; sent++ {
			before := ep.polls
			if err = ep.ch(0).Short(1, 16, uint32(sent)); err != nil {
				polls = ep.polls - before
				return
			}
		}
	})
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "full") {
		t.Fatalf("after %d requests: %v, want ErrTimeout for a full channel (the receiver never runs)", sent, err)
	}
	if polls > 500 {
		t.Errorf("a one-second wait for room polled %d times: it spins", polls)
	}
	t.Logf("after %d requests, a one-second firmware-mode wait for room polled %d times", sent, polls)
}

// A firmware-mode wait that finds nothing sleeps on the channels'
// notifications between its Polls instead of spinning: a one-second Drain
// for a request its receiver never answers (the receiver's endpoint never
// runs) times out after a few hundred Polls at most, where a spinning
// wait makes one every few microseconds. Inline, the wait runs the engine
// and so polls on.
func TestGRIMFirmwareWaitSleeps(t *testing.T) {
	hosts := cluster(t, xdptest.Hub(t, 2, memlink.Options{}), clusterConfig{channels: 1, window: 8, firmware: true})
	if err := hosts[1].ep.Handle(16, func(*Token, [ShortArgs]uint32, []byte) {}); err != nil {
		t.Fatal(err)
	}
	hosts[0].start()
	var err error
	var polls uint64
	hosts[0].do(func(ep *Endpoint) {
		if err = ep.ch(0).Short(1, 16, 7); err != nil {
			return
		}
		before := ep.polls
		err = ep.Drain(time.Second)
		polls = ep.polls - before
	})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Drain: %v, want ErrTimeout (the receiver never answers)", err)
	}
	if polls > 500 {
		t.Errorf("a one-second wait polled %d times: it spins", polls)
	}
	t.Logf("a one-second firmware-mode wait polled %d times", polls)
}

// TestGRIMPublishFromHandler: Publish from a handler is a discipline
// error, as Poll, Wait, Drain and Close from one are: on the central
// endpoint (which merges at once) and on another. Before, the central
// endpoint's returned nil and another's a misleading ErrBusy.
func TestGRIMPublishFromHandler(t *testing.T) {
	hosts := cluster(t, xdptest.Hub(t, 2, memlink.Options{}), clusterConfig{channels: 1, window: 1})
	var mu sync.Mutex
	errs := map[int]error{}
	for i, h := range hosts {
		ep := h.ep
		if err := ep.Handle(16, func(*Token, [ShortArgs]uint32, []byte) {
			err := ep.Publish()
			mu.Lock()
			errs[i] = err
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range hosts {
		h.start()
	}
	for i, h := range hosts {
		var err error
		h.do(func(ep *Endpoint) { err = ep.ch(0).Short(1-i, 16) })
		if err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, &mu, "both handlers run", func() bool { return len(errs) == 2 })
	mu.Lock()
	defer mu.Unlock()
	for i, err := range errs {
		if !errors.Is(err, ErrDiscipline) {
			t.Errorf("Publish from a handler on host %d: %v, want ErrDiscipline", i, err)
		}
	}
}

// TestGRIMPollLetsOthersIn: on one processor, a client that polls in a
// loop for its reply, from a server host in another goroutine of the same
// process, lets that goroutine run within a few empty Polls (when it waits
// for the processor), instead of holding the processor until the Go
// scheduler preempts it, 10 ms at a time. It counts the client's Polls per
// round trip: a few hundred at most with the yields, hundreds of
// thousands without.
func TestGRIMPollLetsOthersIn(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	hosts := cluster(t, xdptest.Hub(t, 2, memlink.Options{}), clusterConfig{channels: 1, window: 1})
	if err := hosts[1].ep.Handle(16, func(tok *Token, args [ShortArgs]uint32, _ []byte) {
		if err := tok.Reply(17, args[0]); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	replies := 0
	if err := hosts[0].ep.Handle(17, func(*Token, [ShortArgs]uint32, []byte) { replies++ }); err != nil {
		t.Fatal(err)
	}
	hosts[1].start()
	const rounds = 50
	polls := 0
	c := hosts[0].ep.ch(0)
	for i := range rounds {
		if err := c.Short(1, 16, uint32(i)); err != nil {
			t.Fatal(err)
		}
		for replies <= i {
			if _, err := hosts[0].ep.Poll(); err != nil {
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
