//go:build linux

package job

import (
	"fmt"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
)

// newTag draws a virtual network's tag: 64 random bits, never weak
// (daemon.WeakTag), so that a daemon lets an unprivileged job make the
// network.
func newTag() uint64 { return daemon.NewTag() }

// daemonView is what a task reads from its node's daemon before it opens:
// the endpoint ids in use, the host table, this host's MAC.
type daemonView struct {
	used  map[nicfw.EndpointID]bool
	hosts map[nicfw.HostID]string
}

// viewDaemon asks the daemon at socket for its endpoints and hosts.
func viewDaemon(socket string) (*daemonView, error) {
	c, err := daemon.Dial(socket)
	if err != nil {
		return nil, fmt.Errorf("job: the node's daemon (xam fw) at %s: %w", socket, err)
	}
	defer c.Close()
	s, err := c.Stats()
	if err != nil {
		return nil, fmt.Errorf("job: the node's daemon (xam fw) at %s: %w", socket, err)
	}
	v := &daemonView{used: map[nicfw.EndpointID]bool{}, hosts: map[nicfw.HostID]string{}}
	for _, e := range s.List {
		v.used[e.ID] = true
	}
	for _, h := range s.Hosts {
		v.hosts[h.ID] = h.MAC
	}
	return v, nil
}

// dialAMII opens an AM-II endpoint through the daemon at socket.
func dialAMII(socket string, vn amii.VNet, cfg amii.Config) (*amii.Endpoint, error) {
	return amii.Dial(socket, vn, cfg)
}

// dialGRIM opens a GRIM endpoint through the daemon at socket.
func dialGRIM(socket string, cfg grim.Config) (*grim.Endpoint, error) {
	return grim.Dial(socket, cfg)
}
