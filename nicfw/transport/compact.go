package transport

import (
	"encoding/binary"

	"github.com/xam-project/xam/cells"
)

// Compact messages. A DATA message whose payload is at most
// CompactPayload bytes travels as one ATM cell of its own on the circuit
// VPI/VCI+1 (PTI end of message: it is whole) rather than as an AAL5
// PDU: no AAL5 trailer and no
// reassembly, and room for a short message of two arguments in one cell,
// as SSAM's single-cell messages. The cell's 48 bytes:
//
//	 0      1      2         4         6           10          14       15                    46
//	+------+------+---------+---------+-----------+-----------+--------+---------------------+--------+
//	| type | chan |   seq   | stamp16 | src epoch | dst epoch | length | payload, zero fill  | CRC-10 |
//	+------+------+---------+---------+-----------+-----------+--------+---------------------+--------+
//
// type is typeCompact; stamp16 the low 16 bits of the transmission's
// stamp, which the answers echo (a compact transmission's stamp is kept
// at 16 bits, so that a NACK's echo compares with it as any other); the
// CRC-10 (cells.CRC10, as AAL3/4 and SSAM use it) covers bytes 0-45 and
// leaves the top 6 bits of its two bytes zero. A compact cell carries no
// acknowledgements: those owed to its destination travel in front of it,
// in the same frame, as an ACK PDU of their own (buildCompact). The
// receiver checks the cell (HEC, CRC, type, length, channel) and handles
// it as a DATA PDU with the same fields (receiveCompact).
//
// The acknowledgements owed to the destination travel as a compact ACK
// cell of their own when they fit in one (compactAckMax: the ACK's own
// channel and ten entries), so that request/reply traffic of short
// messages never builds an AAL5 PDU: same header, type typeCompactAck,
// length the number of entries, and each entry three bytes (channel,
// sequence number):
//
//	 0      1      2         4         6           10          14     15                       46
//	+------+------+---------+---------+-----------+-----------+------+------------------------+--------+
//	| type | chan |   seq   | stamp16 | src epoch | dst epoch |  n   | entries, 3n, zero fill | CRC-10 |
//	+------+------+---------+---------+-----------+-----------+------+------------------------+--------+
//
// It stands for the ACK PDU with the same header and entries, and is
// checked (channels, length, CRC) before any of it counts. Flushed
// acknowledgements (flushAcks) go the same way when they fit.
//
// When exactly one acknowledgement is owed to the destination (request
// and reply: each answers the other's predecessor), it rides in the DATA
// cell itself, so the frame is that one cell: type typeCompactAcked, the
// acknowledgement's channel and sequence number where a compact DATA
// cell has its stamp, and the payload's length in the top six bits of the
// trailer, which the CRC-10 covers as AAL3/4's SAR trailer covers its
// length indicator (cells.CRC10Trailer):
//
//	 0      1      2         4        5           7           11          15                    46                48
//	+------+------+---------+--------+-----------+-----------+-----------+---------------------+--------+--------+
//	| type | chan |   seq   | ackch  |  ack seq  | src epoch | dst epoch | payload, zero fill  | length | CRC-10 |
//	+------+------+---------+--------+-----------+-----------+-----------+---------------------+--------+--------+
//
// It stands for the DATA PDU with the same fields and one acknowledgement
// entry, and a stamp of 0: its sender keeps 0 as the transmission's stamp,
// so that a NACK of it, echoing 0, matches. (A NACK of an earlier such
// transmission of the same message matches too; it only moves the
// retransmission a NACK delay later.)
//
// A payload of CompactPayload+1 to CompactMax bytes takes two cells: the
// compact DATA cell (either kind), its length the whole payload's, with
// the first CompactPayload bytes, and right behind it in the same frame a
// continuation cell (typeCompactMore) with the rest, which names the
// first cell's channel and sequence number, and its own CRC-10:
//
//	 0      1      2         4                          46
//	+------+------+---------+--------------------------+--------+
//	| type | chan |   seq   | the rest, zero fill       | CRC-10 |
//	+------+------+---------+--------------------------+--------+
//
// So a short message of four arguments (AM-II's) travels without an AAL5
// PDU too. The receiver takes the two cells as one (compactPair); a first
// cell without its continuation, or a continuation alone, is a bad cell.
const (
	// CompactPayload is the largest payload one compact cell carries.
	CompactPayload = cells.PayloadSize - compactHeaderLen - compactCRCLen
	// CompactMax is the largest payload of a compact message: two cells
	// (the length field of a compact DATA cell with an acknowledgement
	// has six bits).
	CompactMax = 63

	compactHeaderLen = 15
	compactCRCLen    = 2
	compactOffLength = 14
	compactOffCRC    = cells.PayloadSize - compactCRCLen
	compactMoreLen   = 4 // a continuation cell's header
	compactCells     = 2 // the most cells of a compact message
)

