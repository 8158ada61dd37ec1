package ssam

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/xam-project/xam/cells"
)

// Receiving: Poll takes the cells that have arrived, reassembles bulk
// messages, checks each message against the connection's state and runs
// its handler.

// Poll receives what has arrived, runs its handlers, and retransmits what
// has timed out. It returns the number of handlers run.
func (s *Endpoint) Poll() (int, error) {
	if s.closed {
		return 0, ErrClosed
	}
	if s.depth > 0 {
		return 0, fmt.Errorf("%w: a handler may not poll", ErrDiscipline)
	}
	before := s.stats.Handled + s.stats.ReplyHandled
	if s.cfg.Batch > 1 {
		for c := range s.conns {
			if err := s.flushRequests(c); err != nil {
				return 0, err
			}
		}
	}
	if _, err := s.dev.Recv(s.dev.RecvBatch()); err != nil {
		return 0, err
	}
	s.dispatchAll()
	if s.cfg.Batch > 1 {
		for c := range s.conns {
			if err := s.flushAnswers(c); err != nil {
				return 0, err
			}
		}
	}
	if s.polls++; s.polls%timerPolls == 0 {
		if err := s.timers(); err != nil {
			return 0, err
		}
	}
	return int(s.stats.Handled + s.stats.ReplyHandled - before), nil
}

// dispatchAll processes every cell waiting in the connections' receive
// rings.
func (s *Endpoint) dispatchAll() {
	for c := range s.conns {
		for {
			cell, ok := s.dev.Take(c)
			if !ok {
				break
			}
			s.cell(c, cell)
		}
	}
}

// cell processes one received cell of connection c.
func (s *Endpoint) cell(c int, cell cells.Cell) {
	if s.dev.IsBulk(c, cell) {
		pdu, ok, err := s.conns[c].reasm.Push(cell)
		if err != nil {
			s.stats.BadPDUs++
		}
		if !ok {
			return
		}
		sdu := pdu.SDU
		if len(sdu) < cells.SSAMHeaderSize || binary.BigEndian.Uint16(sdu[6:]) != 0 {
			s.stats.BadPDUs++
			return
		}
		s.message(c, binary.BigEndian.Uint16(sdu), binary.BigEndian.Uint32(sdu[2:]), sdu[cells.SSAMHeaderSize:])
		return
	}
	p := cells.SSAMCell(cell.Payload())
	if p.Check() != nil {
		s.stats.BadCells++
		return
	}
	s.message(c, p.FlowControl(), p.Handler(), p.Data())
}

// message handles one received message.
func (s *Endpoint) message(c int, flow uint16, handler uint32, data []byte) {
	kind, seq, ack := splitFlow(flow)
	cn := &s.conns[c]
	switch kind {
	case kindSync:
		switch {
		case ack == syncAnswer:
			if handler == s.session && !cn.synced {
				// The requests that waited for it leave now.
				cn.synced, cn.syncing = true, false
				s.sendOutstanding(c, time.Time{}, false)
			}
		case ack == syncAsk && handler != 0:
			switch tag := sessionTag(handler); {
			case handler == cn.session:
				// Its answer was lost: answer again.
			case tag == cn.tag:
				// Tags alike (one chance in 2^23): its requests could not
				// be told from the last session's, so start over now.
				s.begin(cn, handler, seq)
			default:
				// Followed from its first request (Sessions).
				cn.announced, cn.annTag, cn.annSeq = handler, tag, seq
			}
			s.sendSync(c, seq, syncAnswer, handler)
		default:
			s.stats.BadCells++
		}
	case kindRequest:
		if tag := fieldTag(handler, ack); !s.follows(cn, tag, seq) {
			if cn.announced != 0 && tag == cn.annTag {
				s.stats.OutOfOrder++ // the announced session's, not its first
			} else {
				s.stats.Forged++
			}
			return
		}
		switch d := (cn.expected - seq) & seqMask; {
		case d == 0:
			s.tok = Token{s: s, conn: c, seq: seq, request: true}
			cn.expected = (seq + 1) & seqMask
			if !s.run(handler&indexMask, &s.tok, data) {
				// No such handler: the ack says so, so that the requester
				// learns its request did nothing (never a plain ack).
				s.answer(c, seq, kindAck, rejectIndex, nil)
				break
			}
			s.stats.Handled++
			if !s.tok.replied {
				s.answer(c, seq, kindAck, 0, nil)
			}
		case int(d) <= s.cfg.Window:
			// Delivered already: its answer was lost. Send it again.
			s.stats.DupRequests++
			if a := cn.answers[s.buf(seq)]; a.valid && a.seq == seq {
				s.stats.Resent++
				s.transmit(c, a.off, a.slots, a.bulk)
			}
		default:
			s.stats.OutOfOrder++ // ahead of the next expected: go-back-N
		}
	case kindReply, kindAck:
		index := handler & indexMask
		if handler>>indexBits != s.tag>>tagLoBits || ack != (seq+1)&seqMask ||
			kind == kindAck && (index != 0 && index != rejectIndex || len(data) != 0) {
			s.stats.Forged++ // not an answer of this endpoint's session
			return
		}
		if cn.next == cn.base || seq != cn.base {
			s.stats.DupAnswers++ // handled already, or not the oldest outstanding
			return
		}
		cn.base = (cn.base + 1) & seqMask
		cn.answered = true
		if kind == kindAck && index == rejectIndex {
			s.returned(c, seq)
		}
		if kind == kindReply {
			s.tok = Token{s: s, conn: c, seq: seq}
			s.stats.ReplyHandled++
			s.run(index, &s.tok, data)
		}
	}
}

// run calls handler h with the discipline flag raised; false when there is
// no such handler.
func (s *Endpoint) run(h uint32, t *Token, data []byte) bool {
	if int(h) >= len(s.handlers) || s.handlers[h] == nil {
		s.stats.HandlerErrors++
		return false
	}
	s.depth++
	defer s.leave()
	s.handlers[h](t, data)
	return true
}

// OnReturn sets the endpoint's error handler, which Poll calls for each
// request the responder answered "no such handler" (counted in
// Stats.Returned too): it ran nothing there. It runs as a reply handler
// does: it may not send or poll. Without one, such requests are only
// counted.
func (s *Endpoint) OnReturn(f func(Returned)) { s.onReturn = f }

// Returned is a request that came back: the responder had no handler of
// its index, and ran nothing (SSAM's only return; the engine's reasons of
// return, amii.Returned's and grim.Returned's, are the firmware's). The
// fields identify the request as it was sent.
type Returned struct {
	Dest    int       // the connection it was sent on
	Handler HandlerID // the handler it named
	Seq     uint8     // its sequence number
}

// String describes r for logs: "request to connection 0, handler 7 (seq
// 3): no such handler".
func (r Returned) String() string {
	return fmt.Sprintf("request to connection %d, handler %d (seq %d): no such handler", r.Dest, r.Handler, r.Seq)
}

// returned hands request seq of connection c, which the responder
// rejected, to the error handler.
func (s *Endpoint) returned(c int, seq uint8) {
	s.stats.Returned++
	if s.onReturn == nil {
		return
	}
	s.depth++
	defer s.leave()
	s.onReturn(Returned{Dest: c, Handler: s.conns[c].window[s.buf(seq)].handler, Seq: seq})
}

func (s *Endpoint) leave() { s.depth-- }
