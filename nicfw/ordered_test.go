package nicfw

import (
	"fmt"
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// TestEngineOrdered: with a window of 8 and frames lost and reordered, an
// Ordered endpoint's short requests arrive in the order sent; the same
// stream from an endpoint that is not Ordered arrives out of order (which
// is what makes the first half of the test mean something).
func TestEngineOrdered(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) { orderedBody(t, ordered) })
	}
}

func orderedBody(t *testing.T, ordered bool) {
	{
		n := newEngNet(t, memlink.Options{Loss: 0.15, Reorder: 0.1, Seed: 5},
			EngineConfig{Window: 8, Transport: transport.Config{Channels: 8}})
		a := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostB, 1}}, Ordered: ordered})
		b := n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: []Name{{hostA, 1}}})
		const total = 400
		sent, inversions := 0, 0
		var got []uint64
		n.run(t, 1_000_000, func() bool {
			for sent < total {
				// Medium messages of a frame each: packed short messages
				// would share frames, lost and resent together.
				d := endpoint.Descriptor{Class: endpoint.ClassMedium, NArgs: 1, Dest: 0, Handler: 1, Length: 900}
				d.Args[0] = uint64(sent)
				if err := a.Send(endpoint.RequestSend, &d); err != nil {
					break
				}
				sent++
			}
			var d endpoint.Descriptor
			for {
				ok, err := b.Receive(endpoint.RequestReceive, &d)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				if len(got) > 0 && d.Args[0] < got[len(got)-1] {
					inversions++
				}
				got = append(got, d.Args[0])
			}
			return len(got) == total
		})
		switch {
		case ordered && inversions > 0:
			t.Errorf("ordered: %d messages arrived before one sent earlier", inversions)
		case !ordered && inversions == 0:
			t.Errorf("not ordered: every message in order; the loss does not exercise ordering")
		}
		seen := map[uint64]bool{}
		for _, v := range got {
			if seen[v] {
				t.Errorf("ordered=%v: message %d twice", ordered, v)
			}
			seen[v] = true
		}
		t.Logf("ordered=%v: %d inversions", ordered, inversions)
	}
}
