//go:build linux

package afxdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket is an AF_XDP socket bound to one queue of one device, with four
// rings and either a UMEM of its own (Open) or a share of a UMEM that other
// sockets use too (UMEM.Open, OpenShared). It implements Link, Statser,
// FDer and Waker.
//
// # Threads and ownership
//
// The socket has two sides, each behind its own mutex, so that one
// goroutine can send while another receives:
//
//   - the RX side (Recv, Wait) owns the fill and RX rings, the socket's
//     receive chunks and the list of chunks lent to the caller by the last
//     Recv;
//   - the TX side (Send) owns the TX and completion rings, the socket's
//     transmit chunks and their free list.
//
// Close, Stats, FD, Wake and Info may be called from any goroutine. Close
// takes both sides' mutexes, after waking a blocked Wait, so it never unmaps
// a ring under a running Send or Recv.
type Socket struct {
	info  Info
	mac   net.HardwareAddr
	mtu   int
	batch int
	umem  *umem // a reference to the mapping, dropped when the socket is done with it
	part  share // the socket's chunks; read-only after Open
	mb    bool  // bound with XDP_USE_SG (Options.MultiBuffer)

	// shared is the UMEM handle the socket was opened on (nil for Open),
	// netns the inode of the network namespace it was opened in.
	shared *UMEM
	netns  uint64

	closed atomic.Bool

	// fds guards the descriptors against Close for the callers that are not
	// one of the two sides (Stats, FD, Wake).
	fds struct {
		sync.RWMutex
		sock int // the AF_XDP socket; -1 after Close
		ev   int // eventfd that wakes Wait (Wake, Close); -1 after Close
	}

	rx struct {
		sync.Mutex
		fill       fillQueue
		rx         rxQueue
		lent       []uint64 // chunks lent to the caller by the last Recv, not yet on the fill ring
		sock, ev   int      // copies of the descriptors, valid while !closed
		needWakeup bool     // honour the fill ring's need_wakeup flag
		busyPoll   bool     // drive the driver with recvfrom when empty
		spin       time.Duration
		pollfds    [2]unix.PollFd
		// umemPending: Close found frames lent and left the UMEM mapped
		// for the next Recv to unmap, so that a receiver still reading
		// them does not fault.
		umemPending bool
		// Multi-buffer frames (Options.MultiBuffer) are gathered into
		// buffers of the socket's: partial is the frame whose last
		// descriptor has not come yet (nil: none; bad once it is known to
		// be dropped), gathered the buffers lent by the last Recv, spare
		// the others.
		partial         []byte
		partialBad      bool
		gathered, spare [][]byte
	}

	tx struct {
		sync.Mutex
		tx       txQueue
		comp     completionQueue
		free     []uint64 // free TX chunks (a stack)
		sock     int
		zeroCopy bool
		kickAll  bool // kick on every send (no need_wakeup, or copy mode)
		rawKick  bool // make the sendto calls raw system calls (see kick)
		// meta is the TX metadata in front of each frame (TxMetadataLen
		// with Options.TxTimestamps, else 0); lastStamp and stamped the
		// last completed frame's stamp and how many were stamped.
		meta      uint64
		lastStamp uint64
		stamped   uint64
	}

	stats struct {
		txFrames, txBytes, rxFrames, rxBytes atomic.Uint64
		txKicks, txDropped, rxKicks, sleeps  atomic.Uint64
		rxBad                                atomic.Uint64
	}
}

var _ interface {
	Link
	Statser
	FDer
	Waker
} = (*Socket)(nil)

// Info returns how the socket was set up.
func (s *Socket) Info() Info { return s.info }

// BatchSize returns Options.BatchSize.
func (s *Socket) BatchSize() int { return s.batch }

// MTU returns Info().MTU.
func (s *Socket) MTU() int { return s.mtu }

// HardwareAddr returns the device's MAC address.
func (s *Socket) HardwareAddr() net.HardwareAddr { return s.mac }

// FD returns the socket's descriptor, for the XSKMAP, or -1 after Close.
func (s *Socket) FD() int {
	s.fds.RLock()
	defer s.fds.RUnlock()
	return s.fds.sock
}

