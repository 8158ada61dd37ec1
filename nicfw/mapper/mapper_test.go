package mapper

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/clock"
)

const (
	probeEvery = 100 * time.Millisecond
	deadAfter  = 350 * time.Millisecond
	tick       = 10 * time.Millisecond
)

// node is one host of a test segment.
type node struct {
	mac     net.HardwareAddr
	priv    bool
	queue   int
	end     *memlink.Port
	m       *Mapper
	changes []Table
}

// segment is a hub with mappers on a manual clock.
type segment struct {
	t     *testing.T
	hub   *memlink.Hub
	clk   *clock.Manual
	nodes []*node
}

func newSegment(t *testing.T) *segment {
	hub, err := memlink.NewHub(memlink.Options{BatchSize: 8, Depth: 256})
	if err != nil {
		t.Fatal(err)
	}
	s := &segment{t: t, hub: hub, clk: clock.NewManual(time.Unix(1000, 0))}
	// Every frame on the segment is checked: only privileged hosts send
	// TABLEs.
	s.hub.SetTap(func(from net.HardwareAddr, f []byte) {
		if msg, ok := decode(f); ok && msg.Type == TypeTable {
			for _, n := range s.nodes {
				if bytes.Equal(n.mac, from) && !n.priv {
					t.Errorf("unprivileged host %v sent a TABLE", from)
				}
			}
		}
	})
	return s
}

// decode returns the mapper message in a frame on the default circuit.
func decode(f []byte) (Message, bool) {
	cs, _, err := cells.Unpack(f, 0)
	if err != nil {
		return Message{}, false
	}
	r := cells.NewReassembler(cells.ReassemblerConfig{})
	var msg Message
	ok := false
	r.PushCells(cs, func(pdu cells.PDU, err error) {
		if err == nil && pdu.VC == (cells.VC{VCI: defaultVCI}) {
			msg, err = Parse(pdu.SDU)
			ok = err == nil
		}
	})
	return msg, ok
}

func mac(b byte) net.HardwareAddr { return net.HardwareAddr{0x02, 0, 0, 0, 0, b} }

// add attaches a host with a mapper.
func (s *segment) add(m net.HardwareAddr, priv bool) *node {
	s.t.Helper()
	n := &node{mac: m, priv: priv, queue: int(m[5]) % 4}
	n.end = s.hub.AttachMAC(m)
	mp, err := New(n.end, Config{
		Clock: s.clk, ProbeInterval: probeEvery, DeadAfter: deadAfter,
		Queue: n.queue, Privileged: priv,
		OnChange: func(t Table) { n.changes = append(n.changes, t) },
	})
	if err != nil {
		s.t.Fatal(err)
	}
	n.m = mp
	s.nodes = append(s.nodes, n)
	return n
}

// down takes a host off the segment: it stops polling and its link closes.
func (s *segment) down(n *node) {
	n.end.Close()
	s.nodes = slices.DeleteFunc(s.nodes, func(o *node) bool { return o == n })
}

// run polls every host each tick for d.
func (s *segment) run(d time.Duration) {
	s.t.Helper()
	for range d / tick {
		s.clk.Advance(tick)
		for _, n := range s.nodes {
			if err := n.m.Poll(); err != nil {
				s.t.Fatal(err)
			}
		}
	}
}

// check verifies that every host holds the same table, listing exactly
// the hosts on the segment in MAC order with their queues and distinct
// ids, built by the lowest privileged MAC, which every host takes for the
// leader.
func (s *segment) check() Table {
	s.t.Helper()
	var want []Host
	var leader net.HardwareAddr
	for _, n := range s.nodes {
		want = append(want, Host{MAC: n.mac, Queue: n.queue})
		if n.priv && (leader == nil || bytes.Compare(n.mac, leader) < 0) {
			leader = n.mac
		}
	}
	slices.SortFunc(want, func(a, b Host) int { return bytes.Compare(a.MAC, b.MAC) })
	first := s.nodes[0].m.Table()
	ids := map[HostID]bool{}
	for i, h := range first.Hosts {
		if i < len(want) {
			want[i].ID = h.ID // ids are checked for being distinct, not for their values
		}
		if ids[h.ID] {
			s.t.Fatalf("table %s gives id %d twice", show(first), h.ID)
		}
		ids[h.ID] = true
	}
	for _, n := range s.nodes {
		got := n.m.Table()
		if !got.SameHosts(Table{Hosts: want}) || got.Epoch != first.Epoch || !bytes.Equal(got.Leader, leader) {
			s.t.Fatalf("host %v: table %s, want %s from %v (epoch %d)", n.mac, show(got), show(Table{Hosts: want}), leader, first.Epoch)
		}
		if l := n.m.Leader(); !bytes.Equal(l, leader) {
			s.t.Fatalf("host %v: leader %v, want %v", n.mac, l, leader)
		}
		if h, ok := got.Lookup(n.mac); !ok || h.Queue != n.queue {
			s.t.Fatalf("host %v: Lookup of itself = %+v, %v", n.mac, h, ok)
		}
	}
	return first
}

