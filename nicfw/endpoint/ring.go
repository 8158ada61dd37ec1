package endpoint

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// The memory's layout and its descriptor rings: the header words, the
// four queues' slots and indices, produced and consumed without locks.

// The layout of endpoint memory (version 4):
//
//	0                 header, 128 bytes (two cache lines), uint32 each:
//	                  0 magic, 4 version, 8 queue entries, 12 staging
//	                  size, 16 table size, 20 1 when the application
//	                  rings its page of doorbells (View.MapBells; 0:
//	                  its header's doorbell only), 24 1 when the
//	                  application answers every request (View.SetAnswers),
//	                  32 the engine's word (bit 0
//	                  idle: SetIdle; bit 1 not resident or parked:
//	                  SetEvicted),
//	                  36 the store region and 40 the handler count (the
//	                  application's: SetStoreRegion, SetHandlers), 44 the
//	                  doorbell (the application's: Send rings it while
//	                  the endpoint is not resident), 48 and 52 the
//	                  receive pool's offset in the staging area and size
//	                  (the application's: SetPool; 0: none), 56 the
//	                  request send queue's messages done (the engine's:
//	                  CountDone; View.Done), 60 the endpoint's bit in
//	                  its application's page of doorbells (the engine's:
//	                  SetBell; 0: none), 64 the
//	                  armed event mask (Arm; a line of its own); the rest
//	                  reserved, 0
//	128 + q*ringSize  queue q (RequestSend, ReplySend, RequestReceive,
//	                  ReplyReceive): producer index (own cache line),
//	                  consumer index (own cache line), descriptors
//	stagingOff        the staging area, page-aligned
//	recvOff           the receive area, page-aligned: entries slots of
//	                  MaxMedium bytes for RequestReceive, then as many
//	                  for ReplyReceive; the entry at ring position i of
//	                  a queue owns its slot i&(entries-1)
//
// The indices are free-running uint32 counters; an entry's slot is
// index&(entries-1).
const (
	hdrMagic   = 0
	hdrVersion = 4
	hdrEntries = 8
	hdrStaging = 12
	hdrTable   = 16
	hdrRings   = 20
	hdrAnswers = 24
	hdrIdle    = 32
	hdrStore   = 36
	hdrHandler = 40
	hdrBell    = 44
	hdrPoolOff = 48
	hdrPoolLen = 52
	hdrDone    = 56
	hdrBellBit = 60
	hdrArmed   = cacheLine
	hdrSize    = 128

	ringProd  = 0
	ringCons  = cacheLine
	ringDescs = 2 * cacheLine
)

type layout struct {
	entries, staging, table int
	ringSize                int
	stagingOff              int
	recvOff, recvSize       int
	total                   int
}

func layoutFor(c Config) layout {
	l := layout{entries: c.QueueEntries, staging: c.StagingSize, table: c.TableSize}
	l.ringSize = ringDescs + l.entries*descSize
	l.stagingOff = roundUp(hdrSize+int(numQueues)*l.ringSize, pageSize)
	l.recvOff = roundUp(l.stagingOff+l.staging, pageSize)
	l.recvSize = 2 * l.entries * MaxMedium
	l.total = l.recvOff + l.recvSize
	return l
}

// recvSlot returns the offset in the receive area of the slot of the entry
// at ring position pos of receive queue q.
func (l layout) recvSlot(q Queue, pos uint32) int {
	return (int(q-RequestReceive)*l.entries + int(pos&uint32(l.entries-1))) * MaxMedium
}

// hdrWords are the header's words that the engine and the application
// share, each written by one side only: idle by the engine; armed, store
// and handlers by the application (the engine clears armed when it
// notifies).
type hdrWords struct {
	idle, armed, store, handlers, bell, poolOff, poolLen, done, bellBit, ringsPage, answers *atomic.Uint32
}

func words(mem []byte) hdrWords {
	w := func(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&mem[off])) }
	return hdrWords{idle: w(hdrIdle), armed: w(hdrArmed), store: w(hdrStore), handlers: w(hdrHandler), bell: w(hdrBell),
		poolOff: w(hdrPoolOff), poolLen: w(hdrPoolLen), done: w(hdrDone), bellBit: w(hdrBellBit), ringsPage: w(hdrRings),
		answers: w(hdrAnswers)}
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }

func (l layout) writeHeader(mem []byte) {
	binary.LittleEndian.PutUint32(mem[hdrMagic:], endpointMagic)
	binary.LittleEndian.PutUint32(mem[hdrVersion:], endpointVersion)
	binary.LittleEndian.PutUint32(mem[hdrEntries:], uint32(l.entries))
	binary.LittleEndian.PutUint32(mem[hdrStaging:], uint32(l.staging))
	binary.LittleEndian.PutUint32(mem[hdrTable:], uint32(l.table))
	// Until the application says otherwise, peers' Stores may write the
	// whole staging area and requests may name any handler.
	binary.LittleEndian.PutUint32(mem[hdrStore:], uint32(l.staging))
	binary.LittleEndian.PutUint32(mem[hdrHandler:], AnyHandler)
}

