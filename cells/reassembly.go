package cells

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/xam-project/xam/cells/internal/crc32aal5"
	"github.com/xam-project/xam/internal/clock"
)

// Reassembly collects the payloads of each circuit's cells until a cell
// with the end-of-message bit arrives, then checks the CPCS-PDU it closes:
//
//  1. Length 0 is the abort indication of I.363.5: ErrAborted.
//  2. A length above the configured maximum SDU: ErrOversize.
//  3. Fewer cells than the length calls for: ErrLostCells (cells of the PDU
//     were lost on the way; AAL5 has no sequence numbers, the count is all
//     there is).
//  4. More cells than the length calls for: ErrLength (typically two PDUs
//     run together because an end-of-message cell was lost).
//  5. A CRC-32 that does not match: ErrCRC.
//
// While a PDU is open, a circuit that accumulates more cells than the
// longest allowed PDU needs is cut off with ErrOversize and its cells are
// dropped up to the next end of message, so the memory of a circuit never
// exceeds one maximal PDU. The number of circuits is bounded too (MaxVCs).
// With a Timeout, a PDU whose first cell is older than the timeout when it
// completes, or when Expire runs, is abandoned with ErrTimeout.
//
// With Resync, a PDU that ran together with cells before it is recovered
// rather than lost: when an end-of-message cell closes more cells than the
// length calls for (case 4), the last cells, as many as the length calls
// for, are delivered if their CRC-32 matches, and the cells before them are
// dropped (Stats().Resynced counts the PDUs so recovered); and a circuit
// that accumulates the most cells a PDU may have drops its oldest cell for
// each new one (counted in Discarded) instead of being cut off. A receiver
// wants this where cells that are not its peer's can reach the circuit: the
// first cells of a PDU that never ends, sent by a forger or left by a
// sender that died, would otherwise take the next real PDU down with them,
// and a stream of such cells every real PDU. The CRC-32 decides, as for
// every PDU: cells before a real PDU cannot change it, and a tail that is
// not a whole PDU fails as before (ErrLength). A recovered PDU's CLP tells
// of the dropped cells too, and its timer (Timeout) runs from the first
// cell of the whole run.

// ReassemblerConfig configures a Reassembler. The zero value is usable.
type ReassemblerConfig struct {
	Format  Format        // header layout of the cells (default UNI)
	MaxSDU  int           // largest SDU accepted; 0 or above MaxSDU means MaxSDU
	MaxVCs  int           // circuits with reassembly state; 0 means 1024
	Timeout time.Duration // reassembly timer; 0 disables it
	Clock   clock.Clock   // time source for the timer; nil means the system clock
	// Resync recovers a PDU from the tail of the cells its end-of-message
	// cell closes, and slides over cells that would make a PDU too long
	// (see Reassembly above).
	Resync bool
}

// PDU is a reassembled CPCS-PDU. SDU aliases the Reassembler's buffer for
// the circuit and is valid until the next call to Push.
type PDU struct {
	VC    VC
	UU    uint8
	CPI   uint8
	CLP   bool // some cell of the PDU had CLP set
	Cells int
	SDU   []byte
	// CPCS is the whole CPCS-PDU: SDU, pad and trailer (Cells*48 bytes).
	// It aliases the same buffer as SDU.
	CPCS []byte
}

// ReassemblyStats counts what a Reassembler did.
type ReassemblyStats struct {
	HEC       HECStats
	Cells     uint64 // cells accepted into reassembly
	PDUs      uint64 // PDUs delivered
	CRC       uint64
	Length    uint64
	Oversize  uint64
	Timeout   uint64
	Lost      uint64
	Aborted   uint64
	Mgmt      uint64 // OAM/RM cells dropped
	Evicted   uint64 // open PDUs dropped to make room for a new circuit (MaxVCs busy)
	Discarded uint64 // cells dropped while discarding an oversize PDU (with Resync: the oldest cells of a PDU grown too long)
	Abandoned uint64 // open PDUs dropped by Discard
	Resynced  uint64 // PDUs recovered from the tail of longer runs of cells (Resync; also in PDUs)
}

// circuit is the reassembly state of one VC.
type circuit struct {
	vc      VC
	since   uint64 // when its open PDU began, in Reassembler.opened ticks
	buf     []byte // payloads received so far
	cells   int
	clp     bool
	cut     bool // oversize: drop cells until the end of message
	started time.Time
}

