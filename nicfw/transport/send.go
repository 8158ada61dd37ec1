package transport

import (
	"encoding/binary"
	"fmt"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
)

// The send path, in the engine thread:
//
//  1. Send finds the destination's row of the send channel table and a free
//     channel in it, round robin from the one after the last used (none
//     free: ErrBusy, the transport's flow control).
//  2. It copies header and payload into the channel (the copy kept for
//     retransmission), occupies the channel (unacked count, active list)
//     and transmits.
//  3. transmit stamps the header with a fresh stamp, segments the SDU
//     into one AAL5 PDU in the channel's frame buffer and hands the frame to
//     the link. The timer scan (timers.go) calls it again for
//     retransmissions.
//
// ACKs and NACKs are built by the receive path (receive.go) in buffers of
// their own and sent in a batch at the end of each received batch.

// Send sends payload to dst on a free channel. It returns ErrBusy when all
// C channels to dst have a message in flight, ErrUnknownHost and ErrTooLarge
// for what their names say, and the link's error if the link refuses the
// frame (then the message is not sent and the channel stays free). Once Send
// returns nil the message is either delivered exactly once, in order on its
// channel, or given back through Returned with cookie. The payload is
// copied; the caller may reuse it. A message to a peer whose handshake is
// not done (epochs.go) takes its channel and waits there, nothing of it
// sent, until the peer has told what to name it; Send then reports the
// link's error for the RESET that asks it.
func (t *Transport) Send(dst HostID, payload []byte, cookie uint64) error {
	p := t.Peer(dst)
	if p == nil {
		return fmt.Errorf("%w: %d", ErrUnknownHost, dst)
	}
	_, err := t.sendPeer(p, payload, cookie)
	return err
}

// SendTo is Send to the host table's row p (Peer): a message that must
// follow its host, not its id, when a new table (SetPeers) moves ids. A
// row that left the table is an unknown host.
func (t *Transport) SendTo(p *Peer, payload []byte, cookie uint64) error {
	_, err := t.sendPeer(p, payload, cookie)
	return err
}

// Filler writes a payload into the buffer it is given, all of it
// (SendToFill).
type Filler interface {
	Fill(payload []byte)
}

// SendToFill is SendTo for a payload of n bytes that f writes straight
// into the transport's buffer, where SendTo copies one built elsewhere:
// a sender that builds its message from data of its own (a bulk chunk
// from its staging area) touches the bytes once. Fill is called at most
// once, before SendToFill returns (not at all when the message cannot
// have a channel: ErrBusy, ErrTooLarge, ErrUnknownHost).
func (t *Transport) SendToFill(p *Peer, n int, f Filler, cookie uint64) error {
	_, err := t.send(p, n, nil, f, cookie)
	return err
}

// sendPeer is SendTo; it also returns the channel that holds the message
// (-1 for an unreliable send).
func (t *Transport) sendPeer(p *Peer, payload []byte, cookie uint64) (int, error) {
	return t.send(p, len(payload), payload, nil, cookie)
}

// send sends a payload of n bytes to p: payload, or what f writes.
func (t *Transport) send(p *Peer, n int, payload []byte, f Filler, cookie uint64) (int, error) {
	if p == nil || p.gone {
		return -1, fmt.Errorf("%w: the host left the host table", ErrUnknownHost)
	}
	if n > t.maxPL {
		return -1, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, n, t.maxPL)
	}
	if t.cfg.Unreliable {
		return -1, t.sendUnreliable(p, n, payload, f, cookie)
	}
	if p.unacked == len(p.send) {
		return -1, ErrBusy
	}
	i := p.freeChannel()
	c := &p.send[i]
	t.load(c, i, c.seq, n, payload, f)
	c.compact, c.cookie, c.retries = t.compactable(t.payload(c)), cookie, 0
	t.occupy(p, c)
	if !t.ready(p) {
		// The incarnations are not confirmed both ways: the message
		// waits in its channel, and a RESET asks the peer for its
		// destination epoch (epochs.go, "Handshake").
		c.sent = false
		p.waiting++
		if err := t.hello(p); err != nil {
			t.unplace(p, c)
			return -1, fmt.Errorf("nicfw: send to host %d: %w", p.id, err)
		}
		t.setTimers(c)
		return i, nil
	}
	c.sent = true
	if err := t.transmit(p, c); err != nil {
		t.unplace(p, c)
		return -1, fmt.Errorf("nicfw: send to host %d: %w", p.id, err)
	}
	t.counted(p, c, n)
	return i, nil
}

// unplace frees channel c of p again, for a message that never left: its
// number is still free.
func (t *Transport) unplace(p *Peer, c *sendChannel) {
	t.release(p, c)
	c.seq--
}