// Send implements Link. In copy mode the kernel transmits inside the sendto
// that Send makes (TxBudget frames per call, repeated until the TX ring is
// empty), so the frames have left when it returns; in zero-copy mode Send
// wakes the driver only if it asks (need_wakeup) and the frames leave
// asynchronously. Send waits, kicking the kernel, only when all transmit
// chunks are in flight; a device that makes no progress for a second makes
// it fail.
func (s *Socket) Send(frames [][]byte) (int, error) {
	s.tx.Lock()
	defer s.tx.Unlock()
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	if err := CheckFrames(frames, s.mtu); err != nil {
		return 0, err
	}
	if s.mb {
		for _, f := range frames {
			if uint64(len(f)) > s.part.frameSize {
				return s.sendMulti(frames)
			}
		}
	}
	var sent, idle int
	var bytes uint64
	var stalledSince time.Time
	for sent < len(frames) {
		s.reap()
		n := min(uint32(len(frames)-sent), uint32(len(s.tx.free)))
		n = s.tx.tx.free(n)
		if n == 0 {
			if err := s.stall(&idle, &stalledSince); err != nil {
				s.countTx(sent, bytes)
				return sent, err
			}
			continue
		}
		idle, stalledSince = 0, time.Time{}
		free := s.tx.free
		for i := uint32(0); i < n; i++ {
			f := frames[sent+int(i)]
			addr := free[len(free)-1-int(i)]
			d := unix.XDPDesc{Addr: addr, Len: uint32(len(f))}
			if m := s.tx.meta; m != 0 {
				s.requestStamp(addr)
				d.Addr, d.Options = addr+m, unix.XDP_TX_METADATA
			}
			copy(s.part.mem[d.Addr:addr+s.part.frameSize], f)
			s.tx.tx.set(i, d)
			bytes += uint64(len(f))
		}
		s.tx.free = free[:len(free)-int(n)]
		s.tx.tx.submit(n)
		sent += int(n)
	}
	err := s.flush()
	s.countTx(sent, bytes)
	return sent, err
}

// sendMulti is Send for frames some of which span several chunks
// (Options.MultiBuffer): each frame takes as many transmit chunks and
// descriptors as it needs, every descriptor but its last marked
// XDP_PKT_CONTD, and a frame's descriptors are published together.
func (s *Socket) sendMulti(frames [][]byte) (int, error) {
	fs := s.part.frameSize
	var sent, idle int
	var bytes uint64
	var stalledSince time.Time
	for sent < len(frames) {
		f := frames[sent]
		need := uint32((uint64(len(f)) + fs - 1) / fs)
		if uint32(len(s.tx.free)) < need {
			s.reap() // only when short: not a completion-ring read per frame
		}
		if uint32(len(s.tx.free)) < need || s.tx.tx.free(need) < need {
			if err := s.stall(&idle, &stalledSince); err != nil {
				s.countTx(sent, bytes)
				return sent, err
			}
			continue
		}
		idle, stalledSince = 0, time.Time{}
		free := s.tx.free
		for i := uint32(0); i < need; i++ {
			part := f[uint64(i)*fs : min(uint64(i+1)*fs, uint64(len(f)))]
			addr := free[len(free)-1-int(i)]
			copy(s.part.mem[addr:addr+fs], part)
			d := unix.XDPDesc{Addr: addr, Len: uint32(len(part))}
			if i+1 < need {
				d.Options = unix.XDP_PKT_CONTD
			}
			s.tx.tx.set(i, d)
		}
		s.tx.free = free[:len(free)-int(need)]
		s.tx.tx.submit(need)
		bytes += uint64(len(f))
		sent++
	}
	err := s.flush()
	s.countTx(sent, bytes)
	return sent, err
}

// stall is Send's wait while every transmit chunk (or TX ring slot) it
// needs is in flight: it makes the kernel progress, after a while gives it
// the CPU, and fails once no completion came for stallTimeout. idle and
// since are the wait's state, reset by the caller when it makes progress.
func (s *Socket) stall(idle *int, since *time.Time) error {
	if err := s.flush(); err != nil {
		return err
	}
	if *idle++; *idle < 16 {
		return nil
	}
	time.Sleep(20 * time.Microsecond)
	if since.IsZero() {
		*since = time.Now()
	} else if time.Since(*since) > stallTimeout {
		return fmt.Errorf("afxdp: %s queue %d: transmit stalled: no completions in %v",
			s.info.Ifname, s.info.Queue, stallTimeout)
	}
	return nil
}

