package datapath

import (
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
	"github.com/xam-project/xam/cells"
	"github.com/xam-project/xam/internal/netnstest"
	"github.com/xam-project/xam/loader"
)

// TestOpenQueues: a veth pair of 4 queues, whose sender transmits on
// every queue, so that B receives on every queue. With a socket on queue
// 0 only, B's program finds no socket for the frames of the other queues
// (RedirectMiss, and per queue QueueCounters) and they never arrive;
// opened on all four (OpenQueues), B receives every frame, once, through
// its one Link.
func TestOpenQueues(t *testing.T) {
	const queues, perQueue = 4, 200
	p := netnstest.NewVethPair(t, netnstest.WithQueues(queues))
	all := []int{0, 1, 2, 3}
	var senders []*afxdp.Socket
	if err := p.A.Do(func() (err error) {
		senders, err = afxdp.OpenShared(p.A.Index, all, afxdp.Options{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range senders {
			s.Close()
		}
	}()
	// send sends perQueue numbered frames from each of A's queues.
	send := func() {
		t.Helper()
		c := make(cells.Cell, cells.CellSize)
		if err := c.Encode(cells.UNI, cells.Fields{VCI: 32, PTI: cells.PTIEndOfMessage}); err != nil {
			t.Fatal(err)
		}
		f := cells.Framer{Dst: p.B.MAC, Src: p.A.MAC, MTU: 1500}
		for q, s := range senders {
			for i := range perQueue {
				binary.BigEndian.PutUint32(c[cells.HeaderSize:], uint32(q*perQueue+i))
				frame, err := f.Append(nil, c)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := s.Send([][]byte{frame}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// receive returns the numbers of the frames l receives until none
	// came for a while.
	receive := func(l afxdp.Link) []int {
		var got []int
		rx := make([][]byte, 64)
		for idle := time.Now(); time.Since(idle) < 500*time.Millisecond; {
			n, err := l.Recv(rx)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range rx[:n] {
				got = append(got, int(binary.BigEndian.Uint32(f[cells.EthernetHeaderSize+cells.FrameHeaderSize+cells.HeaderSize:])))
			}
			if n > 0 {
				idle = time.Now()
			} else if _, err := l.Wait(10 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(got)
		return got
	}

	one, err := Open(at(p.B), loader.ModeGeneric, 0)
	if err != nil {
		t.Fatal(err)
	}
	send()
	got := receive(one.Link())
	c, err := one.Prog.Counters()
	if err != nil {
		t.Fatal(err)
	}
	qs, err := one.Prog.QueueCounters()
	if err != nil {
		t.Fatal(err)
	}
	one.Close()
	if len(got) >= queues*perQueue || c.RedirectMiss == 0 {
		t.Fatalf("one socket on queue 0 received %d of %d frames, %d found no socket: the frames did not spread over the queues", len(got), queues*perQueue, c.RedirectMiss)
	}
	// The program says on which queues they landed, and which had no socket.
	var frames, missed uint64
	for _, q := range qs {
		frames += q.Frames
		missed += q.NoSocket
		if q.Queue == 0 && q.NoSocket != 0 || q.Queue != 0 && q.NoSocket != q.Frames {
			t.Errorf("queue %d: %d frames, %d without a socket (the socket is on queue 0)", q.Queue, q.Frames, q.NoSocket)
		}
	}
	if frames != queues*perQueue || missed != c.RedirectMiss || len(qs) < 2 {
		t.Errorf("per queue %+v: %d frames, %d missed; want %d and %d", qs, frames, missed, queues*perQueue, c.RedirectMiss)
	}

	b, err := OpenQueues(at(p.B), loader.ModeGeneric, all)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Queues == nil || len(b.Queues.Sockets()) != queues {
		t.Fatalf("OpenQueues: %+v", b)
	}
	send()
	got = receive(b.Link())
	want := make([]int, queues*perQueue)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(got, want) {
		t.Errorf("received %d frames, want each of %d once", len(got), len(want))
	}
	if c, err := b.Prog.Counters(); err != nil || c.RedirectMiss != 0 {
		t.Errorf("with a socket on every queue: %+v, %v", c, err)
	}
	if qs, err := b.Prog.QueueCounters(); err != nil || len(qs) < 2 {
		t.Errorf("with a socket on every queue, per queue: %+v, %v", qs, err)
	} else {
		for _, q := range qs {
			if q.NoSocket != 0 {
				t.Errorf("queue %d: %d frames without a socket", q.Queue, q.NoSocket)
			}
		}
	}
	t.Logf("one queue: %d received, %d without a socket; four queues: %d received", c.Received-c.RedirectMiss, c.RedirectMiss, len(got))
}
