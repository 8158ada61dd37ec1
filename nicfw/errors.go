package nicfw

import (
	"errors"

	"github.com/xam-project/xam/nicfw/internal/fwerr"
	"github.com/xam-project/xam/nicfw/transport"
)

// HostID names a host: the engine's, its transport's and the mapper's
// host tables all use it.
type HostID = transport.HostID

// Errors of the engine. Test for them with errors.Is.
var (
	// ErrConfig: invalid settings, the engine's, its transport's or an
	// endpoint's (the same error as transport.ErrConfig and
	// endpoint.ErrConfig).
	ErrConfig = fwerr.ErrConfig
	// ErrEndpointInUse: an endpoint with that id is open.
	ErrEndpointInUse = errors.New("nicfw: endpoint id in use")
)
