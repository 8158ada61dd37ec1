package endpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/xam-project/xam/nicfw/internal/fwerr"
)

// Endpoint memory: the part of an AM-II endpoint that the engine and the
// application share. Who owns what:
//
//   - The engine creates the memory (NewMemory, in the engine
//     thread), keeps the memfd to hand to the application, and is the only
//     user of its Memory: it consumes the two send queues (Take) and
//     produces into the two receive queues (Put), all in the engine thread.
//   - The application maps the memfd it received (Map) and is the
//     only user of its View: it produces into the send queues (Send)
//     and consumes the receive queues (Receive, or Peek and Release). An
//     View is not safe for concurrent use; an application with
//     several threads serialises its calls (or gives each queue's side to
//     one thread: the four rings of a view share no state; Ready and Arm
//     look at both receive queues, so they belong with them).
//   - In the shared memory each ring's producer index is written only by its
//     producer and its consumer index only by its consumer, always through
//     sync/atomic. Each side keeps its own index in local memory and only
//     stores it to the shared word, never reads it back, so an application
//     that scribbles on the engine's indices hurts only itself.
//
// Protection lives in the engine's Take: the application can write anything
// anywhere in its endpoint, so Take copies each descriptor out of the shared
// memory before it looks at it (the application cannot change it between
// check and use), checks the copy (class, argument count, destination index,
// offset and length inside the staging area) and counts each refusal by
// reason. A producer index that claims more entries than the ring holds is
// refused as a corrupt ring (and not cached, so the queue works again once
// the application repairs it); a consumer index of a receive queue is read
// only when the engine's cached copy says the queue is full, and refused
// the same way if it is corrupt. Slots are always index&mask, so no index
// can make the engine touch memory outside the ring. The memfd is sealed against shrinking and
// growing, so the application cannot truncate it under the engine's mapping
// (which would make the engine's accesses fault). The staging area's bytes
// are the application's: the engine copies what a descriptor names and
// otherwise does not trust them.
//
// The receive area holds the bytes of received medium messages: one
// MaxMedium slot per entry of each receive queue, so that the slot of the
// descriptor at ring position i is i's alone until the application consumes
// that descriptor, and the engine writes a slot only when it may produce
// into the entry that names it. The application reads a message's bytes in
// place (zero copies at the receiver): it takes the descriptor with Peek,
// uses Data, and frees entry and slot together with Release. The engine
// only writes the receive area, never reads it.
//
// Blocking wait. Two words of the header let an application sleep instead
// of polling and wake the engine when it sleeps (the daemon does the
// sleeping and the waking; see Arm and SetIdle for the protocol and why no
// wake-up is lost): the armed event mask, which the application writes
// (Arm) and the engine clears when it notifies, and the engine's idle word,
// which the engine writes (SetIdle) and the application's Send reads.

// Specification constants of AM-II's message classes.
const (
	// MaxShortArgs is the most argument words of a short message.
	MaxShortArgs = 8
	// MaxMedium is the largest medium message, in bytes.
	MaxMedium = 8192
)

// Implementation constants and defaults of endpoint memory.
const (
	DefaultQueueEntries = 64
	DefaultStagingSize  = 64 << 10
	DefaultTableSize    = 256

	maxQueueEntries = 1 << 14
	maxStagingSize  = 1 << 30
	maxTableSize    = 1 << 20

	endpointMagic   = 0x5045_4d58    // "XMEP" little-endian
	endpointVersion = 4              // 2: receive area, event words, RemoteOffset; 3: store region, handler count; 4: doorbell
	endpointName    = "xam-endpoint" // the memfd's name, in /proc/*/maps
	pageSize        = 4096
	cacheLine       = 64
	descSize        = 96
)

// Queue names one of an endpoint's four queues.
type Queue uint8

// AM-II's four queues. The application produces into the send queues and
// the engine consumes them; the engine produces into the receive queues and
// the application consumes them.
const (
	RequestSend Queue = iota
	ReplySend
	RequestReceive
	ReplyReceive
	numQueues
)

func (q Queue) String() string {
	switch q {
	case RequestSend:
		return "request send"
	case ReplySend:
		return "reply send"
	case RequestReceive:
		return "request receive"
	case ReplyReceive:
		return "reply receive"
	}
	return fmt.Sprintf("queue %d", uint8(q))
}

// isSend reports whether the application produces into q.
func (q Queue) isSend() bool { return q == RequestSend || q == ReplySend }

// Class is a message class.
type Class uint8

// AM-II's message classes; 0 is not a class.
const (
	ClassShort  Class = 1 // up to MaxShortArgs words in the descriptor
	ClassMedium Class = 2 // up to MaxMedium bytes in the staging area
	ClassBulk   Class = 3 // any length inside the staging area
	// ClassCommand is an operation of an engine module, not a message:
	// Handler names it (the module's id in the high 16 bits), the
	// arguments are its operands, Dest is not used. Its completion
	// arrives in the reply receive queue with the same Class and Handler,
	// the results as arguments and the status in Tag (nicfw.CommandStatus).
	ClassCommand Class = 4
)