func (s *Socket) countTx(frames int, bytes uint64) {
	if frames > 0 {
		s.stats.txFrames.Add(uint64(frames))
		s.stats.txBytes.Add(bytes)
	}
}

// reap moves completed TX chunks back to the free list. The free list has
// room for every TX chunk, so the completions always fit; an address that is
// not one of the socket's TX chunks (the kernel never returns one) is
// dropped.
func (s *Socket) reap() {
	free := s.tx.free
	spare := free[len(free):cap(free)]
	n := s.tx.comp.reap(spare)
	k := 0
	for _, a := range spare[:n] {
		if s.part.isTx(a) {
			c := s.part.chunk(a)
			if s.tx.meta != 0 {
				s.readStamp(c)
			}
			spare[k] = c
			k++
		}
	}
	s.tx.free = free[:len(free)+k]
}

// requestStamp writes the TX metadata of the chunk at addr: a time stamp
// requested, none yet.
func (s *Socket) requestStamp(addr uint64) {
	m := s.part.mem[addr : addr+TxMetadataLen]
	binary.LittleEndian.PutUint64(m[0:], unix.XDP_TXMD_FLAGS_TIMESTAMP)
	clear(m[8:])
}

// readStamp notes the time stamp the kernel wrote in the completed chunk
// at addr, if any.
func (s *Socket) readStamp(addr uint64) {
	m := s.part.mem[addr : addr+TxMetadataLen]
	if binary.LittleEndian.Uint64(m[0:])&unix.XDP_TXMD_FLAGS_TIMESTAMP == 0 {
		return
	}
	if ts := binary.LittleEndian.Uint64(m[8:]); ts != 0 {
		s.tx.lastStamp = ts
		s.tx.stamped++
	}
}

// TxStamp returns the transmit time stamp of the last frame that has
// completed (Options.TxTimestamps; 0 if none was stamped) and how many
// were stamped since Open. It takes the completions waiting first. The
// stamp is in ns on the NIC's clock where the driver stamps, or on
// CLOCK_TAI (TAINow) in copy mode.
func (s *Socket) TxStamp() (ns, stamped uint64) {
	s.tx.Lock()
	defer s.tx.Unlock()
	if !s.closed.Load() {
		s.reap()
	}
	return s.tx.lastStamp, s.tx.stamped
}

// TAINow returns CLOCK_TAI in ns: the clock of copy mode's transmit
// stamps.
func TAINow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_TAI, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano())
}

// flush makes the kernel process the TX ring. In copy mode it calls sendto
// until the kernel has consumed every descriptor (each call transmits up to
// the TX budget and returns EAGAIN while more remain, or while the socket's
// send buffer is full of frames the receiving side has not processed yet);
// in zero-copy mode it wakes the driver if the driver asks for it. A kernel
// that makes no progress gets the CPU for a moment (ksoftirqd may need it
// to process the frames already sent), and after stallTimeout without
// progress flush fails.
func (s *Socket) flush() error {
	pending := s.tx.tx.pending()
	if pending == 0 {
		return nil
	}
	if s.tx.zeroCopy {
		if !s.tx.kickAll && !s.tx.tx.needWakeup() {
			return nil
		}
		s.stats.txKicks.Add(1)
		return s.kickErr(kick(s.tx.sock, s.tx.rawKick))
	}
	var idle int
	var stalledSince time.Time
	for pending > 0 {
		s.stats.txKicks.Add(1)
		if err := s.kickErr(kick(s.tx.sock, s.tx.rawKick)); err != nil {
			return err
		}
		left := s.tx.tx.pending()
		if left < pending {
			pending, idle, stalledSince = left, 0, time.Time{}
			continue
		}
		if idle++; idle < 16 {
			continue
		}
		if stalledSince.IsZero() {
			stalledSince = time.Now()
		} else if time.Since(stalledSince) > stallTimeout {
			return fmt.Errorf("afxdp: %s queue %d: transmit stalled: kernel consumed none of %d descriptors in %v",
				s.info.Ifname, s.info.Queue, pending, stallTimeout)
		}
		time.Sleep(20 * time.Microsecond)
	}
	return nil
}

