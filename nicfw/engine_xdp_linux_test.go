package nicfw

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/internal/testenv"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
	"github.com/xam-project/xam/nicfw/xdptest"
)

// newXDPEngNet is newEngNet over AF_XDP: two engines with cfg on the ends
// of a veth pair, xam's XDP program dropping the fraction drop of the
// frames at both, on the system clock.
func newXDPEngNet(t *testing.T, cfg EngineConfig, drop float64) *engNet {
	t.Helper()
	return newXDPEngNetWith(t, cfg, drop, nil)
}

// newXDPEngNetWith is newXDPEngNet with per as in newEngNetWith.
func newXDPEngNetWith(t *testing.T, cfg EngineConfig, drop float64, per func(HostID, *EngineConfig)) *engNet {
	t.Helper()
	v := netnstest.NewVethPair(t, netnstest.WithQueues(1))
	return newEngNetOn(t, v, cfg, per, func(i int, h *netnstest.Host) afxdp.Link {
		_, sock := xdptest.OpenHost(t, h, drop, uint64(11+i))
		return sock
	})
}

// newEngNetOn starts engines A and B (cfg, adjusted per host by per if it
// is not nil) on the links that open gives for the ends of v, and tells
// each of the other.
func newEngNetOn(t *testing.T, v *netnstest.Pair, cfg EngineConfig, per func(HostID, *EngineConfig), open func(i int, h *netnstest.Host) afxdp.Link) *engNet {
	t.Helper()
	testenv.NoMemfdLeaks(t, "xam-endpoint")
	n := &engNet{}
	for i, h := range []*netnstest.Host{v.A, v.B} {
		sock := open(i, h)
		c := cfg
		c.Host = []HostID{hostA, hostB}[i]
		if per != nil {
			per(c.Host, &c)
		}
		e, err := NewEngine(sock, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		hh := &engHost{eng: e, views: make(map[EndpointID]*endpoint.View)}
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
	return n
}

// TestEngineResidencyOverAFXDP is TestEngineResidency's body over AF_XDP,
// with 5% of the frames dropped.
func TestEngineResidencyOverAFXDP(t *testing.T) {
	cfg := residencyConfig
	cfg.Transport.RetransmitAfter = 2 * time.Millisecond
	residencyBody(t, newXDPEngNet(t, cfg, 0.05), 8, 30)
}

// TestEngineOverAFXDP runs two engines over real AF_XDP sockets on a veth
// pair, with xam's XDP program dropping 10% of the frames at both hosts,
// on the system clock: two virtual networks carry their own traffic only,
// every message exactly once and in order per sender, and a message to an
// endpoint of the other network comes back with ReasonBadTag. Alongside
// the short messages, B1 sends medium messages of every size the transport
// carries to A1, reusing its staging slots as soon as the engine has taken
// them, and B2 stores bulk messages of several chunks into A2's staging
// area: their bytes arrive intact.
func TestEngineOverAFXDP(t *testing.T) {
	n := newXDPEngNet(t, EngineConfig{Transport: transport.Config{RetransmitAfter: 2 * time.Millisecond}}, 0.10)
	a1, a2, b1, b2 := twoNets(t, n, endpoint.Config{}, endpoint.Config{})

	// B1 -> A1: medium messages, in 7 staging slots.
	const mediums = 300
	top := maxMediumFits(n.b.eng, 1)
	mediumSize := func(i int) int { return 1 + i*997%top }
	var medSent, medRecv int
	sendMedium := func() {
		for medSent < mediums {
			// The slot's previous message must have been taken.
			if _, taken := b1.Progress(endpoint.RequestSend); medSent >= 7 && int32(taken-uint32(medSent-7)) <= 0 {
				return
			}
			off := medSent % 7 * endpoint.MaxMedium
			copy(b1.Staging()[off:], pattern(mediumSize(medSent), byte(medSent)))
			d := medium(0, 5, off, mediumSize(medSent), uint64(medSent))
			if err := b1.Send(endpoint.RequestSend, &d); errors.Is(err, endpoint.ErrQueueFull) {
				return
			} else if err != nil {
				t.Fatal(err)
			}
			medSent++
		}
	}
	recvMedium := func() {
		for {
			d, data, ok := receiveData(t, a1, endpoint.RequestReceive)
			if !ok {
				return
			}
			if d.Class != endpoint.ClassMedium || d.Args[0] != uint64(medRecv) || !bytes.Equal(data, pattern(mediumSize(medRecv), byte(medRecv))) {
				t.Fatalf("medium message %d: %+v with %d bytes", medRecv, d, len(data))
			}
			medRecv++
		}
	}
	// B2 -> A2: bulk messages, from two regions of B2's staging area into
	// two of A2's.
	const bulks, bulkLen = 6, 30000
	for i := range 2 {
		copy(b2.Staging()[i*bulkLen:], pattern(bulkLen, byte(100+i)))
	}
	for i := range bulks {
		mustSend(t, b2, endpoint.RequestSend, bulk(0, 6, i%2*bulkLen, (i+1)%2*bulkLen, bulkLen, uint64(i)))
	}
	var bulkRecv int
	recvBulk := func() {
		for {
			d, data, ok := receiveData(t, a2, endpoint.RequestReceive)
			if !ok {
				return
			}
			// A later message into the same region may be arriving: look
			// at the bytes of the last message into each region only.
			if d.Class != endpoint.ClassBulk || d.Args[0] != uint64(bulkRecv) || d.Length != bulkLen || d.Offset != uint32((bulkRecv+1)%2*bulkLen) ||
				bulkRecv >= bulks-2 && !bytes.Equal(data, pattern(bulkLen, byte(100+bulkRecv%2))) {
				t.Fatalf("bulk message %d: %+v", bulkRecv, d)
			}
			bulkRecv++
		}
	}

	const per = 1000
	type flow struct {
		from, to   *endpoint.View
		next, recv uint64
		tag        uint64
	}
	flows := []*flow{{from: a1, to: b1, tag: tagRed}, {from: a2, to: b2, tag: tagBlue}}
	mustSend(t, a1, endpoint.RequestSend, short(2, 7, 99)) // index 2 of A1's table is B2: the blue network
	var returned []endpoint.Descriptor
	deadline := time.Now().Add(30 * time.Second)
	for done := false; !done; {
		if time.Now().After(deadline) {
			t.Fatalf("not done after 30 s: red %d/%d, blue %d/%d, medium %d/%d, bulk %d/%d; A %+v; B %+v",
				flows[0].recv, per, flows[1].recv, per, medRecv, mediums, bulkRecv, bulks, n.a.eng.Stats(), n.b.eng.Stats())
		}
		sendMedium()
		recvMedium()
		recvBulk()
		done = medRecv == mediums && bulkRecv == bulks
		for _, f := range flows {
			for f.next < per {
				d := short(1, uint32(f.tag), f.next) // index 1: the same network's endpoint on B
				if err := f.from.Send(endpoint.RequestSend, &d); errors.Is(err, endpoint.ErrQueueFull) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				f.next++
			}
			for {
				var d endpoint.Descriptor
				ok, err := f.to.Receive(endpoint.RequestReceive, &d)
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
		drain(t, a1, endpoint.ReplyReceive, &returned)
		done = done && len(returned) == 1
		n.poll(t)
	}
	if reason, _, ok := returned[0].ReturnInfo(); !ok || reason != endpoint.ReasonBadTag || returned[0].Args[0] != 99 {
		t.Errorf("returned %+v (%v, %v), want the message of args 99 with ReasonBadTag", returned[0], reason, ok)
	}
	ta, tb := n.a.eng.TransportStats(), n.b.eng.TransportStats()
	if ta.Retransmits+tb.Retransmits == 0 {
		t.Errorf("no retransmission under 10%% drop: A %+v, B %+v", ta, tb)
	}
	t.Logf("medium messages of up to %d bytes, bulk chunks of %d bytes; transport A %+v, B %+v",
		top, n.b.eng.bulkRoom(n.b.eng.MaxPayload(), 1), ta, tb)
}

// TestEngineBulkOverAFXDP is TestEngineBulk's body over AF_XDP, chunks
// in flight eight at a time, with 10% of the frames dropped by xam's XDP
// program at both hosts.
func TestEngineBulkOverAFXDP(t *testing.T) {
	const window = 8
	n := newXDPEngNet(t, EngineConfig{Window: window, Transport: transport.Config{RetransmitAfter: 2 * time.Millisecond}}, 0.10)
	testEngineBulk(t, n, window, true)
}

// TestModuleSeamOverAFXDP is TestModuleSeam's body over AF_XDP, with 10%
// of the frames dropped by xam's XDP program at both hosts.
func TestModuleSeamOverAFXDP(t *testing.T) {
	probes := map[HostID]*probeModule{}
	cfg := EngineConfig{}
	cfg.Transport.RetransmitAfter = 2 * time.Millisecond
	n := newXDPEngNetWith(t, cfg, 0.10, func(id HostID, c *EngineConfig) {
		probes[id] = newProbe()
		c.Modules = []Module{probes[id]}
	})
	moduleBody(t, n, probes, 200)
	if st := n.a.eng.TransportStats(); st.Retransmits == 0 {
		t.Errorf("no retransmissions with 10%% of the frames dropped: %+v", st)
	}
}

// TestEnginePoolOverAFXDP is TestEnginePool's body over AF_XDP, with 10%
// of the frames dropped by xam's XDP program at both hosts.
func TestEnginePoolOverAFXDP(t *testing.T) {
	n := newXDPEngNet(t, EngineConfig{Window: 8, Transport: transport.Config{RetransmitAfter: 2 * time.Millisecond}}, 0.10)
	testEnginePool(t, n)
}
