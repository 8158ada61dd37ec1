//go:build linux

package grim

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon/daemontest"
	"github.com/xam-project/xam/nicfw/transport"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// host is one host of a test cluster: an engine and a GRIM endpoint on it,
// run by a goroutine of its own that polls and runs what the test hands it
// (do), as a host's own thread would.
type host struct {
	ep    *Endpoint
	eng   *nicfw.Engine
	jobs  chan func(*Endpoint)
	done  chan struct{}
	stop  atomic.Bool
	wg    sync.WaitGroup
	err   error
	index int
}

// clusterConfig says how a test cluster's hosts run: each endpoint's
// channels, the engines' window, firmware mode (an engine daemon per
// host, the endpoints dialing it), and whether the hosts of even index
// inject cut-through.
type clusterConfig struct {
	channels, window int
	firmware         bool
	cutThrough       bool
	pool             int // each endpoint's receive pool (0: the default)
	// deployed: the engines as `xam fw` configures them by default
	// (window 1, the transport's default channels and give-up time).
	deployed bool
	// giveUp, if not 0, is the transport's give-up time: a minute for a
	// deployed cluster whose messages must all arrive on a loaded machine
	// of two cores, where a starved host misses the default 3 s and its
	// messages come back unreachable (and such a test gives replyTimeout
	// more than the default 6 s, for the same reason).
	giveUp time.Duration
	// replyTimeout is every endpoint's Config.ReplyTimeout (0: the
	// default).
	replyTimeout time.Duration
	// poolHold is the engines' EngineConfig.PoolHold (0: the default).
	poolHold time.Duration
	// key authenticates every endpoint's messages (Config.Key).
	key []byte
	// noArrivals makes the inline endpoints look at every channel's
	// queues, as they do when their channels have no arrival bits.
	noArrivals bool
}

