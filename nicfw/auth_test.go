package nicfw

import (
	"bytes"
	"net"
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// TestAuth: two hosts' endpoints 1 share a key. Short, medium and bulk
// messages and a return travel between them in envelopes and arrive
// intact; then, delivered to B's engine as a forger on the segment would
// send them: the message without an envelope, in an envelope made with
// another key, with a byte changed, with another incarnation's epoch, and
// a real envelope replayed. None reaches the endpoint; each is counted.
func TestAuth(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{Window: 4})
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	table := []Name{{hostA, 1}, {hostB, 1}, {hostB, 9}}
	a := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: table, Key: key})
	b := n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: table, Key: key})
	if _, err := n.a.eng.CreateEndpoint(2, endpoint.Config{}, VNet{Tag: tagRed, Table: table, Key: []byte("short")}); err == nil {
		t.Error("a key of 5 bytes was taken")
	}
	mustSend(t, a, endpoint.RequestSend, short(1, 100, 7, 8))
	copy(a.Staging()[0:], "a medium message, authenticated")
	mustSend(t, a, endpoint.RequestSend, endpoint.Descriptor{Class: endpoint.ClassMedium, Dest: 1, Handler: 101, Offset: 0, Length: 31})
	bulk := bytes.Repeat([]byte("0123456789abcdef"), 200)
	copy(a.Staging()[4096:], bulk)
	mustSend(t, a, endpoint.RequestSend, endpoint.Descriptor{Class: endpoint.ClassBulk, Dest: 1, Handler: 102, Offset: 4096, Length: uint32(len(bulk)), RemoteOffset: 8192})
	mustSend(t, a, endpoint.RequestSend, short(2, 103)) // no such endpoint: no envelope comes back, nothing
	b.SetStoreRegion(uint32(len(b.Staging())))
	var got []endpoint.Descriptor
	n.run(t, 50000, func() bool {
		drain(t, b, endpoint.RequestReceive, &got)
		return len(got) == 3
	})
	if got[0].Handler != 100 || got[0].Args[0] != 7 || got[1].Handler != 101 || got[2].Handler != 102 {
		t.Fatalf("received %+v", got)
	}
	if data, err := b.Data(&got[1]); err != nil || string(data) != "a medium message, authenticated" {
		t.Errorf("medium: %q, %v", data, err)
	}
	if !bytes.Equal(b.Staging()[8192:8192+len(bulk)], bulk) {
		t.Error("the bulk message arrived with other bytes")
	}
	st := n.b.eng.Stats()
	if st.AuthFailed != 0 || st.AuthReplayed != 0 {
		t.Errorf("real messages refused: %+v", st)
	}

	// The forger. m is a short message from A1 to B1 as A's engine
	// encodes it.
	m := make([]byte, msgMaxLen)
	mm := msg{kind: endpoint.RequestSend, class: endpoint.ClassShort, nargs: 1, dst: 1, src: 1, handler: 666, index: 1, tag: tagRed, args: [8]uint64{1}}
	m = m[:encodeMsg(m, &mm)]
	other, _ := NewKey()
	otherAEAD, _ := newAEAD(other)
	sa := n.a.eng.ep(1)
	good := bytes.Clone(n.a.eng.seal(sa.aead, hostB, m))
	altered := bytes.Clone(good)
	altered[authHeaderLen+5] ^= 1
	oldEpoch := bytes.Clone(good)
	oldEpoch[1] ^= 0xff
	forged := map[string][]byte{
		"no envelope": m,
		"another key": bytes.Clone(n.a.eng.seal(otherAEAD, hostB, m)),
		"altered":     altered,
		"old epoch":   oldEpoch,
	}
	for what, p := range forged {
		before := n.b.eng.Stats().AuthFailed
		if !n.b.eng.deliver(hostA, 0, p) {
			t.Errorf("%s: refused for now (a NACK): the sender would send it again", what)
		}
		if n.b.eng.Stats().AuthFailed != before+1 {
			t.Errorf("%s: not counted as failed", what)
		}
	}
	if !n.b.eng.deliver(hostA, 0, good) {
		t.Fatal("the real envelope was refused")
	}
	if !n.b.eng.deliver(hostA, 0, good) || n.b.eng.Stats().AuthReplayed != 1 {
		t.Errorf("the replayed envelope: %+v", n.b.eng.Stats())
	}
	got = got[:0]
	drain(t, b, endpoint.RequestReceive, &got)
	if len(got) != 1 || got[0].Handler != 666 {
		t.Errorf("after the forgeries B1 has %+v, want the one real envelope", got)
	}
}

