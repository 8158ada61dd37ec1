//go:build linux

package am

import (
	"errors"

	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
)

// Remote is an AM-II endpoint in firmware mode: opened through a firmware
// daemon's unix socket (`xam fw`), its engine running on the daemon's
// cores. Its AMII is used as in inline mode, but Poll only runs handlers
// (the engine moves the messages by itself) and waiting sleeps on the
// endpoint's notification eventfd instead of spinning.
type Remote struct {
	*AMII
	ep   *daemon.Endpoint
	conn *daemon.Conn
}

// Dial connects to the daemon at socket and opens an endpoint as req asks
// (its virtual network: tag and translation table).
func Dial(socket string, req daemon.OpenRequest, cfg AMIIConfig) (*Remote, error) {
	c, err := daemon.Dial(socket)
	if err != nil {
		return nil, err
	}
	ep, err := c.Open(req)
	if err != nil {
		c.Close()
		return nil, err
	}
	cfg.Block = ep.Block
	a, err := NewAMII(ep.View, nil, cfg)
	if err != nil {
		ep.Close()
		c.Close()
		return nil, err
	}
	return &Remote{AMII: a, ep: ep, conn: c}, nil
}

// Endpoint returns the endpoint's id and its host's.
func (r *Remote) Endpoint() nicfw.Name { return nicfw.Name{Host: r.ep.Host, Endpoint: r.ep.ID} }

// Close closes the endpoint and the connection.
func (r *Remote) Close() error {
	return errors.Join(r.ep.Close(), r.conn.Close())
}
