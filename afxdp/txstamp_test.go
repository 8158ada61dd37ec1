//go:build linux

package afxdp_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/xam-project/xam/afxdp"
)

// TestTxTimestamps: with Options.TxTimestamps every frame carries TX
// metadata asking for its transmit stamp; in copy mode (a veth) the kernel
// writes its clock (CLOCK_TAI) there when the frame completes, TxStamp
// reads it, and the frames arrive intact, the metadata not in them.
func TestTxTimestamps(t *testing.T) {
	p := newSocketPair(t, afxdp.Options{TxTimestamps: true})
	if i := p.a.Info(); !i.TxMetadata || i.TxMetadataErr != nil {
		t.Fatalf("TX metadata: %v, %v", i.TxMetadata, i.TxMetadataErr)
	}
	buf := make([]byte, 1514)
	bufs := make([][]byte, 64)
	var last uint64
	for seq := range uint32(20) {
		f := makeFrame(buf, p.veth.B.MAC, p.veth.A.MAC, seq, 60+int(seq)*50)
		before := afxdp.TAINow()
		if _, err := p.a.Send([][]byte{f}); err != nil {
			t.Fatal(err)
		}
		var got []byte
		for deadline := time.Now().Add(10 * time.Second); got == nil; {
			n, err := p.b.Recv(bufs)
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				got = bufs[0]
			} else if time.Now().After(deadline) {
				t.Fatalf("frame %d did not arrive", seq)
			}
		}
		if !bytes.Equal(got, f) {
			t.Fatalf("frame %d arrived as % x", seq, got[:min(len(got), 32)])
		}
		ns, stamped := p.a.TxStamp()
		if stamped != uint64(seq+1) || ns < before || ns > afxdp.TAINow() || ns <= last {
			t.Fatalf("frame %d: stamp %d (%d stamped), sent after %d, now %d, last %d", seq, ns, stamped, before, afxdp.TAINow(), last)
		}
		last = ns
	}
	// Without the option: no metadata, no stamps.
	q := newSocketPair(t, afxdp.Options{})
	if q.a.Info().TxMetadata {
		t.Error("TX metadata without TxTimestamps")
	}
	if _, err := q.a.Send([][]byte{makeFrame(buf, q.veth.B.MAC, q.veth.A.MAC, 1, 100)}); err != nil {
		t.Fatal(err)
	}
	if ns, n := q.a.TxStamp(); ns != 0 || n != 0 {
		t.Errorf("stamps without TxTimestamps: %d, %d", ns, n)
	}
}

// TestTxTimestampsRefused: TX stamps with multi-buffer frames are refused.
func TestTxTimestampsRefused(t *testing.T) {
	p := newSocketPair(t, afxdp.Options{})
	err := p.veth.A.Do(func() error {
		s, err := afxdp.Open(p.veth.A.Index, afxdp.Options{TxTimestamps: true, MultiBuffer: true, FrameSize: 4096, Queue: 1})
		if err == nil {
			s.Close()
		}
		return err
	})
	if !errors.Is(err, afxdp.ErrNotSupported) {
		t.Errorf("TX stamps with multi-buffer frames: %v", err)
	}
}