// Descriptor is one entry of an endpoint queue. In a send queue Dest is an
// index into the endpoint's translation table; in a receive queue the
// engine sets it to the sender's index. Args[:NArgs] are the message's
// arguments (every class carries up to MaxShortArgs). Offset and Length
// name the message's bytes (zero for short messages):
//
//   - in a send queue, in the staging area: a medium message's bytes, or
//     the bulk data to store at RemoteOffset in the receiving endpoint's
//     staging area (PoolOffset: in a block of its receive pool, SetPool);
//   - in a receive queue, a medium message's bytes in the receive area and
//     a bulk message's in the staging area, where the engine stored them
//     (Offset is then the RemoteOffset it was sent with, and RemoteOffset
//     is 0). View.Data returns them.
//
// In the shared memory a descriptor takes 96 bytes, little-endian:
//
//	offset  size  field
//	0       1     class
//	1       1     number of arguments
//	2       2     reserved, 0
//	4       4     destination index
//	8       4     handler
//	12      4     offset (staging area; received medium: receive area)
//	16      4     length
//	20      4     remote offset: bulk, in the receiver's staging area
//	24      8     tag
//	32      64    arguments, 8 words
type Descriptor struct {
	Class        Class
	NArgs        uint8
	Flags        Flag
	Dest         uint32
	Handler      uint32
	Offset       uint32
	Length       uint32
	RemoteOffset uint32
	Tag          uint64
	Args         [MaxShortArgs]uint64
}

// Flag is a descriptor's flags.
type Flag uint8

// CutThrough, on a bulk message, lets the engine send it while the
// application is still writing it: the 32-bit word just before the
// message's bytes in the staging area (at Offset-4; Offset a multiple of 4)
// is its status register, which holds how many of its bytes are written
// (View.Publish). The engine sends those and waits for more, so the
// application writes the first bytes, publishes them, sends the
// descriptor, and publishes growing lengths until the whole is written.
const CutThrough Flag = 1

// PoolOffset as a bulk message's RemoteOffset lets the receiving engine
// store it in its endpoint's receive pool (View.SetPool), where it finds
// room, instead of at an offset the sender names.
const PoolOffset = ^uint32(0)

func (d *Descriptor) encode(b []byte) {
	_ = b[descSize-1]
	b[0], b[1], b[2], b[3] = byte(d.Class), d.NArgs, byte(d.Flags), 0
	binary.LittleEndian.PutUint32(b[4:], d.Dest)
	binary.LittleEndian.PutUint32(b[8:], d.Handler)
	binary.LittleEndian.PutUint32(b[12:], d.Offset)
	binary.LittleEndian.PutUint32(b[16:], d.Length)
	binary.LittleEndian.PutUint32(b[20:], d.RemoteOffset)
	binary.LittleEndian.PutUint64(b[24:], d.Tag)
	for i, a := range d.Args {
		binary.LittleEndian.PutUint64(b[32+8*i:], a)
	}
}

func (d *Descriptor) decode(b []byte) {
	_ = b[descSize-1]
	d.Class, d.NArgs, d.Flags = Class(b[0]), b[1], Flag(b[2])
	d.Dest = binary.LittleEndian.Uint32(b[4:])
	d.Handler = binary.LittleEndian.Uint32(b[8:])
	d.Offset = binary.LittleEndian.Uint32(b[12:])
	d.Length = binary.LittleEndian.Uint32(b[16:])
	d.RemoteOffset = binary.LittleEndian.Uint32(b[20:])
	d.Tag = binary.LittleEndian.Uint64(b[24:])
	for i := range d.Args {
		d.Args[i] = binary.LittleEndian.Uint64(b[32+8*i:])
	}
}

// Refusal is why the engine refused a descriptor from a send queue. It is
// an error; errors.Is(err, ErrRefused) holds for every Refusal.
type Refusal uint8

// The reasons for refusing a descriptor.
const (
	RefusedClass       Refusal = iota // class not short, medium or bulk
	RefusedArgs                       // more than MaxShortArgs arguments
	RefusedDestination                // index outside the translation table
	RefusedLength                     // length not allowed for the class
	RefusedRange                      // offset+length outside the staging area
	RefusedRing                       // the producer index claims more than the ring holds
	RefusedFlags                      // flags unknown, or not allowed for the class and offset
	NumRefusals
)

// ErrRefused matches every Refusal.
var ErrRefused = errors.New("nicfw: descriptor refused")