// keptIDs checks that every host in both tables has the same id in both.
func keptIDs(t *testing.T, before, after Table) {
	t.Helper()
	for _, h := range after.Hosts {
		if b, ok := before.Lookup(h.MAC); ok && b.ID != h.ID {
			t.Errorf("host %v moved from id %d to %d: %s, then %s", h.MAC, b.ID, h.ID, show(before), show(after))
		}
	}
}

func show(t Table) string {
	s := fmt.Sprintf("epoch %d by %v [", t.Epoch, t.Leader)
	for _, h := range t.Hosts {
		s += fmt.Sprintf(" %d=%v/q%d", h.ID, h.MAC, h.Queue)
	}
	return s + " ]"
}

func TestConverge(t *testing.T) {
	for _, hosts := range []int{3, 4, 5} {
		t.Run(fmt.Sprint(hosts), func(t *testing.T) {
			s := newSegment(t)
			// MACs out of order; the lowest MAC (1) is unprivileged, so
			// the leader is the lowest privileged one, 2.
			for _, b := range []byte{5, 1, 4, 2, 3}[:hosts] {
				s.add(mac(b), b == 2 || b == 4)
			}
			s.run(3 * probeEvery)
			tab := s.check()
			// Quiet once converged: the epoch stays.
			s.run(10 * probeEvery)
			if again := s.check(); again.Epoch != tab.Epoch {
				t.Fatalf("epoch moved from %d to %d on a quiet segment", tab.Epoch, again.Epoch)
			}
			for _, n := range s.nodes {
				st := n.m.Stats()
				if bytes.Equal(n.mac, tab.Leader) && st.TablesSent == 0 {
					t.Errorf("leader %v sent no TABLE: %+v", n.mac, st)
				}
				if len(n.changes) == 0 || !n.changes[len(n.changes)-1].SameHosts(tab) {
					t.Errorf("host %v: OnChange did not report the final table", n.mac)
				}
				if st.Malformed+st.Truncated != 0 {
					t.Errorf("host %v: %+v", n.mac, st)
				}
			}
		})
	}
}

func TestAppear(t *testing.T) {
	s := newSegment(t)
	for _, b := range []byte{3, 5, 7} {
		s.add(mac(b), true)
	}
	s.run(3 * probeEvery)
	before := s.check()
	// An unprivileged host joins: the leader (3) adds it.
	s.add(mac(6), false)
	s.run(2 * probeEvery)
	mid := s.check()
	if mid.Epoch <= before.Epoch {
		t.Fatalf("epoch %d after a host appeared, %d before", mid.Epoch, before.Epoch)
	}
	keptIDs(t, before, mid)
	// A privileged host with the lowest MAC joins: it takes over.
	s.add(mac(1), true)
	s.run(2 * probeEvery)
	after := s.check()
	if !bytes.Equal(after.Leader, mac(1)) || after.Epoch <= mid.Epoch {
		t.Fatalf("after the lowest MAC joined: %s", show(after))
	}
	// The new leader numbers from the table it held: nobody moves, and
	// the newcomer takes a free id, not 0.
	keptIDs(t, mid, after)
	if got := s.nodes[1].m.Stats().Appeared; got != 4 {
		t.Errorf("host 5 saw %d hosts appear, want 4", got)
	}
}

func TestVanish(t *testing.T) {
	s := newSegment(t)
	a, b := s.add(mac(1), true), s.add(mac(2), true)
	s.add(mac(3), false)
	c := s.add(mac(4), true)
	s.add(mac(5), false)
	s.run(3 * probeEvery)
	first := s.check()

	// A non-leader vanishes: the leader drops it after DeadAfter; the
	// others keep their ids.
	s.down(c)
	s.run(deadAfter + 2*probeEvery)
	keptIDs(t, first, s.check())
	if got := a.m.Stats().Vanished; got != 1 {
		t.Errorf("leader counted %d vanished hosts, want 1", got)
	}

	// The leader vanishes: the next lowest privileged MAC takes over.
	before := b.m.Table()
	s.down(a)
	s.run(deadAfter + 2*probeEvery)
	after := s.check()
	if !bytes.Equal(after.Leader, b.mac) || after.Epoch <= before.Epoch {
		t.Fatalf("after the leader vanished: %s (before: %s)", show(after), show(before))
	}
	keptIDs(t, before, after)
	if last := s.nodes[len(s.nodes)-1].changes; len(last) == 0 || len(last[len(last)-1].Hosts) != 3 {
		t.Errorf("OnChange did not report the 3-host table: %v", last)
	}

	// The last privileged host vanishes: no leader, tables stay as they were.
	s.down(b)
	s.run(deadAfter + 2*probeEvery)
	for _, n := range s.nodes {
		if l := n.m.Leader(); l != nil {
			t.Errorf("host %v: leader %v with no privileged host left", n.mac, l)
		}
		if tab := n.m.Table(); tab.Epoch != after.Epoch {
			t.Errorf("host %v: table changed without a leader: %s", n.mac, show(tab))
		}
	}
}

