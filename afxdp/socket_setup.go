//go:build linux

package afxdp

import (
	"errors"
	"fmt"
	"net"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Open creates an AF_XDP socket on queue opts.Queue of the device with
// index ifindex, in the calling thread's network namespace, and binds it.
// The socket receives nothing until an XDP program on the device redirects
// frames to it through an XSKMAP entry at key opts.Queue holding FD() (the
// loader's job); it can transmit at once.
//
// Open validates opts first (errors wrap ErrInvalidOptions). Options the
// kernel refuses but the socket can do without (busy polling, the TX
// budget, zero-copy in ModeAuto) are reported in Info; every other failure
// is returned, with everything created so far released. The socket needs
// CAP_NET_RAW (EPERM otherwise), and, without CAP_IPC_LOCK, a memlock limit
// that covers the UMEM.
func Open(ifindex int, opts Options) (*Socket, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return open(ifindex, o, nil)
}

// join says how a socket opened on a shared UMEM (UMEM.Open) uses it.
type join struct {
	umem *umem
	base uint64 // UMEM address of the socket's first chunk
	// sharedFD is a bound socket of the UMEM to bind to with
	// XDP_SHARED_UMEM, or -1: the socket registers the UMEM itself.
	sharedFD int
	// zeroCopyErr is the ZeroCopyErr of the socket that registered the
	// UMEM, whose mode every socket of the UMEM inherits.
	zeroCopyErr error
}

// open does the work of Open (j nil: the socket gets a UMEM of its own)
// and of UMEM.Open, with o validated and defaults filled in.
func open(ifindex int, o Options, j *join) (*Socket, error) {
	ifi, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("afxdp: device %d: %w", ifindex, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("afxdp: device %s has no Ethernet address (%v)", ifi.Name, ifi.HardwareAddr)
	}
	s := &Socket{
		mac:   append(net.HardwareAddr(nil), ifi.HardwareAddr...),
		batch: o.BatchSize,
		info: Info{
			Ifindex: ifindex, Ifname: ifi.Name, Queue: o.Queue, DeviceMTU: ifi.MTU,
			NeedWakeup: !o.NoNeedWakeup, TxBudget: kernelTxBatch, Options: o,
		},
	}
	s.mtu = min(ifi.MTU, MaxMTU(o.FrameSize, o.Headroom))
	if o.TxTimestamps && (o.MultiBuffer || j != nil) {
		return nil, fmt.Errorf("afxdp: %w: TX timestamps with multi-buffer frames or a shared UMEM", ErrNotSupported)
	}
	if o.MultiBuffer {
		if j != nil {
			return nil, fmt.Errorf("afxdp: %w: multi-buffer with a shared UMEM", ErrNotSupported)
		}
		if most := MaxMultiBufferMTU(o.FrameSize); ifi.MTU > most {
			return nil, fmt.Errorf("afxdp: %w: device %s has MTU %d, but a frame of %d chunks of %d bytes carries at most MTU %d: lower the device's MTU (ip link set %s mtu %d) or take larger chunks",
				ErrMTU, ifi.Name, ifi.MTU, maxFrameDescs, o.FrameSize, most, ifi.Name, most)
		}
		s.mtu = ifi.MTU
		s.mb = true
		s.info.MultiBuffer = true
	}
	s.info.MTU = s.mtu
	s.fds.sock, s.fds.ev = -1, -1

	ok := false
	defer func() {
		if !ok {
			s.release()
		}
	}()
	if err := s.setup(ifindex, o, j); err != nil {
		return nil, fmt.Errorf("afxdp: %s queue %d: %w", ifi.Name, o.Queue, err)
	}
	ok = true
	return s, nil
}

// setup does Open's work on the kernel side; release undoes any part of it.
// The order is the kernel's: the UMEM is registered (or shared) and the
// rings are sized and mapped before the bind, and the mode is known only
// after it.
func (s *Socket) setup(ifindex int, o Options, j *join) error {
	ev, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("eventfd: %w", err)
	}
	s.fds.ev = ev
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EAFNOSUPPORT) {
			err = fmt.Errorf("%w: AF_XDP sockets (CONFIG_XDP_SOCKETS): %w", ErrNotSupported, err)
		}
		return fmt.Errorf("creating AF_XDP socket: %w", err)
	}
	s.fds.sock = fd

	register, err := s.useUMEM(fd, o, j)
	if err != nil {
		return err
	}
	if err := s.sizeRings(fd, o, register); err != nil {
		return err
	}
	if err := s.mapRings(fd, o); err != nil {
		return err
	}
	s.setTolerated(fd, o)
	if register {
		err = s.bind(ifindex, o)
	} else {
		err = s.bindShared(ifindex, o, j)
	}
	if err != nil {
		return err
	}
	if err := s.readMode(fd, o); err != nil {
		return err
	}
	if err := s.startRx(fd, ev, o); err != nil {
		return err
	}
	s.startTx(fd, o)
	return nil
}

