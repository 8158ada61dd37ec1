package driver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/loader"
)

// Flags modify a send trap.
type Flags uint8

const (
	// EOM sets the AAL5 end-of-message bit of the PTI on the cell (on the
	// last cell of a batch).
	EOM Flags = 1 << iota
	// Bulk sends on the connection's bulk VC (SendVCI+1) instead of its
	// short VC (SendVCI).
	Bulk

	flagMask = EOM | Bulk // bits the traps look at; others are ignored
)

// ConnSpec binds one connection to its virtual circuits. A connection uses
// two VCs in each direction: the short VC for single-cell messages and, one
// above it, the bulk VC for AAL5 PDUs.
type ConnSpec struct {
	Peer    net.HardwareAddr // destination MAC of the connection's frames
	VPI     uint16           // virtual path of all four VCs (UNI: at most 255)
	SendVCI uint16           // the peer's VCI for our short cells; SendVCI+1 carries our bulk (AAL5) cells
	RecvVCI uint16           // our VCI for the peer's short cells; RecvVCI+1 for its bulk cells
}

// Config configures a Device. Everything it sizes is allocated by Open.
type Config struct {
	Src       net.HardwareAddr // our MAC (default: the link's HardwareAddr)
	EtherType uint16           // default cells.EtherType
	Conns     []ConnSpec       // bound at open; index = connection number
	// SendSlots is the number of 48-byte payload slots in each
	// connection's send area: a power of two, default DefaultSendSlots.
	SendSlots int
	// RecvSlots is the number of 53-byte cells in each connection's
	// receive ring: a power of two, default DefaultRecvSlots.
	RecvSlots int
	// NoLock skips mlock (for tests without RLIMIT_MEMLOCK). By default the
	// areas are mmapped and mlocked, and a failure of either is an error.
	NoLock bool
}

// Limits and defaults.
const (
	DefaultSendSlots = 2048
	DefaultRecvSlots = 2048
	MaxSlots         = 1 << 20 // largest SendSlots and RecvSlots
	MaxConns         = 1 << 14 // most connections a device binds
)

// Errors. Traps wrap the first three with context; test with errors.Is.
var (
	ErrBadConn      = errors.New("bad connection index")
	ErrBadOffset    = errors.New("bad send slot offset")
	ErrBadCount     = errors.New("bad cell count")
	ErrBadConfig    = errors.New("invalid device configuration")
	ErrNotSupported = errors.New("not supported on this system")

	errClosed = fmt.Errorf("driver: device closed: %w", net.ErrClosed)
)

// Stats are a device's counters since Open.
type Stats struct {
	CellsSent  uint64 // cells handed to the link by the send traps
	FramesSent uint64 // frames that carried them

	FramesReceived uint64 // frames pulled from the link
	CellsReceived  uint64 // cells delivered into a receive ring

	// Refused traps: nothing was sent or taken.
	RefusedConn   uint64 // connection index out of range (any trap, NextSend, Take)
	RefusedOffset uint64 // send slot offset out of range
	RefusedCount  uint64 // batch count (or Recv's max) out of range

	// Cells dropped on receive, by reason.
	DroppedUnknownVCI uint64 // VPI/VCI bound to no connection of this device
	DroppedWrongPeer  uint64 // on a connection's circuit, in a frame from a MAC other than the connection's peer
	DroppedHEC        uint64 // header error not correctable (I.432: discarded)
	DroppedRingFull   uint64 // the connection's receive ring was full (receiver overflow)
	HECCorrected      uint64 // single-bit header errors corrected (the cells were delivered)

	// Frames dropped on receive; their cells are not counted above.
	DroppedMalformed uint64 // failed cells.Unpack: truncated, cell count mismatch, version
	DroppedNotOurs   uint64 // another EtherType, or to another unicast MAC
}

// conn is one connection: its circuits, send area and receive ring. The
// send fields belong to the send side (Device.tx's mutex), the receive
// fields to the receive side (Device.rx's mutex).
type conn struct {
	spec ConnSpec
	peer [6]byte // spec.Peer: cells from anyone else are dropped

	// Send side.
	send     []byte                    // SendSlots*48 bytes, in the device's mapping
	next     int                       // NextSend's cursor
	hdr      [4][cells.HeaderSize]byte // cell headers with HEC, indexed by Flags&(EOM|Bulk)
	frameHdr [frameHeaderLen]byte      // Ethernet and xam frame headers, cell count 0

	// Receive side.
	ring []byte // RecvSlots*53 bytes, in the device's mapping
	head uint32 // next cell to Take
	tail uint32 // next free slot
}

