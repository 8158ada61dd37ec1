//go:build linux

package grim

import (
	"errors"
	"fmt"
	"time"

	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// Dial makes a GRIM endpoint in firmware mode: its channels are opened
// through the firmware daemon listening on socket (`xam fw`), whose engine
// runs on cores of its own and serves every endpoint of the host, so that
// several GRIM endpoints of one host (an application, a storage endpoint)
// run on threads of their own. Poll then only runs handlers. The daemon's
// refusals are typed as Dial's in package amii. Close closes the channels
// and the connection.
//
// cfg.Tag is the virtual network of every channel, on every host, and the
// daemon guards it as amii.Dial says: the first endpoint of a tag on a
// daemon makes its user the network's creator there, and other users open
// its endpoints only with the creator's grant (`xam fw grant`), or as
// members of the creator's groups. DefaultTag, like any tag below 2^32,
// is weak (daemon.WeakTag): only root and the daemon's user may make a
// network with it. Other users give every host of the job the same tag
// drawn at random (daemon.NewTag) in cfg.Tag.
//
// The endpoint reserves on the daemon the MaxChannels ids from its own
// (Peers[Self].Endpoint; daemon.OpenRequest.Reserve), every one of which
// its peers' tables name as one of its channels: no other endpoint of the
// host may take one, so that nobody let into the network can open an id
// of the range it does not use and speak as it. GRIM endpoints of one
// host are therefore MaxChannels ids apart at least (ErrEndpointInUse
// otherwise).
func Dial(socket string, cfg Config) (*Endpoint, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	conn, err := daemon.Dial(socket)
	if err != nil {
		return nil, err
	}
	ep := newEndpoint(cfg)
	var eps []*daemon.Endpoint
	first := cfg.Peers[cfg.Self].Endpoint
	err = ep.open(func(id nicfw.EndpointID, ec endpoint.Config, vn nicfw.VNet) (*endpoint.View, func() error, error) {
		req := daemon.OpenRequest{Endpoint: id, Tag: vn.Tag, Table: vn.Table, Weight: vn.Weight, Ordered: vn.Ordered,
			QueueEntries: ec.QueueEntries, StagingSize: ec.StagingSize, Key: vn.Key}
		if id == first {
			// Every id of the endpoint's range, which the peers' tables
			// name as its channels: nobody else may take one it does not
			// use and speak as it.
			req.Reserve = MaxChannels
		}
		d, err := conn.Open(req)
		if err != nil {
			return nil, nil, err
		}
		if d.Host != cfg.Peers[cfg.Self].Host {
			d.Close()
			return nil, nil, fmt.Errorf("%w: Peers[%d] is on host %d, the daemon at %s is host %d", ErrConfig, cfg.Self, cfg.Peers[cfg.Self].Host, socket, d.Host)
		}
		eps = append(eps, d)
		return d.View, d.Close, nil
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	ep.block = func(timeout time.Duration) error {
		err := daemon.BlockAny(eps, timeout)
		if errors.Is(err, daemon.ErrClosed) && ep.gone == nil {
			ep.gone = fmt.Errorf("%w: the daemon at %s stopped: %w", ErrClosed, socket, err)
		}
		return err
	}
	closeChannels := ep.closeAll
	ep.closeAll = func() error { return errors.Join(closeChannels(), conn.Close()) }
	return ep, nil
}
