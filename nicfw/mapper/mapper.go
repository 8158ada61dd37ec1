package mapper

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/clock"
)

// Config configures a Mapper.
type Config struct {
	Clock         clock.Clock   // nil: the system clock
	ProbeInterval time.Duration // between probes (or tables, on the leader); 0: 1 s
	DeadAfter     time.Duration // a host silent this long has vanished; 0: 3 probe intervals; must exceed ProbeInterval
	Queue         int           // this host's queue, announced to the others (0..65535)
	Privileged    bool          // may lead and send TABLEs
	EtherType     uint16        // of xam frames; 0: cells.EtherType
	VPI, VCI      uint16        // the mapper's circuit; both 0: 0/16

	// OnChange, if set, runs in Poll whenever the hosts of Table() change
	// (a host appeared or vanished, or the ids moved), with the new table.
	OnChange func(Table)
}

// Stats counts what a Mapper did.
type Stats struct {
	ProbesSent     uint64
	TablesSent     uint64
	ProbesReceived uint64 // well-formed PROBEs
	TablesReceived uint64 // well-formed TABLEs
	TablesAdopted  uint64 // TABLEs taken from the leader
	TablesIgnored  uint64 // TABLEs from a host that is not the leader, or not newer
	Ignored        uint64 // frames that are not mapper messages (other EtherType or circuit, own frames)
	Truncated      uint64 // frames or messages cut short
	Malformed      uint64 // frames or messages that break the format
	Appeared       uint64 // hosts heard for the first time (or again after vanishing)
	Vanished       uint64 // hosts that fell silent for DeadAfter
	Overflow       uint64 // hosts left out of a table that would not fit one frame
}

// peer is a host this mapper hears.
type peer struct {
	mac        [6]byte
	queue      uint16
	privileged bool
	heard      time.Time
}

// Mapper runs the mapper protocol on one link. Build it with New and call
// Poll regularly (at least a few times per ProbeInterval).
type Mapper struct {
	link   afxdp.Link
	cfg    Config
	clk    clock.Clock
	mac    [6]byte
	vc     cells.VC
	seg    *cells.Segmenter
	framer cells.Framer
	reasm  *cells.Reassembler
	maxEnt int // entries that fit a frame

	// Owned by Poll.
	rx        [][]byte
	sdu, cbuf []byte
	frame     []byte
	peers     map[[6]byte]*peer
	nextProbe time.Time
	maxEpoch  uint64    // highest epoch seen or made
	table     Table     // the current table: built (leader) or adopted
	newest    Table     // the newest table heard from anybody (ids to keep when leading)
	started   time.Time // first Poll
	dirty     bool      // table changed since the last publish
	leader    [6]byte
	hasLeader bool
	stats     Stats

	// Published at the end of Poll for other goroutines.
	pub struct {
		sync.Mutex
		table  Table
		leader net.HardwareAddr
		stats  Stats
	}
}