// frameHeaderLen is the Ethernet header plus xam's frame header.
const frameHeaderLen = cells.EthernetHeaderSize + cells.FrameHeaderSize

// Device is an SSAM device on a link: connections bound to virtual circuits,
// pinned send areas and receive rings, and traps that take small integers.
//
// One goroutine at a time may use the send side (Send, SendBatch, NextSend)
// and one at a time the receive side (Recv, Take, Wait); the two may run
// concurrently. SendRecv uses both. Callers that break the rule are
// serialised. Stats, NumConns, SendArea and the other accessors may be
// called from any goroutine.
type Device struct {
	link      afxdp.Link
	ownLink   bool // Close closes the link (OpenPacket)
	etherType uint16
	src       net.HardwareAddr
	perFrame  int // cells per frame: (MTU-4)/53, or 1 on the system-call path

	sendSlots int
	slotMask  int // SendSlots-1
	recvSlots uint32
	recvMask  uint32 // RecvSlots-1
	connMask  int    // power-of-two mask covering the connection table
	conns     []conn
	circuits  map[uint32]int32 // VPI<<16|VCI -> connection, for the receive VCs

	mem    []byte // the one mapping that holds every area
	locked bool   // mem is mlocked
	closed atomic.Bool

	tx struct {
		sync.Mutex
		bufs  [][]byte // frame buffers, cap FrameLen(perFrame), in mem
		out   [][]byte // the frames of the batch being sent
		stats Stats    // send-side counters
	}
	rx struct {
		sync.Mutex
		frames   [][]byte // lent by link.Recv
		n, next  int      // frames lent, next frame to open
		cur      []byte   // cells of the open frame not yet processed
		src      [6]byte  // the open frame's source MAC
		hec      cells.HECReceiver
		lastKey  uint32 // one-entry cache of the circuit lookup
		lastConn int32  // -1: empty
		stats    Stats  // receive-side counters
	}
}

// Open builds a device on link: it checks cfg, maps (and, unless NoLock,
// locks) one region for every connection's send area and receive ring and
// the frames it transmits, and binds the connections' circuits. Nothing is
// allocated afterwards. The link stays the caller's: Close does not close
// it, and the device expects to be its only sender and receiver.
func Open(link afxdp.Link, cfg Config) (*Device, error) {
	if link == nil {
		return nil, fmt.Errorf("driver: %w: no link", ErrBadConfig)
	}
	return open(link, cfg, 0, false)
}

// open is Open with the number of cells per frame (0: as many as the MTU
// allows) and whether the device owns the link.
func open(link afxdp.Link, cfg Config, perFrame int, own bool) (*Device, error) {
	d := &Device{link: link, ownLink: own}
	if err := d.configure(cfg, perFrame); err != nil {
		return nil, err
	}
	if err := d.allocate(cfg.NoLock); err != nil {
		return nil, err
	}
	return d, nil
}

