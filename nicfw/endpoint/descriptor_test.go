package endpoint

import (
	"bytes"
	"math/rand/v2"
	"runtime"
	"testing"
)

// The whole-struct copy of encode and decode (descWhole) writes and reads
// exactly the documented layout that the field-by-field code does: the
// same bytes from the same descriptor, reserved byte 0, and the same
// descriptor back from any 96 bytes.
func TestDescriptorWholeCopy(t *testing.T) {
	if (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64") && !descWhole {
		t.Fatal("descWhole is false: Descriptor's layout is not the ring's, encode and decode go field by field")
	}
	buf := make([]byte, 2*descSize+8)
	aligned := buf[:descSize]
	if wholeSlot(aligned) == nil && descWhole {
		t.Fatal("an 8-aligned slot is not taken whole")
	}
	odd := buf[descSize+1 : 2*descSize+1] // misaligned: field by field
	if wholeSlot(odd) != nil {
		t.Fatal("a misaligned slot is taken whole")
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 1000 {
		d := Descriptor{
			Class: Class(r.Uint32()), NArgs: uint8(r.Uint32()), Flags: Flag(r.Uint32()),
			Dest: r.Uint32(), Handler: r.Uint32(), Offset: r.Uint32(), Length: r.Uint32(),
			RemoteOffset: r.Uint32(), Tag: r.Uint64(),
		}
		for j := range d.Args {
			d.Args[j] = r.Uint64()
		}
		aligned[3], odd[3] = 0xff, 0xff
		d.encode(aligned)
		d.encode(odd)
		if !bytes.Equal(aligned, odd) {
			t.Fatalf("descriptor %d: whole %x, field by field %x", i, aligned, odd)
		}
		if aligned[3] != 0 {
			t.Fatalf("descriptor %d: reserved byte %#x", i, aligned[3])
		}
		var a, b Descriptor
		a.decode(aligned)
		b.decode(odd)
		if a != d || b != d {
			t.Fatalf("descriptor %d: %+v decodes to %+v whole, %+v field by field", i, d, a, b)
		}
		// Any bytes: both read the same descriptor.
		for j := range aligned {
			aligned[j] = byte(r.Uint32())
		}
		copy(odd, aligned)
		a.decode(aligned)
		b.decode(odd)
		if a != b {
			t.Fatalf("bytes %x: %+v whole, %+v field by field", aligned, a, b)
		}
	}
}