// stallTimeout is how long Send waits for a kernel that makes no progress.
const stallTimeout = time.Second

// kickErr sorts the errors of a sendto: EAGAIN (budget used up, or retry),
// ENOBUFS (no skb) and EBUSY (a frame was dropped, and completed) are part
// of transmitting; the rest (ENETDOWN, ENXIO, ...) are returned.
func (s *Socket) kickErr(err error) error {
	switch err {
	case nil, unix.EAGAIN, unix.ENOBUFS:
		return nil
	case unix.EBUSY:
		s.stats.txDropped.Add(1)
		return nil
	}
	return fmt.Errorf("afxdp: %s queue %d: sendto: %w", s.info.Ifname, s.info.Queue, err)
}

// Recv implements Link. The frames are slices of the UMEM, capped to their
// length; Recv gives the chunks of the previous call back to the fill ring
// before it looks for new ones.
func (s *Socket) Recv(frames [][]byte) (int, error) {
	s.rx.Lock()
	defer s.rx.Unlock()
	if s.closed.Load() {
		// Calling Recv gives the lent frames back, closed or not. A Close
		// that has not taken the RX side yet then finds none lent and
		// drops the UMEM reference itself; one that has left it to us.
		// (Without this, a Recv that saw the flag before Close took the
		// RX side would leave the UMEM mapped for good.)
		s.rx.lent = s.rx.lent[:0]
		if s.rx.umemPending {
			s.rx.umemPending = false
			s.umem.put()
		}
		return 0, net.ErrClosed
	}
	if len(s.rx.lent) > 0 {
		// The fill ring holds as many entries as there are RX chunks, so
		// it always has room for the ones we hold; were it ever short, the
		// rest would wait for the next call.
		k := s.rx.fill.free(uint32(len(s.rx.lent)))
		s.rx.fill.fill(s.rx.lent[:k])
		s.rx.lent = s.rx.lent[:copy(s.rx.lent, s.rx.lent[k:])]
	}
	if len(s.rx.gathered) > 0 {
		s.rx.spare = append(s.rx.spare, s.rx.gathered...)
		s.rx.gathered = s.rx.gathered[:0]
	}
	if len(frames) == 0 {
		return 0, nil
	}
	n, idx := s.rx.rx.peek(uint32(len(frames)))
	if n == 0 {
		if s.rx.busyPoll || (s.rx.needWakeup && s.rx.fill.needWakeup()) {
			s.stats.rxKicks.Add(1)
			wakeRx(s.rx.sock)
		}
		return 0, nil
	}
	k := 0
	var bytes uint64
	for i := uint32(0); i < n; i++ {
		d := s.rx.rx.get(idx + i)
		f, ok := s.part.frame(d.Addr, d.Len)
		if s.part.isRx(d.Addr) {
			s.rx.lent = append(s.rx.lent, s.part.chunk(d.Addr))
		}
		if s.mb && (d.Options&unix.XDP_PKT_CONTD != 0 || s.rx.partial != nil) {
			if f, ok = s.gather(f, ok, d.Options&unix.XDP_PKT_CONTD != 0); f == nil && ok {
				continue // more of the frame follows
			}
		}
		if !ok {
			s.stats.rxBad.Add(1)
			continue
		}
		frames[k] = f
		bytes += uint64(len(f))
		k++
	}
	s.rx.rx.release(n)
	s.stats.rxFrames.Add(uint64(k))
	s.stats.rxBytes.Add(bytes)
	return k, nil
}