// readHeader reads and checks the header of memory of size bytes.
func readHeader(mem []byte) (layout, error) {
	if len(mem) < hdrSize {
		return layout{}, fmt.Errorf("%w: %d bytes", ErrBadEndpoint, len(mem))
	}
	if m, v := binary.LittleEndian.Uint32(mem[hdrMagic:]), binary.LittleEndian.Uint32(mem[hdrVersion:]); m != endpointMagic || v != endpointVersion {
		return layout{}, fmt.Errorf("%w: magic %#x version %d", ErrBadEndpoint, m, v)
	}
	c, err := Config{
		QueueEntries: int(binary.LittleEndian.Uint32(mem[hdrEntries:])),
		StagingSize:  int(binary.LittleEndian.Uint32(mem[hdrStaging:])),
		TableSize:    int(binary.LittleEndian.Uint32(mem[hdrTable:])),
	}.withDefaults()
	if err != nil {
		return layout{}, fmt.Errorf("%w: %w", ErrBadEndpoint, err)
	}
	l := layoutFor(c)
	if l.total > len(mem) {
		return layout{}, fmt.Errorf("%w: needs %d bytes, has %d", ErrBadEndpoint, l.total, len(mem))
	}
	return l, nil
}

// descRing is one side of one queue: a single-producer/single-consumer ring
// of descriptors in the shared memory. own is this side's index (the
// producer's or the consumer's), kept locally and stored to the shared word;
// peer is the other side's index as last loaded. Not safe for concurrent
// use.
type descRing struct {
	ownIdx  *atomic.Uint32 // shared word this side writes
	peerIdx *atomic.Uint32 // shared word the other side writes
	descs   []byte
	mask    uint32
	size    uint32
	own     uint32
	peer    uint32
}

func newDescRing(mem []byte, l layout, q Queue, producer bool) descRing {
	base := hdrSize + int(q)*l.ringSize
	prod := (*atomic.Uint32)(unsafe.Pointer(&mem[base+ringProd]))
	cons := (*atomic.Uint32)(unsafe.Pointer(&mem[base+ringCons]))
	r := descRing{
		descs: mem[base+ringDescs : base+ringDescs+l.entries*descSize : base+ringDescs+l.entries*descSize],
		mask:  uint32(l.entries - 1),
		size:  uint32(l.entries),
	}
	if producer {
		r.ownIdx, r.peerIdx = prod, cons
	} else {
		r.ownIdx, r.peerIdx = cons, prod
	}
	// The side that maps later starts from the indices as they stand.
	r.own, r.peer = r.ownIdx.Load(), r.peerIdx.Load()
	return r
}

func (r *descRing) slot(i uint32) []byte {
	off := int(i&r.mask) * descSize
	return r.descs[off : off+descSize : off+descSize]
}

// room reports whether the producer may write the entry at position own:
// nil, ErrQueueFull when the ring is full, and RefusedRing when the
// consumer's index is further from ours than the ring is long (a corrupt
// peer).
func (r *descRing) room() error {
	if r.own-r.peer >= r.size {
		// An invalid index is not cached, so the ring works again once the
		// peer repairs it.
		peer := r.peerIdx.Load()
		used := r.own - peer
		if used > r.size {
			return RefusedRing
		}
		r.peer = peer
		if used == r.size {
			return ErrQueueFull
		}
	}
	return nil
}

// produce writes d into the next free slot and publishes it. It returns
// the errors of room.
func (r *descRing) produce(d *Descriptor) error {
	if err := r.room(); err != nil {
		return err
	}
	d.encode(r.slot(r.own))
	r.own++
	r.ownIdx.Store(r.own)
	return nil
}

// available returns how many entries the consumer may take, loading the
// producer's index when the cached one shows none; it returns RefusedRing
// when the producer claims more entries than the ring holds.
func (r *descRing) available() (uint32, error) {
	if r.peer != r.own {
		return r.peer - r.own, nil
	}
	// An invalid index is not cached, so the ring works again once the
	// peer repairs it.
	peer := r.peerIdx.Load()
	n := peer - r.own
	if n > r.size {
		return 0, RefusedRing
	}
	r.peer = peer
	return n, nil
}

// consume copies the next entry into d and releases its slot; ok is false
// when the ring is empty.
func (r *descRing) consume(d *Descriptor) (ok bool, err error) {
	ok, err = r.peek(d)
	if ok {
		r.release()
	}
	return ok, err
}

// peek copies the next entry into d without releasing it; ok is false when
// the ring is empty.
func (r *descRing) peek(d *Descriptor) (ok bool, err error) {
	n, err := r.available()
	if n == 0 || err != nil {
		return false, err
	}
	d.decode(r.slot(r.own))
	return true, nil
}

// release gives the next entry back to the producer; the caller has seen
// that there is one.
func (r *descRing) release() {
	r.own++
	r.ownIdx.Store(r.own)
}
