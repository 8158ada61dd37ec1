//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Queues is a Link over sockets on several queues of one device (made
// with OpenShared, or opened one by one): a NIC spreads received frames
// over its queues by its own hash or rules, and a frame that lands on a
// queue without a socket never reaches the application. Recv takes the
// frames of every queue, a different queue first each time so that none
// is starved; Send transmits on the first socket's queue; Wait sleeps
// until any queue has a frame. Each socket must be registered in the XDP
// program's socket map for its own queue.
//
// Recv lends frames as a Socket does: until the next Recv on the Queues.
// The Queues owns the sockets: Close closes them.
type Queues struct {
	socks []*Socket
	rx    sync.Mutex // Recv and Wait
	next  int        // the socket Recv asks first
	fds   []unix.PollFd
	evMu  sync.RWMutex // ev against Close
	ev    int          // eventfd that Wake writes; -1 once closed
}

// NewQueues returns a Link over socks, sockets on queues of one device.
func NewQueues(socks []*Socket) (*Queues, error) {
	if len(socks) == 0 {
		return nil, fmt.Errorf("afxdp: %w: no socket for Queues", ErrInvalidOptions)
	}
	for _, s := range socks[1:] {
		if s.info.Ifindex != socks[0].info.Ifindex || s.mac.String() != socks[0].mac.String() {
			return nil, fmt.Errorf("afxdp: %w: Queues over sockets of devices %s and %s", ErrInvalidOptions, socks[0].info.Ifname, s.info.Ifname)
		}
	}
	ev, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("afxdp: eventfd: %w", err)
	}
	q := &Queues{socks: socks, ev: ev}
	for _, s := range socks {
		q.fds = append(q.fds, unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN})
	}
	q.fds = append(q.fds, unix.PollFd{Fd: int32(ev), Events: unix.POLLIN})
	return q, nil
}

// Sockets returns the sockets, in the order given to NewQueues.
func (q *Queues) Sockets() []*Socket { return q.socks }

// Send implements Link: on the first socket's queue.
func (q *Queues) Send(frames [][]byte) (int, error) { return q.socks[0].Send(frames) }

// Recv implements Link: the frames waiting on every queue, up to
// len(frames).
func (q *Queues) Recv(frames [][]byte) (int, error) {
	q.rx.Lock()
	defer q.rx.Unlock()
	n := 0
	for i := range q.socks {
		// Every socket is asked, a full batch or not, so that each gives
		// back the frames it lent at the last call.
		k, err := q.socks[(q.next+i)%len(q.socks)].Recv(frames[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	if q.next++; q.next == len(q.socks) {
		q.next = 0
	}
	return n, nil
}

// ready reports whether any socket has a frame waiting.
func (q *Queues) ready() (bool, error) {
	for _, s := range q.socks {
		ok, err := s.Wait(0)
		if ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// Wait implements Link: it spins for the first socket's Options.Spin
// over every queue, then sleeps in poll(2) on all the sockets and the
// eventfd that Wake writes.
func (q *Queues) Wait(timeout time.Duration) (bool, error) {
	q.rx.Lock()
	defer q.rx.Unlock()
	if ok, err := q.ready(); ok || err != nil || timeout == 0 {
		return ok, err
	}
	start := time.Now()
	spin := q.socks[0].rx.spin
	if timeout > 0 {
		spin = min(spin, timeout)
	}
	for time.Since(start) < spin {
		if ok, err := q.ready(); ok || err != nil {
			return ok, err
		}
	}
	for _, s := range q.socks {
		s.kickRx()
	}
	for {
		ms := -1
		if timeout > 0 {
			left := timeout - time.Since(start)
			if left <= 0 {
				return q.ready()
			}
			ms = max(int(left/time.Millisecond), 1)
		}
		for i := range q.fds {
			q.fds[i].Revents = 0
		}
		if _, err := unix.Poll(q.fds, ms); err != nil && err != unix.EINTR {
			return false, fmt.Errorf("afxdp: %s: poll: %w", q.socks[0].info.Ifname, err)
		}
		if q.fds[len(q.fds)-1].Revents&unix.POLLIN != 0 {
			var b [8]byte
			unix.Read(q.ev, b[:]) // this Wake is used up
			return q.ready()
		}
		if ok, err := q.ready(); ok || err != nil {
			return ok, err
		}
	}
}

// Wake implements Waker.
func (q *Queues) Wake() error {
	q.evMu.RLock()
	defer q.evMu.RUnlock()
	if q.ev < 0 {
		return net.ErrClosed
	}
	if _, err := unix.Write(q.ev, eventOne[:]); err != nil && err != unix.EAGAIN {
		return fmt.Errorf("afxdp: waking: %w", err)
	}
	return nil
}

// FDs returns the sockets' descriptors, for a poller that sleeps on the
// link (readable when a queue has frames).
func (q *Queues) FDs() []int {
	fds := make([]int, len(q.socks))
	for i, s := range q.socks {
		fds[i] = s.FD()
	}
	return fds
}

// BatchSize implements Link.
func (q *Queues) BatchSize() int { return q.socks[0].BatchSize() }

// MTU implements Link: the smallest of the sockets'.
func (q *Queues) MTU() int {
	m := q.socks[0].MTU()
	for _, s := range q.socks[1:] {
		m = min(m, s.MTU())
	}
	return m
}

// HardwareAddr implements Link.
func (q *Queues) HardwareAddr() net.HardwareAddr { return q.socks[0].HardwareAddr() }

// Info returns the first socket's Info (the one that sends).
func (q *Queues) Info() Info { return q.socks[0].Info() }

// Stats implements Statser: the sockets' counters, summed.
func (q *Queues) Stats() (Stats, error) {
	var sum Stats
	for _, s := range q.socks {
		st, err := s.Stats()
		if err != nil {
			return sum, err
		}
		sum.TxFrames += st.TxFrames
		sum.TxBytes += st.TxBytes
		sum.RxFrames += st.RxFrames
		sum.RxBytes += st.RxBytes
		sum.TxKicks += st.TxKicks
		sum.TxDropped += st.TxDropped
		sum.RxKicks += st.RxKicks
		sum.Sleeps += st.Sleeps
		sum.RxDropped += st.RxDropped
		sum.RxInvalidDescs += st.RxInvalidDescs
		sum.TxInvalidDescs += st.TxInvalidDescs
		sum.RxRingFull += st.RxRingFull
		sum.RxFillRingEmptyDescs += st.RxFillRingEmptyDescs
		sum.TxRingEmptyDescs += st.TxRingEmptyDescs
	}
	return sum, nil
}

// Close implements Link: it closes every socket.
func (q *Queues) Close() error {
	var errs []error
	for _, s := range q.socks {
		errs = append(errs, s.Close())
	}
	q.evMu.Lock()
	if q.ev >= 0 {
		// A Wait asleep on it wakes: its sockets report net.ErrClosed.
		unix.Write(q.ev, eventOne[:])
		unix.Close(q.ev)
		q.ev = -1
	}
	q.evMu.Unlock()
	return errors.Join(errs...)
}
