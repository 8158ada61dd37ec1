package transport

import (
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
)

// The compact lane (lane.go) takes only the steady state: a cell it
// declines goes the general way, which counts it as before, and nothing of
// it takes effect twice. After a request and its reply (the reply taken by
// the lane), A is sent a copy of that reply (a retransmission: a
// duplicate), a cell whose acknowledgement lies outside its window (a
// forgery), one that names another source epoch, and one that follows on
// correctly (the lane's).
func TestLaneDeclines(t *testing.T) {
	p := newPair(t, memlink.Options{}, Config{Channels: 2})
	pb := p.b.tr.Peer(hostA) // B's frames to A name these epochs
	if err := p.a.tr.Send(hostB, payload(0, CompactPayload), 0); err != nil {
		t.Fatal(err)
	}
	p.poll(t) // B takes A's request, unacknowledged yet
	reply := new(header)
	body := payload(0, CompactPayload)
	reply.put(typeData, 0, 0, 0, len(body), pb.srcOut, pb.dstOut)
	inject := func(c []byte) Stats { t.Helper(); injectCell(t, p, c); return p.a.tr.Stats() }

	st := inject(compactAckedCell(reply, body, 0, 0))
	if st.LaneCells != 1 || st.Delivered != 1 || st.Acked != 1 {
		t.Fatalf("the reply: %+v", st)
	}
	st = inject(compactAckedCell(reply, body, 0, 0))
	if st.LaneCells != 1 || st.Delivered != 1 || st.Duplicates != 1 || st.Acked != 1 || st.StaleAcks != 1 {
		t.Fatalf("its copy: %+v", st)
	}
	next := new(header)
	next.put(typeData, 0, 1, 0, len(body), pb.srcOut, pb.dstOut)
	st = inject(compactAckedCell(next, body, 0, 9)) // A never sent message 9
	if st.LaneCells != 1 || st.Delivered != 1 || st.ForgedAcks != 1 {
		t.Fatalf("an acknowledgement out of its window: %+v", st)
	}
	// The forgery renewed the destination epoch B names (epochs.go):
	// what follows names the new one, and an old source epoch is stale.
	pa := p.a.tr.Peer(hostB)
	other := new(header)
	other.put(typeData, 0, 1, 0, len(body), pb.srcOut+1, pa.dstIn)
	st = inject(compactAckedCell(other, body, 0, 0))
	if st.LaneCells != 1 || st.Delivered != 1 {
		t.Fatalf("another source epoch: %+v", st)
	}
	next.setEpochs(pb.srcOut, pa.dstIn)
	st = inject(compactAckedCell(next, body, 0, 0))
	if st.LaneCells != 2 || st.Delivered != 2 || st.BadFrames != 0 {
		t.Fatalf("the next reply: %+v", st)
	}
}
