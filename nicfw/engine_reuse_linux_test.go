package nicfw

import (
	"bytes"
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/endpoint"
	"github.com/xam-project/xam/nicfw/transport"
)

// An endpoint id closed and opened again by a new endpoint, which sends
// bulk messages to the same receiver as the old one did: the receiver's
// record of the old one's last bulk message (kept by sending endpoint)
// must not take the new one's first for a chunk of it. (An engine that
// numbered bulk messages per endpoint gave both the same number: a placed
// message came back ReasonIncomplete and a pooled one was dropped as a
// duplicate, GRIM's registry tables to the ranks of a job that followed
// another on the same daemons.) The sending host restarts, then the
// sender is reused alone, then both ends.
func TestEngineBulkAfterReuse(t *testing.T) {
	for _, pooled := range []bool{false, true} {
		name := "placed"
		if pooled {
			name = "pooled"
		}
		t.Run(name, func(t *testing.T) { testBulkAfterReuse(t, pooled) })
	}
}

func testBulkAfterReuse(t *testing.T, pooled bool) {
	const length = 10_000
	n := newEngNet(t, memlink.Options{}, EngineConfig{Window: 4})
	cfg := endpoint.Config{StagingSize: 64 << 10}
	red := VNet{Tag: tagRed, Table: []Name{{hostA, 1}, {hostB, 1}}}
	open := func(h *engHost) *endpoint.View {
		t.Helper()
		v := h.endpoint(t, 1, cfg, red)
		v.SetPool(0, 32<<10)
		return v
	}
	reopen := func(h *engHost) *endpoint.View {
		t.Helper()
		if err := h.eng.CloseEndpoint(1); err != nil {
			t.Fatal(err)
		}
		return open(h)
	}
	send := func(a, b *endpoint.View, seed byte) {
		t.Helper()
		copy(a.Staging(), pattern(length, seed))
		d := bulk(1, 4, 0, 0, length, uint64(seed))
		if pooled {
			d.RemoteOffset = endpoint.PoolOffset
		}
		mustSend(t, a, endpoint.RequestSend, d)
		var got endpoint.Descriptor
		var data []byte
		n.run(t, 10000, func() bool {
			var ret []endpoint.Descriptor
			drain(t, a, endpoint.ReplyReceive, &ret)
			if len(ret) > 0 {
				reason, _, _ := ret[0].ReturnInfo()
				t.Fatalf("message %d came back: %v", seed, reason)
			}
			var ok bool
			got, data, ok = receiveData(t, b, endpoint.RequestReceive)
			return ok
		})
		if got.Args[0] != uint64(seed) || !bytes.Equal(data, pattern(length, seed)) {
			t.Fatalf("received %+v, want message %d with its bytes", got, seed)
		}
	}
	a, b := open(n.a), open(n.b)
	send(a, b, 1)
	// The sending host restarts: its new engine numbers from 1 again.
	ea, err := NewEngine(n.a.link, EngineConfig{Host: hostA, Window: 4, Transport: transport.Config{
		Clock: n.clk, RetransmitAfter: engStep, GiveUpAfter: engGiveUp}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ea.Close() })
	if err := ea.AddHost(hostB, n.b.link.HardwareAddr()); err != nil {
		t.Fatal(err)
	}
	old := n.a.eng
	n.a.eng = ea
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	a = open(n.a)
	send(a, b, 2)
	a = reopen(n.a)
	send(a, b, 3) // the sender is new
	a, b = reopen(n.a), reopen(n.b)
	send(a, b, 4) // both are
}
