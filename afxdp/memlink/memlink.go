package memlink

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/afxdp"
)

// Options configure a pair. The zero value is a perfect link with an MTU of
// 1500 and room for DefaultDepth frames at each end.
type Options struct {
	MTU       int // default 1500; frames up to MTU+14 bytes
	BatchSize int // what BatchSize reports; default afxdp.DefaultBatchSize
	// Depth is the number of frames each end holds for its receiver (its
	// "RX ring"), lent frames included; default DefaultDepth. Frames that
	// find it full are dropped and counted in the receiver's
	// Stats.RxRingFull, as on a NIC.
	Depth int

	// Fault injection, per frame and direction, each a probability in
	// [0, 1]. A lost frame is counted in the receiver's Stats.RxDropped; a
	// duplicated one arrives twice in a row; a reordered one is held back
	// and arrives right after the next frame sent in the same direction (it
	// stays in flight until then: a frame delayed in a switch). Decisions
	// come from a PCG generator per direction seeded with Seed, so a sender
	// that sends the same frames in the same order sees the same faults.
	Loss, Duplicate, Reorder float64
	Seed                     uint64

	// AddrA and AddrB are the ends' MAC addresses; defaults
	// 02:00:00:00:00:0a and 02:00:00:00:00:0b.
	AddrA, AddrB net.HardwareAddr
}

// DefaultDepth is the receive queue depth of each end when Options.Depth is
// zero.
const DefaultDepth = 512

// Faults counts the faults injected into the frames sent to one end.
type Faults struct {
	Lost, Duplicated, Reordered uint64
}

// NewPair returns the two ends of a new in-memory link. It returns an error
// wrapping afxdp.ErrInvalidOptions if opts are out of range.
func NewPair(opts Options) (a, b *Link, err error) {
	if opts.AddrA == nil {
		opts.AddrA = net.HardwareAddr{2, 0, 0, 0, 0, 0x0a}
	}
	if opts.AddrB == nil {
		opts.AddrB = net.HardwareAddr{2, 0, 0, 0, 0, 0x0b}
	}
	if err := opts.fill(); err != nil {
		return nil, nil, err
	}
	if len(opts.AddrA) != 6 || len(opts.AddrB) != 6 {
		return nil, nil, fmt.Errorf("memlink: %w: MAC addresses %v and %v must have 6 bytes", afxdp.ErrInvalidOptions, opts.AddrA, opts.AddrB)
	}
	toA := newQueue(opts, 1)
	toB := newQueue(opts, 2)
	a = newLink(opts, append(net.HardwareAddr(nil), opts.AddrA...), toA, toB)
	b = newLink(opts, append(net.HardwareAddr(nil), opts.AddrB...), toB, toA)
	return a, b, nil
}

