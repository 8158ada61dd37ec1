package ssam

import (
	"errors"
	"fmt"
	"net"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/driver"
)

// VCI is the short VC of the connection Open makes, both ways; its bulk VC
// is VCI+1. A data path for it admits those two (xam's XDP program with
// admission on: loader.Config.Admission, datapath.OpenConfig).
const VCI = 32

// Open returns an endpoint on link with one connection, to the host with
// MAC peer on VCI: it makes the connection's device (package driver) with
// the send areas cfg needs, and the endpoint on it, as amii.Open makes an
// engine and its endpoint. Close closes both; the link stays the
// caller's. For several connections or other VCs, open the device with
// driver.Open and use New.
func Open(link afxdp.Link, peer net.HardwareAddr, cfg Config) (*Endpoint, error) {
	c, err := cfg.Filled()
	if err != nil {
		return nil, err
	}
	dev, err := driver.Open(link, driver.Config{
		Conns:     []driver.ConnSpec{{Peer: peer, SendVCI: VCI, RecvVCI: VCI}},
		SendSlots: SendSlots(c.Window, c.MaxMessage),
	})
	if err != nil {
		return nil, err
	}
	e, err := New(dev, cfg)
	if err != nil {
		return nil, errors.Join(err, dev.Close())
	}
	e.ownDev = true
	return e, nil
}

// Close closes the endpoint: the device too if Open made it (one that New
// was given stays its caller's). Afterwards every call that sends, polls or
// waits returns ErrClosed. It may not be called from a handler.
func (ep *Endpoint) Close() error {
	if ep.closed {
		return nil
	}
	if ep.depth > 0 {
		return fmt.Errorf("%w: Close from a handler", ErrDiscipline)
	}
	ep.closed = true
	if ep.ownDev {
		return ep.dev.Close()
	}
	return nil
}

// Device returns the endpoint's device: its connections, send areas and
// counters (driver.Device.Stats).
func (ep *Endpoint) Device() *driver.Device { return ep.dev }
