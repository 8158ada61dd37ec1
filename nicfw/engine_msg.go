package nicfw

import (
	"encoding/binary"
	"math"

	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// Message classes. A short message carries its arguments only. A medium
// message (up to MaxMedium bytes) is built when its descriptor is taken:
// the engine copies its bytes out of the staging area then, once, so the
// application may reuse them as soon as the descriptor is taken
// (endpoint.View.Progress). The receiving engine copies them into the
// receive-area slot of the receive queue entry it puts, and the
// descriptor's Offset and Length name them there. A medium message that
// does not fit in the transport's payload (MaxPayload) is returned with
// ReasonTooLarge. A bulk message (any length inside the staging area)
// travels in chunks as large as the payload allows, up to Window of them
// in flight at once on as many channels, so they may arrive in any order.
// The receiving engine writes each at RemoteOffset plus its offset into
// the receiving endpoint's staging area, after checking the whole region
// against the part of it the receiver exposes
// (endpoint.View.SetStoreRegion; ReasonRange), and counts the bytes; the
// chunk that completes the count puts the descriptor (Offset =
// RemoteOffset, Length = the whole length, handler and arguments as sent).
// A pooled bulk message (RemoteOffset endpoint.PoolOffset; pool.go) names
// no place: the receiving engine finds it a block of the endpoint's
// receive pool (endpoint.View.SetPool) as its first chunk arrives, refuses
// it for now (NACK; counted in EngineStats.PoolFull) while no block is
// free, and takes the block back once the application has released the
// message's receive queue entry: GRIM's optimistic flow control, one pool
// shared by every sender, nothing reserved per peer. The sender sends a
// pooled message's first chunk alone and the rest once it is acknowledged,
// and keeps one channel to the host free of such probes while a message
// admitted there has chunks to send, so that a full pool delays messages
// and never wedges them (pool.go).
// A receiver keeps, per sending endpoint, the bulk message in progress (its
// number and the bytes stored), begun by the first of its chunks to
// arrive: a chunk of it for another endpoint than that one's (the endpoint
// was closed and replaced) is returned with ReasonIncomplete. A sender
// whose receiver's incarnation (the transport's epoch) changes while a
// bulk message is under way returns it with ReasonRestarted (bulk.go). A bulk message is returned once, whole: the receiver
// returns its first failing chunk and drops the rest; the sender, told,
// sends no more of it, and does not return it itself again.
//
//
// The engine's messages travel as the transport's payloads: a header
// (queue, class, argument count, return reason, endpoints, handler, index,
// tag), the arguments, and for medium and bulk messages an extension and
// the data; docs/wire.md has the table, and that of a module's control
// message. A short message of up to four arguments goes in a compact form
// of 15 bytes and its arguments (engine_msg.go), which the transport
// carries in one cell (two arguments) or two.

// The engine's message, the transport payload of every message the engine
// sends, big-endian (the message classes above): a 24-byte
// header, the arguments, and for medium and bulk messages a 24-byte
// extension followed by the data.
const (
	msgHeaderLen = 24
	msgExtLen    = 24
	msgMaxLen    = msgHeaderLen + 8*endpoint.MaxShortArgs     // the longest short message
	msgMediumMax = msgMaxLen + msgExtLen + endpoint.MaxMedium // the longest medium message
)

// msg is an engine message, decoded.
type msg struct {
	kind     endpoint.Queue // RequestSend or ReplySend: the queue it was sent from
	class    endpoint.Class
	nargs    uint8
	reason   endpoint.Reason // 0, or why this is a return
	dst, src EndpointID
	handler  uint32
	index    uint32 // the destination's index in the sender's table
	tag      uint64
	args     [endpoint.MaxShortArgs]uint64

	// The extension, medium and bulk only.
	offset uint32 // the message's offset in its sender's staging area
	length uint32 // the message's length (bulk: all its chunks')
	remote uint32 // bulk: the offset in the receiver's staging area
	id     uint32 // bulk: the message's number at its sending endpoint
	chunk  uint32 // bulk: the offset of this chunk's data in the message
	data   []byte // the bytes carried: a medium message's, a bulk chunk's
}

// The compact form of a short message of at most four arguments to a
// handler below 2^16, not a return: what the transport carries in a
// compact cell (two arguments at most: transport.CompactPayload bytes)
// or two (transport.CompactMax). It leaves out the reason (none), the
// class (short) and the index, which a receiver that returns the message
// cannot name: the return says NoIndex, and the sender looks the index up
// by the returning endpoint's name (accept). Big-endian:
//
//	 0                         1      3      5         7     15
//	+-------------------------+------+------+---------+-----+---------
//	| 1, 000, nargs(3), kind  | dst  | src  | handler | tag | args, 8n
//	+-------------------------+------+------+---------+-----+---------
const (
	msgCompact       = 0x80 // the first byte's top bit: the compact form
	msgCompactLen    = 15
	msgCompactArgs   = 4
	msgCompactMaxLen = msgCompactLen + 8*msgCompactArgs
)

// compact reports whether m is encoded in the compact form.
func (m *msg) compact() bool {
	return m.class == endpoint.ClassShort && m.reason == 0 && compactable(m.kind, m.nargs, m.handler)
}

// compactable reports whether a short message of kind, not a return, with
// nargs arguments to handler fits the compact form.
func compactable(kind endpoint.Queue, nargs uint8, handler uint32) bool {
	return nargs <= msgCompactArgs && handler <= math.MaxUint16 && (kind == endpoint.RequestSend || kind == endpoint.ReplySend)
}

// A compact message fits in the transport's compact form (two cells at
// most), one of two arguments in one cell.
const (
	_ = uint(transport.CompactMax - msgCompactMaxLen)
	_ = uint(transport.CompactPayload - msgCompactLen - 16)
)

// hasExt reports whether m's class carries the extension.
func (m *msg) hasExt() bool { return m.class == endpoint.ClassMedium || m.class == endpoint.ClassBulk }

// size returns the length of m encoded.
func (m *msg) size() int {
	if m.compact() {
		return msgCompactLen + 8*int(m.nargs)
	}
	n := msgHeaderLen + 8*int(m.nargs)
	if m.hasExt() {
		n += msgExtLen + len(m.data)
	}
	return n
}

// encodeMsg writes m into b, which has room for m.size() bytes, and returns
// its length.
func encodeMsg(b []byte, m *msg) int {
	if m.compact() {
		return putCompactMsg(b, m.kind, m.dst, m.src, m.handler, m.tag, m.args[:m.nargs])
	}
	n := putMsgHeader(b, m.kind, m.class, m.reason, m.dst, m.src, m.handler, m.index, m.tag, m.args[:m.nargs])
	if !m.hasExt() {
		return n
	}
	x := b[n : n+msgExtLen]
	binary.BigEndian.PutUint32(x[0:], m.offset)
	binary.BigEndian.PutUint32(x[4:], m.length)
	binary.BigEndian.PutUint32(x[8:], m.remote)
	binary.BigEndian.PutUint32(x[12:], m.id)
	binary.BigEndian.PutUint32(x[16:], m.chunk)
	binary.BigEndian.PutUint32(x[20:], uint32(len(m.data)))
	n += msgExtLen
	return n + copy(b[n:], m.data)
}

// putCompactMsg writes the compact form of a short message of kind,
// from endpoint src to dst's handler (below 2^16), with tag and args (at
// most msgCompactArgs), and returns its length.
func putCompactMsg(b []byte, kind endpoint.Queue, dst, src EndpointID, handler uint32, tag uint64, args []uint64) int {
	x := (*[msgCompactLen]byte)(b) // checked once, and once for the arguments
	x[0] = msgCompact | uint8(len(args))<<1 | byte(kind)
	binary.BigEndian.PutUint16(x[1:], uint16(dst))
	binary.BigEndian.PutUint16(x[3:], uint16(src))
	binary.BigEndian.PutUint16(x[5:], uint16(handler))
	binary.BigEndian.PutUint64(x[7:], tag)
	switch len(args) {
	case 2:
		a := (*[msgCompactLen + 16]byte)(b)
		binary.BigEndian.PutUint64(a[msgCompactLen:], args[0])
		binary.BigEndian.PutUint64(a[msgCompactLen+8:], args[1])
	case 1:
		binary.BigEndian.PutUint64((*[msgCompactLen + 8]byte)(b)[msgCompactLen:], args[0])
	case 4: // two cells
		a, v := (*[msgCompactLen + 32]byte)(b), (*[4]uint64)(args)
		binary.BigEndian.PutUint64(a[msgCompactLen:], v[0])
		binary.BigEndian.PutUint64(a[msgCompactLen+8:], v[1])
		binary.BigEndian.PutUint64(a[msgCompactLen+16:], v[2])
		binary.BigEndian.PutUint64(a[msgCompactLen+24:], v[3])
	case 3:
		a, v := (*[msgCompactLen + 24]byte)(b), (*[3]uint64)(args)
		binary.BigEndian.PutUint64(a[msgCompactLen:], v[0])
		binary.BigEndian.PutUint64(a[msgCompactLen+8:], v[1])
		binary.BigEndian.PutUint64(a[msgCompactLen+16:], v[2])
	}
	return msgCompactLen + 8*len(args)
}

// putMsgHeader writes the header of a message in the long form and its
// arguments into b, and returns their length.
func putMsgHeader(b []byte, kind endpoint.Queue, class endpoint.Class, reason endpoint.Reason, dst, src EndpointID,
	handler, index uint32, tag uint64, args []uint64) int {
	x := (*[msgHeaderLen]byte)(b) // checked once
	x[0], x[1], x[2], x[3] = byte(kind), byte(class), uint8(len(args)), byte(reason)
	binary.BigEndian.PutUint16(x[4:], uint16(dst))
	binary.BigEndian.PutUint16(x[6:], uint16(src))
	binary.BigEndian.PutUint32(x[8:], handler)
	binary.BigEndian.PutUint32(x[12:], index)
	binary.BigEndian.PutUint64(x[16:], tag)
	w := b[msgHeaderLen:]
	for _, a := range args {
		binary.BigEndian.PutUint64(w, a)
		w = w[8:]
	}
	return msgHeaderLen + 8*len(args)
}

// decodeMsg reads and checks a message. m.data aliases b.
func decodeMsg(b []byte) (m msg, ok bool) {
	ok = decodeMsgInto(b, &m)
	return m, ok
}

// decodeMsgInto is decodeMsg into m, which it overwrites: the receive
// path's, where a message returned is copied on each return.
func decodeMsgInto(b []byte, m *msg) bool {
	if len(b) > 0 && b[0]&msgCompact != 0 {
		return decodeCompact(b, m)
	}
	if len(b) < msgHeaderLen {
		return false
	}
	*m = msg{
		kind: endpoint.Queue(b[0]), class: endpoint.Class(b[1]), nargs: b[2], reason: endpoint.Reason(b[3]),
		dst:     EndpointID(binary.BigEndian.Uint16(b[4:])),
		src:     EndpointID(binary.BigEndian.Uint16(b[6:])),
		handler: binary.BigEndian.Uint32(b[8:]),
		index:   binary.BigEndian.Uint32(b[12:]),
		tag:     binary.BigEndian.Uint64(b[16:]),
	}
	if m.kind != endpoint.RequestSend && m.kind != endpoint.ReplySend || m.nargs > endpoint.MaxShortArgs {
		return false
	}
	n := msgHeaderLen + 8*int(m.nargs)
	switch m.class {
	case endpoint.ClassShort:
		if len(b) != n || m.compact() {
			return false // one encoding per message: the compact form where it applies
		}
	case endpoint.ClassMedium, endpoint.ClassBulk:
		if len(b) < n+msgExtLen {
			return false
		}
		x := b[n : n+msgExtLen]
		m.offset = binary.BigEndian.Uint32(x[0:])
		m.length = binary.BigEndian.Uint32(x[4:])
		m.remote = binary.BigEndian.Uint32(x[8:])
		m.id = binary.BigEndian.Uint32(x[12:])
		m.chunk = binary.BigEndian.Uint32(x[16:])
		c := binary.BigEndian.Uint32(x[20:])
		if uint64(len(b)-n-msgExtLen) != uint64(c) || m.length == 0 || uint64(m.chunk)+uint64(c) > uint64(m.length) {
			return false
		}
		m.data = b[n+msgExtLen:]
		if m.class == endpoint.ClassMedium {
			// A medium message carries all its bytes, a return too.
			if m.length > endpoint.MaxMedium || c != m.length {
				return false
			}
		} else if (m.reason == 0) != (c > 0) {
			// A bulk chunk carries data; a bulk return carries none.
			return false
		}
	default:
		return false
	}
	for i := range int(m.nargs) {
		m.args[i] = binary.BigEndian.Uint64(b[msgHeaderLen+8*i:])
	}
	return true
}

// decodeCompact reads and checks a message in the compact form into m,
// which it overwrites (readCompact reads it).
func decodeCompact(b []byte, m *msg) bool {
	var d endpoint.Descriptor
	kind, dst, src, ok := readCompact(b, &d)
	*m = msg{kind: kind, class: endpoint.ClassShort, nargs: d.NArgs, dst: dst, src: src,
		handler: d.Handler, index: endpoint.NoIndex, tag: d.Tag, args: d.Args}
	return ok
}

// chunkRoom returns how many data bytes a bulk chunk of a message with
// nargs arguments carries in a payload of maxPL bytes (0: none fits).
func chunkRoom(maxPL int, nargs uint8) uint32 {
	room := maxPL - msgHeaderLen - 8*int(nargs) - msgExtLen
	if room < 1 {
		return 0
	}
	return uint32(min(room, math.MaxUint32))
}