// cluster makes hosts 1..n on links (one per host), each with a GRIM
// endpoint (id 16); peers lists all n. The hosts' goroutines are started
// with h.start.
func cluster(t *testing.T, links []afxdp.Link, cc clusterConfig) []*host {
	t.Helper()
	n := len(links)
	var peers []nicfw.Name
	for i := range n {
		peers = append(peers, nicfw.Name{Host: nicfw.HostID(i + 1), Endpoint: 16})
	}
	var sockets []string
	if cc.firmware {
		sockets = daemontest.Start(t, links, func(id nicfw.HostID) nicfw.EngineConfig { return cc.engineConfig(id) })
	}
	var hosts []*host
	for i, l := range links {
		// A call waits up to a minute for the engine, as the transport
		// retries for a minute: the default, 10 s, ran out once
		// (TestGRIMOverAFXDP, "channel 1 full") in a CI run of the whole
		// suite on 2 CPUs, and not in eight runs beside other packages'
		// tests, with this tree's binary or the one before it.
		cfg := Config{Peers: peers, Self: i, Channels: cc.channels, CutThrough: cc.cutThrough && i%2 == 0, PoolSize: cc.pool,
			ReplyTimeout: cc.replyTimeout, Key: cc.key, GiveUp: time.Minute}
		if cc.firmware {
			ep, err := Dial(sockets[i], cfg)
			if err != nil {
				t.Fatal(err)
			}
			if ep.arrivals == nil {
				t.Fatal("the daemon gave the channels no page of doorbells: no arrival bits")
			}
			h := &host{ep: ep, jobs: make(chan func(*Endpoint)), done: make(chan struct{}), index: i}
			t.Cleanup(func() {
				h.halt()
				ep.Close()
			})
			hosts = append(hosts, h)
			continue
		}
		eng, err := nicfw.NewEngine(l, cc.engineConfig(nicfw.HostID(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		for j, o := range links {
			if j != i {
				if err := eng.AddHost(nicfw.HostID(j+1), o.HardwareAddr()); err != nil {
					t.Fatal(err)
				}
			}
		}
		ep, err := New(eng, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if ep.arrivals == nil {
			t.Fatal("an inline endpoint's channels have no arrival bits")
		}
		if cc.noArrivals {
			ep.arrivals = nil
		}
		h := &host{ep: ep, eng: eng, jobs: make(chan func(*Endpoint)), done: make(chan struct{}), index: i}
		t.Cleanup(func() {
			h.halt()
			ep.Close()
			eng.Close()
		})
		hosts = append(hosts, h)
	}
	return hosts
}

// start runs h's goroutine.
func (h *host) start() {
	h.wg.Go(func() {
		for !h.stop.Load() {
			select {
			case f := <-h.jobs:
				f(h.ep)
				h.done <- struct{}{}
			default:
				n, err := h.ep.Poll()
				if err != nil && h.err == nil {
					h.err = err
				}
				if n == 0 && h.eng == nil {
					runtime.Gosched() // firmware mode: the daemons' threads share the cores
				}
			}
		}
	})
}

// engineConfig is the engines' configuration: host id, window, and
// retransmission in milliseconds, for tests on loaded machines.
func engineConfig(id nicfw.HostID, window int) nicfw.EngineConfig {
	return nicfw.EngineConfig{Host: id, Window: window,
		Transport: transport.Config{RetransmitAfter: 5 * time.Millisecond, GiveUpAfter: time.Minute, Channels: 16}}
}

// engineConfig is the engines' configuration under cc.
func (cc clusterConfig) engineConfig(id nicfw.HostID) nicfw.EngineConfig {
	ec := engineConfig(id, cc.window)
	if cc.deployed {
		ec = nicfw.EngineConfig{Host: id, Window: cc.window}
	}
	if cc.giveUp != 0 {
		ec.Transport.GiveUpAfter = cc.giveUp
	}
	ec.PoolHold = cc.poolHold
	return ec
}

// drain runs the engine until it is done with c's payload region.
func (c *Channel) drain() error {
	return c.ep.runUntil(func() bool { return !c.overlaps(0, c.ep.cfg.PayloadSize) },
		func() string { return fmt.Sprintf("channel %d: the engine still reads %d messages", c.n, len(c.live)) })
}

// halt stops h's goroutine.
func (h *host) halt() {
	h.stop.Store(true)
	h.wg.Wait()
}

// do runs f in h's goroutine and waits for it.
func (h *host) do(f func(*Endpoint)) {
	h.jobs <- f
	<-h.done
}

// eventually polls cond (under no lock of the hosts: cond reads what
// handlers wrote under mu) until it holds, for at most a minute. When it
// does not, the failure says what each report returns (called without
// mu).
func eventually(t *testing.T, mu *sync.Mutex, what string, cond func() bool, reports ...func() string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		mu.Lock()
		ok := cond()
		mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, r := range reports {
				b.WriteString("\n" + r())
			}
			t.Fatalf("%s: not after a minute%s", what, b.String())
		}
		time.Sleep(time.Millisecond)
	}
}

// state describes h for a test's failure: its endpoint's counters, its
// channels' queues (QueueState) and the first error its Poll returned,
// read in h's goroutine ("busy" when it does not take the job within a
// second).
func (h *host) state() string {
	out := make(chan string, 1)
	select {
	case h.jobs <- func(ep *Endpoint) {
		out <- fmt.Sprintf("host %d: %+v; %s; poll error %v", h.index, ep.Stats(), ep.QueueState(), h.err)
	}:
	case <-time.After(time.Second):
		return fmt.Sprintf("host %d: busy", h.index)
	}
	<-h.done
	return <-out
}

// TestGRIM runs the body on a memlink hub of four hosts, without and with
// 10% of the frames lost.
func TestGRIM(t *testing.T) {
	for _, loss := range []float64{0, 0.1} {
		t.Run(fmt.Sprintf("loss=%v", loss), func(t *testing.T) {
			grimBody(t, xdptest.Hub(t, 4, memlink.Options{Loss: loss, Seed: 11}), clusterConfig{})
		})
	}
}

// TestGRIMWithoutArrivalBits is TestGRIM's lossy run with the endpoints
// looking at every channel's queues (the channels' arrival bits unused),
// the way of endpoints whose engine gave them no page of doorbells.
func TestGRIMWithoutArrivalBits(t *testing.T) {
	grimBody(t, xdptest.Hub(t, 4, memlink.Options{Loss: 0.1, Seed: 11}), clusterConfig{noArrivals: true})
}

// TestGRIMPoolExhausted: three hosts send bulk messages at once to a
// fourth whose receive pool holds one at a time: the receiving engine
// refuses messages (NACK) while the pool is full, the senders' transports
// send them again after their back-off, and every message arrives once,
// intact, with no deadlock.
func TestGRIMPoolExhausted(t *testing.T) {
	hosts := cluster(t, xdptest.Hub(t, 4, memlink.Options{Loss: 0.05, Seed: 14}), clusterConfig{channels: 1, window: 8, pool: MaxBulk})
	for _, h := range hosts {
		h.start()
	}
	const per, size = 8, 30_000
	var mu sync.Mutex
	got := map[[2]uint32]int{}
	var bad int
	hosts[3].do(func(ep *Endpoint) {
		ep.Handle(40, func(_ *Token, args [ShortArgs]uint32, data []byte) { //nolint:errcheck
			mu.Lock()
			got[[2]uint32{args[0], args[1]}]++
			if !bytes.Equal(data, pattern(size, byte(args[0]*per+args[1]))) {
				bad++
			}
			mu.Unlock()
		})
	})
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		wg.Go(func() {
			hosts[i].do(func(ep *Endpoint) {
				for k := range per {
					if errs[i] = ep.ch(0).Bulk(3, 40, pattern(size, byte(i*per+k)), uint32(i), uint32(k)); errs[i] != nil {
						return
					}
				}
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	eventually(t, &mu, "bulk messages into a full pool", func() bool { return len(got) == 3*per })
	mu.Lock()
	for k, n := range got {
		if n != 1 {
			t.Errorf("message %v handled %d times", k, n)
		}
	}
	if bad > 0 {
		t.Errorf("%d messages arrived with other bytes", bad)
	}
	mu.Unlock()
	var st nicfw.EngineStats
	hosts[3].do(func(*Endpoint) { st = hosts[3].eng.Stats() }) // the host's goroutine runs its engine
	if st.PoolFull == 0 {
		t.Errorf("the pool never ran out: %+v", st)
	}
}

// TestGRIMCutThrough is the body with hosts 1 and 3 injecting cut-through,
// with 10% of the frames lost.
func TestGRIMCutThrough(t *testing.T) {
	grimBody(t, xdptest.Hub(t, 4, memlink.Options{Loss: 0.1, Seed: 12}), clusterConfig{cutThrough: true})
}

// TestGRIMFirmware is the body in firmware mode: an engine daemon per
// host, each GRIM endpoint dialing its host's; hosts 1 and 3 cut-through.
func TestGRIMFirmware(t *testing.T) {
	grimBody(t, xdptest.Hub(t, 4, memlink.Options{Loss: 0.05, Seed: 13}), clusterConfig{firmware: true, cutThrough: true})
}

// grimBody: the registry (registration, publish, lookup on every host, a
// conflicting name refused, a host that joins later gets the table); short
// messages on two channels of one host, each channel's in order and
// exactly once; bulk messages at the sizes around the engine's chunk and
// up to MaxBulk, intact; memory messages that land exactly and complete.
// Host 4 joins late.
func grimBody(t *testing.T, links []afxdp.Link, cc clusterConfig) {
	cc.channels, cc.window = 2, 8 // order per channel with a window above 1 (Ordered)
	hosts := cluster(t, links, cc)
	for _, h := range hosts[:3] {
		h.start()
	}
	var mu sync.Mutex
	seen := map[[2]int][]uint32{} // (peer, channel) -> sequence numbers at host 3
	var bulks [][]byte
	count := func(tok *Token, args [ShortArgs]uint32, _ []byte) {
		p, c := tok.Source()
		mu.Lock()
		seen[[2]int{p, c}] = append(seen[[2]int{p, c}], args[0])
		mu.Unlock()
	}
	keep := func(tok *Token, args [ShortArgs]uint32, data []byte) {
		mu.Lock()
		bulks = append(bulks, bytes.Clone(data))
		mu.Unlock()
		tok.Reply(HandlerNull) //nolint:errcheck
	}
	var err error
	hosts[2].do(func(ep *Endpoint) {
		if err = ep.HandleNamed("count", 20, count); err == nil {
			if err = ep.HandleNamed("keep", 21, keep); err == nil {
				err = ep.Publish()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	hosts[1].do(func(ep *Endpoint) {
		if err = ep.HandleNamed("count", 22, count); err == nil { // another id: refused at the central
			err = ep.Publish()
		}
	})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("a second id under one name: %v, want ErrConflict", err)
	}
	hosts[1].do(func(ep *Endpoint) {
		if err = ep.HandleNamed("keep", 21, keep); err == nil {
			err = ep.HandleNamed("count", 23, count) // a local conflict: "count" is 22 here
		}
	})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("a second id under one name, locally: %v, want ErrConflict", err)
	}
	// Host 4 joins late and looks the handlers up.
	hosts[3].start()
	var e Entry
	var ok bool
	hosts[3].do(func(ep *Endpoint) {
		if err = ep.Publish(); err == nil {
			e, ok = ep.Lookup("count")
		}
	})
	if err != nil || !ok || e.ID != 20 || len(e.Owners) != 1 || e.Owners[0] != hosts[2].ep.Name() {
		t.Fatalf("late joiner: %v, %+v %v", err, e, ok)
	}

	// Short messages on both channels of host 2, by name.
	const per = 300
	for c := range 2 {
		hosts[1].do(func(ep *Endpoint) {
			peer, id, err2 := ep.Owner("keep") // the table host 2 received with its refusal
			if err2 != nil || peer != 2 || id != 21 {
				err = fmt.Errorf("owner of keep: %d %d %v", peer, id, err2)
				return
			}
			for k := range per {
				if err = ep.ch(c).Short(2, 20, uint32(k), uint32(c)); err != nil {
					return
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, &mu, "short messages", func() bool { return len(seen[[2]int{1, 0}]) == per && len(seen[[2]int{1, 1}]) == per })
	mu.Lock()
	for c := range 2 {
		for k, s := range seen[[2]int{1, c}] {
			if s != uint32(k) {
				t.Fatalf("channel %d: message %d is %d", c, k, s)
			}
		}
	}
	mu.Unlock()

	// Hosts 1, 2 and 4 inject at once, each on both its channels, into
	// host 3: every channel's messages in order, each once.
	mu.Lock()
	clear(seen)
	mu.Unlock()
	const each = 100
	var senders sync.WaitGroup
	errs := make([]error, len(hosts))
	for _, i := range []int{0, 1, 3} {
		senders.Go(func() {
			hosts[i].do(func(ep *Endpoint) {
				for k := range 2 * each {
					if errs[i] = ep.ch(k%2).Short(2, 20, uint32(k/2), uint32(k%2)); errs[i] != nil {
						return
					}
				}
			})
		})
	}
	senders.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	reports := []func() string{func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("arrived per (host, channel): %v", mapLens(seen))
	}}
	for _, h := range hosts {
		reports = append(reports, h.state)
	}
	eventually(t, &mu, "short messages from three hosts at once", func() bool {
		n := 0
		for _, s := range seen {
			n += len(s)
		}
		return n == 3*2*each
	}, reports...)
	mu.Lock()
	for src, s := range seen {
		for k, v := range s {
			if v != uint32(k) {
				t.Fatalf("peer %d channel %d: message %d is %d", src[0], src[1], k, v)
			}
		}
	}
	mu.Unlock()

	// Bulk messages around the chunk size and up to MaxBulk.
	room := 1200 // about a chunk
	if hosts[0].eng != nil {
		room = hosts[0].eng.MaxPayload() - 200
	}
	sizes := []int{1, 31, 32, 33, room, room + 1, 2*room + 7, MaxBulk - 1, MaxBulk}
	for i, n := range sizes {
		// From host 1 and host 2: one of them cut-through, if any.
		hosts[i%2].do(func(ep *Endpoint) { err = ep.ch(i%2).Bulk(2, 21, pattern(n, byte(i))) })
		if err != nil {
			t.Fatalf("bulk of %d bytes: %v", n, err)
		}
	}
	// A slow writer streams a message cut-through, pausing between
	// segments while the engines run: the bytes not yet written read
	// 0xEE in the payload region, and none of them may arrive.
	slow := pattern(20_000, 0x5a)
	hosts[0].do(func(ep *Endpoint) {
		c := ep.ch(0)
		if err = c.drain(); err != nil { // what the region holds has left
			return
		}
		payload := c.view.Staging()[c.payload:]
		for i := range payload {
			payload[i] = 0xEE
		}
		c.next = 0
		sent := func() uint64 {
			if ep.eng == nil {
				return 0
			}
			return ep.eng.Stats().Sent
		}
		var st *Stream
		if st, err = c.Stream(2, 21, len(slow)); err != nil {
			return
		}
		at := 0
		for seg := Segment; at < len(slow) && err == nil; seg *= 2 {
			before := sent()
			n := min(seg, len(slow)-at)
			if _, err = st.Write(slow[at : at+n]); err != nil {
				return
			}
			at += n
			for range 50 { // a pause: the engine runs, the writer does not
				if _, err = ep.Poll(); err != nil {
					return
				}
			}
			// Inline, the first segment leaves while the rest is unwritten.
			for deadline := time.Now().Add(time.Minute); ep.eng != nil && at == Segment && sent() == before; {
				if _, err = ep.Poll(); err != nil {
					return
				}
				if time.Now().After(deadline) {
					err = fmt.Errorf("nothing left while %d of %d bytes were written", at, len(slow))
					return
				}
			}
			time.Sleep(50 * time.Microsecond)
		}
		if err == nil {
			err = st.Close()
		}
	})
	if err != nil {
		for _, h := range hosts {
			h.do(func(ep *Endpoint) {
				var ch []string
				for _, c := range ep.chans {
					ch = append(ch, fmt.Sprintf("requests %d deferred %d live %d", len(c.pending), len(c.replies), len(c.live)))
				}
				t.Logf("host %d: %+v %v", h.index+1, ep.Stats(), ch)
				if ep.eng != nil {
					t.Logf("   engine %+v\n   transport %+v", ep.eng.Stats(), ep.eng.TransportStats())
				}
			})
		}
		t.Fatalf("stream: %v", err)
	}
	sizes = append(sizes, len(slow))
	eventually(t, &mu, "bulk messages", func() bool { return len(bulks) == len(sizes) })
	mu.Lock()
	if !slices.ContainsFunc(bulks, func(b []byte) bool { return bytes.Equal(b, slow) }) {
		t.Error("the streamed message did not arrive intact")
	}
	mu.Unlock()
	sizes = sizes[:len(sizes)-1]
	mu.Lock()
	for _, b := range bulks { // two channels: in order per channel only
		found := bytes.Equal(b, slow)
		for i, n := range sizes {
			found = found || len(b) == n && bytes.Equal(b, pattern(n, byte(i)))
		}
		if !found {
			t.Errorf("a bulk message of %d bytes matches none sent", len(b))
		}
	}
	mu.Unlock()

	// Memory messages: into host 4's region, completed at host 1.
	data := pattern(20_000, 0x77)
	hosts[0].do(func(ep *Endpoint) {
		if err = ep.ch(0).Write(3, 100, data[:12_000]); err == nil {
			if err = ep.ch(1).Write(3, 100+12_000, data[12_000:]); err == nil {
				err = ep.Drain(2 * time.Minute) // a bound for a hang: loaded CI machines took more than 10 s
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	hosts[3].do(func(ep *Endpoint) { got = bytes.Clone(ep.Memory()[100 : 100+len(data)]) })
	if !bytes.Equal(got, data) {
		t.Error("memory messages: the region does not hold the bytes written")
	}
	hosts[0].do(func(ep *Endpoint) {
		if st := ep.Stats(); st.Completed != 2 || st.Writes != 2 {
			err = fmt.Errorf("writer's stats %+v", st)
		}
	})
	if err != nil {
		t.Error(err)
	}
	for _, h := range hosts {
		h.halt()
		if h.err != nil {
			t.Errorf("host %d: %v", h.index+1, h.err)
		}
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13) ^ seed
	}
	return b
}

// FuzzTable feeds the registry's table parser any bytes: it never panics,
// and what it accepts encodes back to the same bytes.
func FuzzTable(f *testing.F) {
	f.Add(encodeTable(Table{"count": {ID: 20, Name: "count", Owners: []nicfw.Name{{Host: 3, Endpoint: 16}}}}))
	f.Add(encodeTable(Table{"a": {ID: 16, Name: "a"}, "b": {ID: 17, Name: "b", Owners: []nicfw.Name{{Host: 1, Endpoint: 16}, {Host: 2, Endpoint: 32}}}}))
	f.Add([]byte{0, 0, 0, 20, 0})
	f.Add([]byte{0, 0, 0, 20, 200, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := decodeTable(b)
		if err != nil {
			return
		}
		for name, e := range tab {
			if e.Name != name {
				t.Fatalf("entry %q named %q", name, e.Name)
			}
		}
		if len(b) > 0 && len(tab) > 0 {
			if again, err := decodeTable(encodeTable(tab)); err != nil || len(again) != len(tab) {
				t.Fatalf("re-encoded: %v, %d entries of %d", err, len(again), len(tab))
			}
		}
	})
}

// mapLens returns the length of each of m's lists.
func mapLens[K comparable, V any](m map[K][]V) map[K]int {
	n := make(map[K]int, len(m))
	for k, l := range m {
		n[k] = len(l)
	}
	return n
}