func (r Refusal) Error() string {
	switch r {
	case RefusedClass:
		return "nicfw: descriptor refused: unknown class"
	case RefusedArgs:
		return "nicfw: descriptor refused: too many arguments"
	case RefusedDestination:
		return "nicfw: descriptor refused: destination index out of range"
	case RefusedLength:
		return "nicfw: descriptor refused: length not allowed for the class"
	case RefusedRange:
		return "nicfw: descriptor refused: offset and length outside the staging area"
	case RefusedRing:
		return "nicfw: descriptor refused: corrupt ring index"
	case RefusedFlags:
		return "nicfw: descriptor refused: flags unknown or not allowed for the class"
	}
	return fmt.Sprintf("nicfw: descriptor refused: reason %d", uint8(r))
}

// Is makes errors.Is(r, ErrRefused) true.
func (r Refusal) Is(target error) bool { return target == ErrRefused }

// Errors of endpoint memory. Test for them with errors.Is.
var (
	// ErrQueueFull: the ring has no free entry; the consumer has not caught
	// up (for a receive queue, the engine NACKs).
	ErrQueueFull = errors.New("nicfw: endpoint queue full")
	// ErrWrongQueue: a send operation on a receive queue or the other way
	// round.
	ErrWrongQueue = errors.New("nicfw: operation not allowed on this queue")
	// ErrBadEndpoint: Map found no valid endpoint memory in the fd.
	ErrBadEndpoint = errors.New("nicfw: not a valid endpoint memory")
	// ErrClosed: the memory or view has been closed.
	ErrClosed = errors.New("nicfw: endpoint memory closed")
	// ErrQueueEmpty: Release found nothing to release.
	ErrQueueEmpty = errors.New("nicfw: endpoint queue empty")
	// ErrOutOfRange: a descriptor names bytes outside the area that holds
	// its class's data (Data).
	ErrOutOfRange = errors.New("nicfw: descriptor names bytes outside its area")
)

// Events are the receive queues an application waits on (Arm), one bit
// each.
type Events uint32

// The events.
const (
	EventRequest Events = 1 << iota // the request receive queue is not empty
	EventReply                      // the reply receive queue is not empty

	allEvents = EventRequest | EventReply
)

// event returns the event of receive queue q.
func (q Queue) event() Events {
	if q == RequestReceive {
		return EventRequest
	}
	return EventReply
}

// Config sizes an endpoint's memory. Zero fields take the defaults.
type Config struct {
	// QueueEntries is the number of descriptors in each of the four queues,
	// a power of two up to 16384 (default DefaultQueueEntries). The receive
	// area takes 2*QueueEntries*MaxMedium bytes: 1 MiB at the default.
	QueueEntries int
	// StagingSize is the size of the staging area in bytes, at least
	// MaxMedium and at most 1 GiB (default DefaultStagingSize).
	StagingSize int
	// TableSize is the number of entries of the endpoint's translation
	// table: a send descriptor's destination index must be below it
	// (default DefaultTableSize, at most 1<<20).
	TableSize int
}

func (c Config) withDefaults() (Config, error) {
	if c.QueueEntries == 0 {
		c.QueueEntries = DefaultQueueEntries
	}
	if c.StagingSize == 0 {
		c.StagingSize = DefaultStagingSize
	}
	if c.TableSize == 0 {
		c.TableSize = DefaultTableSize
	}
	switch {
	case c.QueueEntries < 2 || c.QueueEntries > maxQueueEntries || c.QueueEntries&(c.QueueEntries-1) != 0:
		return c, fmt.Errorf("%w: QueueEntries %d: want a power of two in 2..%d", ErrConfig, c.QueueEntries, maxQueueEntries)
	case c.StagingSize < MaxMedium || c.StagingSize > maxStagingSize:
		return c, fmt.Errorf("%w: StagingSize %d: want %d..%d", ErrConfig, c.StagingSize, MaxMedium, maxStagingSize)
	case c.TableSize < 1 || c.TableSize > maxTableSize:
		return c, fmt.Errorf("%w: TableSize %d: want 1..%d", ErrConfig, c.TableSize, maxTableSize)
	}
	return c, nil
}

// The layout of endpoint memory (version 4):
//
//	0                 header, 128 bytes (two cache lines), uint32 each:
//	                  0 magic, 4 version, 8 queue entries, 12 staging
//	                  size, 16 table size, 32 the engine's word (bit 0
//	                  idle: SetIdle; bit 1 not resident: SetEvicted),
//	                  36 the store region and 40 the handler count (the
//	                  application's: SetStoreRegion, SetHandlers), 44 the
//	                  doorbell (the application's: Send rings it while
//	                  the endpoint is not resident), 48 and 52 the
//	                  receive pool's offset in the staging area and size
//	                  (the application's: SetPool; 0: none), 56 the
//	                  request send queue's messages done (the engine's:
//	                  CountDone; View.Done), 64 the
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
	hdrIdle    = 32
	hdrStore   = 36
	hdrHandler = 40
	hdrBell    = 44
	hdrPoolOff = 48
	hdrPoolLen = 52
	hdrDone    = 56
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
	idle, armed, store, handlers, bell, poolOff, poolLen, done *atomic.Uint32
}

