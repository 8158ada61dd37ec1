//go:build !linux

package endpoint

import (
	"errors"
	"runtime"
)

// Endpoint memory needs memfd_create and its seals, which only Linux has.

// ErrNoEndpointMemory: endpoint memory is not available on this system.
var ErrNoEndpointMemory = errors.New("nicfw: endpoint memory needs Linux (memfd)")

// NewMemory returns ErrNoEndpointMemory: it needs Linux.
func NewMemory(Config) (*Memory, error) { return nil, ErrNoEndpointMemory }

// Map returns ErrNoEndpointMemory: it needs Linux.
func Map(int) (*View, error) { return nil, ErrNoEndpointMemory }

// Close does nothing: there is no memory to release.
func (m *Memory) Close() error { return nil }

// Close does nothing: there is no mapping to release.
func (v *View) Close() error { return nil }

// Yield gives the processor to another goroutine.
func Yield() { runtime.Gosched() }
