package ssam

import (
	"encoding/binary"
	"fmt"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/driver"
)

// Sending: where each message is built in the connection's send area,
// requests and the window that limits them, answers, and the batching
// that sends single-cell messages together.

// SlotsPerMessage returns the 48-byte send slots a message of up to max
// data bytes occupies (its whole CPCS-PDU).
func SlotsPerMessage(max int) int { return cells.CellCount(cells.SSAMHeaderSize + max) }

// The send area of a connection holds the 2W buffers, in four regions of R
// each (R, the window rounded up to a power of two; see bufferRing):
// single-cell requests (one slot each), single-cell answers, then bulk
// requests and bulk answers (SlotsPerMessage slots each), and last one slot
// for syncs. A message's buffer is chosen by its sequence number modulo R,
// so consecutive single-cell messages sit in consecutive slots and a batch
// of them is one SendBatch trap.
func layoutSlots(window, per int) int {
	return syncSlot(window, per) + 1
}

// syncSlot is the send slot of the syncs and their answers, sent at once
// each time, so one slot serves both.
func syncSlot(window, per int) int {
	r := bufferRing(window)
	return 2*r + 2*r*per
}

// bufferRing is the number of buffers per region: the window rounded up to
// a power of two, which divides the 128 sequence numbers, so that
// consecutive sequence numbers always have consecutive buffers (modulo the
// ring), also across the wrap from 127 to 0.
func bufferRing(window int) int {
	r := 1
	for r < window {
		r <<= 1
	}
	return r
}

