package coord

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/clock"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
	"github.com/xam-project/xam/nicfw/xdptest"
)

const tag = 0xc00d

// star is n hosts (ids 1..n) on one switch, each an engine with the
// coordination module and endpoint 1, whose table names every host's
// endpoint 1 (index i-1: host i). holders records, per link, the hosts
// that hold its token as the modules trace it; a second holder fails the
// test at once.
type star struct {
	t       testing.TB
	clk     *clock.Manual
	engines []*nicfw.Engine
	mods    []*Module
	views   []*endpoint.View
	holders map[nicfw.HostID]map[nicfw.HostID]bool
	ports   []afxdp.Link // the hosts' links, on a hub
	dead    map[int]bool // hosts (indices) killed: not polled
	// unchecked: a second holder is not a failure (made-up control
	// messages can make one: the transport vouches for a peer engine, not
	// for what its module says).
	unchecked bool
}

func newStar(t testing.TB, n int, opts memlink.Options, cfg Config) *star {
	t.Helper()
	return newStarOn(t, xdptest.Hub(t, n, opts), clock.NewManual(time.Unix(1_000_000, 0)), cfg, time.Hour)
}

// newStarOn is newStar on the links of a star of hosts, on clk (nil: the
// system clock).
func newStarOn(t testing.TB, ports []afxdp.Link, clk *clock.Manual, cfg Config, giveUp time.Duration) *star {
	t.Helper()
	ids := make([]nicfw.HostID, len(ports))
	for i := range ids {
		ids[i] = nicfw.HostID(i + 1)
	}
	return newStarIDs(t, ports, clk, cfg, giveUp, ids, false)
}

// newStarIDs is newStarOn with the hosts' ids: ids[i] on ports[i]. Host
// index i is still the table's index i. If mapped, every engine starts as
// host 0 with no peers, as a daemon with a mapper does before its first
// table, and is given its id and host table once its module is running
// (Engine.SetHosts, as the mapper does).
func newStarIDs(t testing.TB, ports []afxdp.Link, clk *clock.Manual, cfg Config, giveUp time.Duration, ids []nicfw.HostID, mapped bool) *star {
	t.Helper()
	return newStarWrapped(t, ports, clk, cfg, giveUp, ids, mapped, nil)
}

