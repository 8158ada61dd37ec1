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
// in the same frame, as an ACK PDU of their own (transmitCompact). The
// receiver checks the cell (HEC, CRC, type, length, channel) and handles
// it as a DATA PDU with the same fields (receiveCompact).
const (
	// CompactPayload is the largest payload a compact cell carries.
	CompactPayload = cells.PayloadSize - compactHeaderLen - compactCRCLen

	compactHeaderLen = 15
	compactCRCLen    = 2
	compactOffLength = 14
	compactOffCRC    = cells.PayloadSize - compactCRCLen
)

// typeCompact is the type byte of a compact DATA cell. It never appears in
// an AAL5 PDU's header.
const typeCompact uint8 = 5

// compactable reports whether a message with payload goes as a compact
// cell.
func (t *Transport) compactable(payload []byte) bool {
	return len(payload) <= CompactPayload && !t.cfg.NoCompact
}

// transmitCompact sends the compact message in channel c to p with a fresh
// stamp: one frame, the acknowledgements owed to p first (an ACK PDU),
// then the message's cell.
func (t *Transport) transmitCompact(p *Peer, c *sendChannel) error {
	c.stamp = t.nextStamp() & 0xffff
	h := header(c.hdr[:])
	h.setStamp(c.stamp)
	h.setDst(p.dstOut) // learnt since the last transmission, perhaps

	var ackSDU []byte
	if n := min(len(p.ackList), t.ackCompactMax); n > 0 {
		ackSDU = t.ackPDU(p, n)
		t.stats.AcksPiggybacked += uint64(n)
	}
	ackCells := 0
	if ackSDU != nil {
		ackCells = cells.CellCount(len(ackSDU))
	}
	total := len(t.eth) + (ackCells+1)*cells.CellSize + t.trail
	if cap(c.frameBuf) < total {
		c.frameBuf = make([]byte, total, max(total, 2*cap(c.frameBuf)))
	}
	f := c.frameBuf[:total]
	t.putHeaders(f, p, ackCells+1, cells.FlagStart)
	at := len(t.eth)
	if ackSDU != nil {
		if _, err := t.seg.Put(f[at:], ackSDU); err != nil {
			return err
		}
		at += ackCells * cells.CellSize
	}
	cell := cells.Cell(f[at : at+cells.CellSize])
	copy(cell, t.compactHdr[:])
	putCompact(cell.Payload(), h, t.payload(c))
	c.frames = append(c.frames[:0], f)
	t.stats.Compact++
	return t.output(c.frames)
}

// putCompact writes the 48-byte payload of the compact cell that stands
// for the DATA PDU with header h (its 16-bit stamp) and payload (at most
// CompactPayload bytes).
func putCompact(b []byte, h header, payload []byte) {
	b[0], b[1] = typeCompact, h[offChan]
	copy(b[2:4], h[offSeq:offSeq+2])
	binary.BigEndian.PutUint16(b[4:], uint16(h.stamp()))
	copy(b[6:14], h[offSrc:offDst+4])
	b[compactOffLength] = uint8(len(payload))
	clear(b[compactHeaderLen+copy(b[compactHeaderLen:], payload) : compactOffCRC])
	binary.BigEndian.PutUint16(b[compactOffCRC:], cells.CRC10(b[:compactOffCRC]))
}

// receiveCompact handles a compact cell from p: checked, it is dispatched
// as the DATA PDU it stands for.
func (t *Transport) receiveCompact(p *Peer, cell cells.Cell) bool {
	var h [headerLen]byte
	payload, ok := decodeCompact(cell, t.vc.VPI, len(p.send), h[:])
	if ok {
		t.dispatch(p, h[:], nil, payload)
	}
	return ok
}

// decodeCompact checks a compact cell on VPI vpi for a transport of
// channels channels and writes the header of the DATA PDU it stands for
// into h; the payload aliases the cell.
func decodeCompact(cell cells.Cell, vpi uint16, channels int, h header) (payload []byte, ok bool) {
	b := cell.Payload()
	n := int(b[compactOffLength])
	switch {
	case !cell.Valid(), cell.VPI(cells.UNI) != vpi,
		b[0] != typeCompact, n > CompactPayload, int(b[1]) >= channels,
		binary.BigEndian.Uint16(b[compactOffCRC:]) != cells.CRC10(b[:compactOffCRC]):
		return nil, false
	}
	h.put(typeData, int(b[1]), binary.BigEndian.Uint16(b[2:]), uint32(binary.BigEndian.Uint16(b[4:])), n,
		binary.BigEndian.Uint32(b[6:]), binary.BigEndian.Uint32(b[10:]))
	if h.src() == 0 {
		return nil, false
	}
	return b[compactHeaderLen : compactHeaderLen+n], true
}

// ackPDU builds, in the transport's scratch buffer, an ACK SDU that
// carries the first n (at least 1) acknowledgements owed to p, and forgets
// them: its header answers the first, its entries the others.
func (t *Transport) ackPDU(p *Peer, n int) []byte {
	ch0 := int(p.ackList[0])
	sdu := t.scratchSDU(headerLen + ackEntryLen*(n-1))
	header(sdu).put(typeAck, ch0, p.ackSeq[ch0], p.ackStamp[ch0], 0, t.epoch, p.dstOut)
	header(sdu).setAcks(n - 1)
	p.ackOn[ch0] = false
	for j, ch := range p.ackList[1:n] {
		putAck(sdu[headerLen:], j, int(ch), p.ackSeq[ch])
		p.ackOn[ch] = false
	}
	t.dropAcks(p, n)
	return sdu
}