func words(mem []byte) hdrWords {
	w := func(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&mem[off])) }
	return hdrWords{idle: w(hdrIdle), armed: w(hdrArmed), store: w(hdrStore), handlers: w(hdrHandler), bell: w(hdrBell),
		poolOff: w(hdrPoolOff), poolLen: w(hdrPoolLen), done: w(hdrDone)}
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

// Stats counts what the engine did with an endpoint's queues.
type Stats struct {
	Taken    uint64              // descriptors taken from send queues and accepted
	Refused  [NumRefusals]uint64 // refusals by reason; RefusedRing counts calls that found a corrupt index
	Put      uint64              // descriptors put into receive queues
	PutFull  uint64              // Put calls that found the receive queue full
	Notified uint64              // Puts that found their queue's event armed (SetNotify)
}

// Memory is the engine's side of an endpoint: the memfd and its
// mapping. It belongs to the engine thread.
type Memory struct {
	fd    int
	mem   []byte
	l     layout
	rings [numQueues]descRing
	hdrWords
	notify func()
	stats  Stats
}

// Config returns the memory's sizes.
func (m *Memory) Config() Config {
	return Config{QueueEntries: m.l.entries, StagingSize: m.l.staging, TableSize: m.l.table}
}

// FD returns the memfd, for handing to the application (SCM_RIGHTS, or
// exec.Cmd.ExtraFiles after a dup). The memory owns it; Close closes it.
func (m *Memory) FD() int { return m.fd }

// Staging returns the engine's view of the staging area. The application
// may change its bytes at any time.
func (m *Memory) Staging() []byte {
	if m.mem == nil {
		return nil
	}
	return m.mem[m.l.stagingOff : m.l.stagingOff+m.l.staging : m.l.stagingOff+m.l.staging]
}

// Stats returns the memory's counters.
func (m *Memory) Stats() Stats { return m.stats }

// StoreRegion returns how many bytes at the start of the staging area
// peers' Stores may write (View.SetStoreRegion), at most the staging area.
func (m *Memory) StoreRegion() uint64 {
	return min(uint64(m.store.Load()), uint64(m.l.staging))
}

// Pool returns the receive pool the application set (View.SetPool): its
// offset in the staging area and its size, clipped to the staging area;
// size 0: none.
func (m *Memory) Pool() (off, size uint32) {
	off, size = m.poolOff.Load(), m.poolLen.Load()
	if uint64(off) >= uint64(m.l.staging) {
		return 0, 0
	}
	return off, uint32(min(uint64(size), uint64(m.l.staging)-uint64(off)))
}

// Produced returns the ring position the next descriptor Put into receive
// queue q takes.
func (m *Memory) Produced(q Queue) uint32 { return m.rings[q].own }

// Released returns the ring position up to which the application has
// released receive queue q's entries (its consumer index): an entry at a
// position p with Released(q)-p in 1..entries is the engine's again.
func (m *Memory) Released(q Queue) uint32 { return m.rings[q].peerIdx.Load() }

// AcceptsHandler reports whether a request may name handler h
// (View.SetHandlers).
func (m *Memory) AcceptsHandler(h uint32) bool { return h < m.handlers.Load() }

// SetNotify sets the function that Put calls after it has put a
// descriptor into a receive queue whose event the application armed
// (View.Arm): the daemon's writes the eventfd the application
// blocks on. It runs in the engine thread, at most once per arming, and
// must not block. With none (nil, the default) nobody is notified, but the
// armed word is cleared all the same.
func (m *Memory) SetNotify(f func()) { m.notify = f }

// SetIdle writes the engine's idle word, which the application's Send
// reads to decide whether to kick the engine (View.SetKick). An
// engine going to sleep first sets it on every endpoint, then looks at
// every send queue once more (Pending) and sleeps only if all are empty;
// on waking it clears it. Looking again after setting the word is what
// makes a kick impossible to lose: Send publishes its descriptor before it
// loads the word, the engine sets the word before it loads the indices,
// all four sequentially consistent atomic operations, so either the engine
// sees the descriptor or Send sees the word and kicks (see signal for the
// same argument in the other direction).
func (m *Memory) SetIdle(idle bool) {
	if m.mem == nil {
		return
	}
	if idle {
		m.idle.Or(wordIdle)
	} else {
		m.idle.And(^uint32(wordIdle))
	}
}

