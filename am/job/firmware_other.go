//go:build !linux

package job

import (
	"crypto/rand"
	"encoding/binary"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/nicfw"
)

// newTag draws a virtual network's tag: 64 random bits, at least 2^32.
func newTag() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:]) // never fails (crypto/rand)
		if t := binary.LittleEndian.Uint64(b[:]); t>>32 != 0 {
			return t
		}
	}
}

type daemonView struct {
	used  map[nicfw.EndpointID]bool
	hosts map[nicfw.HostID]string
}

func viewDaemon(string) (*daemonView, error) { return nil, ErrNotSupported }

func dialAMII(string, amii.VNet, amii.Config) (*amii.Endpoint, error) { return nil, ErrNotSupported }

func dialGRIM(string, grim.Config) (*grim.Endpoint, error) { return nil, ErrNotSupported }