// counted counts the message of n bytes in c as sent to p for the first
// time, and starts its timers.
func (t *Transport) counted(p *Peer, c *sendChannel, n int) {
	t.setTimers(c)
	t.stats.Sent++
	p.stats.Sent++
	p.stats.SentBytes += uint64(n)
}

// freeChannel returns the next free send channel to p, which has one,
// and moves on past it: the channels are taken in turn.
func (p *Peer) freeChannel() int {
	i := p.next
	for p.send[i].inUse {
		if i++; i == len(p.send) {
			i = 0
		}
	}
	if p.next = i + 1; p.next == len(p.send) {
		p.next = 0
	}
	return i
}

// sendWaiting transmits the messages that wait in p's channels, once
// the incarnations are confirmed (ready): each for the first time under
// them, its retransmission timer started again (its give-up timer runs
// from its Send).
func (t *Transport) sendWaiting(p *Peer) error {
	for i := range p.send {
		if p.waiting == 0 {
			return nil
		}
		c := &p.send[i]
		if !c.inUse || c.sent {
			continue
		}
		c.sent = true
		p.waiting--
		if err := t.transmit(p, c); err != nil {
			return fmt.Errorf("nicfw: send to host %d: %w", p.id, err)
		}
		if c.timed {
			c.due = t.now().Add(t.cfg.RetransmitAfter)
		}
		t.stats.Sent++
		p.stats.Sent++
		p.stats.SentBytes += uint64(len(t.payload(c)))
	}
	return nil
}

// setTimers starts the give-up and retransmission timers of the message
// just sent on c. On the system clock, a pass that has not read the clock
// leaves them to the next timer scan (timers.go), which starts them then:
// a send costs no clock reading, and the timers start at most a scan
// interval late. Other clocks (a test's manual clock) are read at once.
func (t *Transport) setTimers(c *sendChannel) {
	if t.sysClock && !t.nowOK {
		c.timed = false
		return
	}
	now := t.now()
	c.heard, c.due, c.timed = now, now.Add(t.cfg.RetransmitAfter), true
}

// sendUnreliable sends payload to p once, keeping nothing; the message is
// done once it has left, and Acked says so at the next Poll. Its frames
// are built in the one buffer all unreliable sends share, so within a
// pass they go to the link at once, with what the pass queued before them.
func (t *Transport) sendUnreliable(p *Peer, n int, payload []byte, f Filler, cookie uint64) error {
	c := &t.uc
	t.load(c, 0, 0, n, payload, f)
	err := t.transmit(p, c)
	if err == nil {
		err = t.flushOut()
	}
	if err != nil {
		return fmt.Errorf("nicfw: send to host %d: %w", p.id, err)
	}
	t.stats.Sent++
	p.stats.Sent++
	p.stats.SentBytes += uint64(n)
	if t.cfg.Acked != nil {
		t.left = append(t.left, sentMsg{p.id, cookie})
	}
	return nil
}

// sentMsg is an unreliable message that left: Poll tells Acked.
type sentMsg struct {
	dst    HostID
	cookie uint64
}

// load puts a DATA message of n bytes, payload or what f writes, into c,
// which keeps it to retransmit: the payload at a fixed place in c.buf,
// with room before it for the transport header and as many
// acknowledgements as a frame may carry (transmit writes them there), and
// the header in c.hdr.
func (t *Transport) load(c *sendChannel, ch int, seq uint16, n int, payload []byte, f Filler) {
	at := headerLen + ackEntryLen*t.maxAcks
	if cap(c.buf) < at+n {
		c.buf = make([]byte, at+n, max(at+n, 2*cap(c.buf)))
	}
	c.buf = c.buf[:at+n]
	(*header)(&c.hdr).put(typeData, ch, seq, 0, n, 0, 0) // epochs: transmit's
	if f != nil {
		f.Fill(c.buf[at:])
	} else {
		copy(c.buf[at:], payload)
	}
}

// payload returns the payload of the message in c.
func (t *Transport) payload(c *sendChannel) []byte {
	return c.buf[headerLen+ackEntryLen*t.maxAcks:]
}

// transmit sends the message in channel c to p with a fresh stamp; the
// caller schedules its retransmission. The acknowledgements owed to p ride
// along (piggy-backing, acks.go), written with the header in front of the
// payload, which stays in place. The PDU is cut into as many frames as it
// needs; the first is flagged cells.FlagStart, and all go to the link in
// one batch.
func (t *Transport) transmit(p *Peer, c *sendChannel) error {
	frames, err := t.build(p, c)
	if err != nil {
		return err
	}
	return t.output(frames)
}

