//go:build linux

package nicfw

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// Consecutive bulk messages of one endpoint overlap: the next leaves
// once every chunk of the one before has left, not once they are all
// acknowledged, with at most BulkAhead of them in flight. With and
// without loss, duplication and reordering, each arrives once and whole;
// one whose region the receiver refuses comes back once, though its
// chunks had all left, and the messages after it arrive.
func TestEngineBulkPipelined(t *testing.T) {
	for _, faults := range []memlink.Options{{}, {Loss: 0.1, Duplicate: 0.02, Reorder: 0.05}} {
		t.Run(fmt.Sprintf("loss=%v", faults.Loss), func(t *testing.T) {
			faults.Seed = 9
			testEngineBulkPipelined(t, newEngNet(t, faults, EngineConfig{Window: 8}), faults.Loss > 0)
		})
	}
}

func testEngineBulkPipelined(t *testing.T, n *engNet, lossy bool) {
	const staging, length, messages, refused = 1 << 20, 20_000, 12, 5
	cfg := endpoint.Config{StagingSize: staging}
	a1, _, b1, _ := twoNets(t, n, cfg, cfg)
	room := int(n.a.eng.bulkRoom(n.a.eng.MaxPayload(), 0))
	if length/room < 2 {
		t.Fatalf("a chunk carries %d bytes: the test wants messages of several chunks", room)
	}
	for i := range messages {
		copy(a1.Staging()[i*length:], pattern(length, byte(i)))
		remote := i * length
		if i == refused {
			remote = staging // outside B's staging area
		}
		mustSend(t, a1, endpoint.RequestSend, bulk(1, uint32(100+i), i*length, remote, length))
	}
	s := n.a.eng.eps[1]
	var atB, atA []received
	mostTails, overlapped := 0, false
	n.run(t, 1_000_000, func() bool {
		mostTails = max(mostTails, len(s.tails))
		if len(s.tails) > 0 && s.state != slotEmpty && s.started {
			overlapped = true // a message leaves while an earlier one is unacknowledged
		}
		collect(t, b1, endpoint.RequestReceive, &atB)
		collect(t, a1, endpoint.ReplyReceive, &atA)
		return len(atB) == messages-1 && len(atA) == 1
	})
	for range 50 {
		n.poll(t) // nothing more comes
	}
	collect(t, b1, endpoint.RequestReceive, &atB)
	collect(t, a1, endpoint.ReplyReceive, &atA)
	seen := map[uint32]bool{}
	for _, r := range atB {
		i := int(r.d.Handler) - 100
		if seen[r.d.Handler] || i < 0 || i >= messages || i == refused || r.d.Length != length || !bytes.Equal(r.data, pattern(length, byte(i))) {
			t.Errorf("B received %+v (%d bytes; handler seen before: %v)", r.d, len(r.data), seen[r.d.Handler])
		}
		seen[r.d.Handler] = true
	}
	if len(atB) != messages-1 {
		t.Errorf("B received %d messages, want %d", len(atB), messages-1)
	}
	if len(atA) != 1 || atA[0].d.Handler != 100+refused || atA[0].d.Class != endpoint.ClassBulk|endpoint.ClassReturned {
		t.Errorf("A got back %+v, want message %d returned once", atA, refused)
	}
	if mostTails > BulkAhead-1 || !lossy && !overlapped {
		t.Errorf("at most %d tails (limit %d), overlapped %v", mostTails, BulkAhead-1, overlapped)
	}
	if len(s.tails) != 0 || s.flying != 0 {
		t.Errorf("after the last acknowledgement: %d tails, %d in flight", len(s.tails), s.flying)
	}
	t.Logf("at most %d tails; overlapped %v; B %+v", mostTails, overlapped, n.b.eng.Stats())
}