// gather adds f, one descriptor's bytes of a multi-buffer frame (ok false:
// a descriptor that was not valid), to the frame being gathered. It
// returns the whole frame with ok true when f was its last (more false),
// nil and true while more follows, and nil and false for the last of a
// frame that is dropped: one with an invalid descriptor, or longer than
// the MTU allows.
func (s *Socket) gather(f []byte, ok, more bool) ([]byte, bool) {
	r := &s.rx
	if r.partial == nil {
		if k := len(r.spare); k > 0 {
			r.partial, r.spare = r.spare[k-1][:0], r.spare[:k-1]
		} else {
			r.partial = make([]byte, 0, s.mtu+EthernetHeaderLen)
		}
		r.partialBad = false
	}
	if !ok || len(r.partial)+len(f) > s.mtu+EthernetHeaderLen {
		r.partialBad = true
	}
	if !r.partialBad {
		r.partial = append(r.partial, f...)
	}
	if more {
		return nil, true
	}
	whole, bad := r.partial, r.partialBad
	r.partial = nil
	if bad {
		r.spare = append(r.spare, whole)
		return nil, false
	}
	r.gathered = append(r.gathered, whole)
	return whole, true
}

// Wait implements Link: it spins on the RX ring's producer index for up to
// Options.Spin, then sleeps in poll(2) on the socket and the eventfd that
// Wake and Close write.
func (s *Socket) Wait(timeout time.Duration) (bool, error) {
	s.rx.Lock()
	defer s.rx.Unlock()
	if s.closed.Load() {
		return false, net.ErrClosed
	}
	if s.rx.rx.peekReady() {
		return true, nil
	}
	if timeout == 0 {
		return false, nil
	}
	start := time.Now()
	if spin := s.rx.spin; spin > 0 {
		if timeout > 0 {
			spin = min(spin, timeout)
		}
		for time.Since(start) < spin {
			if s.rx.rx.peekReady() {
				return true, nil
			}
			if s.closed.Load() {
				return false, net.ErrClosed
			}
		}
	}
	if s.rx.needWakeup && s.rx.fill.needWakeup() {
		s.stats.rxKicks.Add(1)
		wakeRx(s.rx.sock)
	}
	for {
		var ts *unix.Timespec
		if timeout > 0 {
			left := timeout - time.Since(start)
			if left <= 0 {
				return s.rx.rx.peekReady(), nil
			}
			t := unix.NsecToTimespec(left.Nanoseconds())
			ts = &t
		}
		s.rx.pollfds[0].Revents, s.rx.pollfds[1].Revents = 0, 0
		s.stats.sleeps.Add(1)
		_, err := unix.Ppoll(s.rx.pollfds[:], ts, nil)
		if err != nil && err != unix.EINTR {
			return false, fmt.Errorf("afxdp: %s queue %d: poll: %w", s.info.Ifname, s.info.Queue, err)
		}
		if s.closed.Load() {
			return false, net.ErrClosed
		}
		if s.rx.pollfds[1].Revents&unix.POLLIN != 0 {
			var buf [8]byte
			unix.Read(s.rx.ev, buf[:]) // reset the eventfd: this Wake is used up
			return s.rx.rx.peekReady(), nil
		}
		if s.rx.rx.peekReady() {
			return true, nil
		}
		if s.rx.pollfds[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) != 0 {
			return false, fmt.Errorf("afxdp: %s queue %d: poll: socket error (revents %#x)",
				s.info.Ifname, s.info.Queue, s.rx.pollfds[0].Revents)
		}
	}
}

// Metadata returns the n bytes in front of frame in its UMEM chunk: the
// metadata an XDP program put there (bpf_xdp_adjust_meta) for a frame that
// Recv lent; nil for a frame that Recv did not lend from this socket's
// chunks (one gathered from several chunks, or a copy). Valid as long as
// the frame is.
func (s *Socket) Metadata(frame []byte, n int) []byte { return s.part.metadata(frame, n) }

// kickRx wakes the kernel's receive side if the fill ring asks for it
// (need_wakeup), before a sleep on the socket (Queues.Wait).
func (s *Socket) kickRx() {
	s.rx.Lock()
	defer s.rx.Unlock()
	if !s.closed.Load() && s.rx.needWakeup && s.rx.fill.needWakeup() {
		s.stats.rxKicks.Add(1)
		wakeRx(s.rx.sock)
	}
}

// eventOne is the 8-byte counter increment written to the eventfd.
var eventOne = func() (b [8]byte) {
	*(*uint64)(unsafe.Pointer(&b)) = 1
	return b
}()

