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
func (ep *Endpoint) Poll() (int, error) {
	if ep.closed {
		return 0, ErrClosed
	}
	if ep.depth > 0 {
		return 0, fmt.Errorf("%w: a handler may not poll", ErrDiscipline)
	}
	before := ep.stats.Handled + ep.stats.ReplyHandled
	if ep.cfg.Batch > 1 {
		for c := range ep.conns {
			if err := ep.flushRequests(c); err != nil {
				return 0, err
			}
		}
	}
	if _, err := ep.dev.Recv(ep.dev.RecvBatch()); err != nil {
		return 0, err
	}
	ep.dispatchAll()
	if ep.cfg.Batch > 1 {
		for c := range ep.conns {
			if err := ep.flushAnswers(c); err != nil {
				return 0, err
			}
		}
	}
	if ep.polls++; ep.polls%timerPolls == 0 {
		if err := ep.timers(); err != nil {
			return 0, err
		}
	}
	return int(ep.stats.Handled + ep.stats.ReplyHandled - before), nil
}

// dispatchAll processes every cell waiting in the connections' receive
// rings.
func (ep *Endpoint) dispatchAll() {
	for c := range ep.conns {
		for {
			cell, ok := ep.dev.Take(c)
			if !ok {
				break
			}
			ep.cell(c, cell)
		}
	}
}

// cell processes one received cell of connection c.
func (ep *Endpoint) cell(c int, cell cells.Cell) {
	if ep.dev.IsBulk(c, cell) {
		pdu, ok, err := ep.conns[c].reasm.Push(cell)
		if err != nil {
			ep.stats.BadPDUs++
		}
		if !ok {
			return
		}
		sdu := pdu.SDU
		if len(sdu) < cells.SSAMHeaderSize || binary.BigEndian.Uint16(sdu[6:]) != 0 {
			ep.stats.BadPDUs++
			return
		}
		ep.message(c, binary.BigEndian.Uint16(sdu), binary.BigEndian.Uint32(sdu[2:]), sdu[cells.SSAMHeaderSize:])
		return
	}
	p := cells.SSAMCell(cell.Payload())
	if p.Check() != nil {
		ep.stats.BadCells++
		return
	}
	ep.message(c, p.FlowControl(), p.Handler(), p.Data())
}

// message handles one received message.
func (ep *Endpoint) message(c int, flow uint16, handler uint32, data []byte) {
	kind, seq, ack := splitFlow(flow)
	cn := &ep.conns[c]
	switch kind {
	case kindSync:
		switch {
		case ack == syncAnswer:
			if handler == ep.session && !cn.synced {
				// The requests that waited for it leave now.
				cn.synced, cn.syncing = true, false
				ep.sendOutstanding(c, time.Time{}, false)
			}
		case ack == syncAsk && handler != 0:
			switch tag := sessionTag(handler); {
			case handler == cn.session:
				// Its answer was lost: answer again.
			case tag == cn.tag:
				// Tags alike (one chance in 2^23): its requests could not
				// be told from the last session's, so start over now.
				ep.begin(cn, handler, seq)
			default:
				// Followed from its first request (Sessions).
				cn.announced, cn.annTag, cn.annSeq = handler, tag, seq
			}
			ep.sendSync(c, seq, syncAnswer, handler)
		default:
			ep.stats.BadCells++
		}
	case kindRequest:
		if tag := fieldTag(handler, ack); !ep.follows(cn, tag, seq) {
			if cn.announced != 0 && tag == cn.annTag {
				ep.stats.OutOfOrder++ // the announced session's, not its first
			} else {
				ep.stats.Forged++
			}
			return
		}
		switch d := (cn.expected - seq) & seqMask; {
		case d == 0:
			ep.tok = Token{s: ep, conn: c, seq: seq, request: true}
			cn.expected = (seq + 1) & seqMask
			if !ep.run(handler&indexMask, &ep.tok, data) {
				// No such handler: the ack says so, so that the requester
				// learns its request did nothing (never a plain ack).
				ep.answer(c, seq, kindAck, rejectIndex, nil)
				break
			}
			ep.stats.Handled++
			if !ep.tok.replied {
				ep.answer(c, seq, kindAck, 0, nil)
			}
		case int(d) <= ep.cfg.Window:
			// Delivered already: its answer was lost. Send it again.
			ep.stats.DupRequests++
			if a := cn.answers[ep.buf(seq)]; a.valid && a.seq == seq {
				ep.stats.Resent++
				ep.transmit(c, a.off, a.slots, a.bulk)
			}
		default:
			ep.stats.OutOfOrder++ // ahead of the next expected: go-back-N
		}
	case kindReply, kindAck:
		index := handler & indexMask
		if handler>>indexBits != ep.tag>>tagLoBits || ack != (seq+1)&seqMask ||
			kind == kindAck && (index != 0 && index != rejectIndex || len(data) != 0) {
			ep.stats.Forged++ // not an answer of this endpoint's session
			return
		}
		if cn.next == cn.base || seq != cn.base {
			ep.stats.DupAnswers++ // handled already, or not the oldest outstanding
			return
		}
		cn.base = (cn.base + 1) & seqMask
		cn.answered = true
		if kind == kindAck && index == rejectIndex {
			ep.returned(c, seq)
		}
		if kind == kindReply {
			ep.tok = Token{s: ep, conn: c, seq: seq}
			ep.stats.ReplyHandled++
			ep.run(index, &ep.tok, data)
		}
	}
}

// run calls handler h with the discipline flag raised; false when there is
// no such handler.
func (ep *Endpoint) run(h uint32, t *Token, data []byte) bool {
	if int(h) >= len(ep.handlers) || ep.handlers[h] == nil {
		ep.stats.HandlerErrors++
		return false
	}
	ep.depth++
	defer ep.leave()
	ep.handlers[h](t, data)
	return true
}

// OnReturn sets the endpoint's error handler, which Poll calls for each
// request the responder answered "no such handler" (counted in
// Stats.Returned too): it ran nothing there. It runs as a reply handler
// does: it may not send or poll. Without one, such requests are only
// counted.
func (ep *Endpoint) OnReturn(f func(Returned)) { ep.onReturn = f }

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
func (ep *Endpoint) returned(c int, seq uint8) {
	ep.stats.Returned++
	if ep.onReturn == nil {
		return
	}
	ep.depth++
	defer ep.leave()
	ep.onReturn(Returned{Dest: c, Handler: ep.conns[c].window[ep.buf(seq)].handler, Seq: seq})
}

func (ep *Endpoint) leave() { ep.depth-- }
