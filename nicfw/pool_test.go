package nicfw

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// The receive pool, chunk by chunk: a pooled message finds a block as its
// first chunk arrives and lands there; one that finds no room is refused
// (NACK) and counted, and taken once the application released the entry
// that held the pool; one larger than the pool, or for an endpoint
// without one, comes back; a message its sender abandoned gives its block
// back.
func TestEnginePoolAccept(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	_, _, b1, _ := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	e := n.b.eng
	chunk := func(id, length, at int, data []byte) []byte {
		m := msg{kind: endpoint.RequestSend, class: endpoint.ClassBulk, dst: 1, src: 1, handler: 9, tag: tagRed,
			length: uint32(length), remote: endpoint.PoolOffset, id: uint32(id), chunk: uint32(at), data: data}
		b := make([]byte, m.size())
		encodeMsg(b, &m)
		return b
	}
	accept := func(step string, p []byte, ok bool, reason endpoint.Reason) {
		t.Helper()
		if gotOK, gotReason := e.accept(hostA, p, true, false); gotOK != ok || gotReason != reason {
			t.Errorf("%s: accept = %v, %v; want %v, %v", step, gotOK, gotReason, ok, reason)
		}
	}
	accept("no pool yet", chunk(1, 100, 0, pattern(100, 1)), true, endpoint.ReasonRange)
	const poolAt = 8192
	b1.SetPool(poolAt, 4*poolPage)
	one := pattern(3000, 2)
	accept("first chunk", chunk(2, 3000, 1500, one[1500:]), true, 0)
	accept("last chunk", chunk(2, 3000, 0, one[:1500]), true, 0)
	accept("no room", chunk(3, 2000, 0, pattern(1000, 3)), false, 0)
	accept("larger than the pool", chunk(4, 5000, 0, pattern(100, 4)), true, endpoint.ReasonTooLarge)
	d, data, ok := receiveData(t, b1, endpoint.RequestReceive) // releases the entry, and the block
	if !ok || d.Offset != poolAt || d.Length != 3000 || d.RemoteOffset != endpoint.PoolOffset || !bytes.Equal(data, one) {
		t.Fatalf("received %+v (%v)", d, ok)
	}
	two := pattern(2000, 5)
	accept("room again", chunk(3, 2000, 0, two[:1000]), true, 0)
	accept("abandoned: its sender moved on", chunk(5, 2000, 0, pattern(1000, 6)), true, 0)
	accept("the abandoned one's pages are free", chunk(6, 2048, 0, pattern(2048, 7)), true, 0)
	if st := e.Stats(); st.PoolFull != 1 || st.Delivered != 2 {
		t.Errorf("stats %+v", st)
	}
	if p := e.eps[1].pool; p.inUse != 1 || len(p.held) != 1 {
		t.Errorf("pool: %d blocks in use, %d held, want 1 and 1 (message 6)", p.inUse, len(p.held))
	}
}

// TestEnginePool: four endpoints stream pooled bulk messages into one
// receiver whose pool holds two of them and which takes them slowly. The
// pool runs out again and again (refusals counted); every message arrives
// once, whole and intact, and nothing deadlocks.
func TestEnginePool(t *testing.T) {
	for _, faults := range []memlink.Options{{}, {Loss: 0.1, Duplicate: 0.02, Reorder: 0.05}} {
		t.Run(fmt.Sprintf("loss=%v", faults.Loss), func(t *testing.T) {
			faults.Seed = 9
			n := newEngNet(t, faults, EngineConfig{Window: 8, Transport: transport.Config{RetransmitAfter: 2 * time.Millisecond}})
			testEnginePool(t, n)
		})
	}
}

func testEnginePool(t *testing.T, n *engNet) {
	const senders, per, size = 4, 6, 20_000
	var views []*endpoint.View
	for i := range senders {
		views = append(views, n.a.endpoint(t, EndpointID(10+i), endpoint.Config{StagingSize: 64 << 10},
			VNet{Tag: tagRed, Table: []Name{{hostB, 1}}}))
	}
	var table []Name
	for i := range senders {
		table = append(table, Name{hostA, EndpointID(10 + i)})
	}
	rx := n.b.endpoint(t, 1, endpoint.Config{StagingSize: 64 << 10}, VNet{Tag: tagRed, Table: table})
	rx.SetPool(0, 2*size+poolPage) // two messages and a bit
	for i, v := range views {
		copy(v.Staging(), pattern(size, byte(i)))
	}
	sent := make([]int, senders)
	got := map[[2]uint64]int{}
	polls := 0
	n.run(t, 1_000_000, func() bool {
		for i, v := range views {
			if sent[i] < per {
				d := bulk(0, 3, 0, 0, size, uint64(i), uint64(sent[i]))
				d.RemoteOffset = endpoint.PoolOffset
				if err := v.Send(endpoint.RequestSend, &d); err == nil {
					sent[i]++
				} else if err != endpoint.ErrQueueFull {
					t.Fatal(err)
				}
			}
		}
		if polls++; polls%16 == 0 { // a slow consumer
			if d, data, ok := receiveData(t, rx, endpoint.RequestReceive); ok {
				if !bytes.Equal(data, pattern(size, byte(d.Args[0]))) {
					t.Fatalf("message %v: wrong bytes", d.Args[:2])
				}
				got[[2]uint64{d.Args[0], d.Args[1]}]++
			}
		}
		return len(got) == senders*per
	})
	for k, c := range got {
		if c != 1 {
			t.Errorf("message %v arrived %d times", k, c)
		}
	}
	st := n.b.eng.Stats()
	if st.PoolFull == 0 {
		t.Errorf("the pool never ran out: %+v", st)
	}
	t.Logf("%d messages; receiver %+v", len(got), st)
}

// A block is taken back however far the receive queue has gone since its
// entry was released: the engine reclaims only when it needs room, and
// many other messages may have passed through the queue by then. (Found
// by FuzzGRIMHeaders: a check that the entry was at most a queue's length
// behind leaked the block, and the pool refused every message after.)
func TestEnginePoolReclaimLate(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	_, _, b1, _ := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	e := n.b.eng
	msgOf := func(m msg) []byte {
		b := make([]byte, m.size())
		encodeMsg(b, &m)
		return b
	}
	pooled := func(id int) []byte {
		return msgOf(msg{kind: endpoint.RequestSend, class: endpoint.ClassBulk, dst: 1, src: 1, handler: 9, tag: tagRed,
			length: 3000, remote: endpoint.PoolOffset, id: uint32(id), data: pattern(3000, byte(id))})
	}
	b1.SetPool(8192, 3*poolPage) // one message
	if ok, reason := e.accept(hostA, pooled(1), true, false); !ok || reason != 0 {
		t.Fatalf("first pooled message: %v, %v", ok, reason)
	}
	entries := b1.Config().QueueEntries
	for i := range 3 * entries { // the queue goes round three times
		if _, _, ok := receiveData(t, b1, endpoint.RequestReceive); !ok {
			t.Fatalf("message %d not received", i)
		}
		short := msgOf(msg{kind: endpoint.RequestSend, class: endpoint.ClassShort, dst: 1, src: 1, handler: 9, tag: tagRed})
		if ok, reason := e.accept(hostA, short, true, false); !ok || reason != 0 {
			t.Fatalf("short message %d: %v, %v", i, ok, reason)
		}
	}
	if ok, reason := e.accept(hostA, pooled(2), true, false); !ok || reason != 0 {
		t.Fatalf("a pooled message after the queue went round: %v, %v (the first one's block was not taken back)", ok, reason)
	}
}
