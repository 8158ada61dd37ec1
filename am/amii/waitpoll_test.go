package amii

import (
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw"
	"github.com/xam-project/xam/nicfw/transport"
)

// A server that waits for a request (Wait runs its engine, which takes
// the request in) and then polls answers it with no ACK frame: Poll runs
// the handler first and the engine after it, so the reply carries the
// acknowledgement of the request. (The client, which polls once its
// Wait has taken the reply in, sends that reply's acknowledgement in an
// ACK frame at the end of its Poll: no request goes with it.)
func TestWaitThenPollAnswersWithoutAckFrame(t *testing.T) {
	la, lb, err := memlink.NewPair(memlink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { la.Close(); lb.Close() })
	open := func(id HostID, l *memlink.Link, peer HostID, pl *memlink.Link) (*Endpoint, *nicfw.Engine) {
		// No copies on a loaded machine: the counts are exact.
		eng, err := nicfw.NewEngine(l, nicfw.EngineConfig{Host: id, Transport: transport.Config{RetransmitAfter: time.Minute, GiveUpAfter: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		if err := eng.AddHost(peer, pl.HardwareAddr()); err != nil {
			t.Fatal(err)
		}
		a, err := New(eng, VNet{ID: 1, Tag: amiiRed, Table: []Name{{Host: peer, Endpoint: 1}}}, Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close() })
		return a, eng
	}
	client, ea := open(amiiHostA, la, amiiHostB, lb)
	server, eb := open(amiiHostB, lb, amiiHostA, la)
	server.Register(func(tok *Token, args []uint64) {
		if err := tok.Reply(0, args...); err != nil {
			t.Error(err)
		}
	})
	answered := 0
	client.Register(func(*Token, []uint64) { answered++ })
	const rounds = 100
	for i := range rounds {
		if err := client.Request(0, 0, uint64(i)); err != nil {
			t.Fatal(err)
		}
		for _, ep := range []*Endpoint{server, client} {
			if ready, err := ep.Wait(10 * time.Second); err != nil || !ready {
				t.Fatalf("round %d: Wait: %v, %v", i, ready, err)
			}
			if _, err := ep.Poll(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if answered != rounds {
		t.Fatalf("%d answered, want %d", answered, rounds)
	}
	if a, b := ea.TransportStats(), eb.TransportStats(); b.AckFrames != 0 || b.AcksPiggybacked != rounds {
		t.Errorf("server: %d ACK frames, %d acknowledgements piggy-backed; want 0 and %d (client: %d ACK frames)", b.AckFrames, b.AcksPiggybacked, rounds, a.AckFrames)
	}
}
