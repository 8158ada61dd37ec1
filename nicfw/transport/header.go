package transport

import "encoding/binary"

// The transport header at the start of every AAL5 SDU (see the package
// documentation for the table), followed by the piggy-backed
// acknowledgements and the payload:
//
//	 0      1      2         4         8        10        12          16          20           20+4n
//	+------+------+---------+---------+--------+---------+-----------+-----------+------------+---------
//	| type | chan |   seq   |  stamp  | length | n acks  | src epoch | dst epoch | acks, 4n   | payload
//	+------+------+---------+---------+--------+---------+-----------+-----------+------------+---------
//
// An acknowledgement entry is four bytes: channel, zero, sequence number
// (big-endian). A RESET frame's payload is four bytes: the destination
// epoch its receiver is to write from now on (epochs.go); its sequence
// number field holds flags (resetAnswer), its channel and stamp echo the
// frame it answers, if any.
const (
	headerLen   = 20
	ackEntryLen = 4
	resetLen    = 4

	offType   = 0
	offChan   = 1
	offSeq    = 2
	offStamp  = 4
	offLength = 8
	offAcks   = 10
	offSrc    = 12
	offDst    = 16
)

// Frame types.
const (
	typeData uint8 = 1
	typeAck  uint8 = 2
	typeNack uint8 = 3
	// typeReset answers a frame whose destination epoch is not the one
	// its receiver asks of the sender (an earlier incarnation's, or a
	// destination epoch since renewed), and a claim of a new epoch: it
	// carries the destination epoch to write from now on (epochs.go).
	// With resetAnswer it also asks for one: the handshake.
	typeReset uint8 = 4
)

// resetAnswer is the flag a RESET carries in its sequence number field
// (a RESET has no message of its own; its channel and stamp echo the
// frame it answers) when its sender holds no destination epoch for the
// receiver's current incarnation yet: its messages wait for one
// (epochs.go, "Handshake"), so the receiver answers with a RESET that
// carries its own.
const resetAnswer uint16 = 1

// header is a transport header, in place: a fixed-size array, so that
// its fields are read and written without bounds checks. Call valid
// before the accessors of one received.
type header [headerLen]byte

func (h *header) typ() uint8        { return h[offType] }
func (h *header) channel() int      { return int(h[offChan]) }
func (h *header) seq() uint16       { return binary.BigEndian.Uint16(h[offSeq:]) }
func (h *header) stamp() uint32     { return binary.BigEndian.Uint32(h[offStamp:]) }
func (h *header) length() int       { return int(binary.BigEndian.Uint16(h[offLength:])) }
func (h *header) acks() int         { return int(binary.BigEndian.Uint16(h[offAcks:])) }
func (h *header) src() uint32       { return binary.BigEndian.Uint32(h[offSrc:]) }
func (h *header) dst() uint32       { return binary.BigEndian.Uint32(h[offDst:]) }
func (h *header) setStamp(s uint32) { binary.BigEndian.PutUint32(h[offStamp:], s) }
func (h *header) setSeq(s uint16)   { binary.BigEndian.PutUint16(h[offSeq:], s) }
func (h *header) setAcks(n int)     { binary.BigEndian.PutUint16(h[offAcks:], uint16(n)) }
func (h *header) setDst(e uint32)   { binary.BigEndian.PutUint32(h[offDst:], e) }
func (h *header) setEpochs(src, dst uint32) {
	binary.BigEndian.PutUint32(h[offSrc:], src)
	binary.BigEndian.PutUint32(h[offDst:], dst)
}

// put writes a header with the given fields and no acknowledgements.
func (h *header) put(typ uint8, ch int, seq uint16, stamp uint32, length int, src, dst uint32) {
	h[offType] = typ
	h[offChan] = uint8(ch)
	binary.BigEndian.PutUint16(h[offSeq:], seq)
	binary.BigEndian.PutUint32(h[offStamp:], stamp)
	binary.BigEndian.PutUint16(h[offLength:], uint16(length))
	h[offAcks], h[offAcks+1] = 0, 0
	h.setEpochs(src, dst)
}

// putAck writes acknowledgement entry i of the entries in b.
func putAck(b []byte, i, ch int, seq uint16) {
	e := b[i*ackEntryLen:]
	e[0], e[1] = uint8(ch), 0
	binary.BigEndian.PutUint16(e[2:], seq)
}

// ackAt reads acknowledgement entry i of the entries in b.
func ackAt(b []byte, i int) (ch int, seq uint16) {
	e := b[i*ackEntryLen:]
	return int(e[0]), binary.BigEndian.Uint16(e[2:])
}

// valid reports whether sdu holds a well-formed header for a transport
// with the given number of channels, with exactly the announced
// acknowledgements and payload behind it, every entry naming a channel in
// range, and a source epoch (never 0); a RESET's payload is a destination
// epoch (never 0).
func valid(sdu []byte, channels int) bool {
	if len(sdu) < headerLen {
		return false
	}
	h := (*header)(sdu)
	switch h.typ() {
	case typeData:
	case typeAck, typeNack:
		if h.length() != 0 {
			return false
		}
	case typeReset:
		// A RESET answers no message of its peer's: it carries no
		// acknowledgements (so one taken on its epochs alone, checkEpochs,
		// cannot acknowledge anything).
		if h.length() != resetLen || h.acks() != 0 || binary.BigEndian.Uint32(sdu[len(sdu)-resetLen:]) == 0 {
			return false
		}
	default:
		return false
	}
	n := h.acks()
	if h.src() == 0 || h.channel() >= channels || headerLen+ackEntryLen*n+h.length() != len(sdu) {
		return false
	}
	entries := sdu[headerLen:]
	for i := range n {
		if ch, _ := ackAt(entries, i); ch >= channels {
			return false
		}
	}
	return true
}
