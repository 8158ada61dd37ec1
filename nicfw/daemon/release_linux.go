//go:build linux

package daemon

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xam-project/xam/nicfw/endpoint"
)

// Releasing a large endpoint off the engine's path.
//
// The engine closes an endpoint's memory in its own thread
// (endpoint.Memory.Close): it unmaps its mapping and closes the memfd.
// For a large endpoint both are slow: unmapping a populated mapping walks
// and clears every page table entry (about 50 ms for 800 MB), and the
// close that drops the memfd's last reference frees every page (about
// 100 ms more). Everything else the engine does waits meanwhile.
//
// So, for an endpoint of at least bigEndpoint bytes, the daemon
//
//  1. keeps a duplicate of the memfd from the open on (bigMemory.dup), so
//     that the engine's close never drops the last reference;
//  2. before it asks the engine to close the endpoint, drops the page table
//     entries of the engine's mapping from the connection's goroutine
//     (madvise MADV_DONTNEED, in slices; the mapping is shared and the
//     memfd keeps its pages, so an engine that touches the memory again
//     faults the same bytes back in), which leaves the engine's unmap
//     little to do;
//  3. once the engine has let go of the memory (its mapping is gone from
//     /proc/self/maps), closes the duplicate in a goroutine of its own, in
//     which the pages are freed (or in the application, if it still maps
//     them), in a thread of the lowest priority (nice 19).
//
// The madvise is safe only while the engine's mapping exists: the daemon
// makes it before it asks the engine to close the endpoint, and the engine
// unmaps an endpoint's memory only when asked to close it (or when the
// daemon stops, after every connection's goroutine has ended).

// bigEndpoint is the size from which an endpoint is released off the
// engine's path.
const bigEndpoint = 16 << 20

// dropSlice is how much of a mapping one madvise drops.
const dropSlice = 4 << 20

// bigMemory is what the daemon keeps of a large endpoint's memory.
type bigMemory struct {
	dup  int     // a duplicate of the memfd
	ino  uint64  // the memfd's inode
	addr uintptr // the engine's mapping (0: not found; nothing to drop)
	size uintptr
}

// holdBig returns the daemon's hold on mem, a new endpoint's memory that
// the engine does not own yet; nil for a small one.
func holdBig(mem *endpoint.Memory, size int64) (*bigMemory, error) {
	if size < bigEndpoint {
		return nil, nil
	}
	dup, err := unix.FcntlInt(uintptr(mem.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("nicfw: endpoint memfd: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(dup, &st); err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("nicfw: endpoint memfd: %w", err)
	}
	b := &bigMemory{dup: dup, ino: st.Ino}
	if s := mem.Staging(); len(s) > 0 {
		// The mapping that holds the staging area, if it is the memfd's
		// whole mapping.
		if lo, hi, ok := findMapping(uintptr(unsafe.Pointer(&s[0])), st.Ino); ok && int64(hi-lo) == st.Size {
			b.addr, b.size = lo, hi-lo
		}
	}
	return b, nil
}

// dropPages drops the page table entries of the engine's mapping (step 2),
// in a thread of lower priority (nice 10: the application that closes the
// endpoint waits for it, but the engine and the others come first), and
// returns when it is done. The engine must still map the memory.
func (b *bigMemory) dropPages() {
	if b.size == 0 {
		return
	}
	lowly(10, func() {
		for off := uintptr(0); off < b.size; off += dropSlice {
			n := min(dropSlice, b.size-off)
			unix.Syscall(unix.SYS_MADVISE, b.addr+off, n, unix.MADV_DONTNEED)
		}
	})
}

// lowly runs f in a thread of its own at priority nice (10..19), and waits
// for it: the kernel's work of releasing memory then yields the CPU to the
// engine thread and the applications on a busy machine. The thread ends
// with f (its goroutine exits locked to it).
func lowly(nice int, f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), nice)
		f()
	}()
	<-done
}

// mapped reports whether the engine still maps the memory.
func (b *bigMemory) mapped() bool {
	if b.addr == 0 {
		return false
	}
	_, _, ok := findMapping(b.addr, b.ino)
	return ok
}

// release closes b's duplicate once the engine has let go of the memory
// (step 3), in a goroutine of the daemon's. The engine lets go at once, or
// when the endpoint's message in flight is acknowledged or given up on, or
// when the daemon stops.
func (d *Daemon) release(b *bigMemory) {
	if b == nil {
		return
	}
	d.releases.Go(func() {
		for pause := time.Millisecond; b.mapped(); pause = min(2*pause, 100*time.Millisecond) {
			time.Sleep(pause)
		}
		lowly(19, func() { unix.Close(b.dup) }) // nobody waits for it
		d.bigReleased.Add(1)
	})
}

// close closes b's duplicate: for a memory the engine never owned.
func (b *bigMemory) close() {
	if b != nil {
		unix.Close(b.dup)
	}
}

// findMapping returns the bounds of the mapping of this process that holds
// addr, if it maps the file of inode ino.
func findMapping(addr uintptr, ino uint64) (lo, hi uintptr, ok bool) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := bytes.Fields(sc.Bytes())
		if len(fields) < 5 {
			continue
		}
		start, end, found := bytes.Cut(fields[0], []byte{'-'})
		if !found {
			continue
		}
		s, err1 := strconv.ParseUint(string(start), 16, 64)
		e, err2 := strconv.ParseUint(string(end), 16, 64)
		if err1 != nil || err2 != nil || uint64(addr) < s || uint64(addr) >= e {
			continue
		}
		n, err := strconv.ParseUint(string(fields[4]), 10, 64)
		return uintptr(s), uintptr(e), err == nil && n == ino && string(fields[2]) == "00000000"
	}
	return 0, 0, false
}
