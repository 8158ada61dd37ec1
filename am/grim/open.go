package grim

import (
	"errors"
	"fmt"
	"net"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/nicfw"
)

// Names of the firmware engine that a GRIM application uses, so that it
// need not import the engine's packages for ordinary use.
type (
	// HostID names a host of the cluster.
	HostID = nicfw.HostID
	// EndpointID names an endpoint on its host.
	EndpointID = nicfw.EndpointID
	// Name is an endpoint's global name: host and endpoint.
	Name = nicfw.Name
)

// Inline describes the engine that Open runs in the application's
// goroutine: the other hosts' addresses and the engine's configuration.
type Inline struct {
	// Hosts is the engine's host table: each host's link address, every
	// host of Config.Peers included (this one may be left out).
	Hosts map[HostID]net.HardwareAddr
	// Engine configures the engine (its Host is set from
	// Config.Peers[Config.Self]); zero fields take the engine's defaults.
	Engine nicfw.EngineConfig
}

// Open returns a GRIM endpoint in inline mode on link: it makes an engine
// of its own, which runs in the goroutine that uses the endpoint (Poll,
// Wait and every send run it), and the endpoint on it. Close closes the
// endpoint and the engine; the link stays the caller's. It is New with the
// engine built from in.
func Open(link afxdp.Link, in Inline, cfg Config) (*Endpoint, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	ec := in.Engine
	ec.Host = cfg.Peers[cfg.Self].Host
	eng, err := nicfw.NewEngine(link, ec)
	if err != nil {
		return nil, err
	}
	for _, p := range cfg.Peers {
		if _, ok := in.Hosts[p.Host]; !ok && p.Host != ec.Host {
			eng.Close()
			return nil, fmt.Errorf("%w: no address for host %d (Inline.Hosts)", ErrConfig, p.Host)
		}
	}
	for id, mac := range in.Hosts {
		if id == ec.Host {
			continue
		}
		if err := eng.AddHost(id, mac); err != nil {
			eng.Close()
			return nil, err
		}
	}
	ep, err := New(eng, cfg)
	if err != nil {
		eng.Close()
		return nil, err
	}
	closeChannels := ep.closeAll
	ep.closeAll = func() error { return errors.Join(closeChannels(), eng.Close()) }
	return ep, nil
}