// build is transmit but for the output: it builds the message's frames
// in c's buffer and returns them, as c.frames.
func (t *Transport) build(p *Peer, c *sendChannel) ([][]byte, error) {
	if c.compact {
		return t.buildCompact(p, c)
	}
	c.stamp = t.nextStamp()
	h := (*header)(&c.hdr)
	h.setStamp(c.stamp)
	n := min(len(p.ackList), t.maxAcks)
	start := ackEntryLen * (t.maxAcks - n)
	sdu := c.buf[start:]
	hs := (*header)(sdu)
	*hs = *h
	hs.setAcks(n)
	hs.setEpochs(p.srcOut, p.dstOut) // dst learnt since the last transmission, perhaps
	if n > 0 {
		t.takeAcks(p, sdu[headerLen:headerLen+ackEntryLen*n])
		t.stats.AcksPiggybacked += uint64(n)
	}

	ncells := cells.CellCount(len(sdu))
	nframes := (ncells + t.perFrame - 1) / t.perFrame
	total := nframes*(len(t.eth)+t.trail) + ncells*cells.CellSize
	if cap(c.frameBuf) < total {
		c.frameBuf = make([]byte, total, max(total, 2*cap(c.frameBuf)))
	}
	buf := c.frameBuf[:total]
	c.frames = c.frames[:0]
	if nframes == 1 {
		t.putHeaders(buf, p, ncells, cells.FlagStart)
		if _, err := t.seg.Put(buf[len(t.eth):], sdu); err != nil {
			return nil, err
		}
		c.frames = append(c.frames, buf)
	} else {
		cl := ncells * cells.CellSize
		if cap(t.cellBuf) < cl {
			t.cellBuf = make([]byte, cl)
		}
		cs := t.cellBuf[:cl]
		if _, err := t.seg.Put(cs, sdu); err != nil {
			return nil, err
		}
		flags := cells.FlagStart
		for len(cs) > 0 {
			k := min(len(cs)/cells.CellSize, t.perFrame)
			fl := len(t.eth) + k*cells.CellSize + t.trail
			f := buf[:fl:fl]
			buf = buf[fl:]
			t.putHeaders(f, p, k, flags)
			copy(f[len(t.eth):], cs[:k*cells.CellSize])
			cs = cs[k*cells.CellSize:]
			c.frames = append(c.frames, f)
			flags = 0
		}
	}
	return c.frames, nil
}

// output hands frames to the link: at once outside a pass; inside one
// (BeginPass, EndPass) they join the pass's batch, which goes to the link
// in one Send when the pass ends, or before the pass receives. So an
// engine run that sends several messages and acknowledgements makes one
// system call for all of them. The frames must stay unchanged until then:
// a channel's frames change only when the channel is freed, which only
// receiving does, and the batch goes before that.
func (t *Transport) output(frames [][]byte) error {
	if t.pass == 0 {
		t.seal(frames)
		_, err := t.link.Send(frames)
		return err
	}
	whole := len(frames) == 1 // a PDU in one frame: it may share a frame
	for _, f := range frames {
		t.out = append(t.out, outFrame{f, whole})
	}
	if !whole {
		t.tailCells = 0 // pack closes the host's frame: nothing open to fill
		return nil
	}
	f := frames[0]
	n := t.cellsIn(f)
	if dst := [6]byte(f[:6]); dst == t.tailDst && t.tailCells+n <= t.perFrame {
		t.tailCells += n
	} else {
		t.tailDst, t.tailCells = dst, n
	}
	return nil
}

// cellsIn returns the number of cells of frame f, one of whole PDUs.
func (t *Transport) cellsIn(f []byte) int { return (len(f) - len(t.eth) - t.trail) / cells.CellSize }

// PassFull reports whether the frame that the pass's last whole-PDU frames
// are packed into (pack) is full: a sender that stops now sends no frame
// partly empty, where one more message would begin one.
func (t *Transport) PassFull() bool { return t.tailCells == t.perFrame }

// outFrame is a frame of a pass's batch; whole if it holds whole PDUs only
// (every frame that holds one PDU, or acknowledgements), which may then
// travel in one frame with others to the same host.
type outFrame struct {
	f     []byte
	whole bool
}

// flushOut sends the pass's batch, packing the cells of whole-PDU frames
// to the same host into as few frames as the MTU allows (pack). Frames
// the link refuses are lost, as on the wire: retransmission recovers
// them.
func (t *Transport) flushOut() error {
	if len(t.out) == 0 {
		return nil
	}
	send := t.pack()
	t.seal(send)
	t.stats.Batches++
	t.stats.BatchFrames += uint64(len(send))
	_, err := t.link.Send(send)
	t.ctlHeld = 0
	t.tailCells = 0
	clearFew(t.out)
	clearFew(t.sendList)
	t.out = t.out[:0]
	t.sendList = t.sendList[:0]
	if err != nil {
		return fmt.Errorf("nicfw: send: %w", err)
	}
	return nil
}