func badConfig(format string, args ...any) error {
	return fmt.Errorf("driver: %w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
}

func powerOfTwo(n int) bool { return n > 0 && n&(n-1) == 0 }

// configure checks cfg and fills in everything but the memory.
func (d *Device) configure(cfg Config, perFrame int) error {
	if cfg.Src == nil {
		cfg.Src = d.link.HardwareAddr()
	}
	if cfg.EtherType == 0 {
		cfg.EtherType = cells.EtherType
	}
	if cfg.SendSlots == 0 {
		cfg.SendSlots = DefaultSendSlots
	}
	if cfg.RecvSlots == 0 {
		cfg.RecvSlots = DefaultRecvSlots
	}
	most := cells.CellsPerFrame(d.link.MTU())
	if perFrame == 0 {
		// No more cells a frame than xam's XDP program admits: it checks
		// every cell's circuit (SSAM's kernel VCI table) and drops a frame
		// with more cells than it can look at (a link past a 9000-byte MTU).
		perFrame = min(most, loader.MaxScanCells)
	}
	switch {
	case len(cfg.Src) != 6:
		return badConfig("source MAC %v is not 6 bytes", cfg.Src)
	case cfg.EtherType < 0x0600:
		return badConfig("EtherType %#04x is an 802.3 length (want at least 0x0600)", cfg.EtherType)
	case !powerOfTwo(cfg.SendSlots) || cfg.SendSlots > MaxSlots:
		return badConfig("SendSlots %d is not a power of two in [1, %d]", cfg.SendSlots, MaxSlots)
	case !powerOfTwo(cfg.RecvSlots) || cfg.RecvSlots > MaxSlots:
		return badConfig("RecvSlots %d is not a power of two in [1, %d]", cfg.RecvSlots, MaxSlots)
	case len(cfg.Conns) == 0 || len(cfg.Conns) > MaxConns:
		return badConfig("%d connections (want 1 to %d)", len(cfg.Conns), MaxConns)
	case most < 1 || perFrame > most:
		return badConfig("link MTU %d carries no %d-cell frame", d.link.MTU(), max(perFrame, 1))
	}
	d.etherType = cfg.EtherType
	d.src = append(net.HardwareAddr(nil), cfg.Src...)
	d.perFrame = perFrame
	d.sendSlots, d.slotMask = cfg.SendSlots, cfg.SendSlots-1
	d.recvSlots, d.recvMask = uint32(cfg.RecvSlots), uint32(cfg.RecvSlots-1)
	d.connMask = 1
	for d.connMask < len(cfg.Conns) {
		d.connMask <<= 1
	}
	d.connMask--
	d.conns = make([]conn, len(cfg.Conns))
	d.circuits = make(map[uint32]int32, 2*len(cfg.Conns))
	framer := cells.Framer{Src: d.src, EtherType: d.etherType, MTU: d.link.MTU()}
	zero := make([]byte, cells.CellSize)
	for i, s := range cfg.Conns {
		switch {
		case len(s.Peer) != 6:
			return badConfig("connection %d: peer MAC %v is not 6 bytes", i, s.Peer)
		case s.VPI > cells.MaxVPIUNI:
			return badConfig("connection %d: VPI %d exceeds %d", i, s.VPI, cells.MaxVPIUNI)
		case s.SendVCI == cells.MaxVCI || s.RecvVCI == cells.MaxVCI:
			return badConfig("connection %d: VCI %d leaves no room for the bulk VC above it", i, uint16(cells.MaxVCI))
		}
		s.Peer = append(net.HardwareAddr(nil), s.Peer...)
		c := &d.conns[i]
		c.spec, c.peer = s, [6]byte(s.Peer)
		for _, vci := range []uint16{s.RecvVCI, s.RecvVCI + 1} {
			key := uint32(s.VPI)<<16 | uint32(vci)
			if j, dup := d.circuits[key]; dup {
				return badConfig("connections %d and %d both receive on VPI/VCI %d/%d", j, i, s.VPI, vci)
			}
			d.circuits[key] = int32(i)
		}
		for f := range c.hdr {
			h := cells.Fields{VPI: s.VPI, VCI: s.SendVCI}
			if Flags(f)&Bulk != 0 {
				h.VCI++
			}
			if Flags(f)&EOM != 0 {
				h.PTI = cells.PTIEndOfMessage
			}
			if err := cells.Cell(c.hdr[f][:]).Encode(cells.UNI, h); err != nil {
				return badConfig("connection %d: %v", i, err)
			}
		}
		framer.Dst = s.Peer
		f, err := framer.Append(nil, zero)
		if err != nil {
			return badConfig("connection %d: %v", i, err)
		}
		copy(c.frameHdr[:], f)
		binary.BigEndian.PutUint16(c.frameHdr[frameHeaderLen-2:], 0)
	}
	d.rx.lastConn = -1
	return nil
}

// align rounds n up to a multiple of 64 (a cache line).
func align(n int) int { return (n + 63) &^ 63 }

// allocate maps the region and carves it: each connection's send area and
// receive ring, then the transmit frames (enough for SendSlots cells).
func (d *Device) allocate(noLock bool) error {
	sendLen := d.sendSlots * cells.PayloadSize
	ringLen := int(d.recvSlots) * cells.CellSize
	frames := (d.sendSlots + d.perFrame - 1) / d.perFrame
	frameLen := cells.FrameLen(d.perFrame)
	size := len(d.conns)*(align(sendLen)+align(ringLen)) + frames*align(frameLen)
	mem, locked, err := mapRegion(size, !noLock)
	if err != nil {
		return err
	}
	d.mem, d.locked = mem, locked
	off := 0
	carve := func(n int) []byte {
		b := mem[off : off+n : off+n]
		off += align(n)
		return b
	}
	for i := range d.conns {
		d.conns[i].send = carve(sendLen)
		d.conns[i].ring = carve(ringLen)
	}
	d.tx.bufs = make([][]byte, frames)
	for i := range d.tx.bufs {
		d.tx.bufs[i] = carve(frameLen)
	}
	d.tx.out = make([][]byte, frames)
	d.rx.frames = make([][]byte, max(d.link.BatchSize(), 1))
	return nil
}

// Close unlocks and unmaps the device's memory: slices returned by SendArea
// and cells returned by Take must not be touched afterwards. It does not
// close a link given to Open (it closes the one OpenPacket made). A Wait
// blocked in the link returns when the link's own Wait does. After Close
// every trap returns an error matching net.ErrClosed, Close included.
func (d *Device) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return errClosed
	}
	d.tx.Lock()
	d.rx.Lock()
	defer d.tx.Unlock()
	defer d.rx.Unlock()
	var errs []error
	if d.ownLink {
		if err := d.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("driver: closing link: %w", err))
		}
	}
	if err := unmapRegion(d.mem, d.locked); err != nil {
		errs = append(errs, err)
	}
	d.mem, d.locked = nil, false
	clear(d.tx.bufs)
	clear(d.tx.out)
	clear(d.rx.frames)
	d.rx.cur, d.rx.n, d.rx.next = nil, 0, 0
	return errors.Join(errs...)
}

