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

// NewBells returns ErrNoEndpointMemory: it needs Linux.
func NewBells() (*Bells, error) { return nil, ErrNoEndpointMemory }

// MapBells returns ErrNoEndpointMemory: it needs Linux.
func MapBells(int) (*Bells, error) { return nil, ErrNoEndpointMemory }

// Close does nothing: there is no page to release.
func (b *Bells) Close() error { return nil }

// MapBells does nothing: there are no doorbells without Linux.
func (v *View) MapBells(int) error { return nil }

// Close does nothing: there is no memory to release.
func (m *Memory) Close() error { return nil }

// Close does nothing: there is no mapping to release.
func (v *View) Close() error { return nil }

// Yield gives the processor to another goroutine.
func Yield() { runtime.Gosched() }