// A continuation cell holds the rest of a compact message's payload.
const _ = uint(compactOffCRC - compactMoreLen - (CompactMax - CompactPayload))

// typeCompact is the type byte of a compact DATA cell, typeCompactAck that
// of a compact ACK cell, typeCompactAcked that of a compact DATA cell with
// an acknowledgement. None appears in an AAL5 PDU's header.
const (
	typeCompact      uint8 = 5
	typeCompactAck   uint8 = 6
	typeCompactAcked uint8 = 7
	typeCompactMore  uint8 = 8 // the second cell of a compact message of two
)

// A compact ACK cell's entries (3 bytes each), and the acknowledgements it
// carries in all: its header's and the entries'.
const (
	compactAckEntryLen = 3
	compactAckEntries  = (compactOffCRC - compactHeaderLen) / compactAckEntryLen
	compactAckMax      = compactAckEntries + 1
)

// compactable reports whether a message with payload goes as a compact
// cell.
func (t *Transport) compactable(payload []byte) bool {
	return len(payload) <= CompactMax && !t.cfg.NoCompact
}

// compactCellsOf returns the cells of a compact message of n bytes.
func compactCellsOf(n int) int {
	if n > CompactPayload {
		return 2
	}
	return 1
}

// buildCompact builds, in c's buffer, the one frame of the compact message
// in channel c to p, and returns it, as c.frames. The one acknowledgement
// owed to p, if exactly one is, rides in the message's own cell
// (typeCompactAcked), whose transmission's stamp is 0: the frame of a
// request or a reply, each answering the other's predecessor, is that
// cell alone (compactCell), as is that of a message with none owed, which
// has a fresh stamp. Otherwise (compactAcks) the message has a fresh stamp
// and the acknowledgements owed go in front of its cell.
func (t *Transport) buildCompact(p *Peer, c *sendChannel) ([][]byte, error) {
	h := (*header)(&c.hdr)
	h.setEpochs(p.srcOut, p.dstOut) // dst learnt since the last transmission, perhaps
	var f []byte
	if len(p.ackList) > 1 {
		var err error
		if f, err = t.compactAcks(p, c, h); err != nil {
			return nil, err
		}
	} else {
		f = t.compactCell(p, c, h)
	}
	c.frames = append(c.frames[:0], f)
	t.stats.Compact++
	return c.frames, nil
}

// compactCell builds, in c's frame buffer, the frame of c's compact
// message to p with header h when at most one acknowledgement is owed to
// p: a compact DATA cell that carries it (typeCompactAcked, stamp 0), or
// one with a fresh stamp and none (typeCompact). It returns the frame.
func (t *Transport) compactCell(p *Peer, c *sendChannel, h *header) []byte {
	payload := t.payload(c)
	f := t.compactFrame(p, c, compactCellsOf(len(payload)))
	cell := cells.Cell(f[len(t.eth) : len(t.eth)+cells.CellSize])
	*(*[cells.HeaderSize]byte)(cell) = t.compactHdr
	if len(p.ackList) == 0 {
		c.stamp = t.nextStamp() & 0xffff
		h.setStamp(c.stamp)
		putCompact(cell.Payload(), h, payload)
	} else {
		c.stamp = 0
		h.setStamp(0)
		t.stats.AcksPiggybacked++
		ch := p.ackList[0]
		putCompactAcked(cell.Payload(), h, payload, ch, p.ackSeq[ch])
		p.ackOn[ch] = false
		t.dropAcks(p, 1)
	}
	if len(payload) > CompactPayload {
		t.moreCell(f[len(t.eth)+cells.CellSize:], h, payload)
	}
	return f
}

