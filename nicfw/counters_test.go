//go:build linux

package nicfw

import (
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// infoOf returns endpoint id's entry in e's EndpointList.
func infoOf(t *testing.T, e *Engine, id EndpointID) EndpointInfo {
	t.Helper()
	for _, i := range e.EndpointList() {
		if i.ID == id {
			return i
		}
	}
	t.Fatalf("endpoint %d not listed", id)
	return EndpointInfo{}
}

// peerOf returns host h's entry in e's PeerList.
func peerOf(t *testing.T, e *Engine, h HostID) PeerInfo {
	t.Helper()
	for _, p := range e.PeerList() {
		if p.Host == h {
			return p
		}
	}
	t.Fatalf("host %d not listed", h)
	return PeerInfo{}
}

// TestEngineCounters: the engine counts each endpoint's messages and data
// bytes sent and received (a bulk message once, its bytes whole), its
// returns by reason, and the descriptors waiting in its queues; and per
// peer host, the transport's messages and bytes both ways (what one host
// sent, the other delivered) and the returns between the hosts by reason.
func TestEngineCounters(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	a1, _, b1, _ := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	for _, d := range []endpoint.Descriptor{
		medium(1, 1, 0, 10), medium(1, 1, 100, 20), medium(1, 1, 200, 30), // to B1
		short(1, 1, 7), short(1, 1), // to B1
		short(2, 1), short(3, 1), // B2 (another tag) and B9 (none): returned
		medium(0, 1, 300, 5),             // to A1 itself
		bulk(1, 1, 4096, 0, 20000, 1, 2), // to B1, in 3 chunks
	} {
		mustSend(t, a1, endpoint.RequestSend, d)
	}
	n.run(t, 1000, func() bool {
		return infoOf(t, n.a.eng, 1).Queued[endpoint.ReplyReceive] >= 2 && infoOf(t, n.b.eng, 1).Messages.Received == 6
	})
	for range 10 { // the last acknowledgements
		n.poll(t)
	}

	a, b := infoOf(t, n.a.eng, 1), infoOf(t, n.b.eng, 1)
	var wantRet [endpoint.NumReasons]uint64
	wantRet[endpoint.ReasonBadTag], wantRet[endpoint.ReasonNoEndpoint] = 1, 1
	if m := a.Messages; m.Sent != 9 || m.SentBytes != 10+20+30+5+20000 || m.Received != 1 || m.ReceivedBytes != 5 || m.Returned != wantRet {
		t.Errorf("A1's counters %+v: want 9 messages sent, 20065 bytes, 1 received (5 bytes), returned %v", m, wantRet)
	}
	if m := b.Messages; m.Sent != 0 || m.Received != 6 || m.ReceivedBytes != 20060 {
		t.Errorf("B1's counters %+v: want 6 received, 20060 bytes", m)
	}
	if b.Queued[endpoint.RequestReceive] != 6 || a.Queued[endpoint.ReplyReceive] != 2 || a.Queued[endpoint.RequestReceive] != 1 || a.Queued[endpoint.RequestSend] != 0 {
		t.Errorf("queued: A1 %v, B1 %v; want 6 in B1's request receive queue, 1 and 2 in A1's receive queues", a.Queued, b.Queued)
	}
	var got []endpoint.Descriptor
	drain(t, b1, endpoint.RequestReceive, &got)
	if q := infoOf(t, n.b.eng, 1).Queued; q != [4]uint32{} {
		t.Errorf("B1 queued %v once drained, want none", q)
	}

	pa, pb := peerOf(t, n.a.eng, hostB), peerOf(t, n.b.eng, hostA)
	if pa.Returned != wantRet || pb.ReturnsSent != wantRet || pa.ReturnsSent != [endpoint.NumReasons]uint64{} {
		t.Errorf("returns: A's of host B %v, B's sent to host A %v; want %v", pa.Returned, pb.ReturnsSent, wantRet)
	}
	ta, tb := pa.Transport, pb.Transport
	if ta.Sent != 3+2+2+3 || ta.Sent != tb.Delivered || ta.SentBytes != tb.DeliveredBytes || ta.SentBytes < 20060 ||
		tb.Sent != 2 || tb.Sent != ta.Delivered || tb.SentBytes != ta.DeliveredBytes || ta.InFlight != 0 {
		t.Errorf("transport: A to B %+v, B to A %+v: what one sent, the other delivered", ta, tb)
	}
	if ts := n.a.eng.TransportStats(); ts.Sent != ta.Sent || ts.Delivered != ta.Delivered {
		t.Errorf("A's transport %+v, its only peer %+v", ts, ta)
	}
	if s := n.a.eng.Stats(); s.Polls == 0 || s.BusyPolls == 0 || s.BusyPolls >= s.Polls {
		t.Errorf("polls %d, busy %d: want some of each", s.Polls, s.BusyPolls)
	}
}

// TestEngineCountersLoss: under loss, a peer's retransmissions are the
// transport's, and the messages still count once at each end.
func TestEngineCountersLoss(t *testing.T) {
	n := newEngNet(t, memlink.Options{Loss: 0.2, Seed: 3}, EngineConfig{})
	a1, _, b1, _ := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	const count = 40
	sent := 0
	var got []endpoint.Descriptor
	n.run(t, 100000, func() bool {
		if sent < count && a1.Send(endpoint.RequestSend, &endpoint.Descriptor{Class: endpoint.ClassMedium, Dest: 1, Handler: 1, Length: 100}) == nil {
			sent++
		}
		drain(t, b1, endpoint.RequestReceive, &got)
		return len(got) == count
	})
	pa := peerOf(t, n.a.eng, hostB)
	if ts := n.a.eng.TransportStats(); pa.Transport.Retransmits == 0 || pa.Transport.Retransmits != ts.Retransmits {
		t.Errorf("A's retransmissions to B %d, the transport's %d: want the same, above 0", pa.Transport.Retransmits, ts.Retransmits)
	}
	if a, b := infoOf(t, n.a.eng, 1).Messages, infoOf(t, n.b.eng, 1).Messages; a.Sent != count || a.SentBytes != 100*count || b.Received != count || b.ReceivedBytes != 100*count {
		t.Errorf("A1 %+v, B1 %+v: want %d messages of 100 bytes each way", a, b, count)
	}
}
