package cells

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"
)

// TestFrameWriter writes frames with their directions and the drop count,
// and reads them back with gopacket's pcapng reader, an implementation of
// the format other than ours.
func TestFrameWriter(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewFrameWriter(&buf, "p1")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1700000000, 123456789)
	frames := [][]byte{bytes.Repeat([]byte{1}, 71), bytes.Repeat([]byte{2}, 1502), {3, 3, 3}}
	dirs := []Direction{DirectionInbound, DirectionOutbound, DirectionUnknown}
	for i, f := range frames {
		if err := w.WriteFrame(t0.Add(time.Duration(i)*time.Microsecond), f, dirs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(t0.Add(time.Second), 7); err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewNgReader(&buf, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != 1 {
		t.Errorf("link type %v", r.LinkType())
	}
	for i, want := range frames {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if !bytes.Equal(data, want) || ci.Length != len(want) || !ci.Timestamp.Equal(t0.Add(time.Duration(i)*time.Microsecond)) {
			t.Errorf("frame %d: %d bytes at %v", i, len(data), ci.Timestamp)
		}
	}
	if _, _, err := r.ReadPacketData(); err != io.EOF {
		t.Errorf("after the frames: %v, want EOF", err)
	}
	if err := w.WriteFrame(t0, frames[0], DirectionInbound); err == nil {
		t.Error("a write after Close succeeded")
	}
}
