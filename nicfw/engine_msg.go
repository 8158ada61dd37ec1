package nicfw

import (
	"encoding/binary"
	"math"

	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// The engine's message, the transport payload of every message the engine
// sends, big-endian (see the package documentation, "Engine"): a 24-byte
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

// The compact form of a short message of at most two arguments to a
// handler below 2^16, not a return: what the transport carries in one cell
// (transport.CompactPayload bytes at most). It leaves out the reason
// (none), the class (short) and the index, which a receiver that returns
// the message cannot name: the return says NoIndex, and the sender looks
// the index up by the returning endpoint's name (accept). Big-endian:
//
//	 0                          1      3      5         7     15
//	+--------------------------+------+------+---------+-----+---------
//	| 1, 0000, nargs(2), kind  | dst  | src  | handler | tag | args, 8n
//	+--------------------------+------+------+---------+-----+---------
const (
	msgCompact       = 0x80 // the first byte's top bit: the compact form
	msgCompactLen    = 15
	msgCompactArgs   = 2
	msgCompactMaxLen = msgCompactLen + 8*msgCompactArgs
)

// compact reports whether m is encoded in the compact form.
func (m *msg) compact() bool {
	return m.class == endpoint.ClassShort && m.reason == 0 && m.nargs <= msgCompactArgs && m.handler <= math.MaxUint16 &&
		(m.kind == endpoint.RequestSend || m.kind == endpoint.ReplySend)
}

// A compact message fits in a compact cell of the transport.
const _ = uint(transport.CompactPayload - msgCompactMaxLen)

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
		b[0] = msgCompact | m.nargs<<1 | byte(m.kind)
		binary.BigEndian.PutUint16(b[1:], uint16(m.dst))
		binary.BigEndian.PutUint16(b[3:], uint16(m.src))
		binary.BigEndian.PutUint16(b[5:], uint16(m.handler))
		binary.BigEndian.PutUint64(b[7:], m.tag)
		n := msgCompactLen
		for i := range int(m.nargs) {
			binary.BigEndian.PutUint64(b[n:], m.args[i])
			n += 8
		}
		return n
	}
	b[0], b[1], b[2], b[3] = byte(m.kind), byte(m.class), m.nargs, byte(m.reason)
	binary.BigEndian.PutUint16(b[4:], uint16(m.dst))
	binary.BigEndian.PutUint16(b[6:], uint16(m.src))
	binary.BigEndian.PutUint32(b[8:], m.handler)
	binary.BigEndian.PutUint32(b[12:], m.index)
	binary.BigEndian.PutUint64(b[16:], m.tag)
	n := msgHeaderLen
	for i := range int(m.nargs) {
		binary.BigEndian.PutUint64(b[n:], m.args[i])
		n += 8
	}
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

// decodeMsg reads and checks a message. m.data aliases b.
func decodeMsg(b []byte) (m msg, ok bool) {
	if len(b) > 0 && b[0]&msgCompact != 0 {
		return decodeCompact(b)
	}
	if len(b) < msgHeaderLen {
		return m, false
	}
	m = msg{
		kind: endpoint.Queue(b[0]), class: endpoint.Class(b[1]), nargs: b[2], reason: endpoint.Reason(b[3]),
		dst:     EndpointID(binary.BigEndian.Uint16(b[4:])),
		src:     EndpointID(binary.BigEndian.Uint16(b[6:])),
		handler: binary.BigEndian.Uint32(b[8:]),
		index:   binary.BigEndian.Uint32(b[12:]),
		tag:     binary.BigEndian.Uint64(b[16:]),
	}
	if m.kind != endpoint.RequestSend && m.kind != endpoint.ReplySend || m.nargs > endpoint.MaxShortArgs {
		return m, false
	}
	n := msgHeaderLen + 8*int(m.nargs)
	switch m.class {
	case endpoint.ClassShort:
		if len(b) != n || m.compact() {
			return m, false // one encoding per message: the compact form where it applies
		}
	case endpoint.ClassMedium, endpoint.ClassBulk:
		if len(b) < n+msgExtLen {
			return m, false
		}
		x := b[n : n+msgExtLen]
		m.offset = binary.BigEndian.Uint32(x[0:])
		m.length = binary.BigEndian.Uint32(x[4:])
		m.remote = binary.BigEndian.Uint32(x[8:])
		m.id = binary.BigEndian.Uint32(x[12:])
		m.chunk = binary.BigEndian.Uint32(x[16:])
		c := binary.BigEndian.Uint32(x[20:])
		if uint64(len(b)-n-msgExtLen) != uint64(c) || m.length == 0 || uint64(m.chunk)+uint64(c) > uint64(m.length) {
			return m, false
		}
		m.data = b[n+msgExtLen:]
		if m.class == endpoint.ClassMedium {
			// A medium message carries all its bytes, a return too.
			if m.length > endpoint.MaxMedium || c != m.length {
				return m, false
			}
		} else if (m.reason == 0) != (c > 0) {
			// A bulk chunk carries data; a bulk return carries none.
			return m, false
		}
	default:
		return m, false
	}
	for i := range int(m.nargs) {
		m.args[i] = binary.BigEndian.Uint64(b[msgHeaderLen+8*i:])
	}
	return m, true
}

// decodeCompact reads and checks a message in the compact form.
func decodeCompact(b []byte) (m msg, ok bool) {
	if len(b) < msgCompactLen || b[0]&^(msgCompact|0b111) != 0 {
		return m, false
	}
	m = msg{
		kind: endpoint.Queue(b[0] & 1), class: endpoint.ClassShort, nargs: b[0] >> 1 & 0b11,
		dst:     EndpointID(binary.BigEndian.Uint16(b[1:])),
		src:     EndpointID(binary.BigEndian.Uint16(b[3:])),
		handler: uint32(binary.BigEndian.Uint16(b[5:])),
		index:   endpoint.NoIndex,
		tag:     binary.BigEndian.Uint64(b[7:]),
	}
	if m.nargs > msgCompactArgs || len(b) != msgCompactLen+8*int(m.nargs) {
		return m, false
	}
	for i := range int(m.nargs) {
		m.args[i] = binary.BigEndian.Uint64(b[msgCompactLen+8*i:])
	}
	return m, true
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