// useUMEM gives the socket its chunks: a UMEM of its own (j nil), or its
// share of j's. It registers the UMEM on fd unless the socket is to bind
// to a socket that registered it already (XDP_SHARED_UMEM), and reports
// whether it did.
func (s *Socket) useUMEM(fd int, o Options, j *join) (register bool, err error) {
	register = true
	if j == nil {
		if s.umem, err = newUMEM(o.FrameSize, o.FillSize+o.TxSize); err != nil {
			return register, err
		}
		s.part = newShare(s.umem, 0, o.FillSize, o.TxSize)
	} else {
		j.umem.get()
		s.umem = j.umem
		s.part = newShare(s.umem, j.base, o.FillSize, o.TxSize)
		s.info.ChunkBase = j.base
		register = j.sharedFD < 0
		s.info.SharedUMEM = !register
	}
	if register {
		if o.TxTimestamps {
			err := s.umem.register(fd, o.Headroom, TxMetadataLen)
			if err == nil {
				s.info.TxMetadata, s.tx.meta = true, TxMetadataLen
				return register, nil
			}
			// A kernel before 6.8: no TX metadata, no stamps.
			s.info.TxMetadataErr = fmt.Errorf("registering the UMEM with TX metadata: %w", err)
		}
		if err := s.umem.register(fd, o.Headroom, 0); err != nil {
			return register, fmt.Errorf("registering %d-byte UMEM (XDP_UMEM_REG; memlock limit?): %w", len(s.umem.mem), err)
		}
	}
	return register, nil
}

// sizeRings creates the socket's four rings at the sizes opts give. A
// socket that shares a registered UMEM still creates fill and completion
// rings of its own, which older kernels refuse (sharedErr says so).
func (s *Socket) sizeRings(fd int, o Options, register bool) error {
	for _, r := range []struct {
		opt  int
		name string
		n    int
	}{
		{unix.XDP_UMEM_FILL_RING, "fill", o.FillSize},
		{unix.XDP_UMEM_COMPLETION_RING, "completion", o.CompletionSize},
		{unix.XDP_RX_RING, "RX", o.RxSize},
		{unix.XDP_TX_RING, "TX", o.TxSize},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, r.opt, r.n); err != nil {
			if !register && (r.opt == unix.XDP_UMEM_FILL_RING || r.opt == unix.XDP_UMEM_COMPLETION_RING) {
				err = sharedErr(err, kernelRelease())
			}
			return fmt.Errorf("creating %s ring of %d: %w", r.name, r.n, err)
		}
	}
	return nil
}

// mapRings maps the four rings sizeRings created, where the kernel's ring
// offsets (XDP_MMAP_OFFSETS) say their indices and flags lie.
func (s *Socket) mapRings(fd int, o Options) error {
	var off unix.XDPMmapOffsets
	n, err := getsockopt(fd, unix.SOL_XDP, unix.XDP_MMAP_OFFSETS, unsafe.Pointer(&off), unsafe.Sizeof(off))
	if err != nil {
		return fmt.Errorf("reading ring offsets (XDP_MMAP_OFFSETS): %w", err)
	}
	if n != unsafe.Sizeof(off) {
		return fmt.Errorf("%w: kernel returned %d bytes of ring offsets, want %d (ring flags need Linux 5.4)",
			ErrNotSupported, n, unsafe.Sizeof(off))
	}
	const descSize, addrSize = unsafe.Sizeof(unix.XDPDesc{}), unsafe.Sizeof(uint64(0))
	if s.rx.fill.ring, err = mapRing(fd, unix.XDP_UMEM_PGOFF_FILL_RING, off.Fr, uint32(o.FillSize), addrSize); err != nil {
		return fmt.Errorf("mapping fill ring: %w", err)
	}
	if s.tx.comp.ring, err = mapRing(fd, unix.XDP_UMEM_PGOFF_COMPLETION_RING, off.Cr, uint32(o.CompletionSize), addrSize); err != nil {
		return fmt.Errorf("mapping completion ring: %w", err)
	}
	if s.rx.rx.ring, err = mapRing(fd, unix.XDP_PGOFF_RX_RING, off.Rx, uint32(o.RxSize), descSize); err != nil {
		return fmt.Errorf("mapping RX ring: %w", err)
	}
	if s.tx.tx.ring, err = mapRing(fd, unix.XDP_PGOFF_TX_RING, off.Tx, uint32(o.TxSize), descSize); err != nil {
		return fmt.Errorf("mapping TX ring: %w", err)
	}
	return nil
}

