package afxdp

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// UnmapForeign unmaps this process's mappings of the AF_XDP socket fd (its
// rings), for a socket another library made: github.com/asavie/xdp v0.3.3
// closes its socket and forgets the rings without unmapping them, and a
// mapping holds the socket, which then stays bound to the device's queue
// (EBUSY for the next socket there) until the process exits. Call it
// before that library's Close; the library must not touch the rings after.
// Sockets of this package unmap their own.
func UnmapForeign(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return err
	}
	ino := strconv.FormatUint(st.Ino, 10)
	for line := range strings.Lines(string(maps)) {
		f := strings.Fields(line)
		if len(f) < 5 || f[4] != ino {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if !ok || err1 != nil || err2 != nil {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MUNMAP, uintptr(start), uintptr(end-start), 0); errno != 0 {
			return errno
		}
	}
	return nil
}
