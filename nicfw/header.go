package nicfw

import "encoding/binary"

// The transport header at the start of every AAL5 SDU (see the package
// documentation for the table):
//
//	 0      1      2             4                            12           14           16
//	+------+------+-------------+----------------------------+------------+------------+---------
//	| type | chan |  sequence   |         timestamp          |   length   |  reserved  | payload
//	+------+------+-------------+----------------------------+------------+------------+---------
const (
	headerLen = 16

	offType   = 0
	offChan   = 1
	offSeq    = 2
	offStamp  = 4
	offLength = 12
)

// Frame types.
const (
	typeData uint8 = 1
	typeAck  uint8 = 2
	typeNack uint8 = 3
)

// header is a view of a transport header. Call valid before the accessors.
type header []byte

func (h header) typ() uint8        { return h[offType] }
func (h header) channel() int      { return int(h[offChan]) }
func (h header) seq() uint16       { return binary.BigEndian.Uint16(h[offSeq:]) }
func (h header) stamp() uint64     { return binary.BigEndian.Uint64(h[offStamp:]) }
func (h header) length() int       { return int(binary.BigEndian.Uint16(h[offLength:])) }
func (h header) setStamp(s uint64) { binary.BigEndian.PutUint64(h[offStamp:], s) }

// put writes a header with the given fields (reserved bytes zero).
func (h header) put(typ uint8, ch int, seq uint16, stamp uint64, length int) {
	h[offType] = typ
	h[offChan] = uint8(ch)
	binary.BigEndian.PutUint16(h[offSeq:], seq)
	binary.BigEndian.PutUint64(h[offStamp:], stamp)
	binary.BigEndian.PutUint16(h[offLength:], uint16(length))
	h[14], h[15] = 0, 0
}

// valid reports whether sdu holds a well-formed header for a transport
// with the given number of channels, with exactly the announced payload
// behind it.
func valid(sdu []byte, channels int) bool {
	if len(sdu) < headerLen {
		return false
	}
	h := header(sdu)
	switch h.typ() {
	case typeData:
	case typeAck, typeNack:
		if h.length() != 0 {
			return false
		}
	default:
		return false
	}
	return h.channel() < channels && h.length() == len(sdu)-headerLen
}