// The bits of the engine's word (hdrIdle).
const (
	wordIdle    = 1 // the engine sleeps: Send kicks it
	wordEvicted = 2 // the endpoint is not resident: Send rings its doorbell
)

// SetEvicted marks the endpoint resident (false) or not (true) in the
// engine's word. While it is marked, the application's Send rings the
// endpoint's doorbell (a word of its header the engine reads: Doorbell)
// and kicks the engine if it has a kick function: a non-resident
// endpoint's queues are not polled, and the doorbell is how its work
// reaches the engine. An engine that evicts an endpoint sets the mark,
// then looks at its send queues once more (Pending), as SetIdle's caller
// does, so that no send is missed.
func (m *Memory) SetEvicted(evicted bool) {
	if m.mem == nil {
		return
	}
	if evicted {
		m.idle.Or(wordEvicted)
	} else {
		m.idle.And(^uint32(wordEvicted))
	}
}

// Doorbell reports whether the application rang the endpoint's doorbell
// since the last call, and clears it.
func (m *Memory) Doorbell() bool {
	if m.mem == nil || m.bell.Load() == 0 {
		return false
	}
	return m.bell.Swap(0) != 0
}

// PeekDest returns the Dest of the descriptor at the head of send queue
// q without taking it: untrusted (Take checks it), for a scheduler that
// asks whether the message could leave now. ok false: the queue is empty;
// a corrupt ring peeks as a descriptor, so that Take gets to refuse it.
func (m *Memory) PeekDest(q Queue) (dest uint32, ok bool) {
	if m.mem == nil || !q.isSend() {
		return 0, false
	}
	r := &m.rings[q]
	n, err := r.available()
	if err != nil {
		return NoIndex, true
	}
	if n == 0 {
		return 0, false
	}
	return binary.LittleEndian.Uint32(r.slot(r.own)[4:]), true // Descriptor.Dest
}

// Pending reports whether either send queue holds a descriptor (a corrupt
// ring counts as pending, so that Take gets to refuse it).
func (m *Memory) Pending() bool {
	if m.mem == nil {
		return false
	}
	for _, q := range [...]Queue{RequestSend, ReplySend} {
		if n, err := m.rings[q].available(); n > 0 || err != nil {
			return true
		}
	}
	return false
}

// Take takes the next descriptor from send queue q and checks it. It
// returns ok false and a nil error when the queue is empty; ok true and a
// nil error for a descriptor that passed; and a Refusal for one that did
// not, which is counted. A refused descriptor has still been taken off the
// queue and d holds it (to return to its sender), except for RefusedRing,
// where nothing was taken and the queue stays refused until the
// application repairs its index.
//
// Take gives the entry back to the application at once. The engine, which
// must copy a medium message's bytes before the application may reuse
// them (View.Progress), uses Next and Commit instead.
func (m *Memory) Take(q Queue, d *Descriptor) (ok bool, err error) {
	ok, err = m.Next(q, d)
	if ok {
		m.Commit(q)
	}
	return ok, err
}

// Next is Take except that a descriptor that passed stays in its entry:
// the application sees it taken (Progress) only once Commit gives the
// entry back, so the bytes it names stay the application's to leave alone
// until then. A refused descriptor is given back at once.
func (m *Memory) Next(q Queue, d *Descriptor) (ok bool, err error) {
	if m.mem == nil {
		return false, ErrClosed
	}
	if !q.isSend() {
		return false, ErrWrongQueue
	}
	ok, err = m.rings[q].peek(d)
	if err == nil && ok {
		if err = m.check(d); err != nil {
			m.rings[q].release()
		}
	}
	if err != nil {
		if r, isRefusal := err.(Refusal); isRefusal && r < NumRefusals {
			m.stats.Refused[r]++
		}
		return false, err
	}
	if ok {
		m.stats.Taken++
	}
	return ok, nil
}

// Commit gives back the entry of the descriptor Next returned from send
// queue q.
func (m *Memory) Commit(q Queue) { m.rings[q].release() }

// check validates a descriptor copied out of a send queue.
func (m *Memory) check(d *Descriptor) error {
	if d.Flags != 0 && (d.Flags != CutThrough || d.Class != ClassBulk || d.Offset < 4 || d.Offset%4 != 0) {
		return RefusedFlags
	}
	switch d.Class {
	case ClassShort:
		if d.NArgs > MaxShortArgs {
			return RefusedArgs
		}
		if d.Offset != 0 || d.Length != 0 {
			return RefusedLength
		}
	case ClassMedium, ClassBulk:
		if d.NArgs > MaxShortArgs {
			return RefusedArgs
		}
		if d.Length == 0 || d.Class == ClassMedium && d.Length > MaxMedium {
			return RefusedLength
		}
		// In 64 bits, so that offset+length cannot wrap around.
		if uint64(d.Offset)+uint64(d.Length) > uint64(m.l.staging) {
			return RefusedRange
		}
	case ClassCommand:
		if d.NArgs > MaxShortArgs {
			return RefusedArgs
		}
		if d.Offset != 0 || d.Length != 0 || d.RemoteOffset != 0 {
			return RefusedLength
		}
		return nil // Dest is not used
	default:
		return RefusedClass
	}
	if uint64(d.Dest) >= uint64(m.l.table) {
		return RefusedDestination
	}
	return nil
}

