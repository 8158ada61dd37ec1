//go:build linux

package afxdp

import (
	"bytes"
	"testing"
)

// gather joins a multi-buffer frame's descriptors, however many Recv
// calls they come in: nothing is returned before the last (a batch that
// ends without it leaves the frame pending), a frame with an invalid
// descriptor or longer than the MTU is dropped whole, and the next frame
// is not touched by either.
func TestGather(t *testing.T) {
	s := &Socket{mtu: 100, mb: true}
	part := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	expect := func(step string, f, wantF []byte, ok, wantOK bool) {
		t.Helper()
		if ok != wantOK || !bytes.Equal(f, wantF) || (wantF == nil) != (f == nil) {
			t.Fatalf("%s: %d bytes, ok %v; want %d bytes, ok %v", step, len(f), ok, len(wantF), wantOK)
		}
	}
	// A frame of three descriptors; the batch ends after the second.
	f, ok := s.gather(part(40, 1), true, true)
	expect("first of three", f, nil, ok, true)
	f, ok = s.gather(part(40, 2), true, true)
	expect("second of three, the batch's last", f, nil, ok, true)
	f, ok = s.gather(part(34, 3), true, false) // 114 bytes: MTU 100 and the Ethernet header
	expect("last of three", f, append(append(part(40, 1), part(40, 2)...), part(34, 3)...), ok, true)
	// An invalid descriptor in the middle drops the frame, and only it.
	s.gather(part(10, 4), true, true)
	s.gather(nil, false, true)
	f, ok = s.gather(part(10, 5), true, false)
	expect("frame with an invalid descriptor", f, nil, ok, false)
	f, ok = s.gather(part(20, 6), true, false)
	expect("the next frame", f, part(20, 6), ok, true)
	// Longer than the MTU: dropped whole, never truncated.
	s.gather(part(100, 7), true, true)
	f, ok = s.gather(part(15, 8), true, false)
	expect("frame past the MTU", f, nil, ok, false)
	f, ok = s.gather(part(5, 9), true, false)
	expect("the frame after it", f, part(5, 9), ok, true)
}