// newStarWrapped is newStarIDs whose engine i runs wrap(i, module) instead
// of the module, if wrap is set (forge_test.go's hosts that lose control
// messages).
func newStarWrapped(t testing.TB, ports []afxdp.Link, clk *clock.Manual, cfg Config, giveUp time.Duration, ids []nicfw.HostID, mapped bool,
	wrap func(i int, m *Module) nicfw.Module) *star {
	t.Helper()
	if tt, ok := t.(*testing.T); ok {
		testenv.NoMemfdLeaks(tt, "xam-endpoint")
	}
	n := len(ports)
	s := &star{t: t, clk: clk, holders: make(map[nicfw.HostID]map[nicfw.HostID]bool)}
	var tclk clock.Clock = clock.System{}
	if clk != nil {
		tclk = clk
	}
	table := make([]nicfw.Name, n)
	for i := range n {
		table[i] = nicfw.Name{Host: ids[i], Endpoint: 1}
	}
	for i, p := range ports {
		self := ids[i]
		c := cfg
		c.Trace = func(link nicfw.HostID, holds bool) { s.trace(self, link, holds) }
		m := New(c)
		var mod nicfw.Module = m
		if wrap != nil {
			mod = wrap(i, m)
		}
		host := self
		if mapped {
			host = 0
		}
		e, err := nicfw.NewEngine(p, nicfw.EngineConfig{Host: host, Window: 8, Modules: []nicfw.Module{mod},
			Transport: transport.Config{Clock: tclk, Channels: 16, RetransmitAfter: 2 * time.Millisecond, GiveUpAfter: giveUp}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		peers := map[nicfw.HostID]net.HardwareAddr{}
		for j, q := range ports {
			if j != i {
				peers[ids[j]] = q.HardwareAddr()
			}
		}
		if mapped {
			// The module was started (Init) as host 0.
			if err := e.SetHosts(self, peers); err != nil {
				t.Fatal(err)
			}
		} else {
			for h, mac := range peers {
				if err := e.AddHost(h, mac); err != nil {
					t.Fatal(err)
				}
			}
		}
		mem, err := e.CreateEndpoint(1, endpoint.Config{StagingSize: 256 << 10}, nicfw.VNet{Tag: tag, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		v, err := endpoint.Map(mem.FD())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Close() })
		s.engines, s.mods, s.views = append(s.engines, e), append(s.mods, m), append(s.views, v)
	}
	return s
}

func (s *star) trace(self, link nicfw.HostID, holds bool) {
	if s.unchecked {
		return
	}
	h := s.holders[link]
	if h == nil {
		h = make(map[nicfw.HostID]bool)
		s.holders[link] = h
	}
	if holds {
		for other := range h {
			s.t.Fatalf("host %d takes link %d's token while host %d holds it", self, link, other)
		}
		h[self] = true
	} else {
		delete(h, self)
	}
}

// poll polls every engine once and reports whether any did something.
func (s *star) poll() bool {
	work := 0
	for i, e := range s.engines {
		if s.dead[i] {
			continue
		}
		n, err := e.Poll()
		if err != nil {
			s.t.Fatal(err)
		}
		work += n
	}
	return work > 0
}

// run polls until done, advancing the manual clock when nothing moves; on
// the system clock limit bounds the seconds, not the rounds.
func (s *star) run(limit int, done func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(time.Duration(limit) * time.Second)
	for i := 0; !done(); i++ {
		if s.clk != nil && i == limit || s.clk == nil && i&1023 == 0 && time.Now().After(deadline) {
			s.t.Fatalf("not done after %d rounds", i)
		}
		if !s.poll() && s.clk != nil {
			s.clk.Advance(time.Millisecond)
		}
	}
}

// stream queues, from every live host but the last, its next bulk
// message of size bytes to the last (arguments: the sender's index and
// the message's number), up to per messages each; sent counts them.
func (s *star) stream(t *testing.T, sent []int, per, size int) {
	t.Helper()
	n := len(s.views)
	for i := range n - 1 {
		if !s.dead[i] && sent[i] < per && send(t, s.views[i], endpoint.Descriptor{Class: endpoint.ClassBulk, Dest: uint32(n - 1),
			Handler: 1, Length: uint32(size), RemoteOffset: uint32(i * size), NArgs: 2,
			Args: [endpoint.MaxShortArgs]uint64{uint64(i), uint64(sent[i])}}) {
			sent[i]++
		}
	}
}

// receive hands f every message waiting in rx's request receive queue.
func (s *star) receive(t *testing.T, rx *endpoint.View, f func(d *endpoint.Descriptor)) {
	t.Helper()
	for {
		var d endpoint.Descriptor
		ok, err := rx.Receive(endpoint.RequestReceive, &d)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return
		}
		f(&d)
	}
}

func send(t *testing.T, v *endpoint.View, d endpoint.Descriptor) bool {
	t.Helper()
	err := v.Send(endpoint.RequestSend, &d)
	if err != nil && err != endpoint.ErrQueueFull {
		t.Fatal(err)
	}
	return err == nil
}

// Seven senders stream large messages to one receiver through the switch
// (10% of the frames lost): at every moment at most one host holds the
// receiver's link's token (newStar's trace), every message arrives once
// and in order per sender, and no sender is starved: each one's messages
// complete, and every sender had the token.
func TestTokenSafetyLiveness(t *testing.T) {
	for _, loss := range []float64{0, 0.1} {
		t.Run(fmt.Sprintf("loss=%v", loss), func(t *testing.T) {
			tokenBody(t, newStar(t, 8, memlink.Options{Loss: loss, Seed: 7}, Config{}), 6, 1_000_000)
		})
	}
}

// tokenBody is TestTokenSafetyLiveness's body on s: every host but the
// last streams per messages to the last.
func tokenBody(t *testing.T, s *star, per, limit int) {
	const size = 20_000
	n := len(s.views)
	rx := s.views[n-1]
	sent := make([]int, n-1)
	got := make(map[uint64][]uint64) // sender -> message numbers in arrival order
	total := 0
	s.run(limit, func() bool {
		s.stream(t, sent, per, size)
		s.receive(t, rx, func(d *endpoint.Descriptor) {
			got[d.Args[0]] = append(got[d.Args[0]], d.Args[1])
			total++
		})
		return total == (n-1)*per
	})
	for i := range uint64(n - 1) {
		for j, k := range got[i] {
			if k != uint64(j) {
				t.Fatalf("sender %d: messages %v", i, got[i])
			}
		}
	}
	var grants, held uint64
	for i, m := range s.mods {
		st := m.Stats()
		grants += st.GrantsRecv
		held += st.Held
		if i < n-1 && st.GrantsRecv == 0 && nicfw.HostID(i+1) != 1 {
			t.Errorf("host %d never had the token: %+v", i+1, st)
		}
		if st.Waiting != 0 || st.Bad != 0 || st.Refused != 0 || st.Stale != 0 || st.Lost != 0 || st.Regenerated != 0 {
			t.Errorf("host %d: %+v", i+1, st)
		}
	}
	if grants == 0 || held == 0 {
		t.Errorf("no coordination: %d grants, %d sends held", grants, held)
	}
	t.Logf("%d grants, %d sends held back", grants, held)
}

// TestHostZero: the mapper numbers hosts from 0 (`xam fw --map`), and
// host 0 takes part as any other: as a sender and first holder of the
// token (the lowest id), and as the destination whose link the token
// governs. Before, the module took id 0 for "no host": host 0's requests
// and every control message about its link were refused as bad, and the
// hosts disagreed on where a token started.
func TestHostZero(t *testing.T) {
	for _, ids := range [][]nicfw.HostID{{0, 1, 2, 3}, {1, 2, 3, 0}} {
		t.Run(fmt.Sprintf("ids=%v", ids), func(t *testing.T) {
			clk := clock.NewManual(time.Unix(1_000_000, 0))
			tokenBody(t, newStarIDs(t, xdptest.Hub(t, len(ids), memlink.Options{Loss: 0.05, Seed: 5}), clk, Config{}, time.Hour, ids, false), 6, 1_000_000)
		})
	}
}

// TestMappedIDs: with a mapper (`xam fw --map --module coord`) the engine
// starts as host 0 and learns its id from the mapper's first table, after
// the module's Init. The module follows the engine's id. Before, it kept
// the id it had at Init, 0 on every host, and each host took itself for
// the first holder of every token: several held one at once.
func TestMappedIDs(t *testing.T) {
	ids := []nicfw.HostID{2, 0, 3, 1}
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	tokenBody(t, newStarIDs(t, xdptest.Hub(t, len(ids), memlink.Options{Loss: 0.05, Seed: 6}), clk, Config{}, time.Hour, ids, true), 6, 1_000_000)
}

// Messages of at most Threshold bytes bypass coordination: no token moves.
func TestSmallMessagesBypass(t *testing.T) {
	s := newStar(t, 3, memlink.Options{}, Config{Threshold: 1000})
	for i := range 2 {
		for k := range 5 {
			send(t, s.views[i], endpoint.Descriptor{Class: endpoint.ClassShort, Dest: 2, Handler: 1, NArgs: 1,
				Args: [endpoint.MaxShortArgs]uint64{uint64(k)}})
		}
	}
	var got []endpoint.Descriptor
	s.run(10000, func() bool {
		for {
			var d endpoint.Descriptor
			ok, err := s.views[2].Receive(endpoint.RequestReceive, &d)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return len(got) == 10
			}
			got = append(got, d)
		}
	})
	for i, m := range s.mods {
		if st := m.Stats(); st.Requests != 0 || st.GrantsSent != 0 || i < 2 && st.Bypassed != 5 {
			t.Errorf("host %d: %+v", i+1, st)
		}
	}
}

