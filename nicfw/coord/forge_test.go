package coord

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/clock"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// Forged control messages. A host on the segment that passes the
// transport's checks as a member (it learned a flow's epochs) can put any
// control message before a module, as if a member had sent it: these
// tests hand modules such messages through Control, with the member's id
// as the sender, between the engines' Polls.

// lossy is a coordination module whose host loses control messages before
// the module sees them: those drop says are lost.
type lossy struct {
	*Module
	drop func(src nicfw.HostID, body []byte) bool
}

func (w *lossy) Control(src nicfw.HostID, body []byte) {
	if w.drop != nil && w.drop(src, body) {
		return
	}
	w.Module.Control(src, body)
}

// reqBody encodes a request for link's token.
func reqBody(typ uint8, link nicfw.HostID, gen uint32, from nicfw.HostID, seq uint32) []byte {
	b := headBody(typ, link, gen)
	b = binary.BigEndian.AppendUint16(b, uint16(from))
	return binary.BigEndian.AppendUint32(b, seq)
}

// shortBody encodes a message whose one field is its sender.
func shortBody(typ uint8, link nicfw.HostID, gen uint32, from nicfw.HostID) []byte {
	return binary.BigEndian.AppendUint16(headBody(typ, link, gen), uint16(from))
}

// grantBody encodes a token: what it served of each host (in the order
// given: host, number, ...) and its queue.
func grantBody(link nicfw.HostID, gen uint32, served []uint32, queue ...nicfw.HostID) []byte {
	b := append(headBody(typeGrant, link, gen), uint8(len(served)/2))
	for i := 0; i+1 < len(served); i += 2 {
		b = binary.BigEndian.AppendUint16(b, uint16(served[i]))
		b = binary.BigEndian.AppendUint32(b, served[i+1])
	}
	b = append(b, uint8(len(queue)))
	for _, h := range queue {
		b = binary.BigEndian.AppendUint16(b, uint16(h))
	}
	return b
}

func headBody(typ uint8, link nicfw.HostID, gen uint32) []byte {
	b := binary.BigEndian.AppendUint16([]byte{typ}, uint16(link))
	return binary.BigEndian.AppendUint32(b, gen)
}

// holders returns the hosts (ids) whose modules hold link's token.
func (s *star) holdersOf(link nicfw.HostID) []nicfw.HostID {
	var hs []nicfw.HostID
	for i, m := range s.mods {
		if m.Holds(link) {
			hs = append(hs, nicfw.HostID(i+1))
		}
	}
	return hs
}

