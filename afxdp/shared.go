//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// UMEM is packet memory that several sockets share: sockets on different
// queues of one device, or on different devices, each with its own four
// rings. NewUMEM maps it; each Open binds a socket to it and gives the
// socket FillSize+TxSize chunks of it for good, so no two sockets ever use
// the same chunk. The first socket registers the UMEM with the kernel
// (XDP_UMEM_REG); the others bind with XDP_SHARED_UMEM to a socket already
// bound to it, with fill and completion rings of their own (Linux 5.10 and
// later). The mapping is reference-counted: it stays until the UMEM and
// every socket opened on it are closed.
//
// The methods of a UMEM may be called from any goroutine. An Open holds
// the UMEM while it binds (up to Options.BindTimeout when the queue is
// busy), and Close of a socket on it waits for that.
type UMEM struct {
	opts UMEMOptions
	m    *umem

	mu     sync.Mutex
	closed bool
	next   int       // chunks handed out so far
	socks  []*Socket // open sockets, all bound to the UMEM
	// zeroCopyErr is the ZeroCopyErr of the socket that registered the
	// UMEM: the mode every socket of the UMEM inherits.
	zeroCopyErr error
}

// NewUMEM maps a UMEM of opts.Chunks chunks, in no particular network
// namespace: its sockets may be on devices of different namespaces.
func NewUMEM(opts UMEMOptions) (*UMEM, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newUMEM(o.FrameSize, o.Chunks)
	if err != nil {
		return nil, fmt.Errorf("afxdp: %w", err)
	}
	return &UMEM{opts: o, m: m}, nil
}

// Options returns the UMEM's options, defaults filled in.
func (u *UMEM) Options() UMEMOptions { return u.opts }

// Chunks returns the number of chunks of the UMEM and how many of them no
// socket has taken yet.
func (u *UMEM) Chunks() (total, free int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.opts.Chunks, u.opts.Chunks - u.next
}

// Open opens a socket on queue opts.Queue of the device with index
// ifindex, in the calling thread's network namespace, as Open does, but on
// the UMEM: the socket takes the next opts.FillSize+opts.TxSize free
// chunks (receive chunks first) and keeps them, also after it is closed
// (the kernel may write into a closed socket's chunks until it has released
// its queue). Info().ChunkBase is the address of its first chunk, and
// Info().SharedUMEM tells whether it bound to another socket's UMEM.
//
// FrameSize, Headroom, Mode and NoNeedWakeup belong to the UMEM: zero
// values in opts take the UMEM's, other values must equal them. The socket
// inherits copy or zero-copy mode from the UMEM's first socket. Open fails
// with an error wrapping ErrInvalidOptions if the options are invalid, the
// UMEM has too few free chunks or one of its open sockets already has the
// queue; with net.ErrClosed after Close; and with ErrNotSupported if the
// kernel cannot share a UMEM across queues or devices (before Linux 5.10)
// or, for a UMEM in zero-copy mode, the device has no zero-copy.
func (u *UMEM) Open(ifindex int, opts Options) (*Socket, error) {
	o, err := u.socketOptions(opts)
	if err != nil {
		return nil, err
	}
	ns := netnsID()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, fmt.Errorf("afxdp: opening a socket on a closed UMEM: %w", net.ErrClosed)
	}
	for _, s := range u.socks {
		if s.netns == ns && s.info.Ifindex == ifindex && s.info.Queue == o.Queue {
			return nil, fmt.Errorf("afxdp: %w: %s queue %d already has a socket of this UMEM",
				ErrInvalidOptions, s.info.Ifname, o.Queue)
		}
	}
	need := o.FillSize + o.TxSize
	if free := u.opts.Chunks - u.next; need > free {
		return nil, fmt.Errorf("afxdp: %w: the socket needs %d chunks (FillSize %d + TxSize %d), the UMEM has %d of %d left",
			ErrInvalidOptions, need, o.FillSize, o.TxSize, free, u.opts.Chunks)
	}
	j := &join{umem: u.m, base: uint64(u.next) * uint64(u.opts.FrameSize), sharedFD: -1, zeroCopyErr: u.zeroCopyErr}
	if len(u.socks) > 0 {
		j.sharedFD = u.socks[0].FD()
	}
	s, err := open(ifindex, o, j)
	if err != nil {
		return nil, err
	}
	u.next += need
	s.shared, s.netns = u, ns
	if j.sharedFD < 0 {
		u.zeroCopyErr = s.info.ZeroCopyErr
	}
	u.socks = append(u.socks, s)
	return s, nil
}

