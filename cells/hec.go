package cells

import "encoding/binary"

// Header error control (ITU-T I.432.1, 4.3). The HEC is the CRC-8 of the
// first four header bytes with generator x^8 + x^2 + x + 1, initial value 0,
// XORed with the coset 0x55 (so an all-zero header has HEC 0x55).
//
// Because the generator is (x+1) times a primitive polynomial of degree 7,
// the code has minimum distance 4 over the 40 header bits: every single-bit
// error has a distinct syndrome of odd weight, and every two-bit error has a
// non-zero syndrome of even weight. A receiver can therefore correct any
// single-bit error and still detect, never miscorrect, any two-bit error.
const (
	hecPoly  = 0x07 // x^8 + x^2 + x + 1 without the x^8 term
	hecCoset = 0x55
)

var (
	hecTable [256]uint8
	// hecSyndrome maps a syndrome (computed HEC XOR received HEC) to the
	// header bit a single-bit error at that position would produce, as
	// 1 + byte*8 + bit (bit 0 = most significant); 0 means "not a
	// single-bit error".
	hecSyndrome [256]uint8
)

func init() {
	for i := range hecTable {
		c := uint8(i)
		for range 8 {
			if c&0x80 != 0 {
				c = c<<1 ^ hecPoly
			} else {
				c <<= 1
			}
		}
		hecTable[i] = c
	}
	var hdr [HeaderSize]byte
	for pos := range 8 * HeaderSize {
		hdr = [HeaderSize]byte{}
		hdr[pos/8] = 0x80 >> (pos % 8)
		s := crc8(hdr[:4]) ^ hdr[4]
		hecSyndrome[s] = uint8(pos + 1)
	}
}

func crc8(p []byte) uint8 {
	var c uint8
	for _, b := range p {
		c = hecTable[c^b]
	}
	return c
}

// HEC returns the header error control byte for the first four bytes of
// hdr.
func HEC(hdr []byte) uint8 {
	_ = hdr[3]
	return hecTable[hecTable[hecTable[hecTable[hdr[0]]^hdr[1]]^hdr[2]]^hdr[3]] ^ hecCoset
}

// HECMode is the state of a HECReceiver.
type HECMode uint8

const (
	// HECCorrection is the initial mode: a single-bit header error is
	// corrected; any error moves the receiver to detection mode.
	HECCorrection HECMode = iota
	// HECDetection: every errored cell is discarded; a cell with a good
	// header moves the receiver back to correction mode.
	HECDetection
)

func (m HECMode) String() string {
	if m == HECDetection {
		return "detection"
	}
	return "correction"
}

// HECResult says what a HECReceiver did with a cell header.
type HECResult uint8

const (
	HECGood      HECResult = iota // the header was correct
	HECCorrected                  // a single-bit error was corrected in place
	HECDiscarded                  // the header was errored and the cell must be dropped
)

func (r HECResult) String() string {
	switch r {
	case HECGood:
		return "good"
	case HECCorrected:
		return "corrected"
	case HECDiscarded:
		return "discarded"
	}
	return "HECResult(?)"
}

// HECStats counts the decisions of a HECReceiver.
type HECStats struct {
	Good      uint64 // headers without error
	Corrected uint64 // single-bit errors corrected
	Discarded uint64 // cells discarded for header errors
}

// HECReceiver is the receiver's two-mode header check of I.432.1 (figure
// 3): in correction mode a single-bit error is corrected and the receiver
// moves to detection mode, a multi-bit error discards the cell and also
// moves it to detection mode; in detection mode every errored cell is
// discarded, and the first good header returns it to correction mode.
//
// The zero value is a receiver in correction mode. A HECReceiver belongs to
// one link's receive path and is not safe for concurrent use.
type HECReceiver struct {
	mode HECMode
	// last caches the most recent good header (four bytes, then HEC) so
	// that the common case, a run of cells on one circuit, costs a
	// comparison instead of a CRC.
	lastWord uint32
	lastHEC  uint8
	haveLast bool
	stats    HECStats
}

// Mode returns the receiver's current mode.
func (r *HECReceiver) Mode() HECMode { return r.mode }

// Stats returns the receiver's counters.
func (r *HECReceiver) Stats() HECStats { return r.stats }

// goodRun accounts for n cells whose headers the caller matched against the
// header this receiver last accepted.
func (r *HECReceiver) goodRun(n uint64) {
	r.mode = HECCorrection
	r.stats.Good += n
}

// Check runs the state machine on the header of c (at least HeaderSize
// bytes), correcting a single-bit error in place when it may. A result of
// HECDiscarded means the cell must be dropped.
func (r *HECReceiver) Check(c Cell) HECResult {
	w := binary.BigEndian.Uint32(c)
	h := c[hecOffset]
	if r.haveLast && w == r.lastWord && h == r.lastHEC {
		r.mode = HECCorrection
		r.stats.Good++
		return HECGood
	}
	s := HEC(c[:4]) ^ h
	if s == 0 {
		r.lastWord, r.lastHEC, r.haveLast = w, h, true
		r.mode = HECCorrection
		r.stats.Good++
		return HECGood
	}
	if r.mode == HECCorrection {
		r.mode = HECDetection
		if pos := hecSyndrome[s]; pos != 0 {
			pos--
			c[pos/8] ^= 0x80 >> (pos % 8)
			r.stats.Corrected++
			return HECCorrected
		}
	}
	r.stats.Discarded++
	return HECDiscarded
}
