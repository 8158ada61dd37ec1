package nicfw

import (
	"errors"
	"testing"
	"time"

	"github.com/xam-project/xam/internal/netnstest"
)

// TestEngineOverAFXDP runs two engines over real AF_XDP sockets on a veth
// pair, with xam's XDP program dropping 10% of the frames at both hosts,
// on the system clock: two virtual networks carry their own traffic only,
// every message exactly once and in order per sender, and a message to an
// endpoint of the other network comes back with ReasonBadTag.
func TestEngineOverAFXDP(t *testing.T) {
	noEndpointLeaks(t)
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	n := &engNet{}
	for i, h := range []*netnstest.Host{v.A, v.B} {
		_, sock := xdpHost(t, h, 0.10, uint64(11+i))
		e, err := NewEngine(sock, EngineConfig{Host: []HostID{hostA, hostB}[i],
			Transport: Config{RetransmitAfter: 2 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		hh := &engHost{eng: e, views: make(map[EndpointID]*EndpointView)}
		if i == 0 {
			n.a = hh
		} else {
			n.b = hh
		}
	}
	if err := n.a.eng.AddHost(hostB, v.B.MAC); err != nil {
		t.Fatal(err)
	}
	if err := n.b.eng.AddHost(hostA, v.A.MAC); err != nil {
		t.Fatal(err)
	}
	a1, a2, b1, b2 := twoNets(t, n, EndpointConfig{}, EndpointConfig{})

	const per = 1000
	type flow struct {
		from, to   *EndpointView
		next, recv uint64
		tag        uint64
	}
	flows := []*flow{{from: a1, to: b1, tag: tagRed}, {from: a2, to: b2, tag: tagBlue}}
	mustSend(t, a1, RequestSend, short(2, 7, 99)) // index 2 of A1's table is B2: the blue network
	var returned []Descriptor
	deadline := time.Now().Add(30 * time.Second)
	for done := false; !done; {
		if time.Now().After(deadline) {
			t.Fatalf("not done after 30 s: red %d/%d, blue %d/%d; A %+v; B %+v",
				flows[0].recv, per, flows[1].recv, per, n.a.eng.Stats(), n.b.eng.Stats())
		}
		done = true
		for _, f := range flows {
			for f.next < per {
				d := short(1, uint32(f.tag), f.next) // index 1: the same network's endpoint on B
				if err := f.from.Send(RequestSend, &d); errors.Is(err, ErrQueueFull) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				f.next++
			}
			for {
				var d Descriptor
				ok, err := f.to.Receive(RequestReceive, &d)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				if d.Args[0] != f.recv || d.Tag != f.tag || d.Handler != uint32(f.tag) {
					t.Fatalf("network %x: got %+v, want message %d", f.tag, d, f.recv)
				}
				f.recv++
			}
			done = done && f.recv == per
		}
		drain(t, a1, ReplyReceive, &returned)
		done = done && len(returned) == 1
		n.poll(t)
	}
	if reason, _, ok := returned[0].ReturnInfo(); !ok || reason != ReasonBadTag || returned[0].Args[0] != 99 {
		t.Errorf("returned %+v (%v, %v), want the message of args 99 with ReasonBadTag", returned[0], reason, ok)
	}
	ta, tb := n.a.eng.TransportStats(), n.b.eng.TransportStats()
	if ta.Retransmits+tb.Retransmits == 0 {
		t.Errorf("no retransmission under 10%% drop: A %+v, B %+v", ta, tb)
	}
}