// moreCell writes, at the start of b, the continuation cell of the
// compact message with header h and payload (more than CompactPayload
// bytes).
func (t *Transport) moreCell(b []byte, h *header, payload []byte) {
	cell := cells.Cell(b[:cells.CellSize])
	*(*[cells.HeaderSize]byte)(cell) = t.compactHdr
	putCompactMore(cell.Payload(), h, payload)
}

// putCompactMore writes the 48-byte payload of the continuation cell of
// the compact message with header h and payload (more than
// CompactPayload bytes).
func putCompactMore(b []byte, h *header, payload []byte) {
	x := (*[cells.PayloadSize]byte)(b) // checked once
	x[0], x[1], x[2], x[3] = typeCompactMore, h[offChan], h[offSeq], h[offSeq+1]
	n := copy(x[compactMoreLen:compactOffCRC], payload[CompactPayload:])
	clear(x[compactMoreLen+n : compactOffCRC])
	binary.BigEndian.PutUint16(x[compactOffCRC:], cells.CRC10(x[:compactOffCRC]))
}

// compactAcks is compactCell with several acknowledgements owed to p: the
// message has a fresh stamp, and those owed go in front of its cell, in a
// compact ACK cell when they fit, else as many as the frame has room for
// in an ACK PDU.
func (t *Transport) compactAcks(p *Peer, c *sendChannel, h *header) ([]byte, error) {
	c.stamp = t.nextStamp() & 0xffff
	h.setStamp(c.stamp)
	var ackSDU []byte
	ackCells, ackCompact := 0, 0
	switch n := len(p.ackList); {
	case n > 0 && n <= compactAckMax:
		ackCells, ackCompact = 1, n
		t.stats.AcksPiggybacked += uint64(n)
	case n > 0:
		n = min(n, t.ackCompactMax)
		ackSDU = t.ackPDU(p, n)
		ackCells = cells.CellCount(len(ackSDU))
		t.stats.AcksPiggybacked += uint64(n)
	}
	payload := t.payload(c)
	f := t.compactFrame(p, c, ackCells+compactCellsOf(len(payload)))
	at := len(t.eth)
	switch {
	case ackCompact > 0:
		t.putCompactAck(cells.Cell(f[at:at+cells.CellSize]), p, ackCompact)
		at += cells.CellSize
	case ackSDU != nil:
		if _, err := t.seg.Put(f[at:], ackSDU); err != nil {
			return nil, err
		}
		at += ackCells * cells.CellSize
	}
	cell := cells.Cell(f[at : at+cells.CellSize])
	*(*[cells.HeaderSize]byte)(cell) = t.compactHdr
	putCompact(cell.Payload(), h, payload)
	if len(payload) > CompactPayload {
		t.moreCell(f[at+cells.CellSize:], h, payload)
	}
	return f, nil
}

// compactFrame returns c's frame buffer for a frame of n cells (a compact
// message's, and acknowledgements before them), its Ethernet and frame
// headers written.
func (t *Transport) compactFrame(p *Peer, c *sendChannel, n int) []byte {
	total := len(t.eth) + n*cells.CellSize + t.trail
	if cap(c.frameBuf) < total {
		c.frameBuf = make([]byte, total, max(total, 2*cap(c.frameBuf)))
	}
	f := c.frameBuf[:total]
	t.putHeaders(f, p, n, cells.FlagStart)
	return f
}

