//go:build !linux

package nicfw

import "errors"

// Endpoint memory needs memfd_create and its seals, which only Linux has.

// ErrNoEndpointMemory: endpoint memory is not available on this system.
var ErrNoEndpointMemory = errors.New("nicfw: endpoint memory needs Linux (memfd)")

// NewEndpointMemory returns ErrNoEndpointMemory: it needs Linux.
func NewEndpointMemory(EndpointConfig) (*EndpointMemory, error) { return nil, ErrNoEndpointMemory }

// MapEndpoint returns ErrNoEndpointMemory: it needs Linux.
func MapEndpoint(int) (*EndpointView, error) { return nil, ErrNoEndpointMemory }

// Close does nothing: there is no memory to release.
func (m *EndpointMemory) Close() error { return nil }

// Close does nothing: there is no mapping to release.
func (v *EndpointView) Close() error { return nil }
