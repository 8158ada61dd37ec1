package memlink

import (
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/xam-project/xam/afxdp"
)

// Hub is an in-memory Ethernet switch with any number of ports: a frame
// sent on one port reaches the port whose MAC it is addressed to, or every
// other port for a group address. Each port is an afxdp.Link. A Hub takes
// the same Options as a pair: MTU, batch size, the depth of each port's
// receive queue (frames that find it full are dropped, as a switch drops
// on a congested port) and losses (Loss only: decisions from one PCG
// generator seeded with Seed, under the hub's lock).
type Hub struct {
	opts  Options
	mu    sync.Mutex
	rng   *rand.Rand
	ports []*Port
	tap   func(from net.HardwareAddr, frame []byte)
}

// Port is one port of a Hub; it implements afxdp.Link (without Wait's
// blocking: it only checks).
type Port struct {
	h      *Hub
	mac    net.HardwareAddr
	in     [][]byte // guarded by h.mu
	lent   [][]byte
	closed bool
	stats  afxdp.Stats
}

// NewHub returns a switch with no ports. It returns an error wrapping
// afxdp.ErrInvalidOptions if opts are out of range.
func NewHub(opts Options) (*Hub, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if opts.Duplicate != 0 || opts.Reorder != 0 {
		return nil, fmt.Errorf("memlink: %w: a hub loses frames but neither duplicates nor reorders them", afxdp.ErrInvalidOptions)
	}
	return &Hub{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, 0x4855))}, nil
}

// Attach adds a port with MAC 02:00:00:00:01:NN, NN its number from 1.
func (h *Hub) Attach() *Port { return h.attach(nil) }

// AttachMAC adds a port with MAC mac.
func (h *Hub) AttachMAC(mac net.HardwareAddr) *Port { return h.attach(slices.Clone(mac)) }

// attach adds a port with MAC mac, or (nil) the next numbered one.
func (h *Hub) attach(mac net.HardwareAddr) *Port {
	h.mu.Lock()
	defer h.mu.Unlock()
	if mac == nil {
		n := len(h.ports) + 1
		mac = net.HardwareAddr{2, 0, 0, 0, byte(1 + n>>8), byte(n)}
	}
	p := &Port{h: h, mac: mac}
	h.ports = append(h.ports, p)
	return p
}

// SetTap makes f see every frame sent on the hub, with its sender's MAC,
// under the hub's lock (f must not call the hub).
func (h *Hub) SetTap(f func(from net.HardwareAddr, frame []byte)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tap = f
}

// Inject delivers f to every other port, as Send does but without the
// size check and without losses: what a broken sender on the wire
// produces.
func (p *Port) Inject(f []byte) {
	h := p.h
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range h.ports {
		if o != p && !o.closed && len(o.in) < h.opts.Depth {
			o.in = append(o.in, slices.Clone(f))
		}
	}
}

// Send implements afxdp.Link.
func (p *Port) Send(frames [][]byte) (int, error) {
	if err := afxdp.CheckFrames(frames, p.h.opts.MTU); err != nil {
		return 0, err
	}
	h := p.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.closed {
		return 0, net.ErrClosed
	}
	for _, f := range frames {
		if h.tap != nil {
			h.tap(p.mac, f)
		}
		for _, o := range h.ports {
			if o == p || o.closed || f[0]&1 == 0 && !slices.Equal(f[:6], o.mac) {
				continue
			}
			switch {
			case h.opts.Loss > 0 && h.rng.Float64() < h.opts.Loss:
				o.stats.RxDropped++
			case len(o.in) >= h.opts.Depth:
				o.stats.RxRingFull++
			default:
				o.in = append(o.in, slices.Clone(f))
			}
		}
	}
	return len(frames), nil
}

// Recv implements afxdp.Link.
func (p *Port) Recv(frames [][]byte) (int, error) {
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	p.lent = nil
	if p.closed {
		return 0, net.ErrClosed
	}
	n := copy(frames, p.in)
	p.lent = p.in[:n:n]
	p.in = p.in[n:]
	return n, nil
}

// Wait implements afxdp.Link; it does not block, and reports whether a
// frame waits.
func (p *Port) Wait(time.Duration) (bool, error) {
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	if p.closed {
		return false, net.ErrClosed
	}
	return len(p.in) > 0, nil
}

// BatchSize implements afxdp.Link.
func (p *Port) BatchSize() int { return p.h.opts.BatchSize }

// MTU implements afxdp.Link.
func (p *Port) MTU() int { return p.h.opts.MTU }

// HardwareAddr implements afxdp.Link.
func (p *Port) HardwareAddr() net.HardwareAddr { return p.mac }

// Stats implements afxdp.Statser: frames lost on the way to the port
// (RxDropped) and dropped for its full queue (RxRingFull).
func (p *Port) Stats() (afxdp.Stats, error) {
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	return p.stats, nil
}

// Close implements afxdp.Link: the port takes no more frames and sends
// none.
func (p *Port) Close() error {
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	if p.closed {
		return net.ErrClosed
	}
	p.closed, p.in, p.lent = true, nil, nil
	return nil
}

var _ afxdp.Link = (*Port)(nil)