// putCompact writes the 48-byte payload of the compact cell that stands
// for the DATA PDU with header h (its 16-bit stamp) and payload (at most
// CompactPayload bytes).
func putCompact(b []byte, h *header, payload []byte) {
	x := (*[cells.PayloadSize]byte)(b) // checked once
	x[0], x[1] = typeCompact, h[offChan]
	x[2], x[3] = h[offSeq], h[offSeq+1]
	binary.BigEndian.PutUint16(x[4:], uint16(h.stamp()))
	copy(x[6:14], h[offSrc:offDst+4])
	n := copy(x[compactHeaderLen:compactOffCRC], payload)
	x[compactOffLength] = uint8(len(payload)) // more than n: a continuation cell follows
	clear(x[compactHeaderLen+n : compactOffCRC])
	binary.BigEndian.PutUint16(x[compactOffCRC:], cells.CRC10(x[:compactOffCRC]))
}

// putCompactAcked writes the 48-byte payload of the compact cell that
// stands for the DATA PDU with header h (its stamp is not sent: 0),
// payload (at most CompactPayload bytes) and one acknowledgement entry,
// channel ch and sequence number seq.
func putCompactAcked(b []byte, h *header, payload []byte, ch uint8, seq uint16) {
	x := (*[cells.PayloadSize]byte)(b) // checked once
	x[0], x[1] = typeCompactAcked, h[offChan]
	x[2], x[3] = h[offSeq], h[offSeq+1]
	x[4] = ch
	binary.BigEndian.PutUint16(x[5:], seq)
	copy(x[7:15], h[offSrc:offDst+4])
	n := copy(x[compactHeaderLen:compactOffCRC], payload)
	clear(x[compactHeaderLen+n : compactOffCRC])
	l := uint8(len(payload)) // more than n: a continuation cell follows
	binary.BigEndian.PutUint16(x[compactOffCRC:], uint16(l)<<10|cells.CRC10Trailer(x[:compactOffCRC], l))
}

// putCompactAck writes into cell the compact ACK cell that carries the
// first n (1 to compactAckMax) acknowledgements owed to p, and forgets
// them: its header answers the first (echoing the low 16 bits of its
// stamp), its entries the others.
func (t *Transport) putCompactAck(cell cells.Cell, p *Peer, n int) {
	*(*[cells.HeaderSize]byte)(cell) = t.compactHdr
	b := cell.Payload()
	ch0 := p.ackList[0]
	b[0], b[1] = typeCompactAck, ch0
	binary.BigEndian.PutUint16(b[2:], p.ackSeq[ch0])
	binary.BigEndian.PutUint16(b[4:], uint16(p.ackStamp[ch0]))
	binary.BigEndian.PutUint32(b[6:], p.srcOut)
	binary.BigEndian.PutUint32(b[10:], p.dstOut)
	b[compactOffLength] = uint8(n - 1)
	p.ackOn[ch0] = false
	e := b[compactHeaderLen:compactOffCRC]
	for j, ch := range p.ackList[1:n] {
		e[j*compactAckEntryLen] = ch
		binary.BigEndian.PutUint16(e[j*compactAckEntryLen+1:], p.ackSeq[ch])
		p.ackOn[ch] = false
	}
	clear(e[(n-1)*compactAckEntryLen:])
	binary.BigEndian.PutUint16(b[compactOffCRC:], cells.CRC10(b[:compactOffCRC]))
	t.dropAcks(p, n)
}

// receiveCompact handles the compact cell at the start of cs, the rest of
// a frame from p: checked, it is dispatched as the DATA or ACK PDU it
// stands for, with its continuation cell (the next) if it has one. It
// returns the cells it took (1, or 2: the continuation too).
func (t *Transport) receiveCompact(p *Peer, cs []byte) (used int, ok bool) {
	cell := cells.Cell(cs[:cells.CellSize])
	var h header
	switch cell.Payload()[0] {
	case typeCompactAck:
		var acks [compactAckEntries * ackEntryLen]byte
		n, ok := decodeCompactAck(cell, t.vc.VPI, len(p.send), &h, acks[:])
		if ok {
			t.dispatch(p, &h, acks[:n*ackEntryLen], nil)
		}
		return 1, ok
	case typeCompactAcked:
		if binary.BigEndian.Uint16(cell.Payload()[compactOffCRC:])>>10 <= CompactPayload {
			if ok, taken := t.laneAcked(p, cell, nil); taken {
				return 1, ok
			}
		}
		var ack [ackEntryLen]byte
		first, n, ok := decodeCompactAcked(cell, t.vc.VPI, len(p.send), &h, ack[:])
		if !ok {
			return 1, false
		}
		payload, used, ok := t.compactPair(cs, &h, first, n)
		if ok {
			t.dispatch(p, &h, ack[:], payload)
		}
		return used, ok
	}
	first, n, ok := decodeCompact(cell, t.vc.VPI, len(p.send), &h)
	if !ok {
		return 1, false
	}
	payload, used, ok := t.compactPair(cs, &h, first, n)
	if ok {
		t.dispatch(p, &h, nil, payload)
	}
	return used, ok
}

