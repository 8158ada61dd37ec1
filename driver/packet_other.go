//go:build !linux

package driver

import "fmt"

// OpenPacket opens a device on the AF_PACKET system-call path, which exists
// on Linux only.
func OpenPacket(ifindex int, cfg Config) (*Device, error) {
	return nil, fmt.Errorf("driver: AF_PACKET: %w", ErrNotSupported)
}
