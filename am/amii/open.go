package amii

import (
	"errors"
	"fmt"
	"net"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// Names of the firmware engine that an AM-II application uses, so that it
// need not import the engine's packages for ordinary use.
type (
	// HostID names a host of the cluster.
	HostID = nicfw.HostID
	// EndpointID names an endpoint on its host.
	EndpointID = nicfw.EndpointID
	// Name is an endpoint's global name: host and endpoint.
	Name = nicfw.Name
	// Reason is why a message came back to its sender (Returned.Reason).
	Reason = endpoint.Reason
	// Class is a message's class (Returned.Class).
	Class = endpoint.Class
)

// The classes of messages.
const (
	ClassShort  = endpoint.ClassShort
	ClassMedium = endpoint.ClassMedium
	ClassBulk   = endpoint.ClassBulk
)

// The reasons of return to sender (docs/wire.md).
const (
	ReasonBadTag      = endpoint.ReasonBadTag
	ReasonNoEndpoint  = endpoint.ReasonNoEndpoint
	ReasonUnreachable = endpoint.ReasonUnreachable
	ReasonNoHost      = endpoint.ReasonNoHost
	ReasonTooLarge    = endpoint.ReasonTooLarge
	ReasonClosed      = endpoint.ReasonClosed
	ReasonRange       = endpoint.ReasonRange
	ReasonIncomplete  = endpoint.ReasonIncomplete
	ReasonRestarted   = endpoint.ReasonRestarted
	ReasonNoHandler   = endpoint.ReasonNoHandler
	ReasonNoReply     = endpoint.ReasonNoReply
)

// NoIndex is Token.Source for a sender outside the translation table.
const NoIndex = -1

// VNet is an endpoint's id and virtual network: its tag, which the engine
// stamps on what it sends and checks on what it delivers, and its
// translation table, whose indices name the destinations of its requests.
type VNet struct {
	// ID is the endpoint's id on its host. With Dial, 0 lets the daemon
	// choose one.
	ID  EndpointID
	Tag uint64
	// Table is the translation table. It may name an endpoint more than
	// once: a message from it names its first index (Token.Source), a
	// reply from it ends the oldest request outstanding to any of its
	// indices, and a request that comes back names the index it was
	// sent to.
	Table []Name
	// Weight is the endpoint's share of the engine's sends (1..64; 0: 1).
	Weight int
	// Key, if set (16 or 32 bytes; nicfw.NewKey), authenticates the
	// endpoint's messages between hosts (nicfw.VNet.Key): the same key on
	// every endpoint of the virtual network. With Dial, every endpoint of
	// the network on the daemon must give the same key.
	Key []byte
}

// Inline describes the engine that Open runs in the application's
// goroutine: this host's id and the other hosts' addresses.
type Inline struct {
	Host  HostID
	Hosts map[HostID]net.HardwareAddr
	// Engine configures the engine (its Host is set from Host); zero
	// fields take the engine's defaults.
	Engine nicfw.EngineConfig
}

// Open returns an AM-II endpoint in inline mode on link: it makes an
// engine of its own, which runs in the goroutine that uses the endpoint
// (Poll, Request and Wait run it), and the endpoint on it. Close closes
// the endpoint and the engine; the link stays the caller's.
func Open(link afxdp.Link, in Inline, vn VNet, cfg Config) (*Endpoint, error) {
	ec := in.Engine
	ec.Host = in.Host
	eng, err := nicfw.NewEngine(link, ec)
	if err != nil {
		return nil, err
	}
	for id, mac := range in.Hosts {
		if err := eng.AddHost(id, mac); err != nil {
			eng.Close()
			return nil, err
		}
	}
	a, err := New(eng, vn, cfg)
	if err != nil {
		eng.Close()
		return nil, err
	}
	closeEndpoint := a.closer
	a.closer = func() error { return errors.Join(closeEndpoint(), eng.Close()) }
	return a, nil
}

// New returns an AM-II endpoint in inline mode on eng, an engine the
// caller owns and may share with other endpoints (all of them then run it
// when they poll, in one goroutine). Close closes the endpoint, not the
// engine.
func New(eng *nicfw.Engine, vn VNet, cfg Config) (*Endpoint, error) {
	if eng == nil {
		return nil, fmt.Errorf("%w: no engine", ErrConfig)
	}
	mem, err := eng.CreateEndpoint(vn.ID, endpoint.Config{QueueEntries: cfg.QueueEntries, StagingSize: cfg.StagingSize},
		nicfw.VNet{Tag: vn.Tag, Table: vn.Table, Weight: vn.Weight, Key: vn.Key})
	if err != nil {
		return nil, err
	}
	view, err := endpoint.Map(mem.FD())
	if err == nil {
		if err = view.MapBells(eng.BellsFD(vn.ID)); err != nil {
			view.Close()
		}
	}
	if err != nil {
		eng.CloseEndpoint(vn.ID)
		return nil, fmt.Errorf("amii: map endpoint %d: %w", vn.ID, err)
	}
	poll := cfg.RunEngine
	if poll == nil {
		poll = eng.Poll
	}
	a, err := newEndpoint(view, poll, nil, cfg)
	if err != nil {
		view.Close()
		eng.CloseEndpoint(vn.ID)
		return nil, err
	}
	a.noteTable(vn.Table)
	a.name = Name{Host: eng.Host(), Endpoint: vn.ID}
	a.closer = func() error { return errors.Join(view.Close(), eng.CloseEndpoint(vn.ID)) }
	if cfg.RunEngine == nil && !cfg.Coalesce {
		// The engine runs in this endpoint's goroutine only: short
		// messages may take the express path.
		a.express, a.expressID = eng, vn.ID
	}
	return a, nil
}

// Name returns the endpoint's global name: its host's id and its own.
func (ep *Endpoint) Name() Name { return ep.name }

// Close releases the endpoint and everything its constructor made for it:
// its mapping, its endpoint at the engine, and (Open) the engine or
// (Dial) the connection to the daemon. Messages arriving for it afterwards
// return to their senders as ReasonClosed, and every call on it that
// sends, polls or waits returns ErrClosed. What the endpoint holds is
// discarded, and nobody is told: requests and replies still in its send
// queues (not yet taken by the engine: Drain first to have every request
// answered or returned), and messages that arrived but no Poll took,
// which their senders count as delivered. It may not be called from a
// handler (ErrDiscipline), nor while other goroutines use the endpoint.
func (ep *Endpoint) Close() error {
	if ep.closer == nil {
		return nil
	}
	if ep.depth > 0 {
		return fmt.Errorf("%w: Close from a handler", ErrDiscipline)
	}
	f := ep.closer
	ep.closer, ep.closed = nil, true
	if err := f(); err != nil && ep.gone == nil {
		return err
	}
	return nil // the daemon stopped: its side is gone already
}