// Put puts d into receive queue q. It returns ErrQueueFull when the
// application has not made room (the engine then NACKs), and RefusedRing
// when the application's consumer index is corrupt. If the application
// armed q's event, Put notifies it (SetNotify).
func (m *Memory) Put(q Queue, d *Descriptor) error { return m.put(q, d, nil) }

// PutData puts d into receive queue q with the bytes of a medium message,
// which it first copies into the receive-area slot of the entry d goes
// into, and sets d's Offset and Length to name them there. len(data) is at
// most MaxMedium (the engine checked).
func (m *Memory) PutData(q Queue, d *Descriptor, data []byte) error {
	if data == nil {
		data = []byte{}
	}
	return m.put(q, d, data)
}

func (m *Memory) put(q Queue, d *Descriptor, data []byte) error {
	if m.mem == nil {
		return ErrClosed
	}
	if q.isSend() || q >= numQueues {
		return ErrWrongQueue
	}
	r := &m.rings[q]
	err := r.room()
	if err == nil {
		if data != nil {
			// The entry at r.own is free, so is its slot: the application
			// gave both back when it released the entry before.
			off := m.l.recvSlot(q, r.own)
			slot := m.mem[m.l.recvOff+off : m.l.recvOff+off+MaxMedium]
			d.Offset, d.Length = uint32(off), uint32(copy(slot, data))
		}
		err = r.produce(d)
	}
	switch {
	case err == nil:
		m.stats.Put++
		m.signal(q)
	case errors.Is(err, ErrQueueFull):
		m.stats.PutFull++
	default:
		m.stats.Refused[RefusedRing]++
	}
	return err
}

// signal notifies the application, after a Put into receive queue q, if
// it armed q's event.
//
// No wake-up is lost. The application (View.Arm) stores the armed
// mask, then loads the producer indices of the receive queues; Put has
// stored the producer index, then loads the armed mask here. All four are
// sequentially consistent atomic operations (sync/atomic), so they fall in
// one total order in which either the application's load of the index
// comes after Put's store, and Arm sees the entry and the application does
// not block, or Put's load of the mask comes after Arm's store, and Put
// sees the bit and notifies. Both may happen: the notification is then
// spurious, and the application, finding nothing new, arms again. The mask
// is cleared with a compare-and-swap of exactly the value seen, so one
// arming is answered by at most one notification, and a mask that the
// application changed in between is looked at again, not lost.
func (m *Memory) signal(q Queue) {
	bit := uint32(q.event())
	for {
		old := m.armed.Load()
		if old&bit == 0 {
			return
		}
		if m.armed.CompareAndSwap(old, 0) {
			m.stats.Notified++
			if m.notify != nil {
				m.notify()
			}
			return
		}
	}
}

// View is the application's side of an endpoint: a mapping of the
// memfd it received. See the top of endpoint.go for its threading contract.
type View struct {
	mem   []byte
	l     layout
	rings [numQueues]descRing
	hdrWords
	kick func()
}

func newView(mem []byte) (*View, error) {
	l, err := readHeader(mem)
	if err != nil {
		return nil, err
	}
	v := &View{mem: mem, l: l}
	for q := range numQueues {
		v.rings[q] = newDescRing(mem, l, q, q.isSend())
	}
	v.hdrWords = words(mem)
	return v, nil
}

// Config returns the endpoint's sizes as its header gives them.
func (v *View) Config() Config {
	return Config{QueueEntries: v.l.entries, StagingSize: v.l.staging, TableSize: v.l.table}
}

// SetStoreRegion limits where peers' bulk messages (Stores) may write in
// this endpoint's staging area to its first n bytes; a bulk message whose
// region does not lie inside them is returned to its sender with
// ReasonRange. A new endpoint exposes its whole staging area; n beyond it
// is taken as all of it. The engine reads the limit for every chunk it
// stores, so a smaller one holds for the chunks that arrive after the call.
func (v *View) SetStoreRegion(n uint32) {
	if v.mem != nil {
		v.store.Store(n)
	}
}

// SetPool makes size bytes of the staging area from off the receive pool:
// the engine then stores a pooled bulk message (RemoteOffset PoolOffset)
// in a block of the pool it chooses as the message's first chunk arrives,
// refusing the message for now (NACK: its sender sends it again later)
// while no block is free, and the block is the application's from the
// moment the engine puts the message's descriptor until the application
// releases it. The application must not write the pool itself. Set it
// before peers send pooled messages; the engine takes a change only while
// none of the pool's blocks is in use.
func (v *View) SetPool(off, size uint32) {
	if v.mem != nil {
		v.poolOff.Store(off)
		v.poolLen.Store(size)
	}
}

