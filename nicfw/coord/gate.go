package coord

import (
	"time"

	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// The send gate: a message above Config.Threshold waits for its link's
// token, and with LinkRate and PortBuffer its holder paces it to what the
// switch's port can queue (the package documentation's Model, and What
// pacing bounds for what the pacing leaves out).

// MaySend is the gate (nicfw.SendGate): a message above Threshold leaves
// only while this host holds dst's token for src.
func (m *Module) MaySend(src nicfw.EndpointID, dst nicfw.HostID, size, left int) bool {
	m.renumber()
	if size <= m.cfg.Threshold {
		if size == left {
			m.stats.Bypassed++
		}
		return true
	}
	if m.cfg.LinkRate == 0 && left < size && left <= m.cfg.EarlyRelease {
		return true // the tail of a message that released its token early
	}
	l := m.link(dst)
	switch {
	case l.have && l.using:
		if l.user == src && !l.draining {
			if m.ahead(l, left) {
				m.stats.Paced++
				return false
			}
			return true // the rest of its message
		}
	case l.have:
		// What the last holder may have left queued at the port: as much
		// as it released the token early by.
		l.using, l.user, l.size, l.left = true, src, size, size
		l.queued, l.qAt = float64(m.early(size)), m.bp.Now()
		if !m.ahead(l, left) {
			return true
		}
		m.stats.Paced++
		return false
	default:
		m.want(l)
	}
	m.stats.Held++
	return false
}

// Sent is the gate's news that a unit of src's message to dst left, left
// bytes of it after it: the token passes on when the message is done, or
// is down to EarlyRelease bytes.
func (m *Module) Sent(src nicfw.EndpointID, dst nicfw.HostID, left int) {
	l := m.links[dst]
	if l == nil || !l.using || l.draining || l.user != src {
		return
	}
	if m.cfg.LinkRate > 0 {
		// The token passes on once the port is down to the early bytes
		// (Early Token Release) of what it queued.
		m.drain(l)
		l.queued += float64(wireBytes(max(0, l.left-left)))
		l.left = left
		if left > 0 {
			return
		}
		early := m.early(l.size)
		if early > 0 {
			m.stats.Early++
		}
		if wait := time.Duration((l.queued - float64(early)) * 8 / float64(m.cfg.LinkRate) * float64(time.Second)); wait > 0 {
			l.draining = true
			m.bp.After(wait, func() {
				if m.links[l.dst] != l {
					return // forgotten meanwhile (renumber)
				}
				l.draining, l.using = false, false
				m.passOn(l)
			})
			return
		}
	} else if left > m.cfg.EarlyRelease {
		return
	} else if left > 0 {
		m.stats.Early++
	}
	l.using = false
	m.passOn(l)
}

// early returns the wire bytes of a message of size bytes that may still
// queue at the port when its token passes on (LinkRate): EarlyRelease, and
// when paced (PortBuffer) no more than the pacing's bound. The next holder
// takes the port to queue that much when it takes the token, and paces
// its own first chunk accordingly.
func (m *Module) early(size int) int {
	e := min(m.cfg.EarlyRelease, wireBytes(size))
	if m.cfg.PortBuffer > 0 {
		e = min(e, m.paceBound())
	}
	return e
}

// paceBound is the wire bytes a paced holder lets the port queue at most.
func (m *Module) paceBound() int { return m.cfg.PortBuffer * 3 / 4 }

// ahead reports whether the next unit of the message holding l's token,
// left bytes of it still to send, would make the port queue more than the
// pacing's bound (LinkRate and PortBuffer; without them never). A unit
// larger than the bound waits for an empty queue.
func (m *Module) ahead(l *link, left int) bool {
	if m.cfg.LinkRate == 0 || m.cfg.PortBuffer == 0 {
		return false
	}
	m.drain(l)
	next := wireBytes(min(left, m.bp.MaxUnit()))
	return l.queued > 0 && l.queued+float64(next) > float64(m.paceBound())
}

// drain brings l's estimate of the port's queue to now: the link has
// carried LinkRate's worth since, and a queue does not go below empty (a
// sender that could not send meanwhile earns no credit).
func (m *Module) drain(l *link) {
	now := m.bp.Now()
	l.queued = max(0, l.queued-now.Sub(l.qAt).Seconds()*float64(m.cfg.LinkRate)/8)
	l.qAt = now
}

// unitOverhead is what a unit of a message adds to its bytes before they
// are cut into cells, at most: the engine's message header and extension
// with every argument (24 + 24 + 8 x 8), the transport's header (20), the
// acknowledgements it carries for the destination (4 bytes each; room for
// 16, a transport's channels to one host by default and in the
// benchmarks) and the AAL5 trailer (8).
const unitOverhead = 24 + 24 + 8*endpoint.MaxShortArgs + 20 + 16*4 + cells.TrailerSize

// framedCells is how many cells a frame of a 1500-byte MTU carries; a
// larger MTU carries more, so the estimate errs on the safe side there.
var framedCells = cells.CellsPerFrame(1500)

// wireBytes returns at least how many bytes a unit of n bytes of a message
// takes on the wire: its bytes and headers (unitOverhead) in 53-byte cells
// of 48, the cells in frames of a 1500-byte MTU, each with its Ethernet
// and frame header. It must not be low: the pacing's estimate of the
// port's queue adds it up over a whole stream, and the port keeps what the
// estimate misses for as long as it stays busy, holder after holder (an
// estimate 0.3% low, as a flat 2% for headers was, let the real queue
// grow by about 75 bytes a 48 KB message until it overflowed a 16 KB port
// after some 70 messages: TestPacingEstimate).
func wireBytes(n int) int {
	if n <= 0 {
		return 0
	}
	c := (n + unitOverhead + cells.PayloadSize - 1) / cells.PayloadSize
	frames := (c + framedCells - 1) / framedCells
	return c*cells.CellSize + frames*(cells.EthernetHeaderSize+cells.FrameHeaderSize)
}
