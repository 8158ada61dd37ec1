//go:build linux

// Package daemontest runs firmware daemons for tests: one per link, host
// i+1 on links[i], every other link's host in its host table, stopped when
// the test ends.
package daemontest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
)

// Start runs a daemon on each link, host i+1 on links[i] with the engine
// configuration engine returns for it (its Host is set), and returns their
// sockets, in a directory of the test's.
func Start(t testing.TB, links []afxdp.Link, engine func(nicfw.HostID) nicfw.EngineConfig) []string {
	t.Helper()
	dir := t.TempDir()
	var sockets []string
	for i, l := range links {
		id := nicfw.HostID(i + 1)
		hosts := map[nicfw.HostID]net.HardwareAddr{}
		for j, o := range links {
			if j != i {
				hosts[nicfw.HostID(j+1)] = o.HardwareAddr()
			}
		}
		ec := engine(id)
		ec.Host = id
		path := filepath.Join(dir, fmt.Sprintf("fw%d.sock", id))
		d, err := daemon.New(l, daemon.Config{Engine: ec, Hosts: hosts, Socket: path, Sleep: 50 * time.Microsecond})
		if err != nil {
			t.Fatal(err)
		}
		Run(t, d)
		sockets = append(sockets, path)
	}
	return sockets
}

// Run runs d until the test ends, and fails the test if it stopped for
// another reason than that.
func Run(t testing.TB, d *daemon.Daemon) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("daemon: %v", err)
		}
	})
}