// fill sets the zero fields of o that have defaults, and checks the
// others.
func (o *Options) fill() error {
	if o.MTU == 0 {
		o.MTU = 1500
	}
	if o.BatchSize == 0 {
		o.BatchSize = afxdp.DefaultBatchSize
	}
	if o.Depth == 0 {
		o.Depth = DefaultDepth
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("memlink: %w: %s", afxdp.ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	switch {
	case o.MTU < 1 || o.MTU > 65535:
		return bad("MTU %d out of range [1, 65535]", o.MTU)
	case o.BatchSize < 1:
		return bad("batch size %d", o.BatchSize)
	case o.Depth < 1:
		return bad("depth %d", o.Depth)
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"loss", o.Loss}, {"duplicate", o.Duplicate}, {"reorder", o.Reorder}} {
		if !(p.v >= 0 && p.v <= 1) {
			return bad("%s probability %v out of [0, 1]", p.name, p.v)
		}
	}
	return nil
}

// queue holds the frames on their way to one end. The peer's Send is its
// producer and the end's Recv its consumer; mu serialises them.
type queue struct {
	mu     sync.Mutex
	frames [][]byte     // ring of waiting frames (len = frame length)
	head   int          // index of the oldest
	n      int          // number waiting
	queued atomic.Int32 // n, for a Recv that finds none without the lock
	free   [][]byte     // free buffers (cap MTU+14)
	held   []byte       // a reordered frame waiting for the next one, or nil
	closed bool         // the receiving end is closed: frames are discarded
	rng    *rand.Rand
	loss   float64
	dup    float64
	reord  float64

	// notify has a token when frames were queued since the receiver last
	// looked; Wait sleeps on it.
	notify chan struct{}

	lost, duplicated, reordered, ringFull atomic.Uint64
}

func newQueue(opts Options, stream uint64) *queue {
	q := &queue{
		frames: make([][]byte, opts.Depth),
		free:   make([][]byte, opts.Depth),
		rng:    rand.New(rand.NewPCG(opts.Seed, stream)),
		loss:   opts.Loss,
		dup:    opts.Duplicate,
		reord:  opts.Reorder,
		notify: make(chan struct{}, 1),
	}
	max := opts.MTU + afxdp.EthernetHeaderLen
	backing := make([]byte, opts.Depth*max)
	for i := range q.free {
		q.free[i] = backing[i*max : i*max : (i+1)*max]
	}
	return q
}

// push sends one frame through the fault injector; q.mu is held. A held
// (reordered) frame is released after the next frame that is queued.
func (q *queue) push(f []byte) {
	if q.closed {
		return
	}
	if q.loss > 0 && q.rng.Float64() < q.loss {
		q.lost.Add(1)
		return
	}
	copies := 1
	if q.dup > 0 && q.rng.Float64() < q.dup {
		q.duplicated.Add(1)
		copies = 2
	}
	hold := q.held == nil && q.reord > 0 && q.rng.Float64() < q.reord
	if hold {
		if buf := q.take(f); buf != nil {
			q.reordered.Add(1)
			q.held = buf
		}
		copies--
	}
	for ; copies > 0; copies-- {
		if buf := q.take(f); buf != nil {
			q.enqueue(buf)
		}
	}
	if q.held != nil && !hold {
		q.enqueue(q.held)
		q.held = nil
	}
}

// take copies f into a free buffer, or counts a drop and returns nil if
// every buffer is in use.
func (q *queue) take(f []byte) []byte {
	if len(q.free) == 0 {
		q.ringFull.Add(1)
		return nil
	}
	buf := q.free[len(q.free)-1]
	q.free = q.free[:len(q.free)-1]
	return append(buf[:0], f...)
}

// enqueue appends a filled buffer to the waiting frames (there is always a
// slot: buffers and slots are equally many).
func (q *queue) enqueue(buf []byte) {
	q.frames[(q.head+q.n)%len(q.frames)] = buf
	q.n++
	q.queued.Store(int32(q.n))
}

// signal leaves a token for a waiting receiver.
func (q *queue) signal() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// Link is one end of an in-memory pair. It implements afxdp.Link,
// afxdp.Statser and afxdp.Waker with the same contract as afxdp.Socket,
// including lent frames: Recv hands out the link's own buffers, valid until
// the next Recv.
type Link struct {
	mac   net.HardwareAddr
	mtu   int
	batch int
	in    *queue // frames to this end
	out   *queue // frames from this end (the peer's in)

	closed atomic.Bool
	done   chan struct{} // closed by Close
	wake   chan struct{} // a token per pending Wake

	rx struct {
		sync.Mutex
		lent  [][]byte
		timer *time.Timer
	}
	tx sync.Mutex

	txFrames, txBytes, rxFrames, rxBytes, sleeps atomic.Uint64
}

var _ interface {
	afxdp.Link
	afxdp.Statser
	afxdp.Waker
} = (*Link)(nil)

func newLink(opts Options, mac net.HardwareAddr, in, out *queue) *Link {
	l := &Link{
		mac: mac, mtu: opts.MTU, batch: opts.BatchSize, in: in, out: out,
		done: make(chan struct{}),
		wake: make(chan struct{}, 1),
	}
	l.rx.lent = make([][]byte, 0, opts.Depth)
	l.rx.timer = time.NewTimer(time.Hour)
	l.rx.timer.Stop()
	return l
}

// BatchSize implements afxdp.Link.
func (l *Link) BatchSize() int { return l.batch }

// MTU implements afxdp.Link.
func (l *Link) MTU() int { return l.mtu }

// HardwareAddr implements afxdp.Link.
func (l *Link) HardwareAddr() net.HardwareAddr { return l.mac }

// Send implements afxdp.Link. It copies the frames into the peer's receive
// queue, through the fault injector; it never blocks on the peer, and frames
// sent to a closed peer vanish.
func (l *Link) Send(frames [][]byte) (int, error) {
	l.tx.Lock()
	defer l.tx.Unlock()
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	if err := afxdp.CheckFrames(frames, l.mtu); err != nil {
		return 0, err
	}
	if len(frames) == 0 {
		return 0, nil
	}
	var bytes uint64
	q := l.out
	q.mu.Lock()
	for _, f := range frames {
		q.push(f)
		bytes += uint64(len(f))
	}
	q.mu.Unlock()
	q.signal()
	l.txFrames.Add(uint64(len(frames)))
	l.txBytes.Add(bytes)
	return len(frames), nil
}

// Recv implements afxdp.Link.
func (l *Link) Recv(frames [][]byte) (int, error) {
	l.rx.Lock()
	defer l.rx.Unlock()
	if l.closed.Load() {
		return 0, net.ErrClosed
	}
	q := l.in
	if len(l.rx.lent) == 0 && q.queued.Load() == 0 {
		// Nothing lent to give back and nothing waiting: the peer's
		// sends, which take q.mu, are not held up by a receiver that
		// polls.
		return 0, nil
	}
	q.mu.Lock()
	q.free = append(q.free, l.rx.lent...)
	clear(l.rx.lent)
	l.rx.lent = l.rx.lent[:0]
	n := min(len(frames), q.n)
	var bytes uint64
	for i := range n {
		f := q.frames[q.head]
		q.frames[q.head] = nil
		q.head = (q.head + 1) % len(q.frames)
		frames[i] = f[:len(f):len(f)]
		l.rx.lent = append(l.rx.lent, f)
		bytes += uint64(len(f))
	}
	q.n -= n
	q.queued.Store(int32(q.n))
	q.mu.Unlock()
	if n > 0 {
		l.rxFrames.Add(uint64(n))
		l.rxBytes.Add(bytes)
	}
	return n, nil
}

// waiting reports whether frames are queued for this end.
func (l *Link) waiting() bool {
	l.in.mu.Lock()
	defer l.in.mu.Unlock()
	return l.in.n > 0
}

// Wait implements afxdp.Link.
func (l *Link) Wait(timeout time.Duration) (bool, error) {
	l.rx.Lock()
	defer l.rx.Unlock()
	var expired <-chan time.Time
	if timeout > 0 {
		l.rx.timer.Reset(timeout)
		defer l.rx.timer.Stop()
		expired = l.rx.timer.C
	}
	for {
		if l.closed.Load() {
			return false, net.ErrClosed
		}
		if l.waiting() {
			return true, nil
		}
		if timeout == 0 {
			return false, nil
		}
		l.sleeps.Add(1)
		select {
		case <-l.in.notify:
		case <-l.wake:
			return l.waiting(), nil
		case <-l.done:
			return false, net.ErrClosed
		case <-expired:
			return l.waiting(), nil
		}
	}
}

// Wake implements afxdp.Waker.
func (l *Link) Wake() error {
	if l.closed.Load() {
		return net.ErrClosed
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return nil
}

// Flush delivers a frame held back by reordering without waiting for the
// next frame to overtake it.
func (l *Link) Flush() error {
	if l.closed.Load() {
		return net.ErrClosed
	}
	q := l.out
	q.mu.Lock()
	if q.held != nil {
		q.enqueue(q.held)
		q.held = nil
	}
	q.mu.Unlock()
	q.signal()
	return nil
}

// Stats implements afxdp.Statser. RxDropped counts the frames to this end
// lost by fault injection, RxRingFull those dropped because its queue was
// full; the other kernel counters stay zero.
func (l *Link) Stats() (afxdp.Stats, error) {
	if l.closed.Load() {
		return afxdp.Stats{}, net.ErrClosed
	}
	return afxdp.Stats{
		TxFrames:   l.txFrames.Load(),
		TxBytes:    l.txBytes.Load(),
		RxFrames:   l.rxFrames.Load(),
		RxBytes:    l.rxBytes.Load(),
		Sleeps:     l.sleeps.Load(),
		RxDropped:  l.in.lost.Load(),
		RxRingFull: l.in.ringFull.Load(),
	}, nil
}

// Faults returns the faults injected into the frames sent to this end.
func (l *Link) Faults() Faults {
	return Faults{
		Lost:       l.in.lost.Load(),
		Duplicated: l.in.duplicated.Load(),
		Reordered:  l.in.reordered.Load(),
	}
}

// Close implements afxdp.Link. Frames queued for this end and frames sent
// to it later are discarded; the peer is not told.
func (l *Link) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return net.ErrClosed
	}
	close(l.done)
	l.rx.Lock()
	l.tx.Lock()
	defer l.tx.Unlock()
	defer l.rx.Unlock()
	q := l.in
	q.mu.Lock()
	q.closed = true
	q.n, q.held = 0, nil
	q.queued.Store(0)
	clear(q.frames)
	q.mu.Unlock()
	l.rx.lent = nil
	return nil
}
