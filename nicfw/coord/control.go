package coord

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/xam-project/xam/nicfw"
)

// Control messages (docs/wire.md), big-endian: type, link (the
// destination host whose port the token governs), a generation (4: the
// token's, as its sender knows it; QUERY, ANSWER: the one a recovery
// proposes), then by type:
//
//	UNI_REQ_LINK, BCAST_REQ_LINK: requester (2), request number (4)
//	OWN_LINK_HINT, QUERY, SUSPECT, REDIRECT: sender (2)
//	GRANT_LINK: n (1), n x (host (2), last request served (4)), q (1), q x host (2)
//	ANSWER: sender (2), holds (1: 0 or 1), the sender's current generation (4),
//	        its last request number (4), waits (1: 0 or 1)
const (
	typeGrant    = 1
	typeUniReq   = 2
	typeBcastReq = 3
	typeHint     = 4
	typeQuery    = 5 // recovery: the coordinator asks who holds the token
	typeAnswer   = 6
	typeSuspect  = 7 // a waiting host asks the coordinator to recover the token
	typeRedirect = 8 // a host that does not hold the token answers a UNI_REQ_LINK: ask every host
)

// ctl is a control message, parsed.
type ctl struct {
	typ   uint8
	link  nicfw.HostID
	gen   uint32       // the token's generation (QUERY, ANSWER: the one proposed)
	holds bool         // ANSWER: the answerer holds the token
	cur   uint32       // ANSWER: the answerer's current generation
	waits bool         // ANSWER: the answerer waits for the token
	from  nicfw.HostID // requester, holder or sender
	seq   uint32       // request number (ANSWER: the answerer's last)
	ln    map[nicfw.HostID]uint32
	queue []nicfw.HostID
}

var errBadControl = errors.New("coord: bad control message")

// parse parses a control message's body.
func parse(b []byte) (c ctl, err error) {
	if len(b) < 7 {
		return c, errBadControl
	}
	c.typ, c.link, c.gen = b[0], nicfw.HostID(binary.BigEndian.Uint16(b[1:])), binary.BigEndian.Uint32(b[3:])
	b = b[7:]
	switch c.typ {
	case typeUniReq, typeBcastReq:
		if len(b) != 6 {
			return c, errBadControl
		}
		c.from, c.seq = nicfw.HostID(binary.BigEndian.Uint16(b)), binary.BigEndian.Uint32(b[2:])
	case typeHint, typeQuery, typeSuspect, typeRedirect:
		if len(b) != 2 {
			return c, errBadControl
		}
		c.from = nicfw.HostID(binary.BigEndian.Uint16(b))
	case typeAnswer:
		if len(b) != 12 || b[2] > 1 || b[11] > 1 {
			return c, errBadControl
		}
		c.from, c.holds = nicfw.HostID(binary.BigEndian.Uint16(b)), b[2] == 1
		c.cur, c.seq, c.waits = binary.BigEndian.Uint32(b[3:]), binary.BigEndian.Uint32(b[7:]), b[11] == 1
	case typeGrant:
		if len(b) < 1 {
			return c, errBadControl
		}
		n := int(b[0])
		b = b[1:]
		if len(b) < 6*n+1 {
			return c, errBadControl
		}
		c.ln = make(map[nicfw.HostID]uint32, n)
		for i := range n {
			c.ln[nicfw.HostID(binary.BigEndian.Uint16(b[6*i:]))] = binary.BigEndian.Uint32(b[6*i+2:])
		}
		b = b[6*n:]
		q := int(b[0])
		b = b[1:]
		if len(b) != 2*q {
			return c, errBadControl
		}
		for i := range q {
			h := nicfw.HostID(binary.BigEndian.Uint16(b[2*i:]))
			if slices.Contains(c.queue, h) {
				return c, errBadControl
			}
			c.queue = append(c.queue, h)
		}
	default:
		return c, errBadControl
	}
	return c, nil
}

// request encodes this host's request for l's token, at its current
// generation.
func (m *Module) request(typ uint8, l *link) []byte {
	b := m.head(typ, l.dst, l.cur())
	b = binary.BigEndian.AppendUint16(b, uint16(m.self))
	return binary.BigEndian.AppendUint32(b, l.seq)
}

func (m *Module) hint(l *link) []byte {
	return binary.BigEndian.AppendUint16(m.head(typeHint, l.dst, l.gen), uint16(m.self))
}

// short encodes a message of type typ about l whose only field after the
// generation is this host (QUERY with gen, SUSPECT, REDIRECT), or this
// host and holds (the start of an ANSWER).
func (m *Module) short(typ uint8, l *link, gen uint32, holds ...bool) []byte {
	b := binary.BigEndian.AppendUint16(m.head(typ, l.dst, gen), uint16(m.self))
	if len(holds) > 0 {
		b = append(b, flag(holds[0]))
	}
	return b
}

// answer encodes this host's ANSWER to a QUERY for proposal gen.
func (m *Module) answer(l *link, gen uint32) []byte {
	b := m.short(typeAnswer, l, gen, l.have)
	b = binary.BigEndian.AppendUint32(b, l.cur())
	b = binary.BigEndian.AppendUint32(b, l.seq)
	return append(b, flag(l.waiting))
}

func flag(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

// grant encodes l's token for its next holder, with queue.
func (m *Module) grant(l *link, queue []nicfw.HostID) ([]byte, error) {
	if len(l.ln) > 255 || len(queue) > 255 || 7+1+6*len(l.ln)+1+2*len(queue) > nicfw.MaxControl {
		return nil, fmt.Errorf("coord: a token for %d hosts does not fit a control message", len(l.ln))
	}
	b := append(m.head(typeGrant, l.dst, l.gen), uint8(len(l.ln)))
	hosts := make([]nicfw.HostID, 0, len(l.ln))
	for h := range l.ln {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	for _, h := range hosts {
		b = binary.BigEndian.AppendUint16(b, uint16(h))
		b = binary.BigEndian.AppendUint32(b, l.ln[h])
	}
	b = append(b, uint8(len(queue)))
	for _, h := range queue {
		b = binary.BigEndian.AppendUint16(b, uint16(h))
	}
	return b, nil
}

func (m *Module) head(typ uint8, dst nicfw.HostID, gen uint32) []byte {
	b := append(m.buf[:0], typ)
	b = binary.BigEndian.AppendUint16(b, uint16(dst))
	return binary.BigEndian.AppendUint32(b, gen)
}
