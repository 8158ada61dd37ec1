//go:build linux

package driver

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapRegion maps size bytes (rounded up to pages) of anonymous memory,
// faulted in at once, and locks them in RAM if lock is set.
func mapRegion(size int, lock bool) (mem []byte, locked bool, err error) {
	page := os.Getpagesize()
	size = (size + page - 1) &^ (page - 1)
	mem, err = unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, false, fmt.Errorf("driver: mmap %d bytes for the device's areas: %w", size, err)
	}
	if !lock {
		return mem, false, nil
	}
	if err := unix.Mlock(mem); err != nil {
		unix.Munmap(mem)
		var lim unix.Rlimit
		unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
		return nil, false, fmt.Errorf("driver: mlock %d bytes for the device's areas (RLIMIT_MEMLOCK %d bytes; raise it, run with CAP_IPC_LOCK, or set Config.NoLock): %w",
			size, lim.Cur, err)
	}
	return mem, true, nil
}

// unmapRegion undoes mapRegion.
func unmapRegion(mem []byte, locked bool) error {
	if mem == nil {
		return nil
	}
	var errs []error
	if locked {
		if err := unix.Munlock(mem); err != nil {
			errs = append(errs, fmt.Errorf("driver: munlock: %w", err))
		}
	}
	if err := unix.Munmap(mem); err != nil {
		errs = append(errs, fmt.Errorf("driver: munmap: %w", err))
	}
	return errors.Join(errs...)
}