// A leader that restarts has forgotten its epochs; the hosts that hold its
// old, higher epoch make it move above them, so they adopt its tables again.
func TestLeaderRestart(t *testing.T) {
	s := newSegment(t)
	a := s.add(mac(1), true)
	s.add(mac(2), true)
	s.add(mac(3), false)
	s.run(3 * probeEvery)
	// Churn raises the epoch well above what a fresh mapper starts with.
	for i := range 3 {
		x := s.add(mac(byte(10+i)), false)
		s.run(2 * probeEvery)
		s.down(x)
		s.run(deadAfter + 2*probeEvery)
	}
	old := s.check()
	s.down(a)
	s.add(mac(1), true) // restarts within DeadAfter: nobody saw it go
	s.add(mac(4), false)
	s.run(3 * probeEvery)
	got := s.check()
	if got.Epoch <= old.Epoch {
		t.Fatalf("epoch %d after the restart, %d before", got.Epoch, old.Epoch)
	}

	// A host that reports a newer epoch than the leader's, with the
	// hosts unchanged, makes the leader move above it.
	b := s.nodes[0]
	raw := s.hub.AttachMAC(b.mac)
	raw.Inject(frameOf(t, b.mac, defaultVCI, (&Message{Type: TypeProbe, Privileged: true,
		MAC: [6]byte(b.mac), Queue: uint16(b.queue), Epoch: got.Epoch + 50}).Append(nil)))
	s.run(2 * probeEvery)
	if now := s.check(); now.Epoch <= got.Epoch+50 {
		t.Fatalf("epoch %d after a probe reported %d", now.Epoch, got.Epoch+50)
	}
}

// Tables from a host that is not the leader are not adopted.
func TestTableFromNonLeader(t *testing.T) {
	s := newSegment(t)
	b := s.add(mac(2), false) // polls before the leader, so sees the TABLE first
	s.add(mac(1), true)
	s.run(3 * probeEvery)
	s.check()
	raw := s.hub.AttachMAC(mac(9))
	raw.Inject(frameOf(t, mac(9), defaultVCI, (&Message{Type: TypeTable, Privileged: true, MAC: [6]byte(mac(9)), Epoch: 99,
		Entries: []Entry{{ID: 0, MAC: [6]byte(mac(9))}, {ID: 1, MAC: [6]byte(mac(10))}}}).Append(nil)))
	s.run(tick)
	tab := b.m.Table()
	if _, ok := tab.Lookup(mac(10)); ok || !bytes.Equal(tab.Leader, mac(1)) || b.m.Stats().TablesIgnored == 0 {
		t.Fatalf("host 2 adopted a table from a non-leader: %s (%+v)", show(tab), b.m.Stats())
	}
	// The sender was heard, so the leader lists it.
	s.run(2 * probeEvery)
	tab = b.m.Table()
	if _, ok := tab.Lookup(mac(9)); !ok || tab.Epoch <= 99 {
		t.Fatalf("the leader did not add host 9 above epoch 99: %s", show(tab))
	}
}

func TestUnprivileged(t *testing.T) {
	s := newSegment(t)
	for _, b := range []byte{1, 2, 3} {
		s.add(mac(b), false)
	}
	s.run(5 * probeEvery)
	for _, n := range s.nodes {
		st := n.m.Stats()
		if st.TablesSent != 0 || st.ProbesSent == 0 || st.ProbesReceived == 0 {
			t.Errorf("host %v: %+v", n.mac, st)
		}
		if n.m.Leader() != nil || n.m.Table().Epoch != 0 {
			t.Errorf("host %v: leader %v, table %s", n.mac, n.m.Leader(), show(n.m.Table()))
		}
	}
}

