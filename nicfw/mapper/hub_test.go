package mapper

import (
	"net"
	"slices"
	"sync"
	"time"

	"github.com/xam-project/xam/afxdp"
)

// hub is an in-memory Ethernet segment with any number of ends: a frame sent
// by one end reaches every other end whose MAC it is addressed to, or all of
// them for a group address. An end that is down neither sends nor receives.
type hub struct {
	mu   sync.Mutex
	ends []*end
	tap  func(from net.HardwareAddr, frame []byte) // sees every frame sent
}

// end is one attachment to a hub; it implements afxdp.Link.
type end struct {
	h      *hub
	mac    net.HardwareAddr
	in     [][]byte // guarded by h.mu
	lent   [][]byte
	closed bool
}

const hubMTU = 1500

func (h *hub) attach(mac net.HardwareAddr) *end {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := &end{h: h, mac: mac}
	h.ends = append(h.ends, e)
	return e
}

func (e *end) Send(frames [][]byte) (int, error) {
	if err := afxdp.CheckFrames(frames, hubMTU); err != nil {
		return 0, err
	}
	e.h.mu.Lock()
	defer e.h.mu.Unlock()
	if e.closed {
		return 0, net.ErrClosed
	}
	for _, f := range frames {
		if e.h.tap != nil {
			e.h.tap(e.mac, f)
		}
		for _, o := range e.h.ends {
			if o == e || o.closed || f[0]&1 == 0 && !slices.Equal(f[:6], o.mac) {
				continue
			}
			if len(o.in) < 256 {
				o.in = append(o.in, slices.Clone(f))
			}
		}
	}
	return len(frames), nil
}

// inject delivers f to every other end, like Send but without the size
// check: what a broken sender on the wire would produce.
func (e *end) inject(f []byte) {
	e.h.mu.Lock()
	defer e.h.mu.Unlock()
	for _, o := range e.h.ends {
		if o != e && !o.closed {
			o.in = append(o.in, slices.Clone(f))
		}
	}
}

func (e *end) Recv(frames [][]byte) (int, error) {
	e.h.mu.Lock()
	defer e.h.mu.Unlock()
	e.lent = nil
	if e.closed {
		return 0, net.ErrClosed
	}
	n := copy(frames, e.in)
	e.lent = e.in[:n]
	e.in = e.in[n:]
	return n, nil
}

func (e *end) Wait(timeout time.Duration) (bool, error) {
	e.h.mu.Lock()
	defer e.h.mu.Unlock()
	if e.closed {
		return false, net.ErrClosed
	}
	return len(e.in) > 0, nil
}

func (e *end) BatchSize() int                 { return 8 }
func (e *end) MTU() int                       { return hubMTU }
func (e *end) HardwareAddr() net.HardwareAddr { return e.mac }

func (e *end) Close() error {
	e.h.mu.Lock()
	defer e.h.mu.Unlock()
	if e.closed {
		return net.ErrClosed
	}
	e.closed, e.in = true, nil
	return nil
}

var _ afxdp.Link = (*end)(nil)