// compactPair returns the payload of the compact DATA cell at the start
// of cs, which decoded to header h, the bytes first and the length n:
// first itself, or (n above CompactPayload) first and the rest from the
// continuation cell that must follow, in t.pairBuf. used counts the cells
// it took: a cell of the continuation's type behind the first is taken
// with it, good or bad.
func (t *Transport) compactPair(cs []byte, h *header, first []byte, n int) (payload []byte, used int, ok bool) {
	if n <= CompactPayload {
		return first, 1, true
	}
	if len(cs) < 2*cells.CellSize || binary.BigEndian.Uint32(cs[cells.CellSize:])>>4 != t.compactKey {
		return nil, 1, false // no continuation
	}
	more := cells.Cell(cs[cells.CellSize : 2*cells.CellSize])
	if more.Payload()[0] != typeCompactMore {
		return nil, 1, false
	}
	if payload = t.joinPair(first, more, [3]byte(h[offChan:offSeq+2]), n); payload == nil {
		return nil, 2, false
	}
	return payload, 2, true
}

// joinPair returns the payload, n bytes, of a compact message of two
// cells, in t.pairBuf: first, the first cell's CompactPayload bytes, and
// the rest from its continuation cell more, which must name id, the first
// cell's channel and sequence number; nil if more does not check.
func (t *Transport) joinPair(first []byte, more cells.Cell, id [3]byte, n int) []byte {
	rest, ok := decodeCompactMore(more, id, n)
	if !ok {
		return nil
	}
	copy(t.pairBuf[:CompactPayload], first)
	copy(t.pairBuf[CompactPayload:n], rest)
	return t.pairBuf[:n]
}

// decodeCompactMore checks the continuation cell (typeCompactMore) of the
// compact DATA cell whose channel and sequence number are id and whose
// length is n (above CompactPayload), and returns the rest of the
// payload, which aliases the cell.
func decodeCompactMore(cell cells.Cell, id [3]byte, n int) (rest []byte, ok bool) {
	b := (*[cells.PayloadSize]byte)(cell.Payload()) // checked once
	if !cell.Valid() || b[0] != typeCompactMore || [3]byte(b[1:4]) != id ||
		binary.BigEndian.Uint16(b[compactOffCRC:]) != cells.CRC10(b[:compactOffCRC]) {
		return nil, false
	}
	return b[compactMoreLen : compactMoreLen+n-CompactPayload], true
}

// decodeCompactAcked checks a compact DATA cell with an acknowledgement
// (typeCompactAcked) on VPI vpi for a transport of channels channels,
// writes the header of the DATA PDU it stands for into h and its
// acknowledgement entry into ack (ackEntryLen bytes), and returns the
// payload's length n and its bytes in this cell (all n of them, or the
// first CompactPayload: compactPair), which alias the cell.
func decodeCompactAcked(cell cells.Cell, vpi uint16, channels int, h *header, ack []byte) (first []byte, n int, ok bool) {
	b := (*[cells.PayloadSize]byte)(cell.Payload()) // checked once
	tr := binary.BigEndian.Uint16(b[compactOffCRC:])
	n = int(tr >> 10)
	switch {
	case !cell.Valid(), cell.VPI(cells.UNI) != vpi,
		b[0] != typeCompactAcked, n > CompactMax, int(b[1]) >= channels, int(b[4]) >= channels,
		tr&0x3ff != cells.CRC10Trailer(b[:compactOffCRC], uint8(n)):
		return nil, 0, false
	}
	src := binary.BigEndian.Uint32(b[7:])
	if src == 0 {
		return nil, 0, false
	}
	h.put(typeData, int(b[1]), binary.BigEndian.Uint16(b[2:]), 0, n, src, binary.BigEndian.Uint32(b[11:]))
	h.setAcks(1)
	putAck(ack, 0, int(b[4]), binary.BigEndian.Uint16(b[5:]))
	return b[compactHeaderLen : compactHeaderLen+min(n, CompactPayload)], n, true
}

