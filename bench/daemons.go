package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"

	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
)

// firmwareHost is one host's firmware daemon, run in this process on the
// host's AF_XDP socket.
type firmwareHost struct {
	raw  *datapath.Endpoint
	d    *daemon.Daemon
	sock string
	stop func() // stops the daemon and waits for it
}

// startFirmwareHosts opens xam's data path on a and b and runs a daemon on
// each, hosts amiiHostA and amiiHostB, each knowing the other, with its
// socket in dir. adjust, if set, sets host i's daemon configuration (and
// may set its XDP program's faults) before the daemon starts. With shared
// both daemons' engines run in one thread (daemon.RunGroup), as one NIC
// processor with two ports; otherwise each has its own. The returned
// function stops both and closes their data paths; on an error, nothing is
// left running.
func startFirmwareHosts(a, b datapath.Place, dir string, mode loader.Mode, queue int, shared bool,
	adjust func(i int, raw *datapath.Endpoint, c *daemon.Config) error) ([2]*firmwareHost, func(), error) {
	var hosts [2]*firmwareHost
	closeAll := func() {
		for _, h := range hosts {
			if h == nil {
				continue
			}
			if h.stop != nil {
				h.stop()
			}
			h.raw.Close()
		}
	}
	places := [2]datapath.Place{a, b}
	ids := [2]nicfw.HostID{amiiHostA, amiiHostB}
	for i, p := range places {
		raw, err := datapath.Open(p, mode, queue)
		if err != nil {
			closeAll()
			return hosts, nil, err
		}
		h := &firmwareHost{raw: raw, sock: filepath.Join(dir, fmt.Sprintf("h%d.sock", i))}
		hosts[i] = h
		cfg := daemon.Config{
			Engine: nicfw.EngineConfig{Host: ids[i]},
			Hosts:  map[nicfw.HostID]net.HardwareAddr{ids[1-i]: places[1-i].MAC},
			Socket: h.sock,
		}
		if adjust != nil {
			if err := adjust(i, raw, &cfg); err != nil {
				closeAll()
				return hosts, nil, err
			}
		}
		if h.d, err = daemon.New(raw.Sock, cfg); err != nil {
			closeAll()
			return hosts, nil, err
		}
		if shared {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.d.Run(ctx) }()
		h.stop = func() { cancel(); <-done }
	}
	if shared {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- daemon.RunGroup(ctx, hosts[0].d, hosts[1].d) }()
		stop := sync.OnceFunc(func() { cancel(); <-done })
		hosts[0].stop, hosts[1].stop = stop, stop
	}
	return hosts, closeAll, nil
}

// firmwareHosts starts the two hosts' daemons as fw places them: in this
// process (startFirmwareHosts; configure, if set, adjusts each daemon's
// configuration, and loss is set in each host's XDP program), or as `xam
// fw` processes (spawnFirmwareHosts; args are added to each command line,
// and loss is refused: the daemons' programs are theirs).
func firmwareHosts(a, b datapath.Place, dir string, mode loader.Mode, queue int, fw FirmwareLayout, loss float64,
	args []string, configure func(c *daemon.Config)) ([2]*firmwareHost, func(), error) {
	if fw.Shape == ShapeDaemons {
		if loss > 0 {
			return [2]*firmwareHost{}, nil, errors.New("injected loss needs the daemons in this process (firmware layout group or threads): the daemons' XDP programs are their own")
		}
		return spawnFirmwareHosts(a, b, dir, mode, queue, fw, args)
	}
	return startFirmwareHosts(a, b, dir, mode, queue, fw.Shape == ShapeGroup, func(i int, raw *datapath.Endpoint, c *daemon.Config) error {
		c.Cores, c.Sleep = fw.Cores[i], fw.Sleep
		if configure != nil {
			configure(c)
		}
		if loss > 0 {
			return raw.Prog.SetFaults(loader.Faults{DropRate: loss})
		}
		return nil
	})
}

// stats returns the host's daemon's counters, through its socket if it
// runs in a process of its own.
func (h *firmwareHost) stats() (daemon.Stats, error) {
	if h.d != nil {
		return h.d.Stats()
	}
	c, err := daemon.Dial(h.sock)
	if err != nil {
		return daemon.Stats{}, err
	}
	defer c.Close()
	return c.Stats()
}