// Early Token Release: the token moves on while the holder's message
// still has its last chunk to send, and everything still arrives.
func TestEarlyRelease(t *testing.T) {
	const size = 40_000
	s := newStar(t, 3, memlink.Options{}, Config{EarlyRelease: 9000})
	for i := range 2 {
		send(t, s.views[i], endpoint.Descriptor{Class: endpoint.ClassBulk, Dest: 2, Handler: 1, Length: size,
			RemoteOffset: uint32(i * size)})
	}
	got := 0
	s.run(100000, func() bool {
		var d endpoint.Descriptor
		if ok, err := s.views[2].Receive(endpoint.RequestReceive, &d); err != nil {
			t.Fatal(err)
		} else if ok {
			got++
		}
		return got == 2
	})
	if st := s.mods[0].Stats(); st.GrantsSent == 0 || st.Early == 0 {
		t.Errorf("host 1 (the first holder) did not pass the token on early: %+v", st)
	}
}

// A GRANT_LINK for a token its host holds already is not believed.
func TestSecondTokenRefused(t *testing.T) {
	s := newStar(t, 3, memlink.Options{}, Config{})
	s.mods[0].link(3)                                               // host 1 holds link 3's token from the start
	s.mods[0].Control(2, []byte{typeGrant, 0, 3, 0, 0, 0, 0, 0, 0}) // generation 0, no entries, empty queue
	if st := s.mods[0].Stats(); st.Bad != 1 || st.GrantsRecv != 0 || !s.mods[0].Holds(3) {
		t.Errorf("after a second grant: %+v, holds %v", st, s.mods[0].Holds(3))
	}
}

