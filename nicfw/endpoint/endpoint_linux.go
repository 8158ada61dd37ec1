//go:build linux

package endpoint

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// The system calls of endpoint memory: memfd_create, its seals, mmap and
// munmap. NewMemory and Memory.Close run in the engine
// thread; Map and View.Close in the application.

// NewMemory creates an endpoint's memory: a memfd sized for cfg,
// sealed so that nobody can shrink or grow it, mapped shared, with its
// header written and its queues empty. The caller closes it with Close.
func NewMemory(cfg Config) (*Memory, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	l := layoutFor(cfg)
	fd, err := unix.MemfdCreate(endpointName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("nicfw: endpoint memfd: %w", err)
	}
	fail := func(what string, err error) (*Memory, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("nicfw: endpoint %s: %w", what, err)
	}
	if err := unix.Ftruncate(fd, int64(l.total)); err != nil {
		return fail("ftruncate", err)
	}
	// Without F_SEAL_SHRINK the application could truncate the file and
	// make the engine's accesses to its mapping fault (SIGBUS).
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fail("seal", err)
	}
	mem, err := unix.Mmap(fd, 0, l.total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail("mmap", err)
	}
	l.writeHeader(mem)
	m := &Memory{fd: fd, mem: mem, l: l}
	for q := range numQueues {
		m.rings[q] = newDescRing(mem, l, q, !q.isSend())
	}
	m.hdrWords = words(mem)
	return m, nil
}

// Close unmaps the memory and closes the memfd. The application's mappings
// stay valid until it closes them. Close is idempotent.
func (m *Memory) Close() error {
	if m.mem == nil {
		return nil
	}
	err := unix.Munmap(m.mem)
	if cerr := unix.Close(m.fd); err == nil {
		err = cerr
	}
	*m = Memory{fd: -1}
	return err
}

// Map maps the endpoint memory in fd, a memfd the application
// received from the engine, and checks its header. The view does not own
// fd: the caller may close it as soon as Map returns.
func Map(fd int) (*View, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("nicfw: endpoint fstat: %w", err)
	}
	maxTotal := layoutFor(Config{maxQueueEntries, maxStagingSize, maxTableSize}).total
	if st.Size < hdrSize || st.Size > int64(maxTotal) {
		return nil, fmt.Errorf("%w: size %d", ErrBadEndpoint, st.Size)
	}
	// Only a memfd sealed against shrinking is safe to keep mapped.
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: not a memfd: %w", ErrBadEndpoint, err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("%w: memfd not sealed against shrinking (seals %#x)", ErrBadEndpoint, seals)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("nicfw: endpoint mmap: %w", err)
	}
	v, err := newView(mem)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return v, nil
}

// MapBells maps the page of doorbells in fd (the engine's BellsFD, or the
// one a daemon sent with the endpoint), which Send rings while the engine
// has parked or evicted the endpoint, at the bit the engine wrote into the
// header (Memory.SetBell). An application given a page must map it: the
// engine reads the header's doorbell only now and then (it is served
// late without). The view keeps its own mapping, unmapped by Close; it
// does not own fd. fd -1 (no page) does nothing.
func (v *View) MapBells(fd int) error {
	if fd < 0 || v.mem == nil {
		return nil
	}
	b, err := MapBells(fd)
	if err != nil {
		return err
	}
	v.bells.Close()
	v.bells = b
	v.ringsPage.Store(1) // the engine may count on the page from now on
	return nil
}

// Close unmaps the view, and its page of doorbells. Close is idempotent.
func (v *View) Close() error {
	if v.mem == nil {
		return nil
	}
	err := errors.Join(unix.Munmap(v.mem), v.bells.Close())
	*v = View{}
	return err
}

// NewBells makes a page of doorbells (Bells): a sealed memfd of
// BellsSize bytes, zero, mapped shared. The engine closes it with Close.
func NewBells() (*Bells, error) {
	fd, err := unix.MemfdCreate(bellsName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("nicfw: doorbells memfd: %w", err)
	}
	fail := func(what string, err error) (*Bells, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("nicfw: doorbells %s: %w", what, err)
	}
	if err := unix.Ftruncate(fd, BellsSize); err != nil {
		return fail("ftruncate", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fail("seal", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail("fstat", err)
	}
	mem, err := unix.Mmap(fd, 0, BellsSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fail("mmap", err)
	}
	return newBells(fd, [2]uint64{uint64(st.Dev), st.Ino}, mem), nil
}

// MapBells maps the page of doorbells in fd, a memfd the application
// received from the engine (sealed, BellsSize bytes). It does not own fd.
func MapBells(fd int) (*Bells, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("nicfw: doorbells fstat: %w", err)
	}
	if st.Size != BellsSize {
		return nil, fmt.Errorf("%w: doorbells of %d bytes, want %d", ErrBadEndpoint, st.Size, BellsSize)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("%w: doorbells not a memfd sealed against shrinking", ErrBadEndpoint)
	}
	mem, err := unix.Mmap(fd, 0, BellsSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("nicfw: doorbells mmap: %w", err)
	}
	return newBells(-1, [2]uint64{uint64(st.Dev), st.Ino}, mem), nil
}

// Close unmaps the page, and closes the memfd of the engine's. Endpoints'
// views that ring it must be closed first. Close is idempotent.
func (b *Bells) Close() error {
	if b == nil || b.mem == nil {
		return nil
	}
	err := unix.Munmap(b.mem)
	if b.fd >= 0 {
		if cerr := unix.Close(b.fd); err == nil {
			err = cerr
		}
	}
	*b = Bells{fd: -1}
	return err
}

// Yield gives the processor to another thread that is ready to run, if
// any (sched_yield(2)), and returns at once otherwise: the polite spin of
// an application or engine that looks for work a while before it blocks.
// On a machine with fewer cores than spinning threads (two daemons and
// their applications on two cores) a spin that does not yield holds the
// core the thread it waits for needs, for the rest of its time slice.
func Yield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
