package nicfw

import (
	"time"

	"github.com/xam-project/xam/afxdp"
)

// Sharing one link between the engine and a module that speaks its own
// protocol in broadcast frames (a LinkUser: the mapper, nicfw/mapper): both
// run in the engine thread. The engine's transport
// receives through a splitLink, which takes the frames sent to the
// Ethernet broadcast address out of each batch (mapper frames are
// broadcast; the transport's are unicast) and keeps copies of them for the
// mapper, which receives them through its mapLink. Both send on the link
// itself. Mapper frames are rare (a probe per host per interval), so the
// copies cost nothing measurable; the transport's frames are not copied.

// mapInbox bounds the mapper frames waiting for the mapper's Poll; more
// are dropped (and counted), as a full receive ring would.
const mapInbox = 64

type splitLink struct {
	afxdp.Link
	inbox   [][]byte // copies of mapper frames, oldest first
	lent    [][]byte // frames the mapper's last Recv returned
	free    [][]byte // buffers to copy into
	dropped uint64   // mapper frames dropped: inbox full
	kept    uint64   // mapper frames set aside
}

func isBroadcast(f []byte) bool {
	return len(f) >= 6 && f[0]&f[1]&f[2]&f[3]&f[4]&f[5] == 0xff
}

// Recv receives a batch and returns the frames that are not broadcast.
func (l *splitLink) Recv(frames [][]byte) (int, error) {
	n, err := l.Link.Recv(frames)
	j := 0
	for _, f := range frames[:n] {
		if !isBroadcast(f) {
			frames[j] = f
			j++
			continue
		}
		if len(l.inbox) >= mapInbox {
			l.dropped++
			continue
		}
		var b []byte
		if k := len(l.free); k > 0 {
			b, l.free = l.free[k-1][:0], l.free[:k-1]
		}
		l.inbox = append(l.inbox, append(b, f...))
		l.kept++
	}
	clear(frames[j:n])
	return j, err
}

// mapSide returns the link the mapper uses.
func (l *splitLink) mapSide() afxdp.Link { return (*mapLink)(l) }

// mapLink is the mapper's view of a splitLink: it receives the mapper
// frames the engine's receives set aside; Send, BatchSize, MTU and
// HardwareAddr are the link's (promoted from the embedded Link).
type mapLink splitLink

// Recv returns the waiting mapper frames; they are valid until the next
// Recv, which recycles them.
func (m *mapLink) Recv(frames [][]byte) (int, error) {
	m.free = append(m.free, m.lent...)
	clear(m.lent)
	m.lent = m.lent[:0]
	n := copy(frames, m.inbox)
	m.lent = append(m.lent, m.inbox[:n]...)
	rest := copy(m.inbox, m.inbox[n:])
	clear(m.inbox[rest:])
	m.inbox = m.inbox[:rest]
	return n, nil
}

// Wait reports whether mapper frames are waiting; it does not block (the
// engine thread receives for the mapper).
func (m *mapLink) Wait(time.Duration) (bool, error) { return len(m.inbox) > 0, nil }

// Close does nothing: the link belongs to the daemon's owner.
func (m *mapLink) Close() error { return nil }
