//go:build linux

package grim_test

import (
	"fmt"
	"net"
	"sync/atomic"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/am/grim"
	"github.com/xam-project/xam/nicfw"
)

// Two hosts, each a GRIM endpoint with its inline engine (grim.Open), on an in-memory
// link (on real ones: an AF_XDP socket, afxdp.Open). Host 2 registers a
// handler by name; host 1, the registry's central endpoint, looks it up
// and sends it a short and a bulk message.
func Example() {
	la, lb, _ := memlink.NewPair(memlink.Options{})
	defer la.Close()
	defer lb.Close()
	peers := []nicfw.Name{{Host: 1, Endpoint: 16}, {Host: 2, Endpoint: 16}}
	open := func(l *memlink.Link, self int, other *memlink.Link) *grim.Endpoint {
		in := grim.Inline{Hosts: map[nicfw.HostID]net.HardwareAddr{peers[1-self].Host: other.HardwareAddr()}}
		ep, err := grim.Open(l, in, grim.Config{Peers: peers, Self: self, Channels: 2})
		if err != nil {
			panic(err)
		}
		return ep
	}
	a := open(la, 0, lb)
	defer a.Close()
	b := open(lb, 1, la)
	defer b.Close()

	// Host 2 runs in a goroutine of its own, as a host's thread would.
	var got atomic.Int32
	ready := make(chan error)
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := b.HandleNamed("sum", grim.FirstUserHandler, func(t *grim.Token, args [grim.ShortArgs]uint32, data []byte) {
			peer, ch := t.Source()
			fmt.Printf("sum from peer %d channel %d: %d, %d bytes\n", peer, ch, args[0]+args[1], len(data))
			got.Add(1)
		})
		if err == nil {
			err = b.Publish() // host 1 must be running: it keeps the registry
		}
		ready <- err
		for !stop.Load() {
			b.Poll()
		}
	}()
	for published := false; !published; {
		select {
		case err := <-ready:
			if err != nil {
				panic(err)
			}
			published = true
		default:
			a.Poll()
		}
	}
	if err := a.Publish(); err != nil {
		panic(err)
	}
	peer, h, err := a.Owner("sum")
	if err != nil {
		panic(err)
	}
	c0, _ := a.Channel(0)
	c1, _ := a.Channel(1)
	c0.Short(peer, h, 2, 3)
	c1.Bulk(peer, h, make([]byte, 10_000), 4, 5)
	for got.Load() < 2 {
		a.Poll()
	}
	stop.Store(true)
	<-done
	// Unordered output:
	// sum from peer 0 channel 0: 5, 0 bytes
	// sum from peer 0 channel 1: 9, 10000 bytes
}