// AnyHandler is the handler count of an endpoint that has set none
// (SetHandlers): requests may name any handler.
const AnyHandler = ^uint32(0)

// SetHandlers tells the engine how many request handlers the application
// has, numbered from 0: a request that names a handler at or above n is
// returned to its sender with ReasonNoHandler instead of being delivered.
// A new endpoint accepts any handler (AnyHandler); replies are never
// checked.
func (v *View) SetHandlers(n uint32) {
	if v.mem != nil {
		v.handlers.Store(n)
	}
}

// Staging returns the staging area.
func (v *View) Staging() []byte {
	if v.mem == nil {
		return nil
	}
	return v.mem[v.l.stagingOff : v.l.stagingOff+v.l.staging : v.l.stagingOff+v.l.staging]
}

// SetKick sets the function that Send calls after it has published a
// descriptor, when the engine has marked itself idle
// (Memory.SetIdle): the daemon's writes the eventfd the engine
// sleeps on. With none (nil, the default) Send does not look at the idle
// word; with one, Send costs one more atomic load while the engine is
// busy. SetIdle explains why no kick is lost.
func (v *View) SetKick(f func()) { v.kick = f }

// Send puts d into send queue q. It does not check d: the engine does. It
// returns ErrQueueFull when the engine has not caught up.
func (v *View) Send(q Queue, d *Descriptor) error {
	if v.mem == nil {
		return ErrClosed
	}
	if !q.isSend() {
		return ErrWrongQueue
	}
	if err := v.rings[q].produce(d); err != nil {
		return err
	}
	v.wake()
	return nil
}

// wake rings the doorbell of an evicted endpoint and kicks an engine that
// sleeps, after the application published something the engine must see.
func (v *View) wake() {
	if w := v.idle.Load(); w != 0 {
		if w&wordEvicted != 0 {
			v.bell.Store(1)
		}
		if v.kick != nil {
			v.kick()
		}
	}
}

// Publish writes the status register of a cut-through bulk message whose
// bytes start at off in the staging area: n of them are written, and the
// engine may send them. off is the message's Offset (a multiple of 4, at
// least 4); n only grows while the message is being sent.
func (v *View) Publish(off, n uint32) error {
	if v.mem == nil {
		return ErrClosed
	}
	if off < 4 || off%4 != 0 || uint64(off) > uint64(v.l.staging) {
		return fmt.Errorf("%w: status register of offset %d", ErrOutOfRange, off)
	}
	statusWord(v.Staging(), off).Store(n)
	v.wake()
	return nil
}

// statusWord returns the status register of a cut-through message at off
// in staging (checked: 4 <= off <= len, off%4 == 0).
func statusWord(staging []byte, off uint32) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&staging[off-4]))
}

// CountDone counts a message of the request send queue done with: the
// engine reads nothing of it any more (a short or medium message sent, a
// bulk message acknowledged whole or returned). View.Done reads the count.
func (m *Memory) CountDone() { m.done.Add(1) }

// Done returns how many messages of the request send queue the engine is
// done with, counting from 0 in the order they were sent (a free-running
// uint32): the bytes of the p-th are the application's again once
// int32(Done()-p) > 0. The engine serves a queue's messages one after the
// other, so they are done in order.
func (v *View) Done() uint32 {
	if v.mem == nil {
		return 0
	}
	return v.done.Load()
}

// Published returns how many bytes of the cut-through bulk message d (taken
// and checked) its application has written: its status register, at most
// d.Length.
func (m *Memory) Published(d *Descriptor) uint32 {
	return min(statusWord(m.Staging(), d.Offset).Load(), d.Length)
}

// Progress returns the two counters of queue q: for a send queue, the
// descriptors the application has sent and those the engine has taken;
// for a receive queue, those the engine has put and those the application
// has taken. They are free-running uint32s: the descriptor that was the
// p-th put into q (counting from 0) has been taken once int32(taken-p) > 0.
// The engine copies a medium message's bytes when it takes its descriptor,
// so the application may reuse them from then on (a bulk message's bytes it
// reads until the message is done).
func (v *View) Progress(q Queue) (put, taken uint32) {
	if v.mem == nil || q >= numQueues {
		return 0, 0
	}
	r := &v.rings[q]
	if q.isSend() {
		return r.own, r.peerIdx.Load()
	}
	return r.peerIdx.Load(), r.own
}

