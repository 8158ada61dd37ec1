package endpoint

import (
	"math/bits"
	"sync/atomic"
	"unsafe"
)

// Bells is a page of doorbells that the endpoints of one application share
// with the engine: one bit per endpoint, and a summary word with one bit
// per word of them. An endpoint that the engine parked (idle a while) or
// evicted (not resident) has its Send ring its bit (View.SetBells), and the
// engine learns which endpoints rang from the summary: a Poll that finds
// it zero has read one word, however many endpoints are parked (Take). So
// idle endpoints cost the engine nothing per Poll, as a NIC's doorbell
// registers cost its firmware nothing while no host writes them.
//
// The page is a sealed memfd of BellsSize bytes, which the engine makes
// (NewBells) for each application (a daemon's connection, or an inline
// engine's own process) and the application maps (MapBells). Its layout:
// word 0 (64 bits) is the summary, bit w set when word w may have bits
// set; words 1 to 63 hold endpoint bits, bit b of the page being bit b%64
// of word b/64 (so bits 64 to 4095, BellsMax of them; Alloc hands them
// out). Ringing sets
// the endpoint's bit and then the word's summary bit; Take swaps the
// summary to zero and then each word it names, so a ring between the two
// is found at the next Take (it set the summary bit again). An
// application can ring only its own endpoints' bits (the page is its
// own), and a bit the engine did not hand out, or one of an endpoint that
// is resident, only makes the engine look at an endpoint for nothing.
//
// The endpoint's header carries its bit (the engine writes it: SetBell),
// so that the application needs no table: View.wake reads it when it
// rings.
//
// The other way, the page's next 64 words hold arrival bits, at the same
// bit numbers: the engine sets an endpoint's after it puts a descriptor
// into one of its receive queues (Memory.Put), and an application that
// serves several endpoints (GRIM's channels) looks at those words instead
// of every endpoint's queues (Arrivals, ClearArrival): it clears a bit
// before it takes the queues' entries, so that an arrival while it does
// sets it again and none is missed. Nothing in the engine reads them.

// BellsSize is the size of a page of doorbells, and BellsMax the number
// of endpoint bits in one. The summary word covers 63 words: the page's
// first 64 words are used, the rest of it stays zero.
const (
	BellsSize     = 4096
	bellUsedWords = 64
	BellsMax      = (bellUsedWords - 1) * 64
	arrivalWords  = bellUsedWords // the arrival bits' words follow the doorbells'
)

// Bells is a mapped page of doorbells: the engine's (NewBells), which also
// hands out its bits, or an application's (MapBells), which rings them.
type Bells struct {
	fd    int
	id    [2]uint64 // the memfd's device and inode: which page it is (SamePage)
	mem   []byte
	words *[bellUsedWords + arrivalWords]atomic.Uint64
	free  []int // the engine's: bits not handed out, last first
	next  int   // the engine's: the lowest bit never handed out
}

func newBells(fd int, id [2]uint64, mem []byte) *Bells {
	return &Bells{fd: fd, id: id, mem: mem, words: (*[bellUsedWords + arrivalWords]atomic.Uint64)(unsafe.Pointer(&mem[0])), next: 64}
}

// FD returns the page's memfd, for handing to the application; the
// engine's Bells owns it. An application's Bells has none (-1).
func (b *Bells) FD() int { return b.fd }

// Alloc hands out a bit of the page for an endpoint; ok is false when all
// BellsMax bits of the page are out (the endpoint then rings its own
// header's doorbell only, which the engine reads less often).
func (b *Bells) Alloc() (bit int, ok bool) {
	if n := len(b.free); n > 0 {
		bit, b.free = b.free[n-1], b.free[:n-1]
		return bit, true
	}
	if b.next >= bellUsedWords*64 {
		return 0, false
	}
	b.next++
	return b.next - 1, true
}

// Free gives back a bit handed out by Alloc, cleared, its arrival bit too.
func (b *Bells) Free(bit int) {
	if bit < 64 || bit >= bellUsedWords*64 {
		return
	}
	b.words[bit/64].And(^(uint64(1) << (bit % 64)))
	b.words[arrivalWords+bit/64].And(^(uint64(1) << (bit % 64)))
	b.free = append(b.free, bit)
}

// SamePage reports whether b and o map the same page (two views of one
// application's endpoints each map it).
func (b *Bells) SamePage(o *Bells) bool { return b != nil && o != nil && b.mem != nil && b.id == o.id }

// Arrive sets bit's arrival bit (the engine's, after a Put). A bit set
// already is only read: an endpoint whose application never clears its
// bit (one that does not look at arrival bits) costs a load per Put, not
// an atomic write. That loses nothing: the application clears a bit
// before it takes the queues, so a Put that finds it set was published
// before the clear and is taken after it.
func (b *Bells) Arrive(bit int) {
	if b == nil || bit < 64 || bit >= bellUsedWords*64 {
		return
	}
	w, m := &b.words[arrivalWords+bit/64], uint64(1)<<(bit%64)
	if w.Load()&m == 0 {
		w.Or(m)
	}
}

// Arrivals returns the word of arrival bits that holds bit: bit b%64 of it
// is set if something arrived for bit b's endpoint since its last
// ClearArrival. 0 for a bit outside the page's.
func (b *Bells) Arrivals(bit int) uint64 {
	if b == nil || bit < 64 || bit >= bellUsedWords*64 {
		return 0
	}
	return b.words[arrivalWords+bit/64].Load()
}

// ClearArrival clears bit's arrival bit, before the application takes its
// endpoint's receive queues.
func (b *Bells) ClearArrival(bit int) {
	if b == nil || bit < 64 || bit >= bellUsedWords*64 {
		return
	}
	b.words[arrivalWords+bit/64].And(^(uint64(1) << (bit % 64)))
}

// Ring rings bit: sets it, then its word's summary bit. Bits outside the
// page's endpoint bits are ignored.
func (b *Bells) Ring(bit int) {
	if b == nil || bit < 64 || bit >= bellUsedWords*64 {
		return
	}
	w := bit / 64
	b.words[w].Or(uint64(1) << (bit % 64))
	b.words[0].Or(uint64(1) << w)
}

// Rung reports whether a bit may have rung since the last Take: one load
// of the summary word.
func (b *Bells) Rung() bool { return b.words[0].Load() != 0 }

// Take calls f with each bit rung since the last Take, and clears them.
// It reads one word when none rang.
func (b *Bells) Take(f func(bit int)) {
	if b.words[0].Load() == 0 {
		return
	}
	sum := b.words[0].Swap(0)
	for sum != 0 {
		w := bits.TrailingZeros64(sum)
		sum &= sum - 1
		if w == 0 {
			continue
		}
		for rung := b.words[w].Swap(0); rung != 0; rung &= rung - 1 {
			f(w*64 + bits.TrailingZeros64(rung))
		}
	}
}