// Reassembler turns a stream of cells back into PDUs, one open PDU per
// circuit. It runs the I.432 header check (HECReceiver) on every cell. It is
// not safe for concurrent use: it belongs to one receive path.
type Reassembler struct {
	cfg      ReassemblerConfig
	maxCells int
	mask     uint32 // header bits that name the circuit
	hec      HECReceiver
	vcs      map[uint32]*circuit
	opened   uint64 // PDUs begun, the clock of circuit.since
	lastKey  uint32
	last     *circuit
	// run is the full header (word and HEC) of the last continuation cell
	// accepted on last; PushCells takes cells with exactly this header
	// without the general checks.
	runWord uint32
	runHEC  uint8
	runOK   bool
	stats   ReassemblyStats
}

// NewReassembler returns a Reassembler for cfg.
func NewReassembler(cfg ReassemblerConfig) *Reassembler {
	if cfg.MaxSDU <= 0 || cfg.MaxSDU > MaxSDU {
		cfg.MaxSDU = MaxSDU
	}
	if cfg.MaxVCs <= 0 {
		cfg.MaxVCs = 1024
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System{}
	}
	r := &Reassembler{
		cfg:      cfg,
		maxCells: CellCount(cfg.MaxSDU),
		mask:     0xfffffff0,
		vcs:      make(map[uint32]*circuit),
	}
	if cfg.Format == UNI {
		r.mask = 0x0ffffff0
	}
	return r
}

// Stats returns the reassembler's counters.
func (r *Reassembler) Stats() ReassemblyStats {
	s := r.stats
	s.HEC = r.hec.Stats()
	return s
}

// HECMode returns the mode of the header check.
func (r *Reassembler) HECMode() HECMode { return r.hec.Mode() }

// Push feeds one cell. When the cell completes a good PDU, Push returns it
// with ok set. When the cell or the PDU it closes is dropped, Push returns
// a *ReassemblyError. A header with a single-bit error is corrected in
// place (counted in Stats().HEC.Corrected) and processed normally.
func (r *Reassembler) Push(c Cell) (pdu PDU, ok bool, err error) {
	if r.runOK && len(c) >= CellSize && binary.BigEndian.Uint32(c) == r.runWord && c[hecOffset] == r.runHEC {
		if v := r.last; !v.cut && v.cells < r.maxCells {
			// Another continuation cell with the header just accepted on
			// this circuit.
			r.take(v, c)
			r.stats.Cells++
			r.hec.goodRun(1)
			return PDU{}, false, nil
		}
	}
	return r.push(c)
}

// take appends the payload of c to v's PDU.
func (r *Reassembler) take(v *circuit, c Cell) {
	if len(v.buf)+PayloadSize > cap(v.buf) {
		v.grow(r.maxCells * PayloadSize)
	}
	v.buf = append(v.buf, c[payloadOffset:CellSize]...)
	v.cells++
}

// push is Push's general path.
func (r *Reassembler) push(c Cell) (pdu PDU, ok bool, err error) {
	r.runOK = false
	if len(c) < CellSize {
		return PDU{}, false, &ReassemblyError{Err: ErrShortCell, Length: -1}
	}
	if r.hec.Check(c) == HECDiscarded {
		return PDU{}, false, &ReassemblyError{Err: ErrHEC, Length: -1}
	}
	w := binary.BigEndian.Uint32(c)
	if w&(PTIManagement<<1) != 0 {
		r.stats.Mgmt++
		return PDU{}, false, &ReassemblyError{Err: ErrManagement, VC: c.VC(r.cfg.Format), Length: -1}
	}
	key := w & r.mask
	v := r.last
	if v == nil || key != r.lastKey {
		if v, err = r.circuit(key, c); err != nil {
			return PDU{}, false, err
		}
		r.last, r.lastKey = v, key
	}
	eom := w&(PTIEndOfMessage<<1) != 0

	if v.cut {
		r.stats.Discarded++
		if eom {
			v.reset()
		}
		return PDU{}, false, nil
	}
	if v.cells == r.maxCells && r.cfg.Resync {
		// Slide: the oldest cell cannot belong to a PDU that ends at or
		// after this one.
		copy(v.buf, v.buf[PayloadSize:])
		v.buf = v.buf[:len(v.buf)-PayloadSize]
		v.cells--
		r.stats.Discarded++
	}
	if v.cells == r.maxCells {
		r.stats.Oversize++
		r.stats.Discarded += uint64(v.cells) + 1
		err := &ReassemblyError{Err: ErrOversize, VC: v.vc, Cells: v.cells + 1, Length: -1, Want: r.maxCells}
		v.reset()
		v.cut = !eom
		if v.cut && r.cfg.Timeout > 0 {
			v.started = r.cfg.Clock.Now() // the discard state expires too
		}
		return PDU{}, false, err
	}
	if v.cells == 0 && !eom {
		r.opened++
		v.since = r.opened
		if r.cfg.Timeout > 0 {
			v.started = r.cfg.Clock.Now()
		}
	}
	r.take(v, c)
	v.clp = v.clp || w&1 != 0
	r.stats.Cells++
	if !eom {
		r.runWord, r.runHEC, r.runOK = binary.BigEndian.Uint32(c), c[hecOffset], true
		return PDU{}, false, nil
	}
	return r.complete(v)
}