// TestReplayWindow: counters seen, new, and too old to tell.
func TestReplayWindow(t *testing.T) {
	var w replayWindow
	w.add(5000)
	for _, c := range []struct {
		ctr  uint64
		seen bool
	}{{5000, true}, {4999, false}, {5001, false}, {5000 - authWindow + 1, false}, {5000 - authWindow, true}} {
		if got := w.has(c.ctr); got != c.seen {
			t.Errorf("has(%d) = %v, want %v", c.ctr, got, c.seen)
		}
	}
	w.add(4999)
	w.add(5000 + authWindow - 1) // the window moves up: 5000 stays in it
	if !w.has(5000) || w.has(5000+authWindow-2) {
		t.Errorf("after moving up: %v %v", w.has(5000), w.has(5000+authWindow-2))
	}
	w.add(5000 + authWindow) // 5000 falls out of the window
	if !w.has(5000) {
		t.Error("a counter behind the window counts as new")
	}
	w.add(5 * authWindow * 1000)
	if w.has(5*authWindow*1000-1) || !w.has(5*authWindow*1000) {
		t.Error("after a jump")
	}
}

// A host whose row for a peer is made again (a mapper lost the peer for a
// while) starts a new incarnation toward it, under another epoch: its
// envelopes must name that epoch, the one the peer holds for it, or every
// keyed message after it is refused as made for another incarnation
// (counted, acknowledged, and lost to its sender).
func TestAuthAfterRowMadeAgain(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	key, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	table := []Name{{hostA, 1}, {hostB, 1}}
	a := n.a.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: table, Key: key})
	b := n.b.endpoint(t, 1, endpoint.Config{}, VNet{Tag: tagRed, Table: table, Key: key})
	// send sends round from each of from to the other endpoint and runs
	// the engines until each has arrived.
	send := func(round uint64, from ...*endpoint.View) {
		t.Helper()
		var got [2][]endpoint.Descriptor
		for _, v := range from {
			dest := uint32(1)
			if v == b {
				dest = 0
			}
			mustSend(t, v, endpoint.RequestSend, short(dest, 0, round))
		}
		n.run(t, 50000, func() bool {
			drain(t, a, endpoint.RequestReceive, &got[0])
			drain(t, b, endpoint.RequestReceive, &got[1])
			return len(got[0])+len(got[1]) == len(from)
		})
		for _, g := range got {
			for _, d := range g {
				if d.Args[0] != round {
					t.Fatalf("round %d: got %+v", round, d)
				}
			}
		}
	}
	send(1, a, b)
	hosts := map[HostID]net.HardwareAddr{hostA: n.a.link.HardwareAddr(), hostB: n.b.link.HardwareAddr()}
	if err := n.b.eng.SetHosts(hostB, map[HostID]net.HardwareAddr{hostB: hosts[hostB]}); err != nil {
		t.Fatal(err)
	}
	if err := n.b.eng.SetHosts(hostB, hosts); err != nil {
		t.Fatal(err)
	}
	// B's first message to A is a new incarnation's, which A takes for
	// a restart of B (a message of A's in flight to B would come back).
	send(2, b)
	send(3, a, b)
	send(4, a, b)
	if sa, sb := n.a.eng.Stats(), n.b.eng.Stats(); sa.AuthFailed != 0 || sb.AuthFailed != 0 {
		t.Errorf("envelopes refused: A %+v, B %+v", sa, sb)
	}
}