// streamAll streams per messages of size bytes from every host but the
// last to the last, calling each (if set) every round, and checks that
// every message arrives once and in order per sender.
func streamAll(t *testing.T, s *star, per, size, limit int, each func()) {
	t.Helper()
	n := len(s.views)
	sent := make([]int, n-1)
	got := make(map[uint64][]uint64)
	total := 0
	s.run(limit, func() bool {
		if each != nil {
			each()
		}
		s.stream(t, sent, per, size)
		s.receive(t, s.views[n-1], func(d *endpoint.Descriptor) {
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
}

// TestControlRefusals: each rule on who may say what (coord.go's speaks
// and Control), one forged message at a time, to host 1 of three (senders
// 1 and 2, destination 3), which holds link 3's token from the start;
// each is counted where the rule says and changes nothing: host 1 still
// holds the token, with nobody queued for it.
func TestControlRefusals(t *testing.T) {
	next := uint32(1<<16 | 2) // the first recovery host 2 would propose
	for _, tc := range []struct {
		name string
		src  nicfw.HostID
		body []byte
		want func(Stats) uint64
	}{
		{"the destination as requester, forwarded", 2, reqBody(typeBcastReq, 3, 0, 3, 1), func(s Stats) uint64 { return s.Refused }},
		{"the destination as requester and sender", 3, reqBody(typeUniReq, 3, 0, 3, 1), func(s Stats) uint64 { return s.Refused }},
		{"another host as requester", 2, reqBody(typeBcastReq, 3, 0, 1, 1), func(s Stats) uint64 { return s.Refused }},
		{"this host as requester", 1, reqBody(typeBcastReq, 3, 0, 1, 1), func(s Stats) uint64 { return s.Refused }},
		{"an unknown host as requester", 9, reqBody(typeUniReq, 3, 0, 9, 1), func(s Stats) uint64 { return s.Refused }},
		{"a request of a stale generation", 2, reqBody(typeUniReq, 3, 0xfffe<<16|2, 2, 1), func(s Stats) uint64 { return s.Stale }},
		{"a request of a generation far ahead", 2, reqBody(typeUniReq, 3, 7<<16|2, 2, 1), func(s Stats) uint64 { return s.Stale }},
		{"a request of the next generation by the destination", 2, reqBody(typeUniReq, 3, 1<<16|3, 2, 1), func(s Stats) uint64 { return s.Stale }},
		{"a hint from the destination", 3, shortBody(typeHint, 3, 0, 3), func(s Stats) uint64 { return s.Refused }},
		{"a hint for another holder", 2, shortBody(typeHint, 3, 0, 1), func(s Stats) uint64 { return s.Refused }},
		{"a hint of a stale generation", 2, shortBody(typeHint, 3, 0xffff<<16, 2), func(s Stats) uint64 { return s.Stale }},
		{"a query of another host's proposal", 2, shortBody(typeQuery, 3, 1<<16|1, 2), func(s Stats) uint64 { return s.Refused }},
		{"a grant whose queue names the destination", 2, grantBody(3, 0, nil, 3), func(s Stats) uint64 { return s.Refused }},
		{"a grant whose queue names an unknown host", 2, grantBody(3, 0, nil, 9), func(s Stats) uint64 { return s.Refused }},
		{"a grant that served the destination", 2, grantBody(3, 0, []uint32{3, 1}), func(s Stats) uint64 { return s.Refused }},
		{"a message about a link not in the table", 2, reqBody(typeUniReq, 9, 0, 2, 1), func(s Stats) uint64 { return s.Bad }},
		{"a redirect of a stale generation", 2, shortBody(typeRedirect, 3, 0xffff<<16, 2), func(s Stats) uint64 { return s.Stale }},
		{"a request of the next generation (a recovery not heard of yet) is taken", 2, reqBody(typeUniReq, 3, next, 2, 1), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStar(t, 3, memlink.Options{}, Config{})
			s.mods[0].link(3)
			before := s.mods[0].Stats()
			s.mods[0].Control(tc.src, tc.body)
			after := s.mods[0].Stats()
			if tc.want == nil {
				// Taken: the token goes to host 2, which asked.
				if after.GrantsSent != 1 || after.Refused+after.Stale+after.Bad != 0 {
					t.Errorf("a request of the next generation: %+v", after)
				}
				return
			}
			if tc.want(after) != tc.want(before)+1 {
				t.Errorf("not counted: %+v", after)
			}
			if l := s.mods[0].links[3]; !l.have || len(l.queue) != 0 || after.GrantsSent != 0 {
				t.Errorf("the forged message had an effect: holds %v, queue %v, %+v", l.have, l.queue, after)
			}
		})
	}
}

// TestForgedGrantsRefused: a forger injects GRANT_LINK messages while a
// host holds the token, three senders streaming to a fourth host: grants
// of the current generation (the forger knows it), claiming to come from
// every member, the holder included, to hosts that do not wait for the
// token, to hosts that wait but for another request than the one the
// grant says it serves, to the holder itself, and from the destination.
// Never do two hosts hold the token (newStar's trace), every forgery is
// counted, no token is lost or made anew, and every message arrives once
// and in order. Before, a host that did not hold the token took any
// GRANT_LINK: two held it.
func TestForgedGrantsRefused(t *testing.T) {
	for _, loss := range []float64{0, 0.05} {
		t.Run(fmt.Sprintf("loss=%v", loss), func(t *testing.T) {
			const n, dst = 4, nicfw.HostID(4)
			s := newStarOn(t, xdptest.Hub(t, n, memlink.Options{Loss: loss, Seed: 11}), clock.NewManual(time.Unix(1_000_000, 0)), Config{}, time.Hour)
			forged := 0
			round := 0
			streamAll(t, s, 8, 20_000, 1_000_000, func() {
				if round++; round%7 != 0 {
					return
				}
				for i, m := range s.mods[:n-1] {
					victim := nicfw.HostID(i + 1)
					l := m.link(dst)
					gen, seq := l.cur(), l.seq
					var bodies [][]byte
					switch {
					case l.have:
						bodies = append(bodies, grantBody(dst, gen, []uint32{uint32(victim), seq}))
					case l.waiting:
						// Another request than the one it waits on.
						bodies = append(bodies, grantBody(dst, gen, []uint32{uint32(victim), seq - 1}),
							grantBody(dst, gen, []uint32{uint32(victim), seq + 1}), grantBody(dst, gen, nil))
					default:
						bodies = append(bodies, grantBody(dst, gen, []uint32{uint32(victim), seq}), grantBody(dst, gen, nil))
					}
					for src := nicfw.HostID(1); src <= n; src++ {
						if src == victim {
							continue
						}
						for _, b := range bodies {
							m.Control(src, b)
							forged++
						}
					}
				}
			})
			var counted uint64
			for i, m := range s.mods[:n-1] {
				st := m.Stats()
				counted += st.Refused + st.Bad
				if st.Lost != 0 || st.Regenerated != 0 || st.Stale != 0 {
					t.Errorf("host %d: %+v", i+1, st)
				}
			}
			if counted != uint64(forged) || forged == 0 {
				t.Errorf("%d forged grants, %d counted (refused, or a second token)", forged, counted)
			}
			t.Logf("%d forged grants refused", forged)
		})
	}
}

// TestForgedRequester: requests that name the link's destination as the
// requester (forwarded for it by a member, or sent as it), and one of a
// host the table does not know, reach the holder: they are refused, and
// the token is not lost: both senders finish with no recovery. Before,
// the holder queued the destination and passed the token to it, whose
// module dropped it: the token was gone for good and both senders
// stalled; the unknown host was queued as well.
func TestForgedRequester(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  nicfw.HostID
		body func(seq uint32) []byte
	}{
		{"forwarded for the destination", 2, func(seq uint32) []byte { return reqBody(typeBcastReq, 3, 0, 3, seq) }},
		{"sent as the destination", 3, func(seq uint32) []byte { return reqBody(typeUniReq, 3, 0, 3, seq) }},
		{"for an unknown host", 2, func(seq uint32) []byte { return reqBody(typeBcastReq, 3, 0, 9, seq) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStar(t, 3, memlink.Options{}, Config{})
			seq := uint32(0)
			forge := func() {
				for i, m := range s.mods[:2] {
					if m.Holds(3) && nicfw.HostID(i+1) != tc.src {
						seq++
						m.Control(tc.src, tc.body(seq))
					}
				}
			}
			s.mods[0].link(3) // host 1 holds the token, idle
			forge()
			streamAll(t, s, 6, 20_000, 1_000_000, forge)
			var refused uint64
			for i, m := range s.mods {
				st := m.Stats()
				refused += st.Refused
				if st.Lost != 0 || st.Regenerated != 0 || st.Bad != 0 {
					t.Errorf("host %d: %+v", i+1, st)
				}
			}
			if refused != uint64(seq) || seq < 2 {
				t.Errorf("%d forged requests, %d refused", seq, refused)
			}
		})
	}
}

// TestLostToken: the GRANT_LINK that passes the token from host 1 to host
// 2 is lost on its way (host 2's module never sees it), both hosts
// streaming to host 3. Waiting with no sign of the token for LostAfter, a
// sender has the link's coordinator (host 1) recover it: the token is
// made anew once, within LostAfter of the loss (and the engine's coarse
// timer, and a few Retry periods),
// and every message of both senders arrives. Before, nothing brought a
// lost token back: both senders stalled for good.
func TestLostToken(t *testing.T) {
	for _, lost := range []int{1, 3} {
		t.Run(fmt.Sprintf("grant=%d", lost), func(t *testing.T) {
			cfg := Config{Retry: 10 * time.Millisecond, LostAfter: 200 * time.Millisecond}
			clk := clock.NewManual(time.Unix(1_000_000, 0))
			var lostAt time.Time
			grants := 0
			wrap := func(i int, m *Module) nicfw.Module {
				if i != 1 {
					return m
				}
				return &lossy{Module: m, drop: func(_ nicfw.HostID, body []byte) bool {
					if len(body) > 0 && body[0] == typeGrant {
						if grants++; grants == lost {
							lostAt = clk.Now()
							return true
						}
					}
					return false
				}}
			}
			s := newStarWrapped(t, xdptest.Hub(t, 3, memlink.Options{}), clk, cfg, time.Hour, []nicfw.HostID{1, 2, 3}, false, wrap)
			var madeAt time.Time
			streamAll(t, s, 8, 20_000, 1_000_000, func() {
				if madeAt.IsZero() && s.mods[0].Stats().Regenerated > 0 {
					madeAt = clk.Now()
				}
			})
			if lostAt.IsZero() || madeAt.IsZero() {
				t.Fatalf("the grant was lost at %v, the token made anew at %v", lostAt, madeAt)
			}
			var lostN, regenerated uint64
			for _, m := range s.mods {
				st := m.Stats()
				lostN += st.Lost
				regenerated += st.Regenerated
			}
			// The bound: LostAfter, the engine's coarse timer (Tick, every
			// 64 Polls: 64 ms here, where an idle Poll takes 1 ms of the
			// clock) and a few Retry periods for SUSPECT, QUERY and ANSWER.
			if took, bound := madeAt.Sub(lostAt), cfg.LostAfter+64*time.Millisecond+3*cfg.Retry; regenerated != 1 || lostN == 0 || took > bound {
				t.Errorf("made anew %d times, taken for lost %d times, %v after the loss (bound %v)", regenerated, lostN, took, bound)
			}
			t.Logf("the token was made anew %v after its grant was lost", madeAt.Sub(lostAt))
		})
	}
}

// TestStaleGenerations: grants of a generation that is not the link's
// current one are refused, though they serve the very request their host
// waits on (the forger knows the request numbers), senders 1 and 2
// streaming to host 3:
//
//   - before any recovery (generation 0), grants of generations ahead
//     (two and five recoveries on, and the next recovery's but proposed
//     by the destination or by a host the table does not know);
//   - once a lost grant had the token made anew (generation 1<<16|1),
//     that lost grant replayed, and grants of generation 0.
//
// Every one is counted as stale, and no two hosts hold the token. Before,
// a grant of any generation at or above the last recovery's was taken: a
// second token.
func TestStaleGenerations(t *testing.T) {
	cfg := Config{Retry: 10 * time.Millisecond, LostAfter: 200 * time.Millisecond}
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	var captured []byte
	grants := 0
	wrap := func(i int, m *Module) nicfw.Module {
		if i != 1 {
			return m
		}
		return &lossy{Module: m, drop: func(_ nicfw.HostID, body []byte) bool {
			if len(body) > 0 && body[0] == typeGrant {
				if grants++; grants == 3 {
					captured = append([]byte(nil), body...)
					return true
				}
			}
			return false
		}}
	}
	s := newStarWrapped(t, xdptest.Hub(t, 3, memlink.Options{}), clk, cfg, time.Hour, []nicfw.HostID{1, 2, 3}, false, wrap)
	forged := 0
	streamAll(t, s, 10, 20_000, 1_000_000, func() {
		m := s.mods[1]
		l := m.link(3)
		if !l.waiting || l.have {
			return
		}
		served := []uint32{2, l.seq}
		var bodies [][]byte
		switch cur := l.cur(); {
		case cur == 0:
			bodies = [][]byte{
				grantBody(3, 2<<16|1, served), grantBody(3, 5<<16|1, served),
				grantBody(3, 1<<16|3, served), grantBody(3, 1<<16|9, served),
			}
		case l.gen == cur && captured != nil:
			replay := append([]byte(nil), captured...)
			// Served: the captured grant's entries, host 2's patched to
			// the request it waits on now.
			for i := 0; i < int(replay[7]); i++ {
				e := replay[8+6*i:]
				if binary.BigEndian.Uint16(e) == 2 {
					binary.BigEndian.PutUint32(e[2:], l.seq)
				}
			}
			bodies = [][]byte{replay, grantBody(3, 0, served)}
		}
		for _, b := range bodies {
			m.Control(1, b)
			forged++
		}
	})
	st := s.mods[1].Stats()
	if st.Stale != uint64(forged) || forged == 0 || st.Bad != 0 {
		t.Errorf("%d grants of other generations, host 2: %+v", forged, st)
	}
	if g := s.mods[1].links[3].cur(); g != 1<<16|1 {
		t.Errorf("link 3's generation is %#x, want %#x (one recovery, by host 1)", g, 1<<16|1)
	}
	t.Logf("%d grants of other generations refused", forged)
}