// PushCells feeds a buffer of whole cells, as they sit in a frame, and
// calls fn with each PDU delivered and each error, in order. It does what
// Push does cell by cell, but takes runs of continuation cells on one
// circuit with a header comparison and a copy each. A PDU passed to fn is
// valid until fn returns.
func (r *Reassembler) PushCells(cs []byte, fn func(PDU, error)) error {
	if len(cs)%CellSize != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of cells", ErrShortCell, len(cs))
	}
	for o := 0; o < len(cs); o += CellSize {
		if r.runOK && r.last != nil {
			o = r.run(cs, o)
			if o == len(cs) {
				break
			}
		}
		pdu, ok, err := r.Push(Cell(cs[o : o+CellSize]))
		if err != nil {
			fn(PDU{}, err)
		} else if ok {
			fn(pdu, nil)
		}
	}
	return nil
}

// run takes cells from cs[o:] while they repeat the last continuation
// header on the last circuit, and returns the offset of the first cell it
// did not take.
func (r *Reassembler) run(cs []byte, o int) int {
	v := r.last
	n := 0
	for ; o+CellSize <= len(cs); o += CellSize {
		c := cs[o : o+CellSize : o+CellSize]
		if binary.BigEndian.Uint32(c) != r.runWord || c[hecOffset] != r.runHEC || v.cut || v.cells >= r.maxCells {
			break
		}
		r.take(v, c)
		n++
	}
	if n > 0 {
		r.stats.Cells += uint64(n)
		r.hec.goodRun(uint64(n))
	}
	return o
}

// circuit finds or creates the state for the circuit named by key.
func (r *Reassembler) circuit(key uint32, c Cell) (*circuit, error) {
	if v := r.vcs[key]; v != nil {
		return v, nil
	}
	if len(r.vcs) >= r.cfg.MaxVCs {
		r.evict()
	}
	v := &circuit{vc: c.VC(r.cfg.Format)}
	r.vcs[key] = v
	return v, nil
}

// evict makes room for a new circuit: it forgets a circuit with no open
// PDU if there is one, otherwise the one whose open PDU began first,
// dropping that PDU (counted in Evicted). A new circuit is never refused:
// otherwise cells that open PDUs and never end them (a buggy or hostile
// sender's, on made-up circuits) would shut every real circuit out for
// good.
func (r *Reassembler) evict() {
	var oldKey uint32
	var old *circuit
	for k, v := range r.vcs {
		if v.cells == 0 && !v.cut {
			old, oldKey = v, k
			break
		}
		if old == nil || v.since < old.since {
			old, oldKey = v, k
		}
	}
	if old == nil {
		return
	}
	if old.cells > 0 || old.cut {
		r.stats.Evicted++
	}
	delete(r.vcs, oldKey)
	if r.last == old {
		r.last, r.runOK = nil, false
	}
}

// grow doubles the circuit's buffer, never beyond limit bytes (one maximal
// PDU), so that a circuit's memory stays bounded.
func (v *circuit) grow(limit int) {
	n := min(max(2*cap(v.buf), 4*PayloadSize), limit)
	b := make([]byte, len(v.buf), n)
	copy(b, v.buf)
	v.buf = b
}