// Receive takes the next descriptor from receive queue q into d; ok is
// false when the queue is empty. The entry and, for a medium message, its
// receive-area slot go back to the engine at once, which may reuse them:
// take medium messages with Peek and Release instead.
func (v *View) Receive(q Queue, d *Descriptor) (ok bool, err error) {
	if err := v.checkReceive(q); err != nil {
		return false, err
	}
	return v.rings[q].consume(d)
}

// Peek copies the next descriptor of receive queue q into d without taking
// it off the queue; ok is false when the queue is empty. The entry, and the
// receive-area slot of the medium message it names, stay the
// application's until Release: a medium message is read in place (Data)
// between the two. Peek again returns the same descriptor.
func (v *View) Peek(q Queue, d *Descriptor) (ok bool, err error) {
	if err := v.checkReceive(q); err != nil {
		return false, err
	}
	return v.rings[q].peek(d)
}

// Release takes the descriptor that Peek returned off receive queue q and
// gives its entry and receive-area slot back to the engine. It returns
// ErrQueueEmpty when there is none.
func (v *View) Release(q Queue) error {
	if err := v.checkReceive(q); err != nil {
		return err
	}
	r := &v.rings[q]
	if n, err := r.available(); err != nil || n == 0 {
		if err == nil {
			err = ErrQueueEmpty
		}
		return err
	}
	r.release()
	return nil
}

func (v *View) checkReceive(q Queue) error {
	if v.mem == nil {
		return ErrClosed
	}
	if q.isSend() || q >= numQueues {
		return ErrWrongQueue
	}
	return nil
}

// Data returns the bytes that d, taken from a receive queue, names: for a
// medium message its bytes in the receive area, valid until the descriptor
// is released (take it with Peek); for a bulk message the region of the
// staging area the engine stored it in; for a short message nil. A returned
// medium message's bytes are in the receive area too (the engine carries
// them back); a returned bulk message names the region of the staging area
// it was sent from. The slice aliases the shared memory. d is checked, not
// trusted: Data returns ErrOutOfRange when it names bytes outside the area.
func (v *View) Data(d *Descriptor) ([]byte, error) {
	if v.mem == nil {
		return nil, ErrClosed
	}
	var area []byte
	switch d.Class &^ ClassReturned {
	case ClassShort:
		return nil, nil
	case ClassMedium:
		if d.Length > MaxMedium {
			return nil, fmt.Errorf("%w: a medium message of %d bytes", ErrOutOfRange, d.Length)
		}
		area = v.mem[v.l.recvOff : v.l.recvOff+v.l.recvSize]
	case ClassBulk:
		area = v.Staging()
	default:
		return nil, fmt.Errorf("%w: class %d carries no bytes", ErrOutOfRange, d.Class)
	}
	end := uint64(d.Offset) + uint64(d.Length)
	if end > uint64(len(area)) {
		return nil, fmt.Errorf("%w: %d bytes at offset %d of an area of %d", ErrOutOfRange, d.Length, d.Offset, len(area))
	}
	return area[d.Offset:end:end], nil
}

// Ready reports which receive queues hold a descriptor. A corrupt producer
// index counts as one, so that Receive gets to report it.
func (v *View) Ready() Events {
	if v.mem == nil {
		return 0
	}
	var ev Events
	for _, q := range [...]Queue{RequestReceive, ReplyReceive} {
		if n, err := v.rings[q].available(); n > 0 || err != nil {
			ev |= q.event()
		}
	}
	return ev
}

// Arm prepares to block until a receive queue of ev is not empty. It
// stores ev into the armed word, then looks at those queues: if one holds
// a descriptor, Arm clears the word and returns their events, and the
// caller must not block (it has work); otherwise it returns 0, and the
// caller may block on its notification (the eventfd that the daemon's
// notify function writes: Memory.SetNotify), which comes once the
// engine puts a descriptor into one of them. The engine clears the word
// when it notifies, so every block needs an Arm before it. A notification
// may be spurious (nothing new is there): the caller arms again. Arm(0)
// disarms. On a closed view Arm returns ev, so that the caller goes on to
// Receive and its ErrClosed. Memory.signal explains why no
// wake-up is lost.
func (v *View) Arm(ev Events) (ready Events) {
	ev &= allEvents
	if v.mem == nil {
		return ev
	}
	v.armed.Store(uint32(ev))
	if ev == 0 {
		return 0
	}
	if ready = v.Ready() & ev; ready != 0 {
		v.armed.Store(0)
	}
	return ready
}

// ErrConfig: an endpoint's configuration is invalid (NewMemory). It is
// the firmware's one configuration error (nicfw.ErrConfig).
var ErrConfig = fwerr.ErrConfig

// MemorySize returns the bytes of memory an endpoint of cfg takes, or the
// error NewMemory would return for cfg.
func MemorySize(cfg Config) (int64, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return 0, err
	}
	return int64(layoutFor(c).total), nil
}
