package transport

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/datapath"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/loader"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// TestOverAFXDP runs the transport over real AF_XDP sockets on a veth pair,
// with xam's XDP program dropping 10% of the frames at both hosts: every
// message is delivered exactly once, in order per channel, on the system
// clock.
func TestOverAFXDP(t *testing.T) {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	type host struct {
		tr   *Transport
		prog *loader.Program
		got  map[int][]uint32
	}
	var hosts [2]*host
	for i, h := range []*netnstest.Host{v.A, v.B} {
		prog, sock := xdptest.OpenHost(t, h, 0.10, uint64(3+i))
		hh := &host{prog: prog, got: map[int][]uint32{}}
		tr, err := New(sock, Config{
			Channels:        4,
			RetransmitAfter: 2 * time.Millisecond,
			Deliver: func(src HostID, ch int, p []byte) bool {
				checkPayload(t, p)
				hh.got[ch] = append(hh.got[ch], binary.BigEndian.Uint32(p))
				return true
			},
			Returned: func(dst HostID, cookie uint64, p []byte, reason error) {
				t.Errorf("message %d returned: %v", cookie, reason)
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		hh.tr = tr
		hosts[i] = hh
	}
	if err := hosts[0].tr.AddPeer(hostB, v.B.MAC); err != nil {
		t.Fatal(err)
	}
	if err := hosts[1].tr.AddPeer(hostA, v.A.MAC); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	a, b := hosts[0], hosts[1]
	deadline := time.Now().Add(20 * time.Second)
	for sent := uint32(0); sent < n || a.tr.Unacked(hostB) > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d sent, %d unacked after 20 s; A %+v; B %+v", sent, a.tr.Unacked(hostB), a.tr.Stats(), b.tr.Stats())
		}
		if sent < n {
			switch err := a.tr.Send(hostB, payload(sent, 1000), uint64(sent)); err {
			case nil:
				sent++
			case ErrBusy:
			default:
				t.Fatal(err)
			}
		}
		if _, err := a.tr.Poll(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.tr.Poll(); err != nil {
			t.Fatal(err)
		}
	}
	total, last := 0, map[int]int64{}
	for ch, ns := range b.got {
		last[ch] = -1
		for _, m := range ns {
			if int64(m) <= last[ch] {
				t.Fatalf("channel %d: message %d after %d", ch, m, last[ch])
			}
			last[ch] = int64(m)
		}
		total += len(ns)
	}
	if total != n {
		t.Fatalf("%d deliveries of %d messages", total, n)
	}
	if c, _ := b.prog.Counters(); c.FaultDropped == 0 {
		t.Errorf("no frame was dropped by fault injection: %+v", c)
	}
	t.Logf("A %+v", a.tr.Stats())
}

// TestLossOverAFXDP is TestLoss's body over real AF_XDP sockets on a veth
// pair, xam's XDP program dropping 10% of the frames at both hosts, on the
// system clock: 10^5 short messages each way, each delivered exactly once
// and in order per channel.
func TestLossOverAFXDP(t *testing.T) {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	progA, sockA := xdptest.OpenHost(t, v.A, 0.10, 11)
	progB, sockB := xdptest.OpenHost(t, v.B, 0.10, 12)
	p := pairOn(t, sockA, sockB, nil, Config{Channels: 16, RetransmitAfter: time.Millisecond})
	lossBody(t, p, 100_000, 64)
	for _, prog := range []*loader.Program{progA, progB} {
		if c, _ := prog.Counters(); c.FaultDropped == 0 {
			t.Errorf("no frame was dropped by fault injection: %+v", c)
		}
	}
}

// TestRestartOverAFXDP is TestRestart's body over AF_XDP on a veth pair,
// on the system clock.
func TestRestartOverAFXDP(t *testing.T) {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	_, sockA := xdptest.OpenHost(t, v.A, 0, 0)
	_, sockB := xdptest.OpenHost(t, v.B, 0, 0)
	cfg := Config{Channels: 4, RetransmitAfter: time.Millisecond}
	p := pairOn(t, sockA, sockB, nil, cfg)
	restartBody(t, p, sockB, cfg)
}

// TestRxStampsOverAFXDP: with Config.RxStamps over sockets whose program
// puts receive metadata in front of each frame (the device-bound program,
// native mode), the transport counts every frame's metadata; a veth's NIC
// stamps none. Without the program there is nothing to count.
func TestRxStampsOverAFXDP(t *testing.T) {
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	var links [2]afxdp.Link
	for i, h := range []*netnstest.Host{v.A, v.B} {
		p := datapath.Place{Ifindex: h.Index, MAC: h.MAC, Do: h.Do}
		e, err := datapath.OpenConfig(p, loader.ModeNative, 0, loader.Config{DstMAC: h.MAC, RxMetadata: true, Ifindex: h.Index})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		links[i] = e.Link()
	}
	p := pairOn(t, links[0], links[1], nil, Config{Channels: 4, RxStamps: true})
	p.transfer(t, 200, 64, 0, p.a, p.b)
	for _, e := range []*end{p.a, p.b} {
		s := e.tr.Stats()
		if s.RxMeta < 200 || s.RxStamped != 0 || s.RxStampLagNs != 0 {
			t.Errorf("receive metadata: %d frames with it, %d stamped, lag %d ns; want every frame, none stamped (veth)", s.RxMeta, s.RxStamped, s.RxStampLagNs)
		}
	}
	// The same sockets' frames without RxStamps are not looked at.
	q := pairOn(t, links[0], links[1], nil, Config{Channels: 4})
	q.transfer(t, 20, 64, 0, q.a, q.b)
	if s := q.b.tr.Stats(); s.RxMeta != 0 {
		t.Errorf("RxMeta %d without RxStamps", s.RxMeta)
	}
}