func (v *circuit) reset() {
	v.buf = v.buf[:0]
	v.cells = 0
	v.clp = false
	v.cut = false
}

// complete checks the PDU that v's last cell closed.
func (r *Reassembler) complete(v *circuit) (PDU, bool, error) {
	pdu, cells, clp := v.buf, v.cells, v.clp
	v.reset()
	if r.cfg.Timeout > 0 && cells > 1 && r.cfg.Clock.Now().Sub(v.started) > r.cfg.Timeout {
		r.stats.Timeout++
		return PDU{}, false, &ReassemblyError{Err: ErrTimeout, VC: v.vc, Cells: cells, Length: -1}
	}
	tr := Trailer(pdu[len(pdu)-TrailerSize:])
	n := tr.Length()
	var err error
	want := CellCount(n)
	switch {
	case n == 0:
		r.stats.Aborted++
		err = ErrAborted
	case n > r.cfg.MaxSDU:
		r.stats.Oversize++
		err, want = ErrOversize, r.cfg.MaxSDU
	case cells < want:
		r.stats.Lost++
		err = ErrLostCells
	case cells > want && r.cfg.Resync && crc32aal5.Checksum(pdu[(cells-want)*PayloadSize:len(pdu)-4]) == tr.CRC():
		// The PDU is the last want cells; those before it are not its.
		pdu = pdu[(cells-want)*PayloadSize:]
		r.stats.PDUs++
		r.stats.Resynced++
		return PDU{VC: v.vc, UU: tr.UU(), CPI: tr.CPI(), CLP: clp, Cells: want, SDU: pdu[:n], CPCS: pdu}, true, nil
	case cells > want:
		r.stats.Length++
		err = ErrLength
	case crc32aal5.Checksum(pdu[:len(pdu)-4]) != tr.CRC():
		r.stats.CRC++
		err = ErrCRC
	default:
		r.stats.PDUs++
		return PDU{VC: v.vc, UU: tr.UU(), CPI: tr.CPI(), CLP: clp, Cells: cells, SDU: pdu[:n], CPCS: pdu}, true, nil
	}
	return PDU{}, false, &ReassemblyError{Err: err, VC: v.vc, Cells: cells, Length: n, Want: want}
}

// Expire abandons every open PDU whose first cell arrived more than the
// configured Timeout ago, and returns one ErrTimeout error for each. It
// does nothing without a Timeout. A circuit discarding the rest of an
// oversize PDU for longer than the timeout stops discarding (its error was
// reported when it was cut). Receive loops call it when idle.
func (r *Reassembler) Expire() []error {
	if r.cfg.Timeout <= 0 {
		return nil
	}
	now := r.cfg.Clock.Now()
	r.runOK = false
	var errs []error
	for _, v := range r.vcs {
		if v.cut && now.Sub(v.started) > r.cfg.Timeout {
			v.reset() // its oversize error was reported when it was cut
			continue
		}
		if v.cells > 0 && now.Sub(v.started) > r.cfg.Timeout {
			r.stats.Timeout++
			errs = append(errs, &ReassemblyError{Err: ErrTimeout, VC: v.vc, Cells: v.cells, Length: -1})
			v.reset()
		}
	}
	return errs
}

// Discard drops the open PDU of circuit vc, if there is one, and reports
// whether there was. A receiver calls it when a frame flagged FlagStart
// arrives on a circuit whose previous PDU never ended (its last cells were
// lost): without it the two would run together and both fail the length
// check.
func (r *Reassembler) Discard(vc VC) bool {
	key := uint32(vc.VPI)<<20 | uint32(vc.VCI)<<4
	v := r.last
	if v == nil || key != r.lastKey {
		v = r.vcs[key]
	}
	if v == nil || v.cells == 0 && !v.cut {
		return false
	}
	v.reset()
	r.runOK = false
	r.stats.Abandoned++
	return true
}

// Pending reports whether some circuit has a PDU open (cells received but
// no end of message yet). A stream that ends while a PDU is pending ended
// in the middle of a PDU.
func (r *Reassembler) Pending() []VC {
	var vcs []VC
	for _, v := range r.vcs {
		if v.cells > 0 {
			vcs = append(vcs, v.vc)
		}
	}
	return vcs
}