// Wake implements Waker.
func (s *Socket) Wake() error {
	s.fds.RLock()
	defer s.fds.RUnlock()
	if s.fds.ev < 0 {
		return net.ErrClosed
	}
	if _, err := unix.Write(s.fds.ev, eventOne[:]); err != nil && err != unix.EAGAIN {
		return fmt.Errorf("afxdp: waking: %w", err)
	}
	return nil
}

// Stats implements Statser: the socket's counters and the kernel's
// XDP_STATISTICS.
func (s *Socket) Stats() (Stats, error) {
	s.fds.RLock()
	defer s.fds.RUnlock()
	if s.fds.sock < 0 {
		return Stats{}, net.ErrClosed
	}
	var ks unix.XDPStatistics
	if _, err := getsockopt(s.fds.sock, unix.SOL_XDP, unix.XDP_STATISTICS, unsafe.Pointer(&ks), unsafe.Sizeof(ks)); err != nil {
		return Stats{}, fmt.Errorf("afxdp: %s queue %d: XDP_STATISTICS: %w", s.info.Ifname, s.info.Queue, err)
	}
	return Stats{
		TxFrames:             s.stats.txFrames.Load(),
		TxBytes:              s.stats.txBytes.Load(),
		RxFrames:             s.stats.rxFrames.Load(),
		RxBytes:              s.stats.rxBytes.Load(),
		TxKicks:              s.stats.txKicks.Load(),
		TxDropped:            s.stats.txDropped.Load(),
		RxKicks:              s.stats.rxKicks.Load(),
		Sleeps:               s.stats.sleeps.Load(),
		RxDropped:            ks.Rx_dropped,
		RxInvalidDescs:       ks.Rx_invalid_descs + s.stats.rxBad.Load(),
		TxInvalidDescs:       ks.Tx_invalid_descs,
		RxRingFull:           ks.Rx_ring_full,
		RxFillRingEmptyDescs: ks.Rx_fill_ring_empty_descs,
		TxRingEmptyDescs:     ks.Tx_ring_empty_descs,
	}, nil
}

// Close implements Link. It wakes a blocked Wait, waits for a running Send
// and Recv to return, unmaps the rings, closes the socket (the kernel then
// removes it from any XSKMAP and releases the queue, asynchronously; see
// Options.BindTimeout) and drops its reference to the UMEM, unless the last
// Recv's frames are still lent: then the receiver's next Recv drops it. A
// UMEM is unmapped when its last reference goes: at once for a socket with
// a UMEM of its own; for a shared one, when its last socket and the UMEM
// handle are closed.
func (s *Socket) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return net.ErrClosed
	}
	s.Wake()
	s.rx.Lock()
	s.tx.Lock()
	defer s.tx.Unlock()
	defer s.rx.Unlock()
	if len(s.rx.lent) > 0 {
		s.rx.umemPending = true
	}
	return s.release()
}

// release unmaps and closes whatever exists, and drops the socket's
// reference to the UMEM unless frames are lent.
func (s *Socket) release() error {
	var errs []error
	for _, r := range []*ring{&s.rx.fill.ring, &s.rx.rx.ring, &s.tx.tx.ring, &s.tx.comp.ring} {
		if err := r.unmap(); err != nil {
			errs = append(errs, fmt.Errorf("unmapping ring: %w", err))
		}
	}
	if s.shared != nil {
		// Before the descriptor closes: UMEM.Open must not bind to it.
		s.shared.detach(s)
	}
	s.fds.Lock()
	for _, fd := range []*int{&s.fds.sock, &s.fds.ev} {
		if *fd >= 0 {
			if err := unix.Close(*fd); err != nil {
				errs = append(errs, fmt.Errorf("closing descriptor: %w", err))
			}
			*fd = -1
		}
	}
	s.fds.Unlock()
	if s.umem != nil && !s.rx.umemPending {
		if err := s.umem.put(); err != nil {
			errs = append(errs, fmt.Errorf("unmapping UMEM: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("afxdp: %s queue %d: close: %w", s.info.Ifname, s.info.Queue, err)
	}
	return nil
}