// FuzzControl feeds modules control messages of any content, one star of
// engines for all inputs: the modules never panic and the engines keep
// running.
func FuzzControl(f *testing.F) {
	f.Add([]byte{typeUniReq, 0, 3, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1})
	f.Add([]byte{typeBcastReq, 0, 3, 0, 0, 0, 0, 0, 2, 0, 0, 0, 7})
	f.Add([]byte{typeHint, 0, 3, 0, 0, 0, 0, 0, 2})
	f.Add([]byte{typeGrant, 0, 3, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 1, 1, 0, 2})
	f.Add([]byte{typeGrant, 0, 3, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{typeQuery, 0, 3, 0, 2, 0, 1, 0, 1})
	f.Add([]byte{typeAnswer, 0, 3, 0, 2, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 3, 1})
	f.Add([]byte{typeSuspect, 0, 3, 0, 0, 0, 0, 0, 2})
	f.Add([]byte{typeRedirect, 0, 3, 0, 0, 0, 0, 0, 2})
	f.Add([]byte{9})
	s := newStar(f, 3, memlink.Options{}, Config{}) // building one costs far more than an input
	s.unchecked = true
	f.Fuzz(func(t *testing.T, body []byte) {
		s.t = t
		for i, m := range s.mods {
			m.Control(nicfw.HostID((i+1)%3+1), body)
		}
		for range 5 {
			s.poll()
		}
	})
}

// A holder dies with the token: the other senders, their requests to it
// given up on (the transport's GiveUpAfter), have the link's coordinator
// recover it; exactly one token results (newStar's trace, the dead host
// left out) and every message of the live senders arrives.
func TestDeadHolder(t *testing.T) {
	for _, after := range []int{4, 11} {
		for _, loss := range []float64{0, 0.1} {
			t.Run(fmt.Sprintf("after=%d/loss=%v", after, loss), func(t *testing.T) { deadHolder(t, after, loss) })
		}
	}
}

// deadHolder kills the holder once after messages have arrived, with
// frames lost at rate loss.
func deadHolder(t *testing.T, after int, loss float64) {
	const n, per, size = 4, 8, 20_000
	ports := xdptest.Hub(t, n, memlink.Options{Loss: loss, Seed: 3})
	s := newStarOn(t, ports, clock.NewManual(time.Unix(1_000_000, 0)), Config{}, 100*time.Millisecond)
	s.dead = map[int]bool{}
	rx := s.views[n-1]
	sent := make([]int, n-1)
	got := make([]int, n-1)
	victim := -1
	s.run(1_000_000, func() bool {
		s.stream(t, sent, per, size)
		s.receive(t, rx, func(d *endpoint.Descriptor) { got[d.Args[0]]++ })
		if victim < 0 && got[0]+got[1]+got[2] >= after {
			// Kill whichever sender holds the receiver's token now.
			for i := range n - 1 {
				if s.mods[i].Holds(nicfw.HostID(n)) {
					victim = i
				}
			}
			if victim >= 0 {
				s.dead[victim] = true
				ports[victim].Close()
				delete(s.holders[nicfw.HostID(n)], nicfw.HostID(victim+1))
			}
		}
		done := victim >= 0
		for i := range n - 1 {
			done = done && (i == victim || got[i] == per)
		}
		return done
	})
	var regenerated uint64
	holders := 0
	for i, m := range s.mods {
		if i != victim {
			regenerated += m.Stats().Regenerated
			if m.Holds(nicfw.HostID(n)) {
				holders++
			}
		}
	}
	if regenerated == 0 || holders != 1 {
		t.Errorf("the token was made anew %d times; %d live hosts hold it, want 1", regenerated, holders)
	}
	t.Logf("host %d died holding the token; then %v delivered", victim+1, got)
}

// With LinkRate and PortBuffer, a holder paces its message so that the
// switch's port toward the receiver, draining at LinkRate, never queues
// more than the buffer, however large the messages: two senders' 64 KB
// messages through a 16 KB port. The port is modelled from the frames on
// the hub and the engines' clock; unpaced (no PortBuffer), the same
// messages overflow it.
func TestPacing(t *testing.T) {
	for _, paced := range []bool{true, false} {
		t.Run(fmt.Sprintf("paced=%v", paced), func(t *testing.T) {
			const rate, buffer, size = 8_000_000, 16 << 10, 64 << 10
			hub, err := memlink.NewHub(memlink.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var ports []afxdp.Link
			for range 3 {
				p := hub.Attach()
				t.Cleanup(func() { p.Close() })
				ports = append(ports, p)
			}
			clk := clock.NewManual(time.Unix(1_000_000, 0))
			cfg := Config{LinkRate: rate, EarlyRelease: 2000}
			if paced {
				cfg.PortBuffer = buffer
			}
			// The port: what it queues, as of when.
			var queued, most float64
			at := clk.Now()
			rx := ports[2].HardwareAddr()
			hub.SetTap(func(_ net.HardwareAddr, frame []byte) {
				if !bytes.Equal(frame[:6], rx) {
					return
				}
				now := clk.Now()
				queued = max(0, queued-now.Sub(at).Seconds()*rate/8) + float64(len(frame))
				at, most = now, max(most, queued)
			})
			s := newStarOn(t, ports, clk, cfg, time.Hour)
			for i := range 2 {
				send(t, s.views[i], endpoint.Descriptor{Class: endpoint.ClassBulk, Dest: 2, Handler: 1, Length: size,
					RemoteOffset: uint32(i * size)})
			}
			got := 0
			s.run(100_000, func() bool {
				s.receive(t, s.views[2], func(*endpoint.Descriptor) { got++ })
				return got == 2
			})
			st := s.mods[0].Stats()
			t.Logf("the port queued %.0f bytes at most; host 1: %+v", most, st)
			switch {
			case paced && (most > buffer || st.Paced == 0):
				t.Errorf("paced: the port queued %.0f bytes (buffer %d), %d sends paced", most, buffer, st.Paced)
			case !paced && most <= buffer:
				t.Errorf("unpaced: the port queued only %.0f bytes: the test does not show pacing", most)
			}
		})
	}
}
