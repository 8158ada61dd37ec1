//go:build linux

package amii

import (
	"errors"

	"github.com/xam-project/xam/nicfw/daemon"
)

// Dial returns an AM-II endpoint in firmware mode: opened through the
// firmware daemon listening on socket (`xam fw`), whose engine runs on
// cores of its own. The endpoint is used as in inline mode, but Poll only
// runs handlers (the daemon's engine moves the messages by itself) and
// waiting sleeps on the endpoint's notification instead of spinning. The
// daemon's refusals are typed (daemon.ErrPermission, daemon.ErrQuota,
// nicfw.ErrConfig, nicfw.ErrEndpointInUse). Close closes the endpoint and
// the connection.
func Dial(socket string, vn VNet, cfg Config) (*Endpoint, error) {
	c, err := daemon.Dial(socket)
	if err != nil {
		return nil, err
	}
	ep, err := c.Open(daemon.OpenRequest{Endpoint: vn.ID, Tag: vn.Tag, Table: vn.Table, Weight: vn.Weight,
		QueueEntries: cfg.QueueEntries, StagingSize: cfg.StagingSize})
	if err != nil {
		c.Close()
		return nil, err
	}
	a, err := newEndpoint(ep.View, nil, ep.Block, cfg)
	if err != nil {
		ep.Close()
		c.Close()
		return nil, err
	}
	a.name = Name{Host: ep.Host, Endpoint: ep.ID}
	a.closer = func() error { return errors.Join(ep.Close(), c.Close()) }
	return a, nil
}
