//go:build linux

package nicfw

import (
	"errors"
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// TestEngineOwnerShare: on host A, owner 1 has 64 endpoints of the
// greatest weight sending to a sink on host B as fast as the engine takes
// their messages (a window of 8 each), and owner 2 one endpoint doing
// round trips with an echo on B. Counted in engine runs on the manual
// clock (so it holds on a loaded machine), owner 2's round trips beside
// the flood complete at least at half their rate alone: the engine shares
// its sends, and its 8 frames, among owners first. (One level shared them
// among endpoints: owner 2 made a fifth of its round trips.)
func TestEngineOwnerShare(t *testing.T) {
	const (
		flooders = 64
		runs     = 3000
	)
	var alone int
	var flooded ownerShareResult
	var ra ResidencyStats
	t.Run("alone", func(t *testing.T) {
		r, _ := ownerShareRun(t, 0, runs)
		alone = r.trips
	})
	t.Run("flooded", func(t *testing.T) {
		var n *engNet
		flooded, n = ownerShareRun(t, flooders, runs)
		ra = n.a.eng.ResidencyStats()
	})
	t.Logf("owner 2's round trips in %d engine runs: %d alone, %d beside owner 1's %d flooding endpoints (%d messages); residency A %+v",
		runs, alone, flooded.trips, flooders, flooded.flood, ra)
	if alone < 100 {
		t.Fatalf("%d round trips alone in %d runs", alone, runs)
	}
	if flooded.trips*2 < alone {
		t.Errorf("owner 2's round trips fell from %d to %d beside owner 1's flood: want at least half", alone, flooded.trips)
	}
	if flooded.flood < uint64(runs) {
		t.Errorf("owner 1's endpoints sent %d messages in %d runs: the flood did not flow", flooded.flood, runs)
	}
	if ra.Faults < flooders || ra.Bounded == 0 {
		t.Errorf("residency A %+v: want owner 1's faults bounded", ra)
	}
}

type ownerShareResult struct {
	trips int
	flood uint64 // owner 1's messages delivered
}

// ownerShareRun runs the test's hosts for runs engine runs, with owner 1
// flooding from flooders endpoints, and counts owner 2's round trips.
func ownerShareRun(t *testing.T, flooders, runs int) (ownerShareResult, *engNet) {
	t.Helper()
	n := newEngNet(t, memlink.Options{}, EngineConfig{Window: 8})
	const client, server, sink = 200, 200, 1
	c := n.a.endpoint(t, client, endpoint.Config{}, VNet{Tag: tagBlue, Table: []Name{{hostB, server}}, Owner: 2})
	s := n.b.endpoint(t, server, endpoint.Config{}, VNet{Tag: tagBlue, Table: []Name{{hostA, client}}, Owner: 2})
	var flood []*endpoint.View
	var k *endpoint.View
	if flooders > 0 {
		k = n.b.endpoint(t, sink, endpoint.Config{QueueEntries: 1024}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}, Owner: 1})
		for i := range flooders {
			flood = append(flood, n.a.endpoint(t, EndpointID(10+i), endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, sink}}, Weight: MaxWeight, Owner: 1}))
		}
	}
	var res ownerShareResult
	send := func(v *endpoint.View, q endpoint.Queue, d endpoint.Descriptor) bool {
		err := v.Send(q, &d)
		if err != nil && !errors.Is(err, endpoint.ErrQueueFull) {
			t.Fatal(err)
		}
		return err == nil
	}
	mustSend(t, c, endpoint.RequestSend, short(0, 1, 0))
	var d endpoint.Descriptor
	for range runs {
		for _, v := range flood {
			for send(v, endpoint.RequestSend, short(0, 1, 0)) {
			}
		}
		if k != nil {
			for {
				ok, err := k.Receive(endpoint.RequestReceive, &d)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				res.flood++
			}
		}
		// The echo, and the client's next request once the reply is in.
		for {
			ok, err := s.Receive(endpoint.RequestReceive, &d)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			mustSend(t, s, endpoint.ReplySend, short(d.Dest, 2, d.Args[0]))
		}
		for {
			ok, err := c.Receive(endpoint.ReplyReceive, &d)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			res.trips++
			mustSend(t, c, endpoint.RequestSend, short(0, 1, uint64(res.trips)))
		}
		if n.poll(t) == 0 {
			n.clk.Advance(engStep)
		}
	}
	return res, n
}

// TestEnginePinShare: on host A (8 frames), owner 1's twelve endpoints
// each send a request to host B, which does not answer (its engine is not
// polled), so each that sends pins its frame until it is acknowledged.
// Owner 2's one endpoint, open throughout, sends after them: it still
// gets its request out, because owner 1 pins at most its share of the
// frames and leaves one that owner 2 may pin (mayPin). Before, owner 1
// pinned 7 (every frame but the one kept for deliveries) and owner 2's
// request waited until owner 1's were acknowledged or given up on. Once
// B answers, every request arrives.
func TestEnginePinShare(t *testing.T) {
	const frames, flooders = 8, 12
	n := newEngNet(t, memlink.Options{}, EngineConfig{Resident: frames})
	const sink, server, client = 1, 2, 100
	k := n.b.endpoint(t, sink, endpoint.Config{QueueEntries: 64}, VNet{Tag: tagRed, Table: []Name{{hostA, 10}}, Owner: 1})
	s := n.b.endpoint(t, server, endpoint.Config{}, VNet{Tag: tagBlue, Table: []Name{{hostA, client}}, Owner: 2})
	c := n.a.endpoint(t, client, endpoint.Config{}, VNet{Tag: tagBlue, Table: []Name{{hostB, server}}, Owner: 2})
	var flood []*endpoint.View
	for i := range flooders {
		v := n.a.endpoint(t, EndpointID(10+i), endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, sink}}, Owner: 1})
		mustSend(t, v, endpoint.RequestSend, short(0, 1, uint64(i)))
		flood = append(flood, v)
	}
	pollA := func() {
		for range 50 {
			if _, err := n.a.eng.Poll(); err != nil {
				t.Fatal(err)
			}
		}
	}
	pollA()
	sent := n.a.eng.Stats().Sent
	if want := uint64(frames - 2); sent != want {
		t.Fatalf("owner 1's requests sent with B silent: %d, want %d (its share: all frames but the one for deliveries and owner 2's)", sent, want)
	}
	mustSend(t, c, endpoint.RequestSend, short(0, 1, 99))
	pollA()
	if _, taken := c.Progress(endpoint.RequestSend); taken != 1 {
		t.Fatalf("owner 2's request not taken beside owner 1's %d pinned frames (engine %+v, residency %+v)", sent, n.a.eng.Stats(), n.a.eng.ResidencyStats())
	}
	// B answers: everything arrives.
	got := map[uint64]bool{}
	var d endpoint.Descriptor
	for range 10000 {
		if n.poll(t) == 0 {
			n.clk.Advance(engStep)
		}
		for _, v := range []*endpoint.View{k, s} {
			for {
				ok, err := v.Receive(endpoint.RequestReceive, &d)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				got[d.Args[0]] = true
			}
		}
		if len(got) == flooders+1 {
			return
		}
	}
	t.Fatalf("%d of %d requests arrived", len(got), flooders+1)
}