// NumConns returns the number of connections bound at open.
func (d *Device) NumConns() int { return len(d.conns) }

// Conn returns connection conn's circuits as bound at open, and false for
// an index out of range.
func (d *Device) Conn(conn int) (ConnSpec, bool) {
	if uint(conn) >= uint(len(d.conns)) {
		return ConnSpec{}, false
	}
	s := d.conns[conn].spec
	s.Peer = append(net.HardwareAddr(nil), s.Peer...)
	return s, true
}

// CellsPerFrame returns how many cells the device packs into one frame:
// (MTU-4)/53 of the link's MTU, at most loader.MaxScanCells, or 1 on
// the system-call path.
func (d *Device) CellsPerFrame() int { return d.perFrame }

// RecvBatch returns the most cells one Recv can bring in with one pull from
// the link (the link's batch of frames, each full of cells): a natural max
// for Recv.
func (d *Device) RecvBatch() int { return len(d.rx.frames) * d.perFrame }

// IsBulk reports whether cell, taken from connection conn's receive ring,
// arrived on the connection's bulk VC (RecvVCI+1) rather than its short VC.
func (d *Device) IsBulk(conn int, cell cells.Cell) bool {
	if uint(conn) >= uint(len(d.conns)) || len(cell) < cells.HeaderSize {
		return false
	}
	return cell.VCI() == d.conns[conn].spec.RecvVCI+1
}

// PinnedBytes returns the bytes of memory locked for the device's areas:
// the whole mapping (send areas, receive rings, transmit frames), rounded
// up to pages; 0 with Config.NoLock or after Close.
func (d *Device) PinnedBytes() int {
	d.tx.Lock()
	defer d.tx.Unlock()
	if !d.locked {
		return 0
	}
	return len(d.mem)
}

// Stats returns the device's counters.
func (d *Device) Stats() Stats {
	d.tx.Lock()
	s := d.tx.stats
	d.tx.Unlock()
	d.rx.Lock()
	r := d.rx.stats
	d.rx.Unlock()
	s.FramesReceived = r.FramesReceived
	s.CellsReceived = r.CellsReceived
	s.RefusedConn += r.RefusedConn
	s.RefusedCount += r.RefusedCount
	s.DroppedUnknownVCI = r.DroppedUnknownVCI
	s.DroppedWrongPeer = r.DroppedWrongPeer
	s.DroppedHEC = r.DroppedHEC
	s.DroppedRingFull = r.DroppedRingFull
	s.HECCorrected = r.HECCorrected
	s.DroppedMalformed = r.DroppedMalformed
	s.DroppedNotOurs = r.DroppedNotOurs
	return s
}