// setTolerated sets the options the socket can do without (the TX budget
// and busy polling): the kernel's refusals go to Info, and Open goes on.
func (s *Socket) setTolerated(fd int, o Options) {
	if o.TxBudget > kernelTxBatch {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, o.TxBudget); err != nil {
			s.info.TxBudgetErr = fmt.Errorf("XDP_MAX_TX_SKB_BUDGET %d: %w", o.TxBudget, err)
		} else {
			s.info.TxBudget = o.TxBudget
		}
	}
	if !o.NoBusyPoll {
		var errs []error
		for _, b := range []struct {
			opt  int
			name string
			v    int
		}{
			{unix.SO_PREFER_BUSY_POLL, "SO_PREFER_BUSY_POLL", 1},
			{unix.SO_BUSY_POLL, "SO_BUSY_POLL", int(o.BusyPoll / time.Microsecond)},
			{unix.SO_BUSY_POLL_BUDGET, "SO_BUSY_POLL_BUDGET", o.BatchSize},
		} {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, b.opt, b.v); err != nil {
				errs = append(errs, fmt.Errorf("%s %d: %w", b.name, b.v, err))
			}
		}
		s.info.BusyPollErr = errors.Join(errs...)
	}
}

// readMode reads what the bind made of the socket: copy or zero-copy mode
// (an error in ModeZeroCopy if the kernel fell back to copy mode), and,
// with busy polling, the NAPI instance it polls, without which busy
// polling does not happen.
func (s *Socket) readMode(fd int, o Options) error {
	var xo struct{ flags uint32 }
	if _, err := getsockopt(fd, unix.SOL_XDP, unix.XDP_OPTIONS, unsafe.Pointer(&xo), unsafe.Sizeof(xo)); err != nil {
		return fmt.Errorf("reading the bound mode (XDP_OPTIONS): %w", err)
	}
	s.info.ZeroCopy = xo.flags&unix.XDP_OPTIONS_ZEROCOPY != 0
	if o.Mode == ModeZeroCopy && !s.info.ZeroCopy {
		return fmt.Errorf("%w: bound, but the kernel reports copy mode", ErrNotSupported)
	}
	if !o.NoBusyPoll {
		if id, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_INCOMING_NAPI_ID); err == nil {
			s.info.NAPIID = uint32(id)
		} else {
			s.info.BusyPollErr = errors.Join(s.info.BusyPollErr, fmt.Errorf("SO_INCOMING_NAPI_ID: %w", err))
		}
		s.info.BusyPoll = s.info.BusyPollErr == nil && s.info.NAPIID != 0
	}
	return nil
}

// startRx readies the RX side: every RX chunk starts on the fill ring, so
// that the kernel has somewhere to put the first frames.
func (s *Socket) startRx(fd, ev int, o Options) error {
	s.rx.sock, s.rx.ev = fd, ev
	s.rx.needWakeup = !o.NoNeedWakeup
	s.rx.busyPoll = s.info.BusyPoll
	s.rx.spin = o.Spin
	s.rx.pollfds = [2]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(ev), Events: unix.POLLIN}}
	s.rx.lent = make([]uint64, 0, s.part.rxChunks)
	for i := uint32(0); i < s.part.rxChunks; i++ {
		s.rx.lent = append(s.rx.lent, s.part.rxAddr(i))
	}
	if s.rx.fill.free(s.part.rxChunks) != s.part.rxChunks {
		return fmt.Errorf("fill ring has no room for %d chunks", s.part.rxChunks)
	}
	s.rx.fill.fill(s.rx.lent)
	s.rx.lent = s.rx.lent[:0]
	if s.rx.needWakeup && s.rx.fill.needWakeup() {
		wakeRx(fd)
	}
	return nil
}

