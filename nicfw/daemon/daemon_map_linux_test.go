//go:build linux

package daemon

import (
	"net"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/mapper"
	"github.com/xam-project/xam/nicfw/transport"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// Two daemons with no host table run the mapper protocol on their links:
// they agree on a table, each learns its own id from it, and applications
// exchange messages using those ids. When one daemon stops, the other's
// mapper notices it vanish and drops it from the table; a message to it is
// returned to its sender ("no such host"). TestDaemonMapperOverAFXDP runs
// the same body over AF_XDP.
func TestDaemonMapper(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	mapperBody(t, la, lb)
}

func TestDaemonMapperOverAFXDP(t *testing.T) {
	testenv.NoMemfdLeaks(t, "xam-endpoint")
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	_, sa := xdptest.OpenHost(t, v.A, 0, 1)
	_, sb := xdptest.OpenHost(t, v.B, 0, 2)
	mapperBody(t, sa, sb)
}

func mapperBody(t *testing.T, la, lb afxdp.Link) {
	mc := mapper.Config{ProbeInterval: 20 * time.Millisecond, Privileged: true}
	cfg := func() Config {
		c := mc
		return Config{Engine: nicfw.EngineConfig{Host: 100, Transport: transport.Config{GiveUpAfter: 200 * time.Millisecond}}, Map: &c, Sleep: 50 * time.Microsecond}
	}
	da, pa, _ := startDaemon(t, la, cfg())
	db, pb, stopB := startDaemon(t, lb, cfg())
	stats := func(d *Daemon) Stats {
		t.Helper()
		s, err := d.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	idOf := func(s Stats, mac net.HardwareAddr) (nicfw.HostID, bool) {
		for _, h := range s.Hosts {
			if h.MAC == mac.String() {
				return h.ID, true
			}
		}
		return 0, false
	}
	waitFor(t, "one table of two hosts", func() bool {
		a, b := stats(da), stats(db)
		return len(a.Hosts) == 2 && len(b.Hosts) == 2 && a.Epoch != 0 && a.Epoch == b.Epoch
	})
	s := stats(da)
	ida, _ := idOf(s, la.HardwareAddr())
	idb, _ := idOf(s, lb.HardwareAddr())
	if ida == idb || ida == 100 || idb == 100 {
		t.Fatalf("host table %+v", s.Hosts)
	}
	client := dial(t, pa, OpenRequest{Tag: 9, Table: []nicfw.Name{{Host: idb, Endpoint: 20}}})
	server := dial(t, pb, OpenRequest{Endpoint: 20, Tag: 9, Table: []nicfw.Name{{Host: ida, Endpoint: client.ID}}})
	if client.Host != ida || server.Host != idb {
		t.Fatalf("endpoints on hosts %d and %d, want %d and %d", client.Host, server.Host, ida, idb)
	}
	receive := func(ep *Endpoint, q endpoint.Queue, ev endpoint.Events) endpoint.Descriptor {
		t.Helper()
		var d endpoint.Descriptor
		for {
			if ok, err := ep.Receive(q, &d); err != nil {
				t.Fatal(err)
			} else if ok {
				return d
			}
			if ready, err := ep.Wait(ev, 5*time.Second); err != nil || !ready {
				t.Fatalf("no message in 5 s (%v)", err)
			}
		}
	}
	req := short(0, 3, 41)
	if err := client.Send(endpoint.RequestSend, &req); err != nil {
		t.Fatal(err)
	}
	got := receive(server, endpoint.RequestReceive, endpoint.EventRequest)
	if got.Args[0] != 41 || got.Dest != 0 {
		t.Fatalf("server got %+v", got)
	}
	got.Args[0]++
	if err := server.Send(endpoint.ReplySend, &got); err != nil {
		t.Fatal(err)
	}
	if rep := receive(client, endpoint.ReplyReceive, endpoint.EventReply); rep.Args[0] != 42 {
		t.Fatalf("client got %+v", rep)
	}

	// B stops: A's mapper drops it, and A's messages to it come back.
	server.Close()
	stopB()
	waitFor(t, "host B dropped from A's table", func() bool {
		_, ok := idOf(stats(da), lb.HardwareAddr())
		return !ok
	})
	if err := client.Send(endpoint.RequestSend, &req); err != nil {
		t.Fatal(err)
	}
	back := receive(client, endpoint.ReplyReceive, endpoint.EventReply)
	if reason, _, ok := back.ReturnInfo(); !ok || reason != endpoint.ReasonNoHost && reason != endpoint.ReasonUnreachable {
		t.Fatalf("the message to the vanished host came back as %+v (reason %v)", back, reason)
	}
	s = stats(da)
	if id, _ := idOf(s, la.HardwareAddr()); id != ida {
		t.Errorf("host A moved from id %d to %d when B vanished", ida, id)
	}
	if s.Mapper == nil || s.Mapper.Vanished == 0 || s.Mapper.TablesSent+s.Mapper.TablesAdopted == 0 {
		t.Errorf("mapper stats %+v", s.Mapper)
	}
	t.Logf("A: hosts %+v, epoch %d, mapper %+v", s.Hosts, s.Epoch, *s.Mapper)
}