// clearFew is clear(s) for the batches of one frame that a round trip
// makes: their elements hold pointers, and clear's call (with its write
// barrier's bulk check) costs more than the store.
func clearFew[T any](s []T) {
	if len(s) == 1 {
		var zero T
		s[0] = zero
		return
	}
	clear(s)
}

// pack returns the frames of the batch to hand to the link. The cells of
// whole-PDU frames to one host go together, in their order, into frames
// of up to perFrame cells (each flagged cells.FlagStart: it starts with a
// PDU's first cell); a frame of a PDU that spans frames goes as it is. The
// receiver's reassembler takes a frame's cells one PDU after another, so
// a frame of several PDUs is received as they would be one by one; the
// channels' own frames, kept to retransmit, are not changed. A host's PDUs
// keep the order in which they were sent; frames to different hosts may
// change places.
func (t *Transport) pack() [][]byte {
	if len(t.out) == 1 {
		// The common batch, one frame: it goes as it is.
		t.sendList = append(t.sendList[:0], t.out[0].f)
		return t.sendList
	}
	hdr := len(t.eth)
	t.packs = t.packs[:0]
	for _, o := range t.out {
		f := o.f
		dst := [6]byte(f[:6])
		open := -1
		for i := range t.packs {
			if p := &t.packs[i]; p.open && p.dst == dst {
				open = i
			}
		}
		if !o.whole {
			// A PDU that spans frames goes as it is, after what was packed
			// for its host before it: the host's frames keep their order.
			if open >= 0 {
				t.packs[open].open = false
			}
			t.sendList = append(t.sendList, f)
			continue
		}
		n := t.cellsIn(f)
		if open >= 0 && t.packs[open].cells+n > t.perFrame {
			t.packs[open].open = false
			open = -1
		}
		if open < 0 {
			// A frame of its own until a second PDU joins it: only then
			// are the cells copied into a packing buffer.
			t.packs = append(t.packs, packFrame{dst: dst, first: f, at: len(t.sendList), open: true})
			t.sendList = append(t.sendList, f)
			open = len(t.packs) - 1
		}
		pk := &t.packs[open]
		if pk.pdus == 1 {
			pk.buf = append(t.packBuf(open)[:0], pk.first[:len(pk.first)-t.trail]...)
		}
		if pk.pdus > 0 {
			pk.buf = append(pk.buf, f[hdr:len(f)-t.trail]...)
		}
		pk.cells += n
		pk.pdus++
	}
	for i := range t.packs {
		p := &t.packs[i]
		if p.pdus == 1 {
			continue // its frame goes as it is
		}
		p.buf[afxdp.EthernetHeaderLen+1] = cells.FlagStart
		binary.BigEndian.PutUint16(p.buf[afxdp.EthernetHeaderLen+2:], uint16(p.cells))
		if t.trail > 0 {
			p.buf = append(p.buf, make([]byte, t.trail)...) // room for the trailer (seal)
		}
		t.stats.Packed += uint64(p.pdus)
		t.sendList[p.at] = p.buf
	}
	return t.sendList
}

// packFrame is a frame being packed: its bytes (headers, then cells), its
// cells and the PDU frames it took.
type packFrame struct {
	dst         [6]byte
	first       []byte // the frame of its first PDU
	buf         []byte // with a second PDU: the packed frame
	cells, pdus int
	at          int  // its place in the batch
	open        bool // frames to dst may still join it
}

// packBuf returns the i-th packing buffer of the transport, reused from
// pass to pass.
func (t *Transport) packBuf(i int) []byte {
	for len(t.packBufs) <= i {
		t.packBufs = append(t.packBufs, make([]byte, 0, cells.FrameLen(t.perFrame)+t.trail))
	}
	return t.packBufs[i]
}

// putHeaders writes the Ethernet and xam frame headers of a frame to p that
// carries ncells cells.
func (t *Transport) putHeaders(frame []byte, p *Peer, ncells int, flags uint8) {
	h := (*[ethHeaders]byte)(frame) // a frame holds a cell after them
	*h = p.eth
	h[afxdp.EthernetHeaderLen+1] = flags
	binary.BigEndian.PutUint16(h[afxdp.EthernetHeaderLen+2:], uint16(ncells))
}

// ethHeaders is the length of a frame's Ethernet and frame headers.
const ethHeaders = afxdp.EthernetHeaderLen + cells.FrameHeaderSize