var broadcast = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// New returns a mapper on link. It sends nothing until the first Poll. The
// mapper does not own the link: the caller closes it after the last Poll.
func New(link afxdp.Link, cfg Config) (*Mapper, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = time.Second
	}
	if cfg.DeadAfter == 0 {
		cfg.DeadAfter = 3 * cfg.ProbeInterval
	}
	if cfg.VPI == 0 && cfg.VCI == 0 {
		cfg.VCI = defaultVCI
	}
	switch {
	case cfg.ProbeInterval < 0:
		return nil, fmt.Errorf("%w: probe interval %v", ErrInvalidConfig, cfg.ProbeInterval)
	case cfg.DeadAfter <= cfg.ProbeInterval:
		return nil, fmt.Errorf("%w: DeadAfter %v must exceed the probe interval %v", ErrInvalidConfig, cfg.DeadAfter, cfg.ProbeInterval)
	case cfg.Queue < 0 || cfg.Queue > 0xffff:
		return nil, fmt.Errorf("%w: queue %d out of range [0, 65535]", ErrInvalidConfig, cfg.Queue)
	}
	mac := link.HardwareAddr()
	if len(mac) != 6 || isGroup([6]byte(mac)) {
		return nil, fmt.Errorf("%w: link address %v is not a unicast Ethernet MAC", ErrInvalidConfig, mac)
	}
	seg, err := cells.NewSegmenter(cells.SAR{VPI: cfg.VPI, VCI: cfg.VCI})
	if err != nil {
		return nil, fmt.Errorf("%w: circuit %d/%d: %w", ErrInvalidConfig, cfg.VPI, cfg.VCI, err)
	}
	framer := cells.Framer{Dst: broadcast, Src: mac, EtherType: cfg.EtherType, MTU: link.MTU()}
	maxSDU := framer.CellsPerFrame()*cells.PayloadSize - cells.TrailerSize
	maxEnt := min((maxSDU-HeaderLen)/EntryLen, 0xffff)
	if maxEnt < 1 {
		return nil, fmt.Errorf("%w: MTU %d is too small for a table", ErrInvalidConfig, link.MTU())
	}
	m := &Mapper{
		link:   link,
		cfg:    cfg,
		clk:    cfg.Clock,
		mac:    [6]byte(mac),
		vc:     cells.VC{VPI: cfg.VPI, VCI: cfg.VCI},
		seg:    seg,
		framer: framer,
		reasm:  cells.NewReassembler(cells.ReassemblerConfig{MaxSDU: maxSDU, MaxVCs: 16}),
		maxEnt: maxEnt,
		rx:     make([][]byte, max(link.BatchSize(), 1)),
		peers:  make(map[[6]byte]*peer),
	}
	m.peers[m.mac] = &peer{mac: m.mac, queue: uint16(cfg.Queue), privileged: cfg.Privileged}
	return m, nil
}

// Poll receives one batch of frames, notices hosts that vanished, rebuilds
// and sends the table if this mapper leads and it changed, and sends the
// probe (or the table) when it is due. It returns the link's errors.
func (m *Mapper) Poll() error {
	n, err := m.link.Recv(m.rx)
	if err != nil {
		return fmt.Errorf("mapper: receive: %w", err)
	}
	now := m.clk.Now()
	if m.started.IsZero() {
		m.started = now
	}
	m.peers[m.mac].heard = now
	for _, f := range m.rx[:n] {
		m.receive(f, now)
	}
	clear(m.rx[:n])
	for k, p := range m.peers {
		if now.Sub(p.heard) > m.cfg.DeadAfter {
			delete(m.peers, k)
			m.stats.Vanished++
		}
	}
	m.elect()
	err = m.lead(now)
	if err == nil && !now.Before(m.nextProbe) {
		err = m.announce(now)
	}
	m.publish()
	return err
}

