//go:build linux

package amii

import (
	"errors"
	"fmt"
	"time"

	"github.com/xam-project/xam/nicfw/daemon"
)

// Dial returns an AM-II endpoint in firmware mode: opened through the
// firmware daemon listening on socket (`xam fw`), whose engine runs on
// cores of its own. The endpoint is used as in inline mode, but Poll only
// runs handlers (the daemon's engine moves the messages by itself) and
// waiting sleeps on the endpoint's notification instead of spinning. Close
// closes the endpoint and the connection.
//
// vn.Tag names the virtual network, which the daemon guards: its first
// endpoint on a daemon makes its creator that endpoint's user, and later
// ones are opened only for the creator's uid and groups and whom it granted
// (daemon.Conn.Grant, `xam fw grant`). A user other than root may make a
// network only with a tag that is not weak (daemon.WeakTag): a job draws
// one (daemon.NewTag) and gives it to all its hosts; vn.Tag 0 has the
// daemon draw a new network's tag (DialNew returns it). The daemon's
// refusals are typed (daemon.ErrPermission, daemon.ErrWeakTag,
// daemon.ErrQuota, nicfw.ErrConfig, nicfw.ErrEndpointInUse). Once the
// daemon has stopped, a wait and every later call that sends, polls or
// waits returns an error that wraps both ErrClosed and daemon.ErrClosed.
func Dial(socket string, vn VNet, cfg Config) (*Endpoint, error) {
	a, _, err := dial(socket, vn, cfg)
	return a, err
}

// DialNew is Dial on a new virtual network, whose tag the daemon draws at
// random (vn.Tag is ignored): it returns the endpoint and the tag, for the
// job's other endpoints (Dial with it on the other hosts; on this one after
// a grant, if they are another user's).
func DialNew(socket string, vn VNet, cfg Config) (*Endpoint, uint64, error) {
	vn.Tag = 0
	return dial(socket, vn, cfg)
}

func dial(socket string, vn VNet, cfg Config) (*Endpoint, uint64, error) {
	c, err := daemon.Dial(socket)
	if err != nil {
		return nil, 0, err
	}
	ep, err := c.Open(daemon.OpenRequest{Endpoint: vn.ID, Tag: vn.Tag, Table: vn.Table, Weight: vn.Weight,
		QueueEntries: cfg.QueueEntries, StagingSize: cfg.StagingSize, Key: vn.Key})
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	var a *Endpoint
	block := func(timeout time.Duration) error {
		err := ep.Block(timeout)
		if errors.Is(err, daemon.ErrClosed) && a.gone == nil {
			a.gone = fmt.Errorf("%w: the daemon at %s stopped: %w", ErrClosed, socket, err)
		}
		if a.gone != nil {
			return a.gone
		}
		return err
	}
	a, err = newEndpoint(ep.View, nil, block, cfg)
	if err != nil {
		ep.Close()
		c.Close()
		return nil, 0, err
	}
	a.name = Name{Host: ep.Host, Endpoint: ep.ID}
	a.noteTable(vn.Table)
	a.closer = func() error { return errors.Join(ep.Close(), c.Close()) }
	return a, ep.Tag, nil
}
