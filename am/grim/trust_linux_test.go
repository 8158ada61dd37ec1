//go:build linux

package grim

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// TestGRIMTrust: hosts 1-3 are the cluster's members; host 4's endpoint
// uses the same tag but is in nobody's Config.Peers (a stranger), and
// member 3 misbehaves. Names "disk.*" are bound to member 2. No
// stranger's message runs a handler or changes a registry; a table or a
// publish answer from a member other than the central is refused; a bound
// name cannot be taken, not even by writing to the central directly; the
// real owner's registration stands and every member sees it.
func TestGRIMTrust(t *testing.T) {
	links := xdptest.Hub(t, 4, memlink.Options{Seed: 41})
	members := []nicfw.Name{{Host: 1, Endpoint: 16}, {Host: 2, Endpoint: 16}, {Host: 3, Endpoint: 16}}
	bind := map[string]int{"disk.": 1}
	hosts := map[nicfw.HostID]net.HardwareAddr{}
	for i, l := range links {
		hosts[nicfw.HostID(i+1)] = l.HardwareAddr()
	}
	in := Inline{Hosts: hosts, Engine: engineConfig(0, 8)}
	var eps []*Endpoint
	for i := range 3 {
		ep, err := Open(links[i], in, Config{Peers: members, Self: i, Bind: bind, GiveUp: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		eps = append(eps, ep)
	}
	stranger, err := Open(links[3], in, Config{Peers: append(members[:3:3], nicfw.Name{Host: 4, Endpoint: 16}), Self: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	all := append(eps[:3:3], stranger)
	// run polls every endpoint (each host's engine) until done holds.
	run := func(what string, done func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !done(); {
			for _, ep := range all {
				if _, err := ep.Poll(); err != nil {
					t.Fatal(err)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after a minute: %+v %+v %+v %d pending", what, eps[0].stats, eps[1].stats, eps[2].stats, eps[2].ch(0).Outstanding())
			}
		}
	}
	ran := 0
	h := func(*Token, [ShortArgs]uint32, []byte) { ran++ }
	if err := eps[1].HandleNamed("disk.read", 40, h); err != nil {
		t.Fatal(err)
	}
	if err := eps[2].HandleNamed("disk.read", 50, h); !errors.Is(err, ErrConflict) {
		t.Errorf("member 3 registered a name bound to member 2: %v", err)
	}
	if err := eps[1].Handle(41, h); err != nil {
		t.Fatal(err)
	}
	// The central runs while the others publish (each a call that waits).
	publish := func(ep *Endpoint) error {
		done := make(chan error, 1)
		go func() { done <- ep.Publish() }()
		for {
			select {
			case err := <-done:
				return err
			default:
				if _, err := eps[0].Poll(); err != nil {
					return err
				}
			}
		}
	}
	if err := errors.Join(eps[0].Publish(), publish(eps[1])); err != nil {
		t.Fatal(err)
	}

	// Member 3 asks the central for the bound name directly, then pushes
	// a forged table to member 2 (a generation ahead, and one that pins).
	forged := encodeTable(Table{"disk.read": {ID: 50, Name: "disk.read", Owners: []nicfw.Name{members[2]}}})
	c3 := eps[2].ch(0)
	err = errors.Join(
		c3.Bulk(0, HandlerRegister, forged),
		c3.Bulk(1, HandlerTable, forged, eps[1].tableGen+1),
		c3.Bulk(1, HandlerTable, forged, 0xFFFFFFFF),
		c3.Short(1, HandlerRegister, 0, 1<<20), // a publish answer, unasked, not from the central
	)
	if err != nil {
		t.Fatal(err)
	}
	// The stranger: a request to a member's handler, a table and a
	// registration.
	cs := stranger.ch(0)
	if err := errors.Join(cs.Short(1, 41, 7), cs.Bulk(1, HandlerTable, forged, 0xFFFFFFFF), cs.Bulk(0, HandlerRegister, forged)); err != nil {
		t.Fatal(err)
	}
	run("the forgeries delivered", func() bool {
		return eps[1].stats.Refused >= 3 && eps[1].stats.Strangers >= 2 && eps[0].stats.Strangers >= 1 && c3.Outstanding() == 0
	})
	if ran != 0 {
		t.Errorf("%d handlers ran for the stranger", ran)
	}
	if err := publish(eps[2]); err != nil {
		t.Fatal(err)
	}
	for i, ep := range eps {
		if peer, id, err := ep.Owner("disk.read"); err != nil || peer != 1 || id != 40 {
			t.Errorf("member %d: disk.read at peer %d, handler %d (%v), want member 2's handler 40", i+1, peer, id, err)
		}
	}
	if e := eps[0].registry.table["disk.read"]; len(e.Owners) != 1 || e.Owners[0] != members[1] {
		t.Errorf("the central's registry: %+v", e)
	}
}

// TestGRIMTableGenerations: a table from the central is taken if its
// generation is newer and not far ahead; an older one is ignored, one that
// jumps (0xFFFFFFFF, to pin itself) refused.
func TestGRIMTableGenerations(t *testing.T) {
	ep := newEndpoint(Config{Peers: []nicfw.Name{{Host: 1, Endpoint: 16}, {Host: 2, Endpoint: 16}}, Self: 1})
	table := func(id HandlerID) []byte {
		return encodeTable(Table{"x": {ID: id, Name: "x", Owners: []nicfw.Name{{Host: 1, Endpoint: 16}}}})
	}
	for _, c := range []struct {
		gen  uint32
		id   HandlerID
		want HandlerID
	}{{3, 20, 20}, {0xFFFFFFFF, 21, 20}, {2, 22, 20}, {4, 23, 23}, {4 + maxGenJump, 24, 23}, {100, 25, 25}} {
		ep.tableArrived([ShortArgs]uint32{c.gen}, table(c.id))
		if got := ep.table["x"].ID; got != c.want {
			t.Errorf("after generation %#x: handler %d, want %d", c.gen, got, c.want)
		}
	}
	if ep.stats.Refused != 3 {
		t.Errorf("%d tables refused, want 3", ep.stats.Refused)
	}
}

// TestGRIMPublishUnderLoad: inline, a member publishes while another keeps the
// central endpoint answering a stream of requests. The central's replies
// leave from its channel 0, which the engine serves replies first; its
// table pushes leave from its last channel, so the publish still completes.
func TestGRIMPublishUnderLoad(t *testing.T) {
	hosts := cluster(t, xdptest.Hub(t, 3, memlink.Options{Seed: 43}), clusterConfig{channels: 2, window: 1})
	for _, h := range hosts {
		h.start()
	}
	var stop atomic.Bool
	flood := make(chan error, 1)
	go func() {
		var err error
		hosts[1].do(func(ep *Endpoint) {
			for n := 0; !stop.Load() && err == nil; n++ {
				err = ep.ch(n%2).Short(0, HandlerNull)
			}
		})
		flood <- err
	}()
	var err error
	hosts[2].do(func(ep *Endpoint) {
		if err = ep.HandleNamed("late", 30, func(*Token, [ShortArgs]uint32, []byte) {}); err == nil {
			err = ep.Publish()
		}
	})
	stop.Store(true)
	if err := errors.Join(err, <-flood); err != nil {
		t.Fatal(err)
	}
}
