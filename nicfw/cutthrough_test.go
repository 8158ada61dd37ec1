package nicfw

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/xam-project/xam/afxdp/memlink"
	"github.com/xam-project/xam/nicfw/endpoint"
)

// TestEngineCutThrough: a slow writer fills a cut-through bulk message
// segment by segment, pausing between segments while both engines run.
// The receiver holds the first segment before the rest is written (the
// message is on its way while it is being written), and at no point holds
// a byte the writer had not published: the bytes not yet written read
// 0xEE at the sender, and none of them ever reaches the receiver. With
// and without loss, duplication and reordering.
func TestEngineCutThrough(t *testing.T) {
	for _, faults := range []memlink.Options{{}, {Loss: 0.1, Duplicate: 0.05, Reorder: 0.05, Seed: 3}} {
		t.Run(fmt.Sprintf("loss=%v", faults.Loss), func(t *testing.T) {
			n := newEngNet(t, faults, EngineConfig{Window: 4})
			a1, _, b1, _ := twoNets(t, n, endpoint.Config{StagingSize: 64 << 10}, endpoint.Config{StagingSize: 64 << 10})
			const at, size = 64, 20_000
			data := pattern(size, 0x31)
			src, dst := a1.Staging()[at:at+size], b1.Staging()[:size]
			for i := range src {
				src[i] = 0xEE // not written yet
			}
			for i := range dst {
				dst[i] = 0x55 // nothing received yet
			}
			checkDst := func(published int) {
				t.Helper()
				for i, c := range dst {
					if c != 0x55 && (i >= published || c != data[i]) {
						t.Fatalf("with %d bytes published the receiver holds %#x at %d", published, c, i)
					}
				}
			}
			if err := a1.Publish(at, 0); err != nil {
				t.Fatal(err)
			}
			written := copy(src, data[:32])
			if err := a1.Publish(at, uint32(written)); err != nil {
				t.Fatal(err)
			}
			d := bulk(1, 5, at, 0, size, 77)
			d.Flags = endpoint.CutThrough
			if err := a1.Send(endpoint.RequestSend, &d); err != nil {
				t.Fatal(err)
			}
			// The first segment travels on its own.
			n.run(t, 10_000, func() bool { return bytes.Equal(dst[:32], data[:32]) })
			checkDst(written)
			for seg := 32; written < size; seg *= 2 {
				for range 50 { // a pause: the engines run, the writer does not
					n.poll(t)
				}
				checkDst(written)
				written += copy(src[written:], data[written:min(size, written+seg)])
				if err := a1.Publish(at, uint32(written)); err != nil {
					t.Fatal(err)
				}
			}
			var got endpoint.Descriptor
			n.run(t, 100_000, func() bool {
				ok, err := b1.Receive(endpoint.RequestReceive, &got)
				if err != nil {
					t.Fatal(err)
				}
				return ok
			})
			if got.Length != size || got.Args[0] != 77 || !bytes.Equal(dst, data) {
				t.Fatalf("received %+v; bytes equal: %v", got, bytes.Equal(dst, data))
			}
			if st := n.b.eng.Stats(); st.Delivered != 1 {
				t.Errorf("receiver %+v", st)
			}
			// The sender's engine counts the request done once its last
			// chunk is acknowledged: its bytes are the application's.
			n.run(t, 100_000, func() bool { return a1.Done() == 1 })
		})
	}
}

// Cut-through is a bulk message's flag only, with its status register
// inside the staging area and aligned; anything else is refused and
// counted.
func TestEngineCutThroughRefused(t *testing.T) {
	n := newEngNet(t, memlink.Options{}, EngineConfig{})
	a1, _, _, _ := twoNets(t, n, endpoint.Config{}, endpoint.Config{})
	bad := []endpoint.Descriptor{
		{Class: endpoint.ClassShort, Dest: 1, Flags: endpoint.CutThrough},
		{Class: endpoint.ClassMedium, Dest: 1, Length: 10, Offset: 64, Flags: endpoint.CutThrough},
		bulk(1, 5, 0, 0, 100),  // no room for the status register
		bulk(1, 5, 66, 0, 100), // not aligned
		bulk(1, 5, 64, 0, 100), // an unknown flag
	}
	for i := range bad {
		if bad[i].Class == endpoint.ClassBulk {
			bad[i].Flags = endpoint.CutThrough
		}
	}
	bad[4].Flags = 2
	for i := range bad {
		if err := a1.Send(endpoint.RequestSend, &bad[i]); err != nil {
			t.Fatal(err)
		}
	}
	n.run(t, 1000, func() bool { _, taken := a1.Progress(endpoint.RequestSend); return taken == uint32(len(bad)) })
	if got := n.a.eng.eps[1].mem.Stats().Refused[endpoint.RefusedFlags]; got != uint64(len(bad)) {
		t.Errorf("RefusedFlags counted %d, want %d", got, len(bad))
	}
	if err := a1.Publish(2, 1); err == nil {
		t.Error("Publish at offset 2: no error")
	}
}
