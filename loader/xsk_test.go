//go:build linux

package loader

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// testXSK is the least AF_XDP socket that receives: a UMEM, a fill ring and
// an RX ring, copy mode. It is enough to see what the program redirects;
// package afxdp has the real one (which loader may not import).
type testXSK struct {
	fd    int
	umem  []byte
	fill  ring
	rx    ring
	maps  [][]byte
	frame uint64 // chunk size
}

// ring is one mmapped AF_XDP ring of size entries of desc bytes each.
type ring struct {
	producer, consumer *uint32
	descs              unsafe.Pointer
	size               uint32
	desc               uintptr
}

const (
	xskFrames    = 64
	xskFrameSize = 4096 // holds a 3516-byte frame and more
)

// newTestXSK binds a socket to queue of ifindex (in the calling thread's
// namespace) and fills the fill ring with every chunk.
func newTestXSK(ifindex, queue int) (x *testXSK, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket(AF_XDP): %w", err)
	}
	x = &testXSK{fd: fd, frame: xskFrameSize}
	defer func() {
		if err != nil {
			x.Close()
		}
	}()
	x.umem, err = unix.Mmap(-1, 0, xskFrames*xskFrameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("mmap UMEM: %w", err)
	}
	reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&x.umem[0]))), Len: uint64(len(x.umem)), Size: xskFrameSize}
	if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
		return nil, fmt.Errorf("XDP_UMEM_REG: %w", err)
	}
	for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, xskFrames); err != nil {
			return nil, fmt.Errorf("ring size (option %d): %w", opt, err)
		}
	}
	var off unix.XDPMmapOffsets
	size := uint32(unsafe.Sizeof(off))
	if _, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&size)), 0); errno != 0 {
		return nil, fmt.Errorf("XDP_MMAP_OFFSETS: %w", errno)
	}
	if x.fill, err = x.mapRing(off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, 8); err != nil {
		return nil, err
	}
	if x.rx, err = x.mapRing(off.Rx, unix.XDP_PGOFF_RX_RING, unsafe.Sizeof(unix.XDPDesc{})); err != nil {
		return nil, err
	}
	for i := range uint32(xskFrames) {
		*(*uint64)(unsafe.Add(x.fill.descs, uintptr(i)*8)) = uint64(i) * xskFrameSize
	}
	atomic.StoreUint32(x.fill.producer, xskFrames)
	sa := &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(ifindex), QueueID: uint32(queue)}
	if err := unix.Bind(fd, sa); err != nil {
		return nil, fmt.Errorf("bind to ifindex %d queue %d: %w", ifindex, queue, err)
	}
	return x, nil
}

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

func (x *testXSK) mapRing(o unix.XDPRingOffset, pgoff int64, desc uintptr) (ring, error) {
	m, err := unix.Mmap(x.fd, pgoff, int(o.Desc)+xskFrames*int(desc), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return ring{}, fmt.Errorf("mmap ring at %#x: %w", pgoff, err)
	}
	x.maps = append(x.maps, m)
	base := unsafe.Pointer(&m[0])
	return ring{
		producer: (*uint32)(unsafe.Add(base, o.Producer)),
		consumer: (*uint32)(unsafe.Add(base, o.Consumer)),
		descs:    unsafe.Add(base, o.Desc),
		size:     xskFrames,
		desc:     desc,
	}, nil
}

// FD returns the socket's file descriptor, for Program.Register.
func (x *testXSK) FD() int { return x.fd }

// Receive waits up to timeout for frames and returns copies of those that
// arrived, returning their chunks to the fill ring.
func (x *testXSK) Receive(timeout time.Duration) [][]byte {
	var out [][]byte
	deadline := time.Now().Add(timeout)
	for {
		prod := atomic.LoadUint32(x.rx.producer)
		cons := atomic.LoadUint32(x.rx.consumer)
		for ; cons != prod; cons++ {
			d := (*unix.XDPDesc)(unsafe.Add(x.rx.descs, uintptr(cons&(x.rx.size-1))*x.rx.desc))
			out = append(out, append([]byte(nil), x.umem[d.Addr:d.Addr+uint64(d.Len)]...))
			fp := atomic.LoadUint32(x.fill.producer)
			*(*uint64)(unsafe.Add(x.fill.descs, uintptr(fp&(x.fill.size-1))*8)) = d.Addr &^ (x.frame - 1)
			atomic.StoreUint32(x.fill.producer, fp+1)
		}
		atomic.StoreUint32(x.rx.consumer, cons)
		if len(out) > 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(time.Millisecond)
	}
}

// Close unmaps the rings and the UMEM and closes the socket.
func (x *testXSK) Close() error {
	var errs []error
	for _, m := range x.maps {
		errs = append(errs, unix.Munmap(m))
	}
	x.maps = nil
	if x.fd >= 0 {
		errs = append(errs, unix.Close(x.fd))
		x.fd = -1
	}
	if x.umem != nil {
		errs = append(errs, unix.Munmap(x.umem))
		x.umem = nil
	}
	return errors.Join(errs...)
}