// receive handles one frame.
func (m *Mapper) receive(f []byte, now time.Time) {
	if len(f) < cells.EthernetHeaderSize {
		m.stats.Truncated++
		return
	}
	et := m.cfg.EtherType
	if et == 0 {
		et = cells.EtherType
	}
	if uint16(f[12])<<8|uint16(f[13]) != et || [6]byte(f[6:12]) == m.mac {
		m.stats.Ignored++
		return
	}
	cs, _, err := cells.Unpack(f, et)
	if err != nil {
		m.countErr(err)
		return
	}
	// One frame, one PDU (as the firmware transport): the last cell ends
	// the message, and the PDU spans every cell of the frame.
	last := cells.Cell(cs[len(cs)-cells.CellSize:])
	if cells.Cell(cs).VC(cells.UNI) != m.vc {
		m.stats.Ignored++
		return
	}
	if !last.EndOfMessage() {
		m.stats.Truncated++
		return
	}
	want := len(cs) / cells.CellSize
	var sdu []byte
	ok := false
	m.reasm.PushCells(cs, func(pdu cells.PDU, err error) {
		if err == nil && pdu.Cells == want && pdu.VC == m.vc {
			sdu, ok = pdu.SDU, true
		}
	})
	if !ok {
		m.stats.Malformed++
		return
	}
	msg, err := Parse(sdu)
	if err != nil {
		m.countErr(err)
		return
	}
	if msg.MAC != [6]byte(f[6:12]) {
		m.stats.Malformed++
		return
	}
	m.hear(&msg, now)
	m.maxEpoch = max(m.maxEpoch, msg.Epoch)
	if msg.Type == TypeProbe {
		m.stats.ProbesReceived++
		return
	}
	m.stats.TablesReceived++
	if msg.Epoch > m.newest.Epoch {
		m.newest = tableOf(&msg)
	}
	m.elect()
	if !m.hasLeader || m.leader != msg.MAC || msg.MAC == m.mac ||
		bytes.Equal(m.table.Leader, msg.MAC[:]) && msg.Epoch <= m.table.Epoch {
		m.stats.TablesIgnored++
		return
	}
	m.stats.TablesAdopted++
	m.setTable(tableOf(&msg))
}

// hear records that msg's sender is alive.
func (m *Mapper) hear(msg *Message, now time.Time) {
	p := m.peers[msg.MAC]
	if p == nil {
		p = &peer{mac: msg.MAC}
		m.peers[msg.MAC] = p
		m.stats.Appeared++
	}
	p.queue, p.privileged, p.heard = msg.Queue, msg.Privileged, now
}

// elect sets the leader: the live privileged host with the lowest MAC.
func (m *Mapper) elect() {
	m.hasLeader = false
	for k, p := range m.peers {
		if p.privileged && (!m.hasLeader || bytes.Compare(k[:], m.leader[:]) < 0) {
			m.leader, m.hasLeader = k, true
		}
	}
}

// noID marks a host not numbered yet (ids are at most maxEnt-1).
const noID = HostID(0xffff)

// lead rebuilds the table from the live hosts when this mapper leads, and
// sends it at once if it changed.
func (m *Mapper) lead(now time.Time) error {
	if !m.hasLeader || m.leader != m.mac {
		return nil
	}
	if now.Sub(m.started) < m.cfg.ProbeInterval+m.cfg.ProbeInterval/4 {
		// Listen first: every host speaks once per interval, so by then
		// this mapper has heard the table the hosts hold, if they hold
		// one, and numbers from it.
		return nil
	}
	keys := make([][6]byte, 0, len(m.peers))
	for k := range m.peers {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [6]byte) int { return bytes.Compare(a[:], b[:]) })
	if len(keys) > m.maxEnt {
		m.stats.Overflow += uint64(len(keys) - m.maxEnt)
		keys = keys[:m.maxEnt]
	}
	t := Table{Leader: net.HardwareAddr(slices.Clone(m.mac[:])), Hosts: make([]Host, len(keys))}
	// Hosts keep the ids of the newest table this mapper holds or has
	// heard (its own, the previous leader's, or, for a leader that just
	// joined, the one the hosts hold); new ones take the lowest free ids,
	// in MAC order.
	base := m.table
	if m.newest.Epoch > base.Epoch {
		base = m.newest
	}
	// (After the listening time a mapper that was not leading holds no
	// table of its own, so base is the hosts' table.)
	used := make(map[HostID]bool, len(keys))
	for i, k := range keys {
		t.Hosts[i] = Host{ID: noID, MAC: net.HardwareAddr(slices.Clone(k[:])), Queue: int(m.peers[k].queue)}
		if h, ok := base.Lookup(k[:]); ok && !used[h.ID] {
			t.Hosts[i].ID = h.ID
			used[h.ID] = true
		}
	}
	next := HostID(0)
	for i := range t.Hosts {
		if t.Hosts[i].ID != noID {
			continue
		}
		for used[next] {
			next++
		}
		t.Hosts[i].ID = next
		used[next] = true
	}
	// A host holding a newer epoch than ours (a leader that restarted
	// forgets its epochs) makes us move above it, or it would ignore us.
	if bytes.Equal(m.table.Leader, m.mac[:]) && t.SameHosts(m.table) && m.table.Epoch >= m.maxEpoch {
		return nil
	}
	m.maxEpoch++
	t.Epoch = m.maxEpoch
	m.setTable(t)
	return m.announce(now)
}