// frameOf builds the xam frame that carries sdu on circuit vpi/vci.
func frameOf(t *testing.T, src net.HardwareAddr, vci uint16, sdu []byte) []byte {
	t.Helper()
	cs, err := cells.Segment(cells.SAR{VCI: vci}, sdu)
	if err != nil {
		t.Fatal(err)
	}
	f, err := (&cells.Framer{Dst: broadcast, Src: src}).Append(nil, cs)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestMalformedFrames(t *testing.T) {
	s := newSegment(t)
	a := s.add(mac(1), true)
	s.add(mac(2), false)
	s.run(3 * probeEvery)
	good := s.check()
	evil := mac(9)
	raw := s.hub.AttachMAC(evil)

	probe := (&Message{Type: TypeProbe, MAC: [6]byte(evil), Privileged: true}).Append(nil)
	table := (&Message{Type: TypeTable, MAC: [6]byte(evil), Privileged: true, Epoch: 99,
		Entries: []Entry{{ID: 0, MAC: [6]byte(evil)}, {ID: 1, MAC: [6]byte(mac(10))}}}).Append(nil)
	flip := func(p []byte, i int) []byte { p = slices.Clone(p); p[i] ^= 0x40; return p }
	good1 := frameOf(t, evil, defaultVCI, probe)

	truncated := [][]byte{
		good1[:12],            // shorter than an Ethernet header
		good1[:20],            // shorter than the frame header
		good1[:len(good1)-10], // fewer cell bytes than announced
		frameOf(t, evil, defaultVCI, probe[:HeaderLen-1]),  // shorter than the message header
		frameOf(t, evil, defaultVCI, table[:len(table)-3]), // entries cut short
		// The first of two cells only: no end of message.
		func() []byte {
			f := frameOf(t, evil, defaultVCI, table)
			f = slices.Clone(f[:18+cells.CellSize])
			f[17] = 1
			return f
		}(),
	}
	malformed := [][]byte{
		flip(good1, 14),     // frame version
		flip(good1, 18+5+3), // payload bit: AAL5 CRC
		frameOf(t, evil, defaultVCI, flip(probe, 0)), // message version
		frameOf(t, evil, defaultVCI, func() []byte { p := slices.Clone(probe); p[1] = 7; return p }()),
		frameOf(t, mac(8), defaultVCI, probe),                                                                                        // sender MAC is not the source
		frameOf(t, evil, defaultVCI, append(slices.Clone(probe), 0)),                                                                 // trailing byte
		frameOf(t, evil, defaultVCI, func() []byte { p := slices.Clone(table); p[HeaderLen+1] = 1; return p }()),                     // id repeated
		frameOf(t, evil, defaultVCI, func() []byte { p := slices.Clone(table); p[2] = 0; return p }()),                               // unprivileged TABLE
		frameOf(t, evil, defaultVCI, func() []byte { p := slices.Clone(probe); p[21] = 1; return append(p, make([]byte, 10)...) }()), // PROBE with an entry
	}
	ignored := [][]byte{
		frameOf(t, evil, 32, probe),                                       // another circuit
		func() []byte { f := slices.Clone(good1); f[13] = 0; return f }(), // another EtherType
	}
	var all [][]byte
	all = append(all, truncated...)
	all = append(all, malformed...)
	all = append(all, ignored...)
	before := a.m.Stats()
	for _, f := range all {
		raw.Inject(f)
		s.run(tick)
	}
	st := a.m.Stats()
	if d := st.Truncated - before.Truncated; d != uint64(len(truncated)) {
		t.Errorf("Truncated += %d, want %d (%+v)", d, len(truncated), st)
	}
	if d := st.Malformed - before.Malformed; d != uint64(len(malformed)) {
		t.Errorf("Malformed += %d, want %d (%+v)", d, len(malformed), st)
	}
	if d := st.Ignored - before.Ignored; d != uint64(len(ignored)) {
		t.Errorf("Ignored += %d, want %d (%+v)", d, len(ignored), st)
	}
	if st.Appeared != before.Appeared {
		t.Errorf("a refused frame made a host appear: %+v", st)
	}
	if got := s.check(); got.Epoch != good.Epoch {
		t.Errorf("refused frames changed the table: %s", show(got))
	}
}

func TestNewInvalid(t *testing.T) {
	h, err := memlink.NewHub(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mac net.HardwareAddr
		cfg Config
	}{
		{mac(1), Config{ProbeInterval: time.Second, DeadAfter: time.Second}},
		{mac(1), Config{ProbeInterval: -1}},
		{mac(1), Config{Queue: 1 << 16}},
		{mac(1), Config{VPI: 1 << 8}},
		{broadcast, Config{}},
		{net.HardwareAddr{1, 2, 3}, Config{}},
	} {
		if _, err := New(h.AttachMAC(tc.mac), tc.cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%v, %+v) = %v, want ErrInvalidConfig", tc.mac, tc.cfg, err)
		}
	}
}
