// Command amiikv is a small key-value store over AM-II, written against
// xam's public packages only: two hosts of a veth lab (package lab), xam's
// XDP program and an AF_XDP socket on each (loader, afxdp), a firmware
// engine per host (nicfw) and an AM-II endpoint on each engine (am/amii).
// Host 1 serves: a PUT is a medium request carrying the value (the key is
// its argument), a GET a short request answered by a medium reply with
// the value, a GET of a missing key an empty reply. Host 0 puts N keys,
// gets them all back and checks every byte.
//
// The engines run inline (-mode inline: in the goroutine that drives each
// endpoint) or as firmware daemons (-mode firmware: daemon.Daemon on its
// own thread, the application reaching its endpoint through the daemon's
// unix socket with amii.Dial, as an unprivileged program would through
// `xam fw`).
//
// Run it as root: go run ./examples/amiikv -mode firmware
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xam-project/xam/am/amii"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/lab"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/daemon"
)

func main() {
	mode := flag.String("mode", "inline", "where the engines run: inline or firmware")
	n := flag.Int("keys", 2000, "keys to put and get")
	flag.Parse()
	start := time.Now()
	if err := run(*mode, *n); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("amiikv (%s mode): %d PUTs and %d GETs answered and checked in %v\n", *mode, *n, *n, time.Since(start).Round(time.Millisecond))
}

// The virtual network: one tag, and endpoint 16 on each host (16 is the
// first endpoint an unprivileged application may open through a daemon).
const (
	tag  = 0x6b76
	epID = daemon.FirstUserEndpoint
)

// The server's handlers and the client's, at ids both sides know.
const (
	handlerPut = 1
	handlerGet = 2
	replyGot   = 1
)

// openDataPath attaches xam's program to the host's eth0, opens an AF_XDP
// socket on queue 0 and registers it, in the host's namespace.
func openDataPath(h *lab.Host) (*datapath.Endpoint, error) {
	return datapath.Open(datapath.OnHost(h), loader.ModeAuto, 0)
}

// endpointOn opens host self's AM-II endpoint, whose translation table's
// one entry is the other host's endpoint: inline, on an engine this
// process drives; or through a daemon serving socket dir/fwN.sock. It
// returns the endpoint and what closes everything.
func endpointOn(mode string, d *datapath.Endpoint, self, peer amii.HostID, peerMAC net.HardwareAddr, dir string) (*amii.Endpoint, func(), error) {
	vn := amii.VNet{ID: epID, Tag: tag, Table: []amii.Name{{Host: peer, Endpoint: epID}}}
	if mode == "inline" {
		a, err := amii.Open(d.Sock, amii.Inline{Host: self, Hosts: map[amii.HostID]net.HardwareAddr{peer: peerMAC}}, vn, amii.Config{})
		if err != nil {
			return nil, nil, err
		}
		return a, func() { a.Close() }, nil
	}
	socket := filepath.Join(dir, fmt.Sprintf("fw%d.Sock", self))
	fw, err := daemon.New(d.Sock, daemon.Config{Engine: nicfw.EngineConfig{Host: self},
		Hosts: map[nicfw.HostID]net.HardwareAddr{peer: peerMAC}, Socket: socket, Sleep: 50 * time.Microsecond})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fw.Run(ctx) }()
	stop := func() { cancel(); <-done }
	a, err := amii.Dial(socket, vn, amii.Config{})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return a, func() { a.Close(); stop() }, nil
}

// value is key k's value: its length and bytes depend on k.
func value(k uint64) []byte {
	v := make([]byte, 1+k*131%3000)
	for i := range v {
		v[i] = byte(k>>(8*(i%4))) ^ byte(i*7)
	}
	return v
}

func run(mode string, n int) error {
	if mode != "inline" && mode != "firmware" {
		return fmt.Errorf("-mode %q: want inline or firmware", mode)
	}
	l, err := lab.Up(lab.Config{Name: fmt.Sprintf("kv%d", os.Getpid())})
	if err != nil {
		return err
	}
	defer l.Down()
	dir, err := os.MkdirTemp("", "amiikv-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	h0, h1 := l.Hosts[0], l.Hosts[1]
	d0, err := openDataPath(h0)
	if err != nil {
		return err
	}
	defer d0.Close()
	d1, err := openDataPath(h1)
	if err != nil {
		return err
	}
	defer d1.Close()
	client, closeClient, err := endpointOn(mode, d0, 1, 2, h1.MAC, dir)
	if err != nil {
		return err
	}
	defer closeClient()
	server, closeServer, err := endpointOn(mode, d1, 2, 1, h0.MAC, dir)
	if err != nil {
		return err
	}
	defer closeServer()

	// The server: a map, served by its own goroutine until the client is
	// done. Handlers run in that goroutine (Poll), one at a time.
	store := map[uint64][]byte{}
	var serveErr error
	err = errors.Join(
		server.HandleMedium(handlerPut, func(t *amii.Token, args []uint64, data []byte) {
			store[args[0]] = bytes.Clone(data) // data is valid only while the handler runs
		}),
		server.Handle(handlerGet, func(t *amii.Token, args []uint64) {
			if err := t.ReplyMedium(replyGot, store[args[0]], args[0]); err != nil && serveErr == nil {
				serveErr = err
			}
		}))
	if err != nil {
		return err
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			if _, err := server.Wait(10 * time.Millisecond); err != nil && serveErr == nil {
				serveErr = err
			}
			if _, err := server.Poll(); err != nil && serveErr == nil {
				serveErr = err
			}
		}
	})
	defer func() { stop.Store(true); wg.Wait() }()

	// The client: PUT every key (the reply is implicit), then GET each and
	// check what comes back.
	got := 0
	var bad error
	err = client.HandleMedium(replyGot, func(t *amii.Token, args []uint64, data []byte) {
		if want := value(args[0]); !bytes.Equal(data, want) && bad == nil {
			bad = fmt.Errorf("GET %d: %d bytes, want %d", args[0], len(data), len(want))
		}
		got++
	})
	if err != nil {
		return err
	}
	client.OnReturn(func(r amii.Returned) {
		if bad == nil {
			bad = fmt.Errorf("returned to the client: %v", r)
		}
	})
	for k := range uint64(n) {
		if err := client.RequestMedium(0, handlerPut, value(k), k); err != nil {
			return fmt.Errorf("PUT %d: %w", k, err)
		}
	}
	for k := range uint64(n) {
		if err := client.Request(0, handlerGet, k); err != nil {
			return fmt.Errorf("GET %d: %w", k, err)
		}
	}
	if err := client.Drain(30 * time.Second); err != nil {
		return err
	}
	stop.Store(true)
	wg.Wait()
	switch {
	case serveErr != nil:
		return serveErr
	case bad != nil:
		return bad
	case got != n:
		return fmt.Errorf("%d of %d GETs answered", got, n)
	}
	return nil
}