// setTable makes t the current table and reports a change of hosts.
func (m *Mapper) setTable(t Table) {
	m.maxEpoch = max(m.maxEpoch, t.Epoch)
	changed := !t.SameHosts(m.table)
	m.table, m.dirty = t, true
	if changed && m.cfg.OnChange != nil {
		m.cfg.OnChange(t.clone())
	}
}

// announce broadcasts this host's TABLE if it leads, its PROBE otherwise.
func (m *Mapper) announce(now time.Time) error {
	m.nextProbe = now.Add(m.cfg.ProbeInterval)
	msg := Message{Type: TypeProbe, Privileged: m.cfg.Privileged, MAC: m.mac, Queue: uint16(m.cfg.Queue), Epoch: m.table.Epoch}
	// A mapper that built the table it holds announces it, even after a
	// lower MAC took over, until it adopts the new leader's table: the new
	// leader, listening, learns the ids to keep from it.
	leads := m.cfg.Privileged && bytes.Equal(m.table.Leader, m.mac[:])
	if leads {
		msg.Type = TypeTable
		msg.Entries = make([]Entry, len(m.table.Hosts))
		for i, h := range m.table.Hosts {
			msg.Entries[i] = Entry{ID: h.ID, MAC: [6]byte(h.MAC), Queue: uint16(h.Queue)}
		}
	}
	m.sdu = msg.Append(m.sdu[:0])
	var err error
	if m.cbuf, err = m.seg.Append(m.cbuf[:0], m.sdu); err != nil {
		return fmt.Errorf("mapper: segment: %w", err)
	}
	if m.frame, err = m.framer.Append(m.frame[:0], m.cbuf); err != nil {
		return fmt.Errorf("mapper: frame: %w", err)
	}
	if _, err := m.link.Send([][]byte{m.frame}); err != nil {
		return fmt.Errorf("mapper: send: %w", err)
	}
	if leads {
		m.stats.TablesSent++
	} else {
		m.stats.ProbesSent++
	}
	return nil
}

// publish copies the state other goroutines read.
func (m *Mapper) publish() {
	m.pub.Lock()
	defer m.pub.Unlock()
	if m.dirty {
		m.pub.table, m.dirty = m.table.clone(), false
	}
	m.pub.leader = nil
	if m.hasLeader {
		m.pub.leader = net.HardwareAddr(slices.Clone(m.leader[:]))
	}
	m.pub.stats = m.stats
}

// Table returns the current host table (a copy).
func (m *Mapper) Table() Table {
	m.pub.Lock()
	defer m.pub.Unlock()
	return m.pub.table.clone()
}

// Leader returns the MAC of the leader as this mapper sees it (the live
// privileged host with the lowest MAC), or nil if it hears no privileged
// host.
func (m *Mapper) Leader() net.HardwareAddr {
	m.pub.Lock()
	defer m.pub.Unlock()
	return slices.Clone(m.pub.leader)
}

// Stats returns the mapper's counters.
func (m *Mapper) Stats() Stats {
	m.pub.Lock()
	defer m.pub.Unlock()
	return m.pub.stats
}

// countErr counts a frame or message the parsers refused.
func (m *Mapper) countErr(err error) {
	if errors.Is(err, ErrTruncated) || errors.Is(err, cells.ErrFrameTruncated) {
		m.stats.Truncated++
	} else {
		m.stats.Malformed++
	}
}
