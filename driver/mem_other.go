//go:build !linux

package driver

import "fmt"

// mapRegion allocates the areas on the Go heap; locking is Linux only.
func mapRegion(size int, lock bool) ([]byte, bool, error) {
	if lock {
		return nil, false, fmt.Errorf("driver: locking the device's areas: %w (set Config.NoLock)", ErrNotSupported)
	}
	return make([]byte, size), false, nil
}

func unmapRegion(mem []byte, locked bool) error { return nil }