// startTx readies the TX side: every TX chunk starts free, and the bound
// mode decides how Send kicks the kernel.
func (s *Socket) startTx(fd int, o Options) {
	s.tx.sock = fd
	s.tx.zeroCopy = s.info.ZeroCopy
	s.tx.kickAll = !s.info.ZeroCopy || o.NoNeedWakeup
	// A zero-copy kick only wakes the driver; a copy-mode one transmits up
	// to TxBudget frames in the call.
	s.tx.rawKick = s.info.ZeroCopy || s.info.TxBudget <= rawKickBudget
	s.tx.free = make([]uint64, 0, max(s.part.txChunks, uint32(o.CompletionSize)))
	for i := s.part.txChunks; i > 0; i-- {
		s.tx.free = append(s.tx.free, s.part.txAddr(i-1))
	}
}

// bind binds the socket in the mode opts ask for, falling back from
// zero-copy to copy mode in ModeAuto.
func (s *Socket) bind(ifindex int, o Options) error {
	var flags uint16
	if !o.NoNeedWakeup {
		flags |= unix.XDP_USE_NEED_WAKEUP
	}
	if o.MultiBuffer {
		flags |= unix.XDP_USE_SG
	}
	switch o.Mode {
	case ModeCopy:
		err := s.bindRetry(ifindex, o, flags|unix.XDP_COPY, -1)
		if o.MultiBuffer && errors.Is(err, unix.EINVAL) {
			err = fmt.Errorf("%w: multi-buffer (XDP_USE_SG, Linux 6.6 and later): %w", ErrNotSupported, err)
		}
		return err
	case ModeZeroCopy:
		err := s.bindRetry(ifindex, o, flags|unix.XDP_ZEROCOPY, -1)
		if errors.Is(err, unix.EOPNOTSUPP) {
			err = fmt.Errorf("%w: zero-copy: %w", ErrNotSupported, err)
		}
		return err
	}
	zcErr := s.bindRetry(ifindex, o, flags|unix.XDP_ZEROCOPY, -1)
	if zcErr == nil {
		return nil
	}
	s.info.ZeroCopyErr = zcErr
	if err := s.bindRetry(ifindex, o, flags|unix.XDP_COPY, -1); err != nil {
		if o.MultiBuffer && errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("%w: multi-buffer (XDP_USE_SG, Linux 6.6 and later): %w", ErrNotSupported, err)
		}
		return fmt.Errorf("%w (after zero-copy failed: %w)", err, zcErr)
	}
	return nil
}

// bindShared binds with XDP_SHARED_UMEM to the UMEM of the bound socket
// j.sharedFD. The kernel takes no mode flags then: the socket inherits
// copy or zero-copy mode and need_wakeup from that socket's UMEM.
func (s *Socket) bindShared(ifindex int, o Options, j *join) error {
	s.info.ZeroCopyErr = j.zeroCopyErr
	if err := s.bindRetry(ifindex, o, unix.XDP_SHARED_UMEM, j.sharedFD); err != nil {
		return sharedErr(err, kernelRelease())
	}
	return nil
}

// bindRetry binds with flags (and the UMEM of socket sharedFD, unless it is
// -1), retrying for up to o.BindTimeout while the kernel reports the queue
// busy.
func (s *Socket) bindRetry(ifindex int, o Options, flags uint16, sharedFD int) error {
	sa := &unix.SockaddrXDP{Flags: flags, Ifindex: uint32(ifindex), QueueID: uint32(o.Queue)}
	if sharedFD >= 0 {
		sa.SharedUmemFD = uint32(sharedFD)
	}
	deadline := time.Now().Add(o.BindTimeout)
	for {
		err := unix.Bind(s.fds.sock, sa)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			mode := "copy"
			switch {
			case flags&unix.XDP_ZEROCOPY != 0:
				mode = "zero-copy"
			case flags&unix.XDP_SHARED_UMEM != 0:
				mode = "shared-UMEM"
			}
			if errors.Is(err, unix.EBUSY) {
				return fmt.Errorf("binding in %s mode: queue busy for %v (another socket holds it): %w",
					mode, o.BindTimeout, err)
			}
			return fmt.Errorf("binding in %s mode: %w", mode, err)
		}
		s.info.BindRetries++
		time.Sleep(2 * time.Millisecond)
	}
}
