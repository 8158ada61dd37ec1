package endpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"
)

// Descriptors: the queues, classes and flags of a message's descriptor,
// its encoding in a ring slot, and the refusals a descriptor meets.

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
// In a receive queue Incarnation numbers the incarnation of the host the
// message came from, as this host's transport knows it
// (transport.Peer.Incarnation): it changes (within 1 to 255) when that
// host restarts, and is 1 for this host's own messages and 0 for a
// message returned by this host's engine. A
// layer that matches answers to its requests by their order (AM-II's
// replies name no request) tells by it that a host restarted, so that its
// requests to the old incarnation will never be answered. Send queues
// ignore it.
//
// In the shared memory a descriptor takes 96 bytes, little-endian:
//
//	offset  size  field
//	0       1     class
//	1       1     number of arguments
//	2       1     flags
//	3       1     incarnation: in a receive queue, the sending host's
//	              (Incarnation); ignored in a send queue
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
	Incarnation  uint8
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

// descWhole reports whether Descriptor's memory is its shared-memory
// layout (above): on a little-endian machine whose compiler lays the
// struct out in order, which is checked once. encode and decode then copy
// the 96 bytes whole, where field by field they took about 90 and 70
// instructions: every bit pattern is a valid Descriptor, so a decoded one
// is checked (Memory.check) as before.
var descWhole = func() bool {
	var d Descriptor
	return binary.NativeEndian.Uint16([]byte{1, 0}) == 1 && unsafe.Sizeof(d) == descSize && unsafe.Offsetof(d.Class) == 0 && unsafe.Offsetof(d.NArgs) == 1 &&
		unsafe.Offsetof(d.Flags) == 2 && unsafe.Offsetof(d.Incarnation) == 3 && unsafe.Offsetof(d.Dest) == 4 && unsafe.Offsetof(d.Handler) == 8 &&
		unsafe.Offsetof(d.Offset) == 12 && unsafe.Offsetof(d.Length) == 16 && unsafe.Offsetof(d.RemoteOffset) == 20 &&
		unsafe.Offsetof(d.Tag) == 24 && unsafe.Offsetof(d.Args) == 32
}()

// wholeSlot returns b, a descriptor's 96 bytes, as a *Descriptor when
// descWhole holds and b is aligned for one (the rings' slots are), else
// nil.
func wholeSlot(b []byte) *Descriptor {
	if !descWhole || len(b) < descSize || uintptr(unsafe.Pointer(&b[0]))%unsafe.Alignof(Descriptor{}) != 0 {
		return nil
	}
	return (*Descriptor)(unsafe.Pointer(&b[0]))
}

func (d *Descriptor) encode(b []byte) {
	if w := wholeSlot(b); w != nil {
		*w = *d
		return
	}
	_ = b[descSize-1]
	b[0], b[1], b[2], b[3] = byte(d.Class), d.NArgs, byte(d.Flags), d.Incarnation
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
	if w := wholeSlot(b); w != nil {
		*d = *w
		return
	}
	_ = b[descSize-1]
	d.Class, d.NArgs, d.Flags, d.Incarnation = Class(b[0]), b[1], Flag(b[2]), b[3]
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