// socketOptions merges the UMEM's options into opts and validates them.
func (u *UMEM) socketOptions(opts Options) (Options, error) {
	bad := func(name string, got, want any) error {
		return fmt.Errorf("afxdp: %w: %s %v differs from the UMEM's %v", ErrInvalidOptions, name, got, want)
	}
	switch {
	case opts.FrameSize != 0 && opts.FrameSize != u.opts.FrameSize:
		return Options{}, bad("frame size", opts.FrameSize, u.opts.FrameSize)
	case opts.Headroom != 0 && opts.Headroom != u.opts.Headroom:
		return Options{}, bad("headroom", opts.Headroom, u.opts.Headroom)
	case opts.Mode != ModeAuto && opts.Mode != u.opts.Mode:
		return Options{}, bad("mode", opts.Mode, u.opts.Mode)
	case opts.NoNeedWakeup && !u.opts.NoNeedWakeup:
		return Options{}, bad("NoNeedWakeup", true, false)
	}
	opts.FrameSize, opts.Headroom, opts.Mode, opts.NoNeedWakeup =
		u.opts.FrameSize, u.opts.Headroom, u.opts.Mode, u.opts.NoNeedWakeup
	return opts.withDefaults()
}

// detach removes a closing socket from the UMEM's open sockets.
func (u *UMEM) detach(s *Socket) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if i := slices.Index(u.socks, s); i >= 0 {
		u.socks = slices.Delete(u.socks, i, i+1)
	}
}

// Close drops the UMEM's own reference to the memory: no socket can be
// opened on it any more, the open ones keep working, and the memory is
// unmapped when the last of them is closed (at once if there is none).
// A second Close returns net.ErrClosed.
func (u *UMEM) Close() error {
	u.mu.Lock()
	closed := u.closed
	u.closed = true
	u.mu.Unlock()
	if closed {
		return net.ErrClosed
	}
	if err := u.m.put(); err != nil {
		return fmt.Errorf("afxdp: unmapping UMEM: %w", err)
	}
	return nil
}

// OpenShared opens one socket on each of the queues of the device with
// index ifindex, all sharing one UMEM sized for them: each owns
// opts.FillSize receive and opts.TxSize transmit chunks of it. Options
// apply to every socket; opts.Queue must be 0 (queues gives the queues).
// The UMEM is unmapped when the last of the sockets is closed. On failure
// it closes what it opened. See UMEM.Open.
func OpenShared(ifindex int, queues []int, opts Options) ([]*Socket, error) {
	o, err := sharedOptions(queues, opts)
	if err != nil {
		return nil, err
	}
	u, err := NewUMEM(UMEMOptions{
		Chunks:    len(queues) * (o.FillSize + o.TxSize),
		FrameSize: o.FrameSize, Headroom: o.Headroom, Mode: o.Mode, NoNeedWakeup: o.NoNeedWakeup,
	})
	if err != nil {
		return nil, err
	}
	defer u.Close() // the sockets hold the memory from here on
	socks := make([]*Socket, 0, len(queues))
	for _, q := range queues {
		qo := opts
		qo.Queue = q
		s, err := u.Open(ifindex, qo)
		if err != nil {
			for _, s := range socks {
				s.Close()
			}
			return nil, err
		}
		socks = append(socks, s)
	}
	return socks, nil
}

// sharedErr marks the errors with which a kernel refuses a shared UMEM it
// cannot do: EINVAL before Linux 5.10, whose sockets share a UMEM only
// on the queue of the socket that registered it, with its fill and
// completion rings; EOPNOTSUPP when the UMEM is in zero-copy mode and the
// device has none. release is the kernel's (uname -r).
func sharedErr(err error, release string) error {
	switch {
	case errors.Is(err, unix.EINVAL) && !kernelAtLeast(release, 5, 10):
		return fmt.Errorf("%w: sharing a UMEM across queues or devices needs Linux 5.10 (running %s): %w",
			ErrNotSupported, release, err)
	case errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%w: the UMEM is in zero-copy mode (that of its first socket) and the device refuses it: %w",
			ErrNotSupported, err)
	}
	return err
}

// kernelRelease returns the running kernel's release (uname -r).
func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// kernelAtLeast reports whether release (such as "6.18.44-foo") is
// major.minor or later; an unreadable release counts as new enough, so
// that errors are passed on as the kernel gave them.
func kernelAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return true
	}
	maj, err1 := strconv.Atoi(parts[0])
	min, err2 := strconv.Atoi(parts[1][:digits(parts[1])]) // "10-rc1" -> 10
	if err1 != nil || err2 != nil {
		return true
	}
	return maj > major || maj == major && min >= minor
}

// digits returns the length of the run of decimal digits that begins s.
func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// netnsID returns the inode of the calling thread's network namespace, 0
// if it cannot be read.
func netnsID() uint64 {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0
	}
	return st.Ino
}
