package mapper

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
)

// Message types.
const (
	TypeProbe uint8 = 1
	TypeTable uint8 = 2
)

// Wire constants (see the package documentation).
const (
	Version    = 1
	HeaderLen  = 24
	EntryLen   = 10
	flagPriv   = 1 << 0
	defaultVCI = 16
)

// Errors of the message parser, wrapped with context.
var (
	// ErrTruncated: a message shorter than its header or its entries.
	ErrTruncated = errors.New("mapper: message truncated")
	// ErrMalformed: a message that breaks a rule of the format.
	ErrMalformed = errors.New("mapper: malformed message")
	// ErrInvalidConfig: a Config that New refuses.
	ErrInvalidConfig = errors.New("mapper: invalid config")
)

// Entry is one host of a TABLE message.
type Entry struct {
	ID    HostID
	MAC   [6]byte
	Queue uint16
}

// Message is a decoded PROBE or TABLE.
type Message struct {
	Type       uint8
	Privileged bool
	MAC        [6]byte
	Queue      uint16
	Epoch      uint64
	Entries    []Entry // TABLE only
}

// Append appends m's encoding to dst.
func (m *Message) Append(dst []byte) []byte {
	var flags uint8
	if m.Privileged {
		flags |= flagPriv
	}
	dst = append(dst, Version, m.Type, flags, 0)
	dst = append(dst, m.MAC[:]...)
	dst = binary.BigEndian.AppendUint16(dst, m.Queue)
	dst = binary.BigEndian.AppendUint64(dst, m.Epoch)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(m.Entries)))
	dst = append(dst, 0, 0)
	for _, e := range m.Entries {
		dst = binary.BigEndian.AppendUint16(dst, uint16(e.ID))
		dst = append(dst, e.MAC[:]...)
		dst = binary.BigEndian.AppendUint16(dst, e.Queue)
	}
	return dst
}

// Parse decodes and checks a message. Entries is a new slice; Parse keeps
// no reference to p. Errors wrap ErrTruncated or ErrMalformed.
func Parse(p []byte) (Message, error) {
	var m Message
	if len(p) < HeaderLen {
		return m, fmt.Errorf("%w: %d bytes, the header is %d", ErrTruncated, len(p), HeaderLen)
	}
	if p[0] != Version {
		return m, fmt.Errorf("%w: version %d", ErrMalformed, p[0])
	}
	m.Type = p[1]
	m.Privileged = p[2]&flagPriv != 0
	m.MAC = [6]byte(p[4:10])
	m.Queue = binary.BigEndian.Uint16(p[10:])
	m.Epoch = binary.BigEndian.Uint64(p[12:])
	n := int(binary.BigEndian.Uint16(p[20:]))
	body := p[HeaderLen:]
	switch {
	case m.Type != TypeProbe && m.Type != TypeTable:
		return m, fmt.Errorf("%w: type %d", ErrMalformed, m.Type)
	case isGroup(m.MAC):
		return m, fmt.Errorf("%w: sender MAC %v is a group address", ErrMalformed, net.HardwareAddr(m.MAC[:]))
	case len(body) < n*EntryLen:
		return m, fmt.Errorf("%w: %d entries need %d bytes, %d follow", ErrTruncated, n, n*EntryLen, len(body))
	case len(body) > n*EntryLen:
		return m, fmt.Errorf("%w: %d bytes after %d entries", ErrMalformed, len(body)-n*EntryLen, n)
	case m.Type == TypeProbe && n != 0:
		return m, fmt.Errorf("%w: PROBE with %d entries", ErrMalformed, n)
	case m.Type == TypeTable && !m.Privileged:
		return m, fmt.Errorf("%w: TABLE from an unprivileged sender", ErrMalformed)
	case m.Type == TypeTable && n == 0:
		return m, fmt.Errorf("%w: empty TABLE", ErrMalformed)
	}
	if n == 0 {
		return m, nil
	}
	m.Entries = make([]Entry, n)
	for i := range m.Entries {
		b := body[i*EntryLen : (i+1)*EntryLen]
		e := Entry{ID: HostID(binary.BigEndian.Uint16(b)), MAC: [6]byte(b[2:8]), Queue: binary.BigEndian.Uint16(b[8:])}
		for _, f := range m.Entries[:i] {
			if f.ID == e.ID {
				return Message{}, fmt.Errorf("%w: entry %d repeats id %d", ErrMalformed, i, e.ID)
			}
		}
		if isGroup(e.MAC) || i > 0 && bytes.Compare(m.Entries[i-1].MAC[:], e.MAC[:]) >= 0 {
			return Message{}, fmt.Errorf("%w: entry %d: MAC %v out of order or a group address", ErrMalformed, i, net.HardwareAddr(e.MAC[:]))
		}
		m.Entries[i] = e
	}
	return m, nil
}

// isGroup reports whether mac is a multicast or broadcast address.
func isGroup(mac [6]byte) bool { return mac[0]&1 != 0 }