// decodeCompactAck checks a compact ACK cell on VPI vpi for a transport
// of channels channels, writes the header of the ACK PDU it stands for
// into h and its entries, in the ACK PDU's form, into acks (room for
// compactAckEntries), and returns their number.
func decodeCompactAck(cell cells.Cell, vpi uint16, channels int, h *header, acks []byte) (n int, ok bool) {
	b := (*[cells.PayloadSize]byte)(cell.Payload()) // checked once
	n = int(b[compactOffLength])
	switch {
	case !cell.Valid(), cell.VPI(cells.UNI) != vpi,
		b[0] != typeCompactAck, n > compactAckEntries, int(b[1]) >= channels,
		binary.BigEndian.Uint16(b[compactOffCRC:]) != cells.CRC10(b[:compactOffCRC]):
		return 0, false
	}
	e := b[compactHeaderLen:]
	for i := range n {
		ch := e[i*compactAckEntryLen]
		if int(ch) >= channels {
			return 0, false
		}
		putAck(acks, i, int(ch), binary.BigEndian.Uint16(e[i*compactAckEntryLen+1:]))
	}
	h.put(typeAck, int(b[1]), binary.BigEndian.Uint16(b[2:]), uint32(binary.BigEndian.Uint16(b[4:])), 0,
		binary.BigEndian.Uint32(b[6:]), binary.BigEndian.Uint32(b[10:]))
	h.setAcks(n)
	if h.src() == 0 {
		return 0, false
	}
	return n, true
}

// decodeCompact checks a compact cell on VPI vpi for a transport of
// channels channels, writes the header of the DATA PDU it stands for into
// h, and returns the payload's length n and its bytes in this cell (as
// decodeCompactAcked).
func decodeCompact(cell cells.Cell, vpi uint16, channels int, h *header) (first []byte, n int, ok bool) {
	b := (*[cells.PayloadSize]byte)(cell.Payload()) // checked once
	n = int(b[compactOffLength])
	switch {
	case !cell.Valid(), cell.VPI(cells.UNI) != vpi,
		b[0] != typeCompact, n > CompactMax, int(b[1]) >= channels,
		binary.BigEndian.Uint16(b[compactOffCRC:]) != cells.CRC10(b[:compactOffCRC]):
		return nil, 0, false
	}
	h.put(typeData, int(b[1]), binary.BigEndian.Uint16(b[2:]), uint32(binary.BigEndian.Uint16(b[4:])), n,
		binary.BigEndian.Uint32(b[6:]), binary.BigEndian.Uint32(b[10:]))
	if h.src() == 0 {
		return nil, 0, false
	}
	return b[compactHeaderLen : compactHeaderLen+min(n, CompactPayload)], n, true
}

// ackPDU builds, in the transport's scratch buffer, an ACK SDU that
// carries the first n (at least 1) acknowledgements owed to p, and forgets
// them: its header answers the first, its entries the others.
func (t *Transport) ackPDU(p *Peer, n int) []byte {
	ch0 := int(p.ackList[0])
	sdu := t.scratchSDU(headerLen + ackEntryLen*(n-1))
	(*header)(sdu).put(typeAck, ch0, p.ackSeq[ch0], p.ackStamp[ch0], 0, p.srcOut, p.dstOut)
	(*header)(sdu).setAcks(n - 1)
	p.ackOn[ch0] = false
	for j, ch := range p.ackList[1:n] {
		putAck(sdu[headerLen:], j, int(ch), p.ackSeq[ch])
		p.ackOn[ch] = false
	}
	t.dropAcks(p, n)
	return sdu
}
