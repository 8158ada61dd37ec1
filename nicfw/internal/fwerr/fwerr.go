// Package fwerr holds the error that every package of xam's NIC firmware
// reports for invalid settings, so that errors.Is(err, nicfw.ErrConfig)
// holds whichever of them refused: the endpoint memory, the transport or
// the engine, inline or across the daemon's socket.
package fwerr

import "errors"

// ErrConfig: invalid settings.
var ErrConfig = errors.New("nicfw: invalid configuration")