// SendSlots returns the send area (in slots) a device needs per connection
// for an SSAM endpoint with this window and message size.
func SendSlots(window, maxMessage int) int {
	n := layoutSlots(window, SlotsPerMessage(maxMessage))
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// requestOffset and answerOffset are the first send slot of the buffer of
// sequence number seq for a message of n data bytes (see layoutSlots).
func (ep *Endpoint) requestOffset(seq uint8, n int) int {
	r := ep.ring
	if n <= MaxShort {
		return ep.buf(seq)
	}
	return 2*r + ep.buf(seq)*ep.per
}

// buf is the buffer index of sequence number seq within a region.
func (ep *Endpoint) buf(seq uint8) int { return int(seq) & (ep.ring - 1) }

func (ep *Endpoint) answerOffset(seq uint8, n int) int {
	r := ep.ring
	if n <= MaxShort {
		return r + ep.buf(seq)
	}
	return 2*r + r*ep.per + ep.buf(seq)*ep.per
}

// dataAt returns the data part of the buffer at send slot off.
func (ep *Endpoint) dataAt(c, off, n int) []byte {
	start := off*cells.PayloadSize + cells.SSAMHeaderSize
	return ep.dev.SendArea(c)[start : start+n]
}

// Buffer returns where the data of connection c's next request goes: the
// application may write up to MaxMessage bytes there and send them with
// RequestBuffered, without a copy (SSAM's exported next send buffer). It is
// nil while the window is full, and once the endpoint is closed.
func (ep *Endpoint) Buffer(c int) []byte {
	if ep.closed || c < 0 || c >= len(ep.conns) || ep.windowFull(&ep.conns[c]) {
		return nil
	}
	return ep.dataAt(c, ep.requestOffset(ep.conns[c].next, ep.cfg.MaxMessage), ep.cfg.MaxMessage)
}

func (ep *Endpoint) windowFull(cn *conn) bool {
	return int((cn.next-cn.base)&seqMask) >= ep.cfg.Window
}

// Request sends a request with data to handler h on connection dest, then
// polls. While the window is full it polls until there is room, for at
// most the configured give-up time. It may not be called from a handler.
func (ep *Endpoint) Request(dest int, h HandlerID, data []byte) error {
	if err := ep.makeRoom(dest); err != nil {
		return err
	}
	if err := ep.checkLen(len(data)); err != nil {
		return err
	}
	if err := checkHandler(h); err != nil {
		return err
	}
	copy(ep.dataAt(dest, ep.requestOffset(ep.conns[dest].next, len(data)), len(data)), data)
	return ep.send(dest, h, len(data))
}

// RequestBuffered sends a request whose n data bytes the application has
// already written into Buffer(dest).
func (ep *Endpoint) RequestBuffered(dest int, h HandlerID, n int) error {
	if err := ep.makeRoom(dest); err != nil {
		return err
	}
	if err := ep.checkLen(n); err != nil {
		return err
	}
	if err := checkHandler(h); err != nil {
		return err
	}
	if n <= MaxShort { // Buffer handed out the bulk buffer: move the data
		seq := ep.conns[dest].next
		copy(ep.dataAt(dest, ep.requestOffset(seq, n), n), ep.dataAt(dest, ep.requestOffset(seq, ep.cfg.MaxMessage), n))
	}
	return ep.send(dest, h, n)
}

// checkConn checks a connection index, and that the endpoint is open.
func (ep *Endpoint) checkConn(c int) error {
	switch {
	case ep.closed:
		return ErrClosed
	case c < 0 || c >= len(ep.conns):
		return fmt.Errorf("%w: connection %d (there are %d)", ErrBadDest, c, len(ep.conns))
	}
	return nil
}

// makeRoom checks the call and polls until the window has room.
func (ep *Endpoint) makeRoom(c int) error {
	if ep.depth > 0 && !ep.closed {
		return fmt.Errorf("%w: a handler may not send a request", ErrDiscipline)
	}
	if err := ep.checkConn(c); err != nil {
		return err
	}
	cn := &ep.conns[c]
	if err := ep.startSync(c); err != nil {
		return err
	}
	if !ep.windowFull(cn) {
		return nil
	}
	if err := ep.Flush(); err != nil {
		return err
	}
	start := ep.cfg.Clock.Now()
	for ep.windowFull(cn) {
		if _, err := ep.Poll(); err != nil {
			return err
		}
		if ep.windowFull(cn) && ep.cfg.Clock.Now().Sub(start) > ep.cfg.GiveUp {
			return fmt.Errorf("%w: connection %d: window of %d full for %v", ErrTimeout, c, ep.cfg.Window, ep.cfg.GiveUp)
		}
	}
	return nil
}

// send transmits request seq next of connection c, whose data is in place.
func (ep *Endpoint) send(c int, h HandlerID, n int) error {
	cn := &ep.conns[c]
	seq := cn.next
	off := ep.requestOffset(seq, n)
	slots, bulk, err := ep.build(c, off, flowWord(kindRequest, seq, uint8(ep.tag&tagLoMask)), handlerField(ep.tag, uint32(h)), n)
	if err != nil {
		return err
	}
	// The timer stamps the request the first time it sees it (a clock
	// read costs more than a single-cell send on some machines).
	cn.window[ep.buf(seq)] = outstanding{off: off, slots: slots, bulk: bulk, handler: h}
	cn.next = (seq + 1) & seqMask
	ep.stats.Requests++
	if !cn.synced {
		// It waits in the window for the sync's answer (Sessions).
		_, err = ep.Poll()
		return err
	}
	switch {
	case bulk:
		if err := ep.flushRequests(c); err != nil { // keep the order on the wire
			return err
		}
		if err := ep.dev.SendBatch(c, off, slots, driver.Bulk|driver.EOM); err != nil {
			return err
		}
		_, err = ep.Poll()
		return err
	case ep.cfg.Batch > 1:
		if cn.pending == 0 {
			cn.pendFrom = seq
		}
		if cn.pending++; cn.pending >= ep.cfg.Batch {
			return ep.flushRequests(c)
		}
		return nil
	}
	// SSAM's write-read trap: send, and receive what is waiting.
	k, err := ep.dev.SendRecv(c, off, driver.EOM, ep.dev.RecvBatch())
	if err != nil {
		return err
	}
	if k > 0 {
		ep.dispatchAll()
	}
	return nil
}

// Flush sends the single-cell messages a batching endpoint holds back.
func (ep *Endpoint) Flush() error {
	if ep.closed {
		return ErrClosed
	}
	for c := range ep.conns {
		if err := ep.flushRequests(c); err != nil {
			return err
		}
		if err := ep.flushAnswers(c); err != nil {
			return err
		}
	}
	return nil
}

// flushRequests sends connection c's pending single-cell requests, which
// sit in consecutive slots (two runs when they wrap around the region).
func (ep *Endpoint) flushRequests(c int) error {
	cn := &ep.conns[c]
	for cn.pending > 0 {
		first := ep.buf(cn.pendFrom)
		k := min(cn.pending, ep.ring-first)
		if err := ep.dev.SendBatch(c, first, k, driver.EOM); err != nil {
			return err
		}
		cn.pending -= k
		cn.pendFrom = (cn.pendFrom + uint8(k)) & seqMask
	}
	return nil
}

// flushAnswers sends connection c's queued single-cell answers, runs of
// consecutive sequence numbers in one trap each.
func (ep *Endpoint) flushAnswers(c int) error {
	cn := &ep.conns[c]
	q := cn.answerQ
	for i := 0; i < len(q); {
		j := i + 1
		for j < len(q) && q[j] == (q[j-1]+1)&seqMask && ep.buf(q[j]) != 0 {
			j++
		}
		if err := ep.dev.SendBatch(c, ep.answerOffset(q[i], 0), j-i, driver.EOM); err != nil {
			cn.answerQ = q[:0]
			return err
		}
		i = j
	}
	cn.answerQ = q[:0]
	return nil
}

// build writes the header (and, for bulk, the AAL5 pad and trailer) of a
// message whose n data bytes sit after the header at send slot off, and
// returns how many slots it occupies and whether it goes on the bulk VC.
func (ep *Endpoint) build(c, off int, flow uint16, handler uint32, n int) (slots int, bulk bool, err error) {
	area := ep.dev.SendArea(c)[off*cells.PayloadSize:]
	if n <= MaxShort {
		p := area[:cells.PayloadSize]
		// EncodeSSAM copies the data onto itself (it is already in
		// place) and clears the unused tail.
		if err := cells.EncodeSSAM(p, flow, handler, p[cells.SSAMHeaderSize:cells.SSAMHeaderSize+n]); err != nil {
			return 0, false, err
		}
		return 1, false, nil
	}
	sdu := cells.SSAMHeaderSize + n
	pdu := area[:cells.PDULen(sdu)]
	binary.BigEndian.PutUint16(pdu[0:], flow)
	binary.BigEndian.PutUint32(pdu[2:], handler)
	binary.BigEndian.PutUint16(pdu[6:], 0)
	clear(pdu[sdu : len(pdu)-cells.TrailerSize])
	tr := pdu[len(pdu)-cells.TrailerSize:]
	tr[0], tr[1] = 0, 0
	binary.BigEndian.PutUint16(tr[2:], uint16(sdu))
	binary.BigEndian.PutUint32(tr[4:], cells.CRC32(pdu[:len(pdu)-4]))
	return len(pdu) / cells.PayloadSize, true, nil
}

// answer sends and saves the reply or ack to request seq on connection c,
// naming handler index handler (an ack: 0 or rejectIndex), tagged with the
// session the responder follows.
func (ep *Endpoint) answer(c int, seq, kind uint8, handler uint32, data []byte) error {
	cn := &ep.conns[c]
	off := ep.answerOffset(seq, len(data))
	copy(ep.dataAt(c, off, len(data)), data)
	slots, bulk, err := ep.build(c, off, flowWord(kind, seq, cn.expected), handlerField(cn.tag, handler), len(data))
	if err != nil {
		return err
	}
	cn.answers[ep.buf(seq)] = saved{valid: true, seq: seq, off: off, slots: slots, bulk: bulk}
	if kind == kindReply {
		ep.stats.Replies++
	} else {
		ep.stats.Acks++
	}
	if ep.cfg.Batch > 1 {
		if !bulk {
			cn.answerQ = append(cn.answerQ, seq) // sent at the end of the poll
			return nil
		}
		if err := ep.flushAnswers(c); err != nil { // answers leave in order
			return err
		}
	}
	return ep.transmit(c, off, slots, bulk)
}

func (ep *Endpoint) transmit(c, off, slots int, bulk bool) error {
	if bulk {
		return ep.dev.SendBatch(c, off, slots, driver.Bulk|driver.EOM)
	}
	return ep.dev.Send(c, off, driver.EOM)
}
